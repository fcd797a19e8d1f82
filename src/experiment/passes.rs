//! The passes of a run: the diff pass (every path over one token sequence, lockstep, diffs per step and
//! per instruction), the speculation pass (experiments with `speculation`: the interpreter's M-row
//! program against the diff pass's greedy tokens) and the timing pass (ms per token at each context,
//! per-kernel and in-step figures, the timelines). Each writes what it measured as it goes.

use super::kernels::{in_step_stats, kernel_stats, shape_rows, write_shapes};
use super::*;

/// Marks every diff that involves path `p` as covering only part of the sequence.
fn mark_incomplete(rec: &mut Record, pairs: &[&spec::DiffSpec], p: PathName, why: &str) {
    for (d, spec) in rec.diffs.iter_mut().zip(pairs) {
        if spec.a == p || spec.b == p {
            d.incomplete = Some(why.to_string());
        }
    }
}

/// A non-finite value in a step's capture is an error naming the path, the step and where it first
/// appears: the first instruction whose output has one (debug captures), else the first layer's hidden
/// state, else the logits. (NaN would otherwise flow through every path alike and pass the bit diffs.)
fn non_finite(path: &str, step: usize, cap: &diff::StepCapture) -> Result<()> {
    let bad = |t: &diff::Tensor| t.data.iter().position(|x| !x.is_finite());
    for (wi, op, t) in &cap.instructions {
        if let Some(e) = bad(t) {
            crate::bail!(
                "path {path}, step {step}: instruction {wi} ({op}) wrote a non-finite value to {} (element {e})",
                t.name
            );
        }
    }
    for t in cap.hidden.iter().chain(cap.logits.as_ref()) {
        if let Some(e) = bad(t) {
            crate::bail!(
                "path {path}, step {step}: {} (layer {}) holds a non-finite value (element {e})",
                t.name,
                t.layer
            );
        }
    }
    Ok(())
}

/// (2) Every path in lockstep over one sequence (the prompt, then the first path's greedy tokens, up
/// to the longest context plus the decode steps), every step compared; returns the sequence.
pub(super) fn diff_pass(c: &RunCtx, rec: &mut Record, res: &mut Results) -> Result<(Vec<u32>, Vec<PathName>)> {
    let e = c.e;
    let prompt = e.prompt_ids();
    c.bar.set_length(c.total as u64 * c.runnable.len() as u64 * (1 + (e.warmup + e.repetitions) as u64));
    let pairs: Vec<&spec::DiffSpec> =
        e.diffs.iter().filter(|d| c.runnable.contains(&d.a) && c.runnable.contains(&d.b)).collect();
    let idx = |p: PathName| c.runnable.iter().position(|q| *q == p).unwrap_or(0);
    rec.diffs = pairs.iter().map(|d| DiffResult::new(d.a.label(), d.b.label(), d.tolerance)).collect();
    c.bar.set_message("diff pass");
    say(c.bar, format!("diff pass: {} paths over {} steps", c.runnable.len(), c.total));
    // A path that fails drops out (recorded); the others go on. The first path supplies the tokens:
    // its failure ends the run.
    let mut engines: Vec<Option<Box<dyn Engine>>> = Vec::new();
    for (i, p) in c.runnable.iter().enumerate() {
        match new_engine(*p, c.shared, e) {
            Ok(eng) => engines.push(Some(eng)),
            Err(err) if i > 0 => {
                rec.notes.push(format!("path {} failed to start: {err}", p.label()));
                mark_incomplete(rec, &pairs, *p, &format!("{} failed to start; nothing compared", p.label()));
                engines.push(None);
            }
            Err(err) => return Err(err),
        }
    }
    let mut seq: Vec<u32> = Vec::with_capacity(c.total);
    let mut tok = prompt[0];
    let len = c.total as u32;
    for s in 0..c.total {
        super::check_interrupt()?;
        seq.push(tok);
        let mut caps: Vec<Option<(u32, Option<diff::StepCapture>)>> = Vec::new();
        for (i, slot) in engines.iter_mut().enumerate() {
            let out = match slot.as_mut().map(|eng| eng.step(tok, !pairs.is_empty())) {
                Some(Ok(o)) => Some(o),
                Some(Err(err)) if i > 0 => {
                    let name = c.runnable[i].label();
                    rec.notes.push(format!("path {name} failed at step {s}: {err}"));
                    let why = format!("{name} failed at step {s}; steps 0..{s} compared, no final state");
                    mark_incomplete(rec, &pairs, c.runnable[i], &why);
                    *slot = None;
                    None
                }
                Some(Err(err)) => return Err(err),
                None => None,
            };
            if let Some((_, Some(cap))) = &out {
                non_finite(c.runnable[i].label(), s, cap)?;
            }
            caps.push(out);
            c.bar.inc(1);
        }
        for (d, spec) in rec.diffs.iter_mut().zip(&pairs) {
            if let (Some((_, Some(ca))), Some((_, Some(cb)))) = (&caps[idx(spec.a)], &caps[idx(spec.b)]) {
                d.step(len, s, ca, cb);
            }
        }
        if s % 64 == 63 {
            res.save(rec)?;
        }
        tok = match (&caps[0], prompt.get(s + 1)) {
            (_, Some(t)) => *t,
            (Some((next, _)), None) => *next,
            (None, None) => crate::bail!("the first path produced no token at step {s}"),
        };
    }
    for (d, spec) in rec.diffs.iter_mut().zip(&pairs) {
        if let (Some(a), Some(b)) = (&engines[idx(spec.a)], &engines[idx(spec.b)]) {
            d.states(len, &a.states(), &b.states());
        }
    }
    // Envelope diffs are judged against their calibration diff once both are complete.
    for (i, spec) in pairs.iter().enumerate() {
        let Some(env) = spec.envelope else { continue };
        match pairs.iter().position(|c| (c.a, c.b) == (env.a, env.b)) {
            Some(j) => {
                let cal = rec.diffs[j].clone();
                rec.diffs[i].judge(&cal, env.factor);
            }
            None => rec.notes.push(format!(
                "diff {} vs {}: its calibration diff {} vs {} did not run here: no envelope verdict",
                spec.a.label(),
                spec.b.label(),
                env.a.label(),
                env.b.label()
            )),
        }
    }
    let ok: Vec<PathName> = c.runnable.iter().zip(&engines).filter(|(_, e)| e.is_some()).map(|(p, _)| *p).collect();
    for (p, _) in c.runnable.iter().zip(&engines).filter(|(_, e)| e.is_none()) {
        rec.paths.push(PathRecord {
            name: p.label().into(),
            status: "failed (see notes)".into(),
            ms_per_token_median: None,
            ms_per_token_min: None,
            ms_per_token_max: None,
            by_context: Vec::new(),
            ttft: None,
        });
    }
    res.save(rec)?;
    Ok((seq, ok))
}

/// (2b) Greedy speculation (the experiment's `speculation`): the interpreter (when the run has a CPU
/// path) and the run's GPU paths on an M-row program (M = k + 1, split GDN), for each acceptance count, over the
/// diff pass's sequence; the tokens must be the sequence's greedy tokens (`exec::spec::Forced` drafts:
/// a round's first `agree` the greedy continuation, the rest wrong). The GPU's times are its rounds'
/// (synchronised), measured.
pub(super) fn spec_pass(c: &RunCtx, seq: &[u32], rec: &mut Record, res: &mut Results) -> Result<()> {
    let Some(sp) = &c.e.speculation else { return Ok(()) };
    let prompt = c.e.prompt_ids();
    let truth = seq.get(prompt.len()..).unwrap_or(&[]);
    let steps = truth.len();
    if steps == 0 {
        rec.notes.push("speculation not run: the diff pass emitted no tokens".into());
        return Ok(());
    }
    let m = sp.k + 1;
    let mut target = h200(m);
    let need = prompt.len().div_ceil(m as usize) * m as usize + steps + m as usize;
    target.max_context = (need.div_ceil(ATTN_PART) * ATTN_PART) as u32;
    let ck = c.shared.ck;
    let prog = compile(&ck.config, "speculation", &target)?;
    let run = |path: &str, toks: Vec<u32>, stats: crate::model::spec_generate::SpecStats, ms: f64, agree| {
        let first_difference = toks.iter().zip(truth).position(|(a, b)| a != b);
        record::SpecRun {
            k: sp.k,
            agree,
            rounds: stats.rounds,
            drafted: stats.drafted,
            accepted: stats.accepted,
            tokens: toks.len(),
            identical: first_difference.is_none() && toks.len() == steps,
            first_difference,
            ms_per_token: ms / toks.len().max(1) as f64,
            path: path.into(),
        }
    };
    // the interpreter when the run has a CPU path (on a GPU-only run of the 27B it would take hours)
    let cpu = c.runnable.iter().any(|p| !p.is_gpu());
    for agree in sp.agree_counts().into_iter().filter(|_| cpu) {
        super::check_interrupt()?;
        say(c.bar, format!("speculation: k = {}, {agree} agreeing drafts a round (the interpreter, M = {m})", sp.k));
        let mut it = crate::exec::interp::Interp::new(&prog, ck)?;
        let t = std::time::Instant::now();
        let (toks, stats) =
            crate::exec::interp::spec::speculate_forced(&mut it, &prompt, truth, steps, agree as usize)?;
        rec.speculation.push(run("interpreter", toks, stats, t.elapsed().as_secs_f64() * 1e3, agree));
        res.save(rec)?;
    }
    // the GPU paths the run has: the same forced drafts on the M-row program's graph and megakernel
    let gpu_paths: Vec<(&str, bool)> = [(PathName::Graph, "graph", false), (PathName::Megakernel, "megakernel", true)]
        .into_iter()
        .filter(|(p, _, _)| c.runnable.contains(p))
        .map(|(_, n, mega)| (n, mega))
        .collect();
    if let (Some((upload, cache, defines)), false) = (&c.gpu, gpu_paths.is_empty()) {
        let mut d = crate::exec::gpu::GpuExec::new(crate::exec::gpu::Gpu::open()?, &prog, *upload, cache, defines)?;
        for (name, mega) in gpu_paths {
            for agree in sp.agree_counts() {
                super::check_interrupt()?;
                say(c.bar, format!("speculation: k = {}, {agree} agreeing drafts a round ({name}, M = {m})", sp.k));
                d.reset()?;
                let mut forced =
                    crate::exec::spec::Forced::new(truth, agree as usize, prompt.len(), ck.config.vocab as u32);
                let t = std::time::Instant::now();
                let (toks, stats) = crate::exec::spec::speculate_mtp(
                    &mut crate::exec::gpu::spec::GpuTarget { exec: &mut d, mega, overlap: false },
                    &mut forced,
                    &prompt,
                    steps,
                    None,
                )?;
                rec.speculation.push(run(name, toks, stats, t.elapsed().as_secs_f64() * 1e3, agree));
                res.save(rec)?;
            }
        }
    }
    Ok(())
}

/// (3) Each path: warm-up and repetitions of the whole sequence from a fresh state, every step timed;
/// rows are written after every repetition.
pub(super) fn timing_pass(c: &RunCtx, seq: &[u32], ok: &[PathName], rec: &mut Record, res: &mut Results) -> Result<()> {
    let (e, prog) = (c.e, c.shared.prog);
    let ctx_mark = c.total as u32;
    if e.repetitions == 0 {
        for p in ok {
            rec.paths.push(PathRecord {
                name: p.label().into(),
                status: "ran the diff pass (repetitions 0: not timed)".into(),
                ms_per_token_median: None,
                ms_per_token_min: None,
                ms_per_token_max: None,
                by_context: Vec::new(),
                ttft: None,
            });
        }
        return res.save(rec);
    }
    for p in ok {
        c.bar.set_message(format!("timing {}", p.label()));
        say(c.bar, format!("timing the {} path", p.label()));
        let mut samples: Vec<Vec<f64>> = vec![Vec::new(); c.contexts.len()];
        let mut word_ns: Option<Vec<u64>> = None;
        let mut timeline: Option<Result<Vec<u64>>> = None;
        // Time to first token per repetition: the steps that take the prompt (the last of them chooses
        // the first token), from a fresh state (not with seeks: they jump over the prompt)
        let prompt_len = e.prompt_ids().len();
        let mut ttft_ms: Vec<f64> = Vec::new();
        let mut ttft_how = "one synchronised decode step a prompt token (this path has no prefill yet: issue 28)";
        // the prompt's prefill (workload.prefill): a fresh engine each repetition, its first token
        // against the decode steps' (reported, not judged: the chunked GDN rounds otherwise)
        let mut prefilled = false;
        if e.workload.prefill && !e.workload.seek {
            let prompt = e.prompt_ids();
            for rep in 0..e.warmup + e.repetitions {
                super::check_interrupt()?;
                let mut eng = new_engine(*p, c.shared, e)?;
                let t = std::time::Instant::now();
                let Some(r) = eng.prefill(&prompt) else { break };
                let (first, how) = r?;
                let ms = t.elapsed().as_secs_f64() * 1e3;
                prefilled = true;
                ttft_how = how;
                if rep >= e.warmup {
                    ttft_ms.push(ms);
                }
                if rep + 1 == e.warmup + e.repetitions {
                    let step = seq.get(prompt_len).copied();
                    rec.notes.push(format!(
                        "{}: the prompt's prefill chose token {first} first; the decode steps of {} (the diff pass's sequence) chose {}",
                        p.label(),
                        c.runnable.first().map_or("-", |q| q.label()),
                        step.map_or("none (no step past the prompt)".into(), |t| t.to_string())
                    ));
                }
            }
        }
        for rep in 0..e.warmup + e.repetitions {
            // Per context: the step times from that position on (computed up to it, or jumped to).
            let mut by_ctx: Vec<Vec<f64>> = Vec::new();
            let mut eng = new_engine(*p, c.shared, e)?;
            if e.workload.seek {
                for &ctx in c.contexts {
                    eng = new_engine(*p, c.shared, e)?;
                    eng.seek(ctx as usize)?;
                    let mut t_ctx = Vec::with_capacity(c.steps);
                    for s in 0..c.steps {
                        super::check_interrupt()?;
                        let t = std::time::Instant::now();
                        eng.step(seq[s % seq.len()], false)?;
                        t_ctx.push(t.elapsed().as_secs_f64() * 1e3);
                        c.bar.inc(1);
                    }
                    by_ctx.push(t_ctx);
                }
            } else {
                let mut t_rep = Vec::with_capacity(seq.len());
                for &tok in seq {
                    super::check_interrupt()?;
                    let t = std::time::Instant::now();
                    eng.step(tok, false)?;
                    t_rep.push(t.elapsed().as_secs_f64() * 1e3);
                    c.bar.inc(1);
                }
                by_ctx = c.contexts.iter().map(|&ctx| t_rep[ctx as usize..ctx as usize + c.steps].to_vec()).collect();
                if !prefilled && rep >= e.warmup && (1..=t_rep.len()).contains(&prompt_len) {
                    ttft_ms.push(t_rep[..prompt_len].iter().sum());
                }
            }
            if rep < e.warmup {
                continue;
            }
            for (ci, &ctx) in c.contexts.iter().enumerate() {
                for (s, &ms) in by_ctx[ci].iter().enumerate() {
                    samples[ci].push(ms);
                    let row = StepRow { path: p.label(), context: ctx, repetition: rep - e.warmup, step: s as u32, ms };
                    res.step_row(&row)?;
                }
            }
            word_ns = eng.word_ns();
            // (graph-fast's decode steps are the graph path's: its timeline would repeat the graph's)
            if rep + 1 == e.warmup + e.repetitions && *p != PathName::GraphFast {
                timeline = eng.timeline();
            }
        }
        let track = if *p == PathName::Graph { timeline::Track::Graph } else { timeline::Track::Megakernel };
        match timeline {
            Some(Ok(raw)) => match timeline::write(&res.dir, prog, &raw, track) {
                Ok((line, words)) => {
                    rec.notes.push(line);
                    if track == timeline::Track::Graph {
                        rec.notes.push(
                            "the graph's kernels were compiled with GRAPH_STAMPS=1: every step of this record \
                             paid for the stamps (about +0.6 % of a 27B step, results/stamps_593a7d3)"
                                .into(),
                        );
                    }
                    let ceiling = rec.ceiling_gbps;
                    rec.kernels.extend(in_step_stats(prog, track.label(), &words, ctx_mark, ceiling));
                }
                Err(err) => rec.notes.push(format!("timeline not written: {err}")),
            },
            Some(Err(err)) => rec.notes.push(format!("timeline step failed: {err}")),
            None => {}
        }
        let by_context: Vec<Timing> = c
            .contexts
            .iter()
            .zip(&samples)
            .filter_map(|(ctx, v)| {
                record::summarise(v).map(|(m, lo, hi)| Timing {
                    context: *ctx,
                    ms_median: m,
                    ms_min: lo,
                    ms_max: hi,
                    samples: v.len(),
                })
            })
            .collect();
        if let Some(ns) = &word_ns {
            kernel_stats(prog, p.label(), ns, ctx_mark, rec, res)?;
            if e.shapes && *p == PathName::Graph {
                if let Some(d) = c.shared.graph {
                    say(c.bar, "reading each GEMV word's weights (shapes)");
                    let words: Vec<usize> = (0..prog.words.len())
                        .filter(|&i| !crate::exec::gpu::reads::weight_stream(&prog.words[i]).is_empty())
                        .collect();
                    match d.borrow_mut().time_weight_reads(&words, 5) {
                        Ok(read) => {
                            let ms: Vec<f64> = words.iter().map(|&w| ns[w] as f64 / 1e6).collect();
                            rec.shapes = shape_rows(prog, &words, &ms, &read, rec.ceiling_gbps);
                            write_shapes(&res.dir, &rec.shapes)?;
                        }
                        Err(err) => rec.notes.push(format!("shapes not measured: {err}")),
                    }
                }
            }
        }
        let all: Vec<f64> = samples.concat();
        let s = record::summarise(&all);
        rec.paths.push(PathRecord {
            name: p.label().into(),
            status: "ran".into(),
            ms_per_token_median: s.map(|x| x.0),
            ms_per_token_min: s.map(|x| x.1),
            ms_per_token_max: s.map(|x| x.2),
            by_context,
            ttft: record::summarise(&ttft_ms).map(|(m, lo, hi)| record::Ttft {
                prompt_tokens: prompt_len as u32,
                how: ttft_how.into(),
                ms_median: m,
                ms_min: lo,
                ms_max: hi,
                samples: ttft_ms.len(),
            }),
        });
        res.save(rec)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_non_finite_output_names_the_path_step_and_first_instruction() {
        let t = |name: &str, data: Vec<f32>| diff::Tensor {
            name: name.into(),
            layer: 0,
            cols: data.len(),
            bf16: false,
            data,
        };
        let mut cap = diff::StepCapture {
            instructions: vec![
                (3, "GemvNorm".into(), t("q", vec![1.0, 2.0])),
                (7, "AttnPv".into(), t("attn", vec![0.0, f32::NAN])),
            ],
            hidden: vec![t("h", vec![f32::INFINITY])],
            logits: Some(t("logits", vec![1.0])),
            token: 0,
        };
        let e = non_finite("graph", 5, &cap).unwrap_err().to_string();
        assert!(e.contains("path graph, step 5: instruction 7 (AttnPv)") && e.contains("element 1"), "{e}");
        cap.instructions.clear();
        assert!(non_finite("graph", 5, &cap).unwrap_err().to_string().contains("h (layer 0)"));
        cap.hidden.clear();
        assert!(non_finite("graph", 5, &cap).is_ok());
    }
}
