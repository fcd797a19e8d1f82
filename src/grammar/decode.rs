//! Constrained greedy decoding (issue 30 items 2-4 on the CPU): each step's choice honours the matcher's
//! mask, the matcher advances on every emitted token, and where the grammar admits exactly one
//! continuation (`ToolMatcher::forced`) those tokens are known: they are emitted at once and ingested as
//! further rows of the next pass (their logits never computed: nobody reads them), never as decode
//! steps of their own. Only the pass's last row is scored, by the full head (the mask in the argmax, or
//! the scatter method) or, where the mask allows at most `masked_head_max` ids, by the masked head over
//! those rows alone.
//!
//! Two loops: the CPU reference's (`generate`: a pass's rows are decode steps of the body,
//! `forward::step_body`, the last one scored; the same bits as `rollback::verify`'s rows) and a
//! program's (`generate_steps`, on any `MaskedSteps`: the interpreter or either GPU path; an M-row
//! program's verification step, the rows after the pass's tokens padding rolled back with
//! `commit_rows`, the head honouring a per-row mask, the program's `head_mask` buffer; rows nobody
//! reads get a one-id mask, so their head scores one row). The prompt is fed the same way (its last row
//! scored), so the reference and the interpreter give the same tokens bit for bit.
//!
//! Owns: `Opts`, `Choose`, `Out`, the two loops. Refuses: an empty prompt, a context overflow, a token
//! the grammar refuses (cannot happen while the mask is honoured: an error, not a panic, if it does).

use std::time::Instant;

use super::mask::{argmax_masked, masked_head, scatter_argmax, Mask};
use super::matcher::ToolMatcher;
use crate::bail;
use crate::error::Result;
use crate::exec::interp::{Interp, Order};
use crate::model::forward::{step_body, State, Weights};
use crate::model::ops::argmax;
use crate::tokenizer::IM_END;

/// How the full head's logits become the step's token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choose {
    /// -inf into the disallowed logits, then the argmax (the production engines' method).
    Scatter,
    /// The mask inside the argmax (disallowed ids skipped).
    InArgmax,
    /// NEGATIVE CONTROL: the mask computed and ignored (plain greedy; the matcher is not advanced).
    Ignore,
}

#[derive(Debug, Clone, Copy)]
pub struct Opts {
    pub choose: Choose,
    /// The masked head scores a step whose mask allows at most this many ids (0: never).
    pub masked_head_max: usize,
    /// Forced tokens ride the next pass as rows (else each is its own step, chosen under its mask).
    pub forced_spans: bool,
    pub max_tokens: usize,
}

/// A constrained generation: its tokens (up to and with `<|im_end|>` if it ended) and what it did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Out {
    pub tokens: Vec<u32>,
    /// the turn ended on `<|im_end|>`
    pub ended: bool,
    /// passes of the model after the prompt's (each scores one row)
    pub passes: usize,
    /// tokens emitted as forced rows (no choice of their own)
    pub forced: usize,
    /// choices made by the masked head
    pub masked_head_steps: usize,
    /// choices where the mask allowed exactly one id (forced but chosen as a step)
    pub single_steps: usize,
    /// the matcher's time (masks, advancing, forced tokens), ns
    pub matcher_ns: u64,
    /// wall time of the prompt's pass (to its token) and of the whole loop, ns
    pub prompt_ns: u64,
    pub total_ns: u64,
}

/// The choice and bookkeeping shared by both loops: advances the matcher over the chosen token and the
/// forced ones after it; returns the tokens of the next pass (empty when the turn ended or is full).
fn advance(m: &mut ToolMatcher, o: &Opts, out: &mut Out, t: u32) -> Result<Vec<u32>> {
    out.tokens.push(t);
    if o.choose == Choose::Ignore {
        out.ended = t == IM_END;
        return Ok(if out.ended || out.tokens.len() >= o.max_tokens { Vec::new() } else { vec![t] });
    }
    let clock = Instant::now();
    m.advance(t)?;
    let mut rows = vec![t];
    if t == IM_END {
        out.ended = true;
        rows.clear();
    } else if o.forced_spans {
        for f in m.forced() {
            if out.tokens.len() >= o.max_tokens {
                break;
            }
            m.advance(f)?;
            out.tokens.push(f);
            out.forced += 1;
            if f == IM_END {
                out.ended = true;
                rows.clear();
                break;
            }
            rows.push(f);
        }
    }
    out.matcher_ns += clock.elapsed().as_nanos() as u64;
    if out.tokens.len() >= o.max_tokens {
        rows.clear();
    }
    Ok(rows)
}

fn mask_of(m: &mut ToolMatcher, o: &Opts, out: &mut Out, vocab: usize) -> Result<Mask> {
    if o.choose == Choose::Ignore {
        return Ok(Mask::all(vocab));
    }
    let clock = Instant::now();
    let mask = m.mask()?;
    out.matcher_ns += clock.elapsed().as_nanos() as u64;
    if mask.len() != vocab {
        bail!("grammar: a mask of {} ids for a head of {vocab}", mask.len());
    }
    if mask.count() == 1 {
        out.single_steps += 1;
    }
    Ok(mask)
}

/// Greedy constrained decoding of the turn after `prompt` on the CPU reference.
pub fn generate(w: &Weights, prompt: &[u32], m: &mut ToolMatcher, o: &Opts) -> Result<Out> {
    if prompt.is_empty() {
        bail!("constrained decoding: empty prompt");
    }
    let vocab = w.cfg.vocab;
    let mut st = State::new(&w.cfg, prompt.len() + o.max_tokens + 1);
    let mut out = Out::default();
    let mut rows = prompt.to_vec();
    let mut first = true;
    let start = Instant::now();
    while !rows.is_empty() {
        // a pass: every row's body, the last row scored
        let mut xn = Vec::new();
        for &r in &rows {
            xn = step_body(w, &mut st, r, None)?;
        }
        if !first {
            out.passes += 1;
        }
        let prompt_pass = first;
        first = false;
        let mask = mask_of(m, o, &mut out, vocab)?;
        let t = if o.choose != Choose::Ignore && mask.count() <= o.masked_head_max {
            out.masked_head_steps += 1;
            masked_head(&w.lm_head, &xn, &mask.ids())?.0
        } else {
            let logits = w.lm_head.gemv(&xn);
            match o.choose {
                Choose::Scatter => scatter_argmax(&logits, &mask)?,
                Choose::InArgmax => argmax_masked(&logits, &mask)?,
                Choose::Ignore => argmax(&logits) as u32,
            }
        };
        if prompt_pass {
            out.prompt_ns = start.elapsed().as_nanos() as u64;
        }
        rows = advance(m, o, &mut out, t)?;
    }
    out.total_ns = start.elapsed().as_nanos() as u64;
    Ok(out)
}

/// An executor of a model's steps whose head honours per-row masks (a program compiled with
/// `Target::head_mask`): the interpreter, and either GPU path (`exec::gpu::spec::GpuTarget`).
pub trait MaskedSteps {
    /// The program's rows a step (M).
    fn m_rows(&self) -> usize;
    /// The head's rows (what a mask covers).
    fn vocab(&self) -> usize;
    fn set_head_masks(&mut self, masks: Vec<Option<Vec<u32>>>) -> Result<()>;
    /// A one-row step (M = 1): the next token.
    fn step(&mut self, token: u32) -> Result<u32>;
    /// An M-row step: each row's next token.
    fn step_rows(&mut self, tokens: &[u32]) -> Result<Vec<u32>>;
    /// Keeps the first `n` rows of the last M-row step (the rest rolled back).
    fn commit_rows(&mut self, n: usize) -> Result<()>;
    /// A one-row step whose head's masks `masks` computes (the matcher's mask for this step's choice):
    /// by default computed, set, then stepped; an executor may run them while its step's body runs
    /// (the graph path: `GpuExec::step_overlapped`). The same token either way.
    fn step_masked(&mut self, token: u32, masks: &mut dyn FnMut() -> Result<Vec<Option<Vec<u32>>>>) -> Result<u32> {
        let m = masks()?;
        self.set_head_masks(m)?;
        self.step(token)
    }
}

impl MaskedSteps for Interp<'_> {
    fn m_rows(&self) -> usize {
        self.program().target.m_rows as usize
    }
    fn vocab(&self) -> usize {
        Interp::vocab(self)
    }
    fn set_head_masks(&mut self, masks: Vec<Option<Vec<u32>>>) -> Result<()> {
        Interp::set_head_masks(self, masks)
    }
    fn step(&mut self, token: u32) -> Result<u32> {
        Interp::step(self, token, Order::Program)
    }
    fn step_rows(&mut self, tokens: &[u32]) -> Result<Vec<u32>> {
        Interp::step_rows(self, tokens, Order::Program)
    }
    fn commit_rows(&mut self, n: usize) -> Result<()> {
        Interp::commit_rows(self, n)
    }
}

impl MaskedSteps for crate::exec::gpu::spec::GpuTarget<'_> {
    fn m_rows(&self) -> usize {
        self.exec.program().target.m_rows as usize
    }
    fn vocab(&self) -> usize {
        self.exec.vocab() as usize
    }
    fn set_head_masks(&mut self, masks: Vec<Option<Vec<u32>>>) -> Result<()> {
        self.exec.set_head_masks(&masks)
    }
    fn step(&mut self, token: u32) -> Result<u32> {
        if self.mega {
            self.exec.step_mega(token)
        } else {
            self.exec.step(token, false, |_, _| Ok(()))
        }
    }
    fn step_rows(&mut self, tokens: &[u32]) -> Result<Vec<u32>> {
        self.exec.step_rows(tokens, self.mega)
    }
    fn commit_rows(&mut self, n: usize) -> Result<()> {
        self.exec.commit_rows(n)
    }
    fn step_masked(&mut self, token: u32, masks: &mut dyn FnMut() -> Result<Vec<Option<Vec<u32>>>>) -> Result<u32> {
        if self.mega || !self.overlap {
            let m = masks()?;
            self.exec.set_head_masks(&m)?;
            return self.step(token);
        }
        self.exec.step_overlapped(token, masks)
    }
}

/// `generate` on a program's executor (`MaskedSteps`: the interpreter or a GPU path) running a
/// one-row or an M-row program of the same model (a pass of more rows than M takes several steps;
/// only the last row of the last one is scored). `Choose` and `masked_head_max` do not apply: the mask
/// is the head's own (`set_head_masks`).
pub fn generate_steps<E: MaskedSteps + ?Sized>(
    it: &mut E,
    prompt: &[u32],
    m: &mut ToolMatcher,
    o: &Opts,
) -> Result<Out> {
    if prompt.is_empty() {
        bail!("constrained decoding: empty prompt");
    }
    let mrows = it.m_rows();
    let vocab = it.vocab();
    let mut out = Out::default();
    let mut rows = prompt.to_vec();
    let mut first = true;
    // rows nobody reads: the head scores one id
    let idle = Mask::from_ids(&[0], vocab)?;
    let start = Instant::now();
    while !rows.is_empty() {
        if !first {
            out.passes += 1;
        }
        let prompt_pass = first;
        first = false;
        if mrows == 1 && rows.len() == 1 {
            // a one-row pass: the mask computed by the executor's step (overlapped where it can)
            let t =
                it.step_masked(rows[0], &mut || Ok(vec![Some(mask_of(m, o, &mut out, vocab)?.words().to_vec())]))?;
            if prompt_pass {
                out.prompt_ns = start.elapsed().as_nanos() as u64;
            }
            rows = advance(m, o, &mut out, t)?;
            continue;
        }
        let mask = mask_of(m, o, &mut out, vocab)?;
        let mut t = 0;
        for (c, chunk) in rows.chunks(mrows).enumerate() {
            let last_chunk = (c + 1) * mrows >= rows.len();
            let n = chunk.len();
            let masks: Vec<Option<Vec<u32>>> = (0..mrows)
                .map(|r| Some(if last_chunk && r == n - 1 { mask.words() } else { idle.words() }.to_vec()))
                .collect();
            it.set_head_masks(masks)?;
            if mrows == 1 {
                t = it.step(chunk[0])?;
            } else {
                let mut feed = chunk.to_vec();
                feed.resize(mrows, 0);
                let next = it.step_rows(&feed)?;
                if n < mrows {
                    it.commit_rows(n)?;
                }
                t = next[n - 1];
            }
        }
        if prompt_pass {
            out.prompt_ns = start.elapsed().as_nanos() as u64;
        }
        rows = advance(m, o, &mut out, t)?;
    }
    out.total_ns = start.elapsed().as_nanos() as u64;
    // (the executor left unmasked: its next steps are plain ones)
    it.set_head_masks(Vec::new())?;
    Ok(out)
}
