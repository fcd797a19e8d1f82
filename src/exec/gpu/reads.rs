//! The pure-read figure beside each GEMV word (issue 25, item 5; experiments with `shapes: true`): a
//! streaming read (megakernel/bandwidth.cu, the ceiling's kernel) of exactly the weight matrices a word
//! reads, launched and timed word by word in program order as `time_words` times the words themselves.
//!
//! Owns: which buffers a word's weight stream is (W0, and W1 for gate/up). Refuses: nothing beyond a
//! failed launch. Writes: at most one word of the logits buffer (the read kernel's sink, written only
//! for an impossible checksum), so the state afterwards is for timing only.

use cudarc::driver::{LaunchConfig, PushKernelArg};

use super::{cu, Defines, GpuExec};
use crate::error::Result;
use crate::isa::{slot, Opcode, Word};

/// The weight buffers a GEMV word streams (W0; gate/up's W1 too). Empty for other words.
pub fn weight_stream(w: &Word) -> Vec<usize> {
    let gemv = matches!(w.opcode, Opcode::GemvNorm | Opcode::GemvGateUp | Opcode::GemvResidual | Opcode::LmHead);
    let slots: &[usize] = if w.opcode == Opcode::GemvGateUp { &[slot::W0, slot::W1] } else { &[slot::W0] };
    if gemv {
        slots.iter().filter_map(|&s| w.op(s)).collect()
    } else {
        Vec::new()
    }
}

impl GpuExec {
    /// Per word of `words` (in that order): ms to stream-read its weight matrices (`weight_stream`),
    /// the median of `reps` passes over all of them (each pass reads them in order, as a step does).
    pub fn time_weight_reads(&mut self, words: &[usize], reps: usize) -> Result<Vec<f64>> {
        let src = include_str!("../../../megakernel/bandwidth.cu");
        let (module, _) = self.gpu.module(src, &self.cache, &Defines::default())?;
        let f = cu(module.load_function("k_read_bw"), "cuModuleGetFunction (k_read_bw)")?;
        let stream = self.gpu.stream.clone();
        let sink = self.base + self.layout.places[self.logits].off as u64;
        let cfg = LaunchConfig { grid_dim: (4 * self.gpu.sms, 1, 1), block_dim: (512, 1, 1), shared_mem_bytes: 0 };
        if words.len() > self.events.len() {
            crate::bail!("time_weight_reads: {} words, {} event pairs", words.len(), self.events.len());
        }
        let mut ms: Vec<Vec<f64>> = vec![Vec::new(); words.len()];
        for _ in 0..reps.max(1) {
            for (j, &wi) in words.iter().enumerate() {
                cu(self.events[j].0.record(&stream), "cuEventRecord")?;
                for b in weight_stream(&self.prog.words[wi]) {
                    let p = &self.layout.places[b];
                    let (ptr, n16) = (p.addr, (p.bytes / 16) as u64);
                    let mut l = stream.launch_builder(&f);
                    l.arg(&ptr).arg(&n16).arg(&sink);
                    // SAFETY: (const uint4*, unsigned long long, unsigned*) as k_read_bw declares: n16
                    // 16-byte words inside the place of weight b; sink a word of the logits.
                    cu(unsafe { l.launch(cfg) }.map(|_| ()), "launch k_read_bw")?;
                }
                cu(self.events[j].1.record(&stream), "cuEventRecord")?;
            }
            self.sync()?;
            for (j, m) in ms.iter_mut().enumerate() {
                m.push(cu(self.events[j].0.elapsed_ms(&self.events[j].1), "cuEventElapsedTime")? as f64);
            }
        }
        Ok(ms
            .into_iter()
            .map(|mut v| {
                v.sort_by(|a, b| a.total_cmp(b));
                v[v.len() / 2]
            })
            .collect())
    }
}
