//! The MTP drafter's CPU reference (issue 27, item 1): the checkpoint's `mtp.*` head, which the oracle
//! drops (transformers ignores `^mtp.*`), so this reference is ours, written from the production engines'
//! code (vLLM `vllm/model_executor/models/qwen3_5_mtp.py`, SGLang `python/sglang/srt/models/qwen3_5_mtp.py`).
//!
//! One draft step at position p takes the token t(p + 1) and the target's hidden state at p (after the
//! final norm: what the lm_head scores) and predicts t(p + 2):
//! `e = rmsnorm(embed(t(p+1)); pre_fc_norm_embedding)`, `g = rmsnorm(hidden(p); pre_fc_norm_hidden)`,
//! `x = mtp.fc(cat[e, g])` (ORDER: the embedding half first), one full-attention decoder layer at RoPE
//! position p with its own KV cache, `mtp.norm`, the shared lm_head. Later draft steps feed the drafted
//! token, position p + 1 and the drafter's own normed output back in. Rounding points follow the main
//! model's layers (bf16 after every norm, linear and residual add), the one convention this engine has.
//!
//! Owns: `MtpWeights`, `MtpState`, `draft_step`. Refuses: a checkpoint without the head, out-of-range
//! tokens, context overflow.

use super::checkpoint::Checkpoint;
use super::config::LayerKind;
use super::forward::{attention_layer, check_input, decoder_layer, Mixer, Weights};
use super::numerics::bf16_to_f32;
use super::ops::{self, Linear, SumOrder};
use super::weights::{layer, linear, LayerWeights};
use crate::bail;
use crate::error::Result;

pub struct MtpWeights<'a> {
    /// `[hidden, 2 hidden]`: columns 0..hidden take the embedding half, hidden..2 hidden the hidden half.
    pub fc: Linear<'a>,
    pub pre_fc_norm_embedding: Vec<f32>,
    pub pre_fc_norm_hidden: Vec<f32>,
    pub norm: Vec<f32>,
    /// The full-attention decoder layer `mtp.layers.0`.
    pub layer: LayerWeights<'a>,
}

impl<'a> MtpWeights<'a> {
    /// The head of a validated checkpoint (every linear in the canonical order).
    pub fn from_checkpoint(ck: &'a Checkpoint) -> Result<MtpWeights<'a>> {
        // (a validated checkpoint with MTP layers in its config holds every mtp.* tensor)
        if ck.config.mtp_layers == 0 {
            bail!("mtp: the checkpoint has no MTP head (mtp.* tensors)");
        }
        let lin = |m: &str| Linear { order: SumOrder::Canonical, ..linear(ck, m) };
        Ok(MtpWeights {
            fc: lin("mtp.fc"),
            pre_fc_norm_embedding: ck.f32_vec("mtp.pre_fc_norm_embedding.weight"),
            pre_fc_norm_hidden: ck.f32_vec("mtp.pre_fc_norm_hidden.weight"),
            norm: ck.f32_vec("mtp.norm.weight"),
            layer: layer(ck, "mtp.layers.0.", LayerKind::Attention, &lin),
        })
    }
}

/// The drafter's KV cache (`[max_context][kv_heads][256]` each, as an attention layer's of `State`).
#[derive(Clone)]
pub struct MtpState {
    pub k_cache: Vec<f32>,
    pub v_cache: Vec<f32>,
    pub max_context: usize,
}

impl MtpState {
    pub fn new(cfg: &super::config::ModelConfig, max_context: usize) -> MtpState {
        let kv = max_context * cfg.attn_kv_dim();
        MtpState { k_cache: vec![0.0; kv], v_cache: vec![0.0; kv], max_context }
    }
}

/// One draft step at RoPE position `pos`: `token` is t(pos + 1), `hidden` the (final-normed) hidden
/// state at `pos` (the target's, or the drafter's own output for later steps). Writes the drafter's
/// KV at `pos`. Returns the logits for t(pos + 2) and the drafter's normed hidden (the next step's input).
pub fn draft_step(
    w: &Weights,
    m: &MtpWeights,
    st: &mut MtpState,
    token: u32,
    hidden: &[f32],
    pos: usize,
) -> Result<(Vec<f32>, Vec<f32>)> {
    let cfg = &w.cfg;
    check_input(cfg, pos, st.max_context, token)?;
    let hd = cfg.hidden;
    if hidden.len() != hd {
        bail!("mtp: hidden state of {} values, the model's is {hd}", hidden.len());
    }
    let eps = cfg.rms_eps as f32;
    let t = token as usize;
    let e: Vec<f32> = w.embed[t * hd..(t + 1) * hd].iter().map(|b| bf16_to_f32(*b)).collect();
    // ORDER: [normed embedding, normed hidden] (the seed measured 0 of 233 agreements swapped)
    let mut cat = vec![0f32; 2 * hd];
    let (ce, ch) = cat.split_at_mut(hd);
    ops::rms_norm_block(&e, &m.pre_fc_norm_embedding, eps, ce);
    ops::rms_norm_block(hidden, &m.pre_fc_norm_hidden, eps, ch);
    let mut h = m.fc.gemv(&cat);
    let mut xn = vec![0f32; hd];
    let Mixer::Attn(a) = &m.layer.mixer else { bail!("mtp: the head's layer is not an attention layer") };
    decoder_layer(cfg, &m.layer, &mut h, &mut xn, |x| {
        attention_layer(cfg, a, x, pos, &mut st.k_cache, &mut st.v_cache)
    });
    ops::rms_norm_block(&h, &m.norm, eps, &mut xn);
    Ok((w.lm_head.gemv(&xn), xn))
}

/// The drafter's working vocabulary (issue 27, item 2): the ids the pruned head scores, a static core
/// plus every id the session has seen. The core's rule, since synthetic weights carry no frequencies:
/// the first `core` ids. Byte-level BPE assigns ids in merge order, which follows pair frequency in the
/// tokenizer's training text, so low ids are the frequent ones (a rule chosen, not a measurement;
/// the release's tokenizer: byte-level BPE, 247,587 merges).
pub struct WorkingVocab {
    member: Vec<bool>,
    ids: Vec<u32>,
}

impl WorkingVocab {
    pub fn new(vocab: usize, core: usize) -> WorkingVocab {
        let core = core.min(vocab);
        let mut member = vec![false; vocab];
        member[..core].iter_mut().for_each(|m| *m = true);
        WorkingVocab { member, ids: (0..core as u32).collect() }
    }
    /// Adds a seen id (ids off the vocabulary are refused).
    pub fn add(&mut self, id: u32) -> Result<()> {
        let Some(m) = self.member.get_mut(id as usize) else {
            bail!("working vocabulary: id {id} is off the vocabulary of {}", self.member.len());
        };
        if !*m {
            *m = true;
            let at = self.ids.partition_point(|&x| x < id);
            self.ids.insert(at, id);
        }
        Ok(())
    }
    /// The ids, ascending.
    pub fn ids(&self) -> &[u32] {
        &self.ids
    }
}

/// The pruned head's choice: the lm_head's rows of the working vocabulary only, each row's logit the
/// full head's bits (`Linear::row_dot`, rounded once), the largest with the lowest id on ties (ids
/// ascending: `argmax`'s rule). Reads ids x hidden weights instead of the vocabulary's.
pub fn pruned_argmax(lm_head: &Linear, xn: &[f32], wv: &WorkingVocab) -> Result<u32> {
    if wv.ids.is_empty() {
        bail!("working vocabulary: empty");
    }
    let logits: Vec<f32> = wv.ids.iter().map(|&r| super::numerics::bf(lm_head.row_dot(xn, r as usize))).collect();
    Ok(wv.ids[super::ops::argmax(&logits)])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::forward::{step_hidden, State};
    use crate::model::ops::argmax;

    /// A tiny synthetic checkpoint in a scratch folder of its own (`tag`: one per test, they run in parallel).
    fn tiny(tag: &str) -> (tempdir::Dir, Checkpoint) {
        let (dir, ck, _) = tempdir::tiny(tag, 3);
        (dir, ck)
    }

    use crate::model::tempdir;

    #[test]
    fn a_draft_chain_is_deterministic_and_its_inputs_matter() {
        let (_d, ck) = tiny("mtp-chain");
        let w = Weights::from_checkpoint(&ck);
        let m = MtpWeights::from_checkpoint(&ck).unwrap();
        let cfg = &w.cfg;
        // the target over a short prompt; the drafter fed (t(p + 1), hidden(p)) for each p
        let toks = [11u32, 42, 7, 300, 5];
        let mut st = State::new(cfg, 64);
        let mut hid = Vec::new();
        for &t in &toks {
            hid.push(step_hidden(&w, &mut st, t, None).unwrap().1);
        }
        let run = |swap: bool| -> Vec<u32> {
            let mut ms = MtpState::new(cfg, 64);
            let mut out = Vec::new();
            for p in 0..toks.len() - 1 {
                let h = if swap { &hid[toks.len() - 1 - p] } else { &hid[p] };
                let (logits, _) = draft_step(&w, &m, &mut ms, toks[p + 1], h, p).unwrap();
                out.push(argmax(&logits) as u32);
            }
            // three chained draft steps from the last position, feeding the drafter's own hidden back
            let (mut t, mut h, mut p) = (toks[toks.len() - 1], hid[toks.len() - 1].clone(), toks.len() - 1);
            for _ in 0..3 {
                let (logits, nh) = draft_step(&w, &m, &mut ms, t, &h, p).unwrap();
                t = argmax(&logits) as u32;
                out.push(t);
                h = nh;
                p += 1;
            }
            out
        };
        let a = run(false);
        assert_eq!(a, run(false), "the drafter is a pure function of its inputs");
        assert_eq!(a.len(), 7);
        // negative control: the hidden states fed in another order change the drafts
        assert_ne!(a, run(true));
    }

    #[test]
    fn the_pruned_head_is_the_full_head_on_its_rows() {
        let (_d, ck) = tiny("mtp-pruned");
        let w = Weights::from_checkpoint(&ck);
        let mut st = State::new(&w.cfg, 8);
        let (logits, xn) = step_hidden(&w, &mut st, 77, None).unwrap();
        let best = argmax(&logits) as u32;
        // a working vocabulary holding the full head's choice picks it
        let mut wv = WorkingVocab::new(w.cfg.vocab, 100);
        wv.add(best).unwrap();
        wv.add(best).unwrap(); // (twice: once kept)
        assert_eq!(pruned_argmax(&w.lm_head, &xn, &wv).unwrap(), best);
        // one without it picks the best of its rows, the full head's bits on them
        let wv = WorkingVocab::new(w.cfg.vocab, 100);
        let want = if best < 100 { best } else { argmax(&logits[..100]) as u32 };
        assert_eq!(pruned_argmax(&w.lm_head, &xn, &wv).unwrap(), want);
        assert_eq!(wv.ids().len(), 100);
        let mut wv = WorkingVocab::new(w.cfg.vocab, 0);
        assert!(pruned_argmax(&w.lm_head, &xn, &wv).is_err());
        assert!(wv.add(w.cfg.vocab as u32).unwrap_err().to_string().contains("off the vocabulary"));
    }

    #[test]
    fn bad_input_is_refused() {
        let (_d, ck) = tiny("mtp-bad");
        let w = Weights::from_checkpoint(&ck);
        let m = MtpWeights::from_checkpoint(&ck).unwrap();
        let mut ms = MtpState::new(&w.cfg, 4);
        let h = vec![0.5f32; w.cfg.hidden];
        let vocab = w.cfg.vocab as u32;
        assert!(draft_step(&w, &m, &mut ms, vocab, &h, 0).unwrap_err().to_string().contains("out of range"));
        assert!(draft_step(&w, &m, &mut ms, 1, &h, 4).unwrap_err().to_string().contains("context overflow"));
        assert!(draft_step(&w, &m, &mut ms, 1, &h[1..], 0).unwrap_err().to_string().contains("hidden state of"));
    }
}
