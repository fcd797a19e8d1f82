//! Every op on the GPU against the CPU reference op on the same inputs: before each word, the buffers
//! it touches are copied from the CPU interpreter to the GPU; the word runs on both; everything it
//! wrote is compared. Differences come only from summation order and transcendental functions, so
//! they are reported per opcode in ulps, with the tolerance stated by the caller.
//!
//! Owns: the op-by-op comparison. Refuses: judging whole steps (that is `mk run` with diffs).

use std::collections::BTreeMap;

use crate::error::Result;
use crate::exec::gpu::GpuExec;
use crate::exec::interp::Interp;
use crate::isa::access::unit_accesses;
use crate::isa::{BufKind, Program};

#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct OpStats {
    pub words: u64,
    pub elements: u64,
    pub differing: u64,
    /// Largest difference in ulps of the larger magnitude (bf16 or fp32 grid).
    pub max_ulps: f64,
    pub max_abs: f32,
    /// Largest |difference| relative to the largest |value| of the buffer.
    pub max_rel: f32,
    /// Elements more than 2 ulps of the larger magnitude apart.
    pub beyond: u64,
}

/// |a - b| in units of the last place of max(|a|, |b|) on the bf16 or fp32 grid.
fn ulps_of_magnitude(a: f32, b: f32, bf16: bool) -> f64 {
    let m = a.abs().max(b.abs()).max(f32::MIN_POSITIVE);
    let ulp = 2f64.powi(m.log2().floor() as i32 - if bf16 { 7 } else { 23 });
    (a as f64 - b as f64).abs() / ulp
}

/// Runs `tokens` through both, op by op; returns per-opcode statistics.
pub fn check(prog: &Program, it: &mut Interp, d: &mut GpuExec, tokens: &[u32]) -> Result<BTreeMap<String, OpStats>> {
    let mut stats: BTreeMap<String, OpStats> = BTreeMap::new();
    for &tok in tokens {
        it.set_token(tok);
        for (i, w) in prog.words.iter().enumerate() {
            let mut touched: Vec<(usize, bool)> = Vec::new();
            for u in 0..w.units {
                for a in unit_accesses(prog, w, u) {
                    if prog.buffers[a.buf].kind == BufKind::Weight {
                        continue;
                    }
                    match touched.iter_mut().find(|t| t.0 == a.buf) {
                        Some(t) => t.1 |= a.write,
                        None => touched.push((a.buf, a.write)),
                    }
                }
            }
            for (b, _) in &touched {
                d.write(*b, &it.bufs[*b])?;
            }
            d.run_word(i)?;
            it.run_word(i);
            for (b, written) in touched {
                if !written {
                    continue;
                }
                let buf = &prog.buffers[b];
                let gpu = d.read(b, buf.elems() as usize)?;
                let bf16 = buf.elem_bytes == 2;
                let scale = it.bufs[b].iter().fold(0f32, |m, x| m.max(x.abs())).max(f32::MIN_POSITIVE);
                let st =
                    stats.entry(format!("{:?} -> {}", w.opcode, buf.name.split('.').next().unwrap_or(""))).or_default();
                st.words += 1;
                for (e, (x, y)) in it.bufs[b].iter().zip(&gpu).enumerate() {
                    st.elements += 1;
                    if x.to_bits() == y.to_bits() {
                        continue;
                    }
                    st.differing += 1;
                    // The lm_head candidates are (value, id) pairs: an id is no number to measure.
                    if buf.name == "candidates" && e % 2 == 1 {
                        st.beyond += 1;
                        continue;
                    }
                    let u = ulps_of_magnitude(*x, *y, bf16);
                    st.max_ulps = st.max_ulps.max(u);
                    st.max_abs = st.max_abs.max((x - y).abs());
                    st.max_rel = st.max_rel.max((x - y).abs() / scale);
                    st.beyond += (u > 2.0) as u64;
                }
            }
        }
    }
    Ok(stats)
}

pub fn print(stats: &BTreeMap<String, OpStats>) -> String {
    let mut s = format!(
        "{:40} {:>6} {:>12} {:>10} {:>9} {:>11} {:>10} {:>8}\n",
        "opcode -> buffer", "words", "elements", "differing", "max ulps", "max |diff|", "max rel", ">2 ulps"
    );
    for (op, t) in stats {
        s += &format!(
            "{op:40} {:>6} {:>12} {:>10} {:>9.1} {:>11.3e} {:>10.2e} {:>8}\n",
            t.words, t.elements, t.differing, t.max_ulps, t.max_abs, t.max_rel, t.beyond
        );
    }
    s
}

/// The op check's tolerance: every element within 2^-6 of its buffer's largest magnitude (two bf16
/// ulps there): GPU and CPU sum in different orders (tensor-core accumulation, lane-strided chunks),
/// so elements may differ by rounding, never by more than a couple of ulps at the buffer's scale. A
/// wrong kernel (see MK_BREAK_GEMV, the negative control) is off by far more. The argmax candidates'
/// ids are compared as tokens: they may differ only where the values tie.
pub const MAX_REL: f32 = 1.0 / 64.0;

/// "ok", or the ops beyond the tolerance.
pub fn verdict(stats: &BTreeMap<String, OpStats>) -> std::result::Result<(), String> {
    let bad: Vec<String> = stats
        .iter()
        .filter(|(_, t)| t.max_rel > MAX_REL || !t.max_rel.is_finite())
        .map(|(op, t)| format!("{op} (max rel {:.2e})", t.max_rel))
        .collect();
    if bad.is_empty() {
        Ok(())
    } else {
        Err(bad.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_verdict_rejects_an_op_beyond_the_tolerance() {
        let mut m = BTreeMap::new();
        m.insert("GemvNorm -> q".to_string(), OpStats { max_rel: 1e-3, ..Default::default() });
        assert!(verdict(&m).is_ok());
        m.insert("GemvGateUp -> act".to_string(), OpStats { max_rel: 0.2, ..Default::default() });
        let e = verdict(&m).unwrap_err();
        assert!(e.contains("GemvGateUp -> act") && !e.contains("GemvNorm"), "{e}");
        m.insert("X -> y".to_string(), OpStats { max_rel: f32::NAN, ..Default::default() });
        assert!(verdict(&m).unwrap_err().contains("X -> y"));
    }
}
