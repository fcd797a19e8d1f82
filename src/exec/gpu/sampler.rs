//! The GPU sampler of the graph path (megakernel/sample.cu): temperature, top-k, top-p and the draw,
//! with the CPU sampler's exact choices. Its top-k threshold comes from the counts the lm_head leaves
//! (k_sample_collect), then one block sorts the kept ids and draws (k_sample).
//!
//! Owns: the sampler's parameters and status in the arena, its two launches. Refuses: top_k outside
//! 1..=SAMPLE_MAX (full-vocabulary sampling is the CPU's), sampling in the megakernel or at M > 1.

use cudarc::driver::{LaunchConfig, PushKernelArg};

use super::abi::{COLLECT_THREADS, SAMPLE_CAP, SAMPLE_MAX, SB_CANDS, SB_KEPT, SB_STATUS};
use super::{cu, GpuExec};
use crate::error::Result;

impl GpuExec {
    /// The sampler's kernels (they return at once when sampling is off): k_sample_collect (one block
    /// of 256 per 2,048 ids: the ids at or above the top-k threshold the lm_head's counts give), then
    /// k_sample (one block of 1,024: top-p, the draw). In the graph always, so that turning sampling on
    /// or off never recaptures it.
    pub(super) fn launch_sample(&self) -> Result<()> {
        let logits = self.base + self.layout.places[self.logits].off as u64;
        let vocab = self.prog.buffers[self.logits].cols as u32;
        let ctrl = self.base + self.layout.places[self.ctrl].off as u64;
        let sb = self.base + self.layout.sampler as u64;
        let stop = self.base + self.layout.stop as u64;
        let cfg = LaunchConfig {
            grid_dim: (vocab.div_ceil(8 * COLLECT_THREADS), 1, 1),
            block_dim: (COLLECT_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = self.gpu.stream.launch_builder(&self.sample_collect);
        b.arg(&logits).arg(&vocab).arg(&sb).arg(&stop);
        // SAFETY: (const unsigned short*, unsigned, unsigned*, const unsigned*) as k_sample_collect
        // declares; every pointer is in the arena.
        cu(unsafe { b.launch(cfg) }.map(|_| ()), "launch the sampler's collect")?;
        let cfg = LaunchConfig { grid_dim: (1, 1, 1), block_dim: (1024, 1, 1), shared_mem_bytes: 0 };
        let mut b = self.gpu.stream.launch_builder(&self.sampler);
        b.arg(&logits).arg(&vocab).arg(&ctrl).arg(&sb).arg(&stop);
        // SAFETY: (const unsigned short*, unsigned, unsigned*, unsigned*, const unsigned*) as k_sample
        // declares; every pointer is in the arena.
        cu(unsafe { b.launch(cfg) }.map(|_| ()), "launch the sampler")
    }

    /// Zeroes the sampler's sticky status and the fused top-k's counts (its parameters stay).
    pub(super) fn clear_sampler(&mut self) -> Result<()> {
        let (a, b) = (self.layout.sampler + 4 * SB_STATUS, self.layout.sampler + 4 * SB_CANDS);
        self.zero(a, b, "clear the sampler")
    }

    /// Sampling for the following steps of the graph path (greedy when the temperature is 0): the
    /// CPU's `model::sample` rules and draw (`uniform_at(seed, position)`), so a GPU-sampled token is
    /// the CPU's choice on the same logits. The GPU takes 1 <= top_k <= SAMPLE_MAX.
    pub fn set_sampling(&mut self, p: &crate::model::sample::SamplingParams, seed: u64) -> Result<()> {
        p.check()?;
        let on = p.temperature > 0.0;
        if on && !(1..=SAMPLE_MAX).contains(&p.top_k) {
            crate::bail!(
                "gpu sampling: top_k {} (the GPU sampler takes 1..={SAMPLE_MAX}; top_k 0 samples the whole vocabulary, CPU only)",
                p.top_k
            );
        }
        // SampleParams in common.cuh: temperature, top_k, top_p, pad, seed.
        let mut b = Vec::with_capacity(24);
        b.extend_from_slice(&p.temperature.to_le_bytes());
        b.extend_from_slice(&(p.top_k as u32).to_le_bytes());
        b.extend_from_slice(&p.top_p.to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        b.extend_from_slice(&seed.to_le_bytes());
        self.put(self.layout.sampler, &b, "write the sampling parameters")?;
        self.clear_sampler()?;
        self.sync()?;
        self.sampling = on;
        Ok(())
    }

    /// How many ids the last sampled step kept at or above its top-k threshold (before top-p): the
    /// GPU check compares it with the CPU's count.
    pub fn sampler_kept(&self) -> Result<u32> {
        self.get_u32(self.layout.sampler + 4 * SB_KEPT, "read the sampler's kept count")
    }

    /// The sampler's sticky status after steps: more ids tied at the top-k threshold than it holds.
    pub(super) fn check_sampler(&self) -> Result<()> {
        if !self.sampling {
            return Ok(());
        }
        if self.get_u32(self.layout.sampler + 4 * SB_STATUS, "read the sampler status")? != 0 {
            crate::bail!(
                "gpu sampling: more than {SAMPLE_CAP} ids at or above the top-k threshold (ties at the k-th value; the step kept the argmax)"
            );
        }
        Ok(())
    }
}
