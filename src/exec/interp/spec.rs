//! Greedy speculation on an M-row program (issue 27): the program-level form of
//! `model::spec_generate`, the contract the GPU paths will implement. The prompt is fed M rows a step
//! (its last chunk padded, the padding rolled back); then each round verifies the last emitted token
//! and k = M - 1 drafts as one M-row step (`verify_rows`), keeps the agreeing prefix plus the target's
//! own token (`speculate::accept_greedy`) and rolls the rest back (`commit_rows`). Drafts are forced
//! (controlled acceptance, issue 27 item 6): a round's first `agree` drafts are the target's own greedy
//! continuation (`truth`, given), the rest certainly wrong. Its tokens must be plain greedy decoding's
//! whatever `agree` is, since only the target's choices are ever emitted.
//!
//! Owns: `speculate_forced`. Refuses: M < 2, agree > k, an empty prompt, more positions than the
//! program's context holds (prompt + steps + one round's rows).

use super::Interp;
use crate::bail;
use crate::error::Result;
use crate::model::spec_generate::SpecStats;
use crate::model::speculate::accept_greedy;

/// `steps` tokens after `prompt`, greedy, on `it`'s M-row program with forced drafts (see the module).
pub fn speculate_forced(
    it: &mut Interp,
    prompt: &[u32],
    truth: &[u32],
    steps: usize,
    agree: usize,
) -> Result<(Vec<u32>, SpecStats)> {
    let m = it.prog.target.m_rows as usize;
    let k = m.saturating_sub(1);
    if m < 2 {
        bail!("speculation: the program has M = {m} rows (a verification step needs at least 2)");
    }
    if agree > k {
        bail!("speculation: {agree} agreeing drafts of {k}");
    }
    if prompt.is_empty() {
        bail!("speculation: an empty prompt");
    }
    let ctx = it.prog.target.max_context as usize;
    if prompt.len().div_ceil(m) * m + steps + m > ctx {
        bail!(
            "speculation: {} prompt tokens and {steps} steps (M = {m}) pass the program's context {ctx}",
            prompt.len()
        );
    }
    let vocab = it.cfg.vocab as u32;
    let mut next = 0;
    for chunk in prompt.chunks(m) {
        let mut rows = chunk.to_vec();
        rows.resize(m, 0);
        let (toks, round) = it.verify_rows(&rows)?;
        it.commit_rows(round, chunk.len())?;
        next = toks[chunk.len() - 1];
    }
    let mut out = vec![next];
    let mut stats = SpecStats::default();
    while out.len() < steps {
        let t = *out.last().unwrap_or(&0);
        let draft: Vec<u32> = (0..k)
            .map(|i| {
                let v = truth.get(out.len() + i).copied().unwrap_or(0); // truth[j] follows out[..j]
                if i < agree {
                    v
                } else {
                    (v + 1) % vocab
                }
            })
            .collect();
        let mut rows = vec![t];
        rows.extend(&draft);
        let (target, round) = it.verify_rows(&rows)?;
        let emitted = accept_greedy(&draft, &target)?;
        it.commit_rows(round, emitted.len())?;
        stats.rounds += 1;
        stats.drafted += k;
        stats.accepted += emitted.len() - 1;
        out.extend(&emitted);
    }
    out.truncate(steps);
    Ok((out, stats))
}
