//! Greedy speculation on an M-row program (issue 27): the program-level form of
//! `model::spec_generate`, the contract the GPU paths will implement. The prompt is fed M rows a step
//! (its last chunk padded, the padding rolled back); then each round verifies the last emitted token
//! and k = M - 1 drafts as one M-row step (`step_rows`), keeps the agreeing prefix plus the target's
//! own token (`speculate::accept_greedy`) and rolls the rest back (`commit_rows`). Drafts are forced
//! (controlled acceptance, issue 27 item 6): a round's first `agree` drafts are the target's own greedy
//! continuation (`truth`, given), the rest certainly wrong. Its tokens must be plain greedy decoding's
//! whatever `agree` is, since only the target's choices are ever emitted.
//!
//! `speculate_mtp` drafts with the MTP drafter's programs instead (`compiler::compile_drafter`), the
//! reference's MTP rounds (`model::spec_generate`) on programs.
//!
//! Owns: `speculate_forced`, `speculate_mtp`. Refuses: M < 2, agree > k, an empty prompt, more positions
//! than the programs' context holds (prompt + steps + one round's rows), a drafter without `h_in`.

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
        let toks = it.step_rows(&rows, super::Order::Program)?;
        it.commit_rows(chunk.len())?;
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
        stats.drafts.extend(&draft);
        let mut rows = vec![t];
        rows.extend(&draft);
        let target = it.step_rows(&rows, super::Order::Program)?;
        let emitted = accept_greedy(&draft, &target)?;
        it.commit_rows(emitted.len())?;
        stats.rounds += 1;
        stats.drafted += k;
        stats.accepted += emitted.len() - 1;
        out.extend(&emitted);
    }
    out.truncate(steps);
    Ok((out, stats))
}

/// The MTP drafter's two programs on the interpreter (`compiler::compile_drafter`): `from_target` for a
/// round's first draft and the rows that rebuild the drafter's KV at the kept positions (its `h_in` the
/// target's residual stream), `own` for the chained drafts (its `h_in` the drafter's own). One KV storage
/// in effect: `from_target`'s is the drafter's cache, copied into `own` before a round's chained drafts.
pub struct MtpPrograms<'i, 'a> {
    pub from_target: &'i mut Interp<'a>,
    pub own: &'i mut Interp<'a>,
}

/// One draft step of `d` at position `pos` on token `tok` with `h_in`; returns the drafted token and the
/// drafter's residual stream after it.
fn draft_on(d: &mut Interp, pos: usize, tok: u32, h_in: &[f32]) -> Result<(u32, Vec<f32>)> {
    let (ctrl, at) = (d.ctrl, d.prog.buffer_id("h_in"));
    let Some(at) = at else { bail!("speculation: {} is not a drafter's program (no h_in)", d.prog.model) };
    if d.bufs[at].len() != h_in.len() {
        bail!("speculation: the drafter's h_in holds {}, the target's h {}", d.bufs[at].len(), h_in.len());
    }
    d.bufs[at].copy_from_slice(h_in);
    d.bufs[ctrl][crate::isa::access::CTRL_POS] = pos as f32;
    let next = d.step(tok, super::Order::Program)?;
    Ok((next, d.buffer("h").unwrap_or_default().to_vec()))
}

/// `steps` tokens after `prompt`, greedy, on `it`'s M-row program with k = M - 1 drafts a round from the
/// MTP drafter's programs (`model::spec_generate`'s MTP rounds on programs: row p of the drafter takes
/// token p + 1 and the target's hidden at p; its drafts chain on its own output). Its tokens must be
/// plain greedy decoding's, and its drafts the reference's. `agree`: a test's forced acceptance (the
/// drafter runs, but a round's drafts are replaced by `truth`, the greedy continuation, so that every row
/// is kept and the drafter's KV is rebuilt over whole rounds); None for the drafter's own drafts.
pub fn speculate_mtp(
    it: &mut Interp,
    mtp: MtpPrograms,
    prompt: &[u32],
    steps: usize,
    agree: Option<&[u32]>,
) -> Result<(Vec<u32>, SpecStats)> {
    let m = it.prog.target.m_rows as usize;
    let k = m.saturating_sub(1);
    if m < 2 {
        bail!("speculation: the program has M = {m} rows (a verification step needs at least 2)");
    }
    if prompt.is_empty() {
        bail!("speculation: an empty prompt");
    }
    let ctx =
        it.prog.target.max_context.min(mtp.from_target.prog.target.max_context).min(mtp.own.prog.target.max_context)
            as usize;
    if prompt.len().div_ceil(m) * m + steps + m > ctx {
        bail!(
            "speculation: {} prompt tokens and {steps} steps (M = {m}) pass the programs' context {ctx}",
            prompt.len()
        );
    }
    let hd = it.cfg.hidden;
    let rows_of = |it: &Interp| it.buffer_full("h").unwrap_or_default();
    // the prompt, M rows a step; the drafter's rows over it (row p: token p + 1, hidden p)
    let (mut next, mut h_prev, mut fed) = (0, Vec::new(), 0);
    for chunk in prompt.chunks(m) {
        let mut rows = chunk.to_vec();
        rows.resize(m, 0);
        let toks = it.step_rows(&rows, super::Order::Program)?;
        let h = rows_of(it);
        it.commit_rows(chunk.len())?;
        for (r, hr) in h.chunks_exact(hd).take(chunk.len()).enumerate() {
            let p = fed + r;
            if p + 1 < prompt.len() {
                draft_on(mtp.from_target, p, prompt[p + 1], hr)?;
            }
            h_prev = hr.to_vec();
        }
        fed += chunk.len();
        next = toks[chunk.len() - 1];
    }
    let mut out = vec![next];
    let mut stats = SpecStats::default();
    while out.len() < steps {
        let t = *out.last().unwrap_or(&0);
        let pos = it.pos(); // t's position (not yet fed)
        let mut draft = Vec::with_capacity(k);
        // (a forced draft replaces the drafted token, as input of the next draft step too)
        let forced = |i: usize, tok: u32| agree.map_or(tok, |tr| tr.get(out.len() + i).copied().unwrap_or(0));
        let (mut tok, mut h) = draft_on(mtp.from_target, pos - 1, t, &h_prev)?;
        tok = forced(0, tok);
        draft.push(tok);
        if k > 1 {
            for name in ["k_cache.0", "v_cache.0"] {
                let v = mtp.from_target.buffer(name).unwrap_or_default().to_vec();
                let Some(at) = mtp.own.prog.buffer_id(name) else { bail!("speculation: the drafter has no {name}") };
                if mtp.own.bufs[at].len() != v.len() {
                    bail!("speculation: the drafter's two programs hold {name} of different sizes");
                }
                mtp.own.bufs[at] = v;
            }
        }
        for i in 1..k {
            (tok, h) = draft_on(mtp.own, pos - 1 + i, tok, &h)?;
            tok = forced(i, tok);
            draft.push(tok);
        }
        stats.drafts.extend(&draft);
        let mut rows = vec![t];
        rows.extend(&draft);
        let target = it.step_rows(&rows, super::Order::Program)?;
        let hs = rows_of(it);
        let emitted = accept_greedy(&draft, &target)?;
        let kept = emitted.len();
        it.commit_rows(kept)?;
        stats.rounds += 1;
        stats.drafted += k;
        stats.accepted += kept - 1;
        // the drafter's rows at the kept positions from the target's hidden states
        for r in 0..kept - 1 {
            draft_on(mtp.from_target, pos + r, rows[r + 1], &hs[r * hd..(r + 1) * hd])?;
        }
        h_prev = hs[(kept - 1) * hd..kept * hd].to_vec();
        out.extend(&emitted);
    }
    out.truncate(steps);
    Ok((out, stats))
}
