//! The execution paths an experiment can run, behind one `Engine` interface: a fresh sequence state,
//! one token per step, captures for diffs, final states. The GPU paths plug in here (issues 5, 6).
//!
//! Owns: the CPU engines and the reasons a path cannot run here. Refuses: timing (the runner times).

use super::diff::{StepCapture, Tensor};
use super::spec::PathName;
use crate::error::Result;
use crate::exec::interp::{Interp, Order};
use crate::isa::{BufKind, Program};
use crate::model::checkpoint::Checkpoint;
use crate::model::forward::{step, State, Trace, Weights};
use crate::model::ops::argmax;

pub trait Engine {
    /// Runs one token; returns the greedy next token and, when asked, what the diffs compare.
    fn step(&mut self, token: u32, capture: bool) -> Result<(u32, Option<StepCapture>)>;
    /// The per-sequence state after the steps so far (conv, recurrent, KV up to the position).
    fn states(&self) -> Vec<Tensor>;
    /// Time per instruction per step (ns, by word index), where the path can measure it. May run
    /// the path (the sequence's state is not used afterwards).
    fn word_ns(&mut self) -> Option<Vec<u64>> {
        None
    }
    /// A timeline of one more step (raw stamps, see `timeline::decode`), where the path records one
    /// (the megakernel always, the graph with GRAPH_STAMPS=1). Moves the state on, like `word_ns`.
    fn timeline(&mut self) -> Option<Result<Vec<u64>>> {
        None
    }
    /// Timing only: jump to position `pos` without computing the context (see `GpuExec::seek`).
    fn seek(&mut self, _pos: usize) -> Result<()> {
        crate::bail!("this path cannot seek (workload.seek is for the GPU paths)")
    }
    /// The prompt in one prefill from the empty state (issue 28): the greedy first token, and how the path
    /// prefills; None where the path has no prefill (its prompt then goes through decode steps).
    fn prefill(&mut self, _tokens: &[u32]) -> Option<Result<(u32, &'static str)>> {
        None
    }
}

pub use crate::exec::gpu::device::gpu;

/// Why a path cannot run on this machine, or None when it can.
pub fn unavailable(p: PathName) -> Option<String> {
    if !p.is_gpu() {
        return None;
    }
    match (gpu(), p) {
        (None, _) => Some("no GPU on this machine (no NVIDIA driver in /proc/driver/nvidia)".into()),
        _ => None,
    }
}

/// The CPU reference forward.
pub struct ReferenceEngine<'a> {
    w: &'a Weights<'a>,
    st: State,
}

impl<'a> ReferenceEngine<'a> {
    pub fn new(w: &'a Weights<'a>, max_context: usize) -> ReferenceEngine<'a> {
        ReferenceEngine { w, st: State::new(&w.cfg, max_context) }
    }
}

fn bf16_tensor(name: String, layer: u32, cols: usize, data: Vec<f32>) -> Tensor {
    Tensor { name, layer, cols, bf16: true, data }
}

impl Engine for ReferenceEngine<'_> {
    fn step(&mut self, token: u32, capture: bool) -> Result<(u32, Option<StepCapture>)> {
        let mut trace = Trace::default();
        let logits = step(self.w, &mut self.st, token, capture.then_some(&mut trace))?;
        let next = argmax(&logits) as u32;
        let cap = capture.then(|| StepCapture {
            instructions: Vec::new(),
            hidden: trace
                .hidden
                .into_iter()
                .enumerate()
                .map(|(l, h)| bf16_tensor("hidden".into(), l as u32, h.len(), h))
                .collect(),
            logits: Some(bf16_tensor("logits".into(), 0, logits.len(), logits)),
            token: next,
        });
        Ok((next, cap))
    }

    fn prefill(&mut self, tokens: &[u32]) -> Option<Result<(u32, &'static str)>> {
        let how = "one prefill of the prompt (model::prefill: T rows layer by layer, the GDN by chunks of 64)";
        Some(crate::model::prefill::prefill(self.w, &mut self.st, tokens).map(|l| (argmax(&l) as u32, how)))
    }

    fn states(&self) -> Vec<Tensor> {
        let cfg = &self.w.cfg;
        let mut out = Vec::new();
        for (l, c) in self.st.conv.iter().enumerate() {
            out.push(bf16_tensor(format!("conv_state.{l}"), l as u32, 4, c.clone()));
        }
        for (l, s) in self.st.recurrent.iter().enumerate() {
            out.push(Tensor {
                name: format!("recurrent_state.{l}"),
                layer: l as u32,
                cols: cfg.gdn_v_dim,
                bf16: false,
                data: s.clone(),
            });
        }
        let used = self.st.pos * cfg.attn_kv_dim();
        for (l, (k, v)) in self.st.k_cache.iter().zip(&self.st.v_cache).enumerate() {
            out.push(bf16_tensor(format!("k_cache.{l}"), l as u32, cfg.attn_kv_dim(), k[..used].to_vec()));
            out.push(bf16_tensor(format!("v_cache.{l}"), l as u32, cfg.attn_kv_dim(), v[..used].to_vec()));
        }
        out
    }
}

/// A step capture of a program path from each word's output (in program order), the logits and the
/// chosen token. The hidden state after a layer is h after the last word of that layer writing it.
pub fn program_capture(p: &Program, outputs: Vec<(usize, Vec<f32>)>, logits: Vec<f32>, next: u32) -> StepCapture {
    let h = p.buffer_id("h");
    let mut hidden: Vec<Tensor> = Vec::new();
    let mut instructions = Vec::new();
    for (wi, data) in outputs {
        let w = &p.words[wi];
        let b = Interp::output_of(w).unwrap_or(0);
        let buf = &p.buffers[b];
        let t = Tensor {
            name: buf.name.clone(),
            layer: w.layer as u32,
            cols: buf.cols as usize,
            bf16: buf.elem_bytes == 2 && buf.kind != BufKind::Scratch,
            data,
        };
        if Some(b) == h && w.opcode != crate::isa::Opcode::Embed {
            let ht = bf16_tensor("hidden".into(), w.layer as u32, t.cols, t.data.clone());
            match hidden.last_mut() {
                Some(last) if last.layer == ht.layer => *last = ht,
                _ => hidden.push(ht),
            }
        }
        instructions.push((wi, format!("{:?}", w.opcode), t));
    }
    StepCapture {
        instructions,
        hidden,
        logits: Some(bf16_tensor("logits".into(), 0, logits.len(), logits)),
        token: next,
    }
}

/// The state buffers of a program path, the KV caches cut to the positions written so far.
fn program_states(p: &Program, pos: usize, mut read: impl FnMut(usize, usize) -> Option<Vec<f32>>) -> Vec<Tensor> {
    let mut out = Vec::new();
    for (i, b) in p.buffers.iter().enumerate().filter(|(_, b)| b.kind == BufKind::State) {
        let is_cache = b.name.starts_with("k_cache") || b.name.starts_with("v_cache");
        let n = if is_cache { pos * b.cols as usize } else { b.elems() as usize };
        let Some(data) = read(i, n) else { continue };
        let layer = b.name.rsplit('.').next().and_then(|s| s.parse().ok()).unwrap_or(0);
        let cols = if b.name.starts_with("recurrent") { 128 } else { b.cols as usize };
        out.push(Tensor { name: b.name.clone(), layer, cols, bf16: b.elem_bytes == 2, data });
    }
    out
}

/// A GPU path on a device upload (each engine resets the state): the discrete-kernel CUDA graph, or
/// the megakernel (one cooperative launch per step). Debug captures give every instruction's output:
/// the graph launches word by word and reads each word's; one megakernel launch cannot show them, so
/// from a snapshot of the state before the step, word k's output is what a launch of the step's first
/// k + 1 words wrote (the snapshot put back before each), then the whole step runs from the snapshot.
pub struct GpuEngine<'a> {
    d: &'a std::cell::RefCell<crate::exec::gpu::GpuExec>,
    mega: bool,
    debug: bool,
    /// The graph path's prefill program (workload.prefill; sharing the weights of `d`), if any.
    pub prefill: Option<&'a std::cell::RefCell<crate::exec::gpu::GpuExec>>,
}

impl<'a> GpuEngine<'a> {
    pub fn new(d: &'a std::cell::RefCell<crate::exec::gpu::GpuExec>, mega: bool, debug: bool) -> Result<GpuEngine<'a>> {
        d.borrow_mut().reset()?;
        Ok(GpuEngine { d, mega, debug, prefill: None })
    }
}

/// Rows of a step of the prefill programs `mk run` uses (two GDN chunks' worth would be 128; 64 keeps
/// the steps anchored at the chunks of a prompt from position 0).
pub const PREFILL_ROWS: u32 = 64;

impl Engine for GpuEngine<'_> {
    fn prefill(&mut self, tokens: &[u32]) -> Option<Result<(u32, &'static str)>> {
        let p = self.prefill?;
        let how =
            "prefill steps of 64 rows on the graph path (the GEMM, the chunked GDN), the remainder as decode steps";
        let run = || -> Result<(u32, &'static str)> {
            let (mut p, mut d) = (p.borrow_mut(), self.d.borrow_mut());
            let m = p.program().target.m_rows as usize;
            let bulk = tokens.len() / m * m;
            p.reset()?;
            let mut next = 0;
            for s in tokens[..bulk].chunks(m) {
                next = p.prefill_rows(s)?;
            }
            if bulk < tokens.len() {
                d.reset()?;
                if bulk > 0 {
                    d.take_state(&p)?;
                }
                for &t in &tokens[bulk..] {
                    next = d.step(t, false, |_, _| Ok(()))?;
                }
            }
            Ok((next, how))
        };
        Some(run())
    }

    fn step(&mut self, token: u32, capture: bool) -> Result<(u32, Option<StepCapture>)> {
        let mut d = self.d.borrow_mut();
        let mut outputs = Vec::new();
        let per_word = capture && self.debug;
        let next = match (self.mega, per_word) {
            (false, false) => d.step(token, false, |_, _| Ok(()))?,
            (false, true) => d.step(token, true, |d, i| {
                if let Some(b) = Interp::output_of(&d.program().words[i]) {
                    outputs.push((i, d.read(b, d.program().buffers[b].elems() as usize)?));
                }
                Ok(())
            })?,
            (true, _) => {
                if per_word {
                    let before = d.save_state()?;
                    for k in 0..d.program().words.len() - 1 {
                        let Some(b) = Interp::output_of(&d.program().words[k]) else { continue };
                        d.load_state(&before)?;
                        d.step_mega_prefix(token, k + 1)?;
                        outputs.push((k, d.read(b, d.program().buffers[b].elems() as usize)?));
                    }
                    d.load_state(&before)?;
                }
                d.step_mega(token)?
            }
        };
        if !capture {
            return Ok((next, None));
        }
        let logits = d.logits()?;
        Ok((next, Some(program_capture(d.program(), outputs, logits, next))))
    }

    fn states(&self) -> Vec<Tensor> {
        let d = self.d.borrow();
        let pos = d.pos().unwrap_or(0);
        program_states(d.program(), pos, |b, n| d.read(b, n).ok())
    }

    fn seek(&mut self, pos: usize) -> Result<()> {
        self.d.borrow_mut().seek(pos)
    }

    /// The graph: times one more step word by word (token 0, at the position after the sequence): it
    /// moves the state on, so the runner calls it only at the end of a repetition, before a fresh engine.
    fn word_ns(&mut self) -> Option<Vec<u64>> {
        let mut d = self.d.borrow_mut();
        if self.mega || !one_more_step_fits(&d)? {
            return None;
        }
        let ms = d.time_words(0).ok()?;
        Some(ms.iter().map(|m| (*m as f64 * 1e6) as u64).collect())
    }

    /// The timeline of one more step: the megakernel's always, the graph's when its kernels stamp their
    /// units (GRAPH_STAMPS=1).
    fn timeline(&mut self) -> Option<Result<Vec<u64>>> {
        let mut d = self.d.borrow_mut();
        if !(self.mega || d.graph_stamps()) || !one_more_step_fits(&d)? {
            return None;
        }
        Some(if self.mega { d.step_mega_timeline(0) } else { d.step_graph_timeline(0) }.map(|(_, raw)| raw))
    }
}

/// Whether one more (measurement) step fits the upload's context; None if the position is unreadable.
fn one_more_step_fits(d: &crate::exec::gpu::GpuExec) -> Option<bool> {
    Some(d.pos().ok()? + 1 < d.program().target.max_context as usize)
}

/// The CPU interpreter of the compiled program.
pub struct InterpEngine<'a> {
    it: Interp<'a>,
    prog: &'a Program,
    ck: &'a Checkpoint,
    /// Run units in a random dependency-respecting order (seeded), in every pass, the diffs too.
    order: Option<u64>,
    /// Capture every word's output (needs program order; then the order is not shuffled).
    debug: bool,
}

impl<'a> InterpEngine<'a> {
    pub fn new(
        prog: &'a Program,
        ck: &'a Checkpoint,
        shuffle_seed: Option<u64>,
        debug: bool,
    ) -> Result<InterpEngine<'a>> {
        Ok(InterpEngine { it: Interp::new(prog, ck)?, prog, ck, order: shuffle_seed, debug })
    }
}

impl Engine for InterpEngine<'_> {
    fn prefill(&mut self, tokens: &[u32]) -> Option<Result<(u32, &'static str)>> {
        let how =
            "prefill programs of 64 rows (the interpreter, exec::interp::prefill; the remainder one of its length)";
        let ctx = self.prog.target.max_context;
        Some(
            crate::exec::interp::prefill::prefill(
                self.ck,
                tokens,
                PREFILL_ROWS,
                ctx,
                Order::Program,
                Default::default(),
            )
            .map(|p| (p.next, how)),
        )
    }

    fn step(&mut self, token: u32, capture: bool) -> Result<(u32, Option<StepCapture>)> {
        // Per-word captures need program order (a word's output is complete when the next starts);
        // otherwise a shuffle seed shuffles every step, the compared ones included.
        let per_word = capture && self.debug;
        self.it.capture = per_word;
        let order = match (per_word, self.order) {
            (false, Some(seed)) => Order::Shuffled(seed ^ self.it.pos() as u64),
            _ => Order::Program,
        };
        let next = self.it.step(token, order)?;
        let cap = capture.then(|| {
            let outputs: Vec<(usize, Vec<f32>)> = self.it.captured.drain(..).collect();
            program_capture(self.prog, outputs, self.it.logits().to_vec(), next)
        });
        Ok((next, cap))
    }

    fn states(&self) -> Vec<Tensor> {
        program_states(self.prog, self.it.pos(), |b, n| {
            self.it.buffer(&self.prog.buffers[b].name).map(|d| d[..n].to_vec())
        })
    }

    fn word_ns(&mut self) -> Option<Vec<u64>> {
        let steps = self.it.pos().max(1) as u64;
        Some(self.it.word_ns.iter().map(|t| t / steps).collect())
    }
}
