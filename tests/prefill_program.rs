//! Prefill programs (issue 28, item 6's CPU half): a prompt through the compiler's prefill programs on
//! the interpreter equals the CPU reference's prefill (`model::prefill`) bit for bit on tiny (the last
//! logits, the next token, every conv ring, recurrent state and KV cache), in program order and in a
//! random dependency-respecting order, whether the prompt is one step or several of 64 rows. The
//! negative control cuts the prompt off the 64-token chunk boundaries (steps of 48): its chunks are not
//! the one pass's, and the comparison must see it. The validator's new rules refuse what they must.

mod common;
use mk::exec::interp::prefill::{prefill, program, Prefilled};
use mk::exec::interp::Order;
use mk::isa::{slot, validate::validate, Opcode, FLAG_LAST_ROW};
use mk::model::checkpoint::Checkpoint;
use mk::model::config::ModelConfig;
use mk::model::forward::{State, Weights};
use mk::model::ops::Activations::{self, Bf16, Fp8Dynamic};
use mk::model::ops::SumOrder;

const T: usize = 100;
const CTX: u32 = 256;

fn tokens() -> Vec<u32> {
    (0..T as u64).map(|i| ((i * 2_654_435_761 + 77) % 248_320) as u32).collect()
}

fn bits(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

/// The first state or output of `got` that differs from the reference's prefill, or None.
fn differs(got: &Prefilled, logits: &[f32], st: &State) -> Option<String> {
    if !bits(&got.logits, logits) {
        return Some("the last logits".into());
    }
    if got.next != mk::model::ops::argmax(logits) as u32 {
        return Some("the next token".into());
    }
    let named = st.conv.iter().enumerate().map(|(l, v)| (format!("conv_state.{l}"), v));
    let named = named.chain(st.recurrent.iter().enumerate().map(|(l, v)| (format!("recurrent_state.{l}"), v)));
    let named = named.chain(st.k_cache.iter().enumerate().map(|(l, v)| (format!("k_cache.{l}"), v)));
    let named = named.chain(st.v_cache.iter().enumerate().map(|(l, v)| (format!("v_cache.{l}"), v)));
    for (name, want) in named {
        match got.state(&name) {
            Some(v) if bits(v, want) => {}
            Some(_) => return Some(name),
            None => return Some(format!("{name} (missing)")),
        }
    }
    None
}

#[test]
fn prefill_programs_equal_the_reference_prefill_bit_for_bit() {
    let ck = Checkpoint::open(common::tiny()).unwrap();
    let w = Weights::from_checkpoint(&ck);
    let toks = tokens();
    let mut st = State::new(&w.cfg, CTX as usize);
    let logits = mk::model::prefill::prefill(&w, &mut st, &toks).unwrap();
    // steps of 64 (64 + 36) and of 128 (one step of 100), in program order and one shuffled order
    for (rows, order) in [(64, Order::Program), (128, Order::Program), (64, Order::Shuffled(7))] {
        let got = prefill(&ck, &toks, rows, CTX, order, Bf16).unwrap();
        assert_eq!(differs(&got, &logits, &st), None, "steps of {rows} rows, {order:?}");
    }
    // negative control: steps of 48 chunk the prompt at 0, 48, 96 instead of 0, 64
    let off = prefill(&ck, &toks, 48, CTX, Order::Program, Bf16).unwrap();
    let d = differs(&off, &logits, &st);
    assert!(d.is_some(), "steps off the chunk boundaries must differ somewhere");
    eprintln!("negative control (steps of 48): first difference in {}", d.unwrap());
}

/// Fast mode (issue 28 item 1: the fp8 linears' activations quantised per token and 128-group): the
/// interpreter's prefill programs equal the reference's fast prefill bit for bit, so the GPU's fast
/// prefill has a CPU oracle of the same program (`mk gpu prefill --fast --check`). Control: the exact
/// mode's programs against the same reference differ.
#[test]
fn fast_mode_prefill_programs_equal_the_reference_fast_prefill() {
    let ck = Checkpoint::open(common::tiny()).unwrap();
    let w = Weights::with_numerics(&ck, SumOrder::Canonical, Fp8Dynamic);
    let toks = tokens();
    let mut st = State::new(&w.cfg, CTX as usize);
    let logits = mk::model::prefill::prefill(&w, &mut st, &toks).unwrap();
    let act: Activations = Fp8Dynamic;
    let got = prefill(&ck, &toks, 64, CTX, Order::Program, act).unwrap();
    assert_eq!(differs(&got, &logits, &st), None, "fast mode, steps of 64 rows");
    let exact = prefill(&ck, &toks, 64, CTX, Order::Program, Bf16).unwrap();
    let d = differs(&exact, &logits, &st);
    assert!(d.is_some(), "exact mode's prefill must differ from the fast reference");
    eprintln!("negative control (exact mode): first difference in {}", d.unwrap());
}

#[test]
fn prefill_programs_validate_and_their_rules_refuse_what_they_must() {
    let ck = Checkpoint::open(common::tiny()).unwrap();
    let p = program(&ck, 64, CTX).unwrap();
    validate(&p).unwrap();
    assert!(p.words.iter().any(|w| w.opcode == Opcode::GdnChunk));
    assert!(!p.words.iter().any(|w| w.opcode == Opcode::GdnRecur));
    assert!(p.words.iter().filter(|w| w.flags & FLAG_LAST_ROW != 0).count() == 2, "the head's two words");
    // (the 27B's prefill program of 128 rows validates too, `mk compile --preset qwen3.5-27b --rows 128
    // --prefill`: 2.3 M units, 15 minutes of the validator on one core: not a test)
    let mut t = mk::compiler::h200(128);
    t.prefill = true;
    // too many rows; a chunked recurrence in a decode program; FLAG_LAST_ROW on a GEMV; kept rows in a prefill
    t.m_rows = 129;
    let e = mk::compiler::compile(&ModelConfig::preset("tiny").unwrap(), "tiny", &t).unwrap_err().to_string();
    assert!(e.contains("M = 129"), "{e}");
    let mut bad = p.clone();
    bad.target.prefill = false;
    let e = validate(&bad).unwrap_err().to_string();
    assert!(e.contains("M = 64"), "{e}");
    let mut bad = p.clone();
    let g = bad.words.iter().position(|w| w.opcode == Opcode::GemvNorm).unwrap();
    bad.words[g].flags |= FLAG_LAST_ROW;
    assert!(validate(&bad).unwrap_err().to_string().contains("FLAG_LAST_ROW"));
    let mut bad = p.clone();
    let c = bad.words.iter().position(|w| w.opcode == Opcode::GdnChunk).unwrap();
    bad.words[c].ops[slot::IN3] = bad.buffer_id("ctrl").unwrap() as u16;
    assert!(validate(&bad).unwrap_err().to_string().contains("writes its state at once"));
    // an empty prompt, a step of no rows
    assert!(prefill(&ck, &[], 64, CTX, Order::Program, Bf16).is_err());
    assert!(prefill(&ck, &tokens(), 0, CTX, Order::Program, Bf16).unwrap_err().to_string().contains("steps of 0 rows"));
}
