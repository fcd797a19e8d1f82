//! The static validator: proves on the CPU, before any execution, that a program is safe to run.
//!
//! Rules (each error is one line naming the word and the rule):
//! 1. shape: opcode operands present and of the right kind, ids in range, units = row slices x k-parts (or chunk ranges),
//!    m_rows equal to the target's, split-K partial layouts consistent, counters in range; activation,
//!    scratch and control buffers one row per row m; GdnStep only at M = 1.
//! 2. bounds: every unit's reads and writes lie inside their buffers.
//! 3. units: the units of one word are unordered, so no unit writes what another unit of it touches.
//! 4. waits: a word waits for the full count of its counter (which producers it follows is then
//!    unambiguous), that count is reachable, and every producer comes earlier in program order (a
//!    persistent kernel runs words in order: a later producer would deadlock it).
//! 5. hazards: two words not ordered by the waits (transitively) never touch the same elements with
//!    at least one write.
//! 6. inputs: every element of an activation or scratch buffer a word reads was written by a word
//!    ordered before it in this step.
//! 7. reset: one `EndStep`, last, ordered after every other word; it resets every counter.

use std::collections::HashMap;

use super::access::{unit_accesses, Access};
use super::word_checks::{check_layer, check_shape, layer_of};
use super::{BufKind, Opcode, Program, Word, NO_COUNTER};
use crate::bail;
use crate::error::Result;

/// What a valid program looks like in numbers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    pub words: usize,
    pub units: u64,
    pub counters: u32,
}

pub(super) fn who(i: usize, w: &Word) -> String {
    format!("word {i} ({:?}, layer {})", w.opcode, w.layer)
}

/// Merged, sorted ranges of one word in one buffer.
#[derive(Default, Clone)]
struct Ranges {
    reads: Vec<(u64, u64)>,
    writes: Vec<(u64, u64)>,
}

fn merge(v: &mut Vec<(u64, u64)>) {
    v.sort();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(v.len());
    for &(lo, hi) in v.iter() {
        match out.last_mut() {
            Some(last) if lo <= last.1 => last.1 = last.1.max(hi),
            _ => out.push((lo, hi)),
        }
    }
    *v = out;
}

/// The first overlap of two sorted, merged range lists.
fn first_overlap(a: &[(u64, u64)], b: &[(u64, u64)]) -> Option<(u64, u64)> {
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        let (lo, hi) = (a[i].0.max(b[j].0), a[i].1.min(b[j].1));
        if lo < hi {
            return Some((lo, hi));
        }
        if a[i].1 <= b[j].1 {
            i += 1;
        } else {
            j += 1;
        }
    }
    None
}

/// The part of `need` not covered by `have` (both sorted and merged), if any.
fn uncovered(need: &[(u64, u64)], have: &[(u64, u64)]) -> Option<(u64, u64)> {
    for &(lo, hi) in need {
        let mut at = lo;
        for &(a, b) in have {
            if b <= at {
                continue;
            }
            if a > at {
                break;
            }
            at = b;
            if at >= hi {
                break;
            }
        }
        if at < hi {
            let end = have.iter().find(|(a, _)| *a > at).map(|(a, _)| (*a).min(hi)).unwrap_or(hi);
            return Some((at, end));
        }
    }
    None
}

/// Units are unordered: a unit's write may not meet another unit's read or write. Given every
/// (buffer, lo, hi, write, unit) access of one word, the first clash as (buffer, lo, earlier unit,
/// later unit). A sweep over ranges sorted by (buffer, start), keeping the ranges still open.
/// Two writes at different positions of one step (`Access::at_pos_row`) never clash.
fn first_unit_clash(acc: &mut [UnitAccess]) -> Option<(usize, u64, u32, u32)> {
    acc.sort_by_key(|a| (a.buf, a.lo));
    let mut open: Vec<&UnitAccess> = Vec::new(); // ranges still open
    let mut cur = usize::MAX;
    for a in acc.iter() {
        if a.buf != cur {
            open.clear();
            cur = a.buf;
        }
        open.retain(|o| o.hi > a.lo);
        let other_position = |o: &UnitAccess| matches!((o.at_pos_row, a.at_pos_row), (Some(x), Some(y)) if x != y);
        if let Some(o) = open.iter().find(|o| o.unit != a.unit && (o.write || a.write) && !other_position(o)) {
            return Some((a.buf, a.lo, o.unit, a.unit));
        }
        open.push(a);
    }
    None
}

/// One access of unit `unit` (check_units' sweep).
struct UnitAccess {
    buf: usize,
    lo: u64,
    hi: u64,
    write: bool,
    unit: u32,
    at_pos_row: Option<u32>,
}

/// Rules 2 and 3: bounds of every unit, and no overlap between the units of one word.
fn check_units(p: &Program, i: usize, w: &Word) -> Result<HashMap<usize, Ranges>> {
    let at = who(i, w);
    let mut per_buf: HashMap<usize, Ranges> = HashMap::new();
    let mut unit_acc: Vec<UnitAccess> = Vec::new();
    for u in 0..w.units {
        for Access { buf, lo, hi, write, row, at_pos_row } in unit_accesses(p, w, u) {
            let b = &p.buffers[buf];
            if b.kind == BufKind::Weight {
                continue;
            }
            if hi > b.elems() {
                bail!(
                    "{at}: bounds: unit {u} touches {}[{lo}, {hi}) but the buffer has {} elements",
                    b.name,
                    b.elems()
                );
            }
            // Row m's access lies inside row m (its view on the GPU, its vector in the interpreter:
            // past the row's columns it would reach the next row).
            if let Some(m) = row.filter(|&m| lo < m as u64 * b.cols || hi > (m as u64 + 1) * b.cols) {
                bail!(
                    "{at}: bounds: unit {u} touches {}[{lo}, {hi}), outside its row {m} of {} columns",
                    b.name,
                    b.cols
                );
            }
            let r = per_buf.entry(buf).or_default();
            if write {
                r.writes.push((lo, hi));
            } else {
                r.reads.push((lo, hi));
            }
            unit_acc.push(UnitAccess { buf, lo, hi, write, unit: u, at_pos_row });
        }
    }
    if let Some((buf, lo, v, u)) = first_unit_clash(&mut unit_acc) {
        bail!("{at}: units: units {v} and {u} both touch {}[{lo}, ..) and one writes it", p.buffers[buf].name);
    }
    for r in per_buf.values_mut() {
        merge(&mut r.reads);
        merge(&mut r.writes);
    }
    Ok(per_buf)
}

pub fn validate(p: &Program) -> Result<Summary> {
    p.target.check()?;
    if p.words.is_empty() {
        bail!("program: no words");
    }
    if p.words.len() > 1 << 16 || p.n_counters > 1 << 20 || p.buffers.len() >= crate::isa::NONE as usize {
        bail!(
            "program: {} words, {} counters, {} buffers: beyond the engine's caps",
            p.words.len(),
            p.n_counters,
            p.buffers.len()
        );
    }
    // M rows: every activation, scratch and control buffer holds one row per row m (the GPU runs an op
    // row by row on a view whose row-m buffers start m rows in).
    for b in &p.buffers {
        if b.kind.per_row() && b.rows != p.target.m_rows as u64 {
            bail!(
                "program: buffer {} ({:?}) has {} rows, the target's M is {}",
                b.name,
                b.kind,
                b.rows,
                p.target.m_rows
            );
        }
    }
    let last =
        p.buffers.iter().filter(|b| b.kind == BufKind::Weight).filter_map(|b| layer_of(&b.name)).max().unwrap_or(0);
    for (i, w) in p.words.iter().enumerate() {
        check_shape(p, i, w)?;
        check_layer(p, i, w, last)?;
    }
    // Rule 4: waits.
    let mut signallers: HashMap<u32, Vec<usize>> = HashMap::new();
    let mut total: HashMap<u32, u64> = HashMap::new();
    for (i, w) in p.words.iter().enumerate() {
        signallers.entry(w.signal).or_default().push(i);
        *total.entry(w.signal).or_default() += w.units as u64;
    }
    for (i, w) in p.words.iter().enumerate() {
        if w.wait == NO_COUNTER {
            continue;
        }
        let at = who(i, w);
        let have = total.get(&w.wait).copied().unwrap_or(0);
        if (w.wait_target as u64) > have {
            bail!("{at}: waits: counter {} must reach {} but its producers signal only {have}: never satisfied (deadlock)", w.wait, w.wait_target);
        }
        if (w.wait_target as u64) < have {
            bail!("{at}: waits: counter {} is waited for at {} of its {have} signals: which producers it follows is ambiguous", w.wait, w.wait_target);
        }
        let Some(producers) = signallers.get(&w.wait) else {
            bail!("{at}: waits: counter {} is signalled by no word (deadlock)", w.wait);
        };
        if let Some(&j) = producers.iter().find(|&&j| j >= i) {
            bail!("{at}: waits: counter {} is signalled by word {j}, not earlier in program order (deadlock in a persistent kernel)", w.wait);
        }
    }
    // Happens-before: ancestors as bitsets, built in program order (producers always come first).
    let n = p.words.len();
    let words_per = n.div_ceil(64);
    let mut anc = vec![0u64; n * words_per];
    for (i, w) in p.words.iter().enumerate() {
        if w.wait == NO_COUNTER {
            continue;
        }
        for &j in signallers.get(&w.wait).map(|v| v.as_slice()).unwrap_or(&[]) {
            anc[i * words_per + j / 64] |= 1 << (j % 64);
            for k in 0..words_per {
                anc[i * words_per + k] |= anc[j * words_per + k];
            }
        }
    }
    let before = |a: usize, b: usize| anc[b * words_per + a / 64] & (1 << (a % 64)) != 0;
    // Rule 7: reset.
    let ends: Vec<usize> = (0..n).filter(|&i| p.words[i].opcode == Opcode::EndStep).collect();
    if ends != [n - 1] {
        bail!("program: reset: needs exactly one EndStep as its last word (found at {ends:?} of {n}): counters are never reset between steps");
    }
    if let Some(i) = (0..n - 1).find(|&i| !before(i, n - 1)) {
        bail!(
            "{}: reset: not ordered before the EndStep, which resets the counters it may still use",
            who(i, &p.words[i])
        );
    }
    // Rules 2, 3, then 5 and 6.
    let mut by_buf: HashMap<usize, Vec<(usize, Ranges)>> = HashMap::new();
    for (i, w) in p.words.iter().enumerate() {
        for (buf, r) in check_units(p, i, w)? {
            by_buf.entry(buf).or_default().push((i, r));
        }
    }
    let mut bufs: Vec<_> = by_buf.into_iter().collect();
    bufs.sort_by_key(|(b, _)| *b);
    for (buf, list) in &bufs {
        let name = &p.buffers[*buf].name;
        for (x, (a, ra)) in list.iter().enumerate() {
            for (b, rb) in &list[x + 1..] {
                if before(*a, *b) {
                    continue;
                }
                let clash = first_overlap(&ra.writes, &rb.writes)
                    .or_else(|| first_overlap(&ra.writes, &rb.reads))
                    .or_else(|| first_overlap(&ra.reads, &rb.writes));
                if let Some((lo, hi)) = clash {
                    bail!(
                        "{}: hazards: unordered with word {a} on {name}[{lo}, {hi}) and one of them writes it",
                        who(*b, &p.words[*b])
                    );
                }
            }
        }
        if !matches!(p.buffers[*buf].kind, BufKind::Activation | BufKind::Scratch) {
            continue;
        }
        for (b, rb) in list {
            if rb.reads.is_empty() {
                continue;
            }
            let mut have: Vec<(u64, u64)> =
                list.iter().filter(|(a, _)| before(*a, *b)).flat_map(|(_, r)| r.writes.iter().copied()).collect();
            merge(&mut have);
            if let Some((lo, hi)) = uncovered(&rb.reads, &have) {
                bail!(
                    "{}: inputs: reads {name}[{lo}, {hi}) that no word ordered before it wrote in this step",
                    who(*b, &p.words[*b])
                );
            }
        }
    }
    Ok(Summary { words: n, units: p.words.iter().map(|w| w.units as u64).sum(), counters: p.n_counters })
}

#[cfg(test)]
mod tests {
    use super::{first_unit_clash, UnitAccess};

    /// The sweep over hand-made footprints: (buffer, lo, hi, write, unit), then a KV write's position row.
    fn clash(acc: &[(usize, u64, u64, bool, u32)], at: &[Option<u32>]) -> Option<(usize, u64, u32, u32)> {
        let mut v: Vec<UnitAccess> = acc
            .iter()
            .enumerate()
            .map(|(i, &(buf, lo, hi, write, unit))| UnitAccess {
                buf,
                lo,
                hi,
                write,
                unit,
                at_pos_row: at.get(i).copied().flatten(),
            })
            .collect();
        first_unit_clash(&mut v)
    }

    // The compiler never emits units that overlap (their spans are disjoint by construction), so
    // the sweep is tested here on hand-made footprints, each with a control that must pass.
    #[test]
    fn units_may_share_reads_but_not_a_write() {
        // Two units read the same range of buffer 0: fine.
        assert_eq!(clash(&[(0, 0, 10, false, 0), (0, 5, 15, false, 1)], &[]), None);
        // One unit reads and writes its own range: fine.
        assert_eq!(clash(&[(0, 0, 10, true, 0), (0, 0, 10, false, 0)], &[]), None);
        // Adjacent writes of two units: fine (ranges are half-open).
        assert_eq!(clash(&[(0, 10, 20, true, 1), (0, 0, 10, true, 0)], &[]), None);
        // The same range in two different buffers: fine.
        assert_eq!(clash(&[(0, 0, 10, true, 0), (1, 0, 10, true, 1)], &[]), None);
        // Unit 1 writes where unit 0 reads: a clash at element 5.
        assert_eq!(clash(&[(0, 5, 15, true, 1), (0, 0, 10, false, 0)], &[]), Some((0, 5, 0, 1)));
        // Unit 2 reads inside a long write of unit 0 that outlives unit 1's range.
        let acc = [(3, 0, 100, true, 0), (3, 0, 10, true, 0), (3, 50, 60, false, 2)];
        assert_eq!(clash(&acc, &[]), Some((3, 50, 0, 2)));
    }

    #[test]
    fn kv_writes_at_different_positions_of_a_step_do_not_clash() {
        // AttnKv's rows 0 and 1 (units 0 and 1) write the same head's columns at positions pos, pos + 1.
        let acc = [(2, 0, 256, true, 0), (2, 0, 256, true, 1)];
        assert_eq!(clash(&acc, &[Some(0), Some(1)]), None);
        // Controls: at the same position, or one of them at an unknown position, they clash.
        assert_eq!(clash(&acc, &[Some(1), Some(1)]), Some((2, 0, 0, 1)));
        assert_eq!(clash(&acc, &[Some(0), None]), Some((2, 0, 0, 1)));
    }
}
