//! The GPU executors of a program: the discrete-kernel path (every word one launch of its `k_<op>`
//! kernel, the step captured once as a CUDA graph and replayed for every token) and the megakernel
//! (`megakernel.rs`), over one arena (`arena.rs`) and one module compiled from `megakernel/` at
//! startup (`device.rs`). The position, token and next token live in the program's control buffer on
//! the device and are advanced by the `EndStep` kernel, so the graph never changes.
//!
//! Owns: the step (graph and eager), pipelined generation, the host's position mirror and the checks
//! before every step (token range, context room, a sequence stopped or broken). Refuses: allocating
//! after startup; reading the model (weights arrive as named buffers: `arena::Weights`).

pub mod abi;
pub mod arena;
pub mod defines;
pub mod device;
pub mod generate;
pub mod launch;
pub mod layout;
pub mod masked;
pub mod megakernel;
pub mod prefill;
pub mod reads;
mod rows;
pub mod sampler;
pub mod spec;
mod weights;

use std::collections::HashMap;

use cudarc::driver::{CudaFunction, CudaGraph, CudaSlice};

use crate::error::{Error, Result};
pub(crate) use crate::isa::access::{CTRL_COMMIT, CTRL_LEN, CTRL_POS, CTRL_TOKEN};
use crate::isa::weights::Weights;
use crate::isa::{Opcode, Program};
pub use defines::Defines;
pub use device::{compile_check, ptxas_resources, rows_source, source, Gpu};

pub(crate) fn cu<T>(r: std::result::Result<T, cudarc::driver::DriverError>, what: &str) -> Result<T> {
    r.map_err(|e| Error::new(format!("{what}: {e:?}")))
}

/// One program on one GPU: its arena, its module's kernels, its graph once captured.
pub struct GpuExec {
    pub gpu: Gpu,
    prog: Program,
    /// Where compiled kernels are kept (`reads` compiles the read kernel there).
    cache: std::path::PathBuf,
    defines: Defines,
    arena: CudaSlice<u8>,
    base: u64,
    layout: arena::Layout,
    ctx: abi::DevCtx,
    funcs: HashMap<Opcode, CudaFunction>,
    sampler: CudaFunction,
    sample_collect: CudaFunction,
    mega: CudaFunction,
    mega_smem: u32,
    graph: Option<CudaGraph>,
    /// A program with a head mask: the step as two graphs, the body (every word before the lm_head)
    /// and the head (the lm_head on), for `step_overlapped`; captured on first use.
    split: Option<(CudaGraph, CudaGraph)>,
    ctrl: usize,
    logits: usize,
    pub module_hash: String,
    pub arena_bytes: usize,
    stop_token: Option<u32>,
    stopped: bool,
    /// Sampling (temperature > 0) is on: steps check the sampler's status.
    sampling: bool,
    /// The position the next step writes (mirrors the control block; checked before every step).
    pub(super) pos: usize,
    /// A step failed part way (its state is partly written): every step is refused until `reset`.
    broken: bool,
    /// M-row programs: the start of the last verification step while its rows may be rolled back, and
    /// how many of the last step's rows the next step commits into the GDN states (its control block's
    /// CTRL_COMMIT: the deferred commit, `isa::Opcode::GdnConv`; M after a step, 0 after a reset).
    pub(super) rows_start: Option<usize>,
    pub(super) commit: usize,
    /// A pruned drafter's working vocabulary as last set (`set_head_rows`): `reset` writes it back
    /// (it zeroes every other non-weight buffer).
    head_rows: Option<(usize, Vec<f32>)>,
    /// Two events per word, created at startup, for per-word timing.
    events: Vec<(cudarc::driver::CudaEvent, cudarc::driver::CudaEvent)>,
    /// Two pinned host words, allocated at startup: the tokens of consecutive pipelined steps (each
    /// copy records its own event, so reading one waits for that copy only, not for the stream).
    pinned: Vec<cudarc::driver::PinnedHostSlice<u8>>,
    /// One event per pinned slot, recorded after its copy (event tracking is off for graph capture).
    pinned_ev: Vec<cudarc::driver::CudaEvent>,
    /// A program with a head mask: the mask's pinned host copy (`step_overlapped`), allocated at startup.
    mask_pinned: Option<cudarc::driver::PinnedHostSlice<u8>>,
    /// A prefill program: its scratch and kernels (`prefill::Scratch`), allocated at startup.
    prefill: Option<prefill::Scratch>,
    /// The weights (`weights::DeviceWeights`: its own upload and any copy it shares).
    weights: weights::DeviceWeights,
}

impl GpuExec {
    /// Uploads everything the program needs and compiles the kernels with `defines`. The only device
    /// allocation.
    pub fn new(
        gpu: Gpu,
        prog: &Program,
        weights: &dyn Weights,
        cache: &std::path::Path,
        defines: &Defines,
    ) -> Result<GpuExec> {
        Self::build(gpu, prog, weights, None, cache, defines)
    }

    /// As `new`, but reading the weights `other` holds (same name, bytes, storage) from its copy.
    pub fn new_sharing(
        gpu: Gpu,
        prog: &Program,
        weights: &dyn Weights,
        other: &GpuExec,
        cache: &std::path::Path,
        defines: &Defines,
    ) -> Result<GpuExec> {
        Self::build(gpu, prog, weights, Some(&other.weights), cache, defines)
    }

    fn build(
        gpu: Gpu,
        prog: &Program,
        weights: &dyn Weights,
        shared: Option<&weights::DeviceWeights>,
        cache: &std::path::Path,
        defines: &Defines,
    ) -> Result<GpuExec> {
        let attr = |a, what: &str| -> Result<u32> { cu(gpu.ctx.attribute(a), what).map(|v| v as u32) };
        use cudarc::driver::sys::CUdevice_attribute as A;
        let optin = attr(A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, "shared memory per block")?;
        launch::check_smem(
            &gpu.name,
            attr(A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, "shared memory per SM")?,
            optin,
        )?;
        crate::isa::validate::validate(prog)?;
        let m_rows = prog.target.m_rows as usize;
        if let Some(b) = prog.buffers.iter().find(|b| b.kind.per_row() && b.rows != m_rows as u64) {
            crate::bail!("gpu: buffer {} has {} rows, the program's M is {m_rows}", b.name, b.rows);
        }
        let dims = weights.dims();
        if dims.n_heads / dims.n_kv_heads.max(1) > abi::MAX_GROUP as usize {
            crate::bail!(
                "gpu: {} query heads per KV head (the attention kernels handle at most {})",
                dims.n_heads / dims.n_kv_heads,
                abi::MAX_GROUP
            );
        }
        // (less the kernels' static bytes and some slack, so that a word that fits one kernel fits both)
        if let Some(w) = prog.words.iter().find(|w| launch::smem_bytes(prog, w) > optin - 64) {
            crate::bail!(
                "gpu: {:?} needs {} bytes of shared memory (the device allows {optin} per block)",
                w.opcode,
                launch::smem_bytes(prog, w)
            );
        }
        let mega_smem = launch::mega_smem_bytes(prog)?;
        let stream = gpu.stream.clone();
        let dw = weights::DeviceWeights::build(&stream, prog, weights, shared)?;
        let (arena, base, layout, ctx) = arena::build(&stream, prog, weights, &dw, defines.get("GRAPH_STAMPS") != 0)?;
        // An MTP drafter's program (MtpFc) compiles the megakernel's dispatch with its case (MK_MTP: left
        // out of every other program's, where it would move ptxas's allocation; ops/mtp_fc.cuh).
        // A program with a head mask (issue 30) compiles the lm_head's mask (MK_HEAD_MASK), likewise.
        let has = |f: &dyn Fn(&crate::isa::Word) -> bool| prog.words.iter().any(f);
        let mtp =
            has(&|w| w.opcode == Opcode::MtpFc || w.opcode == Opcode::LmHead && w.op(crate::isa::slot::IN1).is_some());
        let mask = has(&|w| w.opcode == Opcode::LmHead && w.op(crate::isa::slot::IN2).is_some());
        // A prefill program (issue 28) compiles its row loop for up to 128 rows without the M-row GEMVs
        // (PREFILL: prefill.cuh, prefill.rs).
        let src = format!(
            "{}{}{}{}",
            if prog.target.prefill { "#define PREFILL 1\n" } else { "" },
            if mtp { "#define MK_MTP 1\n" } else { "" },
            if mask { "#define MK_HEAD_MASK 1\n" } else { "" },
            rows_source(m_rows as u32)
        );
        // a prefill program's GEMM is wgmma's (gemm_bulk.cuh): its module is compiled for sm_90a
        let arch = match (prog.target.prefill, gpu.arch.as_str()) {
            (false, a) => a.to_string(),
            (true, "sm_90") => "sm_90a".to_string(),
            (true, a) => {
                crate::bail!("gpu: a prefill program needs an sm_90 GPU (its GEMM is wgmma's); this one is {a}")
            }
        };
        let (module, module_hash) = gpu.module_for(&arch, &src, cache, defines)?;
        let load = |name: &str, smem: u32| -> Result<CudaFunction> {
            let f = cu(module.load_function(name), &format!("cuModuleGetFunction ({name})"))?;
            if smem > 0 {
                // dynamic shared memory is opted into per kernel (the 48 KiB default counts the
                // kernel's static shared memory too)
                use cudarc::driver::sys::CUfunction_attribute as F;
                cu(
                    f.set_attribute(F::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem as i32),
                    "cuFuncSetAttribute",
                )?;
            }
            Ok(f)
        };
        let mut funcs = HashMap::new();
        for op in Opcode::ALL {
            let smem =
                prog.words.iter().filter(|w| w.opcode == op).map(|w| launch::smem_bytes(prog, w)).max().unwrap_or(0);
            funcs.insert(op, load(&format!("k_{}", op.snake()), smem)?);
        }
        let find = |name: &str| {
            prog.buffer_id(name).ok_or_else(|| Error::new(format!("gpu: the program has no {name} buffer")))
        };
        let ev = || cu(gpu.ctx.new_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT)), "cuEventCreate");
        let events = (0..prog.words.len()).map(|_| Ok((ev()?, ev()?))).collect::<Result<Vec<_>>>()?;
        // SAFETY: bytes have no invalid bit patterns; the slices are written only by device copies.
        let pinned = (0..2)
            .map(|_| cu(unsafe { gpu.ctx.alloc_pinned::<u8>(4) }, "cuMemHostAlloc"))
            .collect::<Result<Vec<_>>>()?;
        let pinned_ev = (0..2).map(|_| ev()).collect::<Result<Vec<_>>>()?;
        // A program with a head mask: a pinned copy of its mask buffer, so that `step_overlapped`'s copy
        // never waits for the body (a copy from pageable memory may).
        let mask_pinned = match prog.buffer_id("head_mask") {
            // SAFETY: bytes have no invalid bit patterns; written by the host before each copy.
            Some(b) => Some(cu(unsafe { gpu.ctx.alloc_pinned::<u8>(layout.places[b].bytes) }, "cuMemHostAlloc")?),
            None => None,
        };
        let prefill = match prog.target.prefill {
            true => Some(prefill::Scratch::new(prog, &module, &stream, gpu.sms, defines.get("GDNC_DV") as usize)?),
            false => None,
        };
        Ok(GpuExec {
            weights: dw,
            prefill,
            prog: prog.clone(),
            cache: cache.to_path_buf(),
            defines: defines.clone(),
            arena_bytes: layout.bytes,
            arena,
            base,
            layout,
            ctx,
            funcs,
            sampler: load("k_sample", 0)?,
            sample_collect: load("k_sample_collect", 0)?,
            mega: load("megakernel", mega_smem)?,
            mega_smem,
            graph: None,
            split: None,
            ctrl: find("ctrl")?,
            logits: find("logits")?,
            module_hash,
            stop_token: None,
            stopped: false,
            sampling: false,
            pos: 0,
            broken: false,
            rows_start: None,
            commit: 0,
            head_rows: None,
            events,
            pinned,
            pinned_ev,
            mask_pinned,
            gpu,
        })
    }

    /// A pruned drafter program's working vocabulary for the next steps (`Program::head_rows`).
    pub fn set_head_rows(&mut self, ids: &[u32]) -> Result<()> {
        let (at, v) = self.prog.head_rows(ids)?;
        self.write(at, &v)?;
        self.head_rows = Some((at, v));
        Ok(())
    }

    /// The vocabulary a token id must lie in: the embedding's rows (a pruned head's logits are fewer).
    pub fn vocab(&self) -> u32 {
        let embed = self.prog.words.iter().find(|w| w.opcode == Opcode::Embed).and_then(|w| w.op(crate::isa::slot::W0));
        embed.map_or(self.prog.buffers[self.logits].cols, |b| self.prog.buffers[b].rows) as u32
    }

    pub fn program(&self) -> &Program {
        &self.prog
    }

    pub fn defines(&self) -> &Defines {
        &self.defines
    }

    /// The graph's launches: (first word, words) per launch (`launch::launch_groups`).
    pub fn launch_groups(&self) -> Vec<(usize, usize)> {
        launch::launch_groups(&self.prog)
    }

    /// Zeroes the per-sequence state, the control block (position 0) and the activations.
    pub fn reset(&mut self) -> Result<()> {
        self.pos = 0;
        self.rows_start = None;
        self.commit = 0;
        self.broken = false;
        for (i, b) in self.prog.buffers.iter().enumerate() {
            if b.kind != crate::isa::BufKind::Weight {
                let p = self.layout.places[i];
                let stream = self.gpu.stream.clone();
                let mut v = self.arena.slice_mut(p.off..p.off + p.bytes);
                cu(stream.memset_zeros(&mut v), "cuMemsetD8")?;
            }
        }
        // The sampler's sticky status and counts (its parameters stay), the stopped flag (the stop
        // token stays), the GEMV launches' ticket pairs (zero after every complete launch; zeroed here
        // too, so that a launch cut short can never leave later ones skipping units).
        self.clear_sampler()?;
        self.zero(self.layout.stop + 4, self.layout.stop + 8, "cuMemsetD8")?;
        self.zero(self.layout.tickets, self.layout.tickets + 8 * self.prog.words.len(), "cuMemsetD8")?;
        self.stopped = false;
        if let Some((at, v)) = self.head_rows.clone() {
            self.write(at, &v)?;
        }
        Ok(())
    }

    pub(super) fn write_token(&mut self, token: u32) -> Result<()> {
        let at = self.layout.places[self.ctrl].off + 4 * CTRL_TOKEN;
        self.put(at, &token.to_le_bytes(), "write token")
    }

    /// One decode step on `token`; returns the next token (greedy, or sampled). `eager`: launch word
    /// by word (debug captures, `after_word` after each), else replay the CUDA graph (captured on first
    /// use).
    pub fn step(
        &mut self,
        token: u32,
        eager: bool,
        after_word: impl FnMut(&GpuExec, usize) -> Result<()>,
    ) -> Result<u32> {
        self.check(token)?;
        let r = self.step_unchecked(token, eager, after_word);
        let t = self.advance(r, 1)?;
        self.stopped = Some(t) == self.stop_token;
        Ok(t)
    }

    /// The device-side stop: the step that produces `stop` is the sequence's last (EndStep sets the
    /// stopped flag, every later kernel returns at once, so a replay queued past it changes nothing;
    /// the host then refuses steps until `reset`). None: no stop token.
    pub fn set_stop(&mut self, stop: Option<u32>) -> Result<()> {
        if self.stopped {
            crate::bail!("gpu: the sequence stopped at its stop token; reset it before setting another");
        }
        if stop.is_some() && self.prog.target.m_rows > 1 {
            crate::bail!(
                "gpu: the device-side stop takes one-row steps (this program's M is {})",
                self.prog.target.m_rows
            );
        }
        let vocab = self.vocab();
        if let Some(t) = stop.filter(|&t| t >= vocab) {
            crate::bail!("stop token id {t} is out of range (vocabulary {vocab})");
        }
        let w: Vec<u8> = [stop.map_or(0, |t| t + 1), 0].iter().flat_map(|x: &u32| x.to_le_bytes()).collect();
        self.put(self.layout.stop, &w, "write the stop token")?;
        self.sync()?;
        self.stop_token = stop;
        self.stopped = false;
        Ok(())
    }

    fn step_unchecked(
        &mut self,
        token: u32,
        eager: bool,
        mut after_word: impl FnMut(&GpuExec, usize) -> Result<()>,
    ) -> Result<u32> {
        self.write_token(token)?;
        if eager {
            for i in 0..self.prog.words.len() {
                if self.prog.words[i].opcode == Opcode::EndStep {
                    self.launch_sample()?;
                }
                self.launch_word(i)?;
                after_word(self, i)?;
            }
        } else {
            if self.graph.is_none() {
                self.capture()?;
            }
            if let Some(g) = &self.graph {
                cu(g.launch(), "cuGraphLaunch")?;
            }
        }
        let ctrl = self.read_u32(self.ctrl, 0, CTRL_LEN)?;
        self.check_sampler()?;
        Ok(ctrl[CTRL_TOKEN])
    }

    /// Captures the step as one CUDA graph: the launch groups in order, the sampler between the
    /// argmax and EndStep (it may replace the token).
    fn capture(&mut self) -> Result<()> {
        let groups = self.launch_groups();
        self.graph = Some(self.capture_groups(&groups)?);
        Ok(())
    }

    /// `groups` (launch groups, in order) as one CUDA graph.
    fn capture_groups(&mut self, groups: &[(usize, usize)]) -> Result<CudaGraph> {
        let stream = self.gpu.stream.clone();
        use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
        cu(stream.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), "begin capture")?;
        let mut err = None;
        for &(first, n) in groups {
            let r = if self.prog.words[first].opcode == Opcode::EndStep {
                self.launch_sample().and_then(|_| self.launch_words(first, n))
            } else {
                self.launch_words(first, n)
            };
            if let Err(e) = r {
                err = Some(e);
                break;
            }
        }
        let g = cu(stream.end_capture(CUgraphInstantiate_flags(0)), "end capture")?;
        if let Some(e) = err {
            return Err(e);
        }
        g.ok_or_else(|| Error::new("graph capture produced no graph"))
    }

    /// `n` steps from `token` with one graph replay kept in flight ahead of the host: the graph reads
    /// its token from the device's control block (EndStep wrote it), so step i + 1 is queued before
    /// step i's token is read; each token reaches the host by an async copy into pinned memory and that
    /// copy's event, never a stream synchronisation. Returns the generated tokens (fewer after a stop).
    pub fn generate(&mut self, token: u32, n: usize) -> Result<Vec<u32>> {
        self.check(token)?;
        self.room(n, "steps")?;
        let r = self.generate_unchecked(token, n).and_then(|v| self.check_sampler().map(|_| v));
        self.advance_by(r)
    }

    fn generate_unchecked(&mut self, token: u32, n: usize) -> Result<Vec<u32>> {
        if n == 0 {
            return Ok(Vec::new());
        }
        if self.graph.is_none() {
            // The first step captures the graph (and synchronises once).
            let t = self.step_unchecked(token, false, |_, _| Ok(()))?;
            if Some(t) == self.stop_token {
                return Ok(vec![t]);
            }
            let mut rest = self.generate_queued(n - 1)?;
            rest.insert(0, t);
            return Ok(rest);
        }
        self.write_token(token)?;
        self.generate_queued(n)
    }

    /// `n` replays on the token already in the control block, one in flight ahead of each read.
    fn generate_queued(&mut self, n: usize) -> Result<Vec<u32>> {
        let stream = self.gpu.stream.clone();
        let next = self.layout.places[self.ctrl].off + 4 * CTRL_TOKEN;
        let mut out = Vec::with_capacity(n);
        for i in 0..n {
            if let Some(g) = &self.graph {
                cu(g.launch(), "cuGraphLaunch")?;
            }
            let v = self.arena.slice(next..next + 4);
            cu(stream.memcpy_dtoh(&v, &mut self.pinned[i % 2]), "token copy")?;
            cu(self.pinned_ev[i % 2].record(&stream), "cuEventRecord (token copy)")?;
            if i > 0 {
                let t = self.pinned_token((i - 1) % 2)?;
                out.push(t);
                // The stop: replay i is already queued; it finds the stopped flag and changes nothing.
                if Some(t) == self.stop_token {
                    self.sync()?;
                    return Ok(out);
                }
            }
        }
        if n > 0 {
            out.push(self.pinned_token((n - 1) % 2)?);
        }
        Ok(out)
    }

    /// The token in pinned slot `k`, after waiting for the copy that wrote it (its event only).
    fn pinned_token(&self, k: usize) -> Result<u32> {
        cu(self.pinned_ev[k].synchronize(), "cuEventSynchronize (token copy)")?;
        let b = cu(self.pinned[k].as_slice(), "token slot")?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// A token id and a position the kernels can take (they do not check: the host does); one-row
    /// stepping only (an M > 1 program steps with `step_rows`).
    fn check(&self, token: u32) -> Result<()> {
        if self.prog.target.m_rows != 1 {
            crate::bail!(
                "gpu: an M = {} program runs verification steps only (step_rows: M tokens, one step per launch)",
                self.prog.target.m_rows
            );
        }
        self.check_token(token)
    }

    fn check_token(&self, token: u32) -> Result<()> {
        if self.broken {
            crate::bail!("gpu: an earlier step failed part way; reset the sequence before stepping again");
        }
        if self.stopped {
            crate::bail!("gpu: the sequence stopped at its stop token; reset it before stepping again");
        }
        let vocab = self.vocab();
        if token >= vocab {
            crate::bail!("token id {token} is out of range (vocabulary {vocab})");
        }
        if self.pos >= self.prog.target.max_context as usize {
            crate::bail!("context overflow: position {} >= max context {}", self.pos, self.prog.target.max_context);
        }
        Ok(())
    }

    /// `n` more positions (`what`: steps or rows) fit the max context.
    fn room(&self, n: usize, what: &str) -> Result<()> {
        if self.pos + n > self.prog.target.max_context as usize {
            crate::bail!(
                "context overflow: {n} {what} from position {} pass max context {}",
                self.pos,
                self.prog.target.max_context
            );
        }
        Ok(())
    }

    /// After a checked step: the position moves on when it succeeded; a failure leaves the state
    /// partly written, so the sequence is marked broken until `reset`.
    fn advance<T>(&mut self, r: Result<T>, positions: usize) -> Result<T> {
        match r {
            Ok(v) => {
                self.pos += positions;
                Ok(v)
            }
            Err(e) => {
                self.broken = true;
                Err(e)
            }
        }
    }

    /// After checked steps (a megakernel launch, a pipelined decode): the position moves on by the
    /// steps run, the sequence is stopped when the last was the stop token; a failure marks it broken.
    fn advance_by(&mut self, r: Result<Vec<u32>>) -> Result<Vec<u32>> {
        let v = self.advance(r, 0)?;
        self.pos += v.len();
        self.stopped = self.stop_token.is_some() && v.last().copied() == self.stop_token;
        Ok(v)
    }

    /// One step launched word by word with an event pair around each launch; returns each word's
    /// time in ms (the launch inventory: one kernel per word).
    pub fn time_words(&mut self, token: u32) -> Result<Vec<f32>> {
        self.check(token)?;
        let r = self.time_words_unchecked(token);
        self.advance(r, 1)
    }

    fn time_words_unchecked(&mut self, token: u32) -> Result<Vec<f32>> {
        self.write_token(token)?;
        self.timed_words()
    }

    /// Launches word `i` alone and waits for it (op-by-op checks: the caller owns the state).
    pub fn run_word(&mut self, i: usize) -> Result<()> {
        self.launch_word(i)?;
        self.sync()
    }

    /// Jumps the sequence to position `pos` without computing it (the caches below it keep whatever
    /// they hold, zeros after `reset`): for timing, later steps cost what they would at that context
    /// (their values mean nothing); for a drafter, whose position the speculation loop chooses (its
    /// caches below `pos` hold the rows it wrote there).
    pub fn seek(&mut self, pos: usize) -> Result<()> {
        if pos >= self.prog.target.max_context as usize {
            crate::bail!("context overflow: seek to {pos} >= max context {}", self.prog.target.max_context);
        }
        let at = self.layout.places[self.ctrl].off + 4 * CTRL_POS;
        self.put(at, &(pos as u32).to_le_bytes(), "write position")?;
        self.sync()?;
        self.pos = pos;
        // (an M-row program: nothing pending to commit or roll back after a jump)
        self.rows_start = None;
        self.commit = 0;
        Ok(())
    }

    /// The control block's position (read from the device).
    pub fn pos(&self) -> Result<usize> {
        Ok(self.read_u32(self.ctrl, 0, 1)?[0] as usize)
    }
}
