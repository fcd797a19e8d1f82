//! The discrete-kernel path: every word of the program is one launch of its `k_<op>` kernel (a block
//! per unit), the step is captured once as a CUDA graph and replayed for every token. The position,
//! token and next token live in the program's control buffer on the device and are advanced by the
//! `EndStep` kernel, so the graph never changes.
//!
//! Owns: the device arena (one allocation at startup: weights in checkpoint byte order, fp8 scales as
//! f32, small vectors as f32, activations, scratch, state, the buffer tables, the RoPE table and the
//! program), the launches and the graph. Refuses: allocating after startup.

use std::collections::HashMap;

use cudarc::driver::{CudaFunction, CudaGraph, CudaSlice, DevicePtr, DeviceRepr, LaunchConfig, PushKernelArg};

use super::Gpu;
use crate::error::{Error, Result};
use crate::isa::access::{ATTN_HEAD_DIM, CTRL_LEN, GDN_HEAD_DIM, KGROUP};
use crate::isa::{BufKind, Opcode, Program, Word};
use crate::model::checkpoint::Checkpoint;
use crate::model::numerics::bf16_to_f32;
use crate::model::tensors::{Dt, Role};

/// The device context every op reads; the same layout as `DevCtx` in megakernel/common.cuh.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct DevCtx {
    bufs: u64,
    scales: u64,
    rows: u64,
    cols: u64,
    wbytes: u64,
    rope: u64,
    stop: u64,
    tickets: u64,
    /// GRAPH_STAMPS: the timeline slots (the megakernel's), else 0.
    stamps: u64,
    unit_base: u64,
    /// RING_TC: per buffer id a 128-byte tensor map (fp8 weights of whole 16 x 1,024 items), else zeros.
    tmaps: u64,
    /// The sampler's block (`SB_*` in common.cuh); 0 for the megakernel (it never samples).
    sampler: u64,
    rotary_dim: u32,
    head_dim: u32,
    gdn_dim: u32,
    n_heads: u32,
    n_kv_heads: u32,
    gdn_k_heads: u32,
    gdn_v_heads: u32,
    max_ctx: u32,
    eps: f32,
    /// Buffers per row view (`bufs` holds M views).
    n_bufs: u32,
}
const _: () = assert!(std::mem::size_of::<DevCtx>() == 136);

/// The buffer pointer table of `prog` (buffer i at `at[i]`) as M row views, view after view: in view m
/// per-row buffers (one row per row m, the validator checks) start m rows in; weights, states and KV
/// caches are shared (`for_rows` in common.cuh).
fn row_views(prog: &Program, at: &[u64]) -> Vec<u64> {
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

/// Blocks of a looping GEMV launch of `units` units with `resident` blocks fitting the GPU at once: with
/// tickets every resident block (at most one per unit); without, as few as give every block the same
/// number of units (rounds = ceil(units / resident)).
fn gemv_grid(units: u32, resident: u32, tickets: bool) -> u32 {
    if tickets {
        return units.min(resident).max(1);
    }
    let rounds = units.div_ceil(resident.max(1)).max(1);
    units.div_ceil(rounds)
}

/// A megakernel wait longer than this is a hang (derived: a whole 27B step takes about 25 ms on
/// the graph path, so no legitimate wait comes near 2 s).
const MEGA_WAIT_TIMEOUT_NS: u64 = 2_000_000_000;
// SAFETY: plain old data with the C layout of the CUDA struct.
unsafe impl DeviceRepr for DevCtx {}

fn cu<T>(r: std::result::Result<T, cudarc::driver::DriverError>, what: &str) -> Result<T> {
    r.map_err(|e| Error::new(format!("{what}: {e:?}")))
}

const ALIGN: usize = 256;
/// The GPU sampler's largest top_k (SAMPLE_MAX in sample.cu).
const SAMPLE_MAX: usize = 2048;
/// The GPU sampler's room for candidates, ties at the k-th value included (SAMPLE_CAP in common.cuh).
const SAMPLE_CAP: usize = 4096;
/// The sampler's block in the arena, in u32 words (SB_* in common.cuh): SampleParams (24 bytes), the
/// sticky status, then the fused top-k's count, histograms (zero between steps) and kept ids.
const SB_STATUS: usize = 6;
const SB_KEPT: usize = 7;
const SB_CANDS: usize = 66048;
const SB_WORDS: usize = SB_CANDS + SAMPLE_CAP;
/// k_sample_collect's threads per block (COLLECT_THREADS in sample.cu), 8 ids each.
const COLLECT_THREADS: u32 = 256;

/// Where a buffer lives in the arena and how it is stored there.
#[derive(Clone, Copy, Debug)]
struct Place {
    off: usize,
    bytes: usize,
    scale_off: Option<usize>,
    /// Bytes per element; for matrices a storage code: 1 fp8 with bf16 scales, 2 bf16, 3 fp8 with
    /// fp32 scales (the `wbytes` table the kernels read).
    elem_bytes: u8,
}

pub struct Discrete {
    pub gpu: Gpu,
    prog: Program,
    arena: CudaSlice<u8>,
    base: u64,
    places: Vec<Place>,
    prog_off: usize,
    ctx: DevCtx,
    funcs: HashMap<Opcode, CudaFunction>,
    /// GEMV_RING's kernels (r_*), by opcode: the four GEMV opcodes other than the lm_head.
    ring_funcs: HashMap<Opcode, CudaFunction>,
    graph: Option<CudaGraph>,
    ctrl: usize,
    logits: usize,
    pub module_hash: String,
    pub arena_bytes: usize,
    /// Offset of the megakernel's control words in the arena.
    mk_off: usize,
    mk_stride: usize,
    mk_tokens: usize,
    /// The megakernel timeline: per-word first unit slots, the stamps, the units of a step.
    tl_base: usize,
    tl_off: usize,
    total_units: usize,
    /// The sampler's parameters (temperature, top_k, top_p, seed) and status word, in the arena.
    samp_off: usize,
    /// The device-side stop (DevCtx::stop): two words in the arena, the token it stops at (set_stop)
    /// and whether the host saw the sequence stop (then steps are refused until reset).
    stop_off: usize,
    /// The discrete GEMV launches' ticket pairs (DevCtx::tickets).
    tickets_off: usize,
    stop_token: Option<u32>,
    stopped: bool,
    sampler: Option<CudaFunction>,
    /// TOPK_FUSED: the sampler's collect kernel (the ids at or above the threshold the lm_head's counts give).
    sample_collect: Option<CudaFunction>,
    /// Sampling (temperature > 0) is on: steps check the sampler's status.
    sampling: bool,
    /// The persistent kernel, when the module has it.
    mega: Option<CudaFunction>,
    /// The position the next step writes (mirrors the control block; checked before every step).
    pos: usize,
    /// A step failed part way (its state is partly written): every step is refused until `reset`.
    broken: bool,
    /// Two events per word, created at startup, for per-word timing.
    events: Vec<(cudarc::driver::CudaEvent, cudarc::driver::CudaEvent)>,
    /// Two pinned host words, allocated at startup: the tokens of consecutive pipelined steps (each
    /// copy records its own event, so reading one waits for that copy only, not for the stream).
    pinned: Vec<cudarc::driver::PinnedHostSlice<u8>>,
    /// One event per pinned slot, recorded after its copy (event tracking is off for graph capture,
    /// so the slices' own events are never recorded: these are what a read waits for).
    pinned_ev: Vec<cudarc::driver::CudaEvent>,
}

/// The opcodes GEMV_RING streams (megakernel/ring.cu): every GEMV but the lm_head (bf16, 90 % already).
const RING_OPS: [Opcode; 4] =
    [Opcode::GemvNorm, Opcode::GemvGateUp, Opcode::GemvGatedNormResidual, Opcode::GemvResidual];
/// The ring's slot (16 KB of a unit's weight bytes by default, RING_SLOT_KB), its block-scale area (a
/// scale row of at most 144 blocks), its most slots and words per launch.
#[cfg(test)]
const RING_SLOT: u32 = 16384;
const RING_SC: u32 = 576;
const RING_MAX: u32 = 16;
const RING_WORDS: usize = 4;
/// The ring block: RING_CWARPS consumer warps (8 or 16) and the producer warp.
fn ring_threads() -> u32 {
    (super::cuda_define("RING_CWARPS").unwrap_or(8) + 1) * 32
}
/// The ring kernels' static shared memory (two mbarriers and a 16-byte item record per slot, the
/// launch's decoded words, two halves of RING_PV floats of whole-row partials), rounded up.
const RING_STATIC: u32 = 3200;
/// A whole-row unit's (row, group) partials, both weights (RING_PV in ring.cu).
const RING_PV: u32 = 288;

fn ring_on() -> bool {
    super::cuda_define("GEMV_RING").unwrap_or(0) != 0 || tc_on()
}

/// The tensor map of an fp8 weight at device address `addr` ([rows][k], checkpoint row order) for
/// RING_TC's items: `tile::weight_box`'s 3D view (16 rows x 8 chunks of 128 bytes a box), no swizzle
/// (the consumers' 16-byte reads meet 2-way bank conflicts, 4 a warp an item), L2 promotion by 256
/// bytes, rows past the end filled with zeros. Err: the shape has no box, or the driver refused it.
fn weight_tensor_map(addr: u64, rows: u64, k: u64) -> Result<[u8; 128]> {
    use cudarc::driver::sys;
    let b = super::tile::weight_box(rows, k)?;
    let mut m = sys::CUtensorMap { opaque: [0; 16] };
    let elem_strides = [1u32; 3];
    // SAFETY: every array has the rank's length (3 dims, 2 strides, 3 box extents, 3 element strides),
    // `m` is a CUtensorMap the driver fills; the address is device memory the arena owns.
    let r = unsafe {
        sys::cuTensorMapEncodeTiled(
            &mut m,
            sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_UINT32,
            3,
            addr as *mut std::ffi::c_void,
            b.dims.as_ptr(),
            b.strides.as_ptr(),
            b.boxdim.as_ptr(),
            elem_strides.as_ptr(),
            sys::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
            sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_NONE,
            sys::CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            sys::CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
    };
    if r != sys::CUresult::CUDA_SUCCESS {
        return Err(Error::new(format!("cuTensorMapEncodeTiled ({rows} x {k}): {r:?}")));
    }
    let mut out = [0u8; 128];
    for (i, w) in m.opaque.iter().enumerate() {
        out[8 * i..8 * i + 8].copy_from_slice(&w.to_le_bytes());
    }
    Ok(out)
}

/// RING_TC (megakernel/ring.cu): the ring's fp8 items are 16 rows x one k-group (one tensor copy of
/// 16 KB by the weight's tensor map), computed on tensor cores; TC_RED floats of chunk sums per unit
/// parity come before the slots.
fn tc_on() -> bool {
    super::cuda_define("RING_TC").unwrap_or(0) != 0
}
const TC_RED: u32 = 1536;

/// The ring's offset in a ring kernel's dynamic shared memory (ring_base in ring.cu): x (bf16, K) and
/// 64 floats of block sums, 128-aligned.
fn ring_base(k: u32) -> u32 {
    ((k * 2).div_ceil(16) * 16 + 256).div_ceil(128) * 128
}

/// Dynamic shared memory of a ring launch with inputs of width `k`: the ring as deep as RING_SLOTS
/// allows with RING_BLOCKS blocks per SM; None when fewer than 2 slots fit.
/// `stat`: the kernels' static shared memory (RING_STATIC, more with RING_STAMPS).
/// `slot`: a slot's weight bytes (RING_SLOT, or 32 KB with RING_SLOT_KB=32).
fn ring_smem_for(k: u32, blocks: u32, want: u32, stat: u32, slot: u32) -> Option<u32> {
    ring_slots_after(ring_base(k), blocks, want, stat, slot)
}

/// `ring_smem_for` with the slots starting at byte `base` of the dynamic shared memory.
fn ring_slots_after(base: u32, blocks: u32, want: u32, stat: u32, slot: u32) -> Option<u32> {
    let (blocks, want) = (blocks.max(1), want.clamp(2, RING_MAX));
    let room = (SMEM_PER_SM / blocks).saturating_sub(1024 + stat).min(SMEM_PER_BLOCK - stat);
    let slots = (room.saturating_sub(base) / (slot + RING_SC)).min(want);
    (slots >= 2).then_some(base + slots * (slot + RING_SC))
}

/// Dynamic shared memory of the ring kernel for a launch of `words` (one stage, one opcode), or None
/// when the launch keeps the k_* kernel: GEMV_RING off, another opcode, or a word the ring does not
/// handle (inputs of different widths, units of other than 16 rows, rows whose bytes are not a
/// multiple of 16, a width not a multiple of 1,024 whose unit does not fit one slot (its (row, group)
/// pieces would straddle slots), bf16 gate/up weights, a whole-row unit with more (row, group) partials
/// than RING_PV).
fn ring_smem(p: &Program, words: &[Word]) -> Option<u32> {
    if !ring_on() {
        return None;
    }
    let blocks = super::cuda_define("RING_BLOCKS").unwrap_or(1);
    // (RING_STAMPS, a diagnostic: 3,584 bytes of stamps in static shared memory)
    let stat = RING_STATIC + if super::cuda_define("RING_STAMPS").unwrap_or(0) != 0 { 3584 } else { 0 };
    let slot = super::cuda_define("RING_SLOT_KB").unwrap_or(16) * 1024;
    if tc_on() {
        return ring_smem_tc(p, words, blocks, super::cuda_define("RING_SLOTS").unwrap_or(12), stat);
    }
    ring_smem_with(p, words, blocks, super::cuda_define("RING_SLOTS").unwrap_or(12), stat, slot)
}

/// Whether word `w` takes RING_TC's tensor-core items (mma_path in common.cuh: fp8 weights, every one
/// of them, a width a multiple of 64, 16-row units).
fn tc_word(p: &Program, w: &Word) -> bool {
    let fp8 = |slot: usize| w.op(slot).is_some_and(|b| p.buffers[b].elem_bytes == 1);
    let k = w.op(crate::isa::slot::IN0).map_or(0, |b| p.buffers[b].cols);
    fp8(crate::isa::slot::W0)
        && (w.opcode != Opcode::GemvGateUp || fp8(crate::isa::slot::W1))
        && k % 64 == 0
        && w.unit_rows == 16
}

/// `ring_smem` with RING_TC: tensor-core words need a tensor map for every weight (rows and width whole
/// items) and their units' chunk sums within TC_RED; the others (bf16) the legacy items' conditions
/// (their items are 16 KB too, in the same slots).
fn ring_smem_tc(p: &Program, words: &[Word], blocks: u32, slots: u32, stat: u32) -> Option<u32> {
    let k = p.buffers[words.first()?.op(crate::isa::slot::IN0)?].cols as u32;
    for w in words {
        if p.buffers[w.op(crate::isa::slot::IN0)?].cols as u32 != k || w.m_rows != 1 {
            return None;
        }
        if tc_word(p, w) {
            // (weights without a tensor map keep the k_* kernels' tensor-core path: the same bits)
            let boxed = |slot: usize| {
                w.op(slot).is_none_or(|b| super::tile::weight_box(p.buffers[b].rows as u64, k as u64).is_ok())
            };
            if !boxed(crate::isa::slot::W0) || (w.opcode == Opcode::GemvGateUp && !boxed(crate::isa::slot::W1)) {
                return None;
            }
            let groups = k.div_ceil(KGROUP as u32).div_ceil(w.k_parts.max(1) as u32);
            if !RING_OPS.contains(&w.opcode) || ring_subs(w) * groups * 8 * 16 > TC_RED {
                return None;
            }
        } else if ring_smem_with(p, std::slice::from_ref(w), blocks, slots, stat, 16384).is_none() {
            return None;
        }
    }
    if !RING_OPS.contains(&words[0].opcode) || words.len() > RING_WORDS {
        return None;
    }
    // the slots after x, the block sums, the two halves of TC_RED and a pad to a 1,024-byte boundary
    ring_slots_after(ring_base(k) + 2 * TC_RED * 4 + 1024, blocks, slots, stat, 16384)
}

/// The weights a ring word streams per unit (gate/up: two).
fn ring_subs(w: &Word) -> u32 {
    if w.opcode == Opcode::GemvGateUp {
        2
    } else {
        1
    }
}

/// `ring_smem` for `blocks` ring blocks per SM and at most `slots` slots of `slot` bytes.
fn ring_smem_with(p: &Program, words: &[Word], blocks: u32, slots: u32, stat: u32, slot: u32) -> Option<u32> {
    let subs = ring_subs;
    if !RING_OPS.contains(&words.first()?.opcode) || words.len() > RING_WORDS {
        return None;
    }
    let k = p.buffers[words[0].op(crate::isa::slot::IN0)?].cols as u32;
    for w in words {
        let eb = |slot: usize| w.op(slot).map(|b| if p.buffers[b].elem_bytes == 2 { 2 } else { 1 });
        let w0 = eb(crate::isa::slot::W0)?;
        let ok = p.buffers[w.op(crate::isa::slot::IN0)?].cols as u32 == k
            && w.unit_rows == 16
            && w.m_rows == 1
            && (k * w0) % 16 == 0
            && (k % KGROUP as u32 == 0 || 16 * k * w0 <= slot)
            && 4 * k.div_ceil(128) <= RING_SC
            && (w.flags & crate::isa::FLAG_PARTIAL != 0
                || subs(w) * 16 * k.div_ceil(KGROUP as u32).div_ceil(w.k_parts.max(1) as u32) <= RING_PV)
            && (w.opcode != Opcode::GemvGateUp || (w0 == 1 && eb(crate::isa::slot::W1)? == 1));
        if !ok {
            return None;
        }
    }
    ring_smem_for(k, blocks, slots, stat, slot)
}

/// The most dynamic shared memory any ring launch of the program takes (the kernels' opt-in).
fn ring_launch_smem(p: &Program) -> Option<u32> {
    p.words.iter().filter_map(|w| ring_smem(p, std::slice::from_ref(w))).max()
}

/// Dynamic shared memory a word's discrete kernel gets: its needs and the deepest weight ring (at most
/// GEMV_DEPTH items per warp) with which GEMV_MIN_BLOCKS blocks still fit on an SM.
fn smem_bytes(p: &Program, w: &Word) -> u32 {
    // (GDN out_proj's kernel has launch bounds of its own, GNR_MIN_BLOCKS, GEMV_MIN_BLOCKS unless set)
    let gnr = if w.opcode == Opcode::GemvGatedNormResidual { super::cuda_define("GNR_MIN_BLOCKS") } else { None };
    let blocks = gnr.or_else(|| super::cuda_define("GEMV_MIN_BLOCKS")).unwrap_or(1).max(1);
    smem_bytes_fit(p, w, blocks, super::cuda_define("GEMV_DEPTH").unwrap_or(0) as usize)
}

/// `smem_bytes` for `blocks` per SM and at most `depth` ring items.
fn smem_bytes_fit(p: &Program, w: &Word, blocks: u32, depth: usize) -> u32 {
    (0..=depth)
        .rev()
        .map(|d| smem_bytes_depth(p, w, d))
        .find(|&b| blocks * (b + 1024 + STATIC_SMEM_ROOM) <= SMEM_PER_SM)
        .unwrap_or_else(|| smem_bytes_depth(p, w, 0))
}

/// Shared memory on an H200 SM (228 KiB), of which one block may take 227 KiB; 1 KiB per resident
/// block is the driver's. (This engine targets the H200; a GPU with less is refused at startup,
/// `check_smem`.)
const SMEM_PER_SM: u32 = 228 * 1024;
const SMEM_PER_BLOCK: u32 = 227 * 1024;
/// Refuses a GPU with less shared memory than the launch shapes are sized for (SMEM_PER_SM,
/// SMEM_PER_BLOCK: the H200's), rather than launches the driver would refuse mid-run.
fn check_smem(name: &str, per_sm: u32, per_block: u32) -> Result<()> {
    if per_sm < SMEM_PER_SM || per_block < SMEM_PER_BLOCK {
        crate::bail!(
            "gpu: {name} has {} KiB of shared memory per SM and {} KiB per block; the kernels' launch shapes are sized for \
             the H200's {} and {}",
            per_sm / 1024,
            per_block / 1024,
            SMEM_PER_SM / 1024,
            SMEM_PER_BLOCK / 1024
        );
    }
    Ok(())
}

/// Room left per block for the kernels' static shared memory (K_GEMV's ticket slots, the megakernel's
/// unit and wait flags: tens of bytes; ptxas reports them).
const STATIC_SMEM_ROOM: u32 = 256;

/// The megakernel's dynamic shared memory: at least every word's needs; up to the deepest weight ring
/// (GEMV_DEPTH) any word wants, as far as MEGA_BLOCKS_PER_SM blocks still fit on an SM. The ops read
/// their ring depth from the launch's shared memory (stream_depth in common.cuh).
fn mega_smem_bytes(p: &Program) -> u32 {
    let per_sm = super::cuda_define("MEGA_BLOCKS_PER_SM").unwrap_or(1).max(1);
    // (a ring only when the megakernel streams its GEMVs: MEGA_GEMV_STREAM)
    let depth = if super::cuda_define("MEGA_GEMV_STREAM").unwrap_or(0) != 0 {
        super::cuda_define("GEMV_DEPTH").unwrap_or(0) as usize
    } else {
        0
    };
    mega_smem_fit(p, per_sm, depth)
}

/// `mega_smem_bytes` for `per_sm` blocks per SM and at most `depth` ring items.
fn mega_smem_fit(p: &Program, per_sm: u32, depth: usize) -> u32 {
    let need = p.words.iter().map(|w| smem_bytes_depth(p, w, 0)).max().unwrap_or(0);
    let want = p.words.iter().map(|w| smem_bytes_depth(p, w, depth)).max().unwrap_or(0);
    // (less the driver's 1 KiB per block and room for the kernel's static shared memory)
    let fit = ((SMEM_PER_SM / per_sm).saturating_sub(1024 + STATIC_SMEM_ROOM) / 128 * 128).min(SMEM_PER_BLOCK);
    need.max(want.min(fit))
}

/// The fp8 GEMV's per-warp weight ring (stream_ring_off / stream_slot_bytes in common.cuh): after x,
/// the floats of two weights' tensor-core sums and 16 gate totals, 128-aligned; per warp `depth`
/// slots of two rows x (1,024 weight bytes + 256 scale bytes).
fn stream_ring_bytes(k: usize, depth: usize) -> usize {
    let off = ((k * 2).div_ceil(16) * 16 + 4 * (2 * k.div_ceil(KGROUP) * 8 * 16).max(8) + 64).div_ceil(128) * 128;
    off + 8 * depth * 2 * (KGROUP + 256)
}

/// Dynamic shared memory of a word with an fp8 GEMV weight ring `depth` items deep per warp.
fn smem_bytes_depth(p: &Program, w: &Word, depth: usize) -> u32 {
    let k = |s: usize| w.op(s).map(|b| p.buffers[b].cols as usize).unwrap_or(0);
    // x in bf16, then the block-sum floats or the tensor-core GEMV's per-warp sums (mma_red_floats
    // in common.cuh: weights x k-groups x 8 warps x 16 rows), and for gate/up the 16 gate totals.
    let gemv_nw = |k: usize, nw: usize| (k * 2).div_ceil(16) * 16 + 4 * (nw * k.div_ceil(KGROUP) * 8 * 16).max(8);
    let gemv = |k: usize| gemv_nw(k, 1);
    let group = w.arg1 as usize;
    // GEMV_TMA: the weight ring after everything else (tma_ring_off in common.cuh: 128-aligned), its
    // TMA_DEPTH slots of nw x 16 rows x 1,024 elements and one 8-byte mbarrier per slot.
    let tma = |k: usize, nw: usize| {
        let off =
            ((k * 2).div_ceil(16) * 16 + 4 * ((nw * k.div_ceil(KGROUP) * 8 * 16).max(8) + 16)).div_ceil(128) * 128;
        let eb = w.op(crate::isa::slot::W0).map_or(1, |b| if p.buffers[b].elem_bytes == 2 { 2 } else { 1 });
        let depth = super::cuda_define("TMA_DEPTH").unwrap_or(3) as usize;
        off + depth * (nw * 16 * KGROUP * eb + 8)
    };
    let tma_on = super::cuda_define("GEMV_TMA").unwrap_or(0) != 0 && w.unit_rows == 16;
    // fp8 weights of a 16-row GEMV word stream through the ring (fp8_stream), unless GEMV_TMA
    let fp8 = w.op(crate::isa::slot::W0).is_some_and(|b| p.buffers[b].elem_bytes == 1);
    let ring = |base: usize| {
        let k = k(crate::isa::slot::IN0);
        if fp8 && depth > 0 && w.unit_rows == 16 {
            base.max(stream_ring_bytes(k, depth))
        } else {
            base
        }
    };
    (match w.opcode {
        Opcode::GemvGateUp if tma_on => tma(k(crate::isa::slot::IN0), 2),
        Opcode::GemvNorm | Opcode::GemvGatedNormResidual | Opcode::GemvResidual | Opcode::LmHead if tma_on => {
            tma(k(crate::isa::slot::IN0), 1)
        }
        Opcode::GemvGateUp => ring(gemv_nw(k(crate::isa::slot::IN0), 2) + 16 * 4),
        Opcode::GemvNorm | Opcode::GemvGatedNormResidual | Opcode::GemvResidual => ring(gemv(k(crate::isa::slot::IN0))),
        Opcode::LmHead => gemv(k(crate::isa::slot::IN0)),
        // q, k, v, norms, two exchange rows (RECUR_SPLIT), GdnStep's output, gates and norm weight
        // (GDN_STEP_SMEM in gdn_recur.cuh)
        Opcode::GdnRecur | Opcode::GdnStep => (7 * GDN_HEAD_DIM + 2) * 4,
        Opcode::Argmax => 2 * 8 * 4,
        Opcode::AttnKv => (ATTN_HEAD_DIM + 8) * 4,
        // q of every head of the group (f32), the warp sums, the group's scores, q again as bf16 pairs
        // in the lanes' read order (see attn_scores.cuh)
        Opcode::AttnScores => {
            (group * ATTN_HEAD_DIM + 8 + group * crate::isa::access::ATTN_PART + group * ATTN_HEAD_DIM / 2) * 4
        }
        // the group's probabilities, (max, sum) pairs (room for MAX_GROUP) and the 4 position groups'
        // sums (see attn_pv.cuh)
        Opcode::AttnPv => (group * crate::isa::access::ATTN_PART + 2 * 8 + 4 * group * ATTN_HEAD_DIM) * 4,
        _ => 0,
    }) as u32
}

impl Discrete {
    /// Uploads everything the program needs and compiles the kernels. The only device allocation.
    pub fn new(gpu: Gpu, prog: &Program, ck: &Checkpoint, cache: &std::path::Path) -> Result<Discrete> {
        let cfg = &ck.config;
        super::check_defines()?;
        let attr = |a, what: &str| -> Result<u32> {
            gpu.ctx.attribute(a).map(|v| v as u32).map_err(|e| Error::new(format!("{what}: {e:?}")))
        };
        use cudarc::driver::sys::CUdevice_attribute as A;
        check_smem(
            &gpu.name,
            attr(A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, "shared memory per SM")?,
            attr(A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, "shared memory per block")?,
        )?;
        let m_rows = prog.target.m_rows as usize;
        if let Some(b) = prog.buffers.iter().find(|b| b.kind.per_row() && b.rows != m_rows as u64) {
            crate::bail!("gpu: buffer {} has {} rows, the program's M is {m_rows}", b.name, b.rows);
        }
        // The attention ops keep one accumulator per query head of a group in registers (MAX_GROUP).
        if cfg.n_heads / cfg.n_kv_heads > 8 {
            crate::bail!(
                "gpu: {} query heads per KV head (the attention kernels handle at most 8)",
                cfg.n_heads / cfg.n_kv_heads
            );
        }
        // The opt-in limit of dynamic shared memory per block (227 KiB on the H200), less the
        // megakernel's own static bytes and some slack, so that a word that fits one kernel also fits
        // the other.
        let optin = gpu
            .ctx
            .attribute(cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
            .unwrap_or(48 * 1024) as u32;
        if let Some(w) = prog.words.iter().find(|w| smem_bytes(prog, w) > optin - 64) {
            crate::bail!(
                "gpu: {:?} needs {} bytes of shared memory (the device allows {} per block)",
                w.opcode,
                smem_bytes(prog, w),
                optin
            );
        }
        // The kernels do not decode NaN codes: refuse them here, with the tensor's name.
        crate::isa::validate::validate(prog)?;
        ck.deep_check()?;
        let specs = ck.specs();
        // Layout.
        let mut at = 0usize;
        let mut take = |n: usize| {
            let o = at;
            at = (at + n).div_ceil(ALIGN) * ALIGN;
            o
        };
        let mut places = Vec::new();
        for b in &prog.buffers {
            let p = if b.kind == BufKind::Weight {
                let s = specs
                    .iter()
                    .find(|s| s.name == b.name)
                    .ok_or_else(|| Error::new(format!("gpu: no tensor {}", b.name)))?;
                let matrix = matches!(s.role, Role::Linear { .. } | Role::Embedding | Role::LmHead);
                if matrix {
                    let fp8 = s.dtype == Dt::F8E4M3;
                    let bytes = b.elems() as usize * if fp8 { 1 } else { 2 };
                    let off = take(bytes);
                    let scale_off =
                        fp8.then(|| take(b.rows.div_ceil(128) as usize * b.cols.div_ceil(128) as usize * 4));
                    // fp8 whose scales are bf16 values (every real release, and mk synth) is
                    // dequantised on bf16 pairs (code 1); other scales in fp32 (code 3); same bits.
                    let code = if !fp8 {
                        2
                    } else {
                        let module = b.name.trim_end_matches(".weight");
                        let scales = ck.f32_vec(&format!("{module}.weight_scale_inv"));
                        if scales.iter().all(|x| crate::model::numerics::bf(*x) == *x && x.abs() < 256.0) {
                            1
                        } else {
                            3
                        }
                    };
                    Place { off, bytes, scale_off, elem_bytes: code }
                } else {
                    let bytes = b.elems() as usize * 4;
                    Place { off: take(bytes), bytes, scale_off: None, elem_bytes: 4 }
                }
            } else {
                let bytes = b.elems() as usize * b.elem_bytes as usize;
                Place { off: take(bytes), bytes, scale_off: None, elem_bytes: b.elem_bytes as u8 }
            };
            places.push(p);
        }
        let n = prog.buffers.len();
        let t_bufs = take(8 * n * m_rows); // M row views of the buffer pointers (`for_rows` in common.cuh)
        let t_scales = take(8 * n);
        let t_rows = take(4 * n);
        let t_cols = take(4 * n);
        let t_wbytes = take(n);
        let max_ctx = prog.target.max_context as usize;
        let rot = cfg.rotary_dim;
        let t_rope = take(max_ctx * 2 * rot * 4);
        let words = prog.encode_words();
        let prog_off = take(words.len());
        // The megakernel's counters, unit tickets, error flag and finished-step count (zeroed before
        // every launch), each word's wait stride (its counter's increments per step) and the tokens of
        // one launch (at most a context's worth).
        let mk_off = take(4 * (prog.n_counters as usize + prog.words.len() + 3));
        let mk_stride = take(4 * prog.words.len());
        let mk_tokens = take(4 * prog.target.max_context as usize);
        // The megakernel's timeline: each word's first unit slot, then four u64 per unit of a step.
        let total_units: usize = prog.words.iter().map(|w| w.units as usize).sum();
        let tl_base = take(4 * prog.words.len());
        let tl_off = take(32 * total_units);
        // The GPU sampler's block: parameters (SampleParams, 24 bytes), sticky status, the fused top-k's
        // counts and kept ids (SB_* in common.cuh).
        let samp_off = take(4 * SB_WORDS);
        // The device-side stop: the stop token + 1 (0: none) and the stopped flag EndStep sets.
        let stop_off = take(8);
        // The discrete GEMV launches' unit tickets and finished-block counts (GEMV_DYNAMIC), one pair
        // per word (a launch uses its first word's); zero from here on: the last block of a launch
        // zeroes its pair again.
        let tickets_off = take(8 * prog.words.len());
        // RING_TC's tensor maps, 128 bytes (64-aligned: ALIGN) per buffer id.
        let tmaps_off = take(128 * n);
        let total = at;
        let stream = gpu.stream.clone();
        let mut arena = cu(stream.alloc_zeros::<u8>(total), "cuMemAlloc (arena)")?;
        let base = {
            let (p, _g) = arena.device_ptr(&stream);
            p
        };
        let put = |arena: &mut CudaSlice<u8>, off: usize, bytes: &[u8]| -> Result<()> {
            let mut v = arena.slice_mut(off..off + bytes.len());
            cu(stream.memcpy_htod(bytes, &mut v), "cuMemcpyHtoD")
        };
        // Weights.
        for (b, p) in prog.buffers.iter().zip(&places) {
            if b.kind != BufKind::Weight {
                continue;
            }
            if p.elem_bytes == 4 {
                let v: Vec<u8> = ck.f32_vec(&b.name).iter().flat_map(|x| x.to_le_bytes()).collect();
                put(&mut arena, p.off, &v)?;
            } else {
                put(&mut arena, p.off, ck.bytes(&b.name))?;
                if let Some(so) = p.scale_off {
                    let module = b.name.trim_end_matches(".weight");
                    let s: Vec<u8> = ck
                        .f32_vec(&format!("{module}.weight_scale_inv"))
                        .iter()
                        .flat_map(|x| x.to_le_bytes())
                        .collect();
                    put(&mut arena, so, &s)?;
                }
            }
        }
        // Tables.
        let le64 = |v: Vec<u64>| v.into_iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        let le32 = |v: Vec<u32>| v.into_iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        let at: Vec<u64> = places.iter().map(|p| base + p.off as u64).collect();
        put(&mut arena, t_bufs, &le64(row_views(prog, &at)))?;
        put(
            &mut arena,
            t_scales,
            &le64(places.iter().map(|p| p.scale_off.map(|o| base + o as u64).unwrap_or(0)).collect()),
        )?;
        put(&mut arena, t_rows, &le32(prog.buffers.iter().map(|b| b.rows as u32).collect()))?;
        put(&mut arena, t_cols, &le32(prog.buffers.iter().map(|b| b.cols as u32).collect()))?;
        put(&mut arena, t_wbytes, &places.iter().map(|p| p.elem_bytes).collect::<Vec<u8>>())?;
        // RoPE: the CPU reference's own bf16 tables, so both compute the same angles.
        let mut rope = Vec::with_capacity(max_ctx * 2 * rot * 4);
        for pos in 0..max_ctx {
            let (c, s) = crate::model::ops::rope_tables(pos, rot, cfg.rope_theta);
            for x in c.iter().chain(&s) {
                rope.extend_from_slice(&x.to_le_bytes());
            }
        }
        put(&mut arena, t_rope, &rope)?;
        put(&mut arena, prog_off, &words)?;
        let mut first = 0u32;
        let bases: Vec<u8> = prog
            .words
            .iter()
            .flat_map(|w| {
                let b = first;
                first += w.units;
                b.to_le_bytes()
            })
            .collect();
        put(&mut arena, tl_base, &bases)?;
        put(&mut arena, mk_stride, &le32(wait_strides(prog)))?;
        if tc_on() {
            let mut maps = vec![0u8; 128 * n];
            for (i, (b, p)) in prog.buffers.iter().zip(&places).enumerate() {
                // (every fp8 weight with a box: ring_smem_tc takes only those; a refusal is an error)
                if b.kind == BufKind::Weight
                    && (p.elem_bytes == 1 || p.elem_bytes == 3)
                    && super::tile::weight_box(b.rows as u64, b.cols as u64).is_ok()
                {
                    let m = weight_tensor_map(base + p.off as u64, b.rows as u64, b.cols as u64)?;
                    maps[128 * i..128 * (i + 1)].copy_from_slice(&m);
                }
            }
            put(&mut arena, tmaps_off, &maps)?;
        }
        let ctx = DevCtx {
            bufs: base + t_bufs as u64,
            scales: base + t_scales as u64,
            rows: base + t_rows as u64,
            cols: base + t_cols as u64,
            wbytes: base + t_wbytes as u64,
            rope: base + t_rope as u64,
            stop: base + stop_off as u64,
            tickets: base + tickets_off as u64,
            stamps: if super::cuda_define("GRAPH_STAMPS").unwrap_or(0) != 0 { base + tl_off as u64 } else { 0 },
            unit_base: base + tl_base as u64,
            tmaps: base + tmaps_off as u64,
            sampler: base + samp_off as u64,
            rotary_dim: rot as u32,
            head_dim: cfg.head_dim as u32,
            gdn_dim: cfg.gdn_v_dim as u32,
            n_heads: cfg.n_heads as u32,
            n_kv_heads: cfg.n_kv_heads as u32,
            gdn_k_heads: cfg.gdn_k_heads as u32,
            gdn_v_heads: cfg.gdn_v_heads as u32,
            max_ctx: max_ctx as u32,
            eps: cfg.rms_eps as f32,
            n_bufs: n as u32,
        };
        // M > 1: the row loop is compiled in (M = 1 programs compile the sources unchanged).
        let src = match m_rows {
            1 => super::source(),
            m => format!("#define M_ROWS {m}\n{}", super::source()),
        };
        let (module, module_hash) = gpu.module(&src, cache)?;
        let mut funcs = HashMap::new();
        // Dynamic shared memory above the 48 KiB default is opted into per kernel.
        let opt_in = |f: &CudaFunction, bytes: u32| -> Result<()> {
            if bytes > 48 * 1024 {
                cu(
                    f.set_attribute(
                        cudarc::driver::sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                        bytes as i32,
                    ),
                    "cuFuncSetAttribute (dynamic shared memory)",
                )?;
            }
            Ok(())
        };
        for op in Opcode::ALL {
            let f = cu(module.load_function(&format!("k_{}", op.snake())), "cuModuleGetFunction")?;
            opt_in(&f, prog.words.iter().filter(|w| w.opcode == op).map(|w| smem_bytes(prog, w)).max().unwrap_or(0))?;
            funcs.insert(op, f);
        }
        let mut ring_funcs = HashMap::new();
        if ring_on() {
            for op in RING_OPS {
                let f = cu(module.load_function(&format!("r_{}", op.snake())), "cuModuleGetFunction (ring)")?;
                opt_in(&f, ring_launch_smem(prog).unwrap_or(0))?;
                ring_funcs.insert(op, f);
            }
        }
        let find = |name: &str| {
            prog.buffer_id(name).ok_or_else(|| Error::new(format!("gpu: the program has no {name} buffer")))
        };
        let (ctrl, logits) = (find("ctrl")?, find("logits")?);
        cu(stream.synchronize(), "cuStreamSynchronize (upload)")?;
        let ev = || cu(gpu.ctx.new_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT)), "cuEventCreate");
        let events = (0..prog.words.len()).map(|_| Ok((ev()?, ev()?))).collect::<Result<Vec<_>>>()?;
        // SAFETY: bytes have no invalid bit patterns; the slices are written only by device copies.
        let pinned = (0..2)
            .map(|_| cu(unsafe { gpu.ctx.alloc_pinned::<u8>(4) }, "cuMemHostAlloc"))
            .collect::<Result<Vec<_>>>()?;
        let pinned_ev = (0..2).map(|_| ev()).collect::<Result<Vec<_>>>()?;
        Ok(Discrete {
            gpu,
            prog: prog.clone(),
            arena,
            base,
            places,
            prog_off,
            ctx,
            funcs,
            ring_funcs,
            graph: None,
            mk_off,
            mk_stride,
            mk_tokens,
            tl_base,
            tl_off,
            total_units,
            samp_off,
            stop_off,
            tickets_off,
            stop_token: None,
            stopped: false,
            sampler: module.load_function("k_sample").ok(),
            sample_collect: match super::cuda_define("TOPK_FUSED").unwrap_or(1) {
                0 => None,
                _ => module.load_function("k_sample_collect").ok(),
            },
            sampling: false,
            mega: match module.load_function("megakernel") {
                Ok(f) => {
                    opt_in(&f, mega_smem_bytes(prog))?;
                    Some(f)
                }
                Err(_) => None,
            },
            pos: 0,
            broken: false,
            ctrl,
            logits,
            module_hash,
            arena_bytes: total,
            events,
            pinned,
            pinned_ev,
        })
    }

    fn launch_word(&self, i: usize) -> Result<()> {
        self.launch_words(i, 1)
    }

    /// One launch of words first..first + n (one stage, one opcode: see `launch_groups`).
    fn launch_words(&self, first: usize, n: usize) -> Result<()> {
        let words = &self.prog.words[first..first + n];
        let w = &words[0];
        let units: u32 = words.iter().map(|w| w.units).sum();
        let ring = ring_smem(&self.prog, words).and_then(|b| Some((self.ring_funcs.get(&w.opcode)?, b)));
        let (f, smem, grid, threads) = match ring {
            Some((f, smem)) => {
                // all resident blocks, each taking units by ticket
                let threads = ring_threads();
                let per_sm =
                    f.occupancy_max_active_blocks_per_multiprocessor(threads, smem as usize, None).unwrap_or(1).max(1);
                (f, smem, units.min(per_sm * self.gpu.sms).max(1), threads)
            }
            None => {
                let f = &self.funcs[&w.opcode];
                let smem = words.iter().map(|w| smem_bytes(&self.prog, w)).max().unwrap_or(0);
                (f, smem, self.grid(f, w.opcode, units, smem), 256)
            }
        };
        let cfg = LaunchConfig { grid_dim: (grid, 1, 1), block_dim: (threads, 1, 1), shared_mem_bytes: smem };
        let prog_ptr = self.base + self.prog_off as u64;
        let (wi, nw) = (first as u32, n as u32);
        let what = || format!("launch words {first}..{} ({:?})", first + n, w.opcode);
        if super::cuda_define("GRAPH_PDL").unwrap_or(0) != 0 {
            return self
                .launch_programmatic(f, cfg, [prog_ptr], [wi, nw])
                .map_err(|e| Error::new(format!("{}: {e}", what())));
        }
        let mut b = self.gpu.stream.launch_builder(f);
        b.arg(&prog_ptr).arg(&wi).arg(&nw).arg(&self.ctx);
        // SAFETY: the kernel's parameters are (const Word*, unsigned, unsigned, DevCtx) and every
        // pointer in the context points into the arena, which outlives the launch.
        cu(unsafe { b.launch(cfg) }.map(|_| ()), &what())
    }

    /// A launch that may begin while the stream's previous kernel is still running (programmatic
    /// dependent launch, captured into the graph as a programmatic edge): the kernel prefetches its
    /// weights, then waits for the previous kernel's completion (`griddepcontrol.wait`) before it
    /// reads or writes anything else (GRAPH_PDL in megakernel/discrete.cu).
    fn launch_programmatic(&self, f: &CudaFunction, cfg: LaunchConfig, ptrs: [u64; 1], words: [u32; 2]) -> Result<()> {
        use cudarc::driver::sys;
        let mut attr: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
        attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        attr.value.programmaticStreamSerializationAllowed = 1;
        let lc = sys::CUlaunchConfig {
            gridDimX: cfg.grid_dim.0,
            gridDimY: 1,
            gridDimZ: 1,
            blockDimX: cfg.block_dim.0,
            blockDimY: 1,
            blockDimZ: 1,
            sharedMemBytes: cfg.shared_mem_bytes,
            hStream: self.gpu.stream.cu_stream(),
            attrs: &mut attr,
            numAttrs: 1,
        };
        let (mut p, mut wi, mut nw, mut ctx) = (ptrs[0], words[0], words[1], self.ctx);
        let mut params: [*mut std::ffi::c_void; 4] = [
            (&mut p as *mut u64).cast(),
            (&mut wi as *mut u32).cast(),
            (&mut nw as *mut u32).cast(),
            (&mut ctx as *mut DevCtx).cast(),
        ];
        // SAFETY: the parameters are (const Word*, unsigned, unsigned, DevCtx) as the kernel declares,
        // each pointed to for the duration of the call (the driver copies them); every device pointer
        // is in the arena, which outlives the launch; the stream and function belong to this context.
        let r = unsafe { sys::cuLaunchKernelEx(&lc, f.cu_function(), params.as_mut_ptr(), std::ptr::null_mut()) };
        if r != sys::CUresult::CUDA_SUCCESS {
            return Err(Error::new(format!("cuLaunchKernelEx (programmatic): {r:?}")));
        }
        Ok(())
    }

    /// Blocks for a launch of `units` units: one per unit, or with UNIT_LOOP (GEMVs only) all resident
    /// blocks (at most one per unit) taking units by ticket (GEMV_DYNAMIC), or without tickets as few
    /// as keep every SM's resident slots busy with the same number of units per block: rounds =
    /// ceil(units / resident capacity), blocks = ceil(units / rounds), each running `rounds` units (its
    /// prepared input computed once per block and word either way).
    fn grid(&self, f: &CudaFunction, op: Opcode, units: u32, smem: u32) -> u32 {
        let gemv = matches!(
            op,
            Opcode::GemvNorm
                | Opcode::GemvGateUp
                | Opcode::GemvGatedNormResidual
                | Opcode::GemvResidual
                | Opcode::LmHead
        );
        if !gemv || super::cuda_define("UNIT_LOOP").unwrap_or(0) == 0 {
            return units;
        }
        let per_sm = f.occupancy_max_active_blocks_per_multiprocessor(256, smem as usize, None).unwrap_or(1).max(1);
        gemv_grid(units, per_sm * self.gpu.sms, super::cuda_define("GEMV_DYNAMIC").unwrap_or(0) != 0)
    }

    /// The graph's launches: runs of consecutive words with the same opcode, wait and signal (one
    /// stage: nothing orders them), one kernel each. Small words then share the GPU with big ones.
    pub fn launch_groups(&self) -> Vec<(usize, usize)> {
        launch_groups_of(&self.prog)
    }

    /// Zeroes the per-sequence state, the control block (position 0) and the activations.
    pub fn reset(&mut self) -> Result<()> {
        self.pos = 0;
        self.broken = false;
        let stream = self.gpu.stream.clone();
        for (b, p) in self.prog.buffers.iter().zip(self.places.clone()) {
            if b.kind != BufKind::Weight {
                let mut v = self.arena.slice_mut(p.off..p.off + p.bytes);
                cu(stream.memset_zeros(&mut v), "cuMemsetD8")?;
            }
        }
        // The sampler's sticky status and counts (its parameters stay), the stopped flag (the stop
        // token stays).
        self.clear_sampler()?;
        let mut v = self.arena.slice_mut(self.stop_off + 4..self.stop_off + 8);
        cu(stream.memset_zeros(&mut v), "cuMemsetD8")?;
        // The GEMV launches' ticket pairs (zero after every complete launch; zeroed here too, so that a
        // launch cut short can never leave later ones skipping units).
        let mut v = self.arena.slice_mut(self.tickets_off..self.tickets_off + 8 * self.prog.words.len());
        cu(stream.memset_zeros(&mut v), "cuMemsetD8")?;
        self.stopped = false;
        Ok(())
    }

    /// One decode step on `token`; returns the greedy next token. `eager`: launch word by word
    /// (debug captures), else replay the CUDA graph (captured on first use).
    pub fn step(
        &mut self,
        token: u32,
        eager: bool,
        after_word: impl FnMut(&Discrete, usize) -> Result<()>,
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
        let vocab = self.prog.buffers[self.logits].cols as u32;
        if let Some(t) = stop.filter(|&t| t >= vocab) {
            crate::bail!("stop token id {t} is out of range (vocabulary {vocab})");
        }
        let w: Vec<u8> = [stop.map_or(0, |t| t + 1), 0].iter().flat_map(|x: &u32| x.to_le_bytes()).collect();
        let stream = self.gpu.stream.clone();
        let mut v = self.arena.slice_mut(self.stop_off..self.stop_off + 8);
        cu(stream.memcpy_htod(&w, &mut v), "write the stop token")?;
        cu(stream.synchronize(), "cuStreamSynchronize")?;
        self.stop_token = stop;
        self.stopped = false;
        Ok(())
    }

    fn step_unchecked(
        &mut self,
        token: u32,
        eager: bool,
        mut after_word: impl FnMut(&Discrete, usize) -> Result<()>,
    ) -> Result<u32> {
        let stream = self.gpu.stream.clone();
        let c = self.places[self.ctrl];
        {
            let mut v = self.arena.slice_mut(c.off + 4..c.off + 8);
            cu(stream.memcpy_htod(&token.to_le_bytes(), &mut v), "write token")?;
        }
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
                cu(
                    stream.begin_capture(cudarc::driver::sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
                    "begin capture",
                )?;
                let mut err = None;
                for (first, n) in self.launch_groups() {
                    // The sampler runs between the argmax and EndStep (it may replace the token).
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
                let g = cu(stream.end_capture(cudarc::driver::sys::CUgraphInstantiate_flags(0)), "end capture")?;
                if let Some(e) = err {
                    return Err(e);
                }
                self.graph = Some(g.ok_or_else(|| Error::new("graph capture produced no graph"))?);
            }
            if let Some(g) = &self.graph {
                cu(g.launch(), "cuGraphLaunch")?;
            }
        }
        let ctrl = self.read_u32(self.ctrl, 0, CTRL_LEN)?;
        self.check_sampler()?;
        Ok(ctrl[1])
    }

    /// The sampler's kernels (they return at once when sampling is off): with TOPK_FUSED
    /// k_sample_collect (one block of 256 per 2,048 ids: the ids at or above the top-k threshold the
    /// lm_head's counts give), then k_sample (one block of 1,024: top-p, the draw). In the graph
    /// always, so that turning sampling on or off never recaptures it.
    fn launch_sample(&self) -> Result<()> {
        let (Some(f), collect) = (&self.sampler, &self.sample_collect) else { return Ok(()) };
        let logits = self.base + self.places[self.logits].off as u64;
        let vocab = self.prog.buffers[self.logits].cols as u32;
        let ctrl = self.base + self.places[self.ctrl].off as u64;
        let sb = self.base + self.samp_off as u64;
        let stop = self.base + self.stop_off as u64;
        if let Some(c) = collect {
            let cfg = LaunchConfig {
                grid_dim: (vocab.div_ceil(8 * COLLECT_THREADS), 1, 1),
                block_dim: (COLLECT_THREADS, 1, 1),
                shared_mem_bytes: 0,
            };
            let mut b = self.gpu.stream.launch_builder(c);
            b.arg(&logits).arg(&vocab).arg(&sb).arg(&stop);
            // SAFETY: (const unsigned short*, unsigned, unsigned*, const unsigned*) as k_sample_collect
            // declares; every pointer is in the arena.
            cu(unsafe { b.launch(cfg) }.map(|_| ()), "launch the sampler's collect")?;
        }
        let cfg = LaunchConfig { grid_dim: (1, 1, 1), block_dim: (1024, 1, 1), shared_mem_bytes: 0 };
        let mut b = self.gpu.stream.launch_builder(f);
        b.arg(&logits).arg(&vocab).arg(&ctrl).arg(&sb).arg(&stop);
        // SAFETY: (const unsigned short*, unsigned, unsigned*, unsigned*, const unsigned*) as k_sample
        // declares; every pointer is in the arena.
        cu(unsafe { b.launch(cfg) }.map(|_| ()), "launch the sampler")
    }

    /// Zeroes the sampler's sticky status and the fused top-k's counts (its parameters stay).
    fn clear_sampler(&mut self) -> Result<()> {
        let stream = self.gpu.stream.clone();
        let (a, b) = (self.samp_off + 4 * SB_STATUS, self.samp_off + 4 * SB_CANDS);
        let mut v = self.arena.slice_mut(a..b);
        cu(stream.memset_zeros(&mut v), "cuMemsetD8")
    }

    /// Sampling for the following steps of the graph path (greedy when the temperature is 0): the
    /// CPU's `model::sample` rules and draw (`uniform_at(seed, position)`), so a GPU-sampled token is
    /// the CPU's choice on the same logits. The GPU takes 1 <= top_k <= 2048 (full-vocabulary
    /// sampling, top_k 0, is CPU-only).
    pub fn set_sampling(&mut self, p: &crate::model::sample::SamplingParams, seed: u64) -> Result<()> {
        p.check()?;
        if self.sampler.is_none() {
            crate::bail!("gpu: the module has no sampler kernel");
        }
        let on = p.temperature > 0.0;
        if on && !(1..=SAMPLE_MAX).contains(&p.top_k) {
            crate::bail!(
                "gpu sampling: top_k {} (the GPU sampler takes 1..={SAMPLE_MAX}; top_k 0 samples the whole vocabulary, CPU only)",
                p.top_k
            );
        }
        let mut b = Vec::with_capacity(32);
        b.extend_from_slice(&p.temperature.to_le_bytes());
        b.extend_from_slice(&(p.top_k as u32).to_le_bytes());
        b.extend_from_slice(&p.top_p.to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        b.extend_from_slice(&seed.to_le_bytes());
        let stream = self.gpu.stream.clone();
        let mut v = self.arena.slice_mut(self.samp_off..self.samp_off + 24);
        cu(stream.memcpy_htod(&b, &mut v), "write the sampling parameters")?;
        self.clear_sampler()?;
        cu(stream.synchronize(), "cuStreamSynchronize")?;
        self.sampling = on;
        Ok(())
    }

    /// How many ids the last sampled step kept at or above its top-k threshold (before top-p): the
    /// GPU check compares it with the CPU's count.
    pub fn sampler_kept(&self) -> Result<u32> {
        let at = self.samp_off + 4 * SB_KEPT;
        let v = self.arena.slice(at..at + 4);
        let mut b = [0u8; 4];
        cu(self.gpu.stream.memcpy_dtoh(&v, &mut b), "read the sampler's kept count")?;
        cu(self.gpu.stream.synchronize(), "cuStreamSynchronize")?;
        Ok(u32::from_le_bytes(b))
    }

    /// The sampler's sticky status after steps: more ids tied at the top-k threshold than it holds.
    fn check_sampler(&self) -> Result<()> {
        if !self.sampling {
            return Ok(());
        }
        let v = self.arena.slice(self.samp_off + 4 * SB_STATUS..self.samp_off + 4 * SB_STATUS + 4);
        let mut b = [0u8; 4];
        cu(self.gpu.stream.memcpy_dtoh(&v, &mut b), "read the sampler status")?;
        cu(self.gpu.stream.synchronize(), "cuStreamSynchronize")?;
        if u32::from_le_bytes(b) != 0 {
            crate::bail!(
                "gpu sampling: more than {SAMPLE_CAP} ids at or above the top-k threshold (ties at the k-th value; the step kept the argmax)"
            );
        }
        Ok(())
    }

    /// Negative control (issue 6): word `wi` of the uploaded program loses its wait, forced past the
    /// validator. Only the megakernel honours waits (the graph runs words in stream order), so a
    /// megakernel on this upload has a race the bit diff or the watchdog must catch.
    pub fn force_drop_wait(&mut self, wi: usize) -> Result<()> {
        if wi >= self.prog.words.len() {
            crate::bail!("drop_wait: word {wi} is past the program's {} words", self.prog.words.len());
        }
        let mut w = self.prog.words[wi];
        w.wait = crate::isa::NO_COUNTER;
        w.wait_target = 0;
        let at = self.prog_off + wi * crate::isa::WORD_BYTES;
        let stream = self.gpu.stream.clone();
        let mut v = self.arena.slice_mut(at..at + crate::isa::WORD_BYTES);
        cu(stream.memcpy_htod(&w.encode(), &mut v), "write word")?;
        cu(stream.synchronize(), "cuStreamSynchronize")
    }

    /// `n` greedy steps from `token` with one graph replay kept in flight ahead of the host: the graph
    /// reads its token from the device's control block (EndStep wrote it), so step i + 1 is queued
    /// before step i's token is read; each token reaches the host by an async copy into pinned memory
    /// and that copy's event, never a stream synchronisation. Returns the n generated tokens.
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
        let stream = self.gpu.stream.clone();
        let c = self.places[self.ctrl];
        {
            let mut v = self.arena.slice_mut(c.off + 4..c.off + 8);
            cu(stream.memcpy_htod(&token.to_le_bytes(), &mut v), "write token")?;
        }
        self.generate_queued(n)
    }

    /// `n` replays on the token already in the control block, one in flight ahead of each read.
    fn generate_queued(&mut self, n: usize) -> Result<Vec<u32>> {
        let stream = self.gpu.stream.clone();
        let c = self.places[self.ctrl];
        let next = c.off + 4 * crate::isa::access::CTRL_TOKEN;
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
                    cu(stream.synchronize(), "cuStreamSynchronize")?;
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
        let vocab = self.prog.buffers[self.logits].cols as u32;
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

    /// One step launched word by word with an event pair around each launch; returns each word's
    /// time in ms (the launch inventory: one kernel per word).
    pub fn time_words(&mut self, token: u32) -> Result<Vec<f32>> {
        self.check(token)?;
        let r = self.time_words_unchecked(token);
        self.advance(r, 1)
    }

    fn time_words_unchecked(&mut self, token: u32) -> Result<Vec<f32>> {
        let stream = self.gpu.stream.clone();
        let c = self.places[self.ctrl];
        {
            let mut v = self.arena.slice_mut(c.off + 4..c.off + 8);
            cu(stream.memcpy_htod(&token.to_le_bytes(), &mut v), "write token")?;
        }
        for i in 0..self.prog.words.len() {
            if self.prog.words[i].opcode == Opcode::EndStep {
                self.launch_sample()?; // untimed, as in the graph: between the argmax and EndStep
            }
            cu(self.events[i].0.record(&stream), "cuEventRecord")?;
            self.launch_word(i)?;
            cu(self.events[i].1.record(&stream), "cuEventRecord")?;
        }
        cu(stream.synchronize(), "cuStreamSynchronize")?;
        self.events.iter().map(|(a, b)| cu(a.elapsed_ms(b), "cuEventElapsedTime")).collect()
    }

    fn read_bytes(&self, buf: usize, from: usize, to: usize) -> Result<Vec<u8>> {
        let p = self.places[buf];
        let v = self.arena.slice(p.off + from..p.off + to);
        let mut host = vec![0u8; to - from];
        cu(self.gpu.stream.memcpy_dtoh(&v, &mut host), "cuMemcpyDtoH")?;
        cu(self.gpu.stream.synchronize(), "cuStreamSynchronize")?;
        Ok(host)
    }

    /// The bytes of every non-weight buffer (activations, scratch, state, control): a snapshot that
    /// `load_state` puts back bit for bit (the megakernel's per-instruction debug capture).
    pub fn save_state(&self) -> Result<Vec<Vec<u8>>> {
        let mut out = Vec::new();
        for (i, b) in self.prog.buffers.iter().enumerate() {
            out.push(if b.kind == BufKind::Weight { Vec::new() } else { self.read_bytes(i, 0, self.places[i].bytes)? });
        }
        Ok(out)
    }

    /// Puts a `save_state` snapshot back (the host's position mirror from the control block).
    pub fn load_state(&mut self, s: &[Vec<u8>]) -> Result<()> {
        if s.len() != self.prog.buffers.len() {
            crate::bail!("gpu: a state snapshot of {} buffers for a program of {}", s.len(), self.prog.buffers.len());
        }
        let stream = self.gpu.stream.clone();
        for (i, bytes) in s.iter().enumerate() {
            if self.prog.buffers[i].kind == BufKind::Weight {
                continue;
            }
            let p = self.places[i];
            if bytes.len() != p.bytes {
                crate::bail!(
                    "gpu: the snapshot of buffer {} has {} bytes, not {}",
                    self.prog.buffers[i].name,
                    bytes.len(),
                    p.bytes
                );
            }
            let mut v = self.arena.slice_mut(p.off..p.off + p.bytes);
            cu(stream.memcpy_htod(bytes, &mut v), "cuMemcpyHtoD")?;
        }
        cu(stream.synchronize(), "cuStreamSynchronize")?;
        self.pos = self.read_u32(self.ctrl, 0, 1)?[0] as usize;
        self.broken = false;
        Ok(())
    }

    /// Debug (issue 6): the first `words` words of a step on `token` as one megakernel launch (the
    /// position does not move unless the prefix reaches EndStep); the caller reads what they wrote.
    pub fn step_mega_prefix(&mut self, token: u32, words: usize) -> Result<()> {
        self.check(token)?;
        if words == 0 || words >= self.prog.words.len() {
            crate::bail!("megakernel prefix: {words} words of {} (a whole step is step_mega)", self.prog.words.len());
        }
        self.step_mega_unchecked(token, 1, false, words as u32).map(|_| ())
    }

    fn read_u32(&self, buf: usize, from: usize, n: usize) -> Result<Vec<u32>> {
        let b = self.read_bytes(buf, from * 4, (from + n) * 4)?;
        Ok(b.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
    }

    /// A buffer's first `n` elements as f32 (bf16 widened exactly).
    pub fn read(&self, buf: usize, n: usize) -> Result<Vec<f32>> {
        let eb = self.places[buf].elem_bytes as usize;
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
        let p = self.places[buf];
        let bytes: Vec<u8> = match (p.elem_bytes, self.prog.buffers[buf].kind) {
            (2, _) => data.iter().flat_map(|x| crate::model::numerics::f32_to_bf16(*x).to_le_bytes()).collect(),
            (4, BufKind::Control) => data.iter().flat_map(|x| (*x as u32).to_le_bytes()).collect(),
            _ => data.iter().flat_map(|x| x.to_le_bytes()).collect(),
        };
        let stream = self.gpu.stream.clone();
        let mut v = self.arena.slice_mut(p.off..p.off + bytes.len());
        cu(stream.memcpy_htod(&bytes, &mut v), "cuMemcpyHtoD")
    }

    /// Launches word `i` alone and waits for it (op-by-op checks: the caller owns the state).
    pub fn run_word(&mut self, i: usize) -> Result<()> {
        self.launch_word(i)?;
        self.sync()
    }

    pub fn logits(&self) -> Result<Vec<f32>> {
        self.read(self.logits, self.prog.buffers[self.logits].elems() as usize)
    }

    /// Timing only: jumps the sequence to position `pos` without computing it (the caches below it
    /// keep whatever they hold, zeros after `reset`): later steps cost what they would at that
    /// context, their values mean nothing.
    pub fn seek(&mut self, pos: usize) -> Result<()> {
        if pos >= self.prog.target.max_context as usize {
            crate::bail!("context overflow: seek to {pos} >= max context {}", self.prog.target.max_context);
        }
        let c = self.places[self.ctrl];
        let stream = self.gpu.stream.clone();
        let mut v = self
            .arena
            .slice_mut(c.off + 4 * crate::isa::access::CTRL_POS..c.off + 4 * crate::isa::access::CTRL_POS + 4);
        cu(stream.memcpy_htod(&(pos as u32).to_le_bytes(), &mut v), "write position")?;
        cu(stream.synchronize(), "cuStreamSynchronize")?;
        self.pos = pos;
        Ok(())
    }

    pub fn pos(&self) -> Result<usize> {
        Ok(self.read_u32(self.ctrl, 0, 1)?[0] as usize)
    }

    pub fn program(&self) -> &Program {
        &self.prog
    }

    /// One verification step of an M-row program: token m at position pos + m for every row m, as one
    /// graph replay or one megakernel launch; returns each row's greedy next token (row m's logits are
    /// row m of `logits()`). The position moves on by M. Greedy only (the sampler takes one row).
    pub fn step_rows(&mut self, tokens: &[u32], mega: bool) -> Result<Vec<u32>> {
        let m = self.prog.target.m_rows as usize;
        if tokens.len() != m {
            crate::bail!("gpu: {} tokens for a step of M = {m} rows", tokens.len());
        }
        for &t in tokens {
            self.check_token(t)?;
        }
        self.room(m, "rows")?;
        if self.sampling && m > 1 {
            crate::bail!("gpu: sampling takes one row; an M = {m} step is greedy");
        }
        let r = self.step_rows_unchecked(tokens, mega);
        self.advance(r, m)
    }

    fn step_rows_unchecked(&mut self, tokens: &[u32], mega: bool) -> Result<Vec<u32>> {
        let m = tokens.len();
        let mut ctrl = Vec::with_capacity(m * CTRL_LEN);
        for (r, &t) in tokens.iter().enumerate() {
            ctrl.extend([(self.pos + r) as f32, t as f32, 0.0]);
        }
        self.write(self.ctrl, &ctrl)?;
        if mega {
            self.step_mega_unchecked(tokens[0], 1, false, self.prog.words.len() as u32)?;
        } else {
            self.step_unchecked(tokens[0], false, |_, _| Ok(()))?;
        }
        let c = self.read_u32(self.ctrl, 0, m * CTRL_LEN)?;
        Ok((0..m).map(|r| c[r * CTRL_LEN + crate::isa::access::CTRL_TOKEN]).collect())
    }

    /// One decode step as one cooperative launch of the megakernel (a block per SM); returns the
    /// greedy next token. A wait that runs past the time limit is an error naming the first word that hung.
    pub fn step_mega(&mut self, token: u32) -> Result<u32> {
        self.check(token)?;
        let r = self.step_mega_unchecked(token, 1, false, self.prog.words.len() as u32);
        Ok(self.advance_by(r)?[0])
    }

    /// Up to `n` greedy decode steps in ONE cooperative launch (the in-kernel token loop: EndStep
    /// advances the control block on the device, a grid join separates steps). The step that produces
    /// the stop token (`set_stop`) is the last (the device-side stop). Returns the tokens of the steps
    /// run, in order; the position moves on by their count.
    pub fn step_mega_n(&mut self, token: u32, n: usize) -> Result<Vec<u32>> {
        self.check(token)?;
        let room = self.prog.target.max_context as usize - self.pos;
        if n == 0 || n > room {
            crate::bail!(
                "megakernel: {n} steps in one launch from position {} (1..={room} fit the max context {})",
                self.pos,
                self.prog.target.max_context
            );
        }
        let r = self.step_mega_unchecked(token, n as u32, false, self.prog.words.len() as u32);
        self.advance_by(r)
    }

    /// One megakernel step that also records its timeline: the raw stamps, four u64 per unit of the
    /// program (`experiment::timeline` decodes them; a unit not run has zeros).
    pub fn step_mega_timeline(&mut self, token: u32) -> Result<(u32, Vec<u64>)> {
        self.check(token)?;
        self.zero_timeline()?;
        let r = self.step_mega_unchecked(token, 1, true, self.prog.words.len() as u32);
        let t = self.advance_by(r)?[0];
        Ok((t, self.read_timeline()?))
    }

    /// Whether the graph's kernels stamp their units (compiled with GRAPH_STAMPS=1).
    pub fn graph_stamps(&self) -> bool {
        self.ctx.stamps != 0
    }

    /// One graph step that also returns its timeline (compiled with GRAPH_STAMPS=1: every discrete
    /// kernel stamps its units in the megakernel's format, `experiment::timeline` decodes both).
    pub fn step_graph_timeline(&mut self, token: u32) -> Result<(u32, Vec<u64>)> {
        if !self.graph_stamps() {
            crate::bail!("graph timeline: the kernels were compiled without GRAPH_STAMPS=1 (MK_CUDA_DEFINES)");
        }
        self.check(token)?;
        self.zero_timeline()?;
        let t = self.step(token, false, |_, _| Ok(()))?;
        Ok((t, self.read_timeline()?))
    }

    fn zero_timeline(&mut self) -> Result<()> {
        let stream = self.gpu.stream.clone();
        let mut v = self.arena.slice_mut(self.tl_off..self.tl_off + 32 * self.total_units);
        cu(stream.memset_zeros(&mut v), "zero the timeline")
    }

    fn read_timeline(&self) -> Result<Vec<u64>> {
        let p = self.arena.slice(self.tl_off..self.tl_off + 32 * self.total_units);
        let mut host = vec![0u8; 32 * self.total_units];
        cu(self.gpu.stream.memcpy_dtoh(&p, &mut host), "read the timeline")?;
        cu(self.gpu.stream.synchronize(), "cuStreamSynchronize")?;
        Ok(host.chunks_exact(8).map(|c| u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]])).collect())
    }

    /// After checked steps (a megakernel launch, a pipelined decode): the position moves on by the
    /// steps run, the sequence is stopped when the last was the stop token; a failure marks it broken.
    fn advance_by(&mut self, r: Result<Vec<u32>>) -> Result<Vec<u32>> {
        match r {
            Ok(v) => {
                self.pos += v.len();
                self.stopped = self.stop_token.is_some() && v.last().copied() == self.stop_token;
                Ok(v)
            }
            Err(e) => {
                self.broken = true;
                Err(e)
            }
        }
    }

    /// One launch of `n_steps` steps (1 with the timeline); returns the tokens of the steps it ran.
    /// One launch of `n_steps` steps (1 with the timeline) over the first `words` words of the program
    /// (all of them but for the debug prefix); returns the tokens of the steps it ran.
    fn step_mega_unchecked(&mut self, token: u32, n_steps: u32, timeline: bool, words: u32) -> Result<Vec<u32>> {
        if timeline && n_steps != 1 {
            crate::bail!("megakernel: the timeline records one step per launch");
        }
        if self.sampling {
            crate::bail!("gpu: sampling runs on the graph path only (the megakernel is greedy)");
        }
        let f = self.mega.clone().ok_or_else(|| Error::new("gpu: the module has no megakernel"))?;
        let stream = self.gpu.stream.clone();
        let c = self.places[self.ctrl];
        {
            let mut v = self.arena.slice_mut(c.off + 4..c.off + 8);
            cu(stream.memcpy_htod(&token.to_le_bytes(), &mut v), "write token")?;
        }
        let pos0 = self.pos as u32; // the host's mirror of the control block's position (check, seek, reset)
                                    // counters, tickets, the error word and its step, the finished-step count
        let n_ctl = self.prog.n_counters as usize + self.prog.words.len() + 3;
        {
            let mut v = self.arena.slice_mut(self.mk_off..self.mk_off + 4 * n_ctl);
            cu(stream.memset_zeros(&mut v), "zero the megakernel counters")?;
        }
        #[repr(C)]
        #[derive(Clone, Copy)]
        struct MkCtl {
            counters: u64,
            next: u64,
            error: u64,
            timeout_ns: u64,
            stamps: u64,
            unit_base: u64,
            wait_stride: u64,
            step_done: u64,
            tokens: u64,
            n_steps: u32,
        }
        // SAFETY: plain old data with the layout of MkCtl in megakernel.cu.
        unsafe impl DeviceRepr for MkCtl {}
        const _: () = assert!(std::mem::size_of::<MkCtl>() == 80);
        let base = self.base + self.mk_off as u64;
        let ctl = MkCtl {
            counters: base,
            next: base + 4 * self.prog.n_counters as u64,
            error: base + 4 * (n_ctl as u64 - 3),
            timeout_ns: MEGA_WAIT_TIMEOUT_NS,
            stamps: if timeline { self.base + self.tl_off as u64 } else { 0 },
            unit_base: self.base + self.tl_base as u64,
            wait_stride: self.base + self.mk_stride as u64,
            step_done: base + 4 * (n_ctl as u64 - 1),
            tokens: self.base + self.mk_tokens as u64,
            n_steps,
        };
        let smem = mega_smem_bytes(&self.prog);
        // MEGA_BLOCKS_PER_SM blocks per SM (its launch bounds in megakernel.cu); the cooperative launch
        // fails, instead of hanging, if they cannot all be resident.
        let per_sm = super::cuda_define("MEGA_BLOCKS_PER_SM").unwrap_or(1).max(1);
        let cfg =
            LaunchConfig { grid_dim: (self.gpu.sms * per_sm, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: smem };
        let prog_ptr = self.base + self.prog_off as u64;
        let n_words = words;
        let mut b = stream.launch_builder(&f);
        // (the megakernel never samples: its lm_head counts nothing)
        let ctx = DevCtx { sampler: 0, ..self.ctx };
        b.arg(&prog_ptr).arg(&n_words).arg(&ctx).arg(&ctl);
        // SAFETY: (const Word*, unsigned, DevCtx, MkCtl) as the kernel declares; every pointer is in
        // the arena. Cooperative: the launch fails instead of hanging if the blocks cannot co-reside.
        cu(unsafe { b.launch_cooperative(cfg) }.map(|_| ()), "cooperative launch of the megakernel")?;
        // One synchronisation: the error word and its step, the position, the launch's tokens.
        let (mut err, mut pos, mut toks) = ([0u8; 8], [0u8; 4], vec![0u8; 4 * n_steps as usize]);
        {
            let v = self.arena.slice(self.mk_off + 4 * (n_ctl - 3)..self.mk_off + 4 * (n_ctl - 1));
            cu(stream.memcpy_dtoh(&v, &mut err), "read the megakernel error word")?;
            let v = self.arena.slice(c.off..c.off + 4);
            cu(stream.memcpy_dtoh(&v, &mut pos), "read the position")?;
            let v = self.arena.slice(self.mk_tokens..self.mk_tokens + 4 * n_steps as usize);
            cu(stream.memcpy_dtoh(&v, &mut toks), "read the megakernel's tokens")?;
        }
        cu(stream.synchronize(), "cuStreamSynchronize (megakernel)")?;
        let e = u32::from_le_bytes([err[0], err[1], err[2], err[3]]);
        let step = u32::from_le_bytes([err[4], err[5], err[6], err[7]]);
        if e as usize == self.prog.words.len() + 1 {
            crate::bail!(
                "megakernel: the join before step {step} of the launch waited more than {} s (a hang, stopped)",
                MEGA_WAIT_TIMEOUT_NS / 1_000_000_000
            );
        }
        if e != 0 {
            let w = &self.prog.words[e as usize - 1];
            let stride = wait_strides(&self.prog)[e as usize - 1];
            crate::bail!(
                "megakernel: word {} ({:?}) in step {step} of the launch waited more than {} s for counter {} to reach {} (a hang, stopped)",
                e - 1,
                w.opcode,
                MEGA_WAIT_TIMEOUT_NS / 1_000_000_000,
                w.wait,
                w.wait_target + step * stride
            );
        }
        if (words as usize) < self.prog.words.len() {
            return Ok(Vec::new()); // a debug prefix: no EndStep, no token
        }
        // The steps run: the position EndStep advanced (fewer than n_steps after a stop).
        let ran = u32::from_le_bytes(pos).wrapping_sub(pos0) as usize / self.prog.target.m_rows as usize;
        if ran == 0 || ran > n_steps as usize {
            crate::bail!("megakernel: the launch of {n_steps} steps moved the position by {ran}");
        }
        Ok(toks[..4 * ran].chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
    }

    /// Free and total device memory (bytes), to show that nothing allocates after startup.
    pub fn mem_info(&self) -> Result<(usize, usize)> {
        cu(self.gpu.ctx.mem_get_info(), "cuMemGetInfo")
    }

    /// Waits for the stream; for timing.
    pub fn sync(&self) -> Result<()> {
        cu(self.gpu.stream.synchronize(), "cuStreamSynchronize")
    }
}

/// `Discrete::launch_groups` of a program: (first word, words) per launch.
fn launch_groups_of(prog: &Program) -> Vec<(usize, usize)> {
    let mut out: Vec<(usize, usize)> = Vec::new();
    for (i, w) in prog.words.iter().enumerate() {
        if let Some(last) = out.last_mut() {
            let f = &prog.words[last.0];
            if (f.opcode, f.wait, f.wait_target, f.signal) == (w.opcode, w.wait, w.wait_target, w.signal) {
                last.1 += 1;
                continue;
            }
        }
        out.push((i, 1));
    }
    out
}

/// Per word: how much its wait counter grows in one step (the units of every word signalling it), so
/// that step s of a multi-step launch waits for wait_target + s * stride (counters are not reset
/// between the steps of one launch). 0 for a word that waits on nothing.
pub fn wait_strides(prog: &Program) -> Vec<u32> {
    let mut per_counter = vec![0u32; prog.n_counters as usize];
    for w in &prog.words {
        if let Some(c) = per_counter.get_mut(w.signal as usize) {
            *c += w.units;
        }
    }
    prog.words
        .iter()
        .map(
            |w| {
                if w.wait == crate::isa::NO_COUNTER {
                    0
                } else {
                    per_counter.get(w.wait as usize).copied().unwrap_or(0)
                }
            },
        )
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gpu_with_less_shared_memory_is_refused() {
        assert!(check_smem("H200", 228 * 1024, 227 * 1024).is_ok());
        let e = check_smem("small GPU", 100 * 1024, 99 * 1024).unwrap_err().to_string();
        assert!(e.contains("small GPU has 100 KiB of shared memory per SM"), "{e}");
        assert!(check_smem("H200", 228 * 1024, 200 * 1024).is_err());
    }

    #[test]
    fn sampler_block_layout_matches_the_kernels() {
        // The host sizes, clears and reads the sampler's block by these; the kernels define them.
        let src = super::super::source();
        for (name, v) in [
            ("SB_STATUS", SB_STATUS),
            ("SB_KEPT", SB_KEPT),
            ("SB_CANDS", SB_CANDS),
            ("SAMPLE_CAP", SAMPLE_CAP),
            ("SAMPLE_MAX", SAMPLE_MAX),
            ("COLLECT_THREADS", COLLECT_THREADS as usize),
        ] {
            assert!(src.contains(&format!("#define {name} {v} ")), "#define {name} {v} in the CUDA sources");
        }
        assert!(src.contains("#define SB_WORDS (SB_CANDS + SAMPLE_CAP)"));
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
        // h (bf16), the control block (u32 x 3), a KV cache and a weight, in view 2
        let h = id("h");
        assert_eq!(v[2 * n + h], at[h] + 2 * p.buffers[h].cols * 2);
        let c = id("ctrl");
        assert_eq!(v[2 * n + c], at[c] + 2 * 3 * 4);
        let kv = p.buffers.iter().position(|b| b.kind == BufKind::State).unwrap();
        assert_eq!(v[2 * n + kv], at[kv]);
        let wt = p.buffers.iter().position(|b| b.kind == BufKind::Weight).unwrap();
        assert_eq!(v[n + wt], at[wt]);
    }

    #[test]
    fn ring_shared_memory_fits_the_blocks_per_sm() {
        // The 27B: x of 5,120 (most GEMVs), 6,144 (o_proj, GDN out_proj) and 17,408 (down).
        let slot = RING_SLOT + RING_SC;
        assert_eq!(ring_base(5120), 10_496);
        assert_eq!(ring_smem_for(5120, 1, 12, RING_STATIC, RING_SLOT), Some(10_496 + 12 * slot));
        assert_eq!(ring_smem_for(17_408, 1, 16, RING_STATIC, RING_SLOT), Some(ring_base(17_408) + 11 * slot));
        assert_eq!(ring_smem_for(5120, 2, 12, RING_STATIC, RING_SLOT), Some(10_496 + 6 * slot));
        // under 2 slots: the k_* kernel
        assert_eq!(ring_smem_for(5120, 7, 12, RING_STATIC, RING_SLOT), None);
        // 32 KB slots (RING_SLOT_KB=32): 6 for x of 5,120 at one block per SM, 3 at two.
        assert_eq!(ring_smem_for(5120, 1, 12, RING_STATIC, 32_768), Some(10_496 + 6 * (32_768 + RING_SC)));
        assert_eq!(ring_smem_for(5120, 2, 12, RING_STATIC, 32_768), Some(10_496 + 3 * (32_768 + RING_SC)));
        for slot_bytes in [RING_SLOT, 32_768] {
            for k in [64, 256, 5120, 6144, 17_408] {
                for blocks in 1..=3 {
                    if let Some(b) = ring_smem_for(k, blocks, 16, RING_STATIC, slot_bytes) {
                        assert!(blocks * (b + 1024 + RING_STATIC) <= SMEM_PER_SM && b + RING_STATIC <= SMEM_PER_BLOCK);
                        assert_eq!((b - ring_base(k)) % (slot_bytes + RING_SC), 0);
                    }
                }
            }
        }
        // Every GEMV launch of the 27B but the lm_head takes the ring; a launch mixing widths does not.
        let p = prog_27b();
        let d = launch_groups_of(&p);
        let mut rings = 0;
        for (first, n) in d {
            let words = &p.words[first..first + n];
            let r = ring_smem_with(&p, words, 1, 12, RING_STATIC, RING_SLOT);
            assert_eq!(r.is_some(), RING_OPS.contains(&words[0].opcode), "{:?}", words[0].opcode);
            rings += r.is_some() as usize;
        }
        assert!(rings > 200, "{rings} ring launches");
        let gate = p.words.iter().find(|w| w.opcode == Opcode::GemvGateUp).unwrap().clone();
        let down = p.words.iter().find(|w| w.opcode == Opcode::GemvResidual && w.layer == 0).unwrap().clone();
        assert!(ring_smem_with(&p, &[gate.clone()], 1, 12, RING_STATIC, RING_SLOT).is_some());
        let width = |w: &Word| p.buffers[w.op(crate::isa::slot::IN0).unwrap()].cols;
        let o = p.words.iter().filter(|w| w.opcode == Opcode::GemvResidual).find(|w| width(w) != width(&down)).unwrap();
        assert!(ring_smem_with(&p, &[down.clone(), o.clone()], 1, 12, RING_STATIC, RING_SLOT).is_none());
        let mut lm = gate;
        lm.opcode = Opcode::LmHead;
        assert!(ring_smem_with(&p, &[lm], 1, 12, RING_STATIC, RING_SLOT).is_none());
    }

    #[test]
    fn tensor_core_ring_takes_whole_items_and_fits() {
        // RING_TC: every fp8 GEMV launch of the 27B takes the ring (all widths whole 1,024-wide groups,
        // all rows multiples of 16); the layout's arithmetic: x, block sums, two halves of TC_RED, the
        // 1,024-byte pad, then slots of 16 KB + scales.
        let p = prog_27b();
        let mut rings = 0;
        for (first, n) in launch_groups_of(&p) {
            let words = &p.words[first..first + n];
            let r = ring_smem_tc(&p, words, 1, 12, RING_STATIC);
            assert_eq!(r.is_some(), RING_OPS.contains(&words[0].opcode), "{:?}", words[0].opcode);
            if let Some(b) = r {
                let k = p.buffers[words[0].op(crate::isa::slot::IN0).unwrap()].cols as u32;
                let base = ring_base(k) + 2 * TC_RED * 4 + 1024;
                assert_eq!((b - base) % (16384 + RING_SC), 0);
                assert!((b - base) / (16384 + RING_SC) >= 8, "at least 8 slots at one block per SM");
                assert!(b + 1024 + RING_STATIC <= SMEM_PER_SM && b + RING_STATIC <= SMEM_PER_BLOCK);
                rings += 1;
            }
        }
        assert!(rings > 200, "{rings} ring launches");
        // fp8 words are tensor-core words; the GDN's bf16 a / b projections are not (legacy items).
        let gdn_a = p.words.iter().find(|w| w.opcode == Opcode::GemvNorm && w.rows == 48).unwrap();
        assert!(!tc_word(&p, gdn_a));
        assert!(p.words.iter().filter(|w| w.opcode == Opcode::GemvGateUp).all(|w| tc_word(&p, w)));
        // Negative controls: a width without whole items (the tiny preset's) or rows not a multiple of 16
        // keep the k_* kernels, never a ring without a tensor map.
        let tiny_cfg = crate::model::config::ModelConfig::preset("tiny").unwrap();
        let tiny = crate::compiler::compile(&tiny_cfg, "tiny", &crate::compiler::h200(1)).unwrap();
        let mut checked = 0;
        for (first, n) in launch_groups_of(&tiny) {
            let words = &tiny.words[first..first + n];
            if words.iter().any(|w| tc_word(&tiny, w)) {
                assert!(ring_smem_tc(&tiny, words, 1, 12, RING_STATIC).is_none(), "tiny's {:?}", words[0].opcode);
                checked += 1;
            }
        }
        assert!(checked > 10, "{checked} tiny launches with tensor-core words");
        let mut q = p.clone();
        let gate = q.words.iter().find(|w| w.opcode == Opcode::GemvGateUp).unwrap().clone();
        q.buffers[gate.op(crate::isa::slot::W1).unwrap()].rows -= 8;
        assert!(ring_smem_tc(&q, &[gate], 1, 12, RING_STATIC).is_none(), "up's rows 17,400");
        // RING_TC's tunables are refused with anything its consumers do not handle.
        for bad in [["RING_TC=1", "RING_CWARPS=16"], ["RING_TC=1", "RING_SLOT_KB=32"], ["RING_TC=1", "GEMV_MMA=0"]] {
            let defs: Vec<String> = bad.iter().map(|s| s.to_string()).collect();
            assert!(super::super::check_define_list(&defs).is_err(), "{bad:?}");
        }
        assert!(super::super::check_define_list(&["RING_TC=1".to_string()]).is_ok());
    }

    #[test]
    fn gemv_grids_cover_the_units() {
        // The 27B's gate/up: 1,088 units on 264 resident blocks (2 per SM).
        assert_eq!(gemv_grid(1088, 264, true), 264);
        assert_eq!(gemv_grid(1088, 264, false), 218); // 5 rounds: 218 x 5 >= 1,088 > 218 x 4
        assert_eq!(gemv_grid(6, 264, true), 6);
        assert_eq!(gemv_grid(6, 264, false), 6);
        for units in [1, 7, 263, 264, 265, 1030, 5000] {
            let g = gemv_grid(units, 264, false);
            assert!(g <= 264 && g * units.div_ceil(g) >= units, "{units} units on {g} blocks");
        }
    }
    use crate::isa::Opcode;

    /// A model of ring.cu's item and piece arithmetic (producer: each (unit, sub) byte sequence cut
    /// into `slot_bytes` items; consumer: the pieces q0..q1 of an item at (q / G) span + (q % G) piece):
    /// on every ring launch of every preset, each (row, k-group) piece of each unit lies inside the
    /// bytes its item's copies bring, within the slot, and is computed exactly once by the consumer
    /// warps' loops (8 or 16 warps, 16 or 32 KB slots, the pair path or pairs). Negative control:
    /// with pieces placed at q x 1,024 elements (the second version's arithmetic, wrong for rows
    /// narrower than a k-group) the model finds a piece outside its item.
    /// `cw`: consumer warps; `stride`: between a warp's pieces taken together (None: as ring.cu, cw).
    fn ring_pieces_ok(p: &Program, naive_offsets: bool, slot_bytes: u32, cw: u64, stride: Option<u64>) -> bool {
        for (first, n) in launch_groups_of(p) {
            let words = &p.words[first..first + n];
            if ring_smem_with(p, words, 1, 12, RING_STATIC, slot_bytes).is_none() {
                continue;
            }
            for w in words {
                let k = p.buffers[w.op(crate::isa::slot::IN0).unwrap()].cols as u64;
                let eb = if p.buffers[w.op(crate::isa::slot::W0).unwrap()].elem_bytes == 2 { 2 } else { 1 };
                let groups = k.div_ceil(KGROUP as u64);
                for u in 0..w.units as u64 {
                    let (kp, rs) = (u % w.k_parts as u64, u / w.k_parts as u64);
                    let (r0, r1) =
                        (rs * w.unit_rows as u64, (rs * w.unit_rows as u64 + w.unit_rows as u64).min(w.rows as u64));
                    let (g0, g1) = (kp * groups / w.k_parts as u64, (kp + 1) * groups / w.k_parts as u64);
                    let (g, piece) = (g1 - g0, KGROUP as u64 * eb);
                    let span = ((g1 * KGROUP as u64).min(k) - g0 * KGROUP as u64) * eb;
                    let (len, slot) = ((r1 - r0) * span, slot_bytes as u64);
                    let n = (r1 - r0) * g;
                    let mut seen = vec![0u32; n as usize];
                    for c in 0..len.div_ceil(slot) {
                        let (v0, v1) = (c * slot, len.min(c * slot + slot));
                        let single = len <= slot;
                        let q0 = if single { 0 } else { c * (slot / piece) };
                        let q1 = if single { n } else { n.min(q0 + slot / piece) };
                        // The consumers' loops: warp w takes q0 + w, stepping NP x CW, its NP pieces
                        // q, q + CW, .. kept while below q1 (the pair path: fp8, K a multiple of 1,024,
                        // NP = slot KB / CW), else pairs stepping 2 x CW.
                        let fast = eb == 1 && k % KGROUP as u64 == 0;
                        let np = if fast { slot / 1024 / cw } else { 2 };
                        let sd = stride.unwrap_or(cw);
                        let mine = (0..cw).flat_map(|w| {
                            (q0 + w..q1).step_by((np * cw) as usize).flat_map(move |q| (0..np).map(move |i| q + i * sd))
                        });
                        for q in mine.filter(|&q| q < q1) {
                            let gg = g0 + q % g;
                            let width = ((gg * KGROUP as u64 + KGROUP as u64).min(k) - gg * KGROUP as u64) * eb;
                            let at = if naive_offsets { q * piece } else { (q / g) * span + (q % g) * piece };
                            if at < v0 || at + width > v1 {
                                return false;
                            }
                            seen[q as usize] += 1;
                        }
                    }
                    if seen.iter().any(|&x| x != 1) {
                        return false;
                    }
                }
            }
        }
        true
    }

    #[test]
    fn ring_items_cover_every_piece_once() {
        for preset in ["tiny", "small", "qwen3.5-27b"] {
            let cfg = crate::model::config::ModelConfig::preset(preset).unwrap();
            let p = crate::compiler::compile(&cfg, preset, &crate::compiler::h200(1)).unwrap();
            for slot in [RING_SLOT, 32_768] {
                for cw in [8, 16] {
                    assert!(ring_pieces_ok(&p, false, slot, cw, None), "{preset} {slot} {cw}");
                }
            }
        }
        let cfg = crate::model::config::ModelConfig::preset("tiny").unwrap();
        let p = crate::compiler::compile(&cfg, "tiny", &crate::compiler::h200(1)).unwrap();
        assert!(!ring_pieces_ok(&p, true, RING_SLOT, 8, None), "the negative control passed");
        // Negative control of the consumers' loops: 16 warps taking their two pieces of a 32 KB item 8
        // apart (WARPS where CW is meant) compute some pieces twice and others never (the small
        // preset's widths take the pair path).
        let cfg = crate::model::config::ModelConfig::preset("small").unwrap();
        let p = crate::compiler::compile(&cfg, "small", &crate::compiler::h200(1)).unwrap();
        assert!(!ring_pieces_ok(&p, false, 32_768, 16, Some(8)), "the loop negative control passed");
    }

    fn prog_27b() -> Program {
        let cfg = crate::model::config::ModelConfig::preset("qwen3.5-27b").unwrap();
        crate::compiler::compile(&cfg, "qwen3.5-27b", &crate::compiler::h200(1)).unwrap()
    }

    #[test]
    fn the_ring_follows_the_device_layout() {
        // stream_ring_off(5120) in common.cuh: x 10,240 B + 4 x (2 x 5 x 8 x 16) floats + 64, to 128:
        // 15,488; then 8 warps x depth x two rows x (1,024 + 256) B.
        assert_eq!(stream_ring_bytes(5120, 0), 15_488);
        assert_eq!(stream_ring_bytes(5120, 3), 15_488 + 3 * 8 * 2 * 1280);
    }

    #[test]
    fn discrete_rings_fit_the_blocks_per_sm() {
        let p = prog_27b();
        for w in p.words.iter().filter(|w| matches!(w.opcode, Opcode::GemvGateUp | Opcode::GemvResidual)) {
            assert_eq!(smem_bytes_fit(&p, w, 2, 0), smem_bytes_depth(&p, w, 0));
            for blocks in 1..=4 {
                let b = smem_bytes_fit(&p, w, blocks, 4);
                assert!(
                    blocks * (b + 1024 + STATIC_SMEM_ROOM) <= SMEM_PER_SM || b == smem_bytes_depth(&p, w, 0),
                    "{blocks}: {b}"
                );
                assert!(b >= smem_bytes_depth(&p, w, 0));
            }
        }
        // 5,120-wide gate/up at 2 blocks per SM: depth 4 fits (15,488 + 81,920 B); the down
        // projection (17,408 wide) gets a shallower ring.
        let gate = p.words.iter().find(|w| w.opcode == Opcode::GemvGateUp).unwrap();
        assert_eq!(smem_bytes_fit(&p, gate, 2, 4) as usize, stream_ring_bytes(5120, 4));
        let down = p.words.iter().find(|w| w.opcode == Opcode::GemvResidual && w.k_parts > 1).unwrap();
        assert!((smem_bytes_fit(&p, down, 2, 4) as usize) < stream_ring_bytes(17_408, 4));
    }

    #[test]
    fn the_megakernel_smem_fits_its_blocks() {
        let p = prog_27b();
        let need = p.words.iter().map(|w| smem_bytes_depth(&p, w, 0)).max().unwrap();
        for per_sm in 1..=3 {
            assert_eq!(mega_smem_fit(&p, per_sm, 0), need);
            let s = mega_smem_fit(&p, per_sm, 4);
            assert!(
                s >= need && per_sm * (s + 1024 + STATIC_SMEM_ROOM) <= SMEM_PER_SM && s <= SMEM_PER_BLOCK,
                "{per_sm}: {s}"
            );
        }
    }
}
