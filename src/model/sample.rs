//! Sampling the next token from bf16 logits, with the tie rules of the reference (transformers'
//! logits warpers, applied in its order: temperature, then top-k, then top-p), and a draw that is a
//! pure function of the logits and one uniform number, so every path that computes the same logits
//! picks the same token.
//!
//! Owns: `SamplingParams` and `sample`. Refuses: the reference's random stream (torch's multinomial
//! generator cannot be reproduced; the engine's draw is its own, seeded and recorded).

use crate::bail;
use crate::error::Result;

use super::ops::argmax;

#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SamplingParams {
    /// 0 means greedy (the argmax, lowest id on ties).
    pub temperature: f32,
    /// 0 means no top-k.
    pub top_k: usize,
    /// 1.0 means no top-p.
    pub top_p: f32,
}

impl SamplingParams {
    pub fn greedy() -> SamplingParams {
        SamplingParams { temperature: 0.0, top_k: 0, top_p: 1.0 }
    }

    pub fn check(&self) -> Result<()> {
        if !(self.temperature >= 0.0 && self.temperature.is_finite()) {
            bail!("sampling: temperature {} must be finite and >= 0", self.temperature);
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            bail!("sampling: top_p {} must be in (0, 1]", self.top_p);
        }
        Ok(())
    }
}

/// The ids that survive the warpers, each with its (temperature-scaled) fp32 score.
///
/// - temperature: scores = logits / T in fp32;
/// - top-k (`TopKLogitsWarper`): a value threshold: every id scoring at least the k-th largest score is
///   kept, so ties at the threshold keep more than k ids;
/// - top-p (`TopPLogitsWarper`): ids sorted ascending by score (ties: lower id first, a stable sort of
///   the ids in order), softmax, cumulative sum in that order; the ascending prefix whose cumulative
///   probability is <= 1 - p is removed, the last (highest) id always stays. Among tied scores the
///   lower ids go first, so the highest tied id survives.
pub fn candidates(logits: &[f32], p: &SamplingParams) -> Vec<(u32, f32)> {
    let t = p.temperature;
    let mut kept: Vec<(u32, f32)> = logits.iter().enumerate().map(|(i, x)| (i as u32, x / t)).collect();
    if p.top_k > 0 && p.top_k < kept.len() {
        let mut vals: Vec<f32> = kept.iter().map(|c| c.1).collect();
        // The k-th largest value (total order; NaN last).
        let kth = {
            let (_, v, _) = vals.select_nth_unstable_by(p.top_k - 1, |a, b| b.total_cmp(a));
            *v
        };
        kept.retain(|c| c.1 >= kth);
    }
    if p.top_p < 1.0 {
        kept.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
        let m = kept.iter().fold(f32::NEG_INFINITY, |a, c| a.max(c.1));
        // ORDER: the softmax denominator and the cumulative sum run in the ascending order.
        let e: Vec<f32> = kept.iter().map(|c| (c.1 - m).exp()).collect();
        let mut z = 0f32;
        for x in &e {
            z += x;
        }
        let mut cum = 0f32;
        let mut cut = 0;
        for (i, x) in e.iter().enumerate() {
            cum += x / z;
            if cum <= 1.0 - p.top_p && i + 1 < e.len() {
                cut = i + 1;
            } else {
                break;
            }
        }
        kept.drain(..cut);
        kept.sort_by_key(|c| c.0);
    }
    kept
}

/// The next token. `u` is one uniform draw in [0, 1) (the caller's seeded stream). Greedy when the
/// temperature is 0. The draw inverts the cumulative distribution over the kept ids in id order.
pub fn sample(logits: &[f32], p: &SamplingParams, u: f32) -> Result<u32> {
    p.check()?;
    if logits.is_empty() {
        bail!("sampling: no logits");
    }
    if p.temperature == 0.0 {
        return Ok(argmax(logits) as u32);
    }
    let kept = candidates(logits, p);
    let m = kept.iter().fold(f32::NEG_INFINITY, |a, c| a.max(c.1));
    let e: Vec<f32> = kept.iter().map(|c| (c.1 - m).exp()).collect();
    let mut z = 0f32;
    for x in &e {
        z += x;
    }
    let target = u.clamp(0.0, 1.0) * z;
    let mut cum = 0f32;
    for (c, x) in kept.iter().zip(&e) {
        cum += x;
        if cum > target {
            return Ok(c.0);
        }
    }
    Ok(kept.last().map(|c| c.0).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_k_is_a_value_threshold_that_keeps_ties() {
        let logits = [1.0, 3.0, 2.0, 3.0, 2.0, 0.5];
        let p = SamplingParams { temperature: 1.0, top_k: 2, top_p: 1.0 };
        let ids: Vec<u32> = candidates(&logits, &p).iter().map(|c| c.0).collect();
        assert_eq!(ids, [1, 3]);
        let p = SamplingParams { temperature: 1.0, top_k: 3, top_p: 1.0 };
        let ids: Vec<u32> = candidates(&logits, &p).iter().map(|c| c.0).collect();
        assert_eq!(ids, [1, 2, 3, 4], "k = 3 keeps both ids tied at the third value");
    }

    #[test]
    fn top_p_removes_an_ascending_prefix_and_the_highest_tied_id_survives() {
        // Four equal scores: each 0.25. top_p 0.3 removes the prefix with cumulative <= 0.7: ids 0, 1.
        let logits = [2.0, 2.0, 2.0, 2.0];
        let p = SamplingParams { temperature: 1.0, top_k: 0, top_p: 0.3 };
        let ids: Vec<u32> = candidates(&logits, &p).iter().map(|c| c.0).collect();
        assert_eq!(ids, [2, 3]);
        let p = SamplingParams { temperature: 1.0, top_k: 0, top_p: 0.01 };
        let ids: Vec<u32> = candidates(&logits, &p).iter().map(|c| c.0).collect();
        assert_eq!(ids, [3], "the last, highest tied id always survives");
    }

    #[test]
    fn the_draw_is_deterministic_and_follows_the_distribution() {
        let logits = [0.0, (3f32).ln(), f32::NEG_INFINITY];
        let p = SamplingParams { temperature: 1.0, top_k: 0, top_p: 1.0 };
        // probabilities 0.25, 0.75, 0: u < 0.25 -> id 0, else id 1; never id 2.
        assert_eq!(sample(&logits, &p, 0.2).unwrap(), 0);
        assert_eq!(sample(&logits, &p, 0.3).unwrap(), 1);
        assert_eq!(sample(&logits, &p, 0.999).unwrap(), 1);
        let mut n1 = 0;
        let mut rng = crate::model::synth::Rng::new(5);
        for _ in 0..10_000 {
            n1 += (sample(&logits, &p, rng.uniform()).unwrap() == 1) as u32;
        }
        assert!((7300..7700).contains(&n1), "{n1}");
        assert_eq!(sample(&[1.0, 5.0, 5.0], &SamplingParams::greedy(), 0.5).unwrap(), 1);
        assert!(sample(&logits, &SamplingParams { temperature: -1.0, top_k: 0, top_p: 1.0 }, 0.5).is_err());
        assert!(sample(&logits, &SamplingParams { temperature: 1.0, top_k: 0, top_p: 0.0 }, 0.5).is_err());
    }
}
