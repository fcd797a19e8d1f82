//! Greedy speculation on the GPU paths (issue 27): the traits of `exec::spec` for a target's M-row
//! program (`GpuTarget`: graph replays or megakernel launches) and the MTP drafter's two programs
//! (`GpuDrafter`). The hand-offs are device copies: the target's residual row into a drafter's `h_in`,
//! the drafter's own residual stream into its chained program's, and the KV rows `from_target` wrote
//! since the last round into the chained program's cache (one KV storage in effect, a few rows a round).
//!
//! Owns: `GpuTarget`, `GpuDrafter`, `GpuPlain` (the one-row program taking the target's state when
//! speculation switches itself off). Refuses: drafter programs without `h_in` or their KV caches.

use super::GpuExec;
use crate::bail;
use crate::error::Result;
use crate::exec::spec::{Drafter, Plain, Verifier};

/// The target's M-row program on one GPU path.
pub struct GpuTarget<'a> {
    pub exec: &'a mut GpuExec,
    /// The megakernel (else the graph).
    pub mega: bool,
    /// Constrained decoding on the graph: the head's mask computed while the step's body runs
    /// (`GpuExec::step_overlapped`; `grammar::decode::MaskedSteps`). Ignored by the megakernel.
    pub overlap: bool,
}

impl Verifier for GpuTarget<'_> {
    fn rows(&self) -> usize {
        self.exec.program().target.m_rows as usize
    }
    fn context(&self) -> usize {
        self.exec.program().target.max_context as usize
    }
    fn pos(&self) -> usize {
        self.exec.pos
    }
    fn verify(&mut self, tokens: &[u32]) -> Result<Vec<u32>> {
        self.exec.step_rows(tokens, self.mega)
    }
    fn commit(&mut self, n: usize) -> Result<()> {
        self.exec.commit_rows(n)
    }
    fn flush(&mut self) -> Result<()> {
        self.exec.flush_rows(self.mega)
    }
    fn logits_rows(&self) -> Result<Vec<f32>> {
        self.exec.logits()
    }
}

/// The one-row program that decodes when speculation is off, on one path.
pub struct GpuPlain<'a> {
    pub exec: &'a mut GpuExec,
    pub mega: bool,
}

impl<'t> Plain<GpuTarget<'t>> for GpuPlain<'_> {
    /// Device copies of every state buffer both programs hold (a KV cache's rows below the position
    /// only), then the position.
    fn take_over(&mut self, target: &mut GpuTarget<'t>) -> Result<()> {
        let p = self.exec.program().clone();
        if p.target.m_rows != 1 {
            bail!("speculation: the plain decoder must be a one-row program (M = {})", p.target.m_rows);
        }
        self.exec.take_state(target.exec).map(|_| ())
    }
    fn step(&mut self, token: u32) -> Result<u32> {
        if self.mega {
            self.exec.step_mega(token)
        } else {
            self.exec.step(token, false, |_, _| Ok(()))
        }
    }
}

/// The drafter's two programs (`compile_drafter`'s Target and Own inputs), each on the same path as
/// the target.
pub struct GpuDrafter {
    pub from_target: GpuExec,
    pub own: GpuExec,
    pub mega: bool,
    /// Positions `from_target` wrote KV rows at since the chained program last took them.
    written: Option<(usize, usize)>,
}

impl GpuDrafter {
    pub fn new(from_target: GpuExec, own: GpuExec, mega: bool) -> Result<GpuDrafter> {
        for d in [&from_target, &own] {
            let p = d.program();
            for name in ["h_in", "h", "k_cache.0", "v_cache.0"] {
                if p.buffer_id(name).is_none() {
                    bail!("speculation: {} is not a drafter's program (no {name})", p.model);
                }
            }
        }
        Ok(GpuDrafter { from_target, own, mega, written: None })
    }

    /// Both programs back to position 0 (their caches zeroed).
    pub fn reset(&mut self) -> Result<()> {
        self.written = None;
        self.from_target.reset()?;
        self.own.reset()
    }

    fn step(d: &mut GpuExec, mega: bool, pos: usize, tok: u32) -> Result<u32> {
        d.seek(pos)?;
        if mega {
            d.step_mega(tok)
        } else {
            d.step(tok, false, |_, _| Ok(()))
        }
    }

    fn hidden(d: &GpuExec) -> usize {
        d.program().buffers[d.program().buffer_id("h_in").unwrap_or(0)].cols as usize
    }
}

impl Drafter<GpuTarget<'_>> for GpuDrafter {
    fn context(&self) -> usize {
        self.from_target.program().target.max_context.min(self.own.program().target.max_context) as usize
    }
    fn from_target(&mut self, target: &GpuTarget, row: usize, pos: usize, tok: u32) -> Result<u32> {
        let hd = Self::hidden(&self.from_target);
        self.from_target.copy_from("h_in", 0, target.exec, "h", row * hd, hd)?;
        let t = Self::step(&mut self.from_target, self.mega, pos, tok)?;
        self.written = Some(self.written.map_or((pos, pos), |(a, b)| (a.min(pos), b.max(pos))));
        Ok(t)
    }
    fn chained(&mut self, pos: usize, tok: u32, first: bool) -> Result<u32> {
        let hd = Self::hidden(&self.own);
        if first {
            if let Some((a, b)) = self.written.take() {
                for name in ["k_cache.0", "v_cache.0"] {
                    let p = self.own.program();
                    let cols = p.buffers[p.buffer_id(name).unwrap_or(0)].cols as usize;
                    self.own.copy_from(name, a * cols, &self.from_target, name, a * cols, (b + 1 - a) * cols)?;
                }
            }
            self.own.copy_from("h_in", 0, &self.from_target, "h", 0, hd)?;
        } else {
            self.own.copy_within("h_in", 0, "h", 0, hd)?;
        }
        Self::step(&mut self.own, self.mega, pos, tok)
    }
    fn logits_of(&self, own: bool) -> Result<Vec<f32>> {
        if own {
            self.own.logits()
        } else {
            self.from_target.logits()
        }
    }
}
