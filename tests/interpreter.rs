//! The CPU interpreter of compiled programs against the direct CPU reference forward, bit for bit on
//! the tiny preset: in program order, and in random orders that respect only the declared
//! dependencies. The negative control removes one dependency: the random order must then differ.

mod common;
use mk::compiler::{compile, h200};
use mk::exec::interp::{Interp, Order};
use mk::isa::{validate::validate, Opcode, NO_COUNTER};
use mk::model::checkpoint::Checkpoint;
use mk::model::config::ModelConfig;
use mk::model::forward::{step, State, Weights};
use mk::model::ops::argmax;

const PROMPT: [u32; 5] = [9419, 11, 248045, 77, 1000];
const STEPS: usize = 64;

/// Runs prompt + greedy decode with the reference and the interpreter side by side; returns the first
/// failure (logits that differ at a step, or an interpreter error such as a wait never satisfied),
/// None when every step is identical; checks the final states too.
fn run(order: impl Fn(usize) -> Order, prog: &mk::isa::Program, check_states: bool) -> Option<String> {
    let ck = Checkpoint::open(common::tiny()).unwrap();
    let w = Weights::from_checkpoint(&ck);
    let mut st = State::new(&w.cfg, prog.target.max_context as usize);
    // Negative controls run a program the validator rejects, forced past it.
    let mut it = Interp::new_unchecked(prog, &ck).unwrap();
    assert_eq!(Interp::new(prog, &ck).is_ok(), validate(prog).is_ok());
    let mut tok = PROMPT[0];
    for s in 0..PROMPT.len() + STEPS {
        let logits = step(&w, &mut st, tok, None).unwrap();
        let next = match it.step(tok, order(s)) {
            Ok(t) => t,
            Err(e) => return Some(format!("step {s}: {e}")),
        };
        let same = logits.iter().zip(it.logits()).all(|(a, b)| a.to_bits() == b.to_bits());
        if !same || next != argmax(&logits) as u32 {
            return Some(format!("step {s}: logits differ"));
        }
        tok = if s + 1 < PROMPT.len() { PROMPT[s + 1] } else { next };
    }
    if check_states {
        let bits =
            |a: &[f32], b: &[f32]| a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits());
        for (l, ring) in st.conv.iter().enumerate() {
            assert!(bits(ring, it.buffer(&format!("conv_state.{l}")).unwrap()), "conv state {l}");
        }
        for (l, s) in st.recurrent.iter().enumerate() {
            assert!(bits(s, it.buffer(&format!("recurrent_state.{l}")).unwrap()), "recurrent state {l}");
        }
        for (l, (k, v)) in st.k_cache.iter().zip(&st.v_cache).enumerate() {
            assert!(bits(k, it.buffer(&format!("k_cache.{l}")).unwrap()), "k cache {l}");
            assert!(bits(v, it.buffer(&format!("v_cache.{l}")).unwrap()), "v cache {l}");
        }
    }
    None
}

fn tiny_program() -> mk::isa::Program {
    let p = compile(&ModelConfig::preset("tiny").unwrap(), "tiny", &h200(1)).unwrap();
    validate(&p).unwrap();
    p
}

#[test]
fn program_order_is_bit_identical_to_the_reference() {
    assert_eq!(run(|_| Order::Program, &tiny_program(), true), None);
    // The fixed unit shapes split tiny's residual GEMVs (the balanced ones do not): split-K and its
    // reduce give the same bits.
    let mut t = h200(1);
    t.units = mk::isa::UnitPolicy::Fixed;
    let p = compile(&ModelConfig::preset("tiny").unwrap(), "tiny", &t).unwrap();
    validate(&p).unwrap();
    assert!(p.words.iter().any(|w| w.opcode == Opcode::ReduceResidual), "the fixed-shape program exercises split-K");
    assert_eq!(run(|_| Order::Program, &p, true), None);
    // Units of 64 rows (`--unit-rows 64`): half the GEMV units, the same bits; of 8 (bf16 GEMVs only:
    // fp8 ones keep whole 32-row chunk groups), the same bits.
    let gemv =
        |p: &mk::isa::Program| p.words.iter().find(|w| w.opcode == Opcode::GemvGateUp).map(|w| (w.unit_rows, w.units));
    let base = gemv(&tiny_program()).unwrap();
    for rows in [64, 8] {
        let mut t = h200(1);
        t.gemv_unit_rows = rows;
        let p = compile(&ModelConfig::preset("tiny").unwrap(), "tiny", &t).unwrap();
        validate(&p).unwrap();
        let want = if rows == 64 { (64, base.1.div_ceil(2)) } else { base };
        assert_eq!(gemv(&p).unwrap(), want, "32-row units {base:?}, {rows}-row units");
        if rows == 8 {
            let bf16 = p.words.iter().find(|w| {
                w.opcode == Opcode::GemvNorm && w.op(mk::isa::slot::W0).is_some_and(|b| p.buffers[b].elem_bytes == 2)
            });
            assert_eq!(bf16.map(|w| w.unit_rows), Some(8), "a bf16 GEMV takes 8-row units");
        }
        assert_eq!(run(|_| Order::Program, &p, true), None);
    }
    // The split GDN lowering (GdnConv, GdnRecur, the gated norm in out_proj): the same bits.
    let mut t = h200(1);
    t.gdn = mk::isa::GdnLowering::Split;
    let ps = compile(&ModelConfig::preset("tiny").unwrap(), "tiny", &t).unwrap();
    validate(&ps).unwrap();
    assert!(
        ps.words.iter().any(|w| w.opcode == Opcode::GdnRecur) && !ps.words.iter().any(|w| w.opcode == Opcode::GdnStep)
    );
    assert_eq!(run(|_| Order::Program, &ps, true), None);
    let mut t = h200(1);
    // A unit the kernels cannot take is refused with its reason.
    t.gemv_unit_rows = 12;
    let e = compile(&ModelConfig::preset("tiny").unwrap(), "tiny", &t).unwrap_err().to_string();
    assert!(e.contains("GEMV unit rows 12"), "{e}");
}

#[test]
fn random_dependency_respecting_orders_are_bit_identical() {
    let p = tiny_program();
    for seed in [1u64, 2] {
        assert_eq!(run(|s| Order::Shuffled(seed * 1000 + s as u64), &p, true), None, "seed {seed}");
    }
}

#[test]
fn negative_control_a_removed_dependency_is_caught() {
    let mut p = tiny_program();
    // The lm_head stops waiting for the last layer: it may now read a half-updated hidden state.
    let i = p.words.iter().position(|w| w.opcode == Opcode::LmHead).unwrap();
    p.words[i].wait = NO_COUNTER;
    // The validator rejects it (the first rule it finds broken: the hand-off is no longer ordered after
    // the embedding and the layers).
    let e = validate(&p).unwrap_err().to_string();
    assert!(e.contains("not ordered before the EndStep"), "{e}");
    println!("validator: {e}");
    // Forced past the validator, program order still happens to be right ...
    assert_eq!(run(|_| Order::Program, &p, false), None);
    // ... but a random order that respects only the declared dependencies exposes it.
    let first = run(|s| Order::Shuffled(7000 + s as u64), &p, false);
    assert!(first.is_some(), "a removed dependency went unnoticed");
    println!("removed dependency caught: {first:?}");
}

#[test]
fn negative_control_a_weakened_dependency_shows_up_in_the_bits() {
    let mut p = tiny_program();
    // Layer 1's gate/up waits for the GDN step instead of out_proj, which adds into the hidden state it
    // normalises: the two now race on h.
    let gu = p.words.iter().position(|w| w.opcode == Opcode::GemvGateUp && w.layer == 1).unwrap();
    let op = p.words.iter().position(|w| w.opcode == Opcode::GemvResidual && w.layer == 1).unwrap();
    (p.words[gu].wait, p.words[gu].wait_target) = (p.words[op].wait, p.words[op].wait_target);
    let e = validate(&p).unwrap_err().to_string();
    assert!(e.contains(&format!("word {op} (GemvResidual, layer 1)")), "{e}");
    println!("validator: {e}");
    assert_eq!(run(|_| Order::Program, &p, false), None, "program order hides the race");
    let first = run(|s| Order::Shuffled(9000 + s as u64), &p, false);
    assert!(first.as_deref().is_some_and(|f| f.contains("logits differ")), "{first:?}");
    println!("weakened dependency caught: {first:?}");
}
