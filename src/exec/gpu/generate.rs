//! `mk generate --path graph|megakernel`: generation on a GPU path (issue 27 item 7: the speculation
//! setting on the GPU paths too). Plain decoding: the prompt one step a token, then the graph's pipelined
//! replays (sampling on the GPU sampler, graph only) or the megakernel's N steps in one launch.
//! Speculation: the target's M = k + 1 program and the MTP drafter's two programs on the same path;
//! greedy (`exec::spec::speculate_mtp`: the tokens those of plain greedy decoding, checked by `mk gpu
//! spec` over 1,000 tokens on every preset) or sampled (`exec::spec::speculate_sampled`: drafts drawn
//! from the drafter's logits, the exact rule over the target's rows' logits, read back to the host; on
//! either path).
//!
//! Owns: the programs' shapes for one generation. Refuses: plain sampling on the megakernel, k outside
//! 1..=7, a checkpoint without an MTP head for speculation.

use std::path::Path;

use super::spec::{GpuDrafter, GpuTarget};
use super::{Defines, Gpu, GpuExec};
use crate::bail;
use crate::compiler::{compile, compile_drafter, h200, DraftInput};
use crate::error::Result;
use crate::model::checkpoint::Checkpoint;
use crate::model::sample::SamplingParams;
use crate::model::spec_generate::SpecStats;
use crate::model::upload::Upload;

/// What to generate and how.
pub struct Generation<'a> {
    pub prompt: &'a [u32],
    pub steps: usize,
    pub params: SamplingParams,
    pub seed: u64,
    /// Drafts a round with the MTP head (greedy or sampled as `params` say); None: plain decoding.
    pub speculate: Option<usize>,
    /// The megakernel (else the graph).
    pub mega: bool,
}

/// The generated tokens (the prompt not included) and, with speculation, the rounds' statistics.
pub fn generate(
    ck: &Checkpoint,
    g: &Generation,
    cache: &Path,
    defines: &Defines,
) -> Result<(Vec<u32>, Option<SpecStats>)> {
    let sampled = g.params.temperature != 0.0;
    if g.prompt.is_empty() || g.steps == 0 {
        bail!("generate: a prompt of at least one token and at least one step");
    }
    if sampled && g.mega && g.speculate.is_none() {
        bail!("generate: plain sampling runs on the graph path (the megakernel samples only with --speculate)");
    }
    g.params.check()?;
    let max = crate::model::config::MAX_POSITIONS;
    if g.prompt.len().saturating_add(g.steps).saturating_add(16) > max {
        bail!("generate: {} prompt tokens and {} steps pass the model's {max} positions", g.prompt.len(), g.steps);
    }
    let vocab = ck.config.vocab as u32;
    if let Some(&t) = g.prompt.iter().find(|&&t| t >= vocab) {
        bail!("generate: prompt token id {t} is out of range (vocabulary {vocab})");
    }
    if g.speculate.is_some() && ck.config.mtp_layers == 0 {
        bail!("generate: --speculate needs the checkpoint's MTP head (it has none)");
    }
    let up = Upload::new(ck)?;
    let m = match g.speculate {
        None => 1,
        Some(k) if (1..=7).contains(&k) => k as u32 + 1,
        Some(k) => bail!("generate: --speculate {k} (1-7 drafts a round)"),
    };
    // room for the prompt in whole M-row steps, the tokens, and one step's rows past them
    let need = g.prompt.len().div_ceil(m as usize) * m as usize + g.steps + m as usize;
    let target = |m: u32| {
        let mut t = h200(m);
        t.max_context = (need.div_ceil(256) * 256) as u32;
        t
    };
    let prog = compile(&ck.config, "checkpoint", &target(m))?;
    let mut d = GpuExec::new(Gpu::open()?, &prog, &up, cache, defines)?;
    if g.speculate.is_none() {
        d.set_sampling(&g.params, g.seed)?;
        let (head, last) = g.prompt.split_at(g.prompt.len() - 1);
        for &t in head {
            if g.mega {
                d.step_mega(t)?;
            } else {
                d.step(t, false, |_, _| Ok(()))?;
            }
        }
        let out = if g.mega { d.step_mega_n(last[0], g.steps)? } else { d.generate(last[0], g.steps)? };
        return Ok((out, None));
    }
    let drafter = |input| compile_drafter(&ck.config, "checkpoint-mtp", &target(1), input);
    let (pa, pb) = (drafter(DraftInput::Target)?, drafter(DraftInput::Own)?);
    let mut dd = GpuDrafter::new(
        GpuExec::new(Gpu::open()?, &pa, &up, cache, defines)?,
        GpuExec::new(Gpu::open()?, &pb, &up, cache, defines)?,
        g.mega,
    )?;
    let mut target = GpuTarget { exec: &mut d, mega: g.mega, overlap: false };
    let (out, stats) = if g.params.temperature == 0.0 {
        crate::exec::spec::speculate_mtp(&mut target, &mut dd, g.prompt, g.steps, None)?
    } else {
        // sampled speculation: the exact rule over the rows' logits read back (issue 27 item 4)
        let mut s = crate::exec::spec::Sampled::new(g.params, g.seed)?;
        crate::exec::spec::speculate_sampled(&mut target, &mut dd, g.prompt, g.steps, &mut s)?
    };
    Ok((out, Some(stats)))
}
