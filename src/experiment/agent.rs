//! The agent pass of `mk run` (issue 29 item 7): the experiment's `agent` workload, the fixed-count
//! replay of agent trajectories, on the run's paths that replay: the CPU reference (`agent::replay`) and
//! the graph and the megakernel (one `agent::gpu::GpuSession` sharing the run's uploaded weights), at each
//! residency asked for. Writes per path and residency `agent/<path>_<residency>/steps.csv` and `time.png`
//! (where each trajectory's time went: prefill, re-prefill, decode), every trajectory's table into
//! `agent/tables.txt`, and a record entry each (`Record::agent`).
//!
//! Checks, on the emitted tokens step by step (and between two GPU runs on each trajectory's final state
//! bits too, `GpuSession::state_digest`): the megakernel against the graph, and a stateless run against
//! the same path's resident one, must be identical (with a prefill program too: the GPU
//! session's appends are anchored); the GPU paths against the CPU reference are reported (other
//! summation orders). A failed check fails the run after everything is written.
//!
//! Owns: the pass and its comparisons. Refuses: an unknown trajectory, a replay past the session's context.

use std::path::Path;

use super::record::{AgentRun, Record, Results};
use super::spec::{AgentResidency, PathName};
use super::{say, RunCtx};
use crate::agent::replay::{self as cpu, Residency, StepRun};
use crate::agent::trajectory as tr;
use crate::bail;
use crate::error::{Error, Result};

type Runs = Vec<(String, Vec<StepRun>)>;

fn residency(r: AgentResidency) -> Residency {
    match r {
        AgentResidency::Resident => Residency::Resident,
        AgentResidency::Stateless => Residency::Stateless,
    }
}

fn label(r: AgentResidency) -> &'static str {
    match r {
        AgentResidency::Resident => "resident",
        AgentResidency::Stateless => "stateless",
    }
}

/// The trajectories chosen, each cut to `max_steps`, and the context a session needs for the longest.
pub(super) fn load(a: &super::spec::AgentWorkload) -> Result<(Vec<String>, Vec<tr::Replay>, usize)> {
    let text =
        std::fs::read_to_string(&a.trajectories).map_err(|e| Error::new(format!("agent: {}: {e}", a.trajectories)))?;
    let ts = tr::from_json(&text).map_err(|e| Error::new(format!("agent: {}: {e}", a.trajectories)))?;
    if let Some(bad) = a.only.iter().find(|n| !ts.iter().any(|t| &t.name == *n)) {
        bail!("agent: no trajectory {bad} in {}", a.trajectories);
    }
    let (mut names, mut rs) = (Vec::new(), Vec::new());
    for t in ts.iter().filter(|t| a.only.is_empty() || a.only.contains(&t.name)) {
        let mut r = tr::replay(t)?;
        r.steps.truncate(a.max_steps as usize);
        names.push(t.name.clone());
        rs.push(r);
    }
    if rs.is_empty() {
        bail!("agent: {} holds no trajectories", a.trajectories);
    }
    let reach = |r: &tr::Replay| r.prompt.len() + r.steps.iter().map(|(e, ap)| e + ap.len()).sum::<usize>();
    // every GPU pass may pad M rows and a flush M more
    let ctx = (rs.iter().map(reach).max().unwrap_or(1) + 2 * a.rows as usize + 16).div_ceil(256) * 256;
    Ok((names, rs, ctx))
}

/// The run a replay of `path` at `res` is checked against (among those done), and whether its tokens
/// must equal it: the megakernel against the graph; a stateless run against its path's resident one; a
/// GPU path against the CPU reference (reported).
pub(super) fn against(
    done: &[(PathName, AgentResidency)],
    path: PathName,
    res: AgentResidency,
) -> Option<((PathName, AgentResidency), bool)> {
    let has = |k: (PathName, AgentResidency)| done.contains(&k).then_some(k);
    if path == PathName::Megakernel {
        if let Some(k) = has((PathName::Graph, res)) {
            return Some((k, true));
        }
    }
    if res == AgentResidency::Stateless {
        if let Some(k) = has((path, AgentResidency::Resident)) {
            return Some((k, true));
        }
    }
    if path.is_gpu() {
        return has((PathName::Reference, res)).map(|k| (k, false));
    }
    None
}

/// The steps whose emitted tokens differ between `a` and `b` (steps missing on either side count).
pub(super) fn differing(a: &Runs, b: &Runs) -> usize {
    let mut n = 0;
    for i in 0..a.len().max(b.len()) {
        let (x, y) = (a.get(i).map(|r| &r.1[..]).unwrap_or(&[]), b.get(i).map(|r| &r.1[..]).unwrap_or(&[]));
        n +=
            (0..x.len().max(y.len())).filter(|&j| x.get(j).map(|s| &s.emitted) != y.get(j).map(|s| &s.emitted)).count();
    }
    n
}

pub(super) fn agent_pass(c: &RunCtx, rec: &mut Record, results: &mut Results) -> Result<()> {
    let Some(a) = &c.e.agent else { return Ok(()) };
    let (names, rs, ctx) = load(a)?;
    let paths: Vec<PathName> = [PathName::Reference, PathName::Graph, PathName::Megakernel]
        .into_iter()
        .filter(|p| c.runnable.contains(p))
        .collect();
    if paths.is_empty() {
        rec.notes.push("agent: not replayed (it runs on the reference, the graph or the megakernel)".into());
        return Ok(());
    }
    let dir = results.dir.join("agent");
    std::fs::create_dir_all(&dir).map_err(|e| Error::new(format!("{}: {e}", dir.display())))?;
    // the GPU session: one for both GPU paths, sharing the weights one of them uploaded
    let mut session = match (&c.gpu, c.shared.graph.or(c.shared.mega)) {
        (Some((up, cache, defines)), Some(exec)) if paths.iter().any(|p| p.is_gpu()) => {
            say(c.bar, format!("agent: a GPU session of {ctx} positions (M = {}, prefill {})", a.rows, a.prefill_rows));
            let mut s = crate::agent::gpu::GpuSession::open(
                &c.shared.ck.config,
                *up,
                Some(&exec.borrow()),
                (a.rows, a.prefill_rows),
                ctx,
                false,
                cache,
                defines,
            )?;
            s.warm(&rs[0].prompt)?;
            Some(s)
        }
        _ => None,
    };
    // per run: its key, its steps, and on a GPU path each trajectory's final state digest
    let mut done: Vec<((PathName, AgentResidency), Runs, Vec<String>)> = Vec::new();
    let mut failed = Vec::new();
    let mut tables = String::new();
    for &path in &paths {
        for res in a.residencies() {
            super::check_interrupt()?;
            let how = format!("{}, {}", label(res), path.label());
            say(c.bar, format!("agent: {} trajectories, at most {} steps each ({how})", rs.len(), a.max_steps));
            let (mut runs, mut digests): (Runs, Vec<String>) = (Vec::new(), Vec::new());
            for (name, r) in names.iter().zip(&rs) {
                let steps = match (path, session.as_mut()) {
                    (PathName::Reference, _) => cpu::replay(c.shared.w, r, residency(res), ctx)?.steps,
                    (_, Some(s)) => {
                        s.mega = path == PathName::Megakernel;
                        let steps = crate::agent::gpu::replay(s, r, residency(res), usize::MAX, false)?;
                        digests.push(s.state_digest()?);
                        steps
                    }
                    (_, None) => bail!("agent: internal: no GPU session for the {} path", path.label()),
                };
                tables += &cpu::table(name, &how, &steps);
                runs.push((name.clone(), steps));
            }
            write_tables(&dir, &tables)?;
            cpu::write_out(&dir.join(format!("{}_{}", path.label(), label(res))), &runs, &how)?;
            let keys: Vec<_> = done.iter().map(|(k, _, _)| *k).collect();
            let check = against(&keys, path, res);
            let base = check.and_then(|(k, _)| done.iter().find(|(d, _, _)| *d == k));
            let differ = base.map_or(0, |(_, r, _)| differing(&runs, r));
            // (final states: only between two GPU runs, both digested)
            let states = base.map_or(0, |(_, _, d)| {
                if d.len() == digests.len() {
                    d.iter().zip(&digests).filter(|(a, b)| a != b).count()
                } else {
                    0
                }
            });
            let all: Vec<&StepRun> = runs.iter().flat_map(|(_, v)| v).collect();
            let entry = AgentRun {
                path: path.label().into(),
                residency: label(res).into(),
                trajectories: runs.len(),
                steps: all.len(),
                prefill_tokens: all.iter().map(|s| s.prefill_tokens).sum(),
                emitted: all.iter().map(|s| s.emitted.len()).sum(),
                prefill_ms: all.iter().map(|s| s.ttft_ms).sum(),
                decode_ms: all.iter().map(|s| s.decode_ms).sum(),
                against: check.map(|((p, r), _)| format!("{}, {}", label(r), p.label())),
                differing_steps: differ,
                differing_states: states,
                must_match: check.is_some_and(|(_, must)| must),
            };
            if entry.must_match && states > 0 {
                failed.push(format!(
                    "{how}: {states} trajectory(ies) end in other state bits than {}",
                    entry.against.clone().unwrap_or_default()
                ));
            }
            if entry.must_match && differ > 0 {
                failed.push(format!(
                    "{how}: {differ} step(s) emit other tokens than {}",
                    entry.against.clone().unwrap_or_default()
                ));
            }
            say(c.bar, line(&entry));
            rec.agent.push(entry);
            results.save(rec)?;
            done.push(((path, res), runs, digests));
        }
    }
    if !failed.is_empty() {
        bail!("agent: {}", failed.join("; "));
    }
    Ok(())
}

fn write_tables(dir: &Path, text: &str) -> Result<()> {
    let p = dir.join("tables.txt");
    std::fs::write(&p, text).map_err(|e| Error::new(format!("{}: {e}", p.display())))
}

/// One run's summary line (the summary prints these too).
pub(super) fn line(r: &AgentRun) -> String {
    let check = match (&r.against, r.must_match) {
        (None, _) => String::new(),
        (Some(a), must) => format!(
            "; {} of {} steps differ from {a}, {} final states ({})",
            r.differing_steps,
            r.steps,
            r.differing_states,
            if must { "must be 0" } else { "reported" }
        ),
    };
    format!(
        "agent ({}, {}): {} trajectories, {} steps, {} tokens prefilled in {:.1} ms, {} emitted at {:.3} ms a token, {:.1} ms in all{check}",
        r.residency,
        r.path,
        r.trajectories,
        r.steps,
        r.prefill_tokens,
        r.prefill_ms,
        r.emitted,
        r.decode_ms / r.emitted.max(1) as f64,
        r.prefill_ms + r.decode_ms
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use AgentResidency::{Resident, Stateless};
    use PathName::{Graph, Megakernel, Reference};

    #[test]
    fn each_run_is_checked_against_the_run_it_must_equal_or_is_reported_against() {
        let done = [(Reference, Resident), (Reference, Stateless), (Graph, Resident), (Graph, Stateless)];
        assert_eq!(against(&done[..0], Reference, Resident), None);
        assert_eq!(against(&done[..1], Reference, Stateless), Some(((Reference, Resident), true)));
        assert_eq!(against(&done[..2], Graph, Resident), Some(((Reference, Resident), false)));
        assert_eq!(against(&done[..3], Graph, Stateless), Some(((Graph, Resident), true)));
        assert_eq!(against(&done, Megakernel, Stateless), Some(((Graph, Stateless), true)));
        assert_eq!(against(&[(Megakernel, Resident)], Megakernel, Stateless), Some(((Megakernel, Resident), true)));
    }

    #[test]
    fn differing_counts_steps_with_other_tokens_and_missing_steps() {
        let s =
            |t: &[u32]| StepRun { emitted: t.to_vec(), prefill_tokens: 1, new_tokens: 1, ttft_ms: 0.0, decode_ms: 0.0 };
        let a: Runs = vec![("t01".into(), vec![s(&[1, 2]), s(&[3])]), ("t02".into(), vec![s(&[4])])];
        assert_eq!(differing(&a, &a.clone()), 0);
        // NEGATIVE CONTROL: one token changed, one step missing
        let mut b = a.clone();
        b[0].1[1] = s(&[5]);
        assert_eq!(differing(&a, &b), 1);
        b[1].1.clear();
        assert_eq!(differing(&a, &b), 2);
    }
}
