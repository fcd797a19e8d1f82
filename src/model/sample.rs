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

/// e^x in f32 from IEEE +, -, * and exact conversions only, each rounded once in a fixed order (no
/// fused multiply-add): the GPU's sampler (`megakernel/sample.cu`, compiled with --fmad=false) runs
/// the same operations, so both paths sample from the same bits. Cody-Waite reduction by ln 2 (the
/// high part has 16 significant bits: n * LN2_HI is exact), a degree-7 Taylor polynomial on
/// |r| <= ln(2)/2 by Horner, then 2^n in two exact power-of-two factors (subnormal results too).
/// Within 2 ulp of e^x (tested against f64).
pub fn exp_mk(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = f32::from_bits(0x3f31_7200); // 0.693145751953125
    const LN2_LO: f32 = f32::from_bits(0x35bf_be8e); // 1.42860677e-6
    if x.is_nan() {
        return x;
    }
    if x > 88.72284 {
        return f32::INFINITY;
    }
    if x < -103.97208 {
        return 0.0;
    }
    let n = (x * LOG2E + 0.5).floor();
    let r = (x - n * LN2_HI) - n * LN2_LO;
    let p = 1.0
        + r * (1.0
            + r * (0.5
                + r * (1.0 / 6.0 + r * (1.0 / 24.0 + r * (1.0 / 120.0 + r * (1.0 / 720.0 + r * (1.0 / 5040.0)))))));
    let n = n as i32;
    let (n1, n2) = (n / 2, n - n / 2);
    p * f32::from_bits(((n1 + 127) as u32) << 23) * f32::from_bits(((n2 + 127) as u32) << 23)
}

/// The uniform draw of the step at position `pos` for a sequence seeded with `seed`: SplitMix64's
/// (pos + 1)-th output from `seed` (`synth::Rng`), its top 24 bits in [0, 1). A pure function of
/// (seed, pos), so a GPU step computes the same draw without a host round trip.
pub fn uniform_at(seed: u64, pos: u64) -> f32 {
    let mut z = seed.wrapping_add(pos.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> 40) as f32 / (1u64 << 24) as f32
}

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
        // Above 1e4 a division by the temperature could merge distinct bf16 logits (the GPU's top-k
        // threshold is taken on the logits' bits); no sampler needs it.
        // Below 1e-3, x / T could overflow to infinity for large logits and merge them (the GPU's
        // threshold is on the logits' bits): exact for |logit| < 3.4e35 in this range.
        if !(self.temperature == 0.0 || (self.temperature >= 1e-3 && self.temperature <= 1e4)) {
            bail!("sampling: temperature {} must be 0 (greedy) or in [0.001, 10000]", self.temperature);
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
        // NaN ranks below every number (as argmax; the GPU's keys do the same) and is never kept.
        let mut vals: Vec<f32> = kept.iter().map(|c| if c.1.is_nan() { f32::NEG_INFINITY } else { c.1 }).collect();
        // The k-th largest value (total order).
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
        let e: Vec<f32> = kept.iter().map(|c| exp_mk(c.1 - m)).collect();
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

/// The distribution `sample` draws from, over the whole vocabulary: the kept ids' exponentials over
/// their sum (the same operations in the same order as `sample`), zero elsewhere; greedy: all on the
/// argmax. (Sampled speculation's p and q: `speculate::accept_sampled`.)
pub fn distribution(logits: &[f32], p: &SamplingParams) -> Result<Vec<f32>> {
    p.check()?;
    if logits.is_empty() {
        bail!("sampling: no logits");
    }
    let mut d = vec![0f32; logits.len()];
    if p.temperature == 0.0 {
        d[argmax(logits)] = 1.0;
        return Ok(d);
    }
    let kept = candidates(logits, p);
    let m = kept.iter().fold(f32::NEG_INFINITY, |a, c| a.max(c.1));
    let e: Vec<f32> = kept.iter().map(|c| exp_mk(c.1 - m)).collect();
    let mut z = 0f32;
    for x in &e {
        z += x; // ORDER: id order, as `sample`
    }
    for (c, x) in kept.iter().zip(&e) {
        d[c.0 as usize] = x / z;
    }
    Ok(d)
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
    // ORDER: exponentials and their sum in id order (the GPU's single thread walks the same order).
    let e: Vec<f32> = kept.iter().map(|c| exp_mk(c.1 - m)).collect();
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

    /// `distribution` is what `sample` draws from: it sums to 1, greedy is all on the argmax, every
    /// drawn id has a positive probability and an id outside top-k none.
    #[test]
    fn the_distribution_is_what_sample_draws_from() {
        let logits = [0.5f32, 2.0, 1.0, 2.0, -1.0];
        let g = distribution(&logits, &SamplingParams::greedy()).unwrap();
        assert_eq!(g, [0.0, 1.0, 0.0, 0.0, 0.0]);
        let p = SamplingParams { temperature: 0.7, top_k: 3, top_p: 1.0 };
        let d = distribution(&logits, &p).unwrap();
        assert!((d.iter().sum::<f32>() - 1.0).abs() < 1e-6 && d[4] == 0.0 && d[0] == 0.0, "{d:?}");
        for i in 0..100 {
            let t = sample(&logits, &p, i as f32 / 100.0).unwrap();
            assert!(d[t as usize] > 0.0, "{t}");
        }
    }

    #[test]
    fn exp_mk_is_within_two_ulp_of_e_to_the_x() {
        let mut worst = 0f64;
        let mut x = -103.0f32;
        while x < 88.7 {
            let want = (x as f64).exp();
            let got = exp_mk(x) as f64;
            if want > f32::MIN_POSITIVE as f64 {
                let ulp = 2f64.powi((want.log2().floor() as i32) - 23);
                worst = worst.max((got - want).abs() / ulp);
            }
            x += 0.000_731;
        }
        assert!(worst <= 2.0, "{worst} ulp");
        assert_eq!(exp_mk(0.0), 1.0);
        assert_eq!(exp_mk(-200.0), 0.0);
        assert_eq!(exp_mk(100.0), f32::INFINITY);
        assert!(exp_mk(f32::NAN).is_nan());
        assert!(exp_mk(-90.0) > 0.0 && exp_mk(-90.0) < f32::MIN_POSITIVE, "subnormal results");
    }

    #[test]
    fn uniform_at_is_the_seeded_streams_draw() {
        let mut rng = crate::model::synth::Rng::new(42);
        for pos in 0..5 {
            assert_eq!(uniform_at(42, pos), rng.uniform());
        }
    }

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
    fn nan_ranks_lowest_and_is_never_kept() {
        let logits = [f32::NAN, 1.0, 2.0, f32::NAN];
        for k in [2, 3] {
            let p = SamplingParams { temperature: 1.0, top_k: k, top_p: 1.0 };
            let ids: Vec<u32> = candidates(&logits, &p).iter().map(|c| c.0).collect();
            assert_eq!(ids, [1, 2], "k = {k}");
        }
        let p = SamplingParams { temperature: 1.0, top_k: 1, top_p: 1.0 };
        assert_eq!(candidates(&logits, &p).iter().map(|c| c.0).collect::<Vec<_>>(), [2]);
        assert!(SamplingParams { temperature: 1e-4, top_k: 1, top_p: 1.0 }.check().is_err());
        assert!(SamplingParams { temperature: 0.0, top_k: 0, top_p: 1.0 }.check().is_ok());
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
