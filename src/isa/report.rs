//! Human-readable views of a program: `mk program show` and `mk program stats`.
//!
//! Owns: the listing and the counts, and the bytes each word streams from weights (the roofline's
//! numerator). Refuses: judging validity (that is `validate.rs`).

use std::collections::BTreeMap;
use std::fmt::Write;

use super::{slot, BufKind, Opcode, Program, Word, NO_COUNTER};

/// Weight bytes a word streams per step: every weight operand read in full, except the embedding
/// (one row) and norm/gate vectors (counted, they are small).
pub fn weight_bytes(p: &Program, w: &Word) -> u64 {
    let mut total = 0;
    for s in [slot::W0, slot::W1, slot::W2, slot::W3] {
        if let Some(b) = w.op(s) {
            let buf = &p.buffers[b];
            if buf.kind != BufKind::Weight {
                continue;
            }
            total += if w.opcode == Opcode::Embed {
                buf.cols * buf.elem_bytes as u64
            } else if w.opcode == Opcode::LmHead && s == slot::W0 && w.op(slot::IN1).is_some() {
                // the pruned head: its capacity's rows at most (the list's count is the host's)
                w.rows as u64 * buf.cols * buf.elem_bytes as u64
            } else {
                let scale = if buf.elem_bytes == 1 { buf.rows.div_ceil(128) * buf.cols.div_ceil(128) * 2 } else { 0 };
                buf.elems() * buf.elem_bytes as u64 + scale
            };
        }
    }
    total
}

/// Bytes a word streams from or to memory in one step at `n_ctx` positions: its weights (with their
/// scales, as `weight_bytes`), the KV-cache rows it reads (attention scores: K, PV: V, `n_ctx` rows
/// each), and the per-sequence state it reads and writes back (the GDN recurrent state and conv ring,
/// twice their size). Activations and scratch are not counted (kilobytes, mostly in L2).
pub fn streamed_bytes(p: &Program, w: &Word, n_ctx: u64) -> u64 {
    let state = |s: usize| w.op(s).map(|b| &p.buffers[b]).filter(|b| b.kind == BufKind::State);
    let extra = match w.opcode {
        Opcode::AttnScores => state(slot::ST0).map_or(0, |b| n_ctx.min(b.rows) * b.cols * b.elem_bytes as u64),
        Opcode::AttnPv => state(slot::ST1).map_or(0, |b| n_ctx.min(b.rows) * b.cols * b.elem_bytes as u64),
        Opcode::GdnRecur | Opcode::GdnConv => state(slot::ST0).map_or(0, |b| 2 * b.elems() * b.elem_bytes as u64),
        Opcode::GdnStep => {
            [slot::ST0, slot::ST1].iter().map(|&s| state(s).map_or(0, |b| 2 * b.elems() * b.elem_bytes as u64)).sum()
        }
        _ => 0,
    };
    weight_bytes(p, w) + extra
}

pub fn show(p: &Program) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# {} ({}), target {:?}", p.model, p.shape, p.target);
    let _ = writeln!(
        s,
        "{:>5}  {:24} {:>5} {:>7} {:>6} {:>6} {:>12}  {:>14}  {:>6}",
        "index", "opcode", "layer", "rows", "units", "kparts", "bytes", "wait", "signal"
    );
    for (i, w) in p.words.iter().enumerate() {
        let wait = if w.wait == NO_COUNTER { "-".to_string() } else { format!("c{}>={}", w.wait, w.wait_target) };
        let _ = writeln!(
            s,
            "{i:>5}  {:24} {:>5} {:>7} {:>6} {:>6} {:>12}  {wait:>14}  c{:<5}",
            format!("{:?}", w.opcode),
            w.layer,
            w.rows,
            w.units,
            w.k_parts,
            weight_bytes(p, w),
            w.signal
        );
    }
    s
}

pub fn stats(p: &Program) -> String {
    let mut s = String::new();
    let mut per_op: BTreeMap<String, (usize, u64, u64)> = BTreeMap::new();
    for w in &p.words {
        let e = per_op.entry(format!("{:?}", w.opcode)).or_default();
        e.0 += 1;
        e.1 += w.units as u64;
        e.2 += weight_bytes(p, w);
    }
    let bytes: u64 = p.words.iter().map(|w| weight_bytes(p, w)).sum();
    let _ = writeln!(s, "program: {} ({})", p.model, p.shape);
    let _ = writeln!(s, "instructions: {}", p.words.len());
    let _ = writeln!(s, "units: {}", p.words.iter().map(|w| w.units as u64).sum::<u64>());
    let _ = writeln!(s, "counters: {}", p.n_counters);
    let _ = writeln!(s, "weight bytes per step: {bytes} ({:.3} GB)", bytes as f64 / 1e9);
    let _ = writeln!(s, "{:24} {:>6} {:>9} {:>16}", "opcode", "count", "units", "weight bytes");
    for (op, (n, u, b)) in per_op {
        let _ = writeln!(s, "{op:24} {n:>6} {u:>9} {b:>16}");
    }
    s
}
