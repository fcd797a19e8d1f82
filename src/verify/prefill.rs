//! `mk gpu prefill`: a prompt through a prefill program on the graph path (issue 28 item 6: M rows a
//! step, the fp8 GEMVs as the tensor-core GEMM, the chunked GDN; src/exec/gpu/prefill.rs), checked
//! and timed.
//!
//! The check (`--check`, tiny and small: the interpreter runs the same program) compares the GPU's
//! prefill with the interpreter's (`exec::interp::prefill`, the CPU reference's prefill bit for bit):
//! the last row's logits, the greedy next token, every state buffer (GDN states and conv rings, the
//! KV caches below T) and the last step's attention output of every row (`attn_out`: where a causal
//! mask that is wrong shows), each as its largest difference over its largest magnitude. They round
//! differently (the GEMM's tile sums and split-K, CUDA's expf in the chunked rule against the CPU's
//! order), so the bound is the envelope, `TOLERANCE`, not bits; the negative controls (MK_BREAK_GDN:
//! the decay dropped inside the chunks; MK_BREAK_ATTN: each row sees the next position's key) must
//! exceed it. `--against-decode` also feeds the prompt one
//! token a step through the one-row program (the decode path) and reports the same distances (the
//! chunked form against the recurrence: the oracle's own two paths differ this way too). The timing:
//! T tokens from position 0, `reps` times, the median, in tokens per second.
//!
//! Owns: the comparison, its report and the timing loop. Refuses: a T that is not a multiple of M.

use std::path::Path;

use crate::bail;
use crate::error::Result;
use crate::exec::gpu::{Defines, Gpu, GpuExec};
use crate::exec::interp::{self, Order};
use crate::isa::{access::ATTN_PART, BufKind};
use crate::model::checkpoint::Checkpoint;
use crate::model::ops::Activations;
use crate::model::upload::Upload;

/// The check's bound: the largest |GPU - CPU| of the last logits and of every state buffer over its
/// largest magnitude. The CPU's prefill against its own decode steps measured 6.2e-3 (logits) and
/// 4.5e-3 (states) on tiny (model::prefill's test): the same kind of rounding difference.
pub const TOLERANCE: f64 = 2e-2;

/// What `mk gpu prefill` takes.
pub struct Args<'a> {
    pub dir: &'a Path,
    pub m: u32,
    pub tokens: &'a [u32],
    pub reps: usize,
    pub check: bool,
    pub against_decode: bool,
    /// Also one prefill of each T launched word by word with events (`prefill_rows_timed`): where the
    /// time goes, by kind of word.
    pub profile: bool,
    /// Fast mode (issue 28 item 1): the GEMMs on e4m3 activations (k_gemm_fast); the check's reference
    /// the interpreter in fast mode too.
    pub fast: bool,
    pub cache: &'a Path,
    pub defines: &'a Defines,
}

/// One T's figures.
#[derive(Debug)]
pub struct PrefillRow {
    pub t: usize,
    pub ms: f64,
    pub tokens_per_s: f64,
    pub next: u32,
    /// Against the interpreter (--check): logits, the worst state buffer (its name), the next token's.
    pub vs_cpu: Option<Distance>,
    /// Against the one-row decode path (--against-decode).
    pub vs_decode: Option<Distance>,
}

/// Distances of one comparison.
#[derive(Debug, Clone)]
pub struct Distance {
    pub logits: f64,
    pub state: f64,
    pub worst: String,
    pub next: u32,
    /// The GPU's next token is the reference's, or within the bound of its best logit (a near-tie).
    pub next_ok: bool,
}

impl Distance {
    pub fn within(&self, tol: f64) -> bool {
        self.logits <= tol && self.state <= tol && self.next_ok
    }
}

/// The largest |a - b| over the largest |b| (0 for two empty or all-zero vectors; infinite for different
/// lengths or a value that is not finite).
fn rel(a: &[f32], b: &[f32]) -> f64 {
    let m = b.iter().fold(0f64, |m, x| m.max(x.abs() as f64));
    // (a non-finite value anywhere is infinitely far: f64::max would drop a NaN)
    if a.len() != b.len() || a.iter().chain(b).any(|x| !x.is_finite()) {
        return f64::INFINITY;
    }
    let d = a.iter().zip(b).fold(0f64, |d, (x, y)| d.max((*x as f64 - *y as f64).abs()));
    if m == 0.0 {
        d
    } else {
        d / m
    }
}

/// Every State buffer of `d` by name, a KV cache only below `t` positions.
fn gpu_states(d: &GpuExec, t: usize) -> Result<Vec<(String, Vec<f32>)>> {
    let p = d.program();
    let mut v = Vec::new();
    for (i, b) in p.buffers.iter().enumerate() {
        if b.kind == BufKind::State {
            let n = if kv(&b.name) { t as u64 * b.cols } else { b.elems() };
            v.push((b.name.clone(), d.read(i, n as usize)?));
        }
    }
    Ok(v)
}

fn kv(name: &str) -> bool {
    name.starts_with("k_cache.") || name.starts_with("v_cache.")
}

/// `got`'s distances from `want` (logits, the states `want` has, by name; KV caches below `t`).
fn distance(
    (got_next, got_logits, got_states): (u32, &[f32], &[(String, Vec<f32>)]),
    want_logits: &[f32],
    want_states: &[(String, Vec<f32>)],
    next: u32,
) -> Distance {
    let (mut state, mut worst) = (0f64, String::new());
    for (name, w) in want_states {
        let Some((_, g)) = got_states.iter().find(|(n, _)| n == name) else { continue };
        // (a KV cache was read below t positions on the GPU; the interpreter's is whole)
        let n = if kv(name) { g.len().min(w.len()) } else { w.len() };
        let d = rel(&g[..n.min(g.len())], &w[..n]);
        if d > state || worst.is_empty() {
            (state, worst) = (d.max(state), name.clone());
        }
    }
    // the next tokens agree, or the GPU's is a near-tie of the reference's best (within the bound)
    let top = want_logits.get(next as usize).copied().unwrap_or(f32::NAN) as f64;
    let scale = want_logits.iter().fold(0f64, |m, x| m.max(x.abs() as f64));
    let mine = want_logits.get(got_next as usize).copied().unwrap_or(f32::NEG_INFINITY) as f64;
    let next_ok = got_next == next || (top - mine) <= TOLERANCE * scale;
    Distance { logits: rel(got_logits, want_logits), state, worst, next, next_ok }
}

/// Where a prefill's time went (`--profile`): each word's summed ms over the steps, by kind (a replaced
/// form by its name and opcode, any other word by its opcode), largest first, against the graph's
/// measured median `graph_ms` for the same T.
fn profile_table(p: &crate::isa::Program, per_word: &[f64], t: usize, graph_ms: f64) -> String {
    use crate::exec::gpu::prefill::{form, Form};
    let mut by: Vec<(String, usize, f64)> = Vec::new();
    for (w, ms) in p.words.iter().zip(per_word) {
        let kind = match form(p, w) {
            Form::Word => format!("{:?}", w.opcode),
            f => format!("{f:?} ({:?})", w.opcode),
        };
        match by.iter_mut().find(|b| b.0 == kind) {
            Some(b) => (b.1, b.2) = (b.1 + 1, b.2 + ms),
            None => by.push((kind, 1, *ms)),
        }
    }
    by.sort_by(|a, b| b.2.total_cmp(&a.2));
    let total: f64 = per_word.iter().sum();
    let mut o = format!(
        "profile, T = {t}: {total:.2} ms launched word by word (the graph's replay: {graph_ms:.2} ms)\n  {:<34} {:>6} {:>10} {:>7}\n",
        "kind", "words", "ms", "share"
    );
    for (kind, n, ms) in by {
        o += &format!("  {kind:<34} {n:>6} {ms:>10.3} {:>6.1}%\n", 100.0 * ms / total.max(1e-12));
    }
    o
}

/// The GPU's prefill of `toks` in steps of M from position 0: the next token, the last row's logits.
fn prefill(d: &mut GpuExec, toks: &[u32]) -> Result<(u32, Vec<f32>)> {
    let m = d.program().target.m_rows as usize;
    d.reset()?;
    let mut next = 0;
    for s in toks.chunks(m) {
        next = d.prefill_rows(s)?;
    }
    let l = d.logits()?;
    let v = l.len() / m;
    Ok((next, l[l.len() - v..].to_vec()))
}

pub fn run(a: &Args) -> Result<Vec<PrefillRow>> {
    let m = a.m as usize;
    if a.tokens.is_empty() || a.tokens.iter().any(|&t| t == 0 || t as usize % m != 0) {
        bail!("gpu prefill: --tokens {:?}: each a positive multiple of M = {m}", a.tokens);
    }
    let ck = Checkpoint::open(a.dir)?;
    let tmax = *a.tokens.iter().max().unwrap_or(&0) as usize;
    let ctx = (tmax.div_ceil(ATTN_PART) * ATTN_PART) as u32;
    let p = interp::prefill::program(&ck, a.m, ctx)?;
    let up = Upload::new(&ck)?;
    let gpu = Gpu::open()?;
    let mode = if a.fast { "fast mode (W8A8)" } else { "exact mode (W8A16)" };
    println!("gpu prefill: {} on {}, M = {m}, max context {ctx}, {mode}", ck.config.name, gpu.name);
    let mut d = GpuExec::new(gpu, &p, &up, a.cache, a.defines)?;
    let act = if a.fast { Activations::Fp8Dynamic } else { Activations::Bf16 };
    d.set_activations(act)?;
    let mut dec = if a.against_decode {
        let mut t = crate::compiler::h200(1);
        t.max_context = ctx;
        let p1 = crate::compiler::compile(&ck.config, "checkpoint", &t)?;
        let d1 = GpuExec::new_sharing(Gpu::open()?, &p1, &up, &d, a.cache, a.defines)?;
        // the decode program's weights are the prefill program's: a second copy is a bug (session 33
        // found one: every shared weight's bytes still allocated, the 27B's three programs out of memory)
        if d1.own_weight_bytes() != 0 {
            bail!(
                "gpu prefill: the decode executor holds {} bytes of weights of its own (it shares them all)",
                d1.own_weight_bytes()
            );
        }
        Some(d1)
    } else {
        None
    };
    let vocab = ck.config.vocab;
    let mut rows = Vec::new();
    for &t in a.tokens {
        let t = t as usize;
        let toks: Vec<u32> = (0..t).map(|i| super::rows::token(i, vocab)).collect();
        let (next, logits) = prefill(&mut d, &toks)?; // (also captures the graph)
        let states = gpu_states(&d, t)?;
        let vs_cpu = if a.check {
            let want = interp::prefill::prefill(&ck, &toks, a.m, ctx, Order::Program, act)?;
            // also the last step's attention output of every row (the causal mask shows in rows < M - 1)
            let mut got = states.clone();
            for (name, v) in &want.outputs {
                let b = p.buffer_id(name).ok_or_else(|| crate::error::Error::new(format!("no buffer {name}")))?;
                got.push((name.clone(), d.read(b, v.len())?));
            }
            Some(distance((next, &logits, &got), &want.logits, &[want.states, want.outputs].concat(), want.next))
        } else {
            None
        };
        let vs_decode = match dec.as_mut() {
            Some(d1) => {
                d1.reset()?;
                let mut n1 = 0;
                for &tok in &toks {
                    n1 = d1.step(tok, false, |_, _| Ok(()))?;
                }
                Some(distance((next, &logits, &states), &d1.logits()?, &gpu_states(d1, t)?, n1))
            }
            None => None,
        };
        let mut ms = Vec::new();
        for _ in 0..a.reps.max(1) {
            d.reset()?;
            d.sync()?;
            let t0 = std::time::Instant::now();
            for s in toks.chunks(m) {
                d.prefill_rows(s)?;
            }
            d.sync()?;
            ms.push(t0.elapsed().as_secs_f64() * 1e3);
        }
        ms.sort_by(f64::total_cmp);
        let med = ms[ms.len() / 2];
        if a.profile {
            d.reset()?;
            let mut per_word = vec![0f64; p.words.len()];
            for s in toks.chunks(m) {
                let (_, w) = d.prefill_rows_timed(s)?;
                per_word.iter_mut().zip(w).for_each(|(a, b)| *a += b as f64);
            }
            print!("{}", profile_table(&p, &per_word, t, med));
        }
        rows.push(PrefillRow { t, ms: med, tokens_per_s: t as f64 / med * 1e3, next, vs_cpu, vs_decode });
    }
    println!(
        "{:>6} {:>10} {:>10} {:>6}  {:<44} {:<44}",
        "T", "ms", "tokens/s", "next", "vs CPU: logits / state (worst) / next", "vs decode path: logits / state / next"
    );
    let show = |d: &Option<Distance>| {
        d.as_ref().map_or("-".to_string(), |d| format!("{:.2e} / {:.2e} ({}) / {}", d.logits, d.state, d.worst, d.next))
    };
    for r in &rows {
        println!(
            "{:>6} {:>10.2} {:>10.0} {:>6}  {:<44} {:<44}",
            r.t,
            r.ms,
            r.tokens_per_s,
            r.next,
            show(&r.vs_cpu),
            show(&r.vs_decode)
        );
    }
    let bad: Vec<String> = rows
        .iter()
        .filter_map(|r| r.vs_cpu.as_ref().map(|d| (r.t, d)))
        .filter(|(_, d)| !d.within(TOLERANCE))
        .map(|(t, d)| {
            format!(
                "T = {t}: logits {:.2e}, state {:.2e} ({}), next token ok {}",
                d.logits, d.state, d.worst, d.next_ok
            )
        })
        .collect();
    if a.check {
        if bad.is_empty() {
            println!(
                "verdict: the GPU prefill within {TOLERANCE:e} of the interpreter's (logits, every state) at every T"
            );
        } else {
            println!("verdict: FAILED, past {TOLERANCE:e}: {}", bad.join("; "));
        }
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st(v: &[f32]) -> Vec<(String, Vec<f32>)> {
        vec![("recurrent_state.0".to_string(), v.to_vec())]
    }

    /// The check's arithmetic: distances relative to the reference's largest magnitude, the next token
    /// accepted as a near-tie only within the bound, and a state past the bound rejected.
    #[test]
    fn the_prefill_check_accepts_rounding_and_rejects_what_the_bound_excludes() {
        let want = [1.0f32, 4.0, 3.99, -2.0];
        let got = [1.001f32, 4.0, 3.99, -2.0];
        // the same best token, a small difference: within
        let d = distance((1, &got, &st(&[1.0, 2.0])), &want, &st(&[1.0, 2.0]), 1);
        assert!(d.within(TOLERANCE) && d.logits < 1e-3, "{d:?}");
        // another best token that is a near-tie of the reference's (0.01 of 4.0 apart): accepted
        let d = distance((2, &got, &st(&[1.0, 2.0])), &want, &st(&[1.0, 2.0]), 1);
        assert!(d.next_ok && d.within(TOLERANCE), "{d:?}");
        // a next token far from the reference's best: rejected
        let d = distance((3, &got, &st(&[1.0, 2.0])), &want, &st(&[1.0, 2.0]), 1);
        assert!(!d.next_ok && !d.within(TOLERANCE), "{d:?}");
        // a state off by 10 % of its largest magnitude: rejected, and named
        let d = distance((1, &got, &st(&[1.0, 2.2])), &want, &st(&[1.0, 2.0]), 1);
        assert!(!d.within(TOLERANCE) && d.worst == "recurrent_state.0" && (d.state - 0.1).abs() < 1e-6, "{d:?}");
        // a NaN anywhere is infinitely far
        assert_eq!(rel(&[f32::NAN], &[1.0]), f64::INFINITY);
    }

    /// The profile groups words by kind (replaced forms by form and opcode), largest first.
    #[test]
    fn the_profile_groups_words_by_kind_largest_first() {
        let cfg = crate::model::config::ModelConfig::preset("tiny").unwrap();
        let mut t = crate::compiler::h200(64);
        (t.prefill, t.max_context) = (true, 256);
        let p = crate::compiler::compile(&cfg, "prefill", &t).unwrap();
        let per_word: Vec<f64> =
            p.words.iter().map(|w| if w.opcode == crate::isa::Opcode::AttnScores { 5.0 } else { 0.01 }).collect();
        let table = profile_table(&p, &per_word, 64, 1.0);
        let rows: Vec<&str> = table.lines().skip(2).collect();
        assert!(rows[0].trim_start().starts_with("Attn (AttnScores)"), "{table}");
        assert!(table.contains("Skip (AttnPv)") && table.contains("Chunk (GdnChunk)"), "{table}");
        let words: usize =
            rows.iter().map(|r| r.split_whitespace().rev().nth(2).unwrap().parse::<usize>().unwrap()).sum();
        assert_eq!(words, p.words.len(), "{table}");
    }
}
