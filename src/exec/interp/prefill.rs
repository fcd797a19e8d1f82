//! Prefill on the interpreter (issue 28): a prompt through prefill programs (`Target::prefill`: M rows
//! at once, every row kept, the GDN recurrence by chunks of 64 anchored at the step's first row, the
//! head on the last row only), in steps of M rows and one of the remainder, the state handed from step
//! to step by buffer name. With M a multiple of 64 every step starts on a chunk boundary, so the steps
//! chunk the prompt as one pass over it does (`model::prefill`): the same bits (tests/prefill_program.rs).
//!
//! Owns: the steps' cut of the prompt and the hand-over of the state. Refuses: an empty prompt, a step
//! of no rows or more than `MAX_PREFILL_ROWS`, what a step refuses (token ids, the context).

use super::{Interp, Order};
use crate::bail;
use crate::compiler::{compile, h200};
use crate::error::Result;
use crate::isa::access::CTRL_POS;
use crate::isa::{BufKind, Program, MAX_PREFILL_ROWS};
use crate::model::checkpoint::Checkpoint;
use crate::model::ops::Activations;

/// What a prefill leaves: the prompt's last row's logits (bf16 values) and greedy next token, and every
/// State buffer of the program (conv rings, recurrent states, KV caches) by name.
#[derive(Debug)]
pub struct Prefilled {
    pub logits: Vec<f32>,
    pub next: u32,
    pub states: Vec<(String, Vec<f32>)>,
    /// The last step's every row of the last attention layer's output (`attn_out`; none when the model
    /// has no attention layer): what a prefill's causal attention gave each row, not only the last.
    pub outputs: Vec<(String, Vec<f32>)>,
}

impl Prefilled {
    /// A State buffer by name.
    pub fn state(&self, name: &str) -> Option<&[f32]> {
        self.states.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_slice())
    }
}

/// The prefill program of `m` rows for the checkpoint's model (the H200 target) at `max_context`.
pub fn program(ck: &Checkpoint, m: u32, max_context: u32) -> Result<Program> {
    let mut t = h200(m);
    t.prefill = true;
    t.max_context = max_context;
    compile(&ck.config, "prefill", &t)
}

/// The attention layers' output activation (every row of a step).
pub const ATTN_OUT: &str = "attn_out";

/// Feeds `tokens` from position 0 in steps of `rows` rows (the last step the remainder), each step one
/// run of a prefill program in `order`, the fp8 linears' activations as `act` (`Fp8Dynamic`: fast mode).
pub fn prefill(
    ck: &Checkpoint,
    tokens: &[u32],
    rows: u32,
    max_context: u32,
    order: Order,
    act: Activations,
) -> Result<Prefilled> {
    if tokens.is_empty() {
        bail!("prefill: no tokens");
    }
    if rows == 0 || rows > MAX_PREFILL_ROWS {
        bail!("prefill: steps of {rows} rows (1-{MAX_PREFILL_ROWS})");
    }
    let full = program(ck, rows, max_context)?;
    let rem = tokens.len() % rows as usize;
    let part = if rem > 0 { Some(program(ck, rem as u32, max_context)?) } else { None };
    let mut states: Vec<(String, Vec<f32>)> = Vec::new();
    let (mut logits, mut next, mut pos) = (Vec::new(), 0, 0usize);
    let mut outputs = Vec::new();
    let mut it_full: Option<Interp> = None;
    for chunk in tokens.chunks(rows as usize) {
        // a new interpreter takes the state the last step left; the full steps' own keeps its state
        let mut fresh;
        let (it, new) = match (&part, chunk.len() == rows as usize) {
            (Some(p), false) => {
                fresh = Interp::new(p, ck)?;
                (&mut fresh, true)
            }
            _ => match &mut it_full {
                Some(it) => (it, false),
                None => (it_full.insert(Interp::new(&full, ck)?), true),
            },
        };
        let prog = it.prog;
        if new {
            it.set_activations(act);
            for (name, v) in &states {
                if let Some(b) = prog.buffer_id(name) {
                    it.bufs[b].copy_from_slice(v);
                }
            }
        }
        it.select(0);
        let ctrl = it.ctrl;
        it.bufs[ctrl][CTRL_POS] = pos as f32;
        let toks = it.step_rows(chunk, order)?;
        it.rows_start = None; // a prefill keeps every row: nothing to roll back
        let all = it.logits_rows();
        let vocab = all.len() / chunk.len();
        logits = all[(chunk.len() - 1) * vocab..].to_vec();
        next = toks[chunk.len() - 1];
        states = prog
            .buffers
            .iter()
            .enumerate()
            .filter(|(_, b)| b.kind == BufKind::State)
            .map(|(i, b)| (b.name.clone(), it.bufs[i].clone()))
            .collect();
        outputs =
            prog.buffer_id(ATTN_OUT).map(|b| vec![(ATTN_OUT.to_string(), it.bufs[b].clone())]).unwrap_or_default();
        pos += chunk.len();
    }
    Ok(Prefilled { logits, next, states, outputs })
}
