//! The experiment runner: spec parsing and its errors, and an end-to-end run whose results folder is
//! checked for its record, its CSV and its charts.

mod common;
use mk::experiment::spec::{Experiment, ModelSpec, PathName};
use mk::experiment::{run, summary, RunOptions};

#[test]
fn every_committed_experiment_parses() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("experiments");
    let mut n = 0;
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "ron") {
            let e = Experiment::load(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            // A negative control that drops a wait names the lm_head of its preset's program (its
            // comment says so): a program that changed its word count must not leave it pointing
            // past the end or at another word.
            if let (Some(wi), ModelSpec::Preset { name, .. }) = (e.drop_wait, &e.model) {
                let cfg = mk::model::config::ModelConfig::preset(name).unwrap();
                let prog = mk::compiler::compile(&cfg, name, &mk::compiler::h200(1)).unwrap();
                let op = prog.words.get(wi as usize).map(|w| w.opcode);
                assert_eq!(op, Some(mk::isa::Opcode::LmHead), "{}: drop_wait {wi}", p.display());
            }
            n += 1;
        }
    }
    assert!(n >= 1);
    let q =
        Experiment::load(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("experiments/quickstart.ron")).unwrap();
    assert_eq!(q.paths, [PathName::Reference, PathName::Interpreter, PathName::Graph, PathName::Megakernel]);
}

fn err(text: &str) -> String {
    let e = Experiment::parse(text).unwrap_err().to_string();
    assert!(!e.contains('\n'), "one line: {e}");
    e
}

const OK: &str = r#"(name: "t", model: Preset(name: "tiny", seed: 0), paths: [Reference, Interpreter],
    workload: (prompt: Ids([1, 2]), decode_steps: 1))"#;

#[test]
fn bad_specs_get_one_line_errors() {
    Experiment::parse(OK).unwrap();
    assert!(err(&OK.replace("Interpreter]", "Turbo]")).contains("Unexpected variant named `Turbo`"));
    assert!(
        err(&OK.replace("decode_steps: 1)", "decode_steps: 1, speed: 3)")).contains("Unexpected field named `speed`")
    );
    assert!(err("(name: ").starts_with("experiment:"));
    assert!(err(&OK.replace("paths: [", "diffs: [(a: Graph, b: Reference)], paths: [")).contains("not in paths"));
    assert!(err(&OK.replace("Ids([1, 2])", "Ids([1, 999999])")).contains("999999 is out of range"));
    assert!(err(&OK.replace("decode_steps: 1)", "decode_steps: 1, contexts: [1])")).contains("shorter than the prompt"));
    assert!(err(&OK.replace("\"t\"", "\"a/b\"")).contains("name"));
    // repetitions 0 is a correctness run: it needs diffs; seek (times only) takes none.
    assert!(err(&OK.replacen('(', "(repetitions: 0, ", 1)).contains("repetitions 0"));
    assert!(err(&OK.replace("decode_steps: 1)", "decode_steps: 1, seek: true)")).contains("seek"));
    // speculation: k 1-7, agree counts <= k
    let spec = |s: &str| OK.replacen('(', &format!("(speculation: Some({s}), "), 1);
    Experiment::parse(&spec("(k: 3)")).unwrap();
    assert!(err(&spec("(k: 8)")).contains("speculation.k = 8"));
    assert!(err(&spec("(k: 2, agree: [3])")).contains("speculation.agree 3"));
    // the agent workload: steps, the GPU session's rows, its prefill program, residencies once each
    let agent = |s: &str| OK.replacen('(', &format!("(agent: Some({s}), "), 1);
    Experiment::parse(&agent("(max_steps: 2, only: [\"t01\"], residency: [Stateless])")).unwrap();
    assert!(err(&agent("(max_steps: 0)")).contains("agent.max_steps is 0"));
    assert!(err(&agent("(max_steps: 1, rows: 9)")).contains("agent.rows = 9"));
    assert!(err(&agent("(max_steps: 1, prefill_rows: 32)")).contains("agent.prefill_rows = 32"));
    assert!(err(&agent("(max_steps: 1, residency: [Resident, Resident])")).contains("twice"));
    assert!(err(&agent("(max_steps: 1, turbo: 1)")).contains("Unexpected field named `turbo`"));
    // graph-fast is the graph path with a fast-mode prefill: it needs workload.prefill
    let fast = OK.replace("[Reference, Interpreter]", "[Reference, GraphFast]");
    assert!(err(&fast).contains("needs workload.prefill"));
    Experiment::parse(&fast.replace("decode_steps: 1)", "decode_steps: 1, prefill: true)")).unwrap();
}

fn opts(tag: &str) -> RunOptions {
    RunOptions {
        results_root: common::scratch().join(tag),
        cache_root: common::scratch().join("cache"),
        spec_file: "test".into(),
        command: vec!["mk".into(), "run".into()],
        units: Default::default(),
        unit_rows: mk::isa::DEFAULT_GEMV_UNIT_ROWS,
        gdn: Default::default(),
    }
}

#[test]
fn a_missing_checkpoint_is_an_error() {
    let mut e = Experiment::parse(OK).unwrap();
    e.model = ModelSpec::Checkpoint { path: "/nonexistent/ckpt".into() };
    let m = run(&e, &opts("missing")).unwrap_err().to_string();
    assert!(m.contains("checkpoint /nonexistent/ckpt not found"), "{m}");
}

#[test]
fn a_run_writes_record_csv_and_charts_and_diffs_bits() {
    let text = r#"(name: "e2e", model: Preset(name: "tiny", seed: 0),
        paths: [Reference, Interpreter, Megakernel],
        workload: (prompt: Ids([5, 6, 7]), decode_steps: 2, contexts: [3, 5]),
        warmup: 0, repetitions: 2, debug: true,
        diffs: [(a: Reference, b: Interpreter), (a: Interpreter, b: Megakernel)])"#;
    let mut e = Experiment::parse(text).unwrap();
    e.model = ModelSpec::Checkpoint { path: common::tiny().display().to_string() };
    let dir = run(&e, &opts("e2e")).unwrap();
    let rec: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("record.json")).unwrap()).unwrap();
    for key in [
        "experiment",
        "command",
        "git_sha",
        "git_dirty",
        "gpu",
        "driver",
        "nvrtc_options",
        "program_hash",
        "cuda_sources_hash",
        "paths",
        "diffs",
    ] {
        assert!(rec.get(key).is_some(), "record.json has no {key}");
    }
    let paths = rec["paths"].as_array().unwrap();
    let by = |n: &str| paths.iter().find(|p| p["name"] == n).unwrap().clone();
    if mk::experiment::paths::gpu().is_none() {
        assert!(by("megakernel")["status"].as_str().unwrap().starts_with("skipped: "));
    }
    for p in ["reference", "interpreter"] {
        let r = by(p);
        assert_eq!(r["status"], "ran");
        assert!(r["ms_per_token_median"].as_f64().unwrap() > 0.0);
        assert!(r["ms_per_token_min"].as_f64().unwrap() <= r["ms_per_token_max"].as_f64().unwrap());
        // time to first token: the 3 prompt steps of each of the 2 repetitions
        let t = &r["ttft"];
        assert_eq!((t["prompt_tokens"].as_u64(), t["samples"].as_u64()), (Some(3), Some(2)), "{t}");
        let (lo, m, hi) =
            (t["ms_min"].as_f64().unwrap(), t["ms_median"].as_f64().unwrap(), t["ms_max"].as_f64().unwrap());
        assert!(0.0 < lo && lo <= m && m <= hi, "{t}");
    }
    if mk::experiment::paths::gpu().is_none() {
        assert!(by("megakernel")["ttft"].is_null(), "an untimed path has no time to first token");
    }
    let diffs = rec["diffs"].as_array().unwrap();
    assert_eq!(diffs.len(), 1, "only diffs between paths that ran");
    assert_eq!(
        (diffs[0]["a"].as_str(), diffs[0]["b"].as_str(), diffs[0]["identical"].as_bool()),
        (Some("reference"), Some("interpreter"), Some(true))
    );
    assert!(diffs[0]["first"].is_null());
    // 2 paths x 2 contexts x 2 repetitions x 2 steps, plus the header.
    assert_eq!(std::fs::read_to_string(dir.join("steps.csv")).unwrap().lines().count(), 1 + 16);
    assert!(std::fs::metadata(dir.join("ms_per_token.png")).unwrap().len() > 1000);
    assert!(summary(&dir).unwrap().contains("reference vs interpreter (bits): identical"));
    assert!(summary(&dir).unwrap().contains("time to first token, 3-token prompt"));
    // Charts re-render from the files alone; a run compared with itself is 1.000 everywhere.
    assert!(mk::experiment::chart::render(&dir, false).unwrap().len() >= 3);
    assert!(mk::experiment::chart::compare(&dir, &dir, false).unwrap().contains("1.000"));
    assert_eq!(rec["status"], "finished");
    // An interrupted run's record is refused by chart and compare unless asked for (issue 26).
    let text = std::fs::read_to_string(dir.join("record.json")).unwrap();
    std::fs::write(dir.join("record.json"), text.replace("\"status\": \"finished\"", "\"status\": \"interrupted\""))
        .unwrap();
    let e = mk::experiment::chart::render(&dir, false).unwrap_err().to_string();
    assert!(e.contains("did not finish (status interrupted)"), "{e}");
    assert!(mk::experiment::chart::compare(&dir, &dir, false).is_err());
    assert!(mk::experiment::chart::render(&dir, true).is_ok());
}

#[test]
fn every_committed_record_loads_and_its_charts_render() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("results");
    let mut n = 0;
    for exp in std::fs::read_dir(&root).unwrap().filter_map(|e| e.ok()) {
        for run in std::fs::read_dir(exp.path()).unwrap().filter_map(|e| e.ok()) {
            if run.path().join("record.json").is_file() && run.path().join("steps.csv").is_file() {
                mk::experiment::record::Record::load(&run.path())
                    .unwrap_or_else(|e| panic!("{}: {e}", run.path().display()));
                n += 1;
            }
        }
    }
    assert!(n >= 3, "{n} records");
}

#[test]
fn a_shuffled_interpreter_is_diffed_in_shuffled_order() {
    let text = r#"(name: "shuf", model: Preset(name: "tiny", seed: 0), paths: [Reference, Interpreter],
        workload: (prompt: Ids([5, 6]), decode_steps: 2, contexts: [2]), warmup: 0, repetitions: 1,
        shuffle_seed: Some(11), diffs: [(a: Reference, b: Interpreter)])"#;
    let mut e = Experiment::parse(text).unwrap();
    e.model = ModelSpec::Checkpoint { path: common::tiny().display().to_string() };
    let dir = run(&e, &opts("shuf")).unwrap();
    let s = summary(&dir).unwrap();
    assert!(s.contains("reference vs interpreter (bits): identical"), "{s}");
}

#[test]
fn the_speculation_setting_emits_the_runs_greedy_tokens() {
    // The interpreter's M = 3 program, 2 forced drafts a round, every acceptance count, over the diff
    // pass's 12 greedy tokens (a prompt of 5: two rows of padding rolled back); the record says how many
    // drafts each count accepted.
    let text = r#"(name: "spec", model: Preset(name: "tiny", seed: 0), paths: [Reference],
        workload: (prompt: Ids([5, 6, 700, 8, 9]), decode_steps: 12, contexts: [5]), warmup: 0, repetitions: 1,
        speculation: Some((k: 2)))"#;
    let mut e = Experiment::parse(text).unwrap();
    e.model = ModelSpec::Checkpoint { path: common::tiny().display().to_string() };
    let dir = run(&e, &opts("spec")).unwrap();
    let rec = mk::experiment::record::Record::load(&dir).unwrap();
    assert_eq!(rec.speculation.iter().map(|r| r.agree).collect::<Vec<_>>(), [0, 1, 2]);
    for r in &rec.speculation {
        assert!(r.identical && r.tokens == 12, "{r:?}");
        assert_eq!(r.accepted, r.rounds * r.agree as usize, "{r:?}");
    }
    let s = summary(&dir).unwrap();
    assert!(
        s.contains("speculation (interpreter) k 2 agree 2: 12 tokens in 4 rounds (8 of 8 drafts accepted, ")
            && s.contains("ms a token), the greedy tokens"),
        "{s}"
    );
}

#[test]
fn repetitions_zero_is_a_diff_only_run() {
    let text = r#"(name: "corr", model: Preset(name: "tiny", seed: 0), paths: [Reference, Interpreter],
        workload: (prompt: Ids([5, 6]), decode_steps: 1, contexts: [2]), warmup: 0, repetitions: 0,
        diffs: [(a: Reference, b: Interpreter)])"#;
    let mut e = Experiment::parse(text).unwrap();
    e.model = ModelSpec::Checkpoint { path: common::tiny().display().to_string() };
    let dir = run(&e, &opts("corr")).unwrap();
    let s = summary(&dir).unwrap();
    assert!(s.contains("reference vs interpreter (bits): identical"), "{s}");
    assert!(s.contains("not timed"), "{s}");
}

#[test]
fn drop_wait_needs_the_megakernel() {
    assert!(err(&OK.replacen('(', "(drop_wait: Some(3), ", 1)).contains("drop_wait"));
}

#[test]
fn crossover_charts_a_speed_up_per_folder_and_context() {
    let text = r#"(name: "xo", model: Preset(name: "tiny", seed: 0), paths: [Reference, Interpreter],
        workload: (prompt: Ids([5, 6]), decode_steps: 1, contexts: [2]), warmup: 0, repetitions: 1)"#;
    let mut e = Experiment::parse(text).unwrap();
    e.model = ModelSpec::Checkpoint { path: common::tiny().display().to_string() };
    let dir = run(&e, &opts("xo")).unwrap();
    let out = common::scratch().join("xo-chart");
    std::fs::create_dir_all(&out).unwrap();
    let s = mk::experiment::chart::crossover(&[dir.clone()], "reference", "interpreter", &out, false).unwrap();
    assert!(s.contains("checkpoint") && s.lines().count() >= 3, "{s}");
    assert!(out.join("crossover.png").exists());
    // No folder with both paths timed: an error, not an empty chart.
    assert!(mk::experiment::chart::crossover(&[dir], "graph", "megakernel", &out, false).is_err());
}

#[test]
fn a_gpu_only_experiment_without_a_gpu_says_so() {
    if mk::experiment::paths::unavailable(PathName::Graph).is_none() {
        eprintln!("skipped: a GPU is present (this checks the no-GPU record)");
        return;
    }
    let text = r#"(name: "nogpu", model: Preset(name: "tiny", seed: 0), paths: [Graph, Megakernel],
        workload: (prompt: Ids([5, 6]), decode_steps: 1, contexts: [2]), warmup: 0, repetitions: 0,
        diffs: [(a: Graph, b: Megakernel)], debug: true)"#;
    let mut e = Experiment::parse(text).unwrap();
    e.model = ModelSpec::Checkpoint { path: common::tiny().display().to_string() };
    let dir = run(&e, &opts("nogpu")).unwrap();
    let s = summary(&dir).unwrap();
    assert!(s.contains("no path could run here"), "{s}");
    assert!(s.contains("skipped"), "{s}");
    // A preset that is not in the cache is not generated for nothing (27 GB for the 27B).
    let big = Experiment::parse(&text.replace("\"tiny\"", "\"qwen3.5-27b\"")).unwrap();
    let o = opts("nogpu27b");
    let dir = run(&big, &o).unwrap();
    let s = summary(&dir).unwrap();
    assert!(s.contains("no path could run here") && s.contains("skipped") && s.contains("not run"), "{s}");
    assert!(!o.cache_root.join("qwen3.5-27b-seed0").exists(), "the 27B checkpoint was generated");
}

/// Issue 28 item 7: `workload.prefill` takes the time to first token by one prefill on the paths that
/// prefill (the reference's `model::prefill`, the interpreter's prefill programs; the graph path's with a
/// GPU) and by decode steps on the others, and says which in the record; the prefill's first token is
/// noted beside the decode steps'.
#[test]
fn a_prefill_workload_times_the_references_prefill() {
    let text = r#"(name: "pf", model: Preset(name: "tiny", seed: 0),
        paths: [Reference, Interpreter],
        workload: (prompt: Ids([5, 6, 7, 8, 9]), decode_steps: 1, contexts: [5], prefill: true),
        warmup: 0, repetitions: 2)"#;
    let mut e = Experiment::parse(text).unwrap();
    e.model = ModelSpec::Checkpoint { path: common::tiny().display().to_string() };
    let dir = run(&e, &opts("pf")).unwrap();
    let rec: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("record.json")).unwrap()).unwrap();
    let paths = rec["paths"].as_array().unwrap();
    let ttft = |n: &str| paths.iter().find(|p| p["name"] == n).unwrap()["ttft"].clone();
    let (r, i) = (ttft("reference"), ttft("interpreter"));
    assert!(r["how"].as_str().unwrap().starts_with("one prefill"), "{r}");
    assert!(i["how"].as_str().unwrap().starts_with("prefill programs"), "{i}");
    for t in [&r, &i] {
        assert_eq!((t["prompt_tokens"].as_u64(), t["samples"].as_u64()), (Some(5), Some(2)), "{t}");
    }
    let notes = rec["notes"].as_array().unwrap();
    assert!(notes.iter().any(|n| n.as_str().unwrap().contains("the prompt's prefill chose token")), "{notes:?}");
}

/// The agent workload (issue 29 item 7): the replay's table, steps and chart per path and residency, a
/// record entry each; a trajectory that is not in the file is refused before anything runs.
#[test]
fn an_agent_workload_replays_and_writes_its_table_and_chart() {
    let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("experiments/agent/trajectories.json");
    let text = r#"(name: "ag", model: Preset(name: "tiny", seed: 0), paths: [Reference],
        workload: (prompt: Ids([5, 6]), decode_steps: 1), warmup: 0, repetitions: 1,
        agent: Some((trajectories: "FILE", only: ["t01"], max_steps: 1, residency: [Resident])))"#
        .replace("FILE", &file.display().to_string());
    let mut e = Experiment::parse(&text).unwrap();
    e.model = ModelSpec::Checkpoint { path: common::tiny().display().to_string() };
    let mut bad = e.clone();
    bad.agent.as_mut().unwrap().only = vec!["t99".into()];
    let m = run(&bad, &opts("agent_bad")).unwrap_err().to_string();
    assert!(m.contains("no trajectory t99"), "{m}");
    assert!(!common::scratch().join("agent_bad").exists(), "refused before a results folder");
    let dir = run(&e, &opts("agent")).unwrap();
    let rec: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("record.json")).unwrap()).unwrap();
    let runs = rec["agent"].as_array().unwrap();
    assert_eq!(runs.len(), 1, "{runs:?}");
    let r = &runs[0];
    assert_eq!(
        (r["path"].as_str(), r["residency"].as_str(), r["steps"].as_u64()),
        (Some("reference"), Some("resident"), Some(1))
    );
    assert!(r["prefill_tokens"].as_u64().unwrap() > 1000 && r["emitted"].as_u64().unwrap() > 0, "{r}");
    let tables = std::fs::read_to_string(dir.join("agent/tables.txt")).unwrap();
    assert!(tables.starts_with("t01 (resident, reference):") && tables.contains("ttft ms"), "{tables}");
    let csv = std::fs::read_to_string(dir.join("agent/reference_resident/steps.csv")).unwrap();
    assert_eq!(csv.lines().count(), 2, "{csv}");
    assert!(dir.join("agent/reference_resident/time.png").is_file());
    assert!(summary(&dir).unwrap().contains("agent (resident, reference): 1 trajectories, 1 steps"));
}
