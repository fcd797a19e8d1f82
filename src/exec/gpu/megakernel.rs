//! The megakernel path: one cooperative launch of the persistent kernel (megakernel/megakernel.cu) runs
//! one step, or n steps (the in-kernel token loop), or a debug prefix of a step; its waits are bounded
//! (a hang becomes an error naming the word and counter); its timeline stamps every unit.
//!
//! Owns: the launch, its control words, the timelines' stamps (both paths'). Refuses: sampling (the
//! megakernel is greedy), a timeline over more than one step.

use cudarc::driver::{LaunchConfig, PushKernelArg};

use super::abi::{DevCtx, MkCtl, MEGA_BLOCKS_PER_SM, THREADS};
use super::{cu, GpuExec};
use crate::error::{Error, Result};

/// A megakernel wait longer than this is a hang (derived: a whole 27B step takes about 25 ms on the
/// graph path, so no legitimate wait comes near 2 s).
const MEGA_WAIT_TIMEOUT_NS: u64 = 2_000_000_000;

impl GpuExec {
    /// One decode step as one cooperative launch of the megakernel; returns the greedy next token. A
    /// wait that runs past the time limit is an error naming the first word that hung.
    pub fn step_mega(&mut self, token: u32) -> Result<u32> {
        self.check(token)?;
        let r = self.step_mega_unchecked(token, 1, false, self.prog.words.len() as u32);
        Ok(self.advance_by(r)?[0])
    }

    /// Up to `n` greedy decode steps in ONE cooperative launch (the in-kernel token loop: EndStep
    /// advances the control block on the device, a grid join separates steps). The step that produces
    /// the stop token (`set_stop`) is the last (the device-side stop). Returns the tokens of the steps
    /// run, in order; the position moves on by their count.
    pub fn step_mega_n(&mut self, token: u32, n: usize) -> Result<Vec<u32>> {
        self.check(token)?;
        let room = self.prog.target.max_context as usize - self.pos;
        if n == 0 || n > room {
            crate::bail!(
                "megakernel: {n} steps in one launch from position {} (1..={room} fit the max context {})",
                self.pos,
                self.prog.target.max_context
            );
        }
        let r = self.step_mega_unchecked(token, n as u32, false, self.prog.words.len() as u32);
        self.advance_by(r)
    }

    /// Debug: the first `words` words of a step on `token` as one megakernel launch (the position does
    /// not move unless the prefix reaches EndStep); the caller reads what they wrote.
    pub fn step_mega_prefix(&mut self, token: u32, words: usize) -> Result<()> {
        self.check(token)?;
        if words == 0 || words >= self.prog.words.len() {
            crate::bail!("megakernel prefix: {words} words of {} (a whole step is step_mega)", self.prog.words.len());
        }
        self.step_mega_unchecked(token, 1, false, words as u32).map(|_| ())
    }

    /// One megakernel step that also records its timeline: the raw stamps, four u64 per unit of the
    /// program (`experiment::timeline` decodes them; a unit not run has zeros).
    pub fn step_mega_timeline(&mut self, token: u32) -> Result<(u32, Vec<u64>)> {
        self.check(token)?;
        self.zero(self.layout.tl, self.layout.tl + 32 * self.layout.total_units, "zero the timeline")?;
        let r = self.step_mega_unchecked(token, 1, true, self.prog.words.len() as u32);
        let t = self.advance_by(r)?[0];
        Ok((t, self.read_timeline()?))
    }

    /// Whether the graph's kernels stamp their units (compiled with GRAPH_STAMPS=1).
    pub fn graph_stamps(&self) -> bool {
        self.ctx.stamps != 0
    }

    /// One graph step that also returns its timeline (compiled with GRAPH_STAMPS=1: every discrete
    /// kernel stamps its units in the megakernel's format, `experiment::timeline` decodes both).
    pub fn step_graph_timeline(&mut self, token: u32) -> Result<(u32, Vec<u64>)> {
        if !self.graph_stamps() {
            crate::bail!("graph timeline: the kernels were compiled without GRAPH_STAMPS=1 (the experiment's defines)");
        }
        self.check(token)?;
        self.zero(self.layout.tl, self.layout.tl + 32 * self.layout.total_units, "zero the timeline")?;
        let t = self.step(token, false, |_, _| Ok(()))?;
        Ok((t, self.read_timeline()?))
    }

    pub(super) fn read_timeline(&self) -> Result<Vec<u64>> {
        let host = self.get(self.layout.tl, self.layout.tl + 32 * self.layout.total_units, "read the timeline")?;
        Ok(host.chunks_exact(8).map(|c| u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]])).collect())
    }

    /// Negative control: word `wi` of the uploaded program loses its wait, forced past the validator.
    /// Only the megakernel honours waits (the graph runs words in stream order), so a megakernel on
    /// this upload has a race the bit diff or the watchdog must catch.
    pub fn force_drop_wait(&mut self, wi: usize) -> Result<()> {
        if wi >= self.prog.words.len() {
            crate::bail!("drop_wait: word {wi} is past the program's {} words", self.prog.words.len());
        }
        let mut w = self.prog.words[wi];
        w.wait = crate::isa::NO_COUNTER;
        w.wait_target = 0;
        self.put(self.layout.prog + wi * crate::isa::WORD_BYTES, &w.encode(), "write word")?;
        self.sync()
    }

    /// One launch of `n_steps` steps (1 with the timeline) over the first `words` words of the program
    /// (all of them but for the debug prefix); returns the tokens of the steps it ran.
    pub(super) fn step_mega_unchecked(
        &mut self,
        token: u32,
        n_steps: u32,
        timeline: bool,
        words: u32,
    ) -> Result<Vec<u32>> {
        if self.prog.target.prefill {
            crate::bail!(
                "megakernel: a prefill program runs on the graph path only (its megakernel form is not built)"
            );
        }
        if timeline && n_steps != 1 {
            crate::bail!("megakernel: the timeline records one step per launch");
        }
        if self.sampling {
            crate::bail!("gpu: sampling runs on the graph path only (the megakernel is greedy)");
        }
        self.write_token(token)?;
        let pos0 = self.pos as u32; // the host's mirror of the control block's position
        let (n_words, n_counters) = (self.prog.words.len(), self.prog.n_counters as usize);
        // counters, tickets, the error word and its step, the finished-step count
        let n_ctl = n_counters + n_words + 3;
        self.zero(self.layout.mk, self.layout.mk + 4 * n_ctl, "zero the megakernel counters")?;
        let (b, mk) = (self.base, self.base + self.layout.mk as u64);
        let ctl = MkCtl {
            counters: mk,
            next: mk + 4 * n_counters as u64,
            error: mk + 4 * (n_ctl as u64 - 3),
            timeout_ns: MEGA_WAIT_TIMEOUT_NS,
            stamps: if timeline { b + self.layout.tl as u64 } else { 0 },
            unit_base: b + self.layout.tl_base as u64,
            wait_stride: b + self.layout.mk_stride as u64,
            step_done: mk + 4 * (n_ctl as u64 - 1),
            tokens: b + self.layout.mk_tokens as u64,
            n_steps,
        };
        // MEGA_BLOCKS_PER_SM blocks per SM (its launch bounds); the cooperative launch fails, instead of
        // hanging, if they cannot all be resident.
        let cfg = LaunchConfig {
            grid_dim: (self.gpu.sms * MEGA_BLOCKS_PER_SM, 1, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: self.mega_smem,
        };
        let prog_ptr = b + self.layout.prog as u64;
        let stream = self.gpu.stream.clone();
        let mut lb = stream.launch_builder(&self.mega);
        // (the megakernel never samples: its lm_head counts nothing)
        let ctx = DevCtx { sampler: 0, ..self.ctx };
        lb.arg(&prog_ptr).arg(&words).arg(&ctx).arg(&ctl);
        // SAFETY: (const Word*, unsigned, DevCtx, MkCtl) as the kernel declares; every pointer is in
        // the arena. Cooperative: the launch fails instead of hanging if the blocks cannot co-reside.
        cu(unsafe { lb.launch_cooperative(cfg) }.map(|_| ()), "cooperative launch of the megakernel")?;
        // One synchronisation: the error word and its step, the position, the launch's tokens.
        let (mut err, mut pos, mut toks) = ([0u8; 8], [0u8; 4], vec![0u8; 4 * n_steps as usize]);
        let c = self.layout.places[self.ctrl].off;
        let e_at = self.layout.mk + 4 * (n_ctl - 3);
        cu(stream.memcpy_dtoh(&self.arena.slice(e_at..e_at + 8), &mut err), "read the megakernel error word")?;
        cu(stream.memcpy_dtoh(&self.arena.slice(c..c + 4), &mut pos), "read the position")?;
        let t_at = self.layout.mk_tokens;
        cu(stream.memcpy_dtoh(&self.arena.slice(t_at..t_at + toks.len()), &mut toks), "read the megakernel's tokens")?;
        self.sync()?;
        let pos = u32::from_le_bytes(pos);
        let e = u32::from_le_bytes([err[0], err[1], err[2], err[3]]);
        let step = u32::from_le_bytes([err[4], err[5], err[6], err[7]]);
        if e as usize == n_words + 1 {
            crate::bail!(
                "megakernel: the join before step {step} of the launch waited more than {} s (a hang, stopped)",
                MEGA_WAIT_TIMEOUT_NS / 1_000_000_000
            );
        }
        if e != 0 {
            let w = &self.prog.words[e as usize - 1];
            let stride = super::launch::wait_strides(&self.prog)[e as usize - 1];
            return Err(Error::new(format!(
                "megakernel: word {} ({:?}) in step {step} of the launch waited more than {} s for counter {} to reach {} (a hang, stopped)",
                e - 1,
                w.opcode,
                MEGA_WAIT_TIMEOUT_NS / 1_000_000_000,
                w.wait,
                w.wait_target + step * stride
            )));
        }
        if (words as usize) < n_words {
            return Ok(Vec::new()); // a debug prefix: no EndStep, no token
        }
        // The steps run: the position EndStep advanced (fewer than n_steps after a stop).
        let ran = pos.wrapping_sub(pos0) as usize / self.prog.target.m_rows as usize;
        if ran == 0 || ran > n_steps as usize {
            crate::bail!("megakernel: the launch of {n_steps} steps moved the position by {ran}");
        }
        Ok(toks[..4 * ran].chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
    }
}
