//! `mk gpu rows`: M-row verification steps on the GPU against one-row steps, bit for bit.
//!
//! A verification step feeds M tokens at positions pos .. pos + M in one graph replay or one
//! megakernel launch (the M = 1 program's ops, each unit running its rows in order on row views of
//! the buffers). Row m must be exactly what a one-row step at position pos + m computes: the check
//! feeds the same token walk through the M = 1 graph one token at a time and through the M-row
//! program on both paths, and compares every row's logits and greedy token and, at the end, every
//! state buffer (recurrent and conv states, KV caches), reporting the first difference. The negative
//! control swaps two tokens of one step: the comparison must catch it at that step. Then the time of
//! a verification step against M one-row steps.
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

fn program(ck: &Checkpoint, m: u32, max_context: u32) -> Result<Program> {
    let mut t = crate::compiler::h200(m);
    t.max_context = max_context;
    crate::compiler::compile(&ck.config, "checkpoint", &t)
}

/// Every state buffer's bits, by name.
fn states(d: &GpuExec) -> Result<Vec<(String, Vec<u32>)>> {
    let p = d.program();
    let mut v = Vec::new();
    for (i, b) in p.buffers.iter().enumerate() {
        if b.kind == BufKind::State {
            v.push((b.name.clone(), d.read(i, b.elems() as usize)?.iter().map(|x| x.to_bits()).collect()));
        }
    }
    Ok(v)
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
    let got = states(d)?;
    if got.len() != want.states.len() {
        return Ok(Some(format!("{} state buffers vs {} (one-row)", got.len(), want.states.len())));
    }
    for (name, a) in &got {
        let Some((_, b)) = want.states.iter().find(|(n, _)| n == name) else {
            return Ok(Some(format!("state {name}: the one-row program has none")));
        };
        if let Some(e) = a.iter().zip(b).position(|(x, y)| x != y) {
            return Ok(Some(format!(
                "state {name} element {e}: {} vs {} (one-row)",
                f32::from_bits(a[e]),
                f32::from_bits(b[e])
            )));
        }
    }
    Ok(None)
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

/// Mean ms of `f` over `reps` calls after one warm-up.
fn time(reps: usize, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    f()?;
    let t = std::time::Instant::now();
    for _ in 0..reps {
        f()?;
    }
    Ok(t.elapsed().as_secs_f64() * 1e3 / reps as f64)
}

pub fn run(dir: &Path, ms: &[u32], n: usize, reps: usize, cache: &Path, defines: &Defines) -> Result<()> {
    if ms.is_empty() || ms.iter().any(|&m| !(2..=8).contains(&m) || n % m as usize != 0) || n == 0 {
        bail!("gpu rows: each M must be 2..=8 and divide --tokens ({n})");
    }
    let ck = Checkpoint::open(dir)?;
    // Room for the check's tokens and the timing's steps (each timed step moves the position on).
    let max_ctx = (n + 2 * 8 * (reps + 1)).div_ceil(256) as u32 * 256;
    let p1 = program(&ck, 1, max_ctx)?;
    let up = Upload::new(&ck)?;
    let mut d1 = GpuExec::new(Gpu::open()?, &p1, &up, cache, defines)?;
    let vocab = ck.config.vocab;
    d1.reset()?;
    let mut want = Want { logits: Vec::with_capacity(n), next: Vec::with_capacity(n), states: Vec::new() };
    for i in 0..n {
        want.next.push(d1.step(token(i, vocab), false, |_, _| Ok(()))?);
        want.logits.push(d1.logits()?.iter().map(|x| x.to_bits()).collect());
    }
    want.states = states(&d1)?;
    println!("one-row graph: {n} tokens from position 0 (crossing {} attention partitions)", n.div_ceil(256));
    d1.reset()?;
    let ms1 = time(reps, || d1.step(token(0, vocab), false, |_, _| Ok(())).map(|_| ()))?;
    d1.reset()?;
    let mk1 = time(reps, || d1.step(token(0, vocab), true, |_, _| Ok(())).map(|_| ()))?;
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
    let mut bad = 0;
    for (i, &m) in ms.iter().enumerate() {
        let p = program(&ck, m, max_ctx)?;
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
        let toks: Vec<u32> = (0..m as usize).map(|i| token(i, vocab)).collect();
        d.reset()?;
        let g = time(reps, || d.step_rows(&toks, false).map(|_| ()))?;
        d.reset()?;
        let k = time(reps, || d.step_rows(&toks, true).map(|_| ()))?;
        table.push(format!("{:>3} {:>14.3} {:>14.3} {:>14.3} {:>14.3}", m, g, k, g / ms1, k / mk1));
        d.reset()?;
        let (_, raw) = d.step_rows_timeline(&toks)?;
        shares.push((m, opcode_shares(&p, &raw)));
    }
    println!("timing ({reps} synchronised steps each from position 0, mean; \"vs 1 row\": the M-row step over the same path's one-row step):");
    for l in table {
        println!("  {l}");
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
    if bad > 0 {
        bail!("gpu rows: {bad} comparisons failed");
    }
    println!("verdict: ok");
    Ok(())
}
