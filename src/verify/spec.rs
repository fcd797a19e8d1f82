//! `mk gpu spec`: greedy speculation with the MTP drafter on the GPU paths (issue 27, item 7) against
//! plain greedy decoding on the same GPU: for each k, the target's M = k + 1 program and the drafter's
//! two programs on the graph and on the megakernel, `tokens` tokens after a fixed prompt, with the
//! drafter's own drafts and with every draft forced to the greedy continuation (`agree`: every row
//! kept, the drafter's KV rebuilt over whole rounds), and with the switch (off after 8 rounds slower than
//! plain decoding: the one-row program takes the state over). Checks: every run's tokens are the plain run's,
//! and the graph's drafts are the megakernel's (the paths are bit-identical). Times: ms per emitted
//! token of each run against plain decoding (one-row graph, pipelined; the megakernel's, N steps a
//! launch), measured.
//!
//! Owns: the check and its table. Refuses: k outside 1..=7, no MTP head.

use std::path::Path;

use crate::bail;
use crate::error::Result;
use crate::exec::gpu::spec::{GpuDrafter, GpuTarget};
use crate::exec::gpu::{Defines, Gpu, GpuExec};
use crate::model::checkpoint::Checkpoint;
use crate::model::upload::Upload;

pub fn run(dir: &Path, ks: &[u32], tokens: usize, cache: &Path, defines: &Defines) -> Result<()> {
    if ks.is_empty() || ks.iter().any(|&k| !(1..=7).contains(&k)) || tokens < 2 {
        bail!("gpu spec: each k must be 1..=7 and --tokens at least 2");
    }
    let ck = Checkpoint::open(dir)?;
    if ck.config.mtp_layers == 0 {
        bail!("gpu spec: the checkpoint has no MTP head");
    }
    let vocab = ck.config.vocab as u64;
    let prompt: Vec<u32> = (0..5u64).map(|i| ((i * 2_654_435_761 + 9419) % vocab) as u32).collect();
    let max_ctx = ((prompt.len().div_ceil(8) * 8 + tokens + 8) as u32).div_ceil(256) * 256;
    let up = Upload::new(&ck)?;
    let target = |m: u32| {
        let mut t = crate::compiler::h200(m);
        t.max_context = max_ctx;
        t
    };
    // plain greedy decoding: the prompt, then `tokens` tokens (graph pipelined; megakernel N a launch)
    let p1 = crate::compiler::compile(&ck.config, "checkpoint", &target(1))?;
    let mut d1 = GpuExec::new(Gpu::open()?, &p1, &up, cache, defines)?;
    let plain = |d1: &mut GpuExec, mega: bool| -> Result<(Vec<u32>, f64)> {
        d1.reset()?;
        for &t in &prompt[..prompt.len() - 1] {
            d1.step(t, false, |_, _| Ok(()))?;
        }
        let last = prompt[prompt.len() - 1];
        let t0 = std::time::Instant::now();
        let v = if mega { d1.step_mega_n(last, tokens)? } else { d1.generate(last, tokens)? };
        Ok((v, t0.elapsed().as_secs_f64() * 1e3 / tokens as f64))
    };
    let (greedy, ms_graph) = plain(&mut d1, false)?;
    let (greedy_mk, ms_mega) = plain(&mut d1, true)?;
    let mut bad = 0;
    if greedy_mk != greedy {
        bad += 1;
        println!("plain decoding: the megakernel's tokens DIFFER from the graph's");
    }
    println!(
        "plain greedy decoding, {tokens} tokens after a {}-token prompt: graph {ms_graph:.3} ms/token (pipelined), megakernel {ms_mega:.3} (one launch)",
        prompt.len()
    );
    let mut table = vec![format!(
        "{:>2} {:>11} {:>18} {:>7} {:>9} {:>12} {:>10} {:>8}",
        "k", "path", "drafts", "rounds", "accepted", "tokens/round", "ms/token", "vs plain"
    )];
    for &k in ks {
        let pt = crate::compiler::compile(&ck.config, "checkpoint", &target(k + 1))?;
        let mut dt = GpuExec::new(Gpu::open()?, &pt, &up, cache, defines)?;
        let drafter = |input| crate::compiler::compile_drafter(&ck.config, "checkpoint-mtp", &target(1), input);
        let (pa, pb) = (drafter(crate::compiler::DraftInput::Target)?, drafter(crate::compiler::DraftInput::Own)?);
        let mut dd = GpuDrafter::new(
            GpuExec::new(Gpu::open()?, &pa, &up, cache, defines)?,
            GpuExec::new(Gpu::open()?, &pb, &up, cache, defines)?,
            false,
        )?;
        let mut drafts_by_path = Vec::new();
        for (path, mega, plain_ms) in [("graph", false, ms_graph), ("megakernel", true, ms_mega)] {
            // the drafter's drafts, every draft forced, and the drafter's with the switch (off after 8
            // rounds slower than this path's plain decoding: the one-row program takes over)
            for (forced, switched) in [(false, false), (true, false), (false, true)] {
                dt.reset()?;
                dd.reset()?;
                d1.reset()?;
                dd.mega = mega;
                let mut plain_dec = crate::exec::gpu::spec::GpuPlain { exec: &mut d1, mega };
                let switch = switched.then(|| crate::exec::spec::Switch {
                    plain: &mut plain_dec as &mut dyn crate::exec::spec::Plain<_>,
                    plain_ms,
                    window: 8,
                });
                let t0 = std::time::Instant::now();
                let (out, stats) = crate::exec::spec::speculate_switched(
                    &mut GpuTarget { exec: &mut dt, mega, overlap: false },
                    &mut dd,
                    &prompt,
                    tokens,
                    forced.then_some(&greedy[..]),
                    switch,
                )?;
                let ms = t0.elapsed().as_secs_f64() * 1e3 / tokens as f64;
                let what = match (forced, switched, stats.off_at) {
                    (true, _, _) => "forced (all)".to_string(),
                    (_, true, Some(at)) => format!("switch: off at {at}"),
                    (_, true, None) => "switch: never off".to_string(),
                    _ => "the drafter's".to_string(),
                };
                if out != greedy {
                    bad += 1;
                    let at = out.iter().zip(&greedy).position(|(a, b)| a != b).unwrap_or(out.len().min(greedy.len()));
                    println!("k = {k}, {path}, {what} drafts: tokens DIFFER from plain decoding at token {at}");
                }
                if forced && stats.accepted != stats.drafted {
                    bad += 1;
                    println!("k = {k}, {path}: forced drafts, {} of {} accepted", stats.accepted, stats.drafted);
                }
                if !forced && !switched {
                    drafts_by_path.push(stats.drafts.clone());
                }
                table.push(format!(
                    "{:>2} {:>11} {:>18} {:>7} {:>9} {:>12.2} {:>10.3} {:>8.3}",
                    k,
                    path,
                    what,
                    stats.rounds,
                    stats.accepted,
                    (out.len() - 1) as f64 / stats.rounds.max(1) as f64,
                    ms,
                    ms / plain_ms
                ));
            }
        }
        if drafts_by_path.len() == 2 && drafts_by_path[0] != drafts_by_path[1] {
            bad += 1;
            println!("k = {k}: the graph's drafts DIFFER from the megakernel's");
        } else {
            println!(
                "k = {k}: every run's {tokens} tokens are plain decoding's; the graph's {} drafts are the megakernel's",
                drafts_by_path.first().map_or(0, |d| d.len())
            );
        }
    }
    println!(
        "speculation with the MTP drafter (synchronised rounds; \"vs plain\": over the same path's plain decoding):"
    );
    for l in table {
        println!("  {l}");
    }
    if bad > 0 {
        bail!("gpu spec: {bad} checks failed");
    }
    println!("verdict: ok");
    Ok(())
}
