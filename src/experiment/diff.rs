//! Bit-for-bit diffs between two paths: per buffer, identical or not, the first differing instruction,
//! buffer and element with its [layer, row, col], the count of differing elements and the largest
//! difference in ulps. Tolerance comparisons (approx) only where two paths are not meant to be identical.
//!
//! Owns: captured tensors, `DiffResult`, ulp distances. Refuses: rounding before comparing (a bit
//! comparison compares bits).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::spec::Tolerance;

/// A named tensor a path exposes: a buffer after an instruction, the hidden state after a layer,
/// logits, a state.
#[derive(Debug, Clone, PartialEq)]
pub struct Tensor {
    pub name: String,
    pub layer: u32,
    /// Row length (for [layer, row, col] indices).
    pub cols: usize,
    /// The values are bf16 (ulps counted on the bf16 grid), else fp32.
    pub bf16: bool,
    pub data: Vec<f32>,
}

/// What a path exposes after one step.
#[derive(Debug, Clone, Default)]
pub struct StepCapture {
    /// Debug mode, program paths: (word index, opcode, output) in program order.
    pub instructions: Vec<(usize, String, Tensor)>,
    /// The residual stream after each layer.
    pub hidden: Vec<Tensor>,
    pub logits: Option<Tensor>,
    pub token: u32,
}

/// Where two paths first differ.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Mismatch {
    /// The length of the compared sequence (the diff pass runs one sequence up to the longest context
    /// plus the decode steps); `step` is the position in it (None: the final state).
    pub context: u32,
    pub step: Option<usize>,
    pub instruction: Option<usize>,
    pub opcode: Option<String>,
    pub buffer: String,
    pub element: usize,
    /// [layer, row, col]
    pub index: [usize; 3],
    pub a: f32,
    pub b: f32,
    pub ulps: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DiffResult {
    pub a: String,
    pub b: String,
    /// "bits", or the tolerance.
    pub mode: String,
    /// Every compared element has the same bits.
    pub identical: bool,
    /// Tolerance mode: every element within it.
    pub within_tolerance: Option<bool>,
    pub compared: u64,
    /// Elements that differ (bits mode) or fall outside the tolerance.
    pub differing: u64,
    pub max_ulps: u64,
    pub max_abs: f32,
    pub first: Option<Mismatch>,
    /// Chosen tokens that differ (counted apart: a token id difference is no numeric difference).
    #[serde(default)]
    pub token_mismatches: u64,
    /// Per buffer: elements compared and differing (bits mode: any bit; tolerance mode: outside it),
    /// the largest difference in ulps and in value.
    #[serde(default)]
    pub per_buffer: BTreeMap<String, BufferStats>,
    /// Set when one of the two paths dropped out part way: what was compared, and why no more.
    /// The verdict then covers only the steps before it and is no claim about the whole sequence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub incomplete: Option<String>,
    /// Envelope mode: the verdict against the calibration diff.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub envelope: Option<EnvelopeVerdict>,
    #[serde(skip)]
    tolerance: Option<Tolerance>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EnvelopeVerdict {
    /// The calibration diff ("reference vs reference-reordered") and the factor.
    pub against: String,
    pub factor: f32,
    pub within: bool,
    /// Each check that failed, with its numbers (empty when within).
    pub why: Vec<String>,
    /// The logits' figures beside the calibration's: max |a - b|, mean |a - b|, token mismatches.
    pub logits_max_abs: [f32; 2],
    pub logits_mean_abs: [f64; 2],
    pub tokens: [u64; 2],
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BufferStats {
    pub compared: u64,
    pub bit_differences: u64,
    pub differing: u64,
    pub max_ulps: u64,
    pub max_abs: f32,
    /// The largest |value| among the elements that differ in bits (0 when none do): sets max_abs
    /// against the buffer's scale (a logit of 30 differs by 0.25 at one bf16 ulp).
    #[serde(default)]
    pub max_magnitude: f32,
    /// The sum of |a - b| over the compared elements (the mean is sum_abs / compared).
    #[serde(default)]
    pub sum_abs: f64,
}

impl BufferStats {
    pub fn mean_abs(&self) -> f64 {
        if self.compared == 0 {
            0.0
        } else {
            self.sum_abs / self.compared as f64
        }
    }
}

/// |a - b| in units in the last place of max(|a|, |b|), on the bf16 or fp32 grid (0 for equal bits,
/// u64::MAX when one is NaN). Measured on the larger magnitude, so values either side of zero do not
/// count the whole grid between them.
pub fn ulps(a: f32, b: f32, bf16: bool) -> u64 {
    if a.to_bits() == b.to_bits() {
        return 0;
    }
    if a.is_nan() || b.is_nan() {
        return u64::MAX;
    }
    let m = a.abs().max(b.abs()).max(f32::MIN_POSITIVE);
    let ulp = 2f64.powi(m.log2().floor() as i32 - if bf16 { 7 } else { 23 });
    ((a as f64 - b as f64).abs() / ulp).round() as u64
}

impl DiffResult {
    pub fn new(a: &str, b: &str, tolerance: Option<Tolerance>) -> DiffResult {
        DiffResult {
            a: a.into(),
            b: b.into(),
            mode: match tolerance {
                None => "bits".into(),
                Some(t) => format!("tolerance abs {} rel {}", t.abs, t.rel),
            },
            identical: true,
            within_tolerance: tolerance.map(|_| true),
            compared: 0,
            differing: 0,
            max_ulps: 0,
            max_abs: 0.0,
            first: None,
            token_mismatches: 0,
            per_buffer: BTreeMap::new(),
            incomplete: None,
            envelope: None,
            tolerance,
        }
    }

    /// Envelope mode: judges this diff's logits and chosen tokens against calibration diff `cal` (see
    /// `spec::Envelope`); a logits buffer the twins agree on bit for bit has an envelope of zero. The
    /// other buffers (hidden states, final states) are reported in `per_buffer`, not judged: the twin
    /// perturbs only the GEMVs' summation order, the GPU also its libm and every op's lane order, so
    /// in the first layers, before rounding noise saturates, the GPU's states legitimately differ
    /// more than the twin's (measured on small: conv_state.0 3 flipped elements against none).
    pub fn judge(&mut self, cal: &DiffResult, factor: f32) {
        let mut why = Vec::new();
        let zero = BufferStats::default();
        for (name, st) in &self.per_buffer {
            if st.bit_differences == 0 || (name != "logits" && name != "token") {
                continue;
            }
            let c = cal.per_buffer.get(name).unwrap_or(&zero);
            if name == "token" {
                let allowed = (factor as f64 * c.differing as f64).ceil() as u64;
                if st.differing > allowed {
                    why.push(format!("{} token mismatches > {factor} x {}", st.differing, c.differing));
                }
                continue;
            }
            if st.max_abs > factor * c.max_abs {
                why.push(format!("{name}: largest difference {} > {factor} x {}", st.max_abs, c.max_abs));
            }
            if st.mean_abs() > factor as f64 * c.mean_abs() {
                why.push(format!("{name}: mean difference {:.3e} > {factor} x {:.3e}", st.mean_abs(), c.mean_abs()));
            }
        }
        let pick = |d: &DiffResult, f: fn(&BufferStats) -> f64| d.per_buffer.get("logits").map(f).unwrap_or(0.0);
        self.envelope = Some(EnvelopeVerdict {
            against: format!("{} vs {}", cal.a, cal.b),
            factor,
            within: why.is_empty(),
            why,
            logits_max_abs: [pick(self, |b| b.max_abs as f64) as f32, pick(cal, |b| b.max_abs as f64) as f32],
            logits_mean_abs: [pick(self, BufferStats::mean_abs), pick(cal, BufferStats::mean_abs)],
            tokens: [self.token_mismatches, cal.token_mismatches],
        });
        self.mode = format!("envelope: {factor} x {} vs {}", cal.a, cal.b);
    }

    /// Compares one tensor of both paths. `at` = (context, step, instruction, opcode).
    pub fn tensor(&mut self, at: (u32, Option<usize>, Option<usize>, Option<&str>), a: &Tensor, b: &Tensor) {
        let n = a.data.len().max(b.data.len());
        self.compared += n as u64;
        let key = a.name.clone();
        self.per_buffer.entry(key.clone()).or_default().compared += n as u64;
        if a.data.len() != b.data.len() {
            self.identical = false;
            self.differing += n as u64;
            self.within_tolerance = self.within_tolerance.map(|_| false);
            self.note(at, a, 0, f32::NAN, f32::NAN, u64::MAX);
            return;
        }
        for (i, (x, y)) in a.data.iter().zip(&b.data).enumerate() {
            if x.to_bits() == y.to_bits() {
                continue;
            }
            self.identical = false;
            let u = ulps(*x, *y, a.bf16);
            self.max_ulps = self.max_ulps.max(u);
            self.max_abs = self.max_abs.max((x - y).abs());
            // |a - b| <= abs + rel * max(|a|, |b|)
            let bad = match self.tolerance {
                None => true,
                Some(t) => !approx::abs_diff_eq!(*x, *y, epsilon = t.abs + t.rel * x.abs().max(y.abs())),
            };
            if let Some(st) = self.per_buffer.get_mut(&key) {
                st.bit_differences += 1;
                st.differing += bad as u64;
                st.max_ulps = st.max_ulps.max(u);
                st.max_abs = st.max_abs.max((x - y).abs());
                st.max_magnitude = st.max_magnitude.max(x.abs().max(y.abs()));
                st.sum_abs += (x - y).abs() as f64;
            }
            if bad {
                self.differing += 1;
                if let Some(w) = self.within_tolerance.as_mut() {
                    *w = false;
                }
                self.note(at, a, i, *x, *y, u);
            }
        }
    }

    fn note(
        &mut self,
        at: (u32, Option<usize>, Option<usize>, Option<&str>),
        t: &Tensor,
        i: usize,
        x: f32,
        y: f32,
        u: u64,
    ) {
        if self.first.is_some() {
            return;
        }
        let cols = t.cols.max(1);
        self.first = Some(Mismatch {
            context: at.0,
            step: at.1,
            instruction: at.2,
            opcode: at.3.map(str::to_string),
            buffer: t.name.clone(),
            element: i,
            index: [t.layer as usize, i / cols, i % cols],
            a: x,
            b: y,
            ulps: u,
        });
    }

    /// Compares everything two captures of one step share: instruction outputs (when both have them),
    /// hidden states per layer, logits, the chosen token.
    pub fn step(&mut self, context: u32, step: usize, a: &StepCapture, b: &StepCapture) {
        if !a.instructions.is_empty() && !b.instructions.is_empty() {
            for (wi, op, ta) in &a.instructions {
                if let Some((_, _, tb)) = b.instructions.iter().find(|(w, _, _)| w == wi) {
                    self.tensor((context, Some(step), Some(*wi), Some(op)), ta, tb);
                }
            }
        }
        for ha in &a.hidden {
            if let Some(hb) = b.hidden.iter().find(|h| h.layer == ha.layer) {
                self.tensor((context, Some(step), None, None), ha, hb);
            }
        }
        if let (Some(la), Some(lb)) = (&a.logits, &b.logits) {
            self.tensor((context, Some(step), None, None), la, lb);
        }
        // Tokens compare exactly in every mode, counted apart from the numeric differences.
        self.per_buffer.entry("token".into()).or_default().compared += 1;
        if a.token != b.token {
            self.identical = false;
            self.token_mismatches += 1;
            if let Some(st) = self.per_buffer.get_mut("token") {
                st.bit_differences += 1;
                st.differing += 1;
            }
            if self.first.is_none() {
                let t = Tensor { name: "token".into(), layer: 0, cols: 1, bf16: false, data: vec![a.token as f32] };
                self.note((context, Some(step), None, None), &t, 0, a.token as f32, b.token as f32, 0);
            }
            if let Some(w) = self.within_tolerance.as_mut() {
                *w = false;
            }
        }
    }

    /// Compares final states (matched by name).
    pub fn states(&mut self, context: u32, a: &[Tensor], b: &[Tensor]) {
        for ta in a {
            if let Some(tb) = b.iter().find(|t| t.name == ta.name) {
                self.tensor((context, None, None, None), ta, tb);
            }
        }
    }

    /// The verdict in one line.
    pub fn summary(&self) -> String {
        let head = match &self.incomplete {
            None => format!("{} vs {} ({})", self.a, self.b, self.mode),
            Some(why) => format!("{} vs {} ({}, INCOMPLETE: {why})", self.a, self.b, self.mode),
        };
        if let Some(v) = &self.envelope {
            return format!(
                "{head}: {} ({} of {} elements differ in bits; logits largest {:.3} vs {:.3}, mean {:.3e} vs {:.3e}; token mismatches {} vs {}){}",
                if v.within { "WITHIN the envelope" } else { "OUTSIDE the envelope" },
                self.per_buffer.values().map(|b| b.bit_differences).sum::<u64>(),
                self.compared,
                v.logits_max_abs[0],
                v.logits_max_abs[1],
                v.logits_mean_abs[0],
                v.logits_mean_abs[1],
                v.tokens[0],
                v.tokens[1],
                if v.within { String::new() } else { format!(": {}", v.why.join("; ")) }
            );
        }
        match (&self.first, self.within_tolerance) {
            (None, Some(true)) if !self.identical => {
                format!("{head}: within tolerance over {} elements (largest difference {:.3e}, {} ulps)", self.compared, self.max_abs, self.max_ulps)
            }
            (None, _) => format!("{head}: identical ({} elements)", self.compared),
            (Some(m), _) => format!(
                "{head}: {} of {} elements differ, largest {} ulps, {} token mismatches; first at context {} step {:?} instruction {:?} ({}) buffer {} element {} [layer {}, row {}, col {}]: {} vs {}",
                self.differing,
                self.compared,
                self.max_ulps,
                self.token_mismatches,
                m.context,
                m.step,
                m.instruction,
                m.opcode.as_deref().unwrap_or("-"),
                m.buffer,
                m.element,
                m.index[0],
                m.index[1],
                m.index[2],
                m.a,
                m.b
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(name: &str, data: Vec<f32>) -> Tensor {
        Tensor { name: name.into(), layer: 2, cols: 4, bf16: true, data }
    }

    #[test]
    fn one_flipped_bit_is_found_at_its_instruction_and_element() {
        let base: Vec<f32> = (0..12).map(|i| i as f32 * 0.5).collect();
        let mut flipped = base.clone();
        flipped[9] = f32::from_bits(flipped[9].to_bits() ^ (1 << 16)); // one bf16 mantissa bit
        let cap = |d: Vec<f32>| StepCapture {
            instructions: vec![(3, "GemvNorm".into(), t("qkv", base.clone())), (4, "GdnConv".into(), t("conv_out", d))],
            logits: Some(t("logits", vec![1.0, 2.0])),
            token: 1,
            ..Default::default()
        };
        let mut d = DiffResult::new("interpreter", "megakernel", None);
        d.step(16, 5, &cap(base.clone()), &cap(flipped));
        assert!(!d.identical);
        assert_eq!(d.differing, 1);
        assert_eq!(d.max_ulps, 1);
        let m = d.first.clone().unwrap();
        assert_eq!(
            (m.step, m.instruction, m.buffer.as_str(), m.element, m.index),
            (Some(5), Some(4), "conv_out", 9, [2, 2, 1])
        );
        assert!(d
            .summary()
            .contains("instruction Some(4) (GdnConv) buffer conv_out element 9 [layer 2, row 2, col 1]"));
        let mut same = DiffResult::new("a", "b", None);
        same.step(16, 0, &cap(base.clone()), &cap(base.clone()));
        assert!(same.identical && same.first.is_none());
        assert!(same.summary().contains("identical") && !same.summary().contains("INCOMPLETE"));
        // A path that dropped out: the same bits, but the verdict must say it covers part of the run.
        same.incomplete = Some("b failed at step 1".into());
        assert!(same.summary().contains("INCOMPLETE: b failed at step 1"), "{}", same.summary());
    }

    #[test]
    fn tolerance_mode_accepts_small_differences_but_reports_them() {
        let mut d = DiffResult::new("reference", "graph", Some(Tolerance { abs: 1e-3, rel: 1e-2 }));
        d.tensor((1, Some(0), None, None), &t("logits", vec![1.0, 2.0]), &t("logits", vec![1.0, 2.0078125]));
        assert!(!d.identical && d.within_tolerance == Some(true) && d.first.is_none());
        d.tensor((1, Some(1), None, None), &t("logits", vec![1.0]), &t("logits", vec![1.5]));
        assert_eq!(d.within_tolerance, Some(false));
        assert_eq!(ulps(1.0, 1.0078125, true), 1);
        assert_eq!(ulps(-0.0, 0.0, false), 0); // different bits, same number
        assert_eq!(ulps(-0.01, 0.01, true), 328); // across zero: 0.02 in ulps of 0.01 (2^-14)
    }
}

#[cfg(test)]
mod envelope_tests {
    use super::*;

    fn logits(data: Vec<f32>) -> Tensor {
        Tensor { name: "logits".into(), layer: 0, cols: data.len(), bf16: true, data }
    }

    /// The noise a legitimate reordering makes: a few elements off by up to 0.5.
    fn noisy(base: &[f32], every: usize, by: f32) -> Vec<f32> {
        base.iter().enumerate().map(|(i, x)| if i % every == 0 { x + by } else { *x }).collect()
    }

    #[test]
    fn an_envelope_accepts_twin_sized_noise_and_rejects_a_bias() {
        let base: Vec<f32> = (0..1000).map(|i| (i as f32 * 0.37).sin() * 4.0).collect();
        let mut cal = DiffResult::new("reference", "reference-reordered", None);
        cal.tensor((1, Some(0), None, None), &logits(base.clone()), &logits(noisy(&base, 10, 0.5)));
        // The same kind of noise, a little larger: within 1.5x.
        let mut gpu = DiffResult::new("reference", "graph", None);
        gpu.tensor((1, Some(0), None, None), &logits(base.clone()), &logits(noisy(&base, 9, 0.625)));
        gpu.judge(&cal, 1.5);
        let v = gpu.envelope.clone().unwrap();
        assert!(v.within, "{:?}", v.why);
        assert!(gpu.summary().contains("WITHIN the envelope"), "{}", gpu.summary());
        // Negative control: a small bias on every logit (a wrong rounding point, a wrong scale) has a
        // largest difference inside the envelope but a mean far outside it.
        let mut biased = DiffResult::new("reference", "graph", None);
        biased.tensor((1, Some(0), None, None), &logits(base.clone()), &logits(noisy(&base, 1, 0.25)));
        biased.judge(&cal, 1.5);
        let v = biased.envelope.clone().unwrap();
        assert!(!v.within && v.why.iter().any(|w| w.contains("mean difference")), "{:?}", v.why);
        assert!(biased.summary().contains("OUTSIDE the envelope"));
        // Logits the twins agree on bit for bit have an envelope of zero; states are not judged.
        let same = DiffResult::new("reference", "reference-reordered", None);
        let mut one = DiffResult::new("reference", "graph", None);
        one.tensor((1, Some(0), None, None), &logits(vec![1.0, 2.0]), &logits(vec![1.0, 2.0078125]));
        one.judge(&same, 1.5);
        assert!(!one.envelope.unwrap().within);
        let mut state = DiffResult::new("reference", "graph", None);
        let t = |d: Vec<f32>| Tensor { name: "conv_state.0".into(), layer: 0, cols: 2, bf16: true, data: d };
        state.tensor((1, None, None, None), &t(vec![1.0, 2.0]), &t(vec![1.0, 2.0078125]));
        state.judge(&cal, 1.5);
        assert!(state.envelope.unwrap().within);
    }
}
