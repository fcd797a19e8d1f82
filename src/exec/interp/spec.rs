//! Greedy speculation on the interpreter's M-row programs (issue 27): its implementations of
//! `exec::spec`'s traits (`Verifier` for an M-row program, `Plain` for a one-row one, `Drafter` for the
//! MTP drafter's two programs, `MtpPrograms`), and the two loops on them. `speculate_forced`: drafts
//! of controlled acceptance (issue 27 item 6: a round's first `agree` drafts the target's own greedy
//! continuation, `truth`, the rest certainly wrong; `exec::spec::Forced`); `speculate_mtp`: the MTP
//! drafter's. Their tokens must be plain greedy decoding's whatever the drafts, since only the target's
//! choices are ever emitted.
//!
//! Owns: those implementations and wrappers. Refuses: agree > k (and, in `exec::spec`, M < 2, an empty
//! prompt, more positions than the programs hold), a drafter without `h_in`.

use super::Interp;
use crate::bail;
use crate::error::Result;
use crate::exec::spec::{Drafter, Forced, Plain, Verifier};
use crate::model::spec_generate::SpecStats;

/// `steps` tokens after `prompt`, greedy, on `it`'s M-row program with forced drafts (see the module):
/// `exec::spec`'s loop with its `Forced` drafts.
pub fn speculate_forced(
    it: &mut Interp,
    prompt: &[u32],
    truth: &[u32],
    steps: usize,
    agree: usize,
) -> Result<(Vec<u32>, SpecStats)> {
    let k = (it.prog.target.m_rows as usize).saturating_sub(1);
    if agree > k {
        bail!("speculation: {agree} agreeing drafts of {k}");
    }
    let mut forced = Forced::new(truth, agree, prompt.len(), it.cfg.vocab as u32);
    crate::exec::spec::speculate_mtp(it, &mut forced, prompt, steps, None)
}

/// The MTP drafter's two programs on the interpreter (`compiler::compile_drafter`): `from_target` for a
/// round's first draft and the rows that rebuild the drafter's KV at the kept positions (its `h_in` the
/// target's residual stream), `own` for the chained drafts (its `h_in` the drafter's own). One KV storage
/// in effect: `from_target`'s is the drafter's cache, copied into `own` before a round's chained drafts.
pub struct MtpPrograms<'i, 'a> {
    pub from_target: &'i mut Interp<'a>,
    pub own: &'i mut Interp<'a>,
}

/// One draft step of `d` at position `pos` on token `tok` with `h_in`; returns the drafted token.
fn draft_on(d: &mut Interp, pos: usize, tok: u32, h_in: &[f32]) -> Result<u32> {
    let (ctrl, at) = (d.ctrl, d.prog.buffer_id("h_in"));
    let Some(at) = at else { bail!("speculation: {} is not a drafter's program (no h_in)", d.prog.model) };
    if d.bufs[at].len() != h_in.len() {
        bail!("speculation: the drafter's h_in holds {}, the residual row {}", d.bufs[at].len(), h_in.len());
    }
    d.bufs[at].copy_from_slice(h_in);
    d.bufs[ctrl][crate::isa::access::CTRL_POS] = pos as f32;
    d.step(tok, super::Order::Program)
}

impl Verifier for Interp<'_> {
    fn rows(&self) -> usize {
        self.prog.target.m_rows as usize
    }
    fn context(&self) -> usize {
        self.prog.target.max_context as usize
    }
    fn pos(&self) -> usize {
        Interp::pos(self)
    }
    fn verify(&mut self, tokens: &[u32]) -> Result<Vec<u32>> {
        self.step_rows(tokens, super::Order::Program)
    }
    fn commit(&mut self, n: usize) -> Result<()> {
        self.commit_rows(n)
    }
    fn flush(&mut self) -> Result<()> {
        self.flush_rows()
    }
    fn logits_rows(&self) -> Result<Vec<f32>> {
        Ok(Interp::logits_rows(self))
    }
}

/// A one-row program's interpreter decodes when speculation is off: it takes every state buffer the
/// target's program also holds (same name and size) and its position.
impl<'t> Plain<Interp<'t>> for Interp<'_> {
    fn take_over(&mut self, target: &mut Interp<'t>) -> Result<()> {
        if self.prog.target.m_rows != 1 {
            bail!("speculation: the plain decoder must be a one-row program (M = {})", self.prog.target.m_rows);
        }
        let mut taken = 0;
        for (i, b) in self.prog.buffers.iter().enumerate() {
            if b.kind != crate::isa::BufKind::State {
                continue;
            }
            let Some(v) = target.buffer(&b.name) else { bail!("speculation: the target has no {}", b.name) };
            if v.len() != self.bufs[i].len() {
                bail!(
                    "speculation: {} holds {} values in the target, {} in the plain program",
                    b.name,
                    v.len(),
                    self.bufs[i].len()
                );
            }
            self.bufs[i] = v.to_vec();
            taken += 1;
        }
        if taken == 0 {
            bail!("speculation: the plain program has no state to take");
        }
        self.bufs[self.ctrl][crate::isa::access::CTRL_POS] = Interp::pos(target) as f32;
        Ok(())
    }
    fn step(&mut self, token: u32) -> Result<u32> {
        Interp::step(self, token, super::Order::Program)
    }
}

impl<'t> Drafter<Interp<'t>> for MtpPrograms<'_, '_> {
    fn context(&self) -> usize {
        self.from_target.prog.target.max_context.min(self.own.prog.target.max_context) as usize
    }
    fn from_target(&mut self, target: &Interp<'t>, row: usize, pos: usize, tok: u32) -> Result<u32> {
        let hd = target.cfg.hidden;
        let h = target.buffer_full("h").unwrap_or_default();
        let Some(h) = h.get(row * hd..(row + 1) * hd) else {
            bail!("speculation: the target has no residual row {row}")
        };
        draft_on(self.from_target, pos, tok, h)
    }
    fn chained(&mut self, pos: usize, tok: u32, first: bool) -> Result<u32> {
        let h = if first { self.from_target.buffer("h") } else { self.own.buffer("h") }.unwrap_or_default().to_vec();
        if first {
            for name in ["k_cache.0", "v_cache.0"] {
                let v = self.from_target.buffer(name).unwrap_or_default().to_vec();
                let Some(at) = self.own.prog.buffer_id(name) else { bail!("speculation: the drafter has no {name}") };
                if self.own.bufs[at].len() != v.len() {
                    bail!("speculation: the drafter's two programs hold {name} of different sizes");
                }
                self.own.bufs[at] = v;
            }
        }
        draft_on(self.own, pos, tok, &h)
    }
    fn logits_of(&self, own: bool) -> Result<Vec<f32>> {
        Ok(if own { self.own.logits() } else { self.from_target.logits() }.to_vec())
    }
}

/// `steps` tokens after `prompt`, greedy, on `it`'s M-row program with k = M - 1 drafts a round from the
/// MTP drafter's programs (`exec::spec::speculate_mtp` on the interpreter; `agree` as there).
pub fn speculate_mtp(
    it: &mut Interp,
    mut mtp: MtpPrograms,
    prompt: &[u32],
    steps: usize,
    agree: Option<&[u32]>,
) -> Result<(Vec<u32>, SpecStats)> {
    crate::exec::spec::speculate_mtp(it, &mut mtp, prompt, steps, agree)
}
