//! The GPU tier (issue 26): with a GPU, `cargo test` also runs the checks of the GPU paths on the tiny
//! preset: every op against the CPU and the op check's negative control, graph against megakernel bit
//! for bit over many steps (one and many steps a launch, the device-side stop), M-row steps against
//! one-row steps (with rollback), speculation with the MTP drafter against plain decoding, the sampler
//! against the CPU's, prefill's GEMM and chunked GDN against the CPU and a prefill program on the graph path against the
//! interpreter (issue 28), the head's mask
//! against the scatter method (issue 30), the agent replay on both paths (issue 29). Without a GPU each test says it skipped
//! and passes.
//! (On the GPU machine: `cargo test --no-run` here, carry the `gpu-*` test binary, run it there.)

mod common;

use mk::exec::gpu::Defines;

fn gpu_or_skip(test: &str) -> bool {
    match mk::exec::gpu::device::gpu() {
        Some(_) => true,
        None => {
            eprintln!("skipped {test}: no GPU on this machine");
            false
        }
    }
}

fn cache() -> std::path::PathBuf {
    common::scratch().join("gpu-cache")
}

#[test]
fn every_op_matches_the_cpu_and_a_broken_gemv_is_caught() {
    if !gpu_or_skip("the op check") {
        return;
    }
    let broken = Defines::parse(&["MK_BREAK_GEMV".to_string()]).unwrap();
    let units = mk::isa::UnitPolicy::Balanced;
    mk::verify::gpu::ops(common::tiny(), 2, &cache(), &Defines::default(), units, false, None).unwrap();
    let e = mk::verify::gpu::ops(common::tiny(), 1, &cache(), &broken, units, false, None).unwrap_err().to_string();
    assert!(e.contains("op check FAILED") && e.contains("LmHead -> logits") && e.contains("GemvNorm"), "{e}");
    // the MTP drafter's program (issue 27): its MtpFc and every other word, and the same control
    mk::verify::gpu::ops(common::tiny(), 2, &cache(), &Defines::default(), units, true, None).unwrap();
    let e = mk::verify::gpu::ops(common::tiny(), 1, &cache(), &broken, units, true, None).unwrap_err().to_string();
    assert!(e.contains("op check FAILED") && e.contains("MtpFc -> h"), "{e}");
    // its pruned head (256 rows, 153 of them listed: the last unit scores none)
    mk::verify::gpu::ops(common::tiny(), 2, &cache(), &Defines::default(), units, true, Some(256)).unwrap();
    let e = mk::verify::gpu::ops(common::tiny(), 1, &cache(), &broken, units, true, Some(256)).unwrap_err().to_string();
    assert!(e.contains("op check FAILED") && e.contains("LmHead -> logits"), "{e}");
}

#[test]
fn the_head_mask_gives_the_scatter_methods_tokens_and_an_ignored_mask_is_caught() {
    if !gpu_or_skip("the head mask") {
        return;
    }
    // issue 30: masked steps against the scatter method on both paths, a constrained tool call
    mk::verify::mask::run(common::tiny(), 30, 0, &cache(), &Defines::default()).unwrap();
    let broken = Defines::parse(&["MK_BREAK_MASK".to_string()]).unwrap();
    let e = mk::verify::mask::run(common::tiny(), 10, 0, &cache(), &broken).unwrap_err().to_string();
    assert!(e.contains("FAILED") && e.contains("scatter method"), "{e}");
}

#[test]
fn the_megakernel_is_bit_identical_to_the_graph() {
    if !gpu_or_skip("graph vs megakernel") {
        return;
    }
    // 300 steps crossing position 256 (the second attention partition), 64 a launch, and the stop.
    mk::verify::gpu::multistep(common::tiny(), 300, 64, &cache(), &Defines::default()).unwrap();
}

#[test]
fn m_row_steps_equal_one_row_steps() {
    if !gpu_or_skip("M rows") {
        return;
    }
    mk::verify::rows::run(common::tiny(), &[2, 8], 264, 1, &[], None, &cache(), &Defines::default()).unwrap();
}

#[test]
fn speculation_with_the_mtp_drafter_emits_the_plain_greedy_tokens() {
    if !gpu_or_skip("speculation") {
        return;
    }
    // k = 1 and 3, both paths, the drafter's drafts and forced ones (every row kept), 300 tokens
    mk::verify::spec::run(common::tiny(), &[1, 3], 300, &cache(), &Defines::default()).unwrap();
}

#[test]
fn the_gpu_sampler_chooses_the_cpu_samplers_tokens() {
    if !gpu_or_skip("the sampler") {
        return;
    }
    mk::verify::gpu::sample(common::tiny(), 16, &cache(), &Defines::default()).unwrap();
    let broken = Defines::parse(&["TOPK_BREAK=1".to_string()]).unwrap();
    let e = mk::verify::gpu::sample(common::tiny(), 8, &cache(), &broken).unwrap_err().to_string();
    assert!(e.contains("differ from the CPU sampler"), "the negative control must fail on the comparison: {e}");
}

#[test]
fn the_prefill_gemm_matches_the_cpu_and_a_broken_one_is_caught() {
    if !gpu_or_skip("the prefill GEMM") {
        return;
    }
    // tiny's fp8 shapes at T = 1, 59 (split-K) and 200 (four token tiles, the last partial)
    use mk::verify::gemm::{run, Kernel};
    let broken = Defines::parse(&["MK_BREAK_GEMV".to_string()]).unwrap();
    for k in [Kernel::Mma, Kernel::Wg, Kernel::Fast] {
        run("tiny", &[1, 59, 200], 1, &cache(), &Defines::default(), k).unwrap();
        let e = run("tiny", &[59], 1, &cache(), &broken, k).unwrap_err().to_string();
        assert!(e.contains("the GEMM is wrong"), "{k:?}: {e}");
    }
}

#[test]
fn a_prefill_program_on_the_graph_path_matches_the_interpreter_and_a_broken_one_is_caught() {
    if !gpu_or_skip("the GPU prefill") {
        return;
    }
    // tiny, M = 64: T = 64 (one step) and 192 (three: the state handed from step to step), against the
    // interpreter's prefill within the envelope (logits, every state, the last step's attention output
    // of every row, the next token); the negative controls (the decay dropped inside the chunks; a
    // causal mask one key too wide) must leave it
    use mk::verify::prefill::{run, Args, TOLERANCE};
    let (ok, broken) = (Defines::default(), Defines::parse(&["MK_BREAK_GDN".to_string()]).unwrap());
    let dir = cache();
    let args = |tokens, defines, fast: bool| Args {
        dir: common::tiny(),
        m: 64,
        tokens,
        reps: 1,
        check: true,
        against_decode: !fast,
        profile: !fast,
        fast,
        cache: &dir,
        defines,
    };
    // exact mode, then fast mode (the GEMMs on e4m3 activations against the interpreter in fast mode)
    for fast in [false, true] {
        for r in run(&args(&[64, 192], &ok, fast)).unwrap() {
            let d = r.vs_cpu.unwrap();
            assert!(d.within(TOLERANCE), "T = {}, fast {fast}: {d:?}", r.t);
        }
    }
    // fast mode's control: x's pieces swapped inside k_gemm_fast (MK_BREAK_GEMV)
    let gemv = Defines::parse(&["MK_BREAK_GEMV".to_string()]).unwrap();
    let r = run(&args(&[64], &gemv, true)).unwrap();
    assert!(!r[0].vs_cpu.as_ref().unwrap().within(TOLERANCE), "the broken fast GEMM passed: {:?}", r[0].vs_cpu);
    let r = run(&args(&[192], &broken, false)).unwrap();
    assert!(!r[0].vs_cpu.as_ref().unwrap().within(TOLERANCE), "the broken chunked rule passed: {:?}", r[0].vs_cpu);
    // the causal attention's control: each row sees the next position's key (every row's output compared)
    let broken = Defines::parse(&["MK_BREAK_ATTN".to_string()]).unwrap();
    let r = run(&args(&[64], &broken, false)).unwrap();
    let d = r[0].vs_cpu.as_ref().unwrap();
    assert!(!d.within(TOLERANCE) && d.worst == "attn_out", "the broken causal mask passed: {d:?}");
}

#[test]
fn the_chunked_gdn_matches_the_cpu_and_a_broken_one_is_caught() {
    if !gpu_or_skip("the chunked GDN") {
        return;
    }
    // tiny's 3 value heads at T = 1, 64 (one whole chunk) and 130 (two and a partial one), every scan width
    use mk::verify::gdn_chunk::run;
    for dv in [16, 32, 64] {
        run("tiny", &[1, 64, 130], 1, &cache(), &Defines::parse(&[format!("GDNC_DV={dv}")]).unwrap()).unwrap();
    }
    let broken = Defines::parse(&["MK_BREAK_GDN".to_string()]).unwrap();
    let e = run("tiny", &[130], 1, &cache(), &broken).unwrap_err().to_string();
    assert!(e.contains("the chunked GDN is wrong"), "{e}");
}

#[test]
fn the_gpu_agent_replay_emits_the_same_tokens_on_both_paths_resident_or_not() {
    if !gpu_or_skip("the agent replay") {
        return;
    }
    // issue 29: graph = megakernel = stateless, and a hand-off that forgets the state is caught
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    mk::verify::agent::run(&mk::verify::agent::Args {
        dir: common::tiny().to_path_buf(),
        trajectories: root.join("experiments/agent/trajectories.json"),
        only: vec!["t01".to_string(), "t02".to_string()],
        max_steps: 3,
        m: 8,
        stateless: true,
        control: true,
        grammar: true,
        park: true,
        interleaved: true,
        speculate_agree: vec![0, 3, 7],
        prefill: 0,
        out: None,
        cache: cache(),
        defines: Defines::default(),
    })
    .unwrap();
    // appends through a prefill program of 64 rows (issue 28), anchored at the session's last multiple of
    // 64: graph = megakernel = stateless = parked in tokens and final state bits, interleaved sessions as
    // each alone (a park keeps the anchor), unanchored appends caught by the state's bits
    mk::verify::agent::run(&mk::verify::agent::Args {
        dir: common::tiny().to_path_buf(),
        trajectories: root.join("experiments/agent/trajectories.json"),
        only: vec!["t01".to_string(), "t02".to_string()],
        max_steps: 3,
        m: 8,
        stateless: true,
        control: true,
        grammar: false,
        park: true,
        interleaved: true,
        speculate_agree: vec![3],
        prefill: 64,
        out: None,
        cache: cache(),
        defines: Defines::default(),
    })
    .unwrap();
}

#[test]
fn generation_on_both_gpu_paths_with_and_without_speculation_gives_the_same_tokens() {
    if !gpu_or_skip("generation on the GPU paths") {
        return;
    }
    // issue 27 item 7: `mk generate --path graph|megakernel [--speculate K]`, greedy
    use mk::exec::gpu::generate::{generate, Generation};
    let ck = mk::model::checkpoint::Checkpoint::open(common::tiny()).unwrap();
    use mk::model::sample::SamplingParams;
    let sampled = |params: SamplingParams, speculate, mega| {
        let g = Generation { prompt: &[1, 2, 3, 4, 5], steps: 300, params, seed: 7, speculate, mega };
        generate(&ck, &g, &cache(), &Defines::default()).unwrap().0
    };
    let run = |speculate, mega| sampled(SamplingParams::greedy(), speculate, mega);
    let plain = run(None, false);
    assert_eq!(plain.len(), 300);
    for (speculate, mega) in [(None, true), (Some(3), false), (Some(3), true), (Some(7), false)] {
        assert_eq!(run(speculate, mega), plain, "speculate {speculate:?}, megakernel {mega}");
    }
    // sampled speculation (the exact rule, drafts drawn from the drafter): top-k 1 is greedy; at
    // temperature 1 the same draws on both paths (the same logits' bits), and not the greedy tokens
    let top1 = SamplingParams { temperature: 1.0, top_k: 1, top_p: 1.0 };
    assert_eq!(sampled(top1, Some(3), false), plain, "sampled speculation at top-k 1");
    let t1 = SamplingParams { temperature: 1.0, top_k: 0, top_p: 1.0 };
    let (g, m) = (sampled(t1, Some(3), false), sampled(t1, Some(3), true));
    assert_eq!(g, m, "sampled speculation: graph = megakernel");
    assert_ne!(g, plain, "temperature 1 samples");
}
