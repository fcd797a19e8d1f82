//! M rows (a verification step over M consecutive positions): on the tiny preset, the CPU interpreter
//! running an M-row program equals the direct reference forward run one token at a time, bit for bit:
//! every row's logits, its greedy token, and the conv / recurrent states and KV caches after the last
//! step (flushed: an M-row step's GDN updates are committed by the next step); in program order and in random dependency-respecting orders, across the first attention
//! partition boundary (position 256). The negative control swaps two tokens of one step: the
//! comparison must then report a difference.

mod common;
use mk::compiler::{compile, h200};
use mk::exec::interp::{Interp, Order};
use mk::isa::validate::validate;
use mk::isa::{GdnLowering, Opcode, UnitPolicy};
use mk::model::checkpoint::Checkpoint;
use mk::model::config::ModelConfig;
use mk::model::forward::{step, State, Weights};
use mk::model::ops::argmax;

fn program(m: u32, units: UnitPolicy) -> mk::isa::Program {
    let mut t = h200(m);
    t.units = units;
    let p = compile(&ModelConfig::preset("tiny").unwrap(), "tiny", &t).unwrap();
    validate(&p).unwrap();
    p
}

/// The token fed at position i (a fixed pseudo-random walk over the vocabulary).
fn token(i: usize, vocab: usize) -> u32 {
    ((i as u64 * 2_654_435_761 + 9419) % vocab as u64) as u32
}

/// Feeds `n` tokens (a multiple of M) through the reference one at a time and through the interpreter
/// M at a time; `swap` exchanges two tokens of the interpreter's step `swap` (the negative control).
/// Returns the first difference, None when every row and the final states are the same bits.
fn compare(p: &mk::isa::Program, n: usize, order: impl Fn(usize) -> Order, swap: Option<usize>) -> Option<String> {
    let ck = Checkpoint::open(common::tiny()).unwrap();
    let w = Weights::from_checkpoint(&ck);
    let m = p.target.m_rows as usize;
    let vocab = w.cfg.vocab;
    let mut st = State::new(&w.cfg, p.target.max_context as usize);
    let mut it = Interp::new(p, &ck).unwrap();
    let bits = |a: &[f32], b: &[f32]| a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits());
    for s in 0..n / m {
        let mut toks: Vec<u32> = (0..m).map(|r| token(s * m + r, vocab)).collect();
        let mut want = Vec::new();
        let mut want_next = Vec::new();
        for &t in &toks {
            let l = step(&w, &mut st, t, None).unwrap();
            want_next.push(argmax(&l) as u32);
            want.extend(l);
        }
        if swap == Some(s) {
            toks.swap(0, m - 1);
        }
        let next = match it.step_rows(&toks, order(s)) {
            Ok(t) => t,
            Err(e) => return Some(format!("step {s}: {e}")),
        };
        let got = it.logits_rows();
        if let Some(r) = (0..m).find(|&r| !bits(&want[r * vocab..(r + 1) * vocab], &got[r * vocab..(r + 1) * vocab])) {
            return Some(format!("step {s} (positions {}..{}): row {r}'s logits differ", s * m, s * m + m));
        }
        if next != want_next {
            return Some(format!("step {s}: tokens {next:?}, the reference's {want_next:?}"));
        }
        if it.pos() != (s + 1) * m {
            return Some(format!("step {s}: position {} after the step, want {}", it.pos(), (s + 1) * m));
        }
    }
    // the GDN states of an M-row step are committed by the next step (the deferred commit): flush
    if let Err(e) = it.flush_rows() {
        return Some(format!("flush: {e}"));
    }
    if it.pos() != n {
        return Some(format!("position {} after the flush, want {n}", it.pos()));
    }
    common::state_difference(&it, &st, w.cfg.attn_kv_dim(), Some(n))
}

#[test]
fn m_row_programs_lower_gdn_split_and_keep_one_row_per_buffer() {
    let p = program(4, UnitPolicy::Balanced);
    assert_eq!(p.target.gdn, GdnLowering::Split, "M > 1 lowers GDN split");
    assert!(p.words.iter().all(|w| w.opcode != Opcode::GdnStep && w.m_rows == 4));
    let ctrl = &p.buffers[p.buffer_id("ctrl").unwrap()];
    assert_eq!(ctrl.rows, 4);
    // A fused step forced into an M = 4 program, and a buffer of the wrong row count, are refused.
    let one = program(1, UnitPolicy::Balanced);
    let mut bad = one.clone();
    bad.target.m_rows = 4;
    for w in &mut bad.words {
        w.m_rows = 4;
    }
    let e = validate(&bad).unwrap_err().to_string();
    assert!(e.contains("has 1 rows, the target's M is 4"), "{e}");
    let mut bad = p.clone();
    let i = bad.words.iter().position(|w| w.opcode == Opcode::GdnRecur).unwrap();
    bad.words[i].opcode = Opcode::GdnStep;
    let e = validate(&bad).unwrap_err().to_string();
    assert!(e.contains("GdnStep runs M = 1 only"), "{e}");
    // An access past its row's columns (here the GDN conv's commit count, with a control block of three
    // columns) would reach the next row: refused, though it lies inside the buffer.
    let mut bad = p.clone();
    let c = bad.buffer_id("ctrl").unwrap();
    bad.buffers[c].cols = 3;
    let e = validate(&bad).unwrap_err().to_string();
    assert!(e.contains("(GdnConv") && e.contains("ctrl[3, 4), outside its row 0 of 3 columns"), "{e}");
    // An M-row program's GDN words keep their rows for the deferred commit: without them, refused
    let mut bad = p.clone();
    let i = bad.words.iter().position(|w| w.opcode == Opcode::GdnRecur).unwrap();
    bad.words[i].ops[mk::isa::slot::ST1] = mk::isa::NONE;
    let e = validate(&bad).unwrap_err().to_string();
    assert!(e.contains("operand st1 missing"), "{e}");
    // The attention words (and the embedding, the argmax) split their 4 rows over their units
    // (FLAG_ROW_UNITS: 4x a one-row program's units); the GEMVs do not (one weight pass for every row).
    let units =
        |p: &mk::isa::Program, op: Opcode| p.words.iter().filter(|w| w.opcode == op).map(|w| w.units).sum::<u32>();
    for w in &p.words {
        assert_eq!(w.flags & mk::isa::FLAG_ROW_UNITS != 0, w.opcode.row_split(), "{:?}", w.opcode);
        if w.opcode.row_split() {
            assert_eq!(units(&p, w.opcode), 4 * units(&one, w.opcode), "{:?}", w.opcode);
        }
    }
    // The flag where rows are not independent, or units that do not cover the rows, are refused.
    let mut bad = p.clone();
    let i = bad.words.iter().position(|w| w.opcode == Opcode::GemvGateUp).unwrap();
    bad.words[i].flags |= mk::isa::FLAG_ROW_UNITS;
    let e = validate(&bad).unwrap_err().to_string();
    assert!(e.contains("FLAG_ROW_UNITS on GemvGateUp"), "{e}");
    let mut bad = p.clone();
    let i = bad.words.iter().position(|w| w.opcode == Opcode::AttnScores).unwrap();
    bad.words[i].units -= 1;
    let e = validate(&bad).unwrap_err().to_string();
    assert!(e.contains("k-parts x 4 rows"), "{e}");
}

#[test]
fn m_rows_equal_single_steps_bit_for_bit() {
    // M = 2 and 3 in program order (3 with the fixed unit shapes: split-K partials per row), M = 8
    // shuffled past position 256 (the second attention partition).
    assert_eq!(compare(&program(2, UnitPolicy::Balanced), 24, |_| Order::Program, None), None);
    let p3 = program(3, UnitPolicy::Fixed);
    assert!(p3.words.iter().any(|w| w.opcode == Opcode::ReduceResidual), "the fixed shapes exercise split-K");
    assert_eq!(compare(&p3, 24, |_| Order::Program, None), None);
    assert_eq!(compare(&program(8, UnitPolicy::Balanced), 272, |s| Order::Shuffled(s as u64), None), None);
}

#[test]
fn negative_control_swapped_tokens_are_caught() {
    let got = compare(&program(4, UnitPolicy::Balanced), 16, |_| Order::Program, Some(2));
    let e = got.expect("two swapped tokens must show in the bits");
    assert!(e.starts_with("step 2"), "{e}");
}
