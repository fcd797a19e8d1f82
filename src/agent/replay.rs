//! The fixed-count replay of agent trajectories (issue 29 item 5) on the CPU reference: each step
//! appends its tokens (the cold prompt, then the previous step's tool result turn), prefills them, then
//! decodes greedily exactly the recorded count (stop tokens do not end a step: the seed's fixed-count
//! replay, 10.3). Two ways to hold a session between steps:
//! - **resident**: one append-anchored `Session` (model::prefill): an append re-runs only the tokens since
//!   the last 64-token checkpoint, then the new ones;
//! - **stateless**: every step re-prefills the whole history (the prompt, every emitted token, every
//!   appended one) from an empty state.
//! Both leave the state a single prefill over the history makes (the anchoring's guarantee), so both emit
//! the same tokens; the tests check it bit for bit, with a negative control (unanchored appends).
//! Clocks per step: prefill (submit to first token: the append and the first decode's logits) and
//! decode (first token to the last), wall time of this process. `replay_pooled` runs several trajectories
//! as sessions of one session pool (KV in pages), their steps interleaved. The GPU paths come with the
//! GPU's session pool.
//!
//! Owns: the replay loop and its clocks. Refuses: a trajectory past the session's context.

use std::time::Instant;

use super::pool::{Pool, SessionId};
use super::trajectory::Replay;
use crate::error::Result;
use crate::model::forward::Weights;
use crate::model::ops::argmax;
use crate::model::prefill::Session;

/// How a session lives between steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Residency {
    Resident,
    Stateless,
    /// NEGATIVE CONTROL: resident with unanchored appends (the chunks anchored at each append's start).
    #[doc(hidden)]
    ResidentUnanchored,
}

/// One step's outcome: the emitted ids, the tokens its prefill ran (the appended ones plus any re-run),
/// the appended ones alone, and its clocks in ms.
#[derive(Debug, Clone)]
pub struct StepRun {
    pub emitted: Vec<u32>,
    pub prefill_tokens: usize,
    pub new_tokens: usize,
    pub ttft_ms: f64,
    pub decode_ms: f64,
}

/// A trajectory's replay: its steps and the session's final state (for the bit comparisons).
pub struct Run {
    pub steps: Vec<StepRun>,
    pub session: Session,
}

/// Replays `r` on the CPU reference with a session of `max_context` positions.
pub fn replay(w: &Weights, r: &Replay, residency: Residency, max_context: usize) -> Result<Run> {
    let total = r.prompt.len() + r.steps.iter().map(|(e, a)| e + a.len()).sum::<usize>();
    if total > max_context {
        crate::bail!("replay: the trajectory reaches {total} tokens, the session holds {max_context}");
    }
    let mut session = Session::new(&w.cfg, max_context);
    let mut history: Vec<u32> = Vec::new();
    let mut pending: Vec<u32> = r.prompt.clone();
    let mut steps = Vec::new();
    for (emit, append) in &r.steps {
        let t0 = Instant::now();
        let new_tokens = pending.len();
        let (logits, prefill_tokens) = match residency {
            Residency::Stateless => {
                history.extend_from_slice(&pending);
                session = Session::new(&w.cfg, max_context);
                (session.append(w, &history)?, history.len())
            }
            Residency::Resident | Residency::ResidentUnanchored => {
                history.extend_from_slice(&pending);
                // the tokens this append runs: the re-run since the checkpoint (anchored), then the new ones
                let from = if residency == Residency::Resident { session.checkpoint() } else { session.tokens().len() };
                let l = if residency == Residency::Resident {
                    session.append(w, &pending)?
                } else {
                    session.append_unanchored(w, &pending)?
                };
                (l, history.len() - from)
            }
        };
        let ttft_ms = t0.elapsed().as_secs_f64() * 1e3;
        let (emitted, decode_ms) = decode(w, &mut session, &logits, *emit)?;
        history.extend_from_slice(&emitted);
        pending = append.clone();
        steps.push(StepRun { emitted, prefill_tokens, new_tokens, ttft_ms, decode_ms });
    }
    Ok(Run { steps, session })
}

/// A step's decode: `emit` greedy tokens, the first from the prefill's `logits`, each further one from
/// a decode step; the last goes into the session too (the next append follows it). The tokens and ms.
fn decode(w: &Weights, session: &mut Session, logits: &[f32], emit: usize) -> Result<(Vec<u32>, f64)> {
    let t1 = Instant::now();
    let mut tok = argmax(logits) as u32;
    let mut emitted = vec![tok];
    for _ in 1..emit {
        let l = session.step(w, tok)?;
        tok = argmax(&l) as u32;
        emitted.push(tok);
    }
    session.step(w, tok)?;
    Ok((emitted, t1.elapsed().as_secs_f64() * 1e3))
}

/// Replays the trajectories `rs` as resident sessions of one session pool (`pool::Pool`, `pages` KV
/// pages), their steps interleaved round-robin (every trajectory's step 0, then every step 1, ..): each
/// emits what it emits replayed alone (`Residency::Resident`); the pool's page reservations make a step
/// that does not fit an error before it runs. Returns each trajectory's steps and the pool.
pub fn replay_pooled(
    w: &Weights,
    rs: &[Replay],
    pages: usize,
    max_context: usize,
) -> Result<(Vec<Vec<StepRun>>, Pool, Vec<SessionId>)> {
    let mut pool = Pool::new(&w.cfg, pages, rs.len().max(1), max_context)?;
    let ids = rs.iter().map(|_| pool.open()).collect::<Result<Vec<_>>>()?;
    let mut pending: Vec<Vec<u32>> = rs.iter().map(|r| r.prompt.clone()).collect();
    let mut runs: Vec<Vec<StepRun>> = rs.iter().map(|_| Vec::new()).collect();
    let rounds = rs.iter().map(|r| r.steps.len()).max().unwrap_or(0);
    for k in 0..rounds {
        for (i, r) in rs.iter().enumerate() {
            let Some((emit, append)) = r.steps.get(k) else { continue };
            let (id, new) = (ids[i], std::mem::take(&mut pending[i]));
            let len = pool.tokens(id)?.len();
            let t0 = Instant::now();
            let (run, from) = pool.run(id, w, len + new.len() + emit, |s, w| {
                let from = s.checkpoint();
                let logits = s.append(w, &new)?;
                let ttft_ms = t0.elapsed().as_secs_f64() * 1e3;
                let (emitted, decode_ms) = decode(w, s, &logits, *emit)?;
                Ok((StepRun { emitted, prefill_tokens: 0, new_tokens: new.len(), ttft_ms, decode_ms }, from))
            })?;
            runs[i].push(StepRun { prefill_tokens: len + new.len() - from, ..run });
            pending[i] = append.clone();
        }
    }
    Ok((runs, pool, ids))
}

/// A table of one replay (`how`: its residency, path): per step the tokens prefilled, TTFT, decode ms a
/// token, the step's total.
pub fn table(name: &str, how: &str, steps: &[StepRun]) -> String {
    let mut o = format!(
        "{name} ({how}):\n  {:>4} {:>8} {:>8} {:>10} {:>10} {:>10}\n",
        "step", "prefill", "emitted", "ttft ms", "ms/token", "total ms"
    );
    let (mut p, mut e, mut t) = (0, 0, 0.0);
    for (i, s) in steps.iter().enumerate() {
        let per = s.decode_ms / s.emitted.len().max(1) as f64;
        o += &format!(
            "  {:>4} {:>8} {:>8} {:>10.1} {:>10.2} {:>10.1}\n",
            i,
            s.prefill_tokens,
            s.emitted.len(),
            s.ttft_ms,
            per,
            s.ttft_ms + s.decode_ms
        );
        p += s.prefill_tokens;
        e += s.emitted.len();
        t += s.ttft_ms + s.decode_ms;
    }
    o + &format!("  all  {p:>8} {e:>8} {:>34.1}\n", t)
}

/// The replay's steps as CSV (one row a step; `chart` renders from this file): trajectory, step, the
/// tokens appended, the tokens re-run, the prefill's ms (submit to first token), tokens emitted, the
/// decode's ms.
pub fn steps_csv(runs: &[(String, Vec<StepRun>)]) -> String {
    let mut o = String::from("trajectory,step,new_tokens,rerun_tokens,ttft_ms,emitted,decode_ms\n");
    for (name, steps) in runs {
        for (i, s) in steps.iter().enumerate() {
            o += &format!(
                "{name},{i},{},{},{:.3},{},{:.3}\n",
                s.new_tokens,
                s.prefill_tokens - s.new_tokens,
                s.ttft_ms,
                s.emitted.len(),
                s.decode_ms
            );
        }
    }
    o
}

/// Per trajectory, where its time went (ms): prefill of the appended tokens, re-prefill (the re-run
/// tokens: since the checkpoint, or the whole history when stateless), decode; the prefill's ms split
/// between the first two by their token counts (derived: one append runs both). Read from `steps_csv`.
pub fn time_split(csv: &str) -> Result<Vec<(String, [f64; 3])>> {
    let mut out: Vec<(String, [f64; 3])> = Vec::new();
    for (n, line) in csv.lines().enumerate().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        let num = |i: usize| -> Result<f64> {
            f.get(i)
                .and_then(|v| v.parse::<f64>().ok())
                .ok_or_else(|| crate::error::Error::new(format!("replay csv line {}: field {i} of {line:?}", n + 1)))
        };
        if f.len() != 7 {
            crate::bail!("replay csv line {}: {} fields, expected 7", n + 1, f.len());
        }
        let (new, rerun, ttft, dec) = (num(2)?, num(3)?, num(4)?, num(6)?);
        let share = if new + rerun > 0.0 { new / (new + rerun) } else { 1.0 };
        if out.last().map(|o| o.0.as_str()) != Some(f[0]) {
            out.push((f[0].to_string(), [0.0; 3]));
        }
        if let Some((_, t)) = out.last_mut() {
            t[0] += ttft * share;
            t[1] += ttft * (1.0 - share);
            t[2] += dec;
        }
    }
    Ok(out)
}

/// Writes a replay's steps (`out`/steps.csv) and the chart of where each trajectory's time went
/// (`out`/time.png: prefill, re-prefill, decode); `how` names the residency and the engine in the title.
pub fn write_out(out: &std::path::Path, runs: &[(String, Vec<StepRun>)], how: &str) -> Result<()> {
    let io = |p: &std::path::Path, e: std::io::Error| crate::error::Error::new(format!("{}: {e}", p.display()));
    std::fs::create_dir_all(out).map_err(|e| io(out, e))?;
    let csv_path = out.join("steps.csv");
    let csv = steps_csv(runs);
    std::fs::write(&csv_path, &csv).map_err(|e| io(&csv_path, e))?;
    let rows: Vec<(String, Vec<f64>)> = time_split(&csv)?.into_iter().map(|(n, t)| (n, t.to_vec())).collect();
    let png = out.join("time.png");
    use plotters::style::RGBColor;
    crate::experiment::chart::stacked_bars(
        &png,
        &format!("where the replay's time went ({how})"),
        "ms (prefill / re-prefill split by token counts: derived)",
        &rows,
        &[
            ("prefill", RGBColor(66, 133, 244)),
            ("re-prefill", RGBColor(234, 67, 53)),
            ("decode", RGBColor(52, 168, 83)),
        ],
    )?;
    println!("wrote {} and {}", csv_path.display(), png.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_time_split_reads_the_csv_and_splits_prefill_by_tokens() {
        let s = |new, prefill, ttft, decode| StepRun {
            emitted: vec![1, 2],
            prefill_tokens: prefill,
            new_tokens: new,
            ttft_ms: ttft,
            decode_ms: decode,
        };
        let runs = vec![
            ("t01".to_string(), vec![s(100, 100, 10.0, 4.0), s(30, 90, 6.0, 2.0)]),
            ("t02".to_string(), vec![s(10, 10, 1.0, 1.0)]),
        ];
        let csv = steps_csv(&runs);
        assert!(csv.starts_with(
            "trajectory,step,new_tokens,rerun_tokens,ttft_ms,emitted,decode_ms\nt01,0,100,0,10.000,2,4.000\n"
        ));
        let t = time_split(&csv).unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(t[0].0, "t01");
        let [p, r, d] = t[0].1;
        assert!((p - 12.0).abs() < 1e-9 && (r - 4.0).abs() < 1e-9 && (d - 6.0).abs() < 1e-9, "{:?}", t[0].1);
        assert!(time_split("h\nt01,0,1,0,x,2,3\n").unwrap_err().to_string().contains("field 4"));
        assert!(time_split("h\nt01,0,1\n").unwrap_err().to_string().contains("3 fields"));
    }
}
