//! Greedy generation with speculation on the CPU reference (issue 27, items 6-7 on the CPU): each round
//! drafts k tokens, verifies the last emitted token and the k drafts as k + 1 rows (`rollback::verify`),
//! keeps the agreeing prefix plus the target's own token (`speculate::accept_greedy`) and rolls the rest
//! back (`rollback::commit`). Its tokens must equal plain greedy decoding's (`forward::generate`) for every
//! drafter, since only the target's choices are ever emitted.
//!
//! Drafters: the MTP head (`mtp::draft_step`: row p takes token p + 1 and the hidden state at p; after
//! a round the drafter's KV at the kept positions is recomputed from the target's hidden states), or
//! `Forced` (controlled acceptance for measurement: the first `agree` drafts of a round are the target's
//! own greedy continuation, given, the rest certainly wrong).
//!
//! Owns: `generate_speculative`, `Drafter`, `SpecStats`. Refuses: k outside 1..=7 (the M <= 8 rows of a
//! verification step), an empty prompt, a context overflow.

use super::forward::{step_hidden, State, Weights};
use super::mtp::{draft_step, MtpState, MtpWeights};
use super::ops::argmax;
use super::rollback::{commit, verify};
use super::speculate::accept_greedy;
use crate::bail;
use crate::error::Result;

pub enum Drafter<'a, 'b> {
    Mtp(&'b MtpWeights<'a>),
    /// `truth`: the plain greedy continuation after the prompt; a round's first `agree` drafts follow it.
    Forced {
        truth: Vec<u32>,
        agree: usize,
    },
}

/// What the rounds did.
#[derive(Debug, Default, PartialEq)]
pub struct SpecStats {
    pub rounds: usize,
    pub drafted: usize,
    pub accepted: usize,
    /// Every drafted token, round after round (what two drafters' runs compare when none is accepted:
    /// synthetic weights agree with their own drafts almost never).
    pub drafts: Vec<u32>,
    /// Where speculation switched itself off (the tokens emitted by then), if it did (`exec::spec`).
    pub off_at: Option<usize>,
}

impl std::fmt::Display for SpecStats {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(
            f,
            "speculation: {} rounds, {} of {} drafts accepted ({:.2} tokens a round)",
            self.rounds,
            self.accepted,
            self.drafted,
            (self.accepted + self.rounds) as f64 / self.rounds.max(1) as f64
        )
    }
}

/// `steps` tokens after `prompt`, greedy, k drafts a round.
pub fn generate_speculative(
    w: &Weights,
    drafter: &Drafter,
    prompt: &[u32],
    steps: usize,
    k: usize,
) -> Result<(Vec<u32>, SpecStats)> {
    if !(1..=7).contains(&k) {
        bail!("speculation: k = {k} drafts (1-7: a verification step has at most 8 rows)");
    }
    if prompt.is_empty() {
        bail!("speculation: an empty prompt");
    }
    if prompt.len().saturating_add(steps) > super::config::MAX_POSITIONS {
        bail!(
            "speculation: {} prompt tokens and {steps} steps pass the model's {} positions",
            prompt.len(),
            super::config::MAX_POSITIONS
        );
    }
    let cfg = &w.cfg;
    // room for the prompt, the steps and one round's rows past the last kept token
    let max_ctx = prompt.len() + steps + k + 1;
    let mut st = State::new(cfg, max_ctx);
    let mut ms = MtpState::new(cfg, max_ctx);
    let mut hid = Vec::with_capacity(prompt.len());
    let mut logits = Vec::new();
    for &t in prompt {
        let (l, h) = step_hidden(w, &mut st, t, None)?;
        logits = l;
        hid.push(h);
    }
    if let Drafter::Mtp(m) = drafter {
        // the drafter's KV over the prompt: row p = (token p + 1, hidden p)
        for p in 0..prompt.len() - 1 {
            draft_step(w, m, &mut ms, prompt[p + 1], &hid[p], p)?;
        }
    }
    let mut out = vec![argmax(&logits) as u32];
    let mut h_prev = hid.pop().unwrap_or_default(); // the target's hidden at the last fed position
    let mut stats = SpecStats::default();
    while out.len() < steps {
        let t = *out.last().unwrap_or(&0);
        let pos = st.pos; // t's position (not yet fed)
        let draft: Vec<u32> = match drafter {
            Drafter::Mtp(m) => {
                let (mut tok, mut h) = (t, h_prev.clone());
                let mut d = Vec::with_capacity(k);
                for i in 0..k {
                    let (l, nh) = draft_step(w, m, &mut ms, tok, &h, pos - 1 + i)?;
                    tok = argmax(&l) as u32;
                    d.push(tok);
                    h = nh;
                }
                d
            }
            Drafter::Forced { truth, agree } => (0..k)
                .map(|i| {
                    let idx = out.len() + i; // truth[idx] follows out[..idx]
                    let v = truth.get(idx).copied().unwrap_or(0);
                    if i < *agree {
                        v
                    } else {
                        (v + 1) % cfg.vocab as u32
                    }
                })
                .collect(),
        };
        stats.drafts.extend(&draft);
        let mut rows = vec![t];
        rows.extend(&draft);
        let (outs, round) = verify(w, &mut st, &rows)?;
        let target: Vec<u32> = outs.iter().map(|(l, _)| argmax(l) as u32).collect();
        let emitted = accept_greedy(&draft, &target)?;
        let kept = emitted.len(); // t and the accepted drafts: rows 0..kept
        commit(w, &mut st, &round, kept, false)?;
        stats.rounds += 1;
        stats.drafted += k;
        stats.accepted += kept - 1;
        if let Drafter::Mtp(m) = drafter {
            // the drafter's rows at the kept positions from the target's hidden states (row p: token
            // p + 1, hidden p); the last kept row's is the next round's first draft step
            for r in 0..kept - 1 {
                draft_step(w, m, &mut ms, rows[r + 1], &outs[r].1, pos + r)?;
            }
        }
        h_prev = outs[kept - 1].1.clone();
        out.extend(&emitted); // the kept drafts, then the target's own token
    }
    out.truncate(steps);
    Ok((out, stats))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::checkpoint::Checkpoint;
    use crate::model::forward::generate;
    use crate::model::sample::SamplingParams;

    #[test]
    fn speculation_emits_exactly_the_greedy_tokens() {
        let dir = std::env::temp_dir().join(format!("mk-specgen-{}", std::process::id()));
        let cfg = crate::model::config::ModelConfig::preset("tiny").unwrap();
        crate::model::synth::write_checkpoint(&cfg, 2, &dir).unwrap();
        let ck = Checkpoint::open(&dir).unwrap();
        let w = Weights::from_checkpoint(&ck);
        let m = MtpWeights::from_checkpoint(&ck).unwrap();
        let prompt = [5u32, 99, 1234, 7];
        let steps = 24;
        let greedy = SamplingParams { temperature: 0.0, top_k: 0, top_p: 1.0 };
        let truth = generate(&w, &prompt, steps + 8, &greedy, 0).unwrap();
        for k in [1, 4, 7] {
            let (toks, s) = generate_speculative(&w, &Drafter::Mtp(&m), &prompt, steps, k).unwrap();
            assert_eq!(toks, truth[..steps], "MTP drafter, k = {k}");
            assert!(s.rounds > 0 && s.drafted == s.rounds * k);
            // controlled acceptance: j of k drafts agree every round
            let mut agrees = vec![0, k / 2, k];
            agrees.dedup();
            for agree in agrees {
                let d = Drafter::Forced { truth: truth.clone(), agree };
                let (toks, s) = generate_speculative(&w, &d, &prompt, steps, k).unwrap();
                assert_eq!(toks, truth[..steps], "forced drafter, k = {k}, agree = {agree}");
                assert_eq!(s.accepted, s.rounds * agree, "k = {k}, agree = {agree}: {s:?}");
            }
        }
        // negative control: a wrong acceptance (one draft kept past the first mismatch) changes tokens
        let d = Drafter::Forced { truth: truth.clone(), agree: 0 };
        let bad = generate_bad(&w, &d, &prompt, steps);
        assert_ne!(bad, truth[..steps]);
        assert!(generate_speculative(&w, &Drafter::Mtp(&m), &prompt, steps, 8).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The negative control: k = 2 rounds that always keep the first draft (right or wrong).
    fn generate_bad(w: &Weights, d: &Drafter, prompt: &[u32], steps: usize) -> Vec<u32> {
        let Drafter::Forced { truth, .. } = d else { unreachable!() };
        let mut st = State::new(&w.cfg, prompt.len() + steps + 4);
        let mut logits = Vec::new();
        for &t in prompt {
            logits = step_hidden(w, &mut st, t, None).unwrap().0;
        }
        let mut out = vec![argmax(&logits) as u32];
        while out.len() < steps {
            let t = *out.last().unwrap();
            let wrong = (truth[out.len()] + 1) % w.cfg.vocab as u32;
            let (outs, round) = verify(w, &mut st, &[t, wrong]).unwrap();
            commit(w, &mut st, &round, 2, false).unwrap();
            out.push(wrong);
            out.push(argmax(&outs[1].0) as u32);
        }
        out.truncate(steps);
        out
    }
}
