//! The fixed-count replay on a GPU session (issue 29 item 5; the session is `agent::gpu::GpuSession`):
//! resident or stateless, parked between steps, with speculation at a controlled acceptance, or
//! sessions interleaved through park slots. Clocks as the CPU's `replay::replay` takes them.
//!
//! Owns: the replays' step loop and their reach check. Refuses: a trajectory past the session's context.

use std::time::Instant;

use super::gpu::GpuSession;
use super::replay::{Residency, StepRun};
use super::trajectory::Replay;
use crate::bail;
use crate::error::Result;

/// Replays `r` on `s` (reset first): each step appends its tokens (resident: the new ones; stateless:
/// the session emptied and the whole history appended), then emits exactly the recorded count; with
/// `park`, a resident session is parked in host memory and restored between steps (outside the steps'
/// clocks: `Moves::parked` has them). Clocks as the CPU's `replay::replay` takes them (wall time of this
/// process: prefill is submit to first token).
pub fn replay(
    s: &mut GpuSession,
    r: &Replay,
    residency: Residency,
    max_steps: usize,
    park: bool,
) -> Result<Vec<StepRun>> {
    if residency == Residency::ResidentUnanchored {
        bail!("agent: the unanchored control is the CPU reference's (GPU appends are anchored by construction)");
    }
    let steps = fits(s, r, max_steps, 1)?;
    s.reset()?;
    let (mut history, mut pending, mut out) = (Vec::new(), r.prompt.clone(), Vec::new());
    for (i, (emit, append)) in steps.iter().enumerate() {
        if park && i > 0 && residency == Residency::Resident {
            s.park()?;
            s.restore()?;
        }
        out.push(step(s, &mut history, &pending, *emit, residency, |s, first, n| s.decode(first, n))?);
        pending = append.clone();
    }
    Ok(out)
}

/// `replay` (resident) with every step's decode by greedy speculation at a controlled acceptance
/// (`GpuSession::decode_speculative`: `agree` of each round's k = M - 1 drafts the plain continuation,
/// `plain`: the steps of a plain replay of `r` on this session's model, whose tokens it must emit).
/// Per step the clocks as `replay`'s; the rounds' statistics summed.
pub fn replay_speculative(
    s: &mut GpuSession,
    r: &Replay,
    plain: &[StepRun],
    agree: usize,
    max_steps: usize,
) -> Result<(Vec<StepRun>, crate::model::spec_generate::SpecStats)> {
    let steps = fits(s, r, max_steps, 2)?;
    if plain.len() != steps.len() {
        bail!("agent: {} plain steps for a replay of {}", plain.len(), steps.len());
    }
    s.reset()?;
    let (mut history, mut pending, mut out) = (Vec::new(), r.prompt.clone(), Vec::new());
    let mut all = crate::model::spec_generate::SpecStats::default();
    for ((emit, append), truth) in steps.iter().zip(plain) {
        let decode = |s: &mut GpuSession, first, n| {
            let (emitted, st) = s.decode_speculative(first, n, &truth.emitted, agree)?;
            all.rounds += st.rounds;
            all.drafted += st.drafted;
            all.accepted += st.accepted;
            Ok(emitted)
        };
        out.push(step(s, &mut history, &pending, *emit, Residency::Resident, decode)?);
        pending = append.clone();
    }
    Ok((out, all))
}

/// The steps of `r` a replay runs (at most `max_steps`), refused unless the trajectory fits the
/// session with `passes` M-row passes to spare (a pass's padding, a flush).
fn fits<'r>(s: &GpuSession, r: &'r Replay, max_steps: usize, passes: usize) -> Result<&'r [(usize, Vec<u32>)]> {
    let steps = &r.steps[..r.steps.len().min(max_steps)];
    let total = r.prompt.len() + steps.iter().map(|(e, a)| e + a.len()).sum::<usize>();
    if total + passes * s.m() > s.context() {
        bail!(
            "agent: a trajectory reaches {total} tokens, the GPU session holds {} (less {passes} pass(es) of {})",
            s.context(),
            s.m()
        );
    }
    Ok(steps)
}

/// One step of a replay: `pending` appended (stateless: the session emptied and the whole history
/// appended), `emit` tokens emitted by `decode` (`GpuSession::decode` or its speculative form); the
/// history grows by both.
fn step(
    s: &mut GpuSession,
    history: &mut Vec<u32>,
    pending: &[u32],
    emit: usize,
    residency: Residency,
    decode: impl FnOnce(&mut GpuSession, u32, usize) -> Result<Vec<u32>>,
) -> Result<StepRun> {
    let t0 = Instant::now();
    let new_tokens = pending.len();
    history.extend_from_slice(pending);
    let (first, prefill_tokens) = if residency == Residency::Stateless {
        s.reset()?;
        (s.append(history)?, history.len())
    } else {
        (s.append(pending)?, new_tokens)
    };
    let ttft_ms = t0.elapsed().as_secs_f64() * 1e3;
    let t1 = Instant::now();
    let emitted = decode(s, first, emit)?;
    let decode_ms = t1.elapsed().as_secs_f64() * 1e3;
    history.extend_from_slice(&emitted);
    Ok(StepRun { emitted, prefill_tokens, new_tokens, ttft_ms, decode_ms })
}

/// Replays `rs` as sessions taking turns on the GPU, their steps interleaved round-robin (every
/// trajectory's step 0, then every step 1, ..), each parked in its own slot of host memory between its
/// steps (issue 29 item 4 on the GPU, with the GPU's session pool not built: one session on the GPU at
/// a time). Each must emit what it emits replayed alone. Per trajectory, its steps and its final state's
/// digest (`GpuSession::state_digest`, each restored in turn at the end).
pub fn replay_interleaved(
    s: &mut GpuSession,
    rs: &[Replay],
    max_steps: usize,
) -> Result<(Vec<Vec<StepRun>>, Vec<String>)> {
    for r in rs {
        fits(s, r, max_steps, 1)?;
    }
    s.reset()?;
    let mut history: Vec<Vec<u32>> = rs.iter().map(|_| Vec::new()).collect();
    let mut pending: Vec<Vec<u32>> = rs.iter().map(|r| r.prompt.clone()).collect();
    let mut out: Vec<Vec<StepRun>> = rs.iter().map(|_| Vec::new()).collect();
    let rounds = rs.iter().map(|r| r.steps.len().min(max_steps)).max().unwrap_or(0);
    for k in 0..rounds {
        for (i, r) in rs.iter().enumerate() {
            let Some((emit, append)) = r.steps.get(k) else { continue };
            // the GPU is empty here (the last step's session parked, or nothing ran yet)
            if k > 0 {
                s.restore_from(i)?;
            }
            let run = step(s, &mut history[i], &pending[i], *emit, Residency::Resident, |s, f, n| s.decode(f, n))?;
            out[i].push(run);
            pending[i] = append.clone();
            s.park_as(i)?;
        }
    }
    // each session's final state, restored from its slot (which it leaves empty), then dropped
    let mut digests = Vec::new();
    for i in 0..rs.len() {
        s.restore_from(i)?;
        digests.push(s.state_digest()?);
        s.reset()?;
    }
    Ok((out, digests))
}
