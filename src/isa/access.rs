//! What each opcode reads and writes: for one unit of a word, the element ranges of each buffer it
//! touches. This is the contract the validator proves things about and the executors must honour.
//!
//! Owns: the per-opcode footprint. Refuses: values (weights are read-only and never tracked; the KV
//! caches are tracked by column, across all positions, because the written position is known only at
//! run time: conservative, so any two words touching the same heads of a cache must be ordered).

use super::{slot, Opcode, Program, Word, FLAG_PARTIAL};

/// Attention head dimension and GDN head dimension: fixed for every supported config.
pub const ATTN_HEAD_DIM: usize = 256;
pub const GDN_HEAD_DIM: usize = 128;

/// The release's max_position_embeddings: no sequence is longer (checked before anything is allocated).
pub const MAX_POSITIONS: usize = 262_144;
/// Elements of the reduction axis per k-group. ORDER: a GEMV row's dot product is the sequential sum,
/// over k-groups, of each group's partial. Split-K units own whole k-groups and store one partial per
/// group, so a fixed-order reduce of the partials gives the same bits as the unsplit product.
pub const KGROUP: usize = 1024;
/// Rows of an fp8 GEMV unit come in whole groups of this many (the GPU reads a chunk of 32 rows x one
/// k-group at a time: `exec::gpu::layout`); fp8 weights have a multiple of 32 rows.
pub const CHUNK_ROWS: usize = 32;

/// KV positions per attention partition. ORDER: softmax statistics and the weighted sum of values are
/// taken per partition (positions in order), then merged over partitions in order. A fixed size (not a
/// fixed count) keeps the numerics independent of the GPU's SM count.
pub const ATTN_PART: usize = 256;

/// bf16 elements of one value head's kept row in GdnRecur's history (its state buffer ST1, `[M][heads]`
/// of these): the head's k (its q/k group's conv output), its v, then b and a. What the deferred commit
/// replays: the state update needs no q.
pub const GDN_HIST_HEAD: usize = 2 * GDN_HEAD_DIM + 2;

/// Control block elements.
pub const CTRL_POS: usize = 0;
pub const CTRL_TOKEN: usize = 1;
pub const CTRL_NEXT: usize = 2;
/// Row 0 of an M-row program (M > 1): how many of the previous step's rows the GDN words commit before
/// this step's (the deferred commit of `Opcode::GdnConv` / `GdnRecur`). EndStep sets it to M (the next
/// step keeps every row); a rollback lowers it (and the position) before the next step.
pub const CTRL_COMMIT: usize = 3;
pub const CTRL_LEN: usize = 4;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access {
    pub buf: usize,
    pub lo: u64,
    pub hi: u64,
    pub write: bool,
    /// Row m of a per-row buffer (activation, scratch, control): the access must lie in that row.
    pub row: Option<u32>,
    /// A KV cache write at position pos + m of the step (AttnKv's row m): tracked by column over every
    /// position (the position is known at run time only), but two writes at different m of one step
    /// are different positions, so they never overlap.
    pub at_pos_row: Option<u32>,
}

struct Acc<'a> {
    w: &'a Word,
    p: &'a Program,
    out: Vec<Access>,
}

impl Acc<'_> {
    fn add(&mut self, s: usize, lo: usize, hi: usize, write: bool, row: Option<u32>, at_pos_row: Option<u32>) {
        if let Some(b) = self.w.op(s) {
            if lo < hi {
                self.out.push(Access { buf: b, lo: lo as u64, hi: hi as u64, write, row, at_pos_row });
            }
        }
    }
    /// A write of columns [lo, hi) of the KV cache in slot `s` at position pos + m.
    fn wr_pos(&mut self, s: usize, lo: usize, hi: usize, m: usize) {
        self.add(s, lo, hi, true, None, Some(m as u32));
    }
    fn r(&mut self, s: usize, lo: usize, hi: usize) {
        self.add(s, lo, hi, false, None, None);
    }
    fn wr(&mut self, s: usize, lo: usize, hi: usize) {
        self.add(s, lo, hi, true, None, None);
    }
    /// Columns of the buffer in slot `s` (its row length).
    fn cols(&self, s: usize) -> usize {
        self.w.op(s).and_then(|b| self.p.buffers.get(b)).map(|b| b.cols as usize).unwrap_or(0)
    }
    /// Row `m` of an activation buffer, columns [c0, c1).
    fn row(&mut self, s: usize, m: usize, c0: usize, c1: usize, write: bool) {
        let cols = self.cols(s);
        self.add(s, m * cols + c0, m * cols + c1, write, Some(m as u32), None);
    }
    /// Split-K partials `[m][group][rows]` of the groups of k-part `kp`, rows `rs` (row m of the partial
    /// buffer starts at m times its columns: the buffer is shared by words of several shapes).
    fn partials(&mut self, m: usize, rs: &std::ops::Range<usize>, kp: u32, write: bool) {
        let (groups, parts, rows) = (self.w.arg0 as usize, self.w.k_parts as usize, self.w.rows as usize);
        let (g0, g1) = (kp as usize * groups / parts, (kp as usize + 1) * groups / parts);
        for g in g0..g1 {
            self.row(slot::OUT0, m, g * rows + rs.start, g * rows + rs.end, write);
        }
    }
}

/// The k-groups of k-part `kp` for a reduction of `k` elements split into `parts`.
pub fn k_groups(k: usize, parts: u32, kp: u32) -> std::ops::Range<usize> {
    let groups = k.div_ceil(KGROUP);
    (kp as usize * groups / parts as usize)..((kp as usize + 1) * groups / parts as usize)
}

/// The footprint of unit `u` of `w` in program `p`.
pub fn unit_accesses(p: &Program, w: &Word, u: u32) -> Vec<Access> {
    let mut a = Acc { w, p, out: Vec::new() };
    let (ms, u) = w.m_span(u);
    let (rs, kp) = w.unit_span(u);
    let partial = w.flags & FLAG_PARTIAL != 0;
    let (d, dk) = (ATTN_HEAD_DIM, GDN_HEAD_DIM);
    for m in ms {
        match w.opcode {
            Opcode::Embed => {
                a.row(slot::IN0, m, CTRL_TOKEN, CTRL_TOKEN + 1, false);
                a.row(slot::OUT0, m, rs.start, rs.end, true);
            }
            Opcode::GemvNorm | Opcode::GemvGateUp | Opcode::GemvResidual => {
                let k = a.cols(slot::IN0);
                a.row(slot::IN0, m, 0, k, false);
                if partial {
                    a.partials(m, &rs, kp, true);
                } else {
                    if w.opcode == Opcode::GemvResidual {
                        a.row(slot::OUT0, m, rs.start, rs.end, false);
                    }
                    a.row(slot::OUT0, m, rs.start, rs.end, true);
                }
            }
            Opcode::MtpFc => {
                let k = a.cols(slot::IN0);
                a.row(slot::IN0, m, 0, k, false);
                a.r(slot::IN1, 0, k);
                a.row(slot::OUT0, m, rs.start, rs.end, true);
            }
            Opcode::ReduceStore | Opcode::ReduceResidual => {
                let (groups, rows) = (w.arg0 as usize, w.rows as usize);
                for g in 0..groups {
                    a.row(slot::IN0, m, g * rows + rs.start, g * rows + rs.end, false);
                }
                if w.opcode == Opcode::ReduceResidual {
                    a.row(slot::OUT0, m, rs.start, rs.end, false);
                }
                a.row(slot::OUT0, m, rs.start, rs.end, true);
            }
            Opcode::GdnConv => {
                a.row(slot::IN1, m, CTRL_POS, CTRL_POS + 1, false);
                a.row(slot::IN0, m, rs.start, rs.end, false);
                a.r(slot::ST0, 4 * rs.start, 4 * rs.end);
                a.wr(slot::ST0, 4 * rs.start, 4 * rs.end);
                a.row(slot::OUT0, m, rs.start, rs.end, true);
                if w.op(slot::ST1).is_some() {
                    // the deferred commit: row 0's commit count, row m's kept input (its channels)
                    a.row(slot::IN1, 0, CTRL_COMMIT, CTRL_COMMIT + 1, false);
                    let cols = w.rows as usize;
                    a.r(slot::ST1, m * cols + rs.start, m * cols + rs.end);
                    a.wr(slot::ST1, m * cols + rs.start, m * cols + rs.end);
                }
            }
            Opcode::GdnRecur | Opcode::GdnChunk => {
                // rows = value heads; arg0 = q/k heads. (GdnChunk: a unit takes every row at once, the
                // same footprint over the rows.)
                let (hv, hk) = (w.rows as usize, w.arg0.max(1) as usize);
                let key_dim = hk * dk;
                for j in rs.clone() {
                    let qk = j / (hv / hk).max(1);
                    a.row(slot::IN0, m, qk * dk, (qk + 1) * dk, false);
                    a.row(slot::IN0, m, key_dim + qk * dk, key_dim + (qk + 1) * dk, false);
                    a.row(slot::IN0, m, 2 * key_dim + j * dk, 2 * key_dim + (j + 1) * dk, false);
                    a.row(slot::IN1, m, j, j + 1, false);
                    a.row(slot::IN2, m, j, j + 1, false);
                    a.row(slot::IN4, m, j * dk, (j + 1) * dk, false);
                    a.r(slot::ST0, j * dk * dk, (j + 1) * dk * dk);
                    a.wr(slot::ST0, j * dk * dk, (j + 1) * dk * dk);
                    a.row(slot::OUT0, m, j * dk, (j + 1) * dk, true);
                    if w.op(slot::ST1).is_some() {
                        // the deferred commit: row 0's position and commit count, row m's kept inputs of head j
                        a.row(slot::IN3, 0, CTRL_POS, CTRL_POS + 1, false);
                        a.row(slot::IN3, 0, CTRL_COMMIT, CTRL_COMMIT + 1, false);
                        let at = (m * hv + j) * GDN_HIST_HEAD;
                        a.r(slot::ST1, at, at + GDN_HIST_HEAD);
                        a.wr(slot::ST1, at, at + GDN_HIST_HEAD);
                    }
                }
            }
            Opcode::GdnStep => {
                // rows = value heads; arg0 = q/k heads. The conv ring's (ST1) q/k channels are recorded
                // for the group's first unit only, which writes them: the group's other units read the
                // ring slots pos + 1 .. pos + 3 (mod 4) of those channels, which no unit of this word
                // writes (the step writes slot pos % 4); a footprint by channel cannot say so.
                let (hv, hk) = (w.rows as usize, w.arg0.max(1) as usize);
                let (key_dim, ratio) = (hk * dk, (hv / hk).max(1));
                a.row(slot::IN3, m, CTRL_POS, CTRL_POS + 1, false);
                for j in rs.clone() {
                    let qk = j / ratio;
                    let chans = [qk * dk, key_dim + qk * dk, 2 * key_dim + j * dk];
                    for (i, c0) in chans.into_iter().enumerate() {
                        a.row(slot::IN0, m, c0, c0 + dk, false);
                        if i == 2 || j % ratio == 0 {
                            a.r(slot::ST1, 4 * c0, 4 * (c0 + dk));
                            a.wr(slot::ST1, 4 * c0, 4 * (c0 + dk));
                        }
                    }
                    a.row(slot::IN1, m, j, j + 1, false);
                    a.row(slot::IN2, m, j, j + 1, false);
                    a.row(slot::IN4, m, j * dk, (j + 1) * dk, false);
                    a.r(slot::ST0, j * dk * dk, (j + 1) * dk * dk);
                    a.wr(slot::ST0, j * dk * dk, (j + 1) * dk * dk);
                    a.row(slot::OUT0, m, j * dk, (j + 1) * dk, true);
                }
            }
            Opcode::AttnKv => {
                a.row(slot::IN2, m, CTRL_POS, CTRL_POS + 1, false);
                for h in rs.clone() {
                    a.row(slot::IN0, m, h * d, (h + 1) * d, false);
                    a.row(slot::IN1, m, h * d, (h + 1) * d, false);
                    a.wr_pos(slot::ST0, h * d, (h + 1) * d, m);
                    a.wr_pos(slot::ST1, h * d, (h + 1) * d, m);
                }
            }
            Opcode::AttnScores | Opcode::AttnPv => {
                // unit = (kv head, partition); arg0 = partitions, arg1 = query heads per KV head.
                let (parts, group) = (w.arg0.max(1) as usize, w.arg1 as usize);
                let (kvh, part) = (rs.start / parts, rs.start % parts);
                let max_ctx = parts * ATTN_PART;
                a.row(
                    if w.opcode == Opcode::AttnScores { slot::IN1 } else { slot::IN2 },
                    m,
                    CTRL_POS,
                    CTRL_POS + 1,
                    false,
                );
                for h in kvh * group..(kvh + 1) * group {
                    let srow = h * max_ctx + part * ATTN_PART;
                    if w.opcode == Opcode::AttnScores {
                        a.row(slot::IN0, m, 2 * d * h, 2 * d * h + d, false);
                        a.row(slot::OUT0, m, srow, srow + ATTN_PART, true);
                        a.row(slot::OUT1, m, (h * parts + part) * 2, (h * parts + part) * 2 + 2, true);
                        a.r(slot::ST0, kvh * d, (kvh + 1) * d);
                    } else {
                        a.row(slot::IN0, m, srow, srow + ATTN_PART, false);
                        a.row(slot::IN1, m, h * parts * 2, (h + 1) * parts * 2, false);
                        a.row(slot::OUT0, m, (h * parts + part) * d, (h * parts + part + 1) * d, true);
                        a.r(slot::ST1, kvh * d, (kvh + 1) * d);
                    }
                }
            }
            Opcode::AttnReduceGate => {
                let parts = w.arg0.max(1) as usize;
                a.row(slot::IN2, m, CTRL_POS, CTRL_POS + 1, false);
                for h in rs.clone() {
                    a.row(slot::IN0, m, h * parts * d, (h + 1) * parts * d, false);
                    a.row(slot::IN1, m, 2 * d * h + d, 2 * d * (h + 1), false);
                    a.row(slot::OUT0, m, h * d, (h + 1) * d, true);
                }
            }
            Opcode::LmHead => {
                let k = a.cols(slot::IN0);
                a.row(slot::IN0, m, 0, k, false);
                if w.op(slot::IN1).is_some() {
                    // the pruned head: the row count and the unit's ids (its logits by list position)
                    a.row(slot::IN1, m, 0, 1, false);
                    a.row(slot::IN1, m, 1 + rs.start, 1 + rs.end, false);
                }
                if w.op(slot::IN2).is_some() {
                    // the head mask: the row's flag and the bits of the unit's ids
                    a.row(slot::IN2, m, 0, 1, false);
                    a.row(slot::IN2, m, 1 + rs.start / 16, 1 + rs.end.div_ceil(16), false);
                }
                a.row(slot::OUT0, m, rs.start, rs.end, true);
                a.row(slot::OUT1, m, 2 * u as usize, 2 * u as usize + 2, true);
            }
            Opcode::Argmax => {
                a.row(slot::IN0, m, 0, 2 * w.arg0 as usize, false);
                a.row(slot::OUT0, m, CTRL_NEXT, CTRL_NEXT + 1, true);
            }
            Opcode::EndStep => {
                // one unit over every control row (position += M, token = next, per row)
                a.row(slot::IN0, m, 0, CTRL_LEN, false);
                a.row(slot::IN0, m, 0, CTRL_LEN, true);
            }
        }
    }
    a.out
}
