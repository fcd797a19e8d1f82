//! Speculative decoding's acceptance rules (issue 27, item 4): which of k drafted tokens a verification
//! step of k + 1 rows keeps, and the token it adds.
//!
//! Greedy: the draft's longest prefix that equals the target's own greedy choices, then the target's
//! choice at the first mismatch (the correction) or after the last draft token (the bonus). Sampling:
//! the rule of Leviathan, Kalman and Matias (2023, "Fast Inference from Transformers via Speculative
//! Decoding") and Chen et al. (2023): a token x the drafter drew from q is kept with probability
//! min(1, p(x) / q(x)); at the first rejection the step's token is drawn from the normalised positive
//! part of p - q and the round ends; if all k are kept, one more token is drawn from the target's
//! distribution after them. The emitted tokens are then distributed exactly as the target's own
//! sampling would give them (tested below with a chi-square test and two negative controls).
//!
//! Owns: the rules. Refuses: mismatched lengths (k draft tokens need k + 1 target rows).

use crate::bail;
use crate::error::Result;

/// Greedy verification: `draft` (k tokens) against `target` (k + 1 tokens: row i is the target's greedy
/// token after the context and draft[..i]). Returns the emitted tokens: the accepted prefix draft[..j]
/// and target[j] (1 ..= k + 1 tokens).
pub fn accept_greedy(draft: &[u32], target: &[u32]) -> Result<Vec<u32>> {
    if target.len() != draft.len() + 1 {
        bail!("speculation: {} draft tokens need {} target rows, got {}", draft.len(), draft.len() + 1, target.len());
    }
    let j = draft.iter().zip(target).take_while(|(d, t)| d == t).count();
    let mut out = draft[..j].to_vec();
    out.push(target[j]);
    Ok(out)
}

/// The index u in [0, 1) selects from the distribution w (non-negative weights, not necessarily
/// normalised): the first id whose running sum (ids in order, f64) exceeds u times the total; the last
/// id with positive weight when rounding leaves u past every sum. None when every weight is 0.
fn pick(w: impl Iterator<Item = f64> + Clone, u: f32) -> Option<u32> {
    let total: f64 = w.clone().sum();
    if total <= 0.0 {
        return None;
    }
    let target = u as f64 * total;
    let mut acc = 0.0;
    let mut last = None;
    for (i, x) in w.enumerate() {
        if x > 0.0 {
            last = Some(i as u32);
        }
        acc += x;
        if acc > target && x > 0.0 {
            return Some(i as u32);
        }
    }
    last
}

/// Speculative sampling over one round: `p` the target's k + 1 distributions (row i: after the context
/// and draft[..i]), `q` the drafter's k distributions (draft[i] was drawn from q[i]), `uniform` a source
/// of draws in [0, 1) (two at most per row, in order: the acceptance test, then the token at a
/// rejection or the bonus). Returns the emitted tokens (1 ..= k + 1).
pub fn accept_sampled(
    p: &[Vec<f32>],
    q: &[Vec<f32>],
    draft: &[u32],
    mut uniform: impl FnMut() -> f32,
) -> Result<Vec<u32>> {
    let k = draft.len();
    if q.len() != k || p.len() != k + 1 {
        bail!(
            "speculation: {k} draft tokens need {k} draft and {} target distributions, got {} and {}",
            k + 1,
            q.len(),
            p.len()
        );
    }
    let vocab = p[0].len();
    if p.iter().chain(q).any(|d| d.len() != vocab) || draft.iter().any(|&x| x as usize >= vocab) {
        bail!("speculation: distributions or draft tokens off the vocabulary of {vocab}");
    }
    let mut out = Vec::with_capacity(k + 1);
    for i in 0..k {
        let x = draft[i] as usize;
        let (px, qx) = (p[i][x] as f64, q[i][x] as f64);
        // keep with probability min(1, p / q) (q(x) > 0: the drafter drew x)
        if qx > 0.0 && (uniform() as f64) * qx < px {
            out.push(draft[i]);
            continue;
        }
        // rejected: the normalised positive part of p - q (p itself if rounding left nothing)
        let u = uniform();
        let resid = p[i].iter().zip(&q[i]).map(|(&a, &b)| (a as f64 - b as f64).max(0.0));
        let t = pick(resid, u).or_else(|| pick(p[i].iter().map(|&a| a as f64), u));
        let Some(t) = t else { bail!("speculation: target distribution {i} is all zero") };
        out.push(t);
        return Ok(out);
    }
    let Some(t) = pick(p[k].iter().map(|&a| a as f64), uniform()) else {
        bail!("speculation: target distribution {k} is all zero")
    };
    out.push(t);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::synth::Rng;

    #[test]
    fn greedy_keeps_the_agreeing_prefix_and_adds_the_targets_token() {
        assert_eq!(accept_greedy(&[5, 6, 7], &[5, 6, 7, 8]).unwrap(), [5, 6, 7, 8]); // all kept + bonus
        assert_eq!(accept_greedy(&[5, 6, 7], &[5, 9, 7, 8]).unwrap(), [5, 9]); // correction at 1
        assert_eq!(accept_greedy(&[5, 6, 7], &[4, 6, 7, 8]).unwrap(), [4]); // none kept
        assert_eq!(accept_greedy(&[], &[3]).unwrap(), [3]); // k = 0: a plain step
        assert!(accept_greedy(&[1, 2], &[1, 2]).unwrap_err().to_string().contains("need 3 target rows"));
    }

    /// A random distribution over `v` ids (some exactly zero).
    fn dist(rng: &mut Rng, v: usize) -> Vec<f32> {
        let w: Vec<f32> = (0..v).map(|i| if i % 5 == 4 { 0.0 } else { rng.uniform() + 0.05 }).collect();
        let s: f32 = w.iter().sum();
        w.iter().map(|x| x / s).collect()
    }

    /// Chi-square statistic of `counts` against the distribution `p` (ids with p = 0 must have no
    /// count: returned as infinity otherwise).
    fn chi2(counts: &[u64], p: &[f32]) -> f64 {
        let n: u64 = counts.iter().sum();
        let mut s = 0.0;
        for (&c, &pi) in counts.iter().zip(p) {
            let e = n as f64 * pi as f64;
            if e == 0.0 {
                if c > 0 {
                    return f64::INFINITY;
                }
                continue;
            }
            s += (c as f64 - e).powi(2) / e;
        }
        s
    }

    /// Rounds of k = 2 with fixed p (3 rows) and q (2 rows), the draft drawn from q: the histograms of
    /// the first emitted token and of the second (in rounds that emit one) under `rule`.
    fn rounds(rule: impl Fn(&[Vec<f32>], &[Vec<f32>], &[u32], &mut Rng) -> Vec<u32>) -> (Vec<Vec<f32>>, [Vec<u64>; 2]) {
        const V: usize = 10;
        let mut rng = Rng::new(7);
        let p: Vec<Vec<f32>> = (0..3).map(|_| dist(&mut rng, V)).collect();
        let q: Vec<Vec<f32>> = (0..2).map(|_| dist(&mut rng, V)).collect();
        let mut h = [vec![0u64; V], vec![0u64; V]];
        for _ in 0..200_000 {
            let draft: Vec<u32> = q.iter().map(|d| pick(d.iter().map(|&x| x as f64), rng.uniform()).unwrap()).collect();
            let out = rule(&p, &q, &draft, &mut rng);
            for (i, &t) in out.iter().take(2).enumerate() {
                h[i][t as usize] += 1;
            }
        }
        (p, h)
    }

    // The chi-square critical value for 9 degrees of freedom at p = 0.001 (ids with p = 0 are checked
    // exactly; they only lower the degrees of freedom, which makes this bound looser, not tighter).
    const CHI2_9_999: f64 = 27.88;

    #[test]
    fn speculative_sampling_reproduces_the_target_distribution() {
        let (p, h) = rounds(|p, q, d, rng| accept_sampled(p, q, d, || rng.uniform()).unwrap());
        // the first token follows p[0]; the second (after a kept first) follows p[1] (p does not
        // depend on the first token here)
        let (c0, c1) = (chi2(&h[0], &p[0]), chi2(&h[1], &p[1]));
        assert!(c0 < CHI2_9_999 && c1 < CHI2_9_999, "chi-square {c0:.1}, {c1:.1}");
    }

    #[test]
    fn the_chi_square_test_rejects_wrong_rules() {
        // negative control 1: every draft token kept (the emitted tokens follow q)
        let (p, h) = rounds(|p, _q, d, rng| {
            let mut v = d.to_vec();
            v.push(pick(p[2].iter().map(|&x| x as f64), rng.uniform()).unwrap());
            v
        });
        assert!(chi2(&h[0], &p[0]) > CHI2_9_999);
        // negative control 2: at a rejection, draw from p instead of the positive part of p - q
        let (p, h) = rounds(|p, q, d, rng| {
            let mut out = Vec::new();
            for i in 0..d.len() {
                let x = d[i] as usize;
                if rng.uniform() * q[i][x] < p[i][x] {
                    out.push(d[i]);
                    continue;
                }
                out.push(pick(p[i].iter().map(|&x| x as f64), rng.uniform()).unwrap());
                return out;
            }
            out.push(pick(p[2].iter().map(|&x| x as f64), rng.uniform()).unwrap());
            out
        });
        assert!(chi2(&h[0], &p[0]) > CHI2_9_999);
    }

    #[test]
    fn bad_shapes_are_refused() {
        let p = vec![vec![0.5f32, 0.5]; 2];
        let q = vec![vec![0.5f32, 0.5]; 1];
        assert!(accept_sampled(&p, &q, &[1, 0], || 0.5).is_err());
        assert!(accept_sampled(&p, &q, &[2], || 0.5).unwrap_err().to_string().contains("off the vocabulary"));
        assert!(accept_sampled(&p, &q, &[1], || 0.5).is_ok());
    }
}
