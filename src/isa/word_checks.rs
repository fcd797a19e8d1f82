//! The validator's checks of one word alone (issue 3's rules 1-3): each operand slot's buffer kind,
//! the shapes an opcode needs, its arguments, and its layer against its weights' names. The rules that
//! relate words (waits, overlaps, coverage) are `validate.rs`'s.

use super::access::{CHUNK_ROWS, GDN_HEAD_DIM, GDN_HIST_HEAD, KGROUP};
use super::{slot, BufKind, Opcode, Program, Word, FLAG_LAST_ROW, FLAG_PARTIAL, FLAG_ROW_UNITS, NO_COUNTER};
use crate::bail;
use crate::error::Result;

use super::validate::who;

/// The buffer kinds each operand slot of each opcode requires (None: must be unused; Some(None): any).
pub(super) fn required(op: Opcode) -> [Option<BufKind>; slot::COUNT] {
    use BufKind::*;
    let mut r = [None; slot::COUNT];
    let mut set = |s: usize, k: BufKind| r[s] = Some(k);
    match op {
        Opcode::Embed => {
            set(slot::W0, Weight);
            set(slot::IN0, Control);
            set(slot::OUT0, Activation);
        }
        Opcode::GemvNorm | Opcode::GemvResidual => {
            set(slot::W0, Weight);
            set(slot::IN0, Activation);
        }
        Opcode::GemvGateUp => {
            set(slot::W0, Weight);
            set(slot::W1, Weight);
            set(slot::W2, Weight);
            set(slot::IN0, Activation);
            set(slot::OUT0, Activation);
        }
        Opcode::ReduceStore | Opcode::ReduceResidual => {
            set(slot::IN0, Scratch);
            set(slot::OUT0, Activation);
        }
        Opcode::GdnConv => {
            set(slot::W0, Weight);
            set(slot::IN0, Activation);
            set(slot::IN1, Control);
            set(slot::OUT0, Activation);
            set(slot::ST0, State);
        }
        Opcode::GdnRecur | Opcode::GdnChunk => {
            set(slot::W0, Weight);
            set(slot::W1, Weight);
            set(slot::W3, Weight);
            set(slot::IN0, Activation);
            set(slot::IN1, Activation);
            set(slot::IN2, Activation);
            set(slot::IN4, Activation);
            set(slot::OUT0, Activation);
            set(slot::ST0, State);
        }
        Opcode::GdnStep => {
            for s in [slot::W0, slot::W1, slot::W2, slot::W3] {
                set(s, Weight);
            }
            for s in [slot::IN0, slot::IN1, slot::IN2, slot::IN4, slot::OUT0] {
                set(s, Activation);
            }
            set(slot::IN3, Control);
            set(slot::ST0, State);
            set(slot::ST1, State);
        }
        Opcode::AttnKv => {
            set(slot::W0, Weight);
            set(slot::IN0, Activation);
            set(slot::IN1, Activation);
            set(slot::IN2, Control);
            set(slot::ST0, State);
            set(slot::ST1, State);
        }
        Opcode::AttnScores => {
            set(slot::W0, Weight);
            set(slot::IN0, Activation);
            set(slot::IN1, Control);
            set(slot::OUT0, Scratch);
            set(slot::OUT1, Scratch);
            set(slot::ST0, State);
        }
        Opcode::AttnPv => {
            set(slot::IN0, Scratch);
            set(slot::IN1, Scratch);
            set(slot::IN2, Control);
            set(slot::OUT0, Scratch);
            set(slot::ST1, State);
        }
        Opcode::AttnReduceGate => {
            set(slot::IN0, Scratch);
            set(slot::IN1, Activation);
            set(slot::IN2, Control);
            set(slot::OUT0, Activation);
        }
        Opcode::LmHead => {
            set(slot::W0, Weight);
            set(slot::W1, Weight);
            set(slot::IN0, Activation);
            set(slot::OUT0, Activation);
            set(slot::OUT1, Scratch);
        }
        Opcode::Argmax => {
            set(slot::IN0, Scratch);
            set(slot::OUT0, Control);
        }
        Opcode::EndStep => set(slot::IN0, Control),
        Opcode::MtpFc => {
            for s in [slot::W0, slot::W1, slot::W2, slot::W3] {
                set(s, Weight);
            }
            set(slot::IN0, Activation);
            set(slot::IN1, State); // the residual stream the host hands in before the step
            set(slot::OUT0, Activation);
        }
    }
    r
}

/// Rule 1 for one word.
pub(super) fn check_shape(p: &Program, i: usize, w: &Word) -> Result<()> {
    let at = who(i, w);
    let max_m = if p.target.prefill { super::MAX_PREFILL_ROWS } else { 8 };
    if w.m_rows as u32 != p.target.m_rows || !(1..=max_m).contains(&(w.m_rows as u32)) {
        bail!("{at}: shape: m_rows {} (the program's target has M = {}, 1-{max_m} allowed)", w.m_rows, p.target.m_rows);
    }
    // a prefill's recurrence runs by chunks over its rows; a decode or verification step's row by row
    if p.target.prefill && w.opcode == Opcode::GdnRecur {
        bail!("{at}: shape: GdnRecur in a prefill program (its recurrence runs by chunks: GdnChunk)");
    }
    if !p.target.prefill && w.opcode == Opcode::GdnChunk {
        bail!("{at}: shape: GdnChunk outside a prefill program (a step's recurrence runs row by row: GdnRecur)");
    }
    if w.opcode == Opcode::GdnStep && w.m_rows > 1 {
        bail!("{at}: shape: GdnStep runs M = 1 only (M > 1 lowers GDN split: its rows would race on the shared q/k ring slots)");
    }
    if w.unit_rows == 0 || w.k_parts == 0 || w.rows == 0 {
        bail!("{at}: shape: rows {}, unit_rows {}, k_parts {} must be positive", w.rows, w.unit_rows, w.k_parts);
    }
    // Caps keep every later computation in range (no overflow, bounded memory).
    if w.rows > 1 << 24 || w.k_parts > 1 << 12 {
        bail!(
            "{at}: shape: rows {}, unit_rows {} or k_parts {} beyond the engine's caps",
            w.rows,
            w.unit_rows,
            w.k_parts
        );
    }
    check_flags(&at, w)?;
    if w.units as u64 != w.expected_units() {
        let rows = if w.flags & FLAG_ROW_UNITS != 0 { format!(" x {} rows", w.m_rows) } else { String::new() };
        bail!("{at}: shape: units {} != {} row slices x {} k-parts{rows}", w.units, w.row_units(), w.k_parts);
    }
    let req = required(w.opcode);
    for (s, want) in req.iter().enumerate() {
        let name = slot::NAMES[s];
        match (w.op(s), want) {
            (Some(b), _) if b >= p.buffers.len() => {
                bail!(
                    "{at}: shape: operand {name} = buffer id {b} out of range (the program has {} buffers)",
                    p.buffers.len()
                )
            }
            (None, Some(k)) => {
                // A GemvNorm without a norm weight is allowed (W1); everything else named is required.
                if !(w.opcode == Opcode::GemvNorm && s == slot::W1) {
                    bail!("{at}: shape: operand {name} missing (needs a {k:?} buffer)");
                }
            }
            (Some(b), Some(k)) if p.buffers[b].kind != *k => {
                bail!(
                    "{at}: shape: operand {name} is {} ({:?}), needs a {k:?} buffer",
                    p.buffers[b].name,
                    p.buffers[b].kind
                )
            }
            _ => {}
        }
    }
    let gemv_out_ok = |kind: BufKind| {
        if w.flags & FLAG_PARTIAL != 0 {
            kind == BufKind::Scratch
        } else {
            kind == BufKind::Activation
        }
    };
    if matches!(w.opcode, Opcode::GemvNorm | Opcode::GemvResidual) {
        let out = w.op(slot::OUT0).map(|b| p.buffers[b].kind);
        if !out.is_some_and(gemv_out_ok) {
            bail!("{at}: shape: operand out0 must be a Scratch buffer with split-K partials, else an Activation");
        }
        let wt = &p.buffers[w.ops[slot::W0] as usize];
        let k = p.buffers[w.ops[slot::IN0] as usize].cols;
        if wt.cols != k || (w.rows as u64) > wt.rows {
            bail!(
                "{at}: shape: weight {} is [{}, {}] but the word reads {k} inputs into {} rows",
                wt.name,
                wt.rows,
                wt.cols,
                w.rows
            );
        }
        let groups = (k as usize).div_ceil(KGROUP) as u32;
        if w.flags & FLAG_PARTIAL != 0 && (w.arg0 != groups || w.k_parts as u32 > groups) {
            bail!(
                "{at}: shape: split-K over {} k-parts with arg0 = {} groups (the input has {groups})",
                w.k_parts,
                w.arg0
            );
        }
    }
    if matches!(w.opcode, Opcode::GemvNorm | Opcode::GemvResidual | Opcode::GemvGateUp | Opcode::MtpFc)
        && w.op(slot::W0).is_some_and(|b| p.buffers[b].elem_bytes == 1)
    {
        // the GPU reads fp8 weights a chunk of 32 rows x one k-group at a time (exec::gpu::layout)
        let wt = &p.buffers[w.ops[slot::W0] as usize];
        let c = CHUNK_ROWS as u32;
        if w.rows % c != 0 || w.unit_rows as u32 % c != 0 || wt.cols % 128 != 0 {
            bail!(
                "{at}: shape: an fp8 GEMV needs rows ({}) and unit_rows ({}) in multiples of {c} and a weight width ({}) \
                 in multiples of 128",
                w.rows,
                w.unit_rows,
                wt.cols
            );
        }
    }
    check_args(p, &at, w)?;
    if w.signal == NO_COUNTER || w.signal >= p.n_counters {
        bail!("{at}: shape: signal counter {} out of range (the program has {} counters)", w.signal, p.n_counters);
    }
    if w.wait != NO_COUNTER && w.wait >= p.n_counters {
        bail!("{at}: shape: wait counter {} out of range (the program has {} counters)", w.wait, p.n_counters);
    }
    Ok(())
}

/// The flags: known ones, on the opcodes that have their forms.
fn check_flags(at: &str, w: &Word) -> Result<()> {
    let partial = w.flags & FLAG_PARTIAL != 0;
    if partial && !matches!(w.opcode, Opcode::GemvNorm | Opcode::GemvResidual) {
        bail!("{at}: shape: FLAG_PARTIAL on an opcode that has no split-K form");
    }
    if w.flags & FLAG_ROW_UNITS != 0 && !w.opcode.row_split() {
        bail!("{at}: shape: FLAG_ROW_UNITS on {:?}, whose rows are not independent units", w.opcode);
    }
    if w.flags & FLAG_LAST_ROW != 0
        && (!matches!(w.opcode, Opcode::LmHead | Opcode::Argmax) || w.flags & FLAG_ROW_UNITS != 0)
    {
        bail!("{at}: shape: FLAG_LAST_ROW on {:?} (the head's words only, without FLAG_ROW_UNITS)", w.opcode);
    }
    if w.flags & !(FLAG_PARTIAL | FLAG_ROW_UNITS | FLAG_LAST_ROW) != 0 {
        bail!("{at}: shape: unknown flags {:#x}", w.flags);
    }
    Ok(())
}

/// Opcode arguments and weight shapes the footprints and the executors rely on.
pub(super) fn check_args(p: &Program, at: &str, w: &Word) -> Result<()> {
    let buf = |s: usize| w.op(s).map(|b| &p.buffers[b]);
    let cols = |s: usize| buf(s).map(|b| b.cols).unwrap_or(0);
    let partial = w.flags & FLAG_PARTIAL != 0;
    if w.k_parts != 1 && !partial {
        bail!("{at}: shape: k_parts {} without FLAG_PARTIAL", w.k_parts);
    }
    let parts = (p.target.max_context as usize / crate::isa::access::ATTN_PART) as u32;
    match w.opcode {
        Opcode::AttnScores | Opcode::AttnPv | Opcode::AttnReduceGate => {
            if w.arg0 == 0 || w.arg0 != parts {
                bail!("{at}: shape: arg0 = {} partitions, the target's context needs {parts}", w.arg0);
            }
            if w.opcode != Opcode::AttnReduceGate && (w.arg1 == 0 || w.rows != (w.rows / w.arg0) * w.arg0) {
                bail!("{at}: shape: rows {} / arg1 {} do not describe (KV head, partition) units", w.rows, w.arg1);
            }
        }
        Opcode::GdnRecur | Opcode::GdnStep | Opcode::GdnChunk => {
            if w.arg0 == 0 || w.rows % w.arg0 != 0 {
                bail!("{at}: shape: {} value heads are not a multiple of arg0 = {} q/k heads", w.rows, w.arg0);
            }
            // The kernels take the unit index as the value head.
            if w.unit_rows != 1 {
                bail!("{at}: shape: unit_rows {} (one value head per unit)", w.unit_rows);
            }
        }
        Opcode::ReduceStore | Opcode::ReduceResidual => {
            if w.arg0 == 0 || (w.arg0 as u64) * (w.rows as u64) > cols(slot::IN0) {
                bail!("{at}: shape: {} groups of {} rows do not fit the partial buffer", w.arg0, w.rows);
            }
        }
        Opcode::Argmax => {
            if w.arg0 == 0 {
                bail!("{at}: shape: no candidates (arg0 = 0)");
            }
        }
        _ => {}
    }
    // Weights: matrices [rows >= word rows, cols = input width]; vectors of the right length.
    let matrix = |s: usize, k: u64| -> Result<()> {
        match buf(s) {
            Some(b) if b.rows >= w.rows as u64 && b.cols == k && b.rows > 1 => Ok(()),
            Some(b) => {
                bail!("{at}: shape: weight {} is [{}, {}], the word needs [>= {}, {k}]", b.name, b.rows, b.cols, w.rows)
            }
            None => Ok(()),
        }
    };
    let vector = |s: usize, n: u64| -> Result<()> {
        match buf(s) {
            Some(b) if b.elems() == n => Ok(()),
            Some(b) => bail!("{at}: shape: weight {} has {} elements, the word needs {n}", b.name, b.elems()),
            None => Ok(()),
        }
    };
    let k = cols(slot::IN0);
    match w.opcode {
        Opcode::GemvGateUp => {
            matrix(slot::W0, k)?;
            matrix(slot::W1, k)?;
            vector(slot::W2, k)?;
            // gate and up are read alike (the kernels choose the fp8 or bf16 form by gate's storage)
            if let (Some(g), Some(u)) = (buf(slot::W0), buf(slot::W1)) {
                if g.elem_bytes != u.elem_bytes || g.rows != u.rows {
                    bail!(
                        "{at}: shape: gate {} ([{}, {}], {} bytes an element) and up {} ([{}, {}], {}) differ",
                        g.name,
                        g.rows,
                        g.cols,
                        g.elem_bytes,
                        u.name,
                        u.rows,
                        u.cols,
                        u.elem_bytes
                    );
                }
            }
        }
        Opcode::LmHead => {
            matrix(slot::W0, k)?;
            vector(slot::W1, k)?;
            // the kernel's unit: 4 tiles of 16 rows x 2 halves of the k-tiles of 128 (lm_head.cuh)
            if w.unit_rows != 64 || k % 128 != 0 {
                bail!("{at}: shape: the lm_head runs units of 64 rows over a width that is a multiple of 128 (unit_rows {}, width {k})", w.unit_rows);
            }
            // the pruned head (the MTP drafter's, issue 27): IN1 = [n, ids ..] of the rows it scores
            if let Some(b) = buf(slot::IN1) {
                if b.kind != BufKind::Control || b.elem_bytes != 4 || b.cols != w.rows as u64 + 1 || w.m_rows != 1 {
                    bail!(
                        "{at}: shape: the pruned head's row list {} must be a one-row Control buffer of {} u32 (the count, then the ids)",
                        b.name,
                        w.rows as u64 + 1
                    );
                }
            }
            // the head mask (issue 30): IN2 = per row [flag, the vocabulary's bits 16 an element]
            if let Some(b) = buf(slot::IN2) {
                let cols = 1 + (w.rows as u64).div_ceil(16);
                if w.op(slot::IN1).is_some()
                    || b.kind != BufKind::Control
                    || b.elem_bytes != 4
                    || b.cols != cols
                    || b.rows != w.m_rows as u64
                {
                    bail!(
                        "{at}: shape: the head mask {} must be a Control buffer of {} rows x {cols} u32 (a flag, then 16 ids' bits an element), on a head without a row list",
                        b.name,
                        w.m_rows
                    );
                }
            }
        }
        Opcode::GemvNorm => vector(slot::W1, k)?,
        Opcode::Embed => {
            if buf(slot::W0).map(|b| b.cols) != Some(cols(slot::OUT0)) {
                bail!("{at}: shape: the embedding's width is not h's");
            }
        }
        Opcode::GdnConv => {
            vector(slot::W0, 4 * w.rows as u64)?;
            deferred_gdn(p, at, w, w.rows as u64)?;
        }
        Opcode::GdnRecur | Opcode::GdnChunk => {
            vector(slot::W0, w.rows as u64)?;
            vector(slot::W1, w.rows as u64)?;
            vector(slot::W3, GDN_HEAD_DIM as u64)?;
            deferred_gdn(p, at, w, w.rows as u64 * GDN_HIST_HEAD as u64)?;
        }
        Opcode::GdnStep => {
            vector(slot::W0, w.rows as u64)?;
            vector(slot::W1, w.rows as u64)?;
            vector(slot::W2, 4 * cols(slot::IN0))?;
            vector(slot::W3, GDN_HEAD_DIM as u64)?;
        }
        Opcode::MtpFc => {
            // [e, g] of two inputs of one width, the fc over both, a norm weight for each
            if cols(slot::IN1) != k {
                bail!("{at}: shape: the fc's inputs differ in width ({k} and {})", cols(slot::IN1));
            }
            matrix(slot::W0, 2 * k)?;
            for s in [slot::W1, slot::W2, slot::W3] {
                vector(s, k)?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// Proves the program safe to run (see the module comment) or names the first word that is not.
/// The layer of a weight buffer from its name (`...layers.N....`), if it names one.
pub(super) fn layer_of(name: &str) -> Option<u16> {
    name.split("layers.").nth(1)?.split('.').next()?.parse().ok()
}

/// A word's `layer` (what the listing and the timelines group by) is the layer its weights belong to
/// when they name one, and never past the program's last layer.
pub(super) fn check_layer(p: &Program, i: usize, w: &Word, last: u16) -> Result<()> {
    let named = w
        .ops
        .iter()
        .filter(|&&id| id != crate::isa::NONE)
        .filter_map(|&id| p.buffers.get(id as usize))
        .filter(|b| b.kind == BufKind::Weight)
        .filter_map(|b| layer_of(&b.name));
    for l in named {
        if l != w.layer {
            bail!("{}: its weights are layer {l}'s", who(i, w));
        }
    }
    if w.layer > last {
        bail!("{}: past the program's last layer, {last}", who(i, w));
    }
    Ok(())
}

/// GdnConv / GdnRecur of an M-row program commit the previous step's kept rows before their own
/// (`Opcode::GdnConv`'s deferred form): their kept inputs in ST1, a State buffer of M rows of `cols`
/// bf16 (and GdnRecur's control block in IN3); a one-row or prefill program's have neither (the state
/// is written at once).
fn deferred_gdn(p: &Program, at: &str, w: &Word, cols: u64) -> Result<()> {
    let kind = |s: usize| w.op(s).map(|b| &p.buffers[b]);
    let recur = matches!(w.opcode, Opcode::GdnRecur | Opcode::GdnChunk);
    if w.m_rows == 1 || p.target.prefill {
        if kind(slot::ST1).is_some() || recur && kind(slot::IN3).is_some() {
            bail!(
                "{at}: shape: a one-row or prefill program's {:?} writes its state at once (no kept rows, st1 / in3 unused)",
                w.opcode
            );
        }
        return Ok(());
    }
    match kind(slot::ST1) {
        Some(b) if b.kind == BufKind::State && b.rows == w.m_rows as u64 && b.cols == cols && b.elem_bytes == 2 => {}
        Some(b) => bail!(
            "{at}: shape: kept rows {} are [{}, {}] {:?} of {} bytes, the word needs a State buffer [{}, {cols}] of bf16",
            b.name,
            b.rows,
            b.cols,
            b.kind,
            b.elem_bytes,
            w.m_rows
        ),
        None => bail!("{at}: shape: operand st1 missing (an M-row program's {:?} keeps its rows there)", w.opcode),
    }
    if recur && !kind(slot::IN3).is_some_and(|b| b.kind == BufKind::Control) {
        bail!("{at}: shape: operand in3 must be the control block (the deferred commit's count)");
    }
    Ok(())
}
