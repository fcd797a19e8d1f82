//! `mk gpu gemm`: prefill's exact-mode GEMM (megakernel/gemm.cuh, issue 28) on every distinct fp8 shape
//! of a preset, at each asked prompt length T: checked against the CPU in f64 (three tokens' every row,
//! two rows' every token), then timed with the weights rotated through more than twice the L2, beside the
//! same kernel with its tensor work off (loads only: the same bytes, the same pipeline, the same run). A
//! benchmark like `mk gpu gemv`: one launch a GEMM (plus the split-K reduce), no epilogue.

use std::path::Path;

use cudarc::driver::{CudaSlice, DevicePtr, LaunchConfig, PushKernelArg};

use crate::error::Result;
use crate::exec::gpu::{cu, layout, Defines, Gpu};
use crate::model::config::ModelConfig;
use crate::model::numerics::{bf16_to_f32, e4m3_group, e4m3_table, f32_to_bf16, f32_to_e4m3};

/// Fast mode's check: each output's error over the sum of its terms' magnitudes. The fp8 tensor cores
/// of this card class add a tile's products in fewer bits than fp32 (about 13 of mantissa, the products
/// aligned to the largest: DeepSeek-V3's report, CUTLASS's promotion interval), which the kernels bound
/// by adding each 128-wide tile into an fp32 total; a reviewer's model of that gives <= 7e-4 on these
/// random operands. The negative control's errors are of order 1.
const FAST_BOUND: f64 = 1.0 / 256.0;

/// Bytes each shape's rotation covers (> 2 x the 60 MiB L2).
const ROTATE_BYTES: usize = 256 << 20;
/// megakernel/gemm.cuh's block: threads, weight rows, tokens, stage bytes and stages.
const THREADS: u32 = 256;
const ROWS: usize = 128;
const STAGES: u32 = 3;

/// The forms of the GEMM: exact mode's mma.sync (megakernel/gemm.cuh k_gemm_fp8, 64 tokens a block,
/// with its loads-only probe) and warpgroup form (k_gemm_wg: wgmma, sm_90a, 128 tokens a block), and
/// fast mode's (megakernel/gemm_fast.cuh k_gemm_fast: the activations in e4m3 with a scale a token and
/// k-group, mma.sync e4m3, 64 tokens a block).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kernel {
    Mma,
    Wg,
    Fast,
    /// PROBE: fast mode by bulk copies and wgmma e4m3 (gemm_bulk.cuh k_gemm_fast_wg, sm_90a, 128 tokens
    /// a block; x in its tiled layout, `fast_wg_x`).
    FastWg,
    /// PROBE: exact mode by bulk copies and wgmma bf16 (gemm_bulk.cuh k_gemm_wg_bulk; x in its tiled
    /// layout, `bulk_x_exact`).
    WgBulk,
}

impl Kernel {
    pub fn parse(s: &str) -> Result<Kernel> {
        match s {
            "mma" => Ok(Kernel::Mma),
            "wg" => Ok(Kernel::Wg),
            "fast" => Ok(Kernel::Fast),
            "fastwg" => Ok(Kernel::FastWg),
            "wgbulk" => Ok(Kernel::WgBulk),
            _ => crate::bail!("gpu gemm: --kernel {s}: mma, wg, fast, fastwg or wgbulk"),
        }
    }
    /// Tokens a block.
    pub fn tokens(self) -> usize {
        match self {
            Kernel::Mma | Kernel::Fast => 64,
            Kernel::Wg | Kernel::FastWg | Kernel::WgBulk => 128,
        }
    }
    fn threads(self) -> u32 {
        if self.bulk() {
            288
        } else {
            THREADS
        }
    }
    fn fast(self) -> bool {
        matches!(self, Kernel::Fast | Kernel::FastWg)
    }
    fn sm90a(self) -> bool {
        matches!(self, Kernel::Wg | Kernel::FastWg | Kernel::WgBulk)
    }
    /// The bulk-copy forms (gemm_bulk.cuh): x tiled, T padded (Tp), 288 threads.
    fn bulk(self) -> bool {
        matches!(self, Kernel::FastWg | Kernel::WgBulk)
    }
    fn name(self) -> &'static str {
        match self {
            Kernel::Mma => "k_gemm_fp8",
            Kernel::Wg => "k_gemm_wg",
            Kernel::Fast => "k_gemm_fast",
            Kernel::FastWg => "k_gemm_fast_wg",
            Kernel::WgBulk => "k_gemm_wg_bulk",
        }
    }
    /// Shared memory a block (STAGES stages of the weights' 8 warp tiles and the tokens' k-tile).
    fn smem(self) -> u32 {
        match self {
            Kernel::Mma => STAGES * (8 * 2048 + 64 * 272),
            Kernel::Wg => STAGES * (8 * 2048 + 128 * 256),
            Kernel::Fast => STAGES * (8 * 2048 + 64 * 160 + 64 * 4),
            // gemm_fast_wg.cuh: 4 stages of the weights, 128 tokens' e4m3 k-tile and their scales, then
            // two barriers a stage
            Kernel::FastWg => 4 * (8 * 2048 + 128 * 128 + 128 * 4) + 4 * 16,
            Kernel::WgBulk => 4 * (8 * 2048 + 128 * 256) + 4 * 16,
        }
    }
}

/// One (shape, T)'s figures.
#[derive(Debug)]
pub struct GemmRow {
    pub n: usize,
    pub k: usize,
    pub t: usize,
    pub uses: usize,
    pub splits: usize,
    pub ms: f64,
    /// The loads-only probe's ms (the same kernel, no widening or mma).
    pub loads_ms: f64,
    pub tflops: f64,
    pub max_rel_err: f64,
}

/// The GEMM's split-K shape (one rule for the probe and the prefill's launches).
pub use crate::exec::gpu::prefill::splits;

fn ptr(s: &CudaSlice<u8>, stream: &std::sync::Arc<cudarc::driver::CudaStream>) -> u64 {
    s.device_ptr(stream).0
}

/// f32 values of little-endian bytes.
fn floats(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

/// k_gemm_fast_wg's x (gemm_fast_wg.cuh): the e4m3 codes of `t` tokens x `k` (natural order) as wgmma's
/// no-swizzle K-major core matrices [Tp / 8][k / 16][8][16] (Tp = t rounded up to 128, zero past t), each
/// k-tile in the weights' fragment order (chunk 2 J + h's byte 4 c + e holds k 32 J + 8 c + 4 h + e of
/// the tile); the scales [t][k / 128] as [k / 128][Tp].
pub fn fast_wg_x(codes: &[u8], scales: &[f32], t: usize, k: usize) -> (Vec<u8>, Vec<f32>) {
    let tp = t.div_ceil(128) * 128;
    let mut x = vec![0u8; tp * k];
    for tok in 0..t {
        for kt in 0..k / 128 {
            for (chunk, l) in (0..8).flat_map(|ch| (0..16).map(move |l| (ch, l))) {
                let (j, h, c, e) = (chunk / 2, chunk % 2, l / 4, l % 4);
                let at = ((tok / 8) * (k / 16) + kt * 8 + chunk) * 128 + (tok % 8) * 16 + l;
                x[at] = codes[tok * k + kt * 128 + 32 * j + 8 * c + 4 * h + e];
            }
        }
    }
    let mut s = vec![0f32; (k / 128) * tp];
    for tok in 0..t {
        for g in 0..k / 128 {
            s[g * tp + tok] = scales[tok * (k / 128) + g];
        }
    }
    (x, s)
}

/// k_gemm_wg_bulk's x (gemm_bulk.cuh): `t` tokens x `k` bf16 (little-endian bytes, natural order) as
/// wgmma's no-swizzle K-major core matrices [Tp / 8][k / 8][8][8 bf16] (Tp = t rounded up to 128, zero
/// past t), each k-tile in the weights' fragment order (chunk 2 s + h's element 2 c + e holds k 64 (s / 4)
/// + 32 ((s % 4) / 2) + 8 c + 4 (s % 2) + 2 h + e of the tile).
pub fn bulk_x_exact(x: &[u8], t: usize, k: usize) -> Vec<u8> {
    let tp = t.div_ceil(128) * 128;
    let mut out = vec![0u8; tp * k * 2];
    for tok in 0..t {
        for kt in 0..k / 128 {
            for (chunk, p) in (0..16).flat_map(|ch| (0..8).map(move |p| (ch, p))) {
                let (s, h, c, e) = (chunk / 2, chunk % 2, p / 2, p % 2);
                let phys = kt * 128 + 64 * (s / 4) + 32 * ((s % 4) / 2) + 8 * c + 4 * (s % 2) + 2 * h + e;
                let at = ((tok / 8) * (k / 8) + kt * 16 + chunk) * 128 + (tok % 8) * 16 + 2 * p;
                out[at..at + 2].copy_from_slice(&x[2 * (tok * k + phys)..2 * (tok * k + phys) + 2]);
            }
        }
    }
    out
}

pub fn run(
    preset: &str,
    ts: &[usize],
    reps: usize,
    cache: &Path,
    defines: &Defines,
    kernel: Kernel,
) -> Result<Vec<GemmRow>> {
    let cfg = ModelConfig::preset(preset)?;
    if ts.is_empty() || ts.contains(&0) {
        crate::bail!("gpu gemm: --t needs prompt lengths of at least 1");
    }
    let tmax = *ts.iter().max().unwrap_or(&1);
    let gpu = Gpu::open()?;
    // the warpgroup form needs the arch-specific target (sm_90a on the H200's sm_90)
    let arch = if kernel.sm90a() && gpu.arch == "sm_90" { "sm_90a".to_string() } else { gpu.arch.clone() };
    if kernel.sm90a() && arch != "sm_90a" {
        crate::bail!("gpu gemm --kernel {kernel:?}: wgmma needs an sm_90 GPU (this one is {})", gpu.arch);
    }
    if kernel.bulk() {
        if let Some((n, k, _)) = super::gemv::shapes(&cfg).into_iter().find(|s| s.0 % 128 != 0) {
            crate::bail!("gpu gemm --kernel {kernel:?}: shape {n} x {k}: the probe takes N a multiple of 128");
        }
    }
    let (module, _) = gpu.module_for(&arch, &crate::exec::gpu::source(), cache, defines)?;
    let name = kernel.name();
    let f = cu(module.load_function(name), "cuModuleGetFunction (k_gemm)")?;
    let fl = cu(module.load_function("k_gemm_fp8_loads"), "cuModuleGetFunction (k_gemm_fp8_loads)")?;
    let red = cu(module.load_function("k_gemm_reduce"), "cuModuleGetFunction (k_gemm_reduce)")?;
    let (smem, tokens) = (kernel.smem(), kernel.tokens());
    use cudarc::driver::sys::CUfunction_attribute as F;
    // The loads-only kernel (the mma form's) needs fewer registers: its shared memory is raised so that
    // no more of its blocks share an SM than of the GEMM's (whose registers allow GEMM_MIN_BLOCKS).
    let loads_smem = if defines.get("GEMM_MIN_BLOCKS") <= 1 { 120 << 10 } else { Kernel::Mma.smem() };
    for (k, b) in [(&f, smem), (&fl, loads_smem)] {
        cu(k.set_attribute(F::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, b as i32), "cuFuncSetAttribute")?;
    }
    let stream = gpu.stream.clone();
    let ceiling = crate::exec::gpu::device::read_ceiling_gbps(cache)?;
    println!("the read ceiling: {ceiling:.0} GB/s (measured); T = {ts:?}; kernel {name} ({arch}; loads only: k_gemm_fp8_loads)");
    let mut rng = crate::model::synth::Rng::new(11);
    let table = e4m3_table();
    // x: tmax rows of bf16 (the same inputs for every shape's first K columns), times 2^64 for the kernel
    let kmax = super::gemv::shapes(&cfg).iter().map(|s| s.1).max().unwrap_or(128);
    let x: Vec<u16> = (0..tmax * kmax).map(|_| f32_to_bf16(rng.normal() * 0.5)).collect();
    let mut rows = Vec::new();
    println!(
        "{:>6} {:>6} {:>5} {:>4} {:>6} {:>9} {:>9} {:>12} {:>10} {:>10}",
        "N", "K", "T", "uses", "splits", "ms", "TFLOP/s", "weights GB/s", "loads ms", "max err"
    );
    for (n, k, uses) in super::gemv::shapes(&cfg) {
        layout::check(n, k)?;
        let bytes = n * k;
        let w: Vec<u8> = (0..bytes)
            .map(|_| {
                let b = (rng.next_u64() >> 24) as u8;
                if b & 0x7f == 0x7f {
                    b ^ 1
                } else {
                    b
                }
            })
            .collect();
        let sc: Vec<f32> = (0..n.div_ceil(128) * (k / 128)).map(|_| rng.uniform() * 2e-3 + 1e-4).collect();
        let chunks = layout::to_chunks(&w, n, k)?;
        let copies = ROTATE_BYTES.div_ceil(bytes).max(1);
        let mut wd = cu(stream.alloc_zeros::<u8>(copies * bytes), "cuMemAlloc (weights)")?;
        for c in 0..copies {
            cu(stream.memcpy_htod(&chunks, &mut wd.slice_mut(c * bytes..(c + 1) * bytes)), "weights")?;
        }
        let mut scale = cu(stream.alloc_zeros::<u8>(sc.len() * 4), "cuMemAlloc")?;
        cu(stream.memcpy_htod(&sc.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>(), &mut scale), "scales")?;
        // this shape's x: [tmax][k] (row r = the first k of the shared inputs' row r)
        let x64: Vec<u8> = (0..tmax)
            .flat_map(|r| x[r * kmax..r * kmax + k].iter())
            .flat_map(|&b| f32_to_bf16(bf16_to_f32(b) * 2f32.powi(64)).to_le_bytes())
            .collect();
        let x64 = if kernel == Kernel::WgBulk { bulk_x_exact(&x64, tmax, k) } else { x64 };
        let mut xd = cu(stream.alloc_zeros::<u8>(x64.len()), "cuMemAlloc (x)")?;
        cu(stream.memcpy_htod(&x64, &mut xd), "x")?;
        // fast mode's x: each row's 128-wide groups quantised by the CPU reference's rule (e4m3 codes,
        // [tmax][k]) and their scales ([tmax][k / 128]); `xq` the codes' values for the f64 check
        let (mut xq, mut xs) = (vec![0f32; tmax * k], vec![0f32; tmax * (k / 128)]);
        if kernel.fast() {
            for r in 0..tmax {
                for g in 0..k / 128 {
                    let src: Vec<f32> =
                        x[r * kmax + g * 128..r * kmax + (g + 1) * 128].iter().map(|&b| bf16_to_f32(b)).collect();
                    xs[r * (k / 128) + g] = e4m3_group(&src, &mut xq[r * k + g * 128..r * k + (g + 1) * 128]);
                }
            }
        }
        let mut codes: Vec<u8> = xq.iter().map(|&v| f32_to_e4m3(v)).collect();
        let mut xs_dev = xs.clone();
        if kernel == Kernel::FastWg {
            (codes, xs_dev) = fast_wg_x(&codes, &xs, tmax, k);
        }
        let mut xqd = cu(stream.alloc_zeros::<u8>(codes.len().max(16)), "cuMemAlloc (x codes)")?;
        cu(stream.memcpy_htod(&codes, &mut xqd.slice_mut(0..codes.len())), "x codes")?;
        let mut xsd = cu(stream.alloc_zeros::<u8>(4 * xs_dev.len().max(4)), "cuMemAlloc (x scales)")?;
        let xsb: Vec<u8> = xs_dev.iter().flat_map(|v| v.to_le_bytes()).collect();
        cu(stream.memcpy_htod(&xsb, &mut xsd.slice_mut(0..xsb.len())), "x scales")?;
        let (pxq, pxs) = (ptr(&xqd, &stream), ptr(&xsd, &stream));
        let max_parts = ts.iter().map(|&t| splits(t, n, k, gpu.sms as usize, tokens).1 * t * n).max().unwrap_or(0);
        let parts = cu(stream.alloc_zeros::<u8>(max_parts * 4), "cuMemAlloc (partials)")?;
        let out = cu(stream.alloc_zeros::<u8>(tmax * n * 4), "cuMemAlloc (out)")?;
        let (pw, ps, px, pp, po) =
            (ptr(&wd, &stream), ptr(&scale, &stream), ptr(&xd, &stream), ptr(&parts, &stream), ptr(&out, &stream));
        for &t in ts {
            let (kps, sp) = splits(t, n, k, gpu.sms as usize, tokens);
            let grid = (n.div_ceil(ROWS) as u32, t.div_ceil(tokens) as u32, sp as u32);
            let loads_grid = (n.div_ceil(ROWS) as u32, t.div_ceil(Kernel::Mma.tokens()) as u32, sp as u32);
            let cfg_l = LaunchConfig { grid_dim: grid, block_dim: (kernel.threads(), 1, 1), shared_mem_bytes: smem };
            let cfg_loads =
                LaunchConfig { grid_dim: loads_grid, block_dim: (THREADS, 1, 1), shared_mem_bytes: loads_smem };
            let (t32, n32, k32, kps32, sp32) = (t as u32, n as u32, k as u32, kps as u32, sp as u32);
            let tp32 = tmax.div_ceil(128) as u32 * 128;
            let count = (t * n) as u64;
            let launch = |copy: usize, compute: u32| -> Result<()> {
                let wc = pw + (copy * bytes) as u64;
                let y = if sp == 1 { po } else { pp };
                let mut b = stream.launch_builder(if compute == 1 { &f } else { &fl });
                b.arg(&wc).arg(&ps);
                if compute == 1 && kernel.fast() {
                    b.arg(&pxq).arg(&pxs);
                } else if compute == 1 && kernel == Kernel::WgBulk {
                    b.arg(&px).arg(&pxs);
                } else {
                    b.arg(&px);
                }
                b.arg(&y).arg(&t32);
                if compute == 1 && kernel.bulk() {
                    b.arg(&tp32);
                }
                b.arg(&n32).arg(&k32).arg(&kps32);
                // SAFETY: the GEMM's parameters (k_gemm_fast: x's codes and scales for x); every
                // pointer is into this function's allocations (weights copy `copy`, scales, x of tmax
                // >= t rows, partials of sp x t x n, out of tmax x n floats), which outlive the launch.
                cu(unsafe { b.launch(if compute == 1 { cfg_l } else { cfg_loads }) }.map(|_| ()), "launch the GEMM")?;
                if sp > 1 {
                    let mut r = stream.launch_builder(&red);
                    r.arg(&pp).arg(&po).arg(&count).arg(&sp32);
                    let rc =
                        LaunchConfig { grid_dim: (4 * gpu.sms, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
                    // SAFETY: k_gemm_reduce reads sp x count partials and writes count outputs, both
                    // within the allocations above.
                    cu(unsafe { r.launch(rc) }.map(|_| ()), "launch k_gemm_reduce")?;
                }
                Ok(())
            };
            // The check: copy 0, against f64 at three tokens (every row) and two rows (every token).
            launch(0, 1)?;
            let mut yb = vec![0u8; t * n * 4];
            cu(stream.memcpy_dtoh(&out.slice(0..t * n * 4), &mut yb), "out")?;
            cu(stream.synchronize(), "sync")?;
            let y = floats(&yb);
            // exact mode: sum(w s_w x); fast mode: each tile's sum(w_q x_q) times s_x and s_w; with the
            // sum of the terms' magnitudes (fast mode's bound)
            let want = |tok: usize, r: usize| -> (f64, f64) {
                (0..k / 128)
                    .map(|g| {
                        let sw = sc[(r / 128) * (k / 128) + g] as f64;
                        let c = g * 128..(g + 1) * 128;
                        if kernel.fast() {
                            let sxw = xs[tok * (k / 128) + g] as f64 * sw;
                            let p = c.map(|c| table[w[r * k + c] as usize] as f64 * xq[tok * k + c] as f64);
                            let (d, a) = p.fold((0.0, 0.0), |(d, a), v| (d + v, a + v.abs()));
                            (d * sxw, a * sxw.abs())
                        } else {
                            let p = c.map(|c| {
                                table[w[r * k + c] as usize] as f64 * sw * bf16_to_f32(x[tok * kmax + c]) as f64
                            });
                            p.fold((0.0, 0.0), |(d, a), v| (d + v, a + v.abs()))
                        }
                    })
                    .fold((0.0, 0.0), |(d, a), (v, m)| (d + v, a + m))
            };
            let mut probes: Vec<(usize, usize)> = Vec::new();
            for tok in [0, t / 2, t - 1] {
                probes.extend((0..n).map(|r| (tok, r)));
            }
            for r in [0, n - 1] {
                probes.extend((0..t).map(|tok| (tok, r)));
            }
            // exact mode: the largest error over the largest output (fp32 accumulation: <= 1e-5); fast
            // mode: each output's error over its terms' magnitudes (the fp8 tensor cores add in fewer
            // bits than fp32, about 13 of mantissa inside a 128-wide tile: <= FAST_BOUND)
            let (mut max_err, mut max_y, mut worst) = (0f64, 0f64, (0, 0, 0f64, 0f32));
            let mut fast_ratio = 0f64;
            for &(tok, r) in &probes {
                let ((wv, mag), got) = (want(tok, r), y[tok * n + r]);
                let e = if got.is_finite() { (got as f64 - wv).abs() } else { f64::INFINITY };
                let ratio = e / mag.max(f64::MIN_POSITIVE);
                if (kernel.fast() && ratio > fast_ratio) || (!kernel.fast() && e > max_err) || !got.is_finite() {
                    worst = (tok, r, wv, got);
                }
                (max_err, fast_ratio) = (max_err.max(e), fast_ratio.max(ratio));
                max_y = max_y.max(wv.abs());
            }
            let (rel, bound, what) = if kernel.fast() {
                (fast_ratio, FAST_BOUND, "of its terms' magnitudes")
            } else {
                (max_err / max_y.max(f64::MIN_POSITIVE), 1e-5, "of the largest output")
            };
            if rel > bound || !rel.is_finite() {
                crate::bail!(
                    "gpu gemm {n}x{k} at T = {t}: max error {rel:.2e} {what} (token {}, row {}: {} vs {:.6e} in f64; bound {bound:.1e}): the GEMM is wrong",
                    worst.0,
                    worst.1,
                    worst.3,
                    worst.2
                );
            }
            // Timing: `reps` rotations (one launch a copy) of the GEMM and of its loads alone (the same
            // bytes through the same pipeline, no tensor work), alternated; the medians a launch.
            let ev =
                || cu(gpu.ctx.new_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT)), "cuEventCreate");
            let (e0, e1) = (ev()?, ev()?);
            let mut times = [Vec::new(), Vec::new()];
            for _ in 0..reps {
                for compute in [0u32, 1] {
                    cu(e0.record(&stream), "event")?;
                    for c in 0..copies {
                        launch(c, compute)?;
                    }
                    cu(e1.record(&stream), "event")?;
                    cu(e1.synchronize(), "event sync")?;
                    times[compute as usize].push(cu(e0.elapsed_ms(&e1), "elapsed")? as f64 / copies as f64);
                }
            }
            let med = |v: &mut Vec<f64>| {
                v.sort_by(|a, b| a.total_cmp(b));
                v[v.len() / 2]
            };
            let (loads_ms, ms) = (med(&mut times[0]), med(&mut times[1]));
            let tflops = 2.0 * (t * n * k) as f64 / (ms * 1e-3) / 1e12;
            let row = GemmRow { n, k, t, uses, splits: sp, ms, loads_ms, tflops, max_rel_err: rel };
            println!(
                "{:>6} {:>6} {:>5} {:>4} {:>6} {:>9.4} {:>9.1} {:>5.0} ({:>4.1} %) {:>10.4} {:>10.2e}",
                n,
                k,
                t,
                uses,
                sp,
                ms,
                tflops,
                bytes as f64 / (ms * 1e-3) / 1e9,
                bytes as f64 / (ms * 1e-3) / 1e9 / ceiling * 100.0,
                loads_ms,
                rel
            );
            rows.push(row);
        }
    }
    // The prefill's GEMMs at each T, summed over the step's uses (derived: one launch each, no epilogue;
    // attention, the GDN chunks and the norms not included).
    for &t in ts {
        let ms: f64 = rows.iter().filter(|r| r.t == t).map(|r| r.ms * r.uses as f64).sum();
        let loads: f64 = rows.iter().filter(|r| r.t == t).map(|r| r.loads_ms * r.uses as f64).sum();
        let flop: f64 = rows.iter().filter(|r| r.t == t).map(|r| 2.0 * (r.t * r.n * r.k * r.uses) as f64).sum();
        println!(
            "T = {t}: the model's fp8 GEMMs {ms:.3} ms ({:.0} tokens/s for the GEMMs alone, {:.1} TFLOP/s); their loads alone {loads:.3} ms",
            t as f64 / (ms * 1e-3),
            flop / (ms * 1e-3) / 1e12
        );
    }
    if kernel.fast() {
        println!(
            "verdict: ok (every shape and T: each output within {FAST_BOUND:e} of its terms' magnitudes against f64)"
        );
    } else {
        println!("verdict: ok (every shape and T within 1e-5 of its largest output against f64)");
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_cover_every_k_tile_once() {
        for (t, n, k) in [(59, 5120, 5120), (4096, 17408, 5120), (1, 256, 256), (512, 6144, 17408)] {
            let (kps, sp) = splits(t, n, k, 132, 64);
            let kt = k / 128;
            assert!(kps * sp >= kt && kps * (sp - 1) < kt, "{t} {n} {k}: {kps} x {sp} vs {kt}");
            assert!(sp == 1 || kps >= 4, "{t} {n} {k}: {kps} k-tiles a split");
        }
        // small T: more blocks by splitting K; large T: none
        assert!(splits(59, 5120, 5120, 132, 64).1 > 1);
        assert_eq!(splits(4096, 17408, 5120, 132, 128).1, 1);
    }

    /// The k each lane's weight byte holds in the chunk layout (the kernels' fragment derivations start
    /// from it): row g's byte b of lane (g, cq) of the first warp tile at k 32 (b / 8) + 8 cq + b % 8.
    /// From a weight whose every byte is its column (K = 128, one k-tile).
    fn a_byte_k() -> impl Fn(usize, usize) -> usize {
        let w: Vec<u8> = (0..32 * 128).map(|i| (i % 128) as u8).collect();
        let chunks = layout::to_chunks(&w, 32, 128).unwrap();
        // lane l's 16-byte piece q of tile 0 at (32 q + l) x 16 (the kernels' `a + 32 q`); row g: q = 0, 1
        move |lane: usize, b: usize| chunks[(32 * (b / 16) + lane) * 16 + b % 16] as usize
    }

    /// Does x's tiled layout pair, in every step of the wgmma, logical k with the A register byte of
    /// the same physical k? `at(step, h, cq, e)` the physical k the layout puts at B's logical k of that
    /// step (chunk 2 step + h, the lane's bytes), `a(step, h, e)` the A register byte (of row g's 32)
    /// that holds logical k there (lane (3, cq): every row holds the same k); true when every (step, h,
    /// cq, e) agrees with the chunk layout.
    fn pairs(
        steps: usize,
        es: usize,
        at: impl Fn(usize, usize, usize, usize) -> usize,
        a: impl Fn(usize, usize, usize) -> usize,
    ) -> bool {
        let k_of = a_byte_k();
        (0..steps)
            .all(|s| (0..2).all(|h| (0..4).all(|cq| (0..es).all(|e| k_of(12 + cq, a(s, h, e)) == at(s, h, cq, e)))))
    }

    #[test]
    fn the_chunk_layout_and_the_bulk_forms_x_pair_the_same_k() {
        let k_of = a_byte_k();
        for lane in 0..32 {
            for b in 0..32 {
                assert_eq!(k_of(lane, b), 32 * (b / 8) + 8 * (lane % 4) + b % 8, "lane {lane} byte {b}");
            }
        }
        // one token whose every x value is its k: fast mode (e4m3 codes, k < 128 fits a byte)
        let codes: Vec<u8> = (0..128u8).collect();
        let (fx, _) = fast_wg_x(&codes, &[1.0], 1, 128);
        // step J's B: chunk 2 J + h, token 0's row, bytes 4 cq + e; A: a0 (h 0) / a2 (h 1) = word 2 J + h
        let fast_at = |j: usize, h: usize, cq: usize, e: usize| fx[(2 * j + h) * 128 + 4 * cq + e] as usize;
        assert!(pairs(4, 4, fast_at, |j, h, e| 4 * (2 * j + h) + e));
        // negative control: a0 and a2 exchanged (h read as 1 - h) pairs other k
        assert!(!pairs(4, 4, fast_at, |j, h, e| 4 * (2 * j + 1 - h) + e));
        // exact mode: bf16 x whose value bits are k; step s's B: chunk 2 s + h, elements 2 cq + e; A: a0
        // (h 0) / a2 (h 1) = bytes 2 h + e of word s (widened)
        let xb: Vec<u8> = (0..128u16).flat_map(|k| k.to_le_bytes()).collect();
        let ex = bulk_x_exact(&xb, 1, 128);
        let exact_at = |s: usize, h: usize, cq: usize, e: usize| {
            let at = (2 * s + h) * 128 + 2 * (2 * cq + e);
            u16::from_le_bytes([ex[at], ex[at + 1]]) as usize
        };
        assert!(pairs(8, 2, exact_at, |s, h, e| 4 * s + 2 * h + e));
        assert!(!pairs(8, 2, exact_at, |s, h, e| 4 * s + 2 * (1 - h) + e));
        // tokens past t are zero, scales transposed to [k / 128][Tp]
        let (fx, fs) = fast_wg_x(&[7u8; 2 * 256], &[1.0, 2.0, 3.0, 4.0], 2, 256);
        assert_eq!(fx.len(), 128 * 256);
        assert_eq!(fx.iter().filter(|&&b| b == 7).count(), 2 * 256);
        assert_eq!((fs[0], fs[1], fs[128], fs[129]), (1.0, 3.0, 2.0, 4.0));
    }

    /// The prefill's producers of x (prefill.cuh k_pf_tile, gemm_fast.cuh k_pf_quant) place each value
    /// by the inverse of the layouts above (from its k to its chunk and lane bytes); their index
    /// arithmetic, transcribed, must give `bulk_x_exact`'s and `fast_wg_x`'s bytes.
    #[test]
    fn the_prefills_x_producers_write_the_bulk_layouts() {
        let (m, k) = (11usize, 256usize); // rows past 8 and a second k-tile
        let tp = 128;
        // exact: every bf16 value its (row, k), k_pf_tile's thread (row, pair) writing 4 bytes
        let x: Vec<u16> = (0..m * k).map(|i| i as u16).collect();
        let xb: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
        let mut tiled = vec![0u16; tp * k];
        for row in 0..m {
            for kp in (0..k).step_by(2) {
                let (kt, kk) = (kp / 128, kp % 128);
                let (s, h, c) = (4 * (kk / 64) + 2 * ((kk % 64) / 32) + (kk % 8) / 4, (kk % 4) / 2, (kk % 32) / 8);
                let at = ((row / 8) * (k / 8) + kt * 16 + 2 * s + h) * 64 + (row % 8) * 8 + 2 * c;
                tiled[at..at + 2].copy_from_slice(&x[row * k + kp..row * k + kp + 2]);
            }
        }
        let want = bulk_x_exact(&xb, m, k);
        let got: Vec<u8> = tiled.iter().flat_map(|v| v.to_le_bytes()).collect();
        assert!(got == want, "k_pf_tile's arithmetic against bulk_x_exact");
        // fast: codes (row, k) mod 251, k_pf_quant's warp (row, group), lane l's 4 bytes
        let codes: Vec<u8> = (0..m * k).map(|i| (i % 251) as u8).collect();
        let mut q = vec![0u8; tp * k];
        for row in 0..m {
            for kg in 0..k / 128 {
                for l in 0..32 {
                    let (j, c, h) = (l / 8, (l % 8) / 2, l % 2);
                    let at = ((row / 8) * (k / 16) + kg * 8 + 2 * j + h) * 128 + (row % 8) * 16 + 4 * c;
                    let from = row * k + kg * 128 + 4 * l;
                    q[at..at + 4].copy_from_slice(&codes[from..from + 4]);
                }
            }
        }
        let (want, _) = fast_wg_x(&codes, &vec![1.0; m * (k / 128)], m, k);
        assert!(q == want, "k_pf_quant's arithmetic against fast_wg_x");
    }
}
