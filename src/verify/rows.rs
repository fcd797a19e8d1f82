//! `mk gpu rows`: M-row verification steps on the GPU against one-row steps, bit for bit.
//!
//! A verification step feeds M tokens at positions pos .. pos + M in one graph replay or one
//! megakernel launch (the M = 1 program's ops, each unit running its rows in order on row views of
//! the buffers). Row m must be exactly what a one-row step at position pos + m computes: the check
//! feeds the same token walk through the M = 1 graph one token at a time and through the M-row
//! program on both paths, and compares every row's logits and greedy token and, at the end, every
//! state buffer (recurrent and conv states, KV caches), reporting the first difference. The negative
//! control swaps two tokens of one step: the comparison must catch it at that step. Rollback (issue
//! 27, item 5): rounds keeping 1 ..= M rows each (every accept count, then a mixed pattern on both
//! paths) against the one-row run, every kept row and, flushed at the end, every state buffer; its
//! negative control keeps the rejected rows' GDN updates. Then the time of a verification step against
//! M one-row steps, and the forced-acceptance rounds' ms per emitted token.
//!
//! Owns: the comparison and its report. Refuses: M outside 2..=8, a token count that is not a
//! multiple of every M.

use std::path::Path;

use crate::bail;
use crate::error::Result;
use crate::exec::gpu::GpuExec;
use crate::exec::gpu::{Defines, Gpu};
use crate::isa::{BufKind, Program};
use crate::model::checkpoint::Checkpoint;
use crate::model::upload::Upload;

/// The token fed at position i: a fixed pseudo-random walk over the vocabulary (tests/rows.rs's).
pub fn token(i: usize, vocab: usize) -> u32 {
    ((i as u64 * 2_654_435_761 + 9419) % vocab as u64) as u32
}

/// `unit_rows`: the M-row programs' GEMV unit rows (None: the compiler's default; one-row programs keep it).
fn program(ck: &Checkpoint, m: u32, max_context: u32, unit_rows: Option<u32>) -> Result<Program> {
    let mut t = crate::compiler::h200(m);
    t.max_context = max_context;
    if let (true, Some(u)) = (m > 1, unit_rows) {
        t.gemv_unit_rows = u;
    }
    crate::compiler::compile(&ck.config, "checkpoint", &t)
}

/// Every state buffer's bits, by name; a KV cache (a row a position) only below `positions`.
fn states(d: &GpuExec, positions: usize) -> Result<Vec<(String, Vec<u32>)>> {
    let p = d.program();
    let mut v = Vec::new();
    for (i, b) in p.buffers.iter().enumerate() {
        if b.kind == BufKind::State {
            let kv = b.name.starts_with("k_cache.") || b.name.starts_with("v_cache.");
            let n = if kv { positions as u64 * b.cols } else { b.elems() };
            v.push((b.name.clone(), d.read(i, n as usize)?.iter().map(|x| x.to_bits()).collect()));
        }
    }
    Ok(v)
}

/// The first state buffer of the one-row run that `got` lacks or holds other bits in (an M-row
/// program's kept rows, which the one-row program has none of, are not compared).
fn state_difference(got: &[(String, Vec<u32>)], want: &[(String, Vec<u32>)]) -> Option<String> {
    for (name, b) in want {
        let Some((_, a)) = got.iter().find(|(n, _)| n == name) else {
            return Some(format!("state {name}: the M-row program has none"));
        };
        if let Some(e) =
            a.iter().zip(b).position(|(x, y)| x != y).or((a.len() != b.len()).then_some(a.len().min(b.len())))
        {
            let f = |v: &[u32]| v.get(e).map_or(f32::NAN, |x| f32::from_bits(*x));
            return Some(format!("state {name} element {e}: {} vs {} (one-row)", f(a), f(b)));
        }
    }
    None
}

/// The one-row run: every position's logits bits and greedy token, the final states.
struct Want {
    logits: Vec<Vec<u32>>,
    next: Vec<u32>,
    states: Vec<(String, Vec<u32>)>,
}

/// Feeds `n` tokens M at a time; `swap`: exchange the first and last token of that step (the
/// negative control). Returns the first difference from `want`, or None.
fn compare(d: &mut GpuExec, want: &Want, n: usize, mega: bool, swap: Option<usize>) -> Result<Option<String>> {
    let m = d.program().target.m_rows as usize;
    let vocab = want.logits[0].len();
    d.reset()?;
    for s in 0..n / m {
        let mut toks: Vec<u32> = (s * m..(s + 1) * m).map(|i| token(i, vocab)).collect();
        if swap == Some(s) {
            toks.swap(0, m - 1);
        }
        let next = d.step_rows(&toks, mega)?;
        let logits = d.logits()?;
        for r in 0..m {
            let got = &logits[r * vocab..(r + 1) * vocab];
            if let Some(e) = got.iter().zip(&want.logits[s * m + r]).position(|(a, b)| a.to_bits() != *b) {
                return Ok(Some(format!(
                    "step {s} row {r} (position {}): logits element {e}: {} vs {} (one-row)",
                    s * m + r,
                    got[e],
                    f32::from_bits(want.logits[s * m + r][e])
                )));
            }
            if next[r] != want.next[s * m + r] {
                return Ok(Some(format!("step {s} row {r}: token {} vs {} (one-row)", next[r], want.next[s * m + r])));
            }
        }
    }
    // the last step's GDN updates are committed by the next step (the deferred commit): flush
    d.flush_rows(mega)?;
    Ok(state_difference(&states(d, n)?, &want.states))
}

/// Rollback (issue 27, item 5): rounds of M rows from position 0 to `n`, round s keeping the first
/// `keep(s)` rows (the walk's tokens; the rows past them other tokens, the rejected drafts), committed
/// with `commit_rows` (`negative`: `commit_rows_keeping_all`, the control). Every kept row's logits and
/// token against the one-row run's; at `n`, flushed, every state buffer (KV below `n`). Returns the
/// first difference (None: identical) and the rounds' mean ms per kept row (each round a step and its
/// commit, synchronised: the host reads the rows' tokens).
fn rollback(
    d: &mut GpuExec,
    want: &Want,
    n: usize,
    mega: bool,
    keep: impl Fn(usize) -> usize,
    negative: bool,
) -> Result<(Option<String>, f64)> {
    let m = d.program().target.m_rows as usize;
    let vocab = want.logits[0].len();
    d.reset()?;
    let (mut pos, mut s, mut ms) = (0, 0, 0.0);
    while pos < n {
        let kept = keep(s).clamp(1, m).min(n - pos);
        let toks: Vec<u32> =
            (0..m)
                .map(|r| {
                    if r < kept {
                        token(pos + r, vocab)
                    } else {
                        (token(pos + r, vocab) + 1 + r as u32) % vocab as u32
                    }
                })
                .collect();
        let t = std::time::Instant::now();
        let next = d.step_rows(&toks, mega)?;
        if negative {
            d.commit_rows_keeping_all(kept)?
        } else {
            d.commit_rows(kept)?
        };
        ms += t.elapsed().as_secs_f64() * 1e3;
        let logits = d.logits()?;
        for r in 0..kept {
            let got = &logits[r * vocab..(r + 1) * vocab];
            if let Some(e) = got.iter().zip(&want.logits[pos + r]).position(|(a, b)| a.to_bits() != *b) {
                let w = f32::from_bits(want.logits[pos + r][e]);
                let msg = format!(
                    "round {s} (position {pos}, keeping {kept}) row {r}: logits element {e}: {} vs {w} (one-row)",
                    got[e]
                );
                return Ok((Some(msg), 0.0));
            }
            if next[r] != want.next[pos + r] {
                let msg = format!("round {s} row {r}: token {} vs {} (one-row)", next[r], want.next[pos + r]);
                return Ok((Some(msg), 0.0));
            }
        }
        pos += kept;
        s += 1;
    }
    d.flush_rows(mega)?;
    Ok((state_difference(&states(d, n)?, &want.states).map(|e| format!("after {s} rounds: {e}")), ms / n as f64))
}

/// Each opcode's share of a step (microseconds, summed over its words; in first-appearance order).
fn opcode_shares(p: &Program, raw: &[u64]) -> Vec<(String, f64)> {
    let mut v: Vec<(String, f64)> = Vec::new();
    for w in crate::experiment::timeline::per_word(p, &crate::experiment::timeline::decode(raw)) {
        match v.iter_mut().find(|(o, _)| *o == w.opcode) {
            Some(e) => e.1 += w.span_us,
            None => v.push((w.opcode, w.span_us)),
        }
    }
    v
}

/// Per opcode, what its units did: words, units a word, the mean and the largest unit's work (ready to
/// done, us) and the mean wait (ticket to ready: the unit held its block waiting for its inputs). A word
/// whose share is large but whose units work briefly is waiting on the word before it, not slow itself.
fn opcode_units(p: &Program, raw: &[u64]) -> Vec<String> {
    let stamps = crate::experiment::timeline::decode(raw);
    let mut v: Vec<(String, usize, usize, f64, f64, f64)> = Vec::new();
    for s in &stamps {
        let op = format!("{:?}", p.words[s.word as usize].opcode);
        let work = s.done.saturating_sub(s.ready) as f64 / 1e3;
        let wait = s.ready.saturating_sub(s.ticket) as f64 / 1e3;
        match v.iter_mut().find(|e| e.0 == op) {
            Some(e) => {
                e.2 += 1;
                e.3 += work;
                e.4 = e.4.max(work);
                e.5 += wait;
            }
            None => v.push((op, 0, 1, work, work, wait)),
        }
    }
    for e in v.iter_mut() {
        e.1 = p.words.iter().filter(|w| format!("{:?}", w.opcode) == e.0).count();
    }
    v.iter()
        .map(|(op, words, units, work, max, wait)| {
            let n = *units as f64;
            format!(
                "{op:24} {words:>5} {:>8.0} {:>10.2} {:>10.2} {:>10.2}",
                n / (*words).max(1) as f64,
                work / n,
                max,
                wait / n
            )
        })
        .collect()
}

/// The `n` words with the largest shares of one step's timeline: a line each (index, opcode, layer,
/// rows, input width, units, k-parts, us), the costliest first.
fn top_words(p: &Program, raw: &[u64], n: usize) -> Vec<String> {
    let mut v = crate::experiment::timeline::per_word(p, &crate::experiment::timeline::decode(raw));
    v.sort_by(|a, b| b.span_us.total_cmp(&a.span_us));
    v.iter()
        .take(n)
        .map(|t| {
            let w = &p.words[t.word as usize];
            let k = w.op(crate::isa::slot::IN0).map_or(0, |b| p.buffers[b].cols);
            format!(
                "word {:>4} {:22} layer {:>2} rows {:>6} K {:>6} units {:>5} k-parts {:>2}: {:>7.1} us",
                t.word, t.opcode, w.layer, w.rows, k, w.units, w.k_parts, t.span_us
            )
        })
        .collect()
}

/// Mean ms of `f` over `reps` calls after one warm-up.
fn time(reps: usize, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    f()?;
    let t = std::time::Instant::now();
    for _ in 0..reps {
        f()?;
    }
    Ok(t.elapsed().as_secs_f64() * 1e3 / reps as f64)
}

#[allow(clippy::too_many_arguments)]
pub fn run(
    dir: &Path,
    ms: &[u32],
    n: usize,
    reps: usize,
    at: &[u32],
    unit_rows: Option<u32>,
    cache: &Path,
    defines: &Defines,
) -> Result<()> {
    if ms.is_empty() || ms.iter().any(|&m| !(2..=8).contains(&m) || n % m as usize != 0) || n == 0 {
        bail!("gpu rows: each M must be 2..=8 and divide --tokens ({n})");
    }
    let far = at.iter().copied().max().unwrap_or(0) as usize;
    if far > crate::isa::access::MAX_POSITIONS / 2 {
        bail!(
            "gpu rows: --at {far} is past the positions this check allocates ({})",
            crate::isa::access::MAX_POSITIONS / 2
        );
    }
    let ck = Checkpoint::open(dir)?;
    // Room for the check's tokens and the timing's steps (each timed step moves the position on), at
    // 0 and at each --at position.
    let max_ctx = (n.max(far) + 2 * 8 * (reps + 1)).div_ceil(256) as u32 * 256;
    let p1 = program(&ck, 1, max_ctx, None)?;
    let up = Upload::new(&ck)?;
    let mut d1 = GpuExec::new(Gpu::open()?, &p1, &up, cache, defines)?;
    let vocab = ck.config.vocab;
    d1.reset()?;
    let mut want = Want { logits: Vec::with_capacity(n), next: Vec::with_capacity(n), states: Vec::new() };
    for i in 0..n {
        want.next.push(d1.step(token(i, vocab), false, |_, _| Ok(()))?);
        want.logits.push(d1.logits()?.iter().map(|x| x.to_bits()).collect());
    }
    want.states = states(&d1, n)?;
    println!("one-row graph: {n} tokens from position 0 (crossing {} attention partitions)", n.div_ceil(256));
    d1.reset()?;
    let ms1 = time(reps, || d1.step(token(0, vocab), false, |_, _| Ok(())).map(|_| ()))?;
    d1.reset()?;
    // (the megakernel's: until 2026-12-03 this timed `step(.., eager = true)`, the word-by-word launches)
    let mk1 = time(reps, || d1.step_mega(token(0, vocab)).map(|_| ()))?;
    // the MTP drafter's step (issue 27: the draft cost; its full lm_head, h_in as it is: the time of a
    // step, not its values)
    // the full head, then the pruned head (item 2) of 32,768 rows holding 16,384 and 32,768 ids (every
    // seventh id: rows spread over the weight)
    let (mut draft, mut off_list) = (Vec::new(), 0);
    if ck.config.mtp_layers > 0 {
        let mut t = crate::compiler::h200(1);
        t.max_context = max_ctx;
        let cap = 32_768.min(vocab / 7 / 64 * 64);
        for listed in [None, Some(cap / 2), Some(cap)] {
            let input = crate::compiler::DraftInput::Own;
            let pd = match listed {
                None => crate::compiler::compile_drafter(&ck.config, "checkpoint-mtp", &t, input)?,
                Some(_) => crate::compiler::compile_drafter_pruned(&ck.config, "checkpoint-mtp", &t, input, cap)?,
            };
            let mut dd = GpuExec::new(Gpu::open()?, &pd, &up, cache, defines)?;
            if let Some(n) = listed {
                dd.set_head_rows(&(0..n as u32).map(|i| 7 * i).collect::<Vec<u32>>())?;
            }
            // every drafted token must be a listed one (an empty list drafts id 2^32 - 1: the timing of
            // a head that scored nothing, which once went unnoticed)
            let mut drafted = Vec::new();
            dd.reset()?;
            let g = time(reps, || dd.step(token(0, vocab), false, |_, _| Ok(())).map(|t| drafted.push(t)))?;
            dd.reset()?;
            let k = time(reps, || dd.step_mega(token(0, vocab)).map(|t| drafted.push(t)))?;
            let listed_ok = |t: u32| listed.map_or((t as usize) < vocab, |n| t % 7 == 0 && ((t / 7) as usize) < n);
            // (counted with the failed comparisons, so that a probe's timings still print: MK_LOADS_ONLY)
            if let Some(t) = drafted.iter().find(|&&t| !listed_ok(t)) {
                println!("the drafter ({listed:?} listed) drafted id {t}, off its head's rows: FAILED");
                off_list += 1;
            }
            let what =
                listed.map_or("the full lm_head".to_string(), |n| format!("a pruned head of {cap} rows, {n} listed"));
            draft.push((what, g, k, pd.words.len()));
        }
    }
    // each path's M-row step against its own one-row step (the verification step's cost in rows)
    let mut table = vec![format!(
        "{:>3} {:>14} {:>14} {:>14} {:>14}",
        "M", "graph ms/step", "mega ms/step", "graph vs 1 row", "mega vs 1 row"
    )];
    table.push(format!("{:>3} {:>14.3} {:>14.3} {:>14.3} {:>14.3}", 1, ms1, mk1, 1.0, 1.0));
    // where a step's time goes, per opcode (the megakernel's timeline: each word's share of the step)
    d1.reset()?;
    let (_, raw) = d1.step_mega_timeline(token(0, vocab))?;
    let mut shares = vec![(1, opcode_shares(&p1, &raw))];
    let top1 = top_words(&p1, &raw, 12);
    let mut units = vec![(1, opcode_units(&p1, &raw))];
    let mut top = (1, Vec::new());
    let mut bad = off_list;
    let mut rounds = Vec::new();
    let mut at_table = vec![format!(
        "{:>7} {:>3} {:>10} {:>10} {:>10} {:>10} {:>9} {:>9}",
        "pos", "M", "graph 1", "graph M", "mega 1", "mega M", "graph x", "mega x"
    )];
    for (i, &m) in ms.iter().enumerate() {
        let p = program(&ck, m, max_ctx, unit_rows)?;
        let mut d = GpuExec::new(Gpu::open()?, &p, &up, cache, defines)?;
        for (path, mega) in [("graph", false), ("megakernel", true)] {
            match compare(&mut d, &want, n, mega, None)? {
                None => {
                    println!("M = {m}, {path}: identical to one-row steps ({n} rows, every logit, token and state)")
                }
                Some(e) => {
                    bad += 1;
                    println!("M = {m}, {path}: DIFFERS: {e}");
                }
            }
        }
        if i == 0 {
            let s = (n / m as usize).min(2) - 1;
            match compare(&mut d, &want, n, false, Some(s))? {
                Some(e) if e.starts_with(&format!("step {s} ")) => {
                    println!("negative control (two tokens of step {s} swapped): caught: {e}")
                }
                other => {
                    bad += 1;
                    println!("negative control (two tokens of step {s} swapped): NOT caught at step {s}: {other:?}");
                }
            }
        }
        // rollback: every accept count j (each round keeping j + 1 rows) on the graph, a mixed pattern on
        // both paths; the negative control keeps the rejected rows' GDN updates
        let mu = m as usize;
        let (mut per_row, mut differ) = (Vec::new(), 0);
        for j in 0..mu {
            let (e, ms) = rollback(&mut d, &want, n, false, |_| j + 1, false)?;
            per_row.push(ms);
            if let Some(e) = e {
                differ += 1;
                println!("M = {m}, graph, rollback keeping {} rows a round: DIFFERS: {e}", j + 1);
            }
        }
        bad += differ;
        if differ == 0 {
            println!("M = {m}, graph: rollback keeping 1 ..= {m} rows a round: every kept row, and every state after {n} positions, identical to one-row steps");
        }
        let mixed = |s: usize| 1 + (s * 5 + s / 3) % mu;
        for (path, mega) in [("graph", false), ("megakernel", true)] {
            match rollback(&mut d, &want, n, mega, mixed, false)?.0 {
                None => println!("M = {m}, {path}: rollback with mixed accept counts: identical to one-row steps"),
                Some(e) => {
                    bad += 1;
                    println!("M = {m}, {path}: rollback with mixed accept counts: DIFFERS: {e}");
                }
            }
        }
        match rollback(&mut d, &want, n, false, mixed, true)?.0 {
            Some(e) => println!("negative control (rollback keeping the rejected rows' GDN updates): caught: {e}"),
            None => {
                bad += 1;
                println!("negative control (rollback keeping the rejected rows' GDN updates): NOT caught");
            }
        }
        rounds.push((m, per_row));
        let toks: Vec<u32> = (0..m as usize).map(|i| token(i, vocab)).collect();
        d.reset()?;
        let g = time(reps, || d.step_rows(&toks, false).map(|_| ()))?;
        d.reset()?;
        let k = time(reps, || d.step_rows(&toks, true).map(|_| ()))?;
        table.push(format!("{:>3} {:>14.3} {:>14.3} {:>14.3} {:>14.3}", m, g, k, g / ms1, k / mk1));
        // the same at each --at position (the one-row steps again there: attention grows with it)
        for &p in at {
            let at_p = |e: &mut GpuExec, rows: bool, mega: bool| -> Result<f64> {
                e.reset()?;
                e.seek(p as usize)?;
                time(reps, || match (rows, mega) {
                    (true, _) => e.step_rows(&toks, mega).map(|_| ()),
                    (false, false) => e.step(token(0, vocab), false, |_, _| Ok(())).map(|_| ()),
                    (false, true) => e.step_mega(token(0, vocab)).map(|_| ()),
                })
            };
            let (g1, k1) = (at_p(&mut d1, false, false)?, at_p(&mut d1, false, true)?);
            let (gm, km) = (at_p(&mut d, true, false)?, at_p(&mut d, true, true)?);
            at_table.push(format!(
                "{:>7} {:>3} {:>10.3} {:>10.3} {:>10.3} {:>10.3} {:>9.3} {:>9.3}",
                p,
                m,
                g1,
                gm,
                k1,
                km,
                gm / g1,
                km / k1
            ));
        }
        d.reset()?;
        let (_, raw) = d.step_rows_timeline(&toks)?;
        shares.push((m, opcode_shares(&p, &raw)));
        units.push((m, opcode_units(&p, &raw)));
        top = (m, top_words(&p, &raw, 12));
    }
    println!("timing ({reps} synchronised steps each from position 0, mean; \"vs 1 row\": the M-row step over the same path's one-row step):");
    for l in table {
        println!("  {l}");
    }
    if !at.is_empty() {
        println!("timing at later positions (ms per step, {reps} synchronised steps from a jump to pos; the KV cache below left zero; \"x\": the M-row step over the one-row step there):");
        for l in &at_table {
            println!("  {l}");
        }
    }
    println!("megakernel step by opcode (us: the words' shares of one step's span, their timeline):");
    print!("  {:24}", "opcode");
    for (m, _) in &shares {
        print!(" {:>9}", format!("M = {m}"));
    }
    println!();
    let mut ops: Vec<&String> = Vec::new();
    for (op, _) in shares.iter().flat_map(|(_, sh)| sh) {
        if !ops.contains(&op) {
            ops.push(op);
        }
    }
    for op in ops {
        print!("  {op:24}");
        for (_, sh) in &shares {
            print!(" {:>9.0}", sh.iter().find(|(o, _)| o == op).map_or(0.0, |x| x.1));
        }
        println!();
    }
    for (m, lines) in &units {
        println!("megakernel units by opcode, M = {m} (one step; us: a unit's work is ready to done, its wait ticket to ready):");
        println!(
            "  {:24} {:>5} {:>8} {:>10} {:>10} {:>10}",
            "opcode", "words", "units/w", "work mean", "work max", "wait mean"
        );
        for l in lines {
            println!("  {l}");
        }
    }
    println!("the megakernel's costliest words (shares of one step's timeline), one row:");
    for l in &top1 {
        println!("  {l}");
    }
    println!("and M = {}:", top.0);
    for l in &top.1 {
        println!("  {l}");
    }
    for (what, g, k, words) in &draft {
        println!(
            "MTP drafter step ({words} words, {what}; synchronised, mean of {reps}): graph {g:.3} ms, megakernel {k:.3} ms"
        );
    }
    println!(
        "forced-acceptance rounds on the graph (ms per emitted token: each round a synchronised verification step of M rows and its commit, over {n} positions; j drafts accepted, j + 1 tokens a round; one-row graph step {ms1:.3}):"
    );
    for (m, per_row) in &rounds {
        let cells: Vec<String> = per_row.iter().enumerate().map(|(j, v)| format!("j={j}: {v:.3}")).collect();
        println!("  M = {m} (k = {}): {}", m - 1, cells.join("  "));
    }
    if bad > 0 {
        bail!("gpu rows: {bad} comparisons failed");
    }
    println!("verdict: ok");
    Ok(())
}
