//! Programs as data: the committed programs in programs/ are exactly what the compiler produces today,
//! they round-trip through RON and the binary word image, and the 27B program's size is pinned.

use mk::compiler::{compile, h200};
use mk::isa::{validate::validate, Program, Word, WORD_BYTES};
use mk::model::config::ModelConfig;
use std::path::Path;

const PRESETS: [&str; 3] = ["tiny", "small", "qwen3.5-27b"];

#[test]
fn committed_programs_are_fresh_and_valid() {
    for p in PRESETS {
        let prog = compile(&ModelConfig::preset(p).unwrap(), p, &h200(1)).unwrap();
        validate(&prog).unwrap();
        let text = prog.to_ron().unwrap();
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("programs/{p}.ron"));
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            committed == text,
            "programs/{p}.ron is stale: regenerate with `mk compile --preset {p} --out programs/{p}.ron`"
        );
        assert_eq!(Program::from_ron(&committed).unwrap(), prog);
        // Deterministic: the same input gives the same program, byte for byte.
        let again = compile(&ModelConfig::preset(p).unwrap(), p, &h200(1)).unwrap();
        assert_eq!(again.to_ron().unwrap(), text);
    }
}

#[test]
fn the_27b_program_has_612_words() {
    // 48 GDN layers x 9 (4 projections, the GDN step, out_proj, gate/up, down and its reduce) + 16
    // attention layers x 11 + embed, lm_head, argmax, end-of-step (README): the balanced unit shapes
    // split the down projection in 3 parts and nothing else (one reduce).
    let prog = Program::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("programs/qwen3.5-27b.ron")).unwrap();
    assert_eq!(prog.words.len(), 48 * 9 + 16 * 11 + 4);
    let down = prog.words.iter().find(|w| w.opcode == mk::isa::Opcode::GemvResidual && w.k_parts > 1).unwrap();
    assert_eq!((down.rows, down.k_parts), (5120, 3));
    // The first shapes (`--units fixed`): with 32-row units more GEMVs have too few row slices per SM
    // and split (GDN layers 12 words, attention 15; the GDN's bf16 a and b, in 8-row units, do not).
    let cfg = mk::model::config::ModelConfig::preset("qwen3.5-27b").unwrap();
    let mut t = mk::compiler::h200(1);
    t.units = mk::isa::UnitPolicy::Fixed;
    let fixed = mk::compiler::compile(&cfg, "qwen3.5-27b", &t).unwrap();
    assert_eq!(fixed.words.len(), 48 * 12 + 16 * 15 + 4);
    // The split GDN lowering (GdnConv, GdnRecur, out_proj with the gated norm): one word more a layer.
    t = mk::compiler::h200(1);
    t.gdn = mk::isa::GdnLowering::Split;
    let split = mk::compiler::compile(&cfg, "qwen3.5-27b", &t).unwrap();
    assert_eq!(split.words.len(), 48 * 10 + 16 * 11 + 4);
    // Every weight byte of the step is streamed once (26.9 GB, seed Part 1).
    let bytes: u64 = prog.words.iter().map(|w| mk::isa::report::weight_bytes(&prog, w)).sum();
    assert!((26.8e9..27.0e9).contains(&(bytes as f64)), "{bytes}");
}

#[test]
fn the_binary_image_decodes_back_to_the_program() {
    let prog = Program::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("programs/tiny.ron")).unwrap();
    let img = prog.encode_words();
    assert_eq!(img.len(), prog.words.len() * WORD_BYTES);
    for (i, chunk) in img.chunks_exact(WORD_BYTES).enumerate() {
        assert_eq!(Word::decode(chunk.try_into().unwrap()).unwrap(), prog.words[i]);
    }
}

#[test]
fn other_targets_compile_and_validate() {
    use mk::isa::GdnLowering::{Fused, Split};
    // (M > 1 lowers GDN split whatever the target asks: tests/rows.rs)
    for (sms, m, gdn) in [(1, 1, Fused), (16, 4, Split), (188, 8, Fused), (132, 2, Split)] {
        let t = mk::isa::Target {
            sms,
            threads: 256,
            m_rows: m,
            max_context: 4096,
            units: Default::default(),
            gemv_unit_rows: 16,
            gdn,
            prefill: false,
            head_mask: false,
        };
        let prog = compile(&ModelConfig::preset("small").unwrap(), "small", &t).unwrap();
        validate(&prog).unwrap();
    }
    let bad = mk::isa::Target {
        sms: 132,
        threads: 256,
        m_rows: 9,
        max_context: 4096,
        units: Default::default(),
        gemv_unit_rows: 16,
        gdn: Default::default(),
        prefill: false,
        head_mask: false,
    };
    assert!(compile(&ModelConfig::preset("tiny").unwrap(), "tiny", &bad).unwrap_err().to_string().contains("M = 9"));
    assert!(Program::from_ron("(format: 1, words: [").unwrap_err().to_string().starts_with("program:"));
}

#[test]
fn head_mask_programs_validate_and_a_misshapen_mask_is_refused() {
    // issue 30: the head mask is one Control buffer read by the LmHead (IN2), per row
    for (p, m) in [("tiny", 1), ("tiny", 4), ("qwen3.5-27b", 1), ("qwen3.5-27b", 8)] {
        let cfg = ModelConfig::preset(p).unwrap();
        let prog = compile(&cfg, p, &mk::isa::Target { head_mask: true, ..h200(m) }).unwrap();
        validate(&prog).unwrap();
        let b = prog.buffer_id("head_mask").unwrap();
        assert_eq!((prog.buffers[b].rows, prog.buffers[b].cols), (m as u64, 1 + (cfg.vocab as u64).div_ceil(16)));
        // what a mask becomes: row 1's flag and ids 0, 17 and the last
        let words = cfg.vocab.div_ceil(32);
        let mut mask = vec![0u32; words];
        for id in [0usize, 17, cfg.vocab - 1] {
            mask[id / 32] |= 1 << (id % 32);
        }
        if m > 1 {
            let mut masks = vec![None; m as usize];
            masks[1] = Some(mask.clone());
            let (at, v) = prog.head_mask(&masks).unwrap();
            let cols = prog.buffers[at].cols as usize;
            assert!(v[..cols].iter().all(|&x| x == 0.0), "row 0 is unmasked");
            let row = &v[cols..2 * cols];
            assert_eq!((row[0], row[1], row[2]), (1.0, 1.0, 2.0)); // the flag; id 0; id 17 = bit 1 of element 2
            assert_eq!(row[1 + (cfg.vocab - 1) / 16], (1u32 << ((cfg.vocab - 1) % 16)) as f32);
            assert_eq!(row.iter().filter(|&&x| x != 0.0).count(), 4);
        }
        // negative control: a mask buffer one element short
        let mut bad = prog.clone();
        bad.buffers[b].cols -= 1;
        let e = validate(&bad).unwrap_err().to_string();
        assert!(e.contains("head mask"), "{e}");
    }
    // a program without a head mask refuses masks; a drafter and a prefill refuse a head mask
    let cfg = ModelConfig::preset("tiny").unwrap();
    let plain = compile(&cfg, "tiny", &h200(1)).unwrap();
    let e = plain.head_mask(&[None]).unwrap_err().to_string();
    assert!(e.contains("no head mask"), "{e}");
    let t = mk::isa::Target { head_mask: true, ..h200(1) };
    let e = mk::compiler::compile_drafter(&cfg, "tiny-mtp", &t, mk::compiler::DraftInput::Target).unwrap_err();
    assert!(e.to_string().contains("head mask"), "{e}");
    let e = compile(&cfg, "tiny", &mk::isa::Target { prefill: true, ..t }).unwrap_err();
    assert!(format!("{e:#}").contains("head mask"), "{e:#}");
}

#[test]
fn the_cuda_header_is_generated_from_the_isa() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("megakernel/abi.cuh");
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == mk::exec::gpu::abi::header(),
        "megakernel/abi.cuh is stale: `mk program header > megakernel/abi.cuh`"
    );
}

#[test]
fn every_opcode_has_its_op_file_and_kernel() {
    // One op, one device function, four spellings: Opcode::X, OP_X, op_x in ops/x.cuh, k_x.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("megakernel");
    let discrete = std::fs::read_to_string(root.join("discrete.cu")).unwrap();
    let src = mk::exec::gpu::source();
    for op in mk::isa::Opcode::ALL {
        let snake = op.snake();
        let file = std::fs::read_to_string(root.join(format!("ops/{snake}.cuh"))).unwrap_or_default();
        assert!(
            file.contains(&format!("__device__ void op_{snake}(")),
            "megakernel/ops/{snake}.cuh defines no op_{snake}"
        );
        // K_OP(x) / K_GEMV(x, min blocks) define k_x, which runs op_x on the block's unit(s).
        assert!(
            discrete.contains(&format!("\nK_OP({snake})\n")) || discrete.contains(&format!("\nK_GEMV({snake}, ")),
            "no k_{snake}"
        );
        assert!(
            src.contains(&format!("#define OP_{} {}", snake.to_uppercase(), op as u16)),
            "OP_{} missing",
            snake.to_uppercase()
        );
        assert!(src.contains(&format!("// ---- megakernel/ops/{snake}.cuh")), "ops/{snake}.cuh not compiled");
    }
}

#[test]
fn without_a_gpu_the_runtime_says_so_in_one_line() {
    if mk::experiment::paths::gpu().is_some() {
        eprintln!("skipped: this machine has a GPU (the test checks the message on machines without one)");
        return;
    }
    match mk::exec::gpu::Gpu::open() {
        Ok(_) => panic!("a GPU opened on a machine whose driver reports none"),
        Err(e) => {
            let m = e.to_string();
            assert!(m.starts_with("no GPU") && !m.contains('\n'), "{m}");
        }
    }
}

#[test]
fn streamed_bytes_count_kv_rows_and_recurrent_state() {
    // The bandwidth of attention and of the GDN step is over what they stream, not over weights.
    use mk::isa::report::{streamed_bytes, weight_bytes};
    let prog = Program::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("programs/qwen3.5-27b.ron")).unwrap();
    let find = |op: mk::isa::Opcode| prog.words.iter().find(|w| w.opcode == op).unwrap();
    let extra = |op| {
        let w = find(op);
        streamed_bytes(&prog, w, 1024) - weight_bytes(&prog, w)
    };
    // K (or V) rows: positions x 4 KV heads x 256 dims x 2 bytes (beside the small norm weights).
    assert_eq!(extra(mk::isa::Opcode::AttnScores), 1024 * 4 * 256 * 2);
    assert_eq!(extra(mk::isa::Opcode::AttnPv), 1024 * 4 * 256 * 2);
    // 48 value heads x 128 x 128 fp32 and the conv ring (10,240 channels x 4 bf16), read and written.
    assert_eq!(extra(mk::isa::Opcode::GdnStep), 2 * 48 * 128 * 128 * 4 + 2 * 10240 * 4 * 2);
    let g = find(mk::isa::Opcode::GemvGateUp);
    assert_eq!(streamed_bytes(&prog, g, 1024), weight_bytes(&prog, g));
}

#[test]
fn split_parts_fill_the_last_round() {
    use mk::compiler::split_parts;
    // The examples of its doc comment (27B, 528 resident GEMV blocks).
    assert_eq!(split_parts(320, 0, 17, 528), 3);
    assert_eq!(split_parts(320, 0, 6, 528), 1);
    // A stage already busy with other words' units does not split.
    assert_eq!(split_parts(640, 390, 5, 528), 1);
    // One k-group: nothing to split.
    assert_eq!(split_parts(3, 0, 1, 528), 1);
}

#[test]
fn gemv_blocks_per_sm_matches_the_kernels_launch_bounds() {
    let common = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("megakernel/common.cuh")).unwrap();
    let want = format!("#define GEMV_MIN_BLOCKS {} ", mk::compiler::GEMV_BLOCKS_PER_SM);
    assert!(common.contains(&want), "{want} in common.cuh");
}

/// The megakernel's multi-step launch (megakernel.cu) keeps counters and unit tickets growing across
/// the steps of one launch: in step s a word's tickets start at s * (units + blocks) and its wait
/// target is wait_target + s * stride. A CPU model of the kernel's block loop (blocks interleaved at
/// random, one action at a time, the join between steps included) must run every unit of
/// every step exactly once, never deadlock, and let a unit run only when its counter holds exactly the
/// increments the single-step program requires (the step's own producers, all done). Negative
/// control: without the stride (targets as in one step) a unit runs early, and the model says so.
/// (The device-side stop is not modelled: the kernel decides it from the previous step's token, which
/// no block can change after the join.)
#[test]
fn multi_step_launch_protocol_runs_every_unit_once() {
    for p in PRESETS {
        let prog = compile(&ModelConfig::preset(p).unwrap(), p, &h200(1)).unwrap();
        let st = mk::exec::gpu::launch::wait_strides(&prog);
        for (w, s) in prog.words.iter().zip(&st) {
            if w.wait != mk::isa::NO_COUNTER {
                assert!(w.wait_target >= 1 && w.wait_target <= *s, "{p}: target {} stride {s}", w.wait_target);
            }
        }
    }
    let prog = compile(&ModelConfig::preset("tiny").unwrap(), "tiny", &h200(1)).unwrap();
    let stride = mk::exec::gpu::launch::wait_strides(&prog);
    for (blocks, seed) in [(1, 1), (3, 2), (7, 3), (16, 4)] {
        simulate_multi_step(&prog, &stride, 3, blocks, seed).unwrap();
    }
    let err = simulate_multi_step(&prog, &vec![0; stride.len()], 3, 7, 5).unwrap_err();
    assert!(err.contains("ran early"), "{err}");
}

/// The model of megakernel.cu's block loop over `n_steps` steps with `blocks` blocks.
fn simulate_multi_step(prog: &Program, stride: &[u32], n_steps: u32, blocks: u32, seed: u64) -> Result<(), String> {
    let nw = prog.words.len();
    let mut counters = vec![0u32; prog.n_counters as usize];
    let mut own = vec![vec![0u32; prog.n_counters as usize]; n_steps as usize];
    let mut next = vec![0u32; nw];
    let mut ran = vec![vec![0u32; nw]; n_steps as usize];
    let mut step_done = 0u32;
    // Per block: its step, its word, the unit in hand (u32::MAX at the end of a step: counted), done.
    #[derive(Clone, Copy)]
    struct B {
        s: u32,
        wi: usize,
        unit: Option<u32>,
        done: bool,
    }
    let mut bs = vec![B { s: 0, wi: 0, unit: None, done: false }; blocks as usize];
    // One action of a block picked at random (xorshift64) per turn: any block may lag any other.
    let mut x = seed.wrapping_mul(0x9E3779B97F4A7C15) | 1;
    let mut stalled = 0u32;
    while bs.iter().any(|b| !b.done) {
        let mut progressed = false;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        {
            let b = &mut bs[(x % blocks as u64) as usize];
            if b.done {
                continue;
            }
            if b.wi == nw {
                if b.unit.is_none() {
                    step_done += 1;
                    b.unit = Some(u32::MAX);
                    progressed = true;
                } else if b.s + 1 == n_steps {
                    b.done = true;
                    progressed = true;
                } else if step_done >= (b.s + 1) * blocks {
                    *b = B { s: b.s + 1, wi: 0, unit: None, done: false };
                    progressed = true;
                }
                stalled = if progressed { 0 } else { stalled + 1 };
                if stalled > 100_000 {
                    return Err("deadlock at the join between steps".into());
                }
                continue;
            }
            let w = &prog.words[b.wi];
            match b.unit {
                None => {
                    let t = next[b.wi];
                    next[b.wi] += 1;
                    let u = t.wrapping_sub(b.s * (w.units + blocks));
                    if u >= w.units {
                        b.wi += 1;
                    } else {
                        b.unit = Some(u);
                    }
                    progressed = true;
                }
                Some(_) => {
                    let c = w.wait as usize;
                    let ready = w.wait == mk::isa::NO_COUNTER || counters[c] >= w.wait_target + b.s * stride[b.wi];
                    if !ready {
                        stalled += 1;
                        if stalled > 100_000 {
                            return Err("deadlock".into());
                        }
                        continue;
                    }
                    if w.wait != mk::isa::NO_COUNTER && own[b.s as usize][c] < w.wait_target {
                        return Err(format!(
                            "step {} word {} ran early: its counter holds {} of this step's {} increments",
                            b.s, b.wi, own[b.s as usize][c], w.wait_target
                        ));
                    }
                    ran[b.s as usize][b.wi] += 1;
                    counters[w.signal as usize] += 1;
                    own[b.s as usize][w.signal as usize] += 1;
                    b.unit = None;
                    progressed = true;
                }
            }
        }
        if progressed {
            stalled = 0;
        } else {
            stalled += 1;
            if stalled > 100_000 {
                return Err("deadlock".into());
            }
        }
    }
    for (s, r) in ran.iter().enumerate() {
        for (wi, w) in prog.words.iter().enumerate() {
            if r[wi] != w.units {
                return Err(format!("step {s} word {wi}: {} units ran of {}", r[wi], w.units));
            }
        }
    }
    for (wi, w) in prog.words.iter().enumerate() {
        if next[wi] != n_steps * (w.units + blocks) {
            return Err(format!("word {wi}: {} tickets", next[wi]));
        }
    }
    Ok(())
}
