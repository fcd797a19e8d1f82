//! The CPU interpreter of programs: executes a compiled program unit by unit with the CPU reference's
//! per-unit functions, either in program order or in a random order that respects only the declared
//! dependencies (a seeded shuffler). Matching the direct reference forward bit for bit in random
//! orders is the proof that the program's dependencies are sufficient, before any GPU runs it.
//!
//! Owns: buffers (all values as f32; bf16 buffers hold bf16 values), counters, the unit semantics of
//! every opcode (the same contract as `isa::access`). Refuses: running a program whose waits are not
//! met in program order.
//!
//! M rows (a verification step over positions pos .. pos + M): each unit runs its rows in order, row m
//! on the row-m view of the activation, scratch and control buffers (as the GPU's row views), so row m
//! computes exactly what a single-row step at position pos + m computes.

pub mod prefill;
mod rollback;
pub mod spec;
mod units;

use crate::bail;
use crate::error::Result;
use crate::isa::access::{CTRL_COMMIT, CTRL_NEXT, CTRL_POS, CTRL_TOKEN};
use crate::isa::{slot, BufKind, Opcode, Program, Word, NO_COUNTER};
use crate::model::checkpoint::Checkpoint;
use crate::model::config::ModelConfig;
use crate::model::forward as fw;
use crate::model::ops::{Activations, Linear};
use crate::model::synth::Rng;
use crate::model::tensors::{Dt, Role};
use crate::model::weights::linear;

/// A weight buffer's view.
enum Wt<'a> {
    Lin(Linear<'a>),
    Vec(Vec<f32>),
    None,
}

/// In which order units run.
#[derive(Debug, Clone, Copy)]
pub enum Order {
    /// Words in program order, units in index order.
    Program,
    /// Any unit whose word's wait is met, picked uniformly at random (seeded).
    Shuffled(u64),
}

pub struct Interp<'a> {
    prog: &'a Program,
    cfg: ModelConfig,
    ws: Vec<Wt<'a>>,
    pub bufs: Vec<Vec<f32>>,
    /// M > 1: the rows of each per-row buffer (activation, scratch, control), one vector a row; the
    /// active row's vector is swapped into `bufs` (its slot here holds an empty placeholder).
    rows: Vec<Vec<Vec<f32>>>,
    active: usize,
    counters: Vec<u32>,
    ctrl: usize,
    logits: usize,
    rng: Rng,
    /// Debug mode (program order only): each word's output buffer after the word, per step.
    pub capture: bool,
    pub captured: Vec<(usize, Vec<f32>)>,
    /// Wall time spent in each word, accumulated over steps run in program order.
    pub word_ns: Vec<u64>,
    /// The start position of the last M-row step while its rows may still be rolled back (rollback.rs).
    rows_start: Option<usize>,
}

impl<'a> Interp<'a> {
    /// An interpreter for a program the validator accepts.
    pub fn new(prog: &'a Program, ck: &'a Checkpoint) -> Result<Interp<'a>> {
        crate::isa::validate::validate(prog)?;
        Interp::new_unchecked(prog, ck)
    }

    /// Skips the validator: only for negative controls that run a deliberately broken program.
    pub fn new_unchecked(prog: &'a Program, ck: &'a Checkpoint) -> Result<Interp<'a>> {
        let specs = ck.specs();
        let mut ws = Vec::new();
        let mut bufs = Vec::new();
        for b in &prog.buffers {
            if b.kind == BufKind::Weight {
                let Some(s) = specs.iter().find(|s| s.name == b.name) else {
                    bail!("interpreter: the program needs tensor {} which the checkpoint does not have", b.name);
                };
                let shape: Vec<usize> = ck.shape(&s.name).to_vec();
                let cols: usize = shape[1..].iter().product::<usize>().max(if shape.len() == 1 { shape[0] } else { 1 });
                let rows = if shape.len() == 1 { 1 } else { shape[0] };
                if rows as u64 != b.rows || cols as u64 != b.cols {
                    bail!("interpreter: tensor {} is {shape:?} but the program says [{}, {}]", b.name, b.rows, b.cols);
                }
                let is_matrix = matches!(s.role, Role::Linear { .. } | Role::Embedding | Role::LmHead);
                ws.push(if is_matrix {
                    Wt::Lin(linear(ck, s.name.trim_end_matches(".weight")))
                } else {
                    Wt::Vec(ck.f32_vec(&s.name))
                });
                debug_assert!(s.dtype != Dt::F32 || !is_matrix);
                bufs.push(Vec::new());
            } else {
                ws.push(Wt::None);
                bufs.push(vec![0f32; b.elems() as usize]);
            }
        }
        let m = prog.target.m_rows as usize;
        let mut rows = vec![Vec::new(); bufs.len()];
        for (i, b) in prog.buffers.iter().enumerate() {
            if m > 1 && b.kind.per_row() {
                if b.rows != m as u64 {
                    bail!("interpreter: buffer {} has {} rows for M = {m}", b.name, b.rows);
                }
                let cols = b.cols as usize;
                rows[i] = (0..m).map(|r| if r == 0 { Vec::new() } else { vec![0f32; cols] }).collect();
                bufs[i].truncate(cols);
            }
        }
        let find =
            |n: &str| prog.buffer_id(n).ok_or_else(|| crate::error::Error::new(format!("interpreter: no buffer {n}")));
        Ok(Interp {
            prog,
            cfg: ck.config.clone(),
            ws,
            bufs,
            rows,
            active: 0,
            counters: vec![0; prog.n_counters as usize],
            ctrl: find("ctrl")?,
            logits: find("logits")?,
            rng: Rng::new(0),
            capture: false,
            captured: Vec::new(),
            word_ns: vec![0; prog.words.len()],
            rows_start: None,
        })
    }

    /// A pruned drafter program's working vocabulary for the next steps (`Program::head_rows`).
    pub fn set_head_rows(&mut self, ids: &[u32]) -> Result<()> {
        let (at, v) = self.prog.head_rows(ids)?;
        self.bufs[at] = v;
        Ok(())
    }

    /// The head's masks for the next steps, one per row (M of them; a row's `None` unmasked), or none
    /// (empty): written into the program's `head_mask` buffer (`Program::head_mask` says what a mask
    /// is and refuses a bad one; a program compiled without a head mask refuses them all). A masked
    /// row's LmHead units score only the allowed ids, write -inf for the others and propose the best
    /// allowed one. They hold until set again.
    pub fn set_head_masks(&mut self, masks: Vec<Option<Vec<u32>>>) -> Result<()> {
        let (at, v) = self.prog.head_mask(&masks)?;
        let cols = self.prog.buffers[at].cols as usize;
        let active = self.active;
        for (r, row) in v.chunks_exact(cols).enumerate() {
            self.select(r);
            self.bufs[at].copy_from_slice(row);
        }
        self.select(active);
        Ok(())
    }

    /// The model's vocabulary (the head's rows; what a head mask covers).
    pub fn vocab(&self) -> usize {
        self.cfg.vocab
    }

    /// The program this interpreter runs.
    pub fn program(&self) -> &Program {
        self.prog
    }

    /// The position of row 0 (between steps the active row is 0).
    pub fn pos(&self) -> usize {
        self.bufs[self.ctrl][CTRL_POS] as usize
    }

    /// Makes row `m` the one `bufs` holds of every per-row buffer (M > 1).
    fn select(&mut self, m: usize) {
        if m == self.active {
            return;
        }
        for (b, r) in self.bufs.iter_mut().zip(self.rows.iter_mut()) {
            if !r.is_empty() {
                std::mem::swap(b, &mut r[self.active]);
                std::mem::swap(b, &mut r[m]);
            }
        }
        self.active = m;
    }

    /// Buffer `b` whole: its M rows in order (M = 1: the buffer).
    pub fn full(&self, b: usize) -> Vec<f32> {
        if self.rows[b].is_empty() {
            return self.bufs[b].clone();
        }
        let mut v = Vec::new();
        for m in 0..self.rows[b].len() {
            v.extend_from_slice(if m == self.active { &self.bufs[b] } else { &self.rows[b][m] });
        }
        v
    }

    /// The logits of every row of the last step, row after row (bf16 values).
    pub fn logits_rows(&self) -> Vec<f32> {
        self.full(self.logits)
    }

    /// One verification step over M rows: token m at position pos + m, for every m; returns each
    /// row's greedy next token. The position moves on by M.
    pub fn step_rows(&mut self, tokens: &[u32], order: Order) -> Result<Vec<u32>> {
        let pos = self.set_rows(tokens)?;
        self.rows_start = None;
        match order {
            Order::Program => self.run_in_order()?,
            Order::Shuffled(seed) => {
                self.rng = Rng::new(seed ^ (pos as u64).wrapping_mul(0x9E37_79B9));
                self.run_shuffled()?
            }
        }
        self.rows_start = Some(pos);
        Ok(self.row_tokens())
    }

    /// Checks an M-row step's tokens and positions and puts token m and position pos + m in row m's
    /// control block; returns pos (row 0's).
    fn set_rows(&mut self, tokens: &[u32]) -> Result<usize> {
        let m = self.prog.target.m_rows as usize;
        if tokens.len() != m {
            bail!("interpreter: {} tokens for an M = {m} program", tokens.len());
        }
        let pos = self.pos();
        for (r, &t) in tokens.iter().enumerate() {
            fw::check_input(&self.cfg, pos + r, self.prog.target.max_context as usize, t)?;
        }
        for (r, &t) in tokens.iter().enumerate() {
            self.select(r);
            self.bufs[self.ctrl][CTRL_POS] = (pos + r) as f32;
            self.bufs[self.ctrl][CTRL_TOKEN] = t as f32;
        }
        self.select(0);
        Ok(pos)
    }

    /// Every row's token after a step (EndStep handed each row its next).
    fn row_tokens(&mut self) -> Vec<u32> {
        let m = self.prog.target.m_rows as usize;
        let mut next = Vec::with_capacity(m);
        for r in 0..m {
            self.select(r);
            next.push(self.bufs[self.ctrl][CTRL_TOKEN] as u32);
        }
        self.select(0);
        next
    }

    /// The logits of the last step (bf16 values; row 0's at M > 1: `logits_rows`).
    pub fn logits(&self) -> &[f32] {
        &self.bufs[self.logits]
    }

    /// A state or activation buffer by name (of a per-row buffer at M > 1, row 0: `buffer_full`).
    pub fn buffer(&self, name: &str) -> Option<&[f32]> {
        self.prog.buffer_id(name).map(|i| self.bufs[i].as_slice())
    }

    /// A buffer by name, all its rows (M > 1: a copy of every row in order).
    pub fn buffer_full(&self, name: &str) -> Option<Vec<f32>> {
        self.prog.buffer_id(name).map(|i| self.full(i))
    }

    /// Runs one decode step on `token`; returns the greedy next token.
    pub fn step(&mut self, token: u32, order: Order) -> Result<u32> {
        if self.prog.target.m_rows != 1 {
            bail!("interpreter: an M = {} program steps with step_rows", self.prog.target.m_rows);
        }
        fw::check_input(&self.cfg, self.pos(), self.prog.target.max_context as usize, token)?;
        self.bufs[self.ctrl][CTRL_TOKEN] = token as f32;
        match order {
            Order::Program => self.run_in_order()?,
            Order::Shuffled(seed) => {
                self.rng = Rng::new(seed ^ (self.pos() as u64).wrapping_mul(0x9E37_79B9));
                self.run_shuffled()?
            }
        }
        // EndStep handed the token over: ctrl[token] = next.
        Ok(self.bufs[self.ctrl][CTRL_TOKEN] as u32)
    }

    fn run_in_order(&mut self) -> Result<()> {
        self.captured.clear();
        for (i, w) in self.prog.words.iter().enumerate() {
            if w.wait != NO_COUNTER && self.counters[w.wait as usize] < w.wait_target {
                bail!(
                    "interpreter: word {i} ({:?}) waits for counter {} >= {} in program order, which is at {}",
                    w.opcode,
                    w.wait,
                    w.wait_target,
                    self.counters[w.wait as usize]
                );
            }
            let t = std::time::Instant::now();
            for u in 0..w.units {
                self.unit(i, u);
            }
            self.word_ns[i] += t.elapsed().as_nanos() as u64;
            if self.capture {
                if let Some(b) = Interp::output_of(w) {
                    self.captured.push((i, self.full(b)));
                }
            }
        }
        Ok(())
    }

    /// Runs every unit of word `i` now, ignoring its wait (for op-by-op checks in program order).
    pub fn run_word(&mut self, i: usize) {
        for u in 0..self.prog.words[i].units {
            self.unit(i, u);
        }
    }

    /// Sets the token the next step (or `run_word` of the embedding) reads.
    pub fn set_token(&mut self, token: u32) {
        self.bufs[self.ctrl][CTRL_TOKEN] = token as f32;
    }

    /// The buffer a word's result is read from in debug captures (the KV append writes only the
    /// caches, compared once as final state rather than whole after every step).
    pub fn output_of(w: &Word) -> Option<usize> {
        match w.opcode {
            Opcode::EndStep | Opcode::AttnKv => None,
            _ => w.op(slot::OUT0),
        }
    }

    fn run_shuffled(&mut self) -> Result<()> {
        let words = &self.prog.words;
        let mut waiting: Vec<Vec<usize>> = vec![Vec::new(); self.counters.len()];
        let mut ready: Vec<(usize, u32)> = Vec::new();
        let mut left: u64 = 0;
        for (i, w) in words.iter().enumerate() {
            left += w.units as u64;
            if w.wait == NO_COUNTER || w.wait_target == 0 {
                ready.extend((0..w.units).map(|u| (i, u)));
            } else {
                waiting[w.wait as usize].push(i);
            }
        }
        while let Some(pick) = (!ready.is_empty()).then(|| (self.rng.next_u64() % ready.len() as u64) as usize) {
            let (i, u) = ready.swap_remove(pick);
            let end = words[i].opcode == Opcode::EndStep;
            let t = std::time::Instant::now();
            let c = self.unit(i, u);
            self.word_ns[i] += t.elapsed().as_nanos() as u64;
            left -= 1;
            if end {
                continue;
            }
            let v = self.counters[c];
            for &j in &waiting[c] {
                if words[j].wait_target == v {
                    ready.extend((0..words[j].units).map(|u| (j, u)));
                }
            }
        }
        if left > 0 {
            bail!("interpreter: {left} units never became ready (a wait is never satisfied)");
        }
        Ok(())
    }

    /// The fp8 linears' activations (`Fp8Dynamic`: fast mode, W8A8, as `Weights::with_numerics`; the MTP
    /// head's stay exact mode, as there).
    pub fn set_activations(&mut self, act: Activations) {
        for (b, w) in self.prog.buffers.iter().zip(self.ws.iter_mut()) {
            if let Wt::Lin(l) = w {
                if !b.name.starts_with("mtp.") {
                    l.act = act;
                }
            }
        }
    }

    fn lin(&self, w: &Word, s: usize) -> &Linear<'a> {
        match w.op(s).map(|b| &self.ws[b]) {
            Some(Wt::Lin(l)) => l,
            _ => panic!(
                "interpreter: operand {} of {:?} is not a matrix (the validator checks this)",
                slot::NAMES[s],
                w.opcode
            ),
        }
    }
    fn vecw(&self, w: &Word, s: usize) -> &[f32] {
        match w.op(s).map(|b| &self.ws[b]) {
            Some(Wt::Vec(v)) => v,
            _ => panic!(
                "interpreter: operand {} of {:?} is not a vector (the validator checks this)",
                slot::NAMES[s],
                w.opcode
            ),
        }
    }
    fn input(&self, w: &Word, s: usize) -> &[f32] {
        w.op(s).map(|b| self.bufs[b].as_slice()).unwrap_or(&[])
    }
    fn out(&mut self, w: &Word, s: usize) -> &mut Vec<f32> {
        let b = w.op(s).unwrap_or(usize::MAX);
        &mut self.bufs[b]
    }

    /// Executes unit `u` of word `i` (its rows in order, or its one row: `Word::m_span`) and signals its
    /// counter; returns the counter.
    fn unit(&mut self, i: usize, u: u32) -> usize {
        let w = self.prog.words[i];
        let m = w.m_rows as usize;
        if w.opcode == Opcode::EndStep {
            // ORDER: every row's position moves on by M and its token becomes its next.
            for r in 0..m {
                self.select(r);
                let ctrl = &mut self.bufs[self.ctrl];
                ctrl[CTRL_TOKEN] = ctrl[CTRL_NEXT];
                ctrl[CTRL_POS] += m as f32;
            }
            self.select(0);
            if m > 1 {
                // the next step keeps every row of this one unless a rollback says otherwise
                self.bufs[self.ctrl][CTRL_COMMIT] = m as f32;
            }
            self.counters.iter_mut().for_each(|c| *c = 0);
            return w.signal as usize;
        }
        if w.opcode == Opcode::GdnChunk {
            // every row at once (units.rs)
            self.gdn_chunk_rows(&w, u);
            self.counters[w.signal as usize] += 1;
            return w.signal as usize;
        }
        if matches!(w.opcode, Opcode::GdnConv | Opcode::GdnRecur) && w.op(slot::ST1).is_some() {
            // the deferred forms take the step's rows themselves (units.rs)
            self.gdn_deferred(&w, u);
            self.counters[w.signal as usize] += 1;
            return w.signal as usize;
        }
        let (rows, u) = w.m_span(u); // every row, or the one row of a FLAG_ROW_UNITS unit
        for r in rows {
            self.select(r);
            self.unit_row(&w, u);
        }
        self.select(0);
        self.counters[w.signal as usize] += 1;
        w.signal as usize
    }
}
