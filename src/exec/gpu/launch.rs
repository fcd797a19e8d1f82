//! Launch shapes of the discrete path: each word's dynamic shared memory, the GEMV kernels' grids, the
//! graph's launch groups and the launches themselves (programmatic dependent launches, captured as
//! programmatic edges of the graph).
//!
//! Owns: every number of a launch (grid, block, shared memory). Refuses: a GPU with less shared memory
//! than the shapes are sized for (at startup, with its figures).

use cudarc::driver::{CudaFunction, LaunchConfig};

use super::abi::{DevCtx, MEGA_BLOCKS_PER_SM, MROW_X_BYTES, THREADS};
use super::{cu, GpuExec};
use crate::error::{Error, Result};
use crate::isa::access::{ATTN_HEAD_DIM, ATTN_PART, GDN_HEAD_DIM, KGROUP};
use crate::isa::{slot, Opcode, Program, Word};

/// Shared memory on an H200 SM (228 KiB), of which one block may take 227 KiB; 1 KiB per resident
/// block is the driver's. (This engine targets the H200; a GPU with less is refused at startup,
/// `check_smem`.)
pub const SMEM_PER_SM: u32 = 228 * 1024;
pub const SMEM_PER_BLOCK: u32 = 227 * 1024;
/// Room left per block for the kernels' static shared memory (K_GEMV's ticket slots, the megakernel's
/// unit and wait flags: tens of bytes; ptxas reports them).
const STATIC_SMEM_ROOM: u32 = 256;

/// Refuses a GPU with less shared memory than the launch shapes are sized for (SMEM_PER_SM,
/// SMEM_PER_BLOCK: the H200's), rather than launches the driver would refuse mid-run.
pub fn check_smem(name: &str, per_sm: u32, per_block: u32) -> Result<()> {
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

/// An M-row step's word (M > 1) that runs its M rows in one pass over its weights: the fp8 GEMVs, the
/// bf16 ones with normed inputs (GDN's a and b) and the lm_head, whose M prepared inputs fit
/// `MROW_X_BYTES` (megakernel/common.cuh `mrow_gemv` decides the same on the device). Some(whether its inputs are prepared in shared memory: normed ones; o_proj and
/// down_proj read theirs as they are), None for a word that runs its rows one after another.
pub fn mrow_gemv(p: &Program, w: &Word) -> Option<bool> {
    let m = p.target.m_rows;
    // (a prefill program's GEMVs are the GEMM's or run their rows one after another: prefill.rs)
    if m <= 1 || p.target.prefill {
        return None;
    }
    let fp8 = || w.op(slot::W0).is_some_and(|b| p.buffers[b].elem_bytes == 1);
    let x_smem = match w.opcode {
        Opcode::GemvNorm | Opcode::GemvResidual if fp8() => w.op(slot::W1).is_some(),
        Opcode::GemvGateUp if fp8() => w.op(slot::W2).is_some(),
        // bf16 (GDN's a and b): one pass when its inputs are normed into shared memory (dot_rows_m)
        Opcode::GemvNorm | Opcode::GemvResidual if w.op(slot::W1).is_some() => true,
        Opcode::LmHead => true,
        _ => return None,
    };
    let k = w.op(slot::IN0).map(|b| p.buffers[b].cols as u32).unwrap_or(0);
    (!x_smem || m * xrow_bytes(k) <= MROW_X_BYTES).then_some(x_smem)
}

/// Bytes of one prepared GEMV input of `k` bf16 in shared memory (16-byte aligned rows; common.cuh's).
fn xrow_bytes(k: u32) -> u32 {
    (k * 2).div_ceil(16) * 16
}

/// Dynamic shared memory of a word's unit (both paths): what its op keeps in shared memory.
pub fn smem_bytes(p: &Program, w: &Word) -> u32 {
    let k = |s: usize| w.op(s).map(|b| p.buffers[b].cols as usize).unwrap_or(0);
    // x in bf16 (16-byte aligned), then the block sums (WARPS floats; prepared_input in common.cuh),
    // then the fp8 tile sums and group partials of a row group (weights x k-groups x (8 + 1) x 32
    // floats: fp8_row_group in gemv.cuh; gate and up are two weights)
    let weights = if w.opcode == Opcode::GemvGateUp { 2 } else { 1 };
    let gemv = |k: usize| (k * 2).div_ceil(16) * 16 + 4 * 8 + weights * k.div_ceil(KGROUP) * 9 * 32 * 4;
    let group = w.arg1 as usize;
    if let Some(x_smem) = mrow_gemv(p, w) {
        // M-row: the M prepared inputs, or for an input taken as is the unit's k-range of the M rows
        // staged where it fits (gemv.cuh `mrow_stage_k`: its widest unit, ceil(groups / k_parts)
        // k-groups), the block sums, then the runs of a unit's k-groups of every row (weights x
        // groups x 2 runs x M x 32 floats: fp8_rows_m; the lm_head has none)
        let m = p.target.m_rows;
        let kin = k(slot::IN0) as u32;
        // (gate / up are never split: the compiler gives them one k-part)
        let groups = kin.div_ceil(KGROUP as u32).div_ceil(w.k_parts.max(1) as u32);
        let staged = 2 * m * kin.min(groups * KGROUP as u32);
        let x = if x_smem {
            m * xrow_bytes(kin)
        } else if staged <= MROW_X_BYTES {
            staged
        } else {
            0
        };
        // (the lm_head: its k-halves' exchange, 4 row tiles x M x 16 floats: lm_head.cuh)
        let red = if w.opcode == Opcode::LmHead { 4 * m * 16 * 4 } else { weights as u32 * groups * 2 * m * 32 * 4 };
        // (the normed inputs' warp sums, [M][WARPS] floats, use the same room first: prepared_rows)
        let red = red.max(m * (THREADS / 32) * 4);
        return x + 32 + red;
    }
    (match w.opcode {
        // the fc's input is both halves (2 x IN0's width); the tile sums' room also holds the hidden
        // half's first norm while the input is prepared (ops/mtp_fc.cuh)
        Opcode::MtpFc => {
            let k2 = k(slot::W0);
            (k2 * 2).div_ceil(16) * 16 + 4 * 8 + (k2.div_ceil(KGROUP) * 9 * 32 * 4).max(k(slot::IN0) * 2)
        }
        op if is_gemv(op) => gemv(k(slot::IN0)),
        // q, k, v, norms, two exchange rows, GdnStep's output, gates and norm weight (GDN_STEP_SMEM in
        // gdn_recur.cuh), then the M-row form's staged rows
        Opcode::GdnRecur | Opcode::GdnStep => {
            // an M-row program's GdnRecur stages the inputs of its n + M <= 2 M rows after them: q, k, v,
            // b, a in bf16 (GDN_STAGE in gdn_recur.cuh)
            let stage = if w.m_rows > 1 { 2 * w.m_rows as usize * (3 * GDN_HEAD_DIM + 2) * 2 } else { 0 };
            (7 * GDN_HEAD_DIM + 2) * 4 + stage
        }
        Opcode::Argmax => 2 * 8 * 4,
        Opcode::AttnKv => (ATTN_HEAD_DIM + 8) * 4,
        // q of every head of the group (f32), the warp sums, the group's scores, q again as bf16 pairs
        // in the lanes' read order (see attn_scores.cuh)
        Opcode::AttnScores => (group * ATTN_HEAD_DIM + 8 + group * ATTN_PART + group * ATTN_HEAD_DIM / 2) * 4,
        // the group's probabilities, (max, sum) pairs (room for MAX_GROUP) and the 4 position groups'
        // sums (see attn_pv.cuh)
        Opcode::AttnPv => (group * ATTN_PART + 2 * 8 + 4 * group * ATTN_HEAD_DIM) * 4,
        _ => 0,
    }) as u32
}

/// The megakernel's dynamic shared memory: every word's needs (one launch runs them all), checked to
/// fit MEGA_BLOCKS_PER_SM blocks on an SM.
pub fn mega_smem_bytes(p: &Program) -> Result<u32> {
    let need = p.words.iter().map(|w| smem_bytes(p, w)).max().unwrap_or(0);
    if MEGA_BLOCKS_PER_SM * (need + 1024 + STATIC_SMEM_ROOM) > SMEM_PER_SM {
        crate::bail!(
            "gpu: the megakernel needs {need} bytes of shared memory a block; {MEGA_BLOCKS_PER_SM} blocks do not fit an SM"
        );
    }
    Ok(need)
}

/// Blocks of a GEMV launch of `units` units: every resident block (at most one per unit), each taking
/// units by ticket.
pub fn gemv_grid(units: u32, resident: u32) -> u32 {
    units.min(resident).max(1)
}

/// The graph's launches: runs of consecutive words with the same opcode, wait and signal (one stage:
/// nothing orders them), one kernel each: (first word, words) per launch.
pub fn launch_groups(prog: &Program) -> Vec<(usize, usize)> {
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
    let stride = |w: &Word| {
        if w.wait == crate::isa::NO_COUNTER {
            0
        } else {
            per_counter.get(w.wait as usize).copied().unwrap_or(0)
        }
    };
    prog.words.iter().map(stride).collect()
}

fn is_gemv(op: Opcode) -> bool {
    matches!(op, Opcode::GemvNorm | Opcode::GemvGateUp | Opcode::GemvResidual | Opcode::LmHead | Opcode::MtpFc)
}

impl GpuExec {
    /// The step's words launched one by one (the sampler before EndStep, untimed), an event pair around
    /// each; each word's ms.
    pub(super) fn timed_words(&mut self) -> Result<Vec<f32>> {
        let stream = self.gpu.stream.clone();
        for i in 0..self.prog.words.len() {
            if self.prog.words[i].opcode == Opcode::EndStep {
                self.launch_sample()?; // untimed, as in the graph: between the argmax and EndStep
            }
            cu(self.events[i].0.record(&stream), "cuEventRecord")?;
            self.launch_word(i)?;
            cu(self.events[i].1.record(&stream), "cuEventRecord")?;
        }
        self.sync()?;
        self.events.iter().map(|(a, b)| cu(a.elapsed_ms(b), "cuEventElapsedTime")).collect()
    }

    pub(super) fn launch_word(&self, i: usize) -> Result<()> {
        self.launch_words(i, 1)
    }

    /// One launch of words first..first + n (one stage, one opcode: see `launch_groups`).
    pub(super) fn launch_words(&self, first: usize, n: usize) -> Result<()> {
        if let Some(r) = self.launch_prefill(first, n) {
            return r;
        }
        let words = &self.prog.words[first..first + n];
        let w = &words[0];
        let units: u32 = words.iter().map(|w| w.units).sum();
        let f = &self.funcs[&w.opcode];
        let smem = words.iter().map(|w| smem_bytes(&self.prog, w)).max().unwrap_or(0);
        let grid = if is_gemv(w.opcode) {
            // every resident block, each running units by ticket (megakernel/discrete.cu, K_GEMV)
            let per_sm =
                f.occupancy_max_active_blocks_per_multiprocessor(THREADS, smem as usize, None).unwrap_or(1).max(1);
            gemv_grid(units, per_sm * self.gpu.sms)
        } else {
            units
        };
        let cfg = LaunchConfig { grid_dim: (grid, 1, 1), block_dim: (THREADS, 1, 1), shared_mem_bytes: smem };
        let prog_ptr = self.base + self.layout.prog as u64;
        self.launch_programmatic(f, cfg, prog_ptr, [first as u32, n as u32])
            .map_err(|e| Error::new(format!("launch words {first}..{} ({:?}): {e}", first + n, w.opcode)))
    }

    /// A launch that may begin while the stream's previous kernel is still running (programmatic
    /// dependent launch, captured into the graph as a programmatic edge): the kernel waits for the
    /// previous kernel's completion (`griddepcontrol.wait`) before it reads or writes anything.
    fn launch_programmatic(&self, f: &CudaFunction, cfg: LaunchConfig, prog_ptr: u64, words: [u32; 2]) -> Result<()> {
        use cudarc::driver::sys;
        // SAFETY: a plain C struct; zero is a valid value for every field.
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
        let (mut p, mut wi, mut nw, mut ctx) = (prog_ptr, words[0], words[1], self.ctx);
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
        cu(r.result(), "cuLaunchKernelEx (programmatic)")
    }
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
    fn gemv_grids_cover_the_units() {
        // The 27B's gate/up: 1,088 units on 264 resident blocks (2 per SM).
        assert_eq!(gemv_grid(1088, 264), 264);
        assert_eq!(gemv_grid(6, 264), 6);
        assert_eq!(gemv_grid(0, 264), 1);
    }

    #[test]
    fn the_megakernel_smem_fits_its_blocks_or_is_refused() {
        let p = crate::compiler::compile(
            &crate::model::config::ModelConfig::preset("qwen3.5-27b").unwrap(),
            "qwen3.5-27b",
            &crate::compiler::h200(1),
        )
        .unwrap();
        let need = p.words.iter().map(|w| smem_bytes(&p, w)).max().unwrap();
        // down_proj's x of 17,408 bf16 is the largest, with its row group's tile sums
        assert_eq!(need as usize, 17_408 * 2 + 32 + 17 * 9 * 32 * 4);
        assert_eq!(mega_smem_bytes(&p).unwrap(), need);
        let mut big = p.clone();
        let down = big.words.iter().position(|w| w.opcode == Opcode::GemvResidual).unwrap();
        let x = big.words[down].op(slot::IN0).unwrap();
        big.buffers[x].cols = 60_000;
        assert!(mega_smem_bytes(&big).unwrap_err().to_string().contains("do not fit an SM"));
    }

    #[test]
    fn an_m_row_step_reads_the_27b_weights_once_and_fits_the_megakernel() {
        let cfg = crate::model::config::ModelConfig::preset("qwen3.5-27b").unwrap();
        let p = crate::compiler::compile(&cfg, "qwen3.5-27b", &crate::compiler::h200(8)).unwrap();
        let fp8 = |w: &Word| w.op(slot::W0).is_some_and(|b| p.buffers[b].elem_bytes == 1);
        for w in &p.words {
            let one_pass = mrow_gemv(&p, w);
            match w.opcode {
                // every fp8 GEMV and the lm_head in one weight pass; normed inputs in shared memory
                Opcode::GemvResidual if fp8(w) => assert_eq!(one_pass, Some(false)),
                Opcode::GemvNorm | Opcode::GemvGateUp if fp8(w) => {
                    assert_eq!(one_pass, Some(true), "{:?}", w.opcode)
                }
                // the lm_head, and GDN's bf16 a and b (normed inputs: dot_rows_m)
                Opcode::LmHead | Opcode::GemvNorm => assert_eq!(one_pass, Some(true), "{:?}", w.opcode),
                // every non-GEMV word: the row loop
                _ => assert_eq!(one_pass, None, "{:?}", w.opcode),
            }
        }
        // the widest: the staged inputs taken as is (gemv.cuh mrow_stage): 8 rows of 6,144 (o_proj and
        // out_proj whole; down_proj's widest third, 6 of 17 k-groups) and the runs of one weight x 6
        // k-groups x 2 runs x 8 rows (fp8_rows_m); gate/up's 8 normed inputs of 5,120 and its 2 weights'
        // runs are below it
        let need = mega_smem_bytes(&p).unwrap();
        assert_eq!(need, 8 * 6_144 * 2 + 32 + 6 * 2 * 8 * 32 * 4);
        assert!(need > 8 * 5_120 * 2 + 32 + 2 * 5 * 2 * 8 * 32 * 4);
        for w in p.words.iter().filter(|w| mrow_gemv(&p, w) == Some(false)) {
            assert!(smem_bytes(&p, w) >= 8 * 5_120 * 2, "{w:?}: every input taken as is is staged");
        }
        // M = 1: no word is an M-row word
        let one = crate::compiler::compile(&cfg, "qwen3.5-27b", &crate::compiler::h200(1)).unwrap();
        assert!(one.words.iter().all(|w| mrow_gemv(&one, w).is_none()));
    }
}
