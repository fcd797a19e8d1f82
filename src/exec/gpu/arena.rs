//! The device arena: ONE allocation at startup holding every buffer of the program but its weights
//! (activations, scratch, state; the weights are `weights::DeviceWeights`', maybe shared with another
//! program of the model), the buffer tables the kernels index by id (weights' addresses included), the
//! RoPE table, the program, and the control words of the megakernel, the timeline, the sampler, the
//! device-side stop and the GEMV tickets. This module never reads a checkpoint.
//!
//! Owns: the layout, byte access to the arena. Refuses: allocating after startup.

use cudarc::driver::{CudaSlice, CudaStream, DevicePtr};

use super::abi::{DevCtx, SB_WORDS};
use super::{cu, GpuExec};
use crate::error::Result;
use crate::isa::weights::Weights;
use crate::isa::{BufKind, Program};
use crate::model::numerics::{bf16_to_f32, f32_to_bf16};

const ALIGN: usize = 256;

/// Where a buffer lives in the arena and how it is stored there.
#[derive(Clone, Copy, Debug)]
pub struct Place {
    pub off: usize,
    pub bytes: usize,
    pub scale_off: Option<usize>,
    /// Bytes per element; for matrices a storage code: 1 fp8 with bf16-valued scales below 2^8, 2 bf16,
    /// 3 fp8 with other scales (the `wbytes` table the kernels read; the kernels treat 1 and 3 alike
    /// since the tensor-core GEMV, which scales each tile's fp32 sum).
    pub elem_bytes: u8,
    /// The absolute device address of the buffer and of its scales (0: none): a weight's lies in the
    /// weights' allocation (`weights::DeviceWeights`, maybe another program's), the rest in the arena.
    pub addr: u64,
    pub scale_addr: u64,
}

/// Offsets of everything in the arena.
pub struct Layout {
    pub places: Vec<Place>,
    pub prog: usize,
    /// The megakernel's counters, unit tickets, error word and its step, finished-step count.
    pub mk: usize,
    pub mk_stride: usize,
    pub mk_tokens: usize,
    /// Each word's first timeline slot; the stamps (four u64 per unit of a step).
    pub tl_base: usize,
    pub tl: usize,
    pub total_units: usize,
    pub sampler: usize,
    pub stop: usize,
    pub tickets: usize,
    pub bytes: usize,
}

/// The buffer pointer table of `prog` (buffer i at `at[i]`) as M row views, view after view: in view m
/// per-row buffers (one row per row m, the validator checks) start m rows in; weights, states and KV
/// caches are shared (`for_rows` in common.cuh).
pub fn row_views(prog: &Program, at: &[u64]) -> Vec<u64> {
    let m_rows = prog.target.m_rows as u64;
    (0..m_rows)
        .flat_map(|m| {
            prog.buffers
                .iter()
                .zip(at)
                .map(move |(b, &a)| a + if b.kind.per_row() { m * b.cols * b.elem_bytes as u64 } else { 0 })
        })
        .collect()
}

fn le32(v: impl IntoIterator<Item = u32>) -> Vec<u8> {
    v.into_iter().flat_map(|x| x.to_le_bytes()).collect()
}
fn le64(v: impl IntoIterator<Item = u64>) -> Vec<u8> {
    v.into_iter().flat_map(|x| x.to_le_bytes()).collect()
}
fn lef32(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Allocates the arena and uploads everything; returns it with its base address, layout and DevCtx.
pub fn build(
    stream: &std::sync::Arc<CudaStream>,
    prog: &Program,
    w: &dyn Weights,
    dw: &super::weights::DeviceWeights,
    stamps: bool,
) -> Result<(CudaSlice<u8>, u64, Layout, DevCtx)> {
    let dims = w.dims();
    let mut at = 0usize;
    let mut take = |n: usize| {
        let o = at;
        at = (at + n).div_ceil(ALIGN) * ALIGN;
        o
    };
    let mut places = Vec::new();
    for b in prog.buffers.iter() {
        let p = if b.kind == BufKind::Weight {
            // (in the weights' allocation: `off` unused, `addr` absolute)
            dw.place(&b.name)
                .ok_or_else(|| crate::error::Error::new(format!("gpu: weight {} was not uploaded", b.name)))?
        } else {
            let bytes = b.elems() as usize * b.elem_bytes as usize;
            Place { off: take(bytes), bytes, scale_off: None, elem_bytes: b.elem_bytes as u8, addr: 0, scale_addr: 0 }
        };
        places.push(p);
    }
    let n = prog.buffers.len();
    let m_rows = prog.target.m_rows as usize;
    let t_bufs = take(8 * n * m_rows); // M row views of the buffer pointers (`for_rows` in common.cuh)
    let t_scales = take(8 * n);
    let t_rows = take(4 * n);
    let t_cols = take(4 * n);
    let t_wbytes = take(n);
    let max_ctx = prog.target.max_context as usize;
    let rot = dims.rotary_dim;
    let t_rope = take(max_ctx * 2 * rot * 4);
    let words = prog.encode_words();
    let total_units: usize = prog.words.iter().map(|w| w.units as usize).sum();
    let layout = Layout {
        places,
        prog: take(words.len()),
        // (zeroed before every launch) counters, next units, the error word and its step, step_done
        mk: take(4 * (prog.n_counters as usize + prog.words.len() + 3)),
        mk_stride: take(4 * prog.words.len()),
        mk_tokens: take(4 * max_ctx),
        tl_base: take(4 * prog.words.len()),
        tl: take(32 * total_units),
        total_units,
        sampler: take(4 * SB_WORDS),
        // the stop token + 1 (0: none) and the stopped flag EndStep sets
        stop: take(8),
        // one (ticket, finished) pair per word (a launch uses its first word's); zero from here on: the
        // last block of a launch zeroes its pair again
        tickets: take(8 * prog.words.len()),
        bytes: at,
    };
    let mut arena = cu(stream.alloc_zeros::<u8>(layout.bytes), "cuMemAlloc (arena)")?;
    let base = {
        let (p, _g) = arena.device_ptr(stream);
        p
    };
    let mut put = |off: usize, bytes: &[u8]| -> Result<()> {
        let mut v = arena.slice_mut(off..off + bytes.len());
        cu(stream.memcpy_htod(bytes, &mut v), "cuMemcpyHtoD")
    };
    let mut layout = layout;
    for (p, b) in layout.places.iter_mut().zip(&prog.buffers) {
        if b.kind != BufKind::Weight {
            p.addr = base + p.off as u64;
        }
    }
    let at: Vec<u64> = layout.places.iter().map(|p| p.addr).collect();
    put(t_bufs, &le64(row_views(prog, &at)))?;
    put(t_scales, &le64(layout.places.iter().map(|p| p.scale_addr)))?;
    put(t_rows, &le32(prog.buffers.iter().map(|b| b.rows as u32)))?;
    put(t_cols, &le32(prog.buffers.iter().map(|b| b.cols as u32)))?;
    put(t_wbytes, &layout.places.iter().map(|p| p.elem_bytes).collect::<Vec<u8>>())?;
    let mut rope = Vec::with_capacity(max_ctx * 2 * rot);
    for pos in 0..max_ctx {
        let (c, s) = w.rope(pos);
        if c.len() != rot || s.len() != rot {
            crate::bail!("gpu: the RoPE table of position {pos} has {} values, not {rot}", c.len());
        }
        rope.extend(c.into_iter().chain(s));
    }
    put(t_rope, &lef32(&rope))?;
    put(layout.prog, &words)?;
    let first_units = prog.words.iter().scan(0u32, |first, w| {
        let b = *first;
        *first += w.units;
        Some(b)
    });
    put(layout.tl_base, &le32(first_units))?;
    put(layout.mk_stride, &le32(super::launch::wait_strides(prog)))?;
    let ctx = DevCtx {
        bufs: base + t_bufs as u64,
        scales: base + t_scales as u64,
        rows: base + t_rows as u64,
        cols: base + t_cols as u64,
        wbytes: base + t_wbytes as u64,
        rope: base + t_rope as u64,
        stop: base + layout.stop as u64,
        tickets: base + layout.tickets as u64,
        stamps: if stamps { base + layout.tl as u64 } else { 0 },
        unit_base: base + layout.tl_base as u64,
        sampler: base + layout.sampler as u64,
        rotary_dim: rot as u32,
        head_dim: dims.head_dim as u32,
        gdn_dim: dims.gdn_v_dim as u32,
        n_heads: dims.n_heads as u32,
        n_kv_heads: dims.n_kv_heads as u32,
        gdn_k_heads: dims.gdn_k_heads as u32,
        gdn_v_heads: dims.gdn_v_heads as u32,
        max_ctx: max_ctx as u32,
        eps: dims.rms_eps,
        n_bufs: n as u32,
        reserved: 0,
    };
    cu(stream.synchronize(), "cuStreamSynchronize (upload)")?;
    Ok((arena, base, layout, ctx))
}

/// Byte access to the arena and the buffers' values (checks, snapshots, the control block).
impl GpuExec {
    pub(super) fn put(&mut self, off: usize, bytes: &[u8], what: &str) -> Result<()> {
        let stream = self.gpu.stream.clone();
        let mut v = self.arena.slice_mut(off..off + bytes.len());
        cu(stream.memcpy_htod(bytes, &mut v), what)
    }

    pub(super) fn zero(&mut self, from: usize, to: usize, what: &str) -> Result<()> {
        let stream = self.gpu.stream.clone();
        let mut v = self.arena.slice_mut(from..to);
        cu(stream.memset_zeros(&mut v), what)
    }

    /// Bytes from..to of the arena (waits for the stream).
    pub(super) fn get(&self, from: usize, to: usize, what: &str) -> Result<Vec<u8>> {
        let v = self.arena.slice(from..to);
        let mut host = vec![0u8; to - from];
        cu(self.gpu.stream.memcpy_dtoh(&v, &mut host), what)?;
        self.sync()?;
        Ok(host)
    }

    pub(super) fn get_u32(&self, off: usize, what: &str) -> Result<u32> {
        let b = self.get(off, off + 4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn read_bytes(&self, buf: usize, from: usize, to: usize) -> Result<Vec<u8>> {
        if self.prog.buffers[buf].kind == BufKind::Weight {
            crate::bail!(
                "gpu: buffer {} is a weight (in the weights' allocation, not read back)",
                self.prog.buffers[buf].name
            );
        }
        let p = self.layout.places[buf];
        self.get(p.off + from, p.off + to, "cuMemcpyDtoH")
    }

    pub(super) fn read_u32(&self, buf: usize, from: usize, n: usize) -> Result<Vec<u32>> {
        let b = self.read_bytes(buf, from * 4, (from + n) * 4)?;
        Ok(b.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
    }

    /// The bytes of every non-weight buffer (activations, scratch, state, control): a snapshot that
    /// `load_state` puts back bit for bit (the megakernel's per-instruction debug capture).
    pub fn save_state(&self) -> Result<Vec<Vec<u8>>> {
        let mut out = Vec::new();
        for (i, b) in self.prog.buffers.iter().enumerate() {
            let bytes = self.layout.places[i].bytes;
            out.push(if b.kind == BufKind::Weight { Vec::new() } else { self.read_bytes(i, 0, bytes)? });
        }
        Ok(out)
    }

    /// Puts a `save_state` snapshot back (the host's position mirror from the control block).
    pub fn load_state(&mut self, s: &[Vec<u8>]) -> Result<()> {
        if s.len() != self.prog.buffers.len() {
            crate::bail!("gpu: a state snapshot of {} buffers for a program of {}", s.len(), self.prog.buffers.len());
        }
        for (i, bytes) in s.iter().enumerate() {
            let b = &self.prog.buffers[i];
            if b.kind == BufKind::Weight {
                continue;
            }
            let p = self.layout.places[i];
            if bytes.len() != p.bytes {
                crate::bail!("gpu: the snapshot of buffer {} has {} bytes, not {}", b.name, bytes.len(), p.bytes);
            }
            self.put(p.off, bytes, "cuMemcpyHtoD")?;
        }
        self.sync()?;
        let ctrl = self.read_u32(self.ctrl, 0, crate::isa::access::CTRL_LEN)?;
        self.pos = ctrl[crate::isa::access::CTRL_POS] as usize;
        // (M rows: the commit count the snapshot's next step would apply; its rows are not rolled back)
        self.commit = ctrl[crate::isa::access::CTRL_COMMIT] as usize;
        self.rows_start = None;
        self.broken = false;
        Ok(())
    }

    /// Copies `elems` elements of buffer `src_name` of `src` (from element `src_at`) into buffer `name`
    /// of this executor (from element `at`), device to device (the speculation loop's hand-offs: a
    /// target's residual row into a drafter's `h_in`, drafter KV rows between its two programs). `src`
    /// is synchronised first; the copy is queued on this executor's stream, so nothing may write the
    /// source on `src`'s stream until this one has run it (every caller steps this executor next,
    /// which synchronises). Buffers of one element size, no weights; each range inside its buffer.
    pub fn copy_from(
        &mut self,
        name: &str,
        at: usize,
        src: &GpuExec,
        src_name: &str,
        src_at: usize,
        elems: usize,
    ) -> Result<()> {
        let from = src.span(src_name, src_at, elems)?;
        src.sync()?;
        self.copy_span(name, at, from)
    }

    /// Takes the sequence's state from another program of the same model (speculation's switch-off, the
    /// agent step's hand-offs between its M-row and one-row programs): device copies of every state
    /// buffer this program holds (a KV cache's rows below the position only), then the position.
    /// `src` must have nothing pending (an M-row program flushed: its kept rows committed); a deferred
    /// commit's row buffers (`gdn_kept_*`) that `src` lacks are left as they are (nothing reads them
    /// until a step has rows to commit). Returns the bytes copied.
    pub fn take_state(&mut self, src: &GpuExec) -> Result<u64> {
        if src.commit != 0 || src.rows_start.is_some() {
            crate::bail!("gpu: taking a state with rows still to commit or roll back (flush the M-row program first)");
        }
        let (p, sp) = (self.prog.clone(), src.program());
        let pos = src.pos;
        let (mut bytes, mut taken) = (0, 0);
        for b in p.buffers.iter().filter(|b| b.kind == BufKind::State) {
            let Some(sb) = sp.buffer_id(&b.name).map(|i| &sp.buffers[i]) else {
                if b.name.starts_with("gdn_kept_") {
                    continue;
                }
                crate::bail!("gpu: taking a state: {} has no {}", sp.model, b.name);
            };
            if (sb.rows, sb.cols, sb.elem_bytes) != (b.rows, b.cols, b.elem_bytes) {
                crate::bail!("gpu: taking a state: {} is shaped differently in the two programs", b.name);
            }
            let kv = b.name.starts_with("k_cache.") || b.name.starts_with("v_cache.");
            let n = if kv { pos as u64 * b.cols } else { b.elems() };
            self.copy_from(&b.name, 0, src, &b.name, 0, n as usize)?;
            bytes += n * b.elem_bytes as u64;
            taken += 1;
        }
        if taken == 0 {
            crate::bail!("gpu: taking a state: program {} holds none", p.model);
        }
        self.seek(pos)?;
        Ok(bytes)
    }

    /// The spans a park moves at position `pos`: (buffer name, arena offset, bytes) of every state
    /// buffer, a KV cache's rows below `pos` only (`take_state`'s set), the deferred commit's rows left
    /// out (a parked state has nothing pending).
    fn state_spans(&self, pos: usize) -> Vec<(&str, usize, usize)> {
        let p = &self.prog;
        (0..p.buffers.len())
            .filter(|&i| p.buffers[i].kind == BufKind::State && !p.buffers[i].name.starts_with("gdn_kept_"))
            .map(|i| {
                let b = &p.buffers[i];
                let kv = b.name.starts_with("k_cache.") || b.name.starts_with("v_cache.");
                let rows = if kv { pos as u64 } else { b.rows };
                (b.name.as_str(), self.layout.places[i].off, (rows * b.cols * b.elem_bytes as u64) as usize)
            })
            .collect()
    }

    /// Pinned host memory for `park`: the state at this program's max context (host memory: a session
    /// allocates it at its first park).
    pub fn park_buffer(&self) -> Result<cudarc::driver::PinnedHostSlice<u8>> {
        let n: usize = self.state_spans(self.prog.target.max_context as usize).iter().map(|s| s.2).sum();
        // SAFETY: bytes have no invalid bit patterns; written by device copies before they are read.
        cu(unsafe { self.gpu.ctx.alloc_pinned::<u8>(n.max(1)) }, "cuMemHostAlloc (park)")
    }

    /// Copies the sequence's state to `host` (`park_buffer`), device to pinned host memory; returns the
    /// position and the bytes. Refuses a state with rows still to commit (flush an M-row program first).
    pub fn park(&self, host: &mut cudarc::driver::PinnedHostSlice<u8>) -> Result<(usize, u64)> {
        if self.commit != 0 || self.rows_start.is_some() {
            crate::bail!("gpu: parking a state with rows still to commit or roll back (flush first)");
        }
        let stream = self.gpu.stream.clone();
        let h = cu(host.as_mut_slice(), "the park buffer")?;
        let mut at = 0;
        for (name, off, n) in self.state_spans(self.pos) {
            if at + n > h.len() {
                crate::bail!("gpu: the park buffer holds {} bytes, {name} needs {} more", h.len(), at + n - h.len());
            }
            cu(stream.memcpy_dtoh(&self.arena.slice(off..off + n), &mut h[at..at + n]), "cuMemcpyDtoHAsync (park)")?;
            at += n;
        }
        self.sync()?;
        Ok((self.pos, at as u64))
    }

    /// Puts a state parked at position `pos` (`park` of a program of the same shapes) back, pinned host
    /// to device; the position becomes `pos`. `skip` names state buffers left as they are (the NEGATIVE
    /// CONTROL of the park check: `recurrent_state.` restores everything but the GDN states).
    pub fn restore(&mut self, host: &cudarc::driver::PinnedHostSlice<u8>, pos: usize, skip: &str) -> Result<()> {
        if pos >= self.prog.target.max_context as usize {
            crate::bail!("gpu: restoring a state at position {pos} (max context {})", self.prog.target.max_context);
        }
        let stream = self.gpu.stream.clone();
        let h = cu(host.as_slice(), "the park buffer")?;
        let mut at = 0;
        let spans: Vec<(String, usize, usize)> =
            self.state_spans(pos).into_iter().map(|(n, o, b)| (n.to_string(), o, b)).collect();
        for (name, off, n) in spans {
            if at + n > h.len() {
                crate::bail!("gpu: the park buffer holds {} bytes, {name} needs {} more", h.len(), at + n - h.len());
            }
            if skip.is_empty() || !name.starts_with(skip) {
                let mut v = self.arena.slice_mut(off..off + n);
                cu(stream.memcpy_htod(&h[at..at + n], &mut v), "cuMemcpyHtoDAsync (restore)")?;
            }
            at += n;
        }
        self.seek(pos)
    }

    /// `copy_from` inside this executor's arena (the ranges must not overlap).
    pub fn copy_within(&mut self, name: &str, at: usize, src_name: &str, src_at: usize, elems: usize) -> Result<()> {
        let from = self.span(src_name, src_at, elems)?;
        self.copy_span(name, at, from)
    }

    /// Elements [at, at + elems) of buffer `name`: (device address, bytes, bytes an element), checked.
    fn span(&self, name: &str, at: usize, elems: usize) -> Result<(u64, usize, usize)> {
        let b = self.buffer_named(name)?;
        if self.prog.buffers[b].kind == BufKind::Weight {
            crate::bail!("gpu copy: {name} is a weight (read-only, in the weights' allocation)");
        }
        let p = self.layout.places[b];
        check_range(&self.prog, b, at, elems, p.bytes)?;
        let eb = p.elem_bytes as usize;
        Ok((p.addr + (at * eb) as u64, elems * eb, eb))
    }

    /// Copies the span `from` (`span`, of this arena or another) to buffer `name` from element `at`.
    fn copy_span(&mut self, name: &str, at: usize, from: (u64, usize, usize)) -> Result<()> {
        let (src, bytes, eb) = from;
        let (dst, n, deb) = self.span(name, at, bytes / eb.max(1))?;
        if deb != eb {
            crate::bail!("gpu copy: {eb}-byte elements into {name}'s {deb}-byte ones");
        }
        if src < dst + n as u64 && dst < src + n as u64 {
            crate::bail!("gpu copy: the source and {name}[{at}..] overlap");
        }
        // SAFETY: both ranges lie inside allocations of this context (span: the places, check_range)
        // and do not overlap; the copy is queued on this executor's stream, after everything queued
        // on it before (the source's own stream synchronised by the caller).
        unsafe { cudarc::driver::result::memcpy_dtod_async(dst, src, n, self.gpu.stream.cu_stream()) }
            .map_err(|e| crate::error::Error::new(format!("cuMemcpyDtoD: {e:?}")))
    }

    /// The buffer of a copy by name (the copies move activations and state, never weights).
    fn buffer_named(&self, n: &str) -> Result<usize> {
        let b = self.prog.buffer_id(n).ok_or_else(|| {
            crate::error::Error::new(format!("gpu copy: program {} has no buffer {n}", self.prog.model))
        })?;
        if self.prog.buffers[b].kind == BufKind::Weight {
            crate::bail!("gpu copy: {n} is a weight");
        }
        Ok(b)
    }

    /// A buffer's first `n` elements as f32 (bf16 widened exactly; control words as integers).
    pub fn read(&self, buf: usize, n: usize) -> Result<Vec<f32>> {
        let eb = self.layout.places[buf].elem_bytes as usize;
        let b = self.read_bytes(buf, 0, n * eb)?;
        Ok(match eb {
            2 => b.chunks_exact(2).map(|c| bf16_to_f32(u16::from_le_bytes([c[0], c[1]]))).collect(),
            4 if self.prog.buffers[buf].kind == BufKind::Control => {
                b.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f32).collect()
            }
            _ => b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect(),
        })
    }

    /// Overwrites a non-weight buffer with values (bf16 buffers take bf16 values, exactly).
    pub fn write(&mut self, buf: usize, data: &[f32]) -> Result<()> {
        let p = self.layout.places[buf];
        if self.prog.buffers[buf].kind == BufKind::Weight {
            crate::bail!("gpu: buffer {} is a weight (read-only)", self.prog.buffers[buf].name);
        }
        let bytes: Vec<u8> = match (p.elem_bytes, self.prog.buffers[buf].kind) {
            (2, _) => data.iter().flat_map(|x| f32_to_bf16(*x).to_le_bytes()).collect(),
            (4, BufKind::Control) => data.iter().flat_map(|x| (*x as u32).to_le_bytes()).collect(),
            _ => lef32(data),
        };
        if bytes.len() > p.bytes {
            crate::bail!("gpu: {} values for buffer {} of {} bytes", data.len(), self.prog.buffers[buf].name, p.bytes);
        }
        self.put(p.off, &bytes, "cuMemcpyHtoD")
    }

    pub fn logits(&self) -> Result<Vec<f32>> {
        self.read(self.logits, self.prog.buffers[self.logits].elems() as usize)
    }

    /// Free and total device memory (bytes), to show that nothing allocates after startup.
    pub fn mem_info(&self) -> Result<(usize, usize)> {
        cu(self.gpu.ctx.mem_get_info(), "cuMemGetInfo")
    }

    /// Waits for the stream.
    pub fn sync(&self) -> Result<()> {
        cu(self.gpu.stream.synchronize(), "cuStreamSynchronize")
    }
}

/// Elements [at, at + elems) of buffer `b` (its place `bytes` long) in range, without overflow.
fn check_range(p: &Program, b: usize, at: usize, elems: usize, bytes: usize) -> Result<()> {
    let eb = p.buffers[b].elem_bytes as usize;
    match at.checked_add(elems).and_then(|e| e.checked_mul(eb)) {
        Some(end) if end <= bytes => Ok(()),
        _ => crate::bail!("gpu copy: elements {at}..+{elems} pass the end of {}", p.buffers[b].name),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_ranges_are_checked_without_overflow() {
        let p = crate::compiler::compile(
            &crate::model::config::ModelConfig::preset("tiny").unwrap(),
            "tiny",
            &crate::compiler::h200(1),
        )
        .unwrap();
        let h = p.buffer_id("h").unwrap();
        let bytes = (p.buffers[h].elems() * 2) as usize;
        assert!(check_range(&p, h, 0, 256, bytes).is_ok());
        assert!(check_range(&p, h, 1, 256, bytes).is_err(), "one element past the end");
        let e = check_range(&p, h, usize::MAX - 1, 4, bytes).unwrap_err().to_string();
        assert!(e.contains("pass the end of h"), "{e}");
        assert!(check_range(&p, h, 4, usize::MAX / 2, bytes).is_err(), "an overflowing byte count");
    }

    #[test]
    fn row_views_offset_per_row_buffers_only() {
        let mut t = crate::compiler::h200(3);
        t.max_context = 256;
        let p =
            crate::compiler::compile(&crate::model::config::ModelConfig::preset("tiny").unwrap(), "tiny", &t).unwrap();
        let at: Vec<u64> = (0..p.buffers.len() as u64).map(|i| 1 << 40 | i << 24).collect();
        let v = row_views(&p, &at);
        let n = p.buffers.len();
        assert_eq!(v.len(), 3 * n);
        assert_eq!(&v[..n], &at[..], "view 0 is the table itself");
        let id = |name: &str| p.buffer_id(name).unwrap();
        // h (bf16), the control block (u32 x CTRL_LEN), a state buffer and a weight, in view 2
        let h = id("h");
        assert_eq!(v[2 * n + h], at[h] + 2 * p.buffers[h].cols * 2);
        let c = id("ctrl");
        assert_eq!(v[2 * n + c], at[c] + 2 * crate::isa::access::CTRL_LEN as u64 * 4);
        let kv = p.buffers.iter().position(|b| b.kind == BufKind::State).unwrap();
        assert_eq!(v[2 * n + kv], at[kv]);
        let wt = p.buffers.iter().position(|b| b.kind == BufKind::Weight).unwrap();
        assert_eq!(v[n + wt], at[wt]);
    }
}
