//! `mk gpu agent`: the fixed-count replay of the agent trajectories on both GPU paths (issue 29 items 3-5
//! on the GPU; `agent::gpu`: one resident session, appends as M-row passes, decoding as one-row steps).
//! Checks, bit for bit on the tokens: the megakernel emits the graph's tokens at every step; with
//! `--stateless`, a session re-run from empty every step (the whole history appended) emits the resident
//! session's; with `--control`, a hand-off that forgets the state (`GpuSession::forget_state`) must emit
//! different tokens (the negative control: the comparison can fail). Times: per step the tokens
//! prefilled, time to first token, decode ms a token (measured, wall time of this process), the totals
//! and the hand-offs' cost; with `--out`, each run's steps.csv and time chart.
//!
//! Owns: the check, its table and its records. Refuses: an unknown trajectory, M outside 2..=8.

use std::path::PathBuf;

use crate::agent::gpu::{replay, GpuSession, Moves};
use crate::agent::replay::{table, write_out, Residency, StepRun};
use crate::agent::trajectory as tr;
use crate::bail;
use crate::error::{Error, Result};
use crate::exec::gpu::Defines;
use crate::model::checkpoint::Checkpoint;
use crate::model::upload::Upload;

/// What `mk gpu agent` runs.
pub struct Args {
    pub dir: PathBuf,
    pub trajectories: PathBuf,
    pub only: Vec<String>,
    pub max_steps: usize,
    pub m: u32,
    pub stateless: bool,
    pub control: bool,
    /// Also the composed replay (issue 30): the calls under the grammar, each mechanism switched off
    /// once, and the grammar off as its negative control (programs compiled with a head mask).
    pub grammar: bool,
    /// Also a resident replay parked in host memory and restored between steps (the tokens must be the
    /// resident run's; the park and restore timed against re-prefilling the history).
    pub park: bool,
    /// Also the trajectories interleaved round-robin as sessions taking turns on the GPU, each parked in
    /// its own host slot between its steps (each must emit what it emits alone).
    pub interleaved: bool,
    /// Also the resident graph replay with greedy speculation at these acceptance counts (each of a
    /// round's k = M - 1 drafts; the first so many the plain continuation): the plain run's tokens.
    pub speculate_agree: Vec<usize>,
    /// Appends' whole multiples of this many rows through a prefill program on the graph path (issue 28;
    /// 0: none, appends by M-row passes). The appends are anchored (`GpuSession::append`): the stateless
    /// run's tokens and final states must still equal the resident run's; with `control`, unanchored
    /// appends must change the state's bits.
    pub prefill: u32,
    pub out: Option<PathBuf>,
    pub cache: PathBuf,
    pub defines: Defines,
}

type Runs = Vec<(String, Vec<StepRun>)>;

pub fn run(a: &Args) -> Result<()> {
    if !(2..=8).contains(&a.m) {
        bail!("gpu agent: --m {} (an M-row program has 2-8 rows)", a.m);
    }
    if let Some(j) = a.speculate_agree.iter().find(|&&j| j >= a.m as usize) {
        bail!("gpu agent: --speculate-agree {j} (a round has {} drafts: 0-{} may agree)", a.m - 1, a.m - 1);
    }
    let text = std::fs::read_to_string(&a.trajectories)
        .map_err(|e| Error::new(format!("{}: {e}", a.trajectories.display())))?;
    let ts = tr::from_json(&text)?;
    if let Some(bad) = a.only.iter().find(|n| !ts.iter().any(|t| &t.name == *n)) {
        bail!("gpu agent: no trajectory {bad} in {}", a.trajectories.display());
    }
    let chosen: Vec<_> = ts.iter().filter(|t| a.only.is_empty() || a.only.contains(&t.name)).collect();
    if chosen.is_empty() || a.max_steps == 0 {
        bail!("gpu agent: nothing to replay ({} trajectories chosen, --max-steps {})", chosen.len(), a.max_steps);
    }
    let rs = chosen.iter().map(|t| tr::replay(t)).collect::<Result<Vec<_>>>()?;
    let reach =
        |r: &tr::Replay| r.prompt.len() + r.steps.iter().take(a.max_steps).map(|(e, ap)| e + ap.len()).sum::<usize>();
    // a stateless step appends the whole history: the same reach; every pass may pad M rows, a flush M;
    // a composed step's call may run to MAX_CALL tokens
    let most_steps = rs.iter().map(|r| r.steps.len().min(a.max_steps)).max().unwrap_or(0);
    let calls = if a.grammar { MAX_CALL * most_steps } else { 0 };
    let ctx = (rs.iter().map(reach).max().unwrap_or(1) + calls + 2 * a.m as usize + 16).div_ceil(256) * 256;
    let ck = Checkpoint::open(&a.dir)?;
    let up = Upload::new(&ck)?;
    let t0 = std::time::Instant::now();
    let mut s = GpuSession::open(&ck.config, &up, None, (a.m, a.prefill), ctx, a.grammar, &a.cache, &a.defines)?;
    let (free, total) = s.one.mem_info()?;
    println!(
        "gpu agent: {} trajectories (at most {} steps each), context {ctx}, M = {}; both programs loaded in {:.1} s, {:.1} of {:.1} GiB free",
        rs.len(),
        a.max_steps,
        a.m,
        t0.elapsed().as_secs_f64(),
        free as f64 / (1u64 << 30) as f64,
        total as f64 / (1u64 << 30) as f64
    );
    let tools = if a.grammar { Some(crate::grammar::parse_tools(&tools_of(&text)?)?) } else { None };
    let mut bad = 0;
    let mut summary = Vec::new();
    let (mut by_path, mut states): (Vec<Runs>, Vec<Vec<String>>) = (Vec::new(), Vec::new());
    for (path, mega) in [("graph", false), ("megakernel", true)] {
        s.mega = mega;
        warm(&mut s, &rs[0].prompt, tools.as_deref())?;
        let (runs, moves, digests) = replay_all(&mut s, &chosen, &rs, Residency::Resident, a.max_steps, path, false)?;
        summary.push(line(&format!("{path}, resident"), &runs, &moves));
        records(a, path, &runs)?;
        by_path.push(runs);
        states.push(digests);
    }
    bad += compare("the megakernel", &by_path[1], "the graph", &by_path[0]);
    bad += compare_states("the megakernel", &states[1], "the graph", &states[0], &chosen);
    if a.stateless {
        s.mega = false;
        let (runs, moves, digests) =
            replay_all(&mut s, &chosen, &rs, Residency::Stateless, a.max_steps, "graph", false)?;
        summary.push(line("graph, stateless", &runs, &moves));
        records(a, "graph_stateless", &runs)?;
        // (with a prefill program too: the resident session's appends are anchored)
        bad += compare("the stateless session", &runs, "the resident one", &by_path[0]);
        bad += compare_states("the stateless session", &digests, "the resident one", &states[0], &chosen);
        let (r, s0) = (total_ms(&by_path[0]), total_ms(&runs));
        summary.push(format!("resident / stateless (graph): {:.3}x the time", r / s0));
    }
    if a.control {
        // NEGATIVE CONTROL: the first trajectory with a hand-off that forgets the state
        s.mega = false;
        s.forget_state = true;
        let r = replay(&mut s, &rs[0], Residency::Resident, a.max_steps, false);
        s.forget_state = false;
        bad += control("a hand-off that forgets the state", r, &chosen[0].name, &by_path[0]);
        if a.prefill > 0 && rs[0].steps.len().min(a.max_steps) > 1 {
            // NEGATIVE CONTROL: appends through the prefill program not anchored: the state must differ
            s.unanchored = true;
            let r = replay(&mut s, &rs[0], Residency::Resident, a.max_steps, false).and_then(|_| s.state_digest());
            s.unanchored = false;
            match r {
                Ok(d) if d != states[0][0] => {
                    println!("negative control caught: unanchored appends change the state's bits")
                }
                Ok(_) => {
                    println!("negative control NOT caught: unanchored appends left the state's bits as anchored ones");
                    bad += 1;
                }
                Err(e) => {
                    println!("(control) unanchored appends: the run failed ({e}): the control proves nothing");
                    bad += 1;
                }
            }
        }
    }
    if a.park {
        s.mega = false;
        let (runs, moves, digests) =
            replay_all(&mut s, &chosen, &rs, Residency::Resident, a.max_steps, "graph, parked between steps", true)?;
        summary.push(line("graph, parked", &runs, &moves));
        bad += compare("the parked session", &runs, "the resident one", &by_path[0]);
        bad += compare_states("the parked session", &digests, "the resident one", &states[0], &chosen);
        park_table(&moves, &by_path[0]);
        if a.control && rs[0].steps.len().min(a.max_steps) > 1 {
            // NEGATIVE CONTROL: restores that leave the GDN states as the reset left them (zero)
            s.restore_skips = "recurrent_state.";
            let r = replay(&mut s, &rs[0], Residency::Resident, a.max_steps, true);
            s.restore_skips = "";
            bad += control("a restore without the GDN states", r, &chosen[0].name, &by_path[0]);
        }
    }
    if a.interleaved {
        s.mega = false;
        s.moves = Moves::default();
        let (steps, digests) = crate::agent::gpu::replay_interleaved(&mut s, &rs, a.max_steps)?;
        let runs: Runs = chosen.iter().map(|t| t.name.clone()).zip(steps).collect();
        for (name, steps) in &runs {
            print!("{}", table(name, "resident, interleaved, graph", steps));
        }
        summary.push(line("graph, interleaved", &runs, &s.moves));
        bad += compare("the interleaved sessions", &runs, "each alone", &by_path[0]);
        bad += compare_states("the interleaved sessions", &digests, "each alone", &states[0], &chosen);
    }
    for &agree in &a.speculate_agree {
        s.mega = false;
        s.moves = Moves::default();
        let (mut runs, mut digests): (Runs, Vec<String>) = (Vec::new(), Vec::new());
        let mut st = crate::model::spec_generate::SpecStats::default();
        for ((t, r), (_, plain)) in chosen.iter().zip(&rs).zip(&by_path[0]) {
            let (steps, x) = crate::agent::gpu::replay_speculative(&mut s, r, plain, agree, a.max_steps)?;
            digests.push(s.state_digest()?);
            print!(
                "{}",
                table(&t.name, &format!("resident, graph, speculation: {agree} of {} agree", a.m - 1), &steps)
            );
            st.rounds += x.rounds;
            st.accepted += x.accepted;
            runs.push((t.name.clone(), steps));
        }
        let what = format!("graph, spec. {agree}/{}", a.m - 1);
        summary.push(line(&what, &runs, &s.moves));
        summary.push(format!(
            "{:<22} {} rounds, {:.2} tokens a round (derived: accepted / rounds + 1)",
            "",
            st.rounds,
            st.accepted as f64 / st.rounds.max(1) as f64 + 1.0
        ));
        bad += compare(&format!("speculation at {agree} agreeing"), &runs, "plain decoding", &by_path[0]);
        bad += compare_states(
            &format!("speculation at {agree} agreeing"),
            &digests,
            "plain decoding",
            &states[0],
            &chosen,
        );
    }
    if let Some(tools) = &tools {
        bad += composed(&mut s, &chosen, &rs, tools, a.max_steps, &mut summary)?;
    }
    println!(
        "\n{:<22} {:>9} {:>9} {:>10} {:>9} {:>11} {:>9}",
        "run", "prefill", "emitted", "prefill s", "tok/s", "ms/token", "total s"
    );
    for l in &summary {
        println!("{l}");
    }
    if bad > 0 {
        bail!("gpu agent: {bad} check(s) failed");
    }
    println!(
        "verdict: identical tokens ({} trajectories; graph = megakernel{}{})",
        rs.len(),
        if a.stateless { " = stateless" } else { "" },
        if a.grammar {
            "; every composed variant's calls the same, every ended call valid, the control caught"
        } else {
            ""
        }
    );
    Ok(())
}

/// A composed step's call: at most this many tokens (a call that has not ended by then is cut).
pub const MAX_CALL: usize = 160;

/// The trajectories file's tools list (JSON text).
fn tools_of(text: &str) -> Result<String> {
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| Error::new(format!("gpu agent: {e}")))?;
    Ok(v["tools"].to_string())
}

/// The composed replay (issue 30 item 6) in five variants: the grammar with every mechanism (graph), the
/// mask computed before the step instead of under it, forced spans as rows, the megakernel, the grammar
/// off (the negative control). Returns the failed checks.
fn composed(
    s: &mut GpuSession,
    chosen: &[&tr::Trajectory],
    rs: &[tr::Replay],
    tools: &[crate::grammar::Tool],
    max_steps: usize,
    summary: &mut Vec<String>,
) -> Result<usize> {
    use crate::agent::composed::{replay as composed_replay, Mechanisms};
    let on = Mechanisms { grammar: true, overlap: true, spans: false };
    let variants = [
        ("graph, grammar", false, on),
        ("graph, mask before", false, Mechanisms { overlap: false, ..on }),
        ("graph, spans as rows", false, Mechanisms { spans: true, ..on }),
        ("megakernel, grammar", true, Mechanisms { overlap: false, ..on }),
        ("graph, grammar OFF", false, Mechanisms { grammar: false, ..on }),
    ];
    let mut bad = 0;
    let mut first: Option<Vec<Vec<u32>>> = None;
    summary.push(format!(
        "\ncomposed replay (calls under the grammar; MAX_CALL {MAX_CALL}):\n{:<22} {:>6} {:>6} {:>6} {:>8} {:>7} {:>7} {:>13} {:>12}",
        "variant", "calls", "ended", "valid", "tokens", "passes", "forced", "ms/call token", "matcher us/t"
    ));
    for (what, mega, mech) in variants {
        s.mega = mega;
        let mut steps = Vec::new();
        for (t, r) in chosen.iter().zip(rs) {
            steps.extend(composed_replay(s, t, r, tools, mech, max_steps, MAX_CALL)?);
        }
        let calls: Vec<_> = steps.iter().filter(|c| !c.call.is_empty()).collect();
        let n = |f: &dyn Fn(&&crate::agent::composed::ComposedStep) -> bool| calls.iter().filter(|c| f(c)).count();
        let (ended, valid) = (n(&|c| c.ended), n(&|c| c.valid));
        let toks: usize = calls.iter().map(|c| c.call.len()).sum();
        let ms: f64 = calls.iter().map(|c| c.call_ms).sum();
        let us: f64 = calls.iter().map(|c| c.matcher_us).sum();
        summary.push(format!(
            "{what:<22} {:>6} {ended:>6} {valid:>6} {toks:>8} {:>7} {:>7} {:>13.3} {:>12.1}",
            calls.len(),
            calls.iter().map(|c| c.passes).sum::<usize>(),
            calls.iter().map(|c| c.forced).sum::<usize>(),
            ms / toks.max(1) as f64,
            us / toks.max(1) as f64
        ));
        // every step's emitted tokens: the free ones, then the call's
        let tokens: Vec<Vec<u32>> = steps.iter().map(|c| [c.free.as_slice(), c.call.as_slice()].concat()).collect();
        let admitted = n(&|c| c.admitted);
        if !mech.grammar {
            // the negative control: unmasked calls, which the grammar and the checker must refuse
            let refused = n(&|c| !c.admitted && !c.valid);
            if calls.is_empty() || refused == 0 {
                bad += 1;
                println!(
                    "composed: negative control NOT caught: no unconstrained call was refused ({} calls)",
                    calls.len()
                );
            } else {
                println!(
                    "composed: negative control caught: {refused} of {} unconstrained calls refused by the grammar and the checker",
                    calls.len()
                );
            }
            continue;
        }
        // with the grammar: every call (a cut one too) a sequence the grammar admits, every ended one valid
        if calls.is_empty() || admitted != calls.len() {
            bad += 1;
            println!(
                "composed, {what}: {} of {} calls NOT admitted by a fresh matcher",
                calls.len() - admitted,
                calls.len()
            );
        }
        if let Some(i) = calls.iter().position(|c| c.ended && !c.valid) {
            bad += 1;
            println!("composed, {what}: call {i} ended and does NOT validate");
        }
        if ended == 0 {
            println!("composed, {what}: no call ended within {MAX_CALL} tokens (validity checked on ended calls only)");
        }
        match &first {
            None => first = Some(tokens),
            Some(f) if *f != tokens => {
                bad += 1;
                let at = f.iter().zip(&tokens).position(|(x, y)| x != y).unwrap_or(0);
                println!("composed, {what}: the emitted tokens DIFFER from the first variant's at step {at}");
            }
            _ => {}
        }
    }
    Ok(bad)
}

/// Captures both programs' graphs (and warms the megakernel) before anything is timed.
/// With `tools` (programs with a head mask) also a constrained step of each kind: the graph's two split
/// graphs (`step_overlapped`) are captured here, not in the first timed call (session 30's run3 timed
/// that capture in its first variant).
fn warm(s: &mut GpuSession, prompt: &[u32], tools: Option<&[crate::grammar::Tool]>) -> Result<()> {
    let last = s.warm(prompt)?;
    if let Some(tools) = tools {
        use crate::grammar::decode::{Choose, Opts};
        use crate::grammar::{Choice, Format, ToolMatcher};
        let fmt = Format { choice: Choice::Required, thinking: false, parallel: false };
        let o = Opts { choose: Choose::InArgmax, masked_head_max: 0, forced_spans: false, max_tokens: 2 };
        for (rows, overlap) in [(false, true), (false, false), (true, false)] {
            s.constrained(
                &[last],
                &mut ToolMatcher::new(tools, fmt)?,
                &Opts { forced_spans: rows, ..o },
                rows,
                overlap,
            )?;
        }
    }
    s.reset()
}

fn replay_all(
    s: &mut GpuSession,
    chosen: &[&tr::Trajectory],
    rs: &[tr::Replay],
    residency: Residency,
    max_steps: usize,
    path: &str,
    park: bool,
) -> Result<(Runs, Moves, Vec<String>)> {
    s.moves = Moves::default();
    let (mut runs, mut digests) = (Vec::new(), Vec::new());
    for (t, r) in chosen.iter().zip(rs) {
        let steps = replay(s, r, residency, max_steps, park)?;
        print!("{}", table(&t.name, &format!("{residency:?}, {path}").to_lowercase(), &steps));
        runs.push((t.name.clone(), steps));
        digests.push(s.state_digest()?);
    }
    Ok((runs, s.moves.clone(), digests))
}

/// Trajectories whose final states (digests) differ between two runs, named; the count.
fn compare_states(what: &str, got: &[String], against: &str, want: &[String], names: &[&tr::Trajectory]) -> usize {
    let bad: Vec<&str> =
        got.iter().zip(want).zip(names).filter(|((g, w), _)| g != w).map(|(_, t)| t.name.as_str()).collect();
    if !bad.is_empty() || got.len() != want.len() {
        println!("{what}: the final state DIFFERS from {against}'s in bits ({})", bad.join(", "));
    }
    bad.len() + usize::from(got.len() != want.len())
}

/// Each park and restore against re-prefilling the parked history at the resident run's prefill rate
/// (derived: its prefill ms over its tokens), and the history above which a restore is the cheaper.
fn park_table(m: &Moves, resident: &Runs) {
    let all: Vec<&StepRun> = resident.iter().flat_map(|(_, v)| v).collect();
    let per_token =
        all.iter().map(|s| s.ttft_ms).sum::<f64>() / all.iter().map(|s| s.prefill_tokens).sum::<usize>().max(1) as f64;
    println!(
        "park / restore (graph; {:.2} GB parked in all): re-prefill {per_token:.3} ms a token (the resident run's prefill rate, derived)",
        m.park_bytes as f64 / 1e9
    );
    println!(
        "{:>9} {:>9} {:>11} {:>14} {:>22}",
        "history", "park ms", "restore ms", "re-prefill ms", "restore pays above"
    );
    for &(pos, park, restore) in &m.parked {
        println!(
            "{pos:>9} {park:>9.2} {restore:>11.2} {:>14.1} {:>19.1} tokens",
            pos as f64 * per_token,
            (park + restore) / per_token
        );
    }
}

fn total_ms(runs: &Runs) -> f64 {
    runs.iter().flat_map(|(_, v)| v).map(|s| s.ttft_ms + s.decode_ms).sum()
}

/// A summary line: tokens prefilled and emitted, prefill seconds and tokens a second, decode ms a token,
/// the total; then the hand-offs and flushes.
fn line(what: &str, runs: &Runs, m: &Moves) -> String {
    let all: Vec<&StepRun> = runs.iter().flat_map(|(_, v)| v).collect();
    let p: usize = all.iter().map(|s| s.prefill_tokens).sum();
    let e: usize = all.iter().map(|s| s.emitted.len()).sum();
    let ps: f64 = all.iter().map(|s| s.ttft_ms).sum::<f64>() / 1e3;
    let ds: f64 = all.iter().map(|s| s.decode_ms).sum::<f64>() / 1e3;
    format!(
        "{what:<22} {p:>9} {e:>9} {ps:>10.2} {:>9.0} {:>11.3} {:>9.2}\n{:<22} {} hand-offs ({:.2} GB, {:.1} ms), {} flushes ({:.1} ms), {} passes, {} prefill steps ({} tokens re-run), {} short-append steps",
        p as f64 / ps.max(1e-9),
        ds * 1e3 / e.max(1) as f64,
        ps + ds,
        "",
        m.handoffs,
        m.bytes as f64 / 1e9,
        m.handoff_ms,
        m.flushes,
        m.flush_ms,
        m.passes,
        m.prefill_steps,
        m.rerun_tokens,
        m.short_steps
    )
}

/// A negative control's run (trajectory `name`, wrong on purpose) against the correct run's first
/// trajectory: caught when its tokens differ (a run that failed proves nothing). Returns the failed
/// checks (0 or 1).
fn control(what: &str, r: Result<Vec<StepRun>>, name: &str, want: &Runs) -> usize {
    let caught = match r {
        Ok(steps) => compare(&format!("(control) {what}"), &[(name.to_string(), steps)], "", &want[..1]) > 0,
        Err(e) => {
            println!("(control) {what}: the run failed ({e}): the control proves nothing");
            false
        }
    };
    if caught {
        println!("negative control caught: {what} changes the tokens");
        0
    } else {
        println!("negative control NOT caught: the tokens did not change with {what}");
        1
    }
}

/// Prints the first step whose tokens differ; returns the number of differing steps.
fn compare(what: &str, got: &[(String, Vec<StepRun>)], against: &str, want: &[(String, Vec<StepRun>)]) -> usize {
    let mut differing = 0;
    if got.len() != want.len() || got.iter().zip(want).any(|((_, g), (_, w))| g.len() != w.len()) {
        println!("{what}: a different number of trajectories or steps than {against}");
        return 1;
    }
    for ((name, g), (_, w)) in got.iter().zip(want) {
        for (i, (gs, ws)) in g.iter().zip(w).enumerate() {
            if gs.emitted != ws.emitted {
                if differing == 0 {
                    let at = gs.emitted.iter().zip(&ws.emitted).position(|(x, y)| x != y).unwrap_or(0);
                    println!(
                        "{what}: {name} step {i} DIFFERS from {} at emitted token {at} ({} against {})",
                        if against.is_empty() { "the correct run" } else { against },
                        gs.emitted.get(at).copied().unwrap_or(u32::MAX),
                        ws.emitted.get(at).copied().unwrap_or(u32::MAX)
                    );
                }
                differing += 1;
            }
        }
    }
    differing
}

/// With `--out`: the run's steps.csv and time chart, and its command.txt (the command line, the git
/// sha, the GPU) in `out`/`name`.
fn records(a: &Args, name: &str, runs: &Runs) -> Result<()> {
    let Some(out) = &a.out else { return Ok(()) };
    let dir = out.join(name);
    write_out(&dir, runs, &format!("{name}, GPU"))?;
    let (sha, dirty) = crate::experiment::record::git_state();
    let gpu = crate::exec::gpu::device::gpu().map_or_else(|| "no GPU".to_string(), |(n, d)| format!("{n}, driver {d}"));
    let text = format!(
        "{}\ngit sha {sha}{}\n{gpu}\n",
        std::env::args().collect::<Vec<_>>().join(" "),
        if dirty { " (dirty)" } else { "" }
    );
    let path = dir.join("command.txt");
    std::fs::write(&path, text).map_err(|e| Error::new(format!("{}: {e}", path.display())))
}
