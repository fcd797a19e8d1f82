//! A CPU model of the GEMV ring's protocol (megakernel/ring.cu): one producer and 8 or 16 (RING_CWARPS)
//! consumer warps
//! over D slots, each slot with a `full` mbarrier (one arrival, the producer's, plus its copies' bytes)
//! and an `empty` mbarrier (one arrival per consumer warp), waited on by phase parity as the hardware
//! does it: `try_wait.parity(p)` succeeds when the barrier's completed-phase count has the other parity
//! than p (so a waiter two phases behind would block: the hazard the protocol must never create).
//! The producer issues items in order: the first min(D, first unit's items) before it waits for
//! anything (RING_EARLY), every later item t after `empty[t % D]` with parity (t / D - 1) & 1, then the
//! end marker; its copies land at a random later time. Every consumer takes item t after `full[t % D]`
//! with parity (t / D) & 1, reads the slot's record and releases it. Random interleavings of every
//! actor, many trials: no deadlock, every consumer reads every item's own record in order, and no
//! slot is refilled before every consumer released it. Negative controls: the producer waiting with
//! the consumers' parity, or not waiting at all, is caught.

/// SplitMix64: a small deterministic generator for the interleavings.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Bug {
    None,
    ProducerParity,
    NoEmptyWait,
}

/// An mbarrier: arrivals pending in the current phase, bytes pending, completed phases.
#[derive(Clone, Copy)]
struct Bar {
    count: u32,
    pending: u32,
    tx: u32,
    done: u64,
}
impl Bar {
    fn new(count: u32) -> Self {
        Bar { count, pending: count, tx: 0, done: 0 }
    }
    fn try_wait(&self, parity: u64) -> bool {
        self.done & 1 != parity
    }
    fn settle(&mut self) {
        if self.pending == 0 && self.tx == 0 {
            self.done += 1;
            self.pending = self.count;
        }
    }
    /// False for an arrival past the barrier's count (a protocol error).
    fn arrive(&mut self) -> bool {
        if self.pending == 0 {
            return false;
        }
        self.pending -= 1;
        self.settle();
        true
    }
}

/// Runs one trial; Err describes the first violation.
fn trial(rng: &mut Rng, d: usize, items: usize, first_unit: usize, bug: Bug, warps: usize) -> Result<(), String> {
    let mut full = vec![Bar::new(1); d];
    let mut empty = vec![Bar::new(warps as u32); d];
    let mut record = vec![usize::MAX; d]; // the item whose record a slot holds (usize::MAX - 1: the end)
    let mut released = vec![0usize; items + 1]; // consumers done with each item
    let mut landing: Vec<usize> = Vec::new(); // slots whose copies are in flight
    let mut t = 0usize; // the producer's next item (items: the end marker)
    let mut early = true;
    let mut next = vec![0usize; warps];
    let end = usize::MAX - 1;
    let mut idle = 0;
    loop {
        if next.iter().all(|&n| n > items) && landing.is_empty() {
            return Ok(());
        }
        if idle > 10_000 {
            return Err(format!("deadlock: producer at {t}, consumers at {next:?}"));
        }
        // 0: the producer, 1: a landing, 2..: a consumer.
        let who = rng.below(2 + warps as u64) as usize;
        let progressed = match who {
            0 if t <= items => {
                let s = t % d;
                let free = if early {
                    t < d && t < first_unit
                } else if t < d {
                    true
                } else {
                    match bug {
                        Bug::None => empty[s].try_wait(((t / d - 1) & 1) as u64),
                        Bug::ProducerParity => empty[s].try_wait(((t / d) & 1) as u64),
                        Bug::NoEmptyWait => true,
                    }
                };
                if early && !free {
                    early = false; // then griddepcontrol.wait, the ticket, the main loop
                    true
                } else if free {
                    if t >= d && released[t - d] < warps {
                        return Err(format!("slot {s} refilled with item {t} before item {} was released", t - d));
                    }
                    record[s] = if t == items { end } else { t };
                    if t < items {
                        full[s].tx += 1; // the copies' bytes (expect_tx), then the producer's arrival
                        landing.push(s);
                    }
                    if !full[s].arrive() {
                        return Err(format!("a second arrival on full[{s}] in one phase"));
                    }
                    t += 1;
                    true
                } else {
                    false
                }
            }
            1 if !landing.is_empty() => {
                let i = rng.below(landing.len() as u64) as usize;
                let s = landing.remove(i);
                full[s].tx -= 1;
                full[s].settle();
                true
            }
            w if w >= 2 => {
                let w = w - 2;
                let n = next[w];
                if n > items {
                    false
                } else if full[n % d].try_wait(((n / d) & 1) as u64) {
                    let want = if n == items { end } else { n };
                    if record[n % d] != want {
                        return Err(format!("consumer {w} read slot {} as item {} for item {n}", n % d, record[n % d]));
                    }
                    if n < items {
                        released[n] += 1;
                        if !empty[n % d].arrive() {
                            return Err(format!("an arrival past empty[{}]'s count", n % d));
                        }
                    }
                    next[w] = n + 1;
                    true
                } else {
                    false
                }
            }
            _ => false,
        };
        idle = if progressed { 0 } else { idle + 1 };
    }
}

fn run_all(bug: Bug, trials: u64) -> Result<(), String> {
    let mut rng = Rng(0x5eed);
    for k in 0..trials {
        let d = 2 + rng.below(15) as usize;
        let items = rng.below(60) as usize;
        let first_unit = 1 + rng.below(20) as usize;
        let warps = if k % 2 == 0 { 8 } else { 16 };
        trial(&mut rng, d, items, first_unit, bug, warps)
            .map_err(|e| format!("trial {k} ({warps} warps, D {d}, {items} items): {e}"))?;
    }
    Ok(())
}

#[test]
fn the_ring_protocol_never_deadlocks_or_overwrites() {
    run_all(Bug::None, 3000).unwrap();
}

#[test]
fn the_ring_protocol_model_catches_a_wrong_parity_and_a_missing_wait() {
    let a = run_all(Bug::ProducerParity, 3000);
    assert!(a.is_err(), "the producer waiting with the consumers' parity passed");
    let b = run_all(Bug::NoEmptyWait, 3000);
    assert!(b.is_err(), "a producer that never waits passed");
    eprintln!("caught: {}\ncaught: {}", a.unwrap_err(), b.unwrap_err());
}
