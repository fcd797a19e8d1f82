//! Every op on the GPU against the CPU reference op on the same inputs: before each word, the buffers
//! it touches are copied from the CPU interpreter to the GPU; the word runs on both; everything it
//! wrote is compared. Differences come only from summation order and transcendental functions, so
//! they are reported per opcode in ulps, with the tolerance stated by the caller.
//!
//! Owns: the op-by-op comparison. Refuses: judging whole steps (that is `mk run` with diffs).

use std::collections::BTreeMap;

use super::discrete::Discrete;
use crate::error::Result;
use crate::exec::interp::Interp;
use crate::experiment::diff::ulps;
use crate::isa::access::unit_accesses;
use crate::isa::{BufKind, Program};

#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct OpStats {
    pub words: u64,
    pub elements: u64,
    pub differing: u64,
    pub max_ulps: u64,
    pub max_abs: f32,
    /// Elements more than 1 ulp apart (bf16 outputs) or 64 ulps apart (fp32 outputs).
    pub beyond: u64,
}

/// Runs `tokens` through both, op by op; returns per-opcode statistics.
pub fn check(prog: &Program, it: &mut Interp, d: &mut Discrete, tokens: &[u32]) -> Result<BTreeMap<String, OpStats>> {
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
            let st = stats.entry(format!("{:?}", w.opcode)).or_default();
            st.words += 1;
            for (b, written) in touched {
                if !written {
                    continue;
                }
                let buf = &prog.buffers[b];
                let gpu = d.read(b, buf.elems() as usize)?;
                let bf16 = buf.elem_bytes == 2;
                for (x, y) in it.bufs[b].iter().zip(&gpu) {
                    st.elements += 1;
                    if x.to_bits() != y.to_bits() {
                        st.differing += 1;
                        let u = ulps(*x, *y, bf16);
                        st.max_ulps = st.max_ulps.max(u);
                        st.max_abs = st.max_abs.max((x - y).abs());
                        st.beyond += (u > if bf16 { 1 } else { 64 }) as u64;
                    }
                }
            }
        }
    }
    Ok(stats)
}

pub fn print(stats: &BTreeMap<String, OpStats>) -> String {
    let mut s = format!("{:24} {:>6} {:>12} {:>10} {:>9} {:>11} {:>10}\n", "opcode", "words", "elements", "differing", "max ulps", "max |diff|", "beyond");
    for (op, t) in stats {
        s += &format!("{op:24} {:>6} {:>12} {:>10} {:>9} {:>11.3e} {:>10}\n", t.words, t.elements, t.differing, t.max_ulps, t.max_abs, t.beyond);
    }
    s
}
