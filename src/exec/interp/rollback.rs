//! Rollback by replay on the interpreter (issue 27, item 5), the program-level form of
//! `model::rollback`: a verification step runs an M-row program over the last accepted token and the
//! drafts (positions pos .. pos + M); when only the first n rows are kept, the state must be what n
//! one-token steps from the step's start give, bit for bit. Attention needs nothing (row r writes its KV
//! at pos + r and reads positions <= pos + r: entries past the kept rows are written again before any
//! read). The GDN layers do: `verify_rows` keeps the conv rings and recurrent states at the step's start
//! (the frozen state) and, for every GDN layer, each row's inputs to the two words that update those
//! states (GdnConv's qkv, GdnRecur's b and a: the ring of per-step inputs), and `commit_rows` restores
//! the frozen state and re-runs exactly those two words over rows 0 .. n - 1, layer by layer, row by
//! row: the units of the step's own words with the step's own unit functions, so the replay is the
//! step's arithmetic on the same inputs. A GPU engine replays the same words from the same saved rows.
//!
//! Owns: `InterpRound`, `verify_rows`, `commit_rows`. Refuses: programs without split GDN words (M = 1
//! programs fuse the GDN step and keep no per-row inputs), shuffled orders (the inputs are taken as each
//! word is reached in program order), a commit of 0 rows or more than the step fed, a round other
//! than the last step's.

use super::Interp;
use crate::bail;
use crate::error::Result;
use crate::isa::access::CTRL_POS;
use crate::isa::{slot, Opcode};

/// One GDN layer's words and its rows' inputs to them (every row of the buffer, rows in order).
struct GdnRows {
    conv: usize,
    recur: usize,
    qkv: Vec<f32>,
    b: Vec<f32>,
    a: Vec<f32>,
}

/// What a verification step keeps to roll back: its start position, the GDN states at its start
/// (buffer, contents) and every GDN layer's per-row inputs.
pub struct InterpRound {
    start: usize,
    rows: usize,
    frozen: Vec<(usize, Vec<f32>)>,
    layers: Vec<GdnRows>,
}

impl InterpRound {
    /// The rows the step fed (M).
    pub fn rows(&self) -> usize {
        self.rows
    }
}

impl Interp<'_> {
    /// One verification step over M rows (`step_rows` in program order) that keeps what `commit_rows`
    /// needs; returns each row's greedy next token and the round.
    pub fn verify_rows(&mut self, tokens: &[u32]) -> Result<(Vec<u32>, InterpRound)> {
        let words = &self.prog.words;
        if words.iter().any(|w| w.opcode == Opcode::GdnStep) {
            bail!("interpreter: rollback needs the split GDN lowering (an M > 1 program); this one fuses the GDN step");
        }
        // Each GdnConv with the GdnRecur that follows it (the same layer).
        let mut pairs = Vec::new();
        for (i, w) in words.iter().enumerate().filter(|(_, w)| w.opcode == Opcode::GdnConv) {
            let Some(j) = (i + 1..words.len()).find(|&j| words[j].opcode == Opcode::GdnRecur) else {
                bail!("interpreter: GdnConv word {i} has no GdnRecur after it");
            };
            if words[j].layer != w.layer {
                bail!(
                    "interpreter: GdnConv word {i} (layer {}) and GdnRecur word {j} (layer {})",
                    w.layer,
                    words[j].layer
                );
            }
            pairs.push((i, j));
        }
        let state = |w: usize| words[w].op(slot::ST0).expect("the validator checks GDN words' states");
        let frozen: Vec<(usize, Vec<f32>)> =
            pairs.iter().flat_map(|&(c, r)| [state(c), state(r)]).map(|b| (b, self.bufs[b].clone())).collect();
        let start = self.pos();
        self.set_rows(tokens)?;
        let mut layers = Vec::with_capacity(pairs.len());
        let mut next = pairs.iter().peekable();
        for i in 0..self.prog.words.len() {
            // The layer's inputs as its words are reached: qkv before the conv, b and a before the
            // recurrence (the projections that wrote them ran earlier in program order).
            if let Some(&&(c, r)) = next.peek() {
                let input = |it: &Interp, w: usize, s: usize| it.full(it.prog.words[w].op(s).expect("validated"));
                if i == c {
                    let qkv = input(self, c, slot::IN0);
                    layers.push(GdnRows { conv: c, recur: r, qkv, b: Vec::new(), a: Vec::new() });
                } else if i == r {
                    let l = layers.last_mut().expect("the conv came first");
                    (l.b, l.a) = (input(self, r, slot::IN1), input(self, r, slot::IN2));
                    next.next();
                }
            }
            for u in 0..self.prog.words[i].units {
                self.unit(i, u);
            }
        }
        let m = tokens.len();
        Ok((self.row_tokens(), InterpRound { start, rows: m, frozen, layers }))
    }

    /// Keeps the first `n` rows of `round` (1 ..= M): the GDN states become those of n one-token steps
    /// from the round's start, the position start + n. The caller feeds the next step's tokens.
    pub fn commit_rows(&mut self, round: InterpRound, n: usize) -> Result<()> {
        self.commit_rows_with(round, n, true)
    }

    /// NEGATIVE CONTROL for the rollback checks: the replay without restoring the frozen state first
    /// (the rows' updates applied twice). Never for use.
    #[doc(hidden)]
    pub fn commit_rows_without_restore(&mut self, round: InterpRound, n: usize) -> Result<()> {
        self.commit_rows_with(round, n, false)
    }

    fn commit_rows_with(&mut self, round: InterpRound, n: usize, restore: bool) -> Result<()> {
        if n == 0 || n > round.rows {
            bail!("interpreter: commit of {n} rows of a {}-row verification step (1 ..= {})", round.rows, round.rows);
        }
        if self.pos() != round.start + round.rows {
            bail!(
                "interpreter: commit of a stale round (it started at position {}; the interpreter is at {})",
                round.start,
                self.pos()
            );
        }
        if restore {
            for (b, v) in round.frozen {
                self.bufs[b] = v;
            }
        }
        // ORDER: layer by layer, rows in order, the conv before the recurrence (the step's own order of
        // these state updates: each unit runs its rows in order).
        for l in &round.layers {
            let (conv, recur) = (self.prog.words[l.conv], self.prog.words[l.recur]);
            let buf = |w: &crate::isa::Word, s: usize| w.op(s).expect("validated");
            let (qkv, b, a) = (buf(&conv, slot::IN0), buf(&recur, slot::IN1), buf(&recur, slot::IN2));
            for r in 0..n {
                self.select(r);
                self.bufs[self.ctrl][CTRL_POS] = (round.start + r) as f32;
                let row = |v: &[f32], cols: usize| v[r * cols..(r + 1) * cols].to_vec();
                self.bufs[qkv] = row(&l.qkv, self.prog.buffers[qkv].cols as usize);
                for u in 0..conv.units {
                    self.unit_row(&conv, u);
                }
                self.bufs[b] = row(&l.b, self.prog.buffers[b].cols as usize);
                self.bufs[a] = row(&l.a, self.prog.buffers[a].cols as usize);
                for u in 0..recur.units {
                    self.unit_row(&recur, u);
                }
            }
        }
        // Every row's position as a step from start + n leaves it (step_rows reads row 0's).
        for r in 0..round.rows {
            self.select(r);
            self.bufs[self.ctrl][CTRL_POS] = (round.start + n + r) as f32;
        }
        self.select(0);
        Ok(())
    }
}
