//! Greedy speculation with the MTP drafter (issue 27), once for every executor: the target verifies a
//! round's last emitted token and k = M - 1 drafts as one M-row step, keeps the agreeing prefix plus
//! its own token (`speculate::accept_greedy`) and rolls the rest back (the deferred commit); the
//! drafter's two programs draft (a round's first draft from the target's residual stream, the rest
//! chained on the drafter's own) over one KV storage, rebuilt at the kept positions from the target's
//! rows. The interpreter (`interp::spec`) and the GPU paths (`gpu::spec`) implement the two traits;
//! the loop is `model::spec_generate`'s MTP rounds on programs.
//!
//! Owns: `Verifier`, `Drafter`, `Plain`, `Forced` (drafts of controlled acceptance), `speculate_mtp` and its switch (`speculate_switched`: off
//! where the rounds emit tokens slower than the one-row step). Refuses: M < 2, an empty prompt, more positions than
//! the programs' context holds (prompt + steps + one round's rows).

use crate::bail;
use crate::error::Result;
use crate::model::sample::{distribution, sample, uniform_at, SamplingParams};
use crate::model::spec_generate::SpecStats;
use crate::model::speculate::{accept_greedy, accept_sampled};

/// The target: an M-row program's executor.
pub trait Verifier {
    /// Rows a verification step takes (M).
    fn rows(&self) -> usize;
    /// Positions the program holds.
    fn context(&self) -> usize;
    /// The next position a step writes (its row 0's).
    fn pos(&self) -> usize;
    /// One M-row step (token m at pos + m); every row's greedy next token. Its residual rows (`h`)
    /// stay readable until the next step.
    fn verify(&mut self, tokens: &[u32]) -> Result<Vec<u32>>;
    /// Keeps the first n rows of the last step (the deferred commit).
    fn commit(&mut self, n: usize) -> Result<()>;
    /// Makes the committed state real now (`flush_rows`), for handing it on.
    fn flush(&mut self) -> Result<()>;
    /// The last step's logits, every row, row after row (sampled speculation; one read a round).
    fn logits_rows(&self) -> Result<Vec<f32>> {
        bail!("speculation: this target does not give its logits (sampled speculation)")
    }
}

/// The one-row program that decodes when speculation is off.
pub trait Plain<V: Verifier> {
    /// Takes the target's state (every state buffer both programs hold, after its flush: conv rings,
    /// recurrent states, KV rows below the position) and its position.
    fn take_over(&mut self, target: &mut V) -> Result<()>;
    /// One decode step; the greedy next token.
    fn step(&mut self, token: u32) -> Result<u32>;
}

/// When speculation switches itself off: after exactly `window` rounds (0: before the first), if they
/// emitted their tokens slower than `plain_ms` a token (the one-row step's measured time), the rest is
/// decoded by `plain`; else speculation goes on and is not judged again (once off, it stays off; a
/// rule that probes again as acceptance changes with context is not built).
pub struct Switch<'p, V: Verifier> {
    pub plain: &'p mut dyn Plain<V>,
    pub plain_ms: f64,
    pub window: usize,
}

/// The MTP drafter's two programs (`compiler::compile_drafter`, DraftInput::Target and Own) over one KV
/// storage.
pub trait Drafter<V: Verifier> {
    /// Positions the drafter's programs hold.
    fn context(&self) -> usize;
    /// One draft step at position `pos` on token `tok`, its `h_in` the target's residual row `row` of
    /// its last step; the drafted token.
    fn from_target(&mut self, target: &V, row: usize, pos: usize, tok: u32) -> Result<u32>;
    /// One chained draft step at `pos` on `tok`, its `h_in` the residual stream the drafter's last step
    /// left (`first`: that step was `from_target`'s); the drafted token. The first of a round's sees
    /// every KV row `from_target` wrote.
    fn chained(&mut self, pos: usize, tok: u32, first: bool) -> Result<u32>;
    /// The logits of the last step of the `from_target` program (`own` false) or of the chained one
    /// (sampled speculation).
    fn logits_of(&self, _own: bool) -> Result<Vec<f32>> {
        bail!("speculation: this drafter does not give its logits (sampled speculation)")
    }
}

/// Sampled speculation (issue 27 item 4 on the executors): the warpers of the target and the drafter
/// (one `SamplingParams`), and the draws: the n-th of a run `uniform_at(seed, n)`, taken in a fixed
/// order (the prompt's token; per round the k drafts, then `accept_sampled`'s).
pub struct Sampled {
    pub params: SamplingParams,
    pub seed: u64,
    draws: u64,
}

impl Sampled {
    pub fn new(params: SamplingParams, seed: u64) -> Result<Sampled> {
        params.check()?;
        Ok(Sampled { params, seed, draws: 0 })
    }
    fn uniform(&mut self) -> f32 {
        self.draws += 1;
        uniform_at(self.seed, self.draws - 1)
    }
    /// A token drawn from `logits` under the warpers, and the distribution it was drawn from.
    fn draw(&mut self, logits: &[f32]) -> Result<(u32, Vec<f32>)> {
        let u = self.uniform();
        Ok((sample(logits, &self.params, u)?, distribution(logits, &self.params)?))
    }
}

/// Controlled acceptance without a drafter (issue 27, item 6): a round's first `agree` drafts are the
/// target's own greedy continuation (`truth`: truth[j] follows the first j emitted tokens), the rest
/// certainly wrong. `prompt_len` places the truth: the token drafted at drafter position p is the one
/// at p + 2, truth[p + 2 - prompt_len].
pub struct Forced<'t> {
    pub truth: &'t [u32],
    pub agree: usize,
    pub prompt_len: usize,
    pub vocab: u32,
    /// The draft index within the round (from_target starts a round: 0).
    i: usize,
}

impl<'t> Forced<'t> {
    pub fn new(truth: &'t [u32], agree: usize, prompt_len: usize, vocab: u32) -> Forced<'t> {
        Forced { truth, agree, prompt_len, vocab, i: 0 }
    }
    fn draft(&self, pos: usize) -> u32 {
        let v = (pos + 2).checked_sub(self.prompt_len).and_then(|j| self.truth.get(j)).copied().unwrap_or(0);
        if self.i < self.agree {
            v
        } else {
            (v + 1) % self.vocab.max(1)
        }
    }
}

impl<V: Verifier> Drafter<V> for Forced<'_> {
    fn context(&self) -> usize {
        usize::MAX
    }
    fn from_target(&mut self, _: &V, _: usize, pos: usize, _: u32) -> Result<u32> {
        self.i = 0;
        Ok(self.draft(pos))
    }
    fn chained(&mut self, pos: usize, _: u32, _: bool) -> Result<u32> {
        self.i += 1;
        Ok(self.draft(pos))
    }
}

/// `steps` tokens after `prompt`, greedy, verified by `it` (M rows) with k = M - 1 drafts a round from
/// `d`: row p of the drafter takes token p + 1 and the target's residual at p, its drafts chain on its
/// own. The tokens must be plain greedy decoding's. `agree`: forced acceptance for checks and
/// measurements (the drafter runs, its proposals replaced by `agree`, the greedy continuation, so that
/// every row is kept and the drafter's KV is rebuilt over whole rounds); None for its own drafts.
/// Afterwards the verifier holds the prompt and every returned token but the last (not yet fed), its
/// last step's rows committed (not flushed).
pub fn speculate_mtp<V: Verifier, D: Drafter<V>>(
    it: &mut V,
    d: &mut D,
    prompt: &[u32],
    steps: usize,
    agree: Option<&[u32]>,
) -> Result<(Vec<u32>, SpecStats)> {
    speculate_switched(it, d, prompt, steps, agree, None)
}

/// `speculate_mtp` that switches itself off where it does not pay (`Switch`): the tokens are the same.
pub fn speculate_switched<V: Verifier, D: Drafter<V>>(
    it: &mut V,
    d: &mut D,
    prompt: &[u32],
    steps: usize,
    agree: Option<&[u32]>,
    switch: Option<Switch<V>>,
) -> Result<(Vec<u32>, SpecStats)> {
    rounds(it, d, prompt, steps, agree, switch, None)
}

/// `steps` tokens after `prompt` by sampled speculation: the prompt's next token drawn from the target's
/// last prompt row, each draft drawn from the drafter's distribution q, each round's k + 1 rows' target
/// distributions p, and `accept_sampled`'s exact rule (keep a draft with probability min(1, p / q), else
/// draw from the normalised positive part of p - q; the bonus from p): the emitted tokens follow the
/// target's sampling distribution. With greedy params it is greedy speculation.
pub fn speculate_sampled<V: Verifier, D: Drafter<V>>(
    it: &mut V,
    d: &mut D,
    prompt: &[u32],
    steps: usize,
    s: &mut Sampled,
) -> Result<(Vec<u32>, SpecStats)> {
    rounds(it, d, prompt, steps, None, None, Some(s))
}

/// Row `r` of `m` rows of logits.
fn row(all: &[f32], m: usize, r: usize) -> Result<&[f32]> {
    let v = all.len() / m.max(1);
    match all.get(r * v..(r + 1) * v) {
        Some(l) if v > 0 => Ok(l),
        _ => bail!("speculation: no logits row {r} of {m} in {} values", all.len()),
    }
}

/// The rounds of `speculate_switched` (greedy, `sampled` None) and `speculate_sampled`.
fn rounds<V: Verifier, D: Drafter<V>>(
    it: &mut V,
    d: &mut D,
    prompt: &[u32],
    steps: usize,
    agree: Option<&[u32]>,
    mut switch: Option<Switch<V>>,
    mut sampled: Option<&mut Sampled>,
) -> Result<(Vec<u32>, SpecStats)> {
    let m = it.rows();
    let k = m.saturating_sub(1);
    if m < 2 {
        bail!("speculation: the program has M = {m} rows (a verification step needs at least 2)");
    }
    if prompt.is_empty() {
        bail!("speculation: an empty prompt");
    }
    let ctx = it.context().min(d.context());
    if prompt.len().div_ceil(m) * m + steps + m > ctx {
        bail!(
            "speculation: {} prompt tokens and {steps} steps (M = {m}) pass the programs' context {ctx}",
            prompt.len()
        );
    }
    // the prompt, M rows a step; the drafter's rows over it (row p: token p + 1, hidden p)
    let (mut next, mut last_row, mut fed) = (0, 0, 0);
    for chunk in prompt.chunks(m) {
        let mut rows = chunk.to_vec();
        rows.resize(m, 0);
        let toks = it.verify(&rows)?;
        it.commit(chunk.len())?;
        for r in 0..chunk.len() {
            let p = fed + r;
            if p + 1 < prompt.len() {
                d.from_target(it, r, p, prompt[p + 1])?;
            }
        }
        last_row = chunk.len() - 1;
        fed += chunk.len();
        next = toks[chunk.len() - 1];
    }
    if let Some(s) = sampled.as_mut() {
        // (sampled: the last prompt row's token drawn instead; no step ran since that row's)
        next = s.draw(row(&it.logits_rows()?, m, last_row)?)?.0;
    }
    let mut out = vec![next];
    let mut stats = SpecStats::default();
    let t0 = std::time::Instant::now();
    while out.len() < steps {
        if let Some(sw) = switch.as_mut() {
            let emitted = out.len() - 1;
            if stats.rounds == sw.window && t0.elapsed().as_secs_f64() * 1e3 > sw.plain_ms * emitted as f64 {
                // off: the one-row program decodes the rest from the target's committed state
                it.flush()?;
                sw.plain.take_over(it)?;
                stats.off_at = Some(out.len());
                while out.len() < steps {
                    let t = *out.last().unwrap_or(&0);
                    out.push(sw.plain.step(t)?);
                }
                break;
            }
        }
        let t = *out.last().unwrap_or(&0);
        let pos = it.pos(); // t's position (not yet fed)
        let mut draft = Vec::with_capacity(k);
        // (a forced draft replaces the drafted token, as input of the next draft step too; sampled: a
        // draft is drawn from the drafter's distribution, q keeps each)
        let forced = |i: usize, tok: u32| agree.map_or(tok, |tr| tr.get(out.len() + i).copied().unwrap_or(0));
        let mut q: Vec<Vec<f32>> = Vec::new();
        let mut tok = forced(0, d.from_target(it, last_row, pos - 1, t)?);
        if let Some(s) = sampled.as_mut() {
            let (x, dist) = s.draw(&d.logits_of(false)?)?;
            (tok, q) = (x, vec![dist]);
        }
        draft.push(tok);
        for i in 1..k {
            tok = forced(i, d.chained(pos - 1 + i, tok, i == 1)?);
            if let Some(s) = sampled.as_mut() {
                let (x, dist) = s.draw(&d.logits_of(true)?)?;
                tok = x;
                q.push(dist);
            }
            draft.push(tok);
        }
        stats.drafts.extend(&draft);
        let mut rows = vec![t];
        rows.extend(&draft);
        let target = it.verify(&rows)?;
        let emitted = match sampled.as_mut() {
            None => accept_greedy(&draft, &target)?,
            Some(s) => {
                let all = it.logits_rows()?;
                let p = (0..=k).map(|r| distribution(row(&all, m, r)?, &s.params)).collect::<Result<Vec<_>>>()?;
                accept_sampled(&p, &q, &draft, || s.uniform())?
            }
        };
        let kept = emitted.len();
        // (a last round that emits past `steps` keeps only the rows through the second-last token of
        // the `steps`: the state is that of the tokens returned, the last of them not yet fed)
        it.commit(kept.min(steps - out.len()))?;
        stats.rounds += 1;
        stats.drafted += k;
        stats.accepted += kept - 1;
        // the drafter's rows at the kept positions from the target's residual rows
        for r in 0..kept - 1 {
            d.from_target(it, r, pos + r, rows[r + 1])?;
        }
        last_row = kept - 1;
        out.extend(&emitted);
    }
    out.truncate(steps);
    Ok((out, stats))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Logits over a vocabulary of 12 that are a pure function of (the fed token's position, the token):
    /// a model whose next-token distribution depends on its last token and position only.
    fn logits(pos: usize, tok: u32) -> Vec<f32> {
        (0..12u64)
            .map(|i| (crate::model::sample::uniform_at(pos as u64 * 131 + tok as u64, i) * 4.0).round() / 2.0)
            .collect()
    }

    /// A target over `logits`: a step's row r feeds tokens[r] at position pos + r; commit keeps n rows.
    struct Target {
        m: usize,
        pos: usize,
        last: Vec<f32>,
    }
    impl Verifier for Target {
        fn rows(&self) -> usize {
            self.m
        }
        fn context(&self) -> usize {
            4096
        }
        fn pos(&self) -> usize {
            self.pos
        }
        fn verify(&mut self, tokens: &[u32]) -> Result<Vec<u32>> {
            self.last = tokens.iter().enumerate().flat_map(|(r, &t)| logits(self.pos + r, t)).collect();
            Ok(self.last.chunks(12).map(|l| crate::model::ops::argmax(l) as u32).collect())
        }
        fn commit(&mut self, n: usize) -> Result<()> {
            self.pos += n;
            Ok(())
        }
        fn flush(&mut self) -> Result<()> {
            Ok(())
        }
        fn logits_rows(&self) -> Result<Vec<f32>> {
            Ok(self.last.clone())
        }
    }

    /// A drafter over the same `logits` (its step at drafter position p feeds the token at p + 1), or
    /// `shift` positions off (the NEGATIVE CONTROL: q is not the distribution the target's row has).
    struct Draft {
        shift: usize,
        from_target: Vec<f32>,
        own: Vec<f32>,
    }
    impl Drafter<Target> for Draft {
        fn context(&self) -> usize {
            4096
        }
        fn from_target(&mut self, _: &Target, _: usize, pos: usize, tok: u32) -> Result<u32> {
            self.from_target = logits(pos + 1 + self.shift, tok);
            Ok(crate::model::ops::argmax(&self.from_target) as u32)
        }
        fn chained(&mut self, pos: usize, tok: u32, _: bool) -> Result<u32> {
            self.own = logits(pos + 1 + self.shift, tok);
            Ok(crate::model::ops::argmax(&self.own) as u32)
        }
        fn logits_of(&self, own: bool) -> Result<Vec<f32>> {
            Ok(if own { self.own.clone() } else { self.from_target.clone() })
        }
    }

    /// Sampled speculation with a drafter whose q is the target's p for the same context: every draft is
    /// kept (min(1, p / q) = 1), which holds only if each q is read from the step that drew its draft and
    /// each p from the row of the same context; a drafter one position off (the control) loses drafts.
    #[test]
    fn a_drafter_that_is_the_target_has_every_sampled_draft_kept() {
        let run = |shift: usize| {
            let (mut t, mut d) =
                (Target { m: 4, pos: 0, last: Vec::new() }, Draft { shift, from_target: vec![], own: vec![] });
            let mut s = Sampled::new(SamplingParams { temperature: 1.0, top_k: 0, top_p: 1.0 }, 3).unwrap();
            speculate_sampled(&mut t, &mut d, &[1, 2, 3, 4, 5], 200, &mut s).unwrap()
        };
        let (toks, st) = run(0);
        assert_eq!(toks.len(), 200);
        assert!(st.rounds > 10 && st.accepted == st.drafted, "{st}");
        let (_, bad) = run(1);
        assert!(bad.accepted < bad.drafted, "the control must lose drafts: {bad}");
    }
}
