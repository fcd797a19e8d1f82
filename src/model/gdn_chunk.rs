//! The gated delta rule over T tokens at once, by chunks (issue 28, item 2: prefill's GDN): the oracle's
//! `torch_chunk_gated_delta_rule` (transformers 5.17, the WY / UT-transform form, chunk 64) for one value
//! head in fp32, and the token-by-token recurrence it must agree with (`torch_recurrent_gated_delta_rule`,
//! the decode step's arithmetic before its bf16 output). Inputs as the oracle's kernels take them: q and
//! k already l2-normalised, q already scaled by 1/sqrt(d), g = log decay (<= 0), beta = the write rate.
//!
//! The two forms round differently (the chunked one sums over the chunk's pairs in matrix products), so
//! they agree within an envelope, not in bits (`cargo test`'s check states it). ORDER (fixed, every sum
//! over its index ascending): the chunk's cumulative decay; the triangular solve by forward substitution
//! (row i from rows 0..i); every matrix product's inner sum.
//!
//! Owns: `chunked`, `recurrent`. Refuses: mismatched lengths (an error naming them).

use crate::bail;
use crate::error::Result;

/// One value head's inputs over T tokens: q, k `[T][dk]`, v `[T][dv]`, g and beta `[T]`.
pub struct HeadSeq<'a> {
    pub q: &'a [f32],
    pub k: &'a [f32],
    pub v: &'a [f32],
    pub g: &'a [f32],
    pub beta: &'a [f32],
    pub dk: usize,
    pub dv: usize,
}

impl HeadSeq<'_> {
    fn tokens(&self) -> Result<usize> {
        let t = self.g.len();
        if self.beta.len() != t
            || self.q.len() != t * self.dk
            || self.k.len() != t * self.dk
            || self.v.len() != t * self.dv
        {
            bail!(
                "gdn chunk: q {}, k {}, v {}, g {}, beta {} values do not describe {t} tokens of dk {} / dv {}",
                self.q.len(),
                self.k.len(),
                self.v.len(),
                t,
                self.beta.len(),
                self.dk,
                self.dv
            );
        }
        Ok(t)
    }
}

/// The recurrence, token by token, from `state` (`[dk][dv]`, updated in place); returns the outputs
/// `[T][dv]` (fp32). ORDER: per token, the state decayed, kv = sum_k S[k][.] k[k] (k ascending), delta =
/// (v - kv) beta, S += k delta, o = sum_k S[k][.] q[k] (the CPU decode step's, `forward::gdn_head`).
pub fn recurrent(x: &HeadSeq, state: &mut [f32]) -> Result<Vec<f32>> {
    let (t, dk, dv) = (x.tokens()?, x.dk, x.dv);
    if state.len() != dk * dv {
        bail!("gdn chunk: a state of {} values for dk {dk} x dv {dv}", state.len());
    }
    let mut out = vec![0f32; t * dv];
    for i in 0..t {
        let (q, k, v) = (&x.q[i * dk..(i + 1) * dk], &x.k[i * dk..(i + 1) * dk], &x.v[i * dv..(i + 1) * dv]);
        let decay = x.g[i].exp();
        state.iter_mut().for_each(|s| *s *= decay);
        let mut kv = vec![0f32; dv];
        for (kk, &kval) in k.iter().enumerate() {
            for (m, s) in kv.iter_mut().zip(&state[kk * dv..(kk + 1) * dv]) {
                *m += s * kval;
            }
        }
        let delta: Vec<f32> = v.iter().zip(&kv).map(|(vv, m)| (vv - m) * x.beta[i]).collect();
        let o = &mut out[i * dv..(i + 1) * dv];
        for (kk, &kval) in k.iter().enumerate() {
            let row = &mut state[kk * dv..(kk + 1) * dv];
            for (s, d) in row.iter_mut().zip(&delta) {
                *s += kval * d;
            }
            for (ov, s) in o.iter_mut().zip(row.iter()) {
                *ov += s * q[kk];
            }
        }
    }
    Ok(out)
}

/// The chunked form (the oracle's `torch_chunk_gated_delta_rule` for one head, `chunk` tokens a chunk,
/// the last one padded with zeros as the oracle pads), from `state` (updated in place: the final state);
/// returns the outputs `[T][dv]`.
pub fn chunked(x: &HeadSeq, chunk: usize, state: &mut [f32]) -> Result<Vec<f32>> {
    let (t, dk, dv) = (x.tokens()?, x.dk, x.dv);
    if state.len() != dk * dv || chunk == 0 {
        bail!("gdn chunk: a state of {} values for dk {dk} x dv {dv}, chunk {chunk}", state.len());
    }
    let c = chunk;
    let mut out = vec![0f32; t * dv];
    let dot = |a: &[f32], b: &[f32]| a.iter().zip(b).fold(0f32, |s, (x, y)| s + x * y);
    for c0 in (0..t).step_by(c) {
        let n = c.min(t - c0); // tokens of this chunk (the padding's rows are zero and change nothing)
        let row = |m: &[f32], w: usize, i: usize| -> Vec<f32> { m[(c0 + i) * w..(c0 + i + 1) * w].to_vec() };
        let (q, k, v): (Vec<Vec<f32>>, Vec<Vec<f32>>, Vec<Vec<f32>>) = (
            (0..n).map(|i| row(x.q, dk, i)).collect(),
            (0..n).map(|i| row(x.k, dk, i)).collect(),
            (0..n).map(|i| row(x.v, dv, i)).collect(),
        );
        let beta = &x.beta[c0..c0 + n];
        // the cumulative decay within the chunk (log space), then exp where needed
        let mut cum = vec![0f32; n];
        let mut acc = 0f32;
        for i in 0..n {
            acc += x.g[c0 + i];
            cum[i] = acc;
        }
        let k_beta: Vec<Vec<f32>> = (0..n).map(|i| k[i].iter().map(|e| e * beta[i]).collect()).collect();
        let v_beta: Vec<Vec<f32>> = (0..n).map(|i| v[i].iter().map(|e| e * beta[i]).collect()).collect();
        let pair = |i: usize, j: usize| if j > i { 0.0 } else { (cum[i] - cum[j]).exp() };
        // the UT system A[i][j] = (k_beta_i . k_j) decay(i, j) for j < i (unit diagonal: the solve's)
        // and the intra-chunk attention (q_i . k_j) decay(i, j) for j <= i
        let a: Vec<Vec<f32>> = (0..n).map(|i| (0..i).map(|j| dot(&k_beta[i], &k[j]) * pair(i, j)).collect()).collect();
        let attn: Vec<Vec<f32>> = (0..n).map(|i| (0..=i).map(|j| dot(&q[i], &k[j]) * pair(i, j)).collect()).collect();
        let decayed_k_beta: Vec<Vec<f32>> =
            (0..n).map(|i| k_beta[i].iter().map(|e| e * cum[i].exp()).collect()).collect();
        // (I + A)^-1 applied to v_beta and decayed_k_beta by forward substitution (row i from rows < i)
        let solve = |b: &[Vec<f32>]| -> Vec<Vec<f32>> {
            let mut xs: Vec<Vec<f32>> = Vec::with_capacity(n);
            for i in 0..n {
                let mut r = b[i].clone();
                for j in 0..i {
                    let aij = a[i][j];
                    for (e, xj) in r.iter_mut().zip(&xs[j]) {
                        *e -= aij * xj;
                    }
                }
                xs.push(r);
            }
            xs
        };
        let (new_values, k_cumdecay) = (solve(&v_beta), solve(&decayed_k_beta));
        // v_new = new_values - k_cumdecay @ S; out = (q exp(cum)) @ S + attn @ v_new
        let mut v_new = vec![vec![0f32; dv]; n];
        for i in 0..n {
            let mut ks = vec![0f32; dv];
            for (kk, &e) in k_cumdecay[i].iter().enumerate() {
                for (m, s) in ks.iter_mut().zip(&state[kk * dv..(kk + 1) * dv]) {
                    *m += e * s;
                }
            }
            for ((d, nv), m) in v_new[i].iter_mut().zip(&new_values[i]).zip(&ks) {
                *d = nv - m;
            }
        }
        for i in 0..n {
            let qd: Vec<f32> = q[i].iter().map(|e| e * cum[i].exp()).collect();
            let mut inter = vec![0f32; dv];
            for (kk, &e) in qd.iter().enumerate() {
                for (m, s) in inter.iter_mut().zip(&state[kk * dv..(kk + 1) * dv]) {
                    *m += e * s;
                }
            }
            let mut intra = vec![0f32; dv];
            for (j, &w) in attn[i].iter().enumerate() {
                for (m, e) in intra.iter_mut().zip(&v_new[j]) {
                    *m += w * e;
                }
            }
            for (o, (a, b)) in out[(c0 + i) * dv..(c0 + i + 1) * dv].iter_mut().zip(inter.iter().zip(&intra)) {
                *o = a + b;
            }
        }
        // S = S exp(cum_last) + sum_i (k_i exp(cum_last - cum_i)) v_new_i^T (the oracle pads the chunk
        // with zero decay: its last cumulative value is this chunk's last token's)
        let last = cum[n - 1];
        let chunk_decay = last.exp();
        state.iter_mut().for_each(|s| *s *= chunk_decay);
        for i in 0..n {
            let w = (last - cum[i]).exp();
            for kk in 0..dk {
                let kv = k[i][kk] * w;
                for (s, e) in state[kk * dv..(kk + 1) * dv].iter_mut().zip(&v_new[i]) {
                    *s += kv * e;
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::synth::Rng;

    /// T tokens of one head with the 27B's head sizes: q, k unit vectors (q / sqrt(d)), v ~ U(-1, 1),
    /// decays g in [-1, 0), beta in (0, 1).
    fn inputs(t: usize, seed: u64) -> (Vec<f32>, Vec<f32>, Vec<f32>, Vec<f32>, Vec<f32>) {
        let (dk, dv) = (128, 128);
        let mut r = Rng::new(seed);
        let mut u = || (r.next_u64() >> 40) as f32 / (1u64 << 24) as f32;
        let mut unit = |n: usize, scale: f32| -> Vec<f32> {
            let mut all = Vec::new();
            for _ in 0..t {
                let mut x: Vec<f32> = (0..n).map(|_| u() * 2.0 - 1.0).collect();
                crate::model::ops::l2norm(&mut x);
                all.extend(x.iter().map(|e| e * scale));
            }
            all
        };
        let q = unit(dk, 1.0 / (dk as f32).sqrt());
        let k = unit(dk, 1.0);
        let mut r2 = Rng::new(seed ^ 0x5555);
        let mut u2 = || (r2.next_u64() >> 40) as f32 / (1u64 << 24) as f32;
        let v: Vec<f32> = (0..t * dv).map(|_| u2() * 2.0 - 1.0).collect();
        let g: Vec<f32> = (0..t).map(|_| -u2()).collect();
        let beta: Vec<f32> = (0..t).map(|_| 0.05 + 0.9 * u2()).collect();
        (q, k, v, g, beta)
    }

    /// The largest |a - b| relative to the largest |b|.
    fn rel(a: &[f32], b: &[f32]) -> f32 {
        let m = b.iter().fold(0f32, |m, x| m.max(x.abs())).max(f32::MIN_POSITIVE);
        a.iter().zip(b).fold(0f32, |d, (x, y)| d.max((x - y).abs())) / m
    }

    /// Measured 2026-12-03: at most 7.8e-7 (outputs) and 5.8e-7 (states) of the largest magnitude over these
    /// lengths; the bound is 5e-6.
    #[test]
    fn the_chunked_form_is_the_recurrence_within_fp32_rounding() {
        // lengths around the chunk: one token, a chunk less one, one, one more, two and a bit; from zero
        // and from a state left by earlier tokens
        for (t, seed) in [(1, 1), (63, 2), (64, 3), (65, 4), (130, 5)] {
            let (q, k, v, g, beta) = inputs(t, seed);
            let x = HeadSeq { q: &q, k: &k, v: &v, g: &g, beta: &beta, dk: 128, dv: 128 };
            let (mut init, _) = (vec![0f32; 128 * 128], ());
            let (pq, pk, pv, pg, pb) = inputs(40, seed + 100);
            let pre = HeadSeq { q: &pq, k: &pk, v: &pv, g: &pg, beta: &pb, dk: 128, dv: 128 };
            recurrent(&pre, &mut init).unwrap();
            for start in [vec![0f32; 128 * 128], init] {
                let (mut s1, mut s2) = (start.clone(), start);
                let want = recurrent(&x, &mut s1).unwrap();
                let got = chunked(&x, 64, &mut s2).unwrap();
                eprintln!("T = {t}: max rel difference outputs {:.2e}, state {:.2e}", rel(&got, &want), rel(&s2, &s1));
                assert!(rel(&got, &want) < 5e-6, "T = {t}: outputs {}", rel(&got, &want));
                assert!(rel(&s2, &s1) < 5e-6, "T = {t}: final state {}", rel(&s2, &s1));
            }
        }
    }

    #[test]
    fn negative_control_a_chunked_form_without_its_decay_is_caught() {
        // the same inputs with the decay dropped inside the chunks (g = 0) must leave the envelope
        let (q, k, v, g, beta) = inputs(100, 9);
        let x = HeadSeq { q: &q, k: &k, v: &v, g: &g, beta: &beta, dk: 128, dv: 128 };
        let zero = vec![0f32; 100];
        let broken = HeadSeq { g: &zero, ..HeadSeq { q: &q, k: &k, v: &v, g: &g, beta: &beta, dk: 128, dv: 128 } };
        let (mut s1, mut s2) = (vec![0f32; 128 * 128], vec![0f32; 128 * 128]);
        let want = recurrent(&x, &mut s1).unwrap();
        let got = chunked(&broken, 64, &mut s2).unwrap();
        assert!(rel(&got, &want) > 1e-2, "{}", rel(&got, &want));
    }

    #[test]
    fn mismatched_inputs_are_refused() {
        let (q, k, v, g, beta) = inputs(3, 1);
        let x = HeadSeq { q: &q, k: &k[..128], v: &v, g: &g, beta: &beta, dk: 128, dv: 128 };
        let e = chunked(&x, 64, &mut vec![0f32; 128 * 128]).unwrap_err().to_string();
        assert!(e.contains("do not describe 3 tokens"), "{e}");
        let x = HeadSeq { q: &q, k: &k, v: &v, g: &g, beta: &beta, dk: 128, dv: 128 };
        assert!(recurrent(&x, &mut vec![0f32; 5]).unwrap_err().to_string().contains("a state of 5"));
    }
}
