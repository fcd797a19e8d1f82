//! `mk run`: an experiment spec in, a results folder out. Wires model -> compiler -> executors, diffs
//! the paths bit for bit, times them, records everything as it is produced, charts from the files.
//!
//! A run: (1) resolve the model (a preset's synthetic checkpoint is generated into `cache/` the first
//! time) and compile its program; (2) a diff pass: every available path in lockstep on one token
//! sequence (the prompt, then the first path's greedy choices, fed to all) up to the longest context
//! plus the decode steps, each step's captures compared for every diff pair, then the final states;
//! (3) a timing pass per path: warm-up and repetitions of the whole sequence from a fresh state, each
//! step timed; a context c is measured on the steps [c, c + decode_steps); (4) charts.
//! Refuses: running a path this machine cannot run (it is recorded as skipped, with the reason).

mod agent;
pub mod chart;
pub mod diff;
mod kernels;
pub mod passes;
pub mod paths;
pub mod record;
pub mod spec;
pub mod timeline;

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use diff::DiffResult;
use paths::{Engine, InterpEngine, ReferenceEngine};
use record::{InstrRow, PathRecord, Record, Results, StepRow, Timing};
use spec::{Experiment, ModelSpec, PathName};

use crate::bail;
use crate::compiler::{compile, h200};
use crate::error::{Context, Result};
use crate::isa::access::ATTN_PART;
use crate::isa::Program;
use crate::model::checkpoint::Checkpoint;
use crate::model::config::ModelConfig;
use crate::model::forward::Weights;

/// Where the run writes and caches.
pub struct RunOptions {
    pub results_root: PathBuf,
    pub cache_root: PathBuf,
    pub spec_file: String,
    pub command: Vec<String>,
    /// GEMV unit shapes of the program compiled for the run.
    pub units: crate::isa::UnitPolicy,
    /// Output rows per GEMV unit of that program.
    pub unit_rows: u32,
    /// GDN lowering of that program.
    pub gdn: crate::isa::GdnLowering,
}

/// Where a preset's synthetic checkpoint lives in the cache.
fn preset_dir(cache: &Path, name: &str, seed: u64) -> PathBuf {
    cache.join(format!("{name}-seed{seed}"))
}

/// The checkpoint folder a model spec names, generating a preset's synthetic checkpoint on first use.
pub fn resolve_model(m: &ModelSpec, cache: &Path, progress: &indicatif::ProgressBar) -> Result<PathBuf> {
    match m {
        ModelSpec::Checkpoint { path } => {
            let p = PathBuf::from(path);
            if !p.join("config.json").is_file() {
                bail!("experiment: checkpoint {path} not found (no config.json there)");
            }
            Ok(p)
        }
        ModelSpec::Preset { name, seed } => {
            let cfg = ModelConfig::preset(name)?;
            let dir = preset_dir(cache, name, *seed);
            if !dir.join("config.json").is_file() {
                // (written last: its absence means incomplete)
                say(
                    progress,
                    format!("generating the synthetic {name} checkpoint (seed {seed}) into {}", dir.display()),
                );
                crate::model::synth::write_checkpoint(&cfg, *seed, &dir)?;
            }
            Ok(dir)
        }
    }
}

/// What the engines of one run share: the model, its program, and the GPU upload.
struct Shared<'a> {
    w: &'a Weights<'a>,
    /// The noise twin's weights (`SumOrder::Reversed`), when a path asks for them.
    w_reordered: Option<&'a Weights<'a>>,
    /// Fast mode's weights (`Activations::Fp8Dynamic`), when a path asks for them.
    w_fast: Option<&'a Weights<'a>>,
    prog: &'a Program,
    ck: &'a Checkpoint,
    graph: Option<&'a std::cell::RefCell<crate::exec::gpu::GpuExec>>,
    mega: Option<&'a std::cell::RefCell<crate::exec::gpu::GpuExec>>,
    graph_fast: Option<&'a std::cell::RefCell<crate::exec::gpu::GpuExec>>,
    /// The prefill programs (workload.prefill) of the graph path (exact mode) and of graph-fast.
    prefill: Option<&'a std::cell::RefCell<crate::exec::gpu::GpuExec>>,
    prefill_fast: Option<&'a std::cell::RefCell<crate::exec::gpu::GpuExec>>,
}

fn new_engine<'a>(p: PathName, s: &Shared<'a>, e: &Experiment) -> Result<Box<dyn Engine + 'a>> {
    Ok(match (p, if p == PathName::GraphFast { s.graph_fast } else { s.graph }, s.mega) {
        (PathName::Reference, _, _) => Box::new(ReferenceEngine::new(s.w, s.prog.target.max_context as usize)),
        (PathName::ReferenceReordered, _, _) => match s.w_reordered {
            Some(w) => Box::new(ReferenceEngine::new(w, s.prog.target.max_context as usize)),
            None => bail!("path reference-reordered: its weights were not built"),
        },
        (PathName::ReferenceFast, _, _) => match s.w_fast {
            Some(w) => Box::new(ReferenceEngine::new(w, s.prog.target.max_context as usize)),
            None => bail!("path reference-fast: its weights were not built"),
        },
        (PathName::Interpreter, _, _) => Box::new(InterpEngine::new(s.prog, s.ck, e.shuffle_seed, e.debug)?),
        (PathName::Graph | PathName::GraphFast, Some(d), _) => {
            let mut g = paths::GpuEngine::new(d, false, e.debug)?;
            g.prefill = if p == PathName::GraphFast { s.prefill_fast } else { s.prefill };
            Box::new(g)
        }
        (PathName::Megakernel, _, Some(d)) => Box::new(paths::GpuEngine::new(d, true, e.debug)?),
        _ => bail!("path {} is not available", p.label()),
    })
}

/// What the passes of one run share.
struct RunCtx<'r, 'a> {
    e: &'r Experiment,
    shared: &'r Shared<'a>,
    runnable: &'r [PathName],
    contexts: &'r [u32],
    steps: usize,
    total: usize,
    bar: &'r indicatif::ProgressBar,
    /// The GPU paths' upload, kernel cache and tunables (the speculation pass builds its M-row program's
    /// executor from them); None without a GPU path.
    gpu: Option<(&'r crate::model::upload::Upload<'a>, &'r Path, crate::exec::gpu::Defines)>,
}

/// Runs an experiment; returns the results folder.
/// A phase line: above the progress bar on a terminal, a plain line otherwise (a pipe or a log sees
/// every phase).
pub(crate) fn say(bar: &indicatif::ProgressBar, msg: impl AsRef<str>) {
    if bar.is_hidden() {
        println!("{}", msg.as_ref());
    } else {
        bar.println(msg.as_ref());
    }
}

/// Set by Ctrl-C during a run: the passes stop at the next step and the record says "interrupted".
static INTERRUPTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// An error once Ctrl-C was pressed (the passes call it before every step).
pub fn check_interrupt() -> Result<()> {
    if INTERRUPTED.load(std::sync::atomic::Ordering::SeqCst) {
        crate::bail!("interrupted (Ctrl-C): the record says so; its figures are partial");
    }
    Ok(())
}

/// Installs the Ctrl-C handler once per process (a second press ends the process at once).
fn catch_ctrl_c() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = ctrlc::set_handler(|| {
            if INTERRUPTED.swap(true, std::sync::atomic::Ordering::SeqCst) {
                std::process::exit(130);
            }
        });
    });
}

pub fn run(e: &Experiment, opts: &RunOptions) -> Result<PathBuf> {
    catch_ctrl_c();
    let bar =
        if std::io::stdout().is_terminal() { indicatif::ProgressBar::new(0) } else { indicatif::ProgressBar::hidden() };
    bar.set_style(
        indicatif::ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:40} {pos}/{len} steps {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let gpu = paths::gpu();
    let model_spec = match (&gpu, &e.model_with_gpu) {
        (Some(_), Some(m)) => m,
        _ => &e.model,
    };
    // A preset's checkpoint is not generated when no path can run here (a GPU-only experiment without
    // a GPU: 27 GB for the 27B); the record says nothing ran.
    // Each path's availability, asked once (a GPU path reads the driver's /proc entry).
    let unavailable: Vec<(PathName, Option<String>)> = e.paths.iter().map(|p| (*p, paths::unavailable(*p))).collect();
    let nothing_runs = unavailable.iter().all(|(_, why)| why.is_some());
    let ck = match model_spec {
        ModelSpec::Preset { name, seed }
            if nothing_runs
                && !preset_dir(&opts.cache_root, name, *seed).join("model.safetensors.index.json").is_file() =>
        {
            None
        }
        _ => {
            let ck = Checkpoint::open(&resolve_model(model_spec, &opts.cache_root, &bar)?)?;
            // Every value of every tensor, once, before any path reads one (a NaN weight would
            // otherwise flow through every path alike and pass every diff).
            say(&bar, "scanning every weight value");
            ck.deep_check()?;
            Some(ck)
        }
    };
    let cfg = match (&ck, model_spec) {
        (Some(ck), _) => ck.config.clone(),
        (None, ModelSpec::Preset { name, .. }) => ModelConfig::preset(name)?,
        (None, ModelSpec::Checkpoint { .. }) => bail!("experiment: internal: a checkpoint spec is always opened"),
    };
    let contexts = e.contexts();
    let steps = e.workload.decode_steps as usize;
    let need = *contexts.iter().max().unwrap_or(&1) as usize + steps;
    let mut target = h200(1);
    target.units = opts.units;
    target.gemv_unit_rows = opts.unit_rows;
    target.gdn = opts.gdn;
    target.max_context = target.max_context.max((need.div_ceil(ATTN_PART) * ATTN_PART) as u32);
    let name = match model_spec {
        ModelSpec::Preset { name, .. } => name.clone(),
        ModelSpec::Checkpoint { .. } => "checkpoint".into(),
    };
    let prog = compile(&cfg, &name, &target)?;
    // the agent workload's trajectories read and rendered before anything runs (a bad name fails here)
    if let Some(a) = &e.agent {
        agent::load(a)?;
    }
    let (sha, dirty) = record::git_state();
    let started = record::utc_stamp(std::time::SystemTime::now());
    let device = gpu.as_ref().map(|g| g.0.replace(' ', "-")).unwrap_or_else(|| "cpu".into());
    let mut res = Results::create(&opts.results_root, &e.name, &device, &sha, &started)?;
    let mut rec = Record {
        experiment: e.clone(),
        spec_file: opts.spec_file.clone(),
        command: opts.command.clone(),
        started_utc: started,
        finished_utc: None,
        status: Some("running".into()),
        git_sha: sha,
        git_dirty: dirty,
        machine: format!(
            "{} ({} CPU threads)",
            device,
            std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
        ),
        gpu: gpu.as_ref().map(|g| g.0.clone()),
        driver: gpu.as_ref().map(|g| g.1.clone()),
        nvrtc_options: Vec::new(),
        checkpoint: ck
            .as_ref()
            .map_or_else(|| "(not generated: no path could run here)".into(), |c| c.dir.display().to_string()),
        model: format!("{name}: {}", prog.shape),
        program_hash: Some(record::fnv_hex(&[&prog.encode_words()])),
        cuda_sources_hash: None,
        weight_bytes_per_step: prog.words.iter().map(|wd| crate::isa::report::weight_bytes(&prog, wd)).sum(),
        ceiling_gbps: 0.0,
        paths: Vec::new(),
        diffs: Vec::new(),
        kernels: Vec::new(),
        shapes: Vec::new(),
        speculation: Vec::new(),
        agent: Vec::new(),
        notes: Vec::new(),
    };
    let mut runnable = Vec::new();
    for (p, why) in unavailable {
        match why {
            None => runnable.push(p),
            Some(why) => {
                say(&bar, format!("skipping the {} path: {why}", p.label()));
                rec.paths.push(PathRecord {
                    name: p.label().into(),
                    status: format!("skipped: {why}"),
                    ms_per_token_median: None,
                    ms_per_token_min: None,
                    ms_per_token_max: None,
                    by_context: Vec::new(),
                    ttft: None,
                });
            }
        }
    }
    let dropped: Vec<String> = e
        .diffs
        .iter()
        .filter(|d| !runnable.contains(&d.a) || !runnable.contains(&d.b))
        .map(|d| format!("diff {} vs {} not run: a path was skipped", d.a.label(), d.b.label()))
        .collect();
    rec.notes.extend(dropped);
    let Some(ck) = ck.as_ref() else {
        rec.notes.push("no path could run here (every path was skipped): nothing compared or timed".into());
        say(&bar, "no path could run here: nothing compared or timed");
        rec.finished_utc = Some(record::utc_stamp(std::time::SystemTime::now()));
        rec.status = Some("finished".into());
        res.save(&rec)?;
        return Ok(res.dir.clone());
    };
    let w = Weights::from_checkpoint(ck);
    // Each GPU path gets its own upload and state (they step in lockstep in the diff pass); every value
    // of the checkpoint is scanned first.
    let mut gpu_paths: Vec<(PathName, std::cell::RefCell<crate::exec::gpu::GpuExec>)> = Vec::new();
    let mut gpu_prefill: Vec<(PathName, std::cell::RefCell<crate::exec::gpu::GpuExec>)> = Vec::new();
    let upload = runnable.iter().any(|p| p.is_gpu()).then(|| crate::model::upload::Upload::scanned(ck));
    if upload.is_some() {
        rec.ceiling_gbps = crate::exec::gpu::device::read_ceiling_gbps(&opts.cache_root)?;
        say(
            &bar,
            format!(
                "the GPU's streaming-read ceiling: {:.0} GB/s (measured, cached by GPU and driver)",
                rec.ceiling_gbps
            ),
        );
    }
    for p in runnable.iter().filter(|p| p.is_gpu()) {
        say(&bar, format!("uploading the model to the GPU for the {} path", p.label()));
        let gpu = crate::exec::gpu::Gpu::open()?;
        let defines = crate::exec::gpu::Defines::new(e.defines.clone())?;
        rec.nvrtc_options = gpu.options(&defines);
        let upload = upload.as_ref().ok_or_else(|| crate::error::Error::new("internal: no upload for a GPU path"))?;
        // the first GPU path uploads the weights; the others share them (one copy of the 27B's)
        let d = match gpu_paths.first() {
            None => crate::exec::gpu::GpuExec::new(gpu, &prog, upload, &opts.cache_root, &defines)?,
            Some((_, first)) => {
                crate::exec::gpu::GpuExec::new_sharing(gpu, &prog, upload, &first.borrow(), &opts.cache_root, &defines)?
            }
        };
        rec.cuda_sources_hash = Some(record::fnv_hex(&[crate::exec::gpu::source().as_bytes()]));
        rec.notes.push(format!(
            "GPU arena of the {} path: {:.3} GB, one allocation; its weights {:.3} GB, another",
            p.label(),
            d.arena_bytes as f64 / 1e9,
            d.own_weight_bytes() as f64 / 1e9
        ));
        let mut d = d;
        if let (PathName::Megakernel, Some(wi)) = (*p, e.drop_wait) {
            d.force_drop_wait(wi as usize)?;
            rec.notes.push(format!(
                "NEGATIVE CONTROL: the megakernel's program lost the wait of word {wi} ({:?}), forced past the validator",
                prog.words.get(wi as usize).map(|w| w.opcode)
            ));
        }
        if *p == PathName::Graph {
            let groups = d.launch_groups();
            rec.notes.push(format!(
                "launch inventory of the graph: {} kernel nodes per step for {} words (same-stage words of one opcode share a launch)",
                groups.len(),
                prog.words.len()
            ));
        }
        if matches!(*p, PathName::Graph | PathName::GraphFast) && e.workload.prefill && !e.workload.seek {
            // the prompt's prefill on the graph path: a prefill program sharing the graph's weights
            let mut t = prog.target.clone();
            (t.m_rows, t.prefill, t.head_mask) = (paths::PREFILL_ROWS, true, false);
            let pp = crate::compiler::compile(&ck.config, "prefill", &t)?;
            let gpu = crate::exec::gpu::Gpu::open()?;
            let mut pd = crate::exec::gpu::GpuExec::new_sharing(gpu, &pp, upload, &d, &opts.cache_root, &defines)?;
            if *p == PathName::GraphFast {
                pd.set_activations(crate::model::ops::Activations::Fp8Dynamic)?;
            }
            gpu_prefill.push((*p, std::cell::RefCell::new(pd)));
        }
        gpu_paths.push((*p, std::cell::RefCell::new(d)));
    }
    let dev = |want: PathName| gpu_paths.iter().find(|(p, _)| *p == want).map(|(_, d)| d);
    let w_reordered = e
        .paths
        .contains(&PathName::ReferenceReordered)
        .then(|| Weights::with_order(ck, crate::model::ops::SumOrder::Reversed));
    let w_fast = e.paths.contains(&PathName::ReferenceFast).then(|| {
        use crate::model::ops::{Activations, SumOrder};
        Weights::with_numerics(ck, SumOrder::Canonical, Activations::Fp8Dynamic)
    });
    let shared = Shared {
        w: &w,
        w_reordered: w_reordered.as_ref(),
        w_fast: w_fast.as_ref(),
        prog: &prog,
        ck,
        graph: dev(PathName::Graph),
        graph_fast: dev(PathName::GraphFast),
        mega: dev(PathName::Megakernel),
        prefill: gpu_prefill.iter().find(|(p, _)| *p == PathName::Graph).map(|(_, d)| d),
        prefill_fast: gpu_prefill.iter().find(|(p, _)| *p == PathName::GraphFast).map(|(_, d)| d),
    };
    res.save(&rec)?;
    let gpu_setup = match upload.as_ref() {
        Some(u) => Some((u, opts.cache_root.as_path(), crate::exec::gpu::Defines::new(e.defines.clone())?)),
        None => None,
    };
    let ctx = RunCtx {
        e,
        shared: &shared,
        runnable: &runnable,
        contexts: &contexts,
        steps,
        total: need,
        bar: &bar,
        gpu: gpu_setup,
    };
    // A failure part-way still leaves everything measured so far on disk, with the reason.
    let outcome = if runnable.is_empty() {
        // Every path was skipped (no GPU for a GPU-only experiment): a record that says so, no panic.
        rec.notes.push("no path could run here (every path was skipped): nothing compared or timed".into());
        say(&bar, "no path could run here: nothing compared or timed");
        Ok(())
    } else if e.workload.seek {
        // Timing only: no diff pass; the prompt's tokens are the tokens fed.
        rec.notes.push("workload.seek: each context is jumped to (its KV cache zero), not computed: times only".into());
        passes::timing_pass(&ctx, &e.prompt_ids(), &runnable, &mut rec, &mut res)
    } else {
        passes::diff_pass(&ctx, &mut rec, &mut res)
            .and_then(|(seq, ok)| passes::spec_pass(&ctx, &seq, &mut rec, &mut res).map(|_| (seq, ok)))
            .and_then(|(seq, ok)| passes::timing_pass(&ctx, &seq, &ok, &mut rec, &mut res))
            .and_then(|_| agent::agent_pass(&ctx, &mut rec, &mut res))
    };
    if let Err(err) = outcome {
        let interrupted = INTERRUPTED.load(std::sync::atomic::Ordering::SeqCst);
        rec.status = Some(if interrupted { "interrupted" } else { "failed" }.into());
        rec.notes.push(format!("run {}: {err}", rec.status.as_deref().unwrap_or("failed")));
        res.save(&rec)?;
        return Err(err);
    }
    bar.finish_and_clear();
    rec.finished_utc = Some(record::utc_stamp(std::time::SystemTime::now()));
    rec.status = Some("finished".into());
    res.save(&rec)?;
    // (4) charts, from the files just written; a failure is reported, the data stays.
    match chart::render(&res.dir, false) {
        Ok(files) => rec.notes.push(format!(
            "charts: {}",
            files.iter().filter_map(|f| f.file_name()).map(|f| f.to_string_lossy()).collect::<Vec<_>>().join(", ")
        )),
        Err(err) => rec.notes.push(format!("charts failed: {err}")),
    }
    res.save(&rec)?;
    Ok(res.dir.clone())
}

/// The report `mk run` prints at the end.
pub fn summary(dir: &Path) -> Result<String> {
    let rec = Record::load(dir).context("summary")?;
    let mut s = format!(
        "experiment {} on {} ({}), git {}{}\n",
        rec.experiment.name,
        rec.machine,
        rec.model,
        rec.git_sha,
        if rec.git_dirty { " (dirty)" } else { "" }
    );
    // Per context: a median pooled over contexts would be a time no step took.
    for p in &rec.paths {
        if p.by_context.is_empty() {
            s += &format!("  {:12} {}\n", p.name, p.status);
        }
        for t in &p.by_context {
            s += &format!(
                "  {:12} context {:>6}: {:>10.3} ms/token median (min {:.3}, max {:.3}, {} steps)\n",
                p.name, t.context, t.ms_median, t.ms_min, t.ms_max, t.samples
            );
        }
        if let Some(t) = &p.ttft {
            s += &format!(
                "  {:12} time to first token, {}-token prompt: {:.3} ms median (min {:.3}, max {:.3}, {} runs; {})\n",
                p.name, t.prompt_tokens, t.ms_median, t.ms_min, t.ms_max, t.samples, t.how
            );
        }
    }
    for d in &rec.diffs {
        s += &format!("  diff: {}\n", d.summary());
    }
    // Word by word (graph), then inside the step (the timelines: each word's share of the step).
    let rows = rec.kernels.iter().filter(|k| k.path == "graph");
    let in_step = rec.kernels.iter().filter(|k| k.path.ends_with(" in step"));
    for k in rows.chain(in_step) {
        let tag = if k.path == "graph" {
            "kernel".to_string()
        } else {
            format!("in step ({})", k.path.replace(" in step", ""))
        };
        s += &format!(
            "  {tag} {:24} {:3} words {:9.3} ms/step {:8.1} GB/s ({:5.1} % of {:.0})\n",
            k.opcode,
            k.words,
            k.ms_per_step,
            k.gb_per_s,
            100.0 * k.fraction_of_ceiling,
            rec.ceiling_gbps
        );
    }
    for r in &rec.speculation {
        s += &format!(
            "  speculation ({}) k {} agree {}: {} tokens in {} rounds ({} of {} drafts accepted, {:.3} ms a token), {}\n",
            r.path,
            r.k,
            r.agree,
            r.tokens,
            r.rounds,
            r.accepted,
            r.drafted,
            r.ms_per_token,
            match r.first_difference {
                None => "the greedy tokens (identical)".to_string(),
                Some(i) => format!("DIFFER from the greedy tokens at token {i}"),
            }
        );
    }
    for r in &rec.agent {
        s += &format!("  {}\n", agent::line(r));
    }
    if !rec.agent.is_empty() {
        s += &format!("  agent tables and charts: {}\n", dir.join("agent").display());
    }
    // Per GEMV weight shape (shapes: true): the graph's words beside a read of the same bytes.
    for r in &rec.shapes {
        s += &format!(
            "  shape {:36} {:3} words {:8.3} ms/step {:7.1} GB/s, read {:7.1} GB/s: {:5.1} % of the read, {:5.1} % of {:.0}\n",
            r.shape,
            r.words,
            r.gemv_ms,
            r.gemv_gb_per_s,
            r.read_gb_per_s,
            100.0 * r.gemv_of_read,
            100.0 * r.gemv_of_ceiling,
            rec.ceiling_gbps
        );
    }
    for n in &rec.notes {
        s += &format!("  {n}\n");
    }
    s += &format!("results: {}\n", dir.display());
    Ok(s)
}

#[cfg(test)]
mod interrupt_tests {
    use super::*;

    /// Ctrl-C's flag: the run stops at its next step, says why, and its record is "interrupted" (a
    /// results folder that cannot pass for complete). (The only test in this binary that runs `run`.)
    #[test]
    fn an_interrupted_run_says_so_in_its_record() {
        let root = std::env::temp_dir().join(format!("mk-interrupt-{}", std::process::id()));
        let e = Experiment::parse(
            r#"(name: "cut", model: Preset(name: "tiny", seed: 0), paths: [Reference],
            workload: (prompt: Ids([1, 2]), decode_steps: 2, contexts: [3]), warmup: 0, repetitions: 1)"#,
        )
        .unwrap();
        let opts = RunOptions {
            results_root: root.join("results"),
            cache_root: root.join("cache"),
            spec_file: "test".into(),
            command: vec![],
            units: Default::default(),
            unit_rows: crate::isa::DEFAULT_GEMV_UNIT_ROWS,
            gdn: Default::default(),
        };
        INTERRUPTED.store(true, std::sync::atomic::Ordering::SeqCst);
        let err = run(&e, &opts).unwrap_err().to_string();
        INTERRUPTED.store(false, std::sync::atomic::Ordering::SeqCst);
        assert!(err.contains("interrupted"), "{err}");
        let dir = std::fs::read_dir(root.join("results/cut")).unwrap().flatten().next().unwrap().path();
        let rec = record::Record::load(&dir).unwrap();
        assert_eq!(rec.status.as_deref(), Some("interrupted"));
        assert!(!rec.finished() && record::Record::load_finished(&dir, false).is_err());
        let _ = std::fs::remove_dir_all(&root);
    }
}
