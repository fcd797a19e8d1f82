//! Bad input gets a one-line error naming what is wrong: never a panic, an abort (an allocation sized
//! by the input), a silent run on garbage, or a result that passes for complete (issue 26). Each case
//! here failed the old behaviour.

mod common;

use std::path::Path;

use mk::isa::Program;
use mk::model::{checkpoint::Checkpoint, config::ModelConfig, forward, sample::SamplingParams, synth};

fn tiny_program() -> Program {
    Program::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("programs/tiny.ron")).unwrap()
}

#[test]
fn a_program_naming_a_missing_buffer_or_counter_is_refused_when_read() {
    let mut p = tiny_program();
    p.words[3].ops[0] = 9999;
    let e = Program::from_ron(&p.to_ron().unwrap()).unwrap_err().to_string();
    assert!(e.contains("word 3 names buffer 9999"), "{e}");
    let mut p = tiny_program();
    p.words[2].signal = p.n_counters + 5;
    let e = Program::from_ron(&p.to_ron().unwrap()).unwrap_err().to_string();
    assert!(e.contains("word 2 signals counter"), "{e}");
}

#[test]
fn a_word_whose_layer_disagrees_with_its_weights_is_refused() {
    let mut p = tiny_program();
    let i = p.words.iter().position(|w| w.opcode == mk::isa::Opcode::GemvGateUp).unwrap();
    p.words[i].layer = 65535;
    let e = mk::isa::validate::validate(&p).unwrap_err().to_string();
    assert!(e.contains(&format!("word {i}")) && e.contains("its weights are layer"), "{e}");
    let mut p = tiny_program();
    let j = p
        .words
        .iter()
        .position(|w| w.opcode == mk::isa::Opcode::ReduceResidual || w.opcode == mk::isa::Opcode::AttnPv)
        .unwrap();
    p.words[j].layer = 65535;
    assert!(mk::isa::validate::validate(&p).unwrap_err().to_string().contains("past the program's last layer"));
}

#[test]
fn targets_the_kernels_cannot_run_are_refused() {
    for (edit, says) in [
        (Box::new(|p: &mut Program| p.target.sms = 0) as Box<dyn Fn(&mut Program)>, "0 SMs"),
        (Box::new(|p: &mut Program| p.target.threads = 0), "0 threads"),
        (Box::new(|p: &mut Program| p.target.max_context = 100), "max context 100"),
    ] {
        let mut p = tiny_program();
        edit(&mut p);
        let e = Program::from_ron(&p.to_ron().unwrap()).unwrap_err().to_string();
        assert!(e.contains(says), "{e}");
        assert!(mk::isa::validate::validate(&p).is_err());
    }
    let mut t = mk::compiler::h200(1);
    t.threads = 0;
    let e = mk::compiler::compile(&ModelConfig::preset("tiny").unwrap(), "tiny", &t).unwrap_err().to_string();
    assert!(e.contains("compile") && e.contains("0 threads"), "{e}");
}

#[test]
fn sizes_are_bounded_before_anything_is_allocated() {
    let ck = Checkpoint::open(common::tiny()).unwrap();
    let w = forward::Weights::from_checkpoint(&ck);
    for n in [0, 100_000_000_000] {
        let e = mk::model::stats::measure(&w, n, 1).unwrap_err().to_string();
        assert!(e.contains("--tokens"), "{e}");
    }
    for steps in [usize::MAX, 10_000_000_000] {
        let e = forward::generate(&w, &[1, 2], steps, &SamplingParams::greedy(), 0).unwrap_err().to_string();
        assert!(e.contains("pass the model's 262144 positions"), "{e}");
    }
    assert!(forward::generate(&w, &[], 1, &SamplingParams::greedy(), 0).unwrap_err().to_string().contains("--prompt"));
    assert_eq!(forward::generate(&w, &[1, 2], 3, &SamplingParams::greedy(), 0).unwrap().len(), 3);
}

#[test]
fn an_experiment_that_decodes_nothing_or_sets_an_unknown_define_is_refused() {
    let ok = r#"(name: "x", model: Preset(name: "tiny", seed: 0), paths: [Reference],
        workload: (prompt: Ids([1]), decode_steps: 1, contexts: [2]))"#;
    assert!(mk::experiment::spec::Experiment::parse(ok).is_ok());
    let e = mk::experiment::spec::Experiment::parse(&ok.replace("decode_steps: 1", "decode_steps: 0")).unwrap_err();
    assert!(e.to_string().contains("decode_steps is 0"), "{e}");
    let bad = ok.replace("contexts: [2]))", "contexts: [2]), defines: {\"GEMV_RING\": 1})");
    let e = mk::experiment::spec::Experiment::parse(&bad).unwrap_err().to_string();
    assert!(e.contains("unknown name GEMV_RING"), "{e}");
}

#[test]
fn two_runs_in_the_same_second_get_their_own_folders() {
    let root = common::scratch().join("same-second");
    let a = mk::experiment::record::Results::create(&root, "x", "cpu", "abc", "20261202T000000Z").unwrap();
    let b = mk::experiment::record::Results::create(&root, "x", "cpu", "abc", "20261202T000000Z").unwrap();
    assert_ne!(a.dir, b.dir);
    assert!(b.dir.to_string_lossy().ends_with("_abc-2"), "{}", b.dir.display());
}

#[test]
fn synth_refuses_a_folder_with_files_unless_forced() {
    let d = common::scratch().join("synth-into");
    std::fs::create_dir_all(&d).unwrap();
    synth::check_out(&d, false).unwrap();
    std::fs::write(d.join("notes.txt"), "mine").unwrap();
    let e = synth::check_out(&d, false).unwrap_err().to_string();
    assert!(e.contains("is not empty") && e.contains("--force"), "{e}");
    synth::check_out(&d, true).unwrap();
}

#[test]
fn a_run_on_a_checkpoint_with_a_nan_weight_stops_before_any_path() {
    let d = common::copy_of_tiny("run-nan");
    let name = "model.language_model.norm.weight";
    let shard = common::shard_of(&d, name);
    let mut t = common::read_raw(&shard);
    t.iter_mut().find(|x| x.name == name).unwrap().data[2..4].copy_from_slice(&0x7fc0u16.to_le_bytes());
    common::write_raw(&shard, &t);
    let text = r#"(name: "nan", model: Checkpoint(path: "X"), paths: [Reference],
        workload: (prompt: Ids([1, 2]), decode_steps: 1, contexts: [3]), warmup: 0, repetitions: 1)"#;
    let e = mk::experiment::spec::Experiment::parse(&text.replace('X', &d.display().to_string())).unwrap();
    let opts = mk::experiment::RunOptions {
        results_root: common::scratch().join("nan-results"),
        cache_root: common::scratch().join("cache"),
        spec_file: "test".into(),
        command: vec![],
        units: Default::default(),
        unit_rows: mk::isa::DEFAULT_GEMV_UNIT_ROWS,
        gdn: Default::default(),
    };
    let m = mk::experiment::run(&e, &opts).unwrap_err().to_string();
    assert!(m.contains(name) && m.contains("non-finite value at element 1"), "{m}");
}

#[test]
fn a_cut_short_shard_write_leaves_no_partial_file_and_no_config() {
    let d = common::scratch().join("synth-partial");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("model-00001-of-00004.safetensors.partial"), vec![0u8; 1024]).unwrap();
    synth::write_checkpoint(&ModelConfig::preset("tiny").unwrap(), 0, &d).unwrap();
    let names: Vec<String> =
        std::fs::read_dir(&d).unwrap().flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    assert!(!names.iter().any(|n| n.ends_with(".partial")), "{names:?}");
    assert!(names.contains(&"config.json".to_string()));
    assert!(Checkpoint::open(&d).is_ok());
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn generation_on_a_gpu_path_refuses_what_it_cannot_run_before_it_needs_a_gpu() {
    use mk::exec::gpu::generate::{generate, Generation};
    let ck = Checkpoint::open(common::tiny()).unwrap();
    let cache = common::scratch().join("gen-cache");
    let d = mk::exec::gpu::Defines::default();
    let g = |prompt: &'static [u32], steps, temperature, speculate, mega| Generation {
        prompt,
        steps,
        params: SamplingParams { temperature, top_k: 8, top_p: 1.0 },
        seed: 0,
        speculate,
        mega,
    };
    let err = |g: Generation| generate(&ck, &g, &cache, &d).unwrap_err().to_string();
    assert!(err(g(&[1], 4, 0.7, None, true)).contains("sampling runs on the graph"));
    assert!(err(g(&[1], usize::MAX, 0.0, None, false)).contains("positions"));
    assert!(err(g(&[999_999], 4, 0.0, None, false)).contains("out of range"));
    assert!(err(g(&[], 4, 0.0, None, false)).contains("at least one"));
    assert!(err(g(&[1], 4, 0.0, Some(9), false)).contains("--speculate 9"));
}
