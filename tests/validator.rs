//! The validator rejects each kind of broken program with one line naming the word and the rule.

use mk::compiler::{compile, h200};
use mk::isa::{slot, validate::validate, Opcode, Program, NO_COUNTER};
use mk::model::config::ModelConfig;

fn tiny() -> Program {
    compile(&ModelConfig::preset("tiny").unwrap(), "tiny", &h200(1)).unwrap()
}

fn find(p: &Program, op: Opcode, layer: u16) -> usize {
    p.words.iter().position(|w| w.opcode == op && w.layer == layer).unwrap()
}

/// The word of layer 0 that writes buffer `out` (a stage's words are in no fixed order).
fn writer(p: &Program, out: &str) -> usize {
    let b = p.buffer_id(out).unwrap() as u16;
    p.words.iter().position(|w| w.layer == 0 && w.ops[slot::OUT0] == b).unwrap()
}

fn rejects(p: &Program, want: &[&str]) -> String {
    let e = validate(p).expect_err("a broken program was accepted").to_string();
    assert!(!e.contains('\n'), "one line: {e}");
    for w in want {
        assert!(e.contains(w), "expected {w:?} in: {e}");
    }
    e
}

#[test]
fn the_compiled_program_is_valid() {
    validate(&tiny()).unwrap();
}

#[test]
fn a_wait_that_is_never_satisfied_is_a_deadlock() {
    let mut p = tiny();
    let i = find(&p, Opcode::GdnStep, 1);
    p.words[i].wait_target += 1;
    rejects(&p, &[&format!("word {i} (GdnStep, layer 1)"), "waits", "never satisfied (deadlock)"]);
}

#[test]
fn a_wait_for_part_of_a_counter_is_ambiguous() {
    let mut p = tiny();
    let i = find(&p, Opcode::GdnStep, 1);
    p.words[i].wait_target -= 1;
    rejects(&p, &[&format!("word {i} (GdnStep"), "ambiguous"]);
}

#[test]
fn waiting_on_a_later_producer_deadlocks_a_persistent_kernel() {
    let mut p = tiny();
    // The GDN step waits for its own layer's out_proj.
    let (i, j) = (find(&p, Opcode::GdnStep, 0), find(&p, Opcode::GemvResidual, 0));
    (p.words[i].wait, p.words[i].wait_target) = (p.words[j].signal, p.words[j].units);
    rejects(&p, &[&format!("word {i} (GdnStep, layer 0)"), &format!("signalled by word {j}, not earlier")]);
}

#[test]
fn unordered_words_writing_the_same_rows_collide() {
    let mut p = tiny();
    // in_proj_z now writes qkv, beside in_proj_qkv in the same stage.
    let i = writer(&p, "z");
    let qkv = p.buffer_id("qkv").unwrap() as u16;
    p.words[i].ops[slot::OUT0] = qkv;
    p.words[i].rows = 384;
    rejects(&p, &["hazards", "qkv[0, 384)"]);
}

#[test]
fn an_input_nobody_wrote_is_rejected() {
    let mut p = tiny();
    // The embedding writes the wrong buffer: every reader of h reads garbage.
    p.words[0].ops[slot::OUT0] = p.buffer_id("k").unwrap() as u16; // as wide as h, so the shape passes
    rejects(&p, &["inputs", "reads h[0, 256)", "no word ordered before it wrote"]);
}

#[test]
fn buffer_ids_and_row_ranges_out_of_bounds() {
    let mut p = tiny();
    let i = find(&p, Opcode::GdnStep, 2);
    p.words[i].ops[slot::ST0] = 999;
    rejects(&p, &[&format!("word {i} (GdnStep, layer 2)"), "buffer id 999 out of range"]);
    // The slots past the first ten are checked alike.
    let mut p = tiny();
    let i = find(&p, Opcode::GdnStep, 2);
    p.words[i].ops[slot::IN4] = 999;
    rejects(&p, &[&format!("word {i} (GdnStep, layer 2)"), "operand in4 = buffer id 999 out of range"]);
    let mut p = tiny();
    p.words[0].rows = 300;
    p.words[0].units = 1;
    rejects(&p, &["word 0 (Embed", "bounds", "h[0, 300)", "256 elements"]);
}

#[test]
fn wrong_operand_kinds_and_shapes() {
    let mut p = tiny();
    let i = find(&p, Opcode::GemvGateUp, 0);
    p.words[i].ops[slot::W1] = p.buffer_id("act").unwrap() as u16;
    rejects(&p, &[&format!("word {i} (GemvGateUp"), "operand w1 is act (Activation), needs a Weight buffer"]);
    // up stored otherwise than gate (the kernels read both as gate's storage says)
    let mut p = tiny();
    let i = find(&p, Opcode::GemvGateUp, 0);
    let up = p.words[i].ops[slot::W1] as usize;
    p.buffers[up].elem_bytes = 2;
    rejects(&p, &[&format!("word {i} (GemvGateUp"), "and up", "differ"]);
    let mut p = tiny();
    let i = writer(&p, "qkv");
    p.words[i].units += 1;
    rejects(&p, &["shape", "units 21 != 20 row slices"]);
    // The GDN step's norm weight (w3) must be one head wide, its conv taps (w2) four per channel.
    let mut p = tiny();
    let i = find(&p, Opcode::GdnStep, 0);
    p.words[i].ops[slot::W3] = p.words[i].ops[slot::W0];
    rejects(&p, &[&format!("word {i} (GdnStep"), "A_log has 3 elements, the word needs 128"]);
    let mut p = tiny();
    let i = find(&p, Opcode::GdnStep, 0);
    p.words[i].ops[slot::W2] = p.words[i].ops[slot::W3];
    rejects(&p, &[&format!("word {i} (GdnStep"), "norm.weight has 128 elements, the word needs 2560"]);
    // One value head per unit: the kernels take the unit index as the head.
    let mut p = tiny();
    let i = find(&p, Opcode::GdnStep, 0);
    (p.words[i].unit_rows, p.words[i].units) = (3, 1);
    rejects(&p, &[&format!("word {i} (GdnStep"), "unit_rows 3 (one value head per unit)"]);
    // Its position must come from the control block.
    let mut p = tiny();
    let i = find(&p, Opcode::GdnStep, 0);
    p.words[i].ops[slot::IN3] = p.buffer_id("z").unwrap() as u16;
    rejects(&p, &[&format!("word {i} (GdnStep"), "operand in3 is z (Activation), needs a Control buffer"]);
    let mut p = tiny();
    p.words[3].m_rows = 2;
    rejects(&p, &["word 3", "m_rows 2"]);
}

#[test]
fn counters_that_are_never_reset() {
    let mut p = tiny();
    p.words.pop();
    rejects(&p, &["reset", "exactly one EndStep"]);
    let mut p = tiny();
    let n = p.words.len();
    p.words[n - 1].wait = NO_COUNTER;
    rejects(&p, &["not ordered before the EndStep"]);
}

#[test]
fn opcode_arguments_and_unsignalled_counters() {
    let mut p = tiny();
    let i = find(&p, Opcode::AttnScores, 3);
    p.words[i].arg0 = 64;
    rejects(&p, &[&format!("word {i} (AttnScores"), "arg0 = 64 partitions"]);
    let mut p = tiny();
    let i = find(&p, Opcode::GemvGateUp, 0);
    p.words[i].flags |= mk::isa::FLAG_PARTIAL;
    rejects(&p, &["FLAG_PARTIAL on an opcode that has no split-K form"]);
    let mut p = tiny();
    let i = find(&p, Opcode::GdnStep, 0);
    p.n_counters += 1;
    p.words[i].wait = p.n_counters - 1;
    p.words[i].wait_target = 0;
    rejects(&p, &["signalled by no word"]);
    let mut p = tiny();
    let i = find(&p, Opcode::LmHead, 0);
    p.words[i].ops[slot::W0] = p.buffer_id("model.language_model.layers.0.mlp.down_proj.weight").unwrap() as u16;
    rejects(&p, &[&format!("word {i} (LmHead"), "down_proj.weight is [256, 512]"]);
}
