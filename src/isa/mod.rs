//! THE CONTRACT between the compiler and the executors: opcodes, the fixed-size instruction word, the
//! program (buffers, counters, words) as RON, and the CUDA header generated from them.
//!
//! Owns: opcode numbers (written once, in `Opcode`), the 64-byte `Word` layout with its one encoder and
//! one decoder, `Program` and its RON form. Refuses: semantics (what each opcode reads and writes is in
//! `access.rs`, whether a program is safe to run is `validate.rs`).
//!
//! Execution model: every word is a grid-wide instruction split into `units` independent units of work
//! (a slice of `unit_rows` output rows, times one of `k_parts` slices of the reduction axis). Any block
//! may execute any unit, in any order: a unit is a fixed piece of work, so which block runs it never
//! changes its bits. Before running a unit of a word, a block waits until counter `wait` reaches
//! `wait_target` (acquire); after finishing it increments counter `signal` by one (release). All
//! counters are reset at the end of the step, which the `EndStep` word marks: it is ordered after every
//! other word (the interpreter resets there; the megakernel's host zeroes counters before each launch).

pub mod access;
mod head;
pub mod report;
mod target;
pub mod validate;
pub mod weights;
pub mod word_checks;

pub use target::{GdnLowering, Target, UnitPolicy, DEFAULT_GEMV_UNIT_ROWS, MAX_PREFILL_ROWS};

use serde::{Deserialize, Serialize};

use crate::bail;
use crate::error::{Context, Result};

/// Every operation a word can name. The number of each is written here once; `cuda_header` renders
/// the CUDA `#define`s from this list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[repr(u16)]
pub enum Opcode {
    /// h = embed[token] (row slices of the hidden vector).
    Embed = 1,
    /// y = W . rmsnorm(x) (zero-centred norm folded in; no norm when W2 is NONE); bf16 rows or split-K partials.
    GemvNorm = 2,
    /// act = bf(bf(silu(Wg . n)) * bf(Wu . n)), n = rmsnorm(x): gate/up with the SwiGLU epilogue.
    GemvGateUp = 3,
    // 4: GemvGatedNormResidual, retired 2026-12-04 (GDN out_proj with the gated norm folded into every
    // unit; GdnRecur now applies the gated norm once per head, docs/notebook/speculation.md).
    /// h = bf(h + bf(W . x)): o_proj / down_proj with the residual add in the epilogue; or partials.
    GemvResidual = 5,
    /// y = bf(sum_g partial[g]) in group order (split-K reduce).
    ReduceStore = 6,
    /// h = bf(h + bf(sum_g partial[g])) in group order (split-K reduce with the residual add).
    ReduceResidual = 7,
    /// Causal conv (ring of 4 by position) + SiLU over a slice of q|k|v channels. In an M-row program
    /// (ST1 = the kept inputs, `[M][channels]`) the ring update is deferred: the unit first commits the
    /// previous step's first `ctrl[0][COMMIT]` kept inputs into the ring (at positions pos - n .. pos),
    /// then computes its M rows from the committed ring without writing it, keeping their inputs.
    GdnConv = 8,
    /// The gated delta rule for one value head: l2norm, gates, fp32 state update, output. In an M-row
    /// program (ST1 = the kept rows, `[M][heads][GDN_HIST_HEAD]`; IN3 = ctrl) the state update is
    /// deferred as GdnConv's: the previous step's first n kept rows are replayed into the state (their
    /// outputs dropped), then the M rows run from it in registers without writing it back. Each row's
    /// output is gated-RMS-normed per head (IN4 = z, W3 = the norm weight: GdnStep's arithmetic), so
    /// out_proj reads it as it is.
    GdnRecur = 9,
    /// k = rope(rmsnorm(k)), v appended to the KV cache at the current position, per KV head.
    AttnKv = 10,
    /// Scores and softmax statistics of one (KV head, partition): q norm + RoPE folded in.
    AttnScores = 11,
    /// Merged softmax, bf16 probabilities times values, for one (KV head, partition).
    AttnPv = 12,
    /// o = bf(sum_p partial_p) per head, times bf(sigmoid(gate)).
    AttnReduceGate = 13,
    /// logits = W . rmsnorm(h) over vocabulary row slices, with each slice's (max, argmax) candidate.
    /// With IN1 (the pruned head, issue 27: a Control row [n, id 0, .., id n-1], ids ascending, host
    /// written), rows are positions in that list: W's rows ids[..n] only, logits by position, each
    /// candidate's id the list's (positions past n score nothing; a unit of none: (NaN, f32::MAX)).
    LmHead = 14,
    /// The greedy token: the best candidate, lowest id on ties.
    Argmax = 15,
    /// Hands the token over (token = next, pos += 1; M rows: pos += M, row 0's commit count = M); the
    /// counters are reset for the next step.
    EndStep = 16,
    /// The fused GDN step for one value head: its q/k/v channels' causal conv (ring of 4 by position) +
    /// SiLU, l2norm, gates, fp32 state update, then the gated RMSNorm of its output (GdnConv, GdnRecur
    /// in one word, the same arithmetic).
    GdnStep = 17,
    /// The MTP drafter's fc (issue 27): h = bf(W . [bf(rmsnorm(e; W1)), bf(rmsnorm(g; W2))]) with e = IN0
    /// (the drafted token's embedding) and g = bf(rmsnorm(IN1; W3)) (a residual stream, the target's or
    /// the drafter's own, through its final norm; a State buffer the host writes before the step): the
    /// embedding half first.
    MtpFc = 18,
    /// (Prefill programs, issue 28.) The gated delta rule for one value head over the step's M rows at
    /// once, by chunks of 64 anchored at the step's first row (the oracle's prompt path, WY form:
    /// `model::prefill::gdn_head_chunked`): each row's l2norm and gates, the chunked recurrence from
    /// the state, which it leaves as the final state (no deferred commit: a prefill keeps every row),
    /// then each row's output gated-RMS-normed per head as GdnRecur's. GdnRecur's operands but ST1 / IN3.
    GdnChunk = 19,
}

impl Opcode {
    pub const ALL: [Opcode; 18] = [
        Opcode::Embed,
        Opcode::GemvNorm,
        Opcode::GemvGateUp,
        Opcode::GemvResidual,
        Opcode::ReduceStore,
        Opcode::ReduceResidual,
        Opcode::GdnConv,
        Opcode::GdnRecur,
        Opcode::AttnKv,
        Opcode::AttnScores,
        Opcode::AttnPv,
        Opcode::AttnReduceGate,
        Opcode::LmHead,
        Opcode::Argmax,
        Opcode::EndStep,
        Opcode::GdnStep,
        Opcode::MtpFc,
        Opcode::GdnChunk,
    ];

    /// Whether an M-row word of this opcode splits its rows over its units (FLAG_ROW_UNITS): its rows
    /// are independent within the word (each reads only what earlier words wrote and writes only its
    /// own row's outputs: the attention words' row m reads the KV rows AttnKv wrote for rows <= m), and
    /// it has no M-row form that reads its weights once for every row (the GEMVs, the head) or carries
    /// a state across the rows (GdnConv, GdnRecur).
    pub fn row_split(self) -> bool {
        matches!(
            self,
            Opcode::Embed
                | Opcode::AttnKv
                | Opcode::AttnScores
                | Opcode::AttnPv
                | Opcode::AttnReduceGate
                | Opcode::Argmax
        )
    }

    pub fn from_u16(v: u16) -> Option<Opcode> {
        Opcode::ALL.iter().copied().find(|o| *o as u16 == v)
    }

    /// `GemvNorm` -> `gemv_norm` (the op's file, device function and kernel names derive from it).
    pub fn snake(self) -> String {
        let name = format!("{self:?}");
        let mut out = String::new();
        for (i, ch) in name.chars().enumerate() {
            if ch.is_uppercase() && i > 0 {
                out.push('_');
            }
            out.push(ch.to_ascii_lowercase());
        }
        out
    }
}

/// Operand slots of a word (indices into `Word::ops`).
pub mod slot {
    pub const W0: usize = 0;
    pub const W1: usize = 1;
    pub const W2: usize = 2;
    pub const IN0: usize = 3;
    pub const IN1: usize = 4;
    pub const IN2: usize = 5;
    pub const OUT0: usize = 6;
    pub const OUT1: usize = 7;
    pub const ST0: usize = 8;
    pub const ST1: usize = 9;
    /// Slots added after the first ten (the fused GDN step's fourth weight and fourth and fifth inputs).
    pub const W3: usize = 10;
    pub const IN3: usize = 11;
    pub const IN4: usize = 12;
    pub const COUNT: usize = 13;
    pub const NAMES: [&str; COUNT] =
        ["w0", "w1", "w2", "in0", "in1", "in2", "out0", "out1", "st0", "st1", "w3", "in3", "in4"];
}

/// An unused operand slot.
pub const NONE: u16 = u16::MAX;
/// A word that waits for nothing.
pub const NO_COUNTER: u32 = u32::MAX;

/// Flag: the word writes fp32 split-K partials (one per k-group) instead of its bf16 epilogue.
pub const FLAG_PARTIAL: u8 = 1;
/// Flag (M-row programs): the word's units split its M rows too. Its units are row-major over (row m,
/// one row's unit: row slice x k-part), so unit u runs row u / (units / M) alone, and the rows run side
/// by side on as many blocks instead of one after another in each unit. Only on opcodes whose rows are
/// independent within the word (`Opcode::row_split`).
pub const FLAG_ROW_UNITS: u8 = 2;
/// Flag (prefill programs): the word runs the step's last row only (the head: a prefill needs the
/// next token after the prompt, not every row's logits). Only on LmHead and Argmax.
pub const FLAG_LAST_ROW: u8 = 4;

/// One instruction. 64 bytes, little-endian, the same layout in `megakernel/abi.cuh` (byte offsets:
/// opcode 0, layer 2, m_rows 4, flags 5, unit_rows 6, rows 8, units 12, wait 16, wait_target 20, signal
/// 24, k_parts 28, ops 30..56, arg0 56, arg1 60).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[repr(C)]
pub struct Word {
    pub opcode: Opcode,
    /// Decoder layer (0-based; the embedding and head use 0).
    pub layer: u16,
    /// Rows of activations processed together (1-8; >1 for speculative verification; a prefill program's
    /// up to `MAX_PREFILL_ROWS`).
    pub m_rows: u8,
    pub flags: u8,
    /// Output rows per unit.
    pub unit_rows: u16,
    /// Output rows of the whole word (the extent the units split).
    pub rows: u32,
    /// Units of work = ceil(rows / unit_rows) * k_parts.
    pub units: u32,
    /// Counter this word waits on (`NO_COUNTER`: none) and the value it waits for.
    pub wait: u32,
    pub wait_target: u32,
    /// Counter each finished unit increments by one.
    pub signal: u32,
    /// Slices of the reduction axis per row slice (1 = no split-K).
    pub k_parts: u16,
    /// Buffer ids by slot (`slot::*`); `NONE` where unused.
    pub ops: [u16; slot::COUNT],
    /// Opcode-specific: k-groups of a partial buffer, attention partitions, ...
    pub arg0: u32,
    pub arg1: u32,
}

const _: () = assert!(std::mem::size_of::<Word>() == 64);
pub const WORD_BYTES: usize = 64;

impl Word {
    pub fn new(opcode: Opcode) -> Word {
        Word {
            opcode,
            layer: 0,
            m_rows: 1,
            flags: 0,
            rows: 1,
            unit_rows: 1,
            k_parts: 1,
            units: 1,
            wait: NO_COUNTER,
            wait_target: 0,
            signal: NO_COUNTER,
            ops: [NONE; slot::COUNT],
            arg0: 0,
            arg1: 0,
        }
    }

    /// The only encoder of the binary form.
    pub fn encode(&self) -> [u8; WORD_BYTES] {
        let mut b = [0u8; WORD_BYTES];
        let mut at = 0;
        let mut put = |bytes: &[u8]| {
            b[at..at + bytes.len()].copy_from_slice(bytes);
            at += bytes.len();
        };
        put(&(self.opcode as u16).to_le_bytes());
        put(&self.layer.to_le_bytes());
        put(&[self.m_rows, self.flags]);
        put(&self.unit_rows.to_le_bytes());
        for v in [self.rows, self.units, self.wait, self.wait_target, self.signal] {
            put(&v.to_le_bytes());
        }
        put(&self.k_parts.to_le_bytes());
        for o in self.ops {
            put(&o.to_le_bytes());
        }
        put(&self.arg0.to_le_bytes());
        put(&self.arg1.to_le_bytes());
        b
    }

    /// The only decoder of the binary form.
    pub fn decode(b: &[u8; WORD_BYTES]) -> Result<Word> {
        let u16_at = |i: usize| u16::from_le_bytes([b[i], b[i + 1]]);
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let op = u16_at(0);
        let opcode = Opcode::from_u16(op).with_context(|| format!("instruction word: unknown opcode {op}"))?;
        let mut ops = [NONE; slot::COUNT];
        for (i, o) in ops.iter_mut().enumerate() {
            *o = u16_at(30 + 2 * i);
        }
        Ok(Word {
            opcode,
            layer: u16_at(2),
            m_rows: b[4],
            flags: b[5],
            unit_rows: u16_at(6),
            rows: u32_at(8),
            units: u32_at(12),
            wait: u32_at(16),
            wait_target: u32_at(20),
            signal: u32_at(24),
            k_parts: u16_at(28),
            ops,
            arg0: u32_at(56),
            arg1: u32_at(60),
        })
    }

    pub fn op(&self, s: usize) -> Option<usize> {
        (self.ops[s] != NONE).then_some(self.ops[s] as usize)
    }

    /// Row slices of the word (units = row_units * k_parts, times M with FLAG_ROW_UNITS).
    pub fn row_units(&self) -> u32 {
        self.rows.div_ceil(self.unit_rows.max(1) as u32)
    }

    /// Units a word has: one row's (row slices x k-parts), times M when its units split the rows.
    pub fn expected_units(&self) -> u64 {
        let m = if self.flags & FLAG_ROW_UNITS != 0 { self.m_rows.max(1) as u64 } else { 1 };
        self.row_units() as u64 * self.k_parts.max(1) as u64 * m
    }

    /// The rows m of an M-row step that unit `u` runs, and its unit among one row's (what `unit_span`
    /// takes): every row and u itself, or with FLAG_ROW_UNITS row u / (units / M) and u mod (units / M),
    /// or with FLAG_LAST_ROW the last row and u.
    pub fn m_span(&self, u: u32) -> (std::ops::Range<usize>, u32) {
        if self.flags & FLAG_LAST_ROW != 0 {
            let m = self.m_rows.max(1) as usize;
            return (m - 1..m, u);
        }
        if self.flags & FLAG_ROW_UNITS == 0 {
            return (0..self.m_rows.max(1) as usize, u);
        }
        let per = (self.row_units() * self.k_parts.max(1) as u32).max(1);
        let m = (u / per) as usize;
        (m..m + 1, u % per)
    }

    /// The (row range, k-part) of unit `u` of one row (`m_span`'s second value): units are row-major
    /// over (row slice, k-part).
    pub fn unit_span(&self, u: u32) -> (std::ops::Range<usize>, u32) {
        let parts = self.k_parts.max(1) as u32;
        let (rs, kp) = (u / parts, u % parts);
        let r0 = (rs as u64 * self.unit_rows as u64) as usize;
        let r1 = ((rs as u64 + 1) * self.unit_rows as u64).min(self.rows as u64) as usize;
        (r0..r1, kp)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum BufKind {
    /// Checkpoint tensor (read-only); `name` is the tensor name.
    Weight,
    /// Per-step activations (bf16 values).
    Activation,
    /// fp32 scratch (split-K partials, attention scores and statistics).
    Scratch,
    /// Per-sequence state that lives across steps (conv rings, recurrent state, KV caches).
    State,
    /// The control block: [pos, token, next_token] (u32), one row per row m.
    Control,
}

impl BufKind {
    /// One row per row m of an M-row step (activations, scratch, the control block); weights and states
    /// are shared by the rows.
    pub fn per_row(self) -> bool {
        matches!(self, BufKind::Activation | BufKind::Scratch | BufKind::Control)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Buffer {
    pub name: String,
    pub kind: BufKind,
    /// Rows x cols elements (activations: one row per M row; vectors: one row).
    pub rows: u64,
    pub cols: u64,
    /// Bytes per element on the GPU.
    pub elem_bytes: u32,
}

impl Buffer {
    pub fn elems(&self) -> u64 {
        self.rows.saturating_mul(self.cols)
    }
}

/// The program of one decode step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Program {
    pub format: u32,
    /// The model it was lowered from (preset name or "checkpoint") and its shape summary.
    pub model: String,
    pub shape: String,
    pub target: Target,
    pub n_counters: u32,
    pub buffers: Vec<Buffer>,
    pub words: Vec<Word>,
}

/// 2 (2026-12-03): four control words a row (the commit count) and the M-row GDN words' deferred commit.
pub const FORMAT: u32 = 2;

impl Program {
    /// RON with one buffer and one word per line, so programs diff line by line.
    pub fn to_ron(&self) -> Result<String> {
        let one = |v: &dyn erased::Ser| v.ron();
        let mut s = String::from("(\n");
        s += &format!(
            "    format: {},\n    model: {},\n    shape: {},\n",
            self.format,
            one(&self.model)?,
            one(&self.shape)?
        );
        s += &format!("    target: {},\n    n_counters: {},\n    buffers: [\n", one(&self.target)?, self.n_counters);
        for b in &self.buffers {
            s += &format!("        {},\n", one(b)?);
        }
        s += "    ],\n    words: [\n";
        for w in &self.words {
            s += &format!("        {},\n", one(w)?);
        }
        s += "    ],\n)\n";
        Ok(s)
    }

    pub fn from_ron(text: &str) -> Result<Program> {
        let p: Program = ron::from_str(text).map_err(|e| crate::error::Error::new(format!("program: {e}")))?;
        if p.format != FORMAT {
            bail!("program: format {} (this engine reads format {FORMAT})", p.format);
        }
        p.target.check()?;
        // Sizes every later step multiplies: bounded before anything computes with them (1 TiB a buffer).
        for b in &p.buffers {
            let bytes = b.rows.checked_mul(b.cols).and_then(|e| e.checked_mul(b.elem_bytes as u64));
            if b.elem_bytes == 0 || b.elem_bytes > 8 || bytes.is_none_or(|x| x > 1 << 40) {
                bail!(
                    "program: buffer {} of {} x {} elements of {} bytes: out of range",
                    b.name,
                    b.rows,
                    b.cols,
                    b.elem_bytes
                );
            }
        }
        // References the listing and every later check index by: in range before anything reads them.
        for (i, w) in p.words.iter().enumerate() {
            if let Some(&id) = w.ops.iter().find(|&&id| id != NONE && id as usize >= p.buffers.len()) {
                bail!("program: word {i} names buffer {id}, the program has {}", p.buffers.len());
            }
            for (what, c) in [("waits on", w.wait), ("signals", w.signal)] {
                if c != NO_COUNTER && c >= p.n_counters {
                    bail!("program: word {i} {what} counter {c}, the program has {}", p.n_counters);
                }
            }
        }
        Ok(p)
    }

    pub fn load(path: &std::path::Path) -> Result<Program> {
        let text = std::fs::read_to_string(path).with_context(|| format!("read {}", path.display()))?;
        Program::from_ron(&text).with_context(|| path.display().to_string())
    }

    /// The binary image the GPU reads: the words back to back.
    pub fn encode_words(&self) -> Vec<u8> {
        self.words.iter().flat_map(|w| w.encode()).collect()
    }

    pub fn buffer_id(&self, name: &str) -> Option<usize> {
        self.buffers.iter().position(|b| b.name == name)
    }
}

/// Compact one-line RON of any serialisable value.
mod erased {
    pub trait Ser {
        fn ron(&self) -> crate::error::Result<String>;
    }
    impl<T: serde::Serialize> Ser for T {
        fn ron(&self) -> crate::error::Result<String> {
            ron::to_string(self).map_err(|e| crate::error::Error::new(format!("serialise program: {e}")))
        }
    }
}

/// The CUDA header with the opcode numbers, slots and the word layout, generated from this module so
/// the numbers are written once. Prepended to every NVRTC unit.
pub fn cuda_header() -> String {
    let mut s = String::from("// GENERATED from src/isa/mod.rs by mk. Do not edit.\n#pragma once\n");
    for op in Opcode::ALL {
        s += &format!("#define OP_{} {}\n", op.snake().to_uppercase(), op as u16);
    }
    for (i, n) in slot::NAMES.iter().enumerate() {
        s += &format!("#define SLOT_{} {i}\n", n.to_uppercase());
    }
    s += &format!(
        "#define OPERAND_NONE {NONE}u\n#define NO_COUNTER {NO_COUNTER}u\n#define FLAG_PARTIAL {FLAG_PARTIAL}u\n#define FLAG_ROW_UNITS {FLAG_ROW_UNITS}u\n#define FLAG_LAST_ROW {FLAG_LAST_ROW}u\n"
    );
    s +=
        "struct Word {\n  unsigned short opcode, layer;\n  unsigned char m_rows, flags;\n  unsigned short unit_rows;\n";
    s += "  unsigned int rows, units, wait, wait_target, signal;\n  unsigned short k_parts;\n";
    s += &format!("  unsigned short ops[{}];\n  unsigned int arg0, arg1;\n}};\n", slot::COUNT);
    s += "static_assert(sizeof(Word) == 64, \"instruction word is 64 bytes\");\n";
    s
}

/// FNV-1a 64 of some bytes, as 16 hex digits: identifies a program or a source tree in a record.
pub fn fnv_hex(parts: &[&[u8]]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for b in *p {
            h ^= *b as u64;
            h = h.wrapping_mul(0x0000_0100_0000_01B3);
        }
    }
    format!("{h:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_opcode_round_trips_through_the_binary_word() {
        for (i, op) in Opcode::ALL.iter().enumerate() {
            let mut w = Word::new(*op);
            w.layer = i as u16;
            w.m_rows = 1 + (i % 8) as u8;
            w.flags = FLAG_PARTIAL;
            w.rows = 1000 + i as u32;
            w.unit_rows = 16;
            w.k_parts = 3;
            w.units = 7;
            w.wait = 5;
            w.wait_target = 99;
            w.signal = 6;
            w.ops = [1, 2, 3, 4, 5, 6, 7, 8, 9, NONE, 11, 12, 13];
            w.arg0 = 0xDEAD_BEEF;
            w.arg1 = 42;
            let back = Word::decode(&w.encode()).unwrap();
            assert_eq!(back, w, "{op:?}");
            assert_eq!(Opcode::from_u16(*op as u16), Some(*op));
        }
        let mut bad = Word::new(Opcode::Embed).encode();
        bad[0] = 0xEE;
        assert!(Word::decode(&bad).unwrap_err().to_string().contains("unknown opcode"));
    }

    #[test]
    fn header_names_every_opcode() {
        let h = cuda_header();
        assert!(h.contains("#define OP_GEMV_RESIDUAL 5\n"));
        assert!(!h.lines().any(|l| l.starts_with("#define OP_") && l.ends_with(" 4")), "opcode 4 is retired");
        assert!(h.contains("#define OP_END_STEP 16\n"));
        assert_eq!(Opcode::GdnRecur.snake(), "gdn_recur");
    }
}
