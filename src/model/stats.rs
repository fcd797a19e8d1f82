//! `mk stats`: what a checkpoint's activations and logits look like under the CPU reference, to check
//! that synthetic magnitudes are realistic (finite through every layer, logits with real margins).
//!
//! Owns: the summary statistics and their printing. Refuses: nothing; it only measures.

use super::forward::{step, State, Trace, Weights};
use super::numerics::bf;
use super::synth::Rng;
use crate::error::Result;

#[derive(Debug, Clone, serde::Serialize)]
pub struct LogitStats {
    /// Over all positions: the mean of the per-position logit standard deviation.
    pub std_mean: f32,
    /// Top-1 logit minus the mean, in per-position standard deviations (median over positions).
    pub top1_z_median: f32,
    /// Top-1 minus top-2 logit (quantiles over positions: 10 %, 50 %, 90 %).
    pub margin_p10: f32,
    pub margin_p50: f32,
    pub margin_p90: f32,
    /// Fraction of positions whose top-2 margin is within one bf16 ulp of the top-1 logit.
    pub tie_fraction: f32,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct Stats {
    pub positions: usize,
    /// RMS of the residual stream after each layer, averaged over positions.
    pub hidden_rms: Vec<f32>,
    pub all_finite: bool,
    pub logits: LogitStats,
}

fn quantile(v: &mut [f32], q: f32) -> f32 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[((v.len() - 1) as f32 * q).round() as usize]
}

/// Runs `n_tokens` random token ids (ids below 248,044: real text tokens) through the reference.
pub fn measure(w: &Weights, n_tokens: usize, seed: u64) -> Result<Stats> {
    if n_tokens == 0 || n_tokens > super::config::MAX_POSITIONS {
        crate::bail!("stats: --tokens {n_tokens} (1 to the model's {} positions)", super::config::MAX_POSITIONS);
    }
    let mut rng = Rng::new(seed);
    let mut state = State::new(&w.cfg, n_tokens.max(1));
    let mut hidden_rms = vec![0f32; w.cfg.n_layers];
    let mut all_finite = true;
    let (mut stds, mut zs, mut margins, mut ties) = (Vec::new(), Vec::new(), Vec::new(), 0usize);
    for _ in 0..n_tokens {
        let tok = (rng.next_u64() % 248_044) as u32;
        let mut trace = Trace::default();
        let logits = step(w, &mut state, tok, Some(&mut trace))?;
        for (acc, h) in hidden_rms.iter_mut().zip(&trace.hidden) {
            all_finite &= h.iter().all(|x| x.is_finite());
            *acc +=
                (h.iter().map(|x| (*x as f64).powi(2)).sum::<f64>() / h.len() as f64).sqrt() as f32 / n_tokens as f32;
        }
        all_finite &= logits.iter().all(|x| x.is_finite());
        let n = logits.len() as f64;
        let mean = logits.iter().map(|x| *x as f64).sum::<f64>() / n;
        let std = (logits.iter().map(|x| (*x as f64 - mean).powi(2)).sum::<f64>() / n).sqrt();
        let (mut t1, mut t2) = (f32::NEG_INFINITY, f32::NEG_INFINITY);
        for &x in &logits {
            if x > t1 {
                t2 = t1;
                t1 = x;
            } else if x > t2 {
                t2 = x;
            }
        }
        stds.push(std as f32);
        zs.push(((t1 as f64 - mean) / std) as f32);
        margins.push(t1 - t2);
        // One bf16 ulp at the top-1 logit's magnitude.
        let ulp = bf(t1.abs() * (1.0 + 1.0 / 128.0)) - t1.abs();
        if t1 - t2 <= ulp {
            ties += 1;
        }
    }
    let n = n_tokens as f32;
    let logits = LogitStats {
        std_mean: stds.iter().sum::<f32>() / n,
        top1_z_median: quantile(&mut zs, 0.5),
        margin_p10: quantile(&mut margins, 0.1),
        margin_p50: quantile(&mut margins, 0.5),
        margin_p90: quantile(&mut margins, 0.9),
        tie_fraction: ties as f32 / n,
    };
    Ok(Stats { positions: n_tokens, hidden_rms, all_finite, logits })
}

pub fn print(s: &Stats) {
    println!("positions: {}", s.positions);
    let rms: Vec<String> = s.hidden_rms.iter().map(|x| format!("{x:.2}")).collect();
    println!("residual rms after each layer: {}", rms.join(" "));
    println!("all finite: {}", s.all_finite);
    let l = &s.logits;
    println!("logit std (mean over positions): {:.3}", l.std_mean);
    println!("top-1 logit, in std above the mean (median): {:.2}", l.top1_z_median);
    println!("top-1 - top-2 margin: p10 {:.3}  p50 {:.3}  p90 {:.3}", l.margin_p10, l.margin_p50, l.margin_p90);
    println!("positions with a top-2 within one bf16 ulp: {:.1} %", 100.0 * l.tie_fraction);
}
