//! `mk gpu gemv`: decode step v2's fp8 GEMV (megakernel/ring.cuh) on every distinct fp8 shape of a
//! preset's step, each checked against the CPU in f64 and timed beside the same kernel with its
//! arithmetic off (loads only: the same bytes through the same ring, in the same run), with the
//! weights rotated through more than twice the L2. A benchmark: its figures are measured per shape in
//! isolation (one launch a GEMV, no epilogue, no joins), the ceiling of what the step can get from it.

use std::path::Path;

use cudarc::driver::{CudaSlice, DevicePtr, LaunchConfig, PushKernelArg};

use crate::error::Result;
use crate::exec::gpu::{cu, layout, Defines, Gpu};
use crate::model::config::ModelConfig;
use crate::model::numerics::{bf16_to_f32, e4m3_table, f32_to_bf16};
use crate::model::tensors::{expected_tensors, Dt};

/// The measured streaming-read ceiling of the H200 (H200.md: 4,616 GB/s median), for the percentages.
const CEILING_GBPS: f64 = 4620.0;
/// Bytes each shape's rotation covers (> 2 x the 60 MiB L2).
const ROTATE_BYTES: usize = 256 << 20;
const SLOTS: u32 = 6;
const THREADS: u32 = 16 * 32 + 32;

/// One shape's figures.
pub struct ShapeRow {
    pub n: usize,
    pub k: usize,
    pub uses: usize,
    pub loads_gbps: f64,
    pub gemv_gbps: f64,
    pub max_rel_err: f64,
}

/// The distinct fp8 shapes of a preset's tensors (rows, cols) and how many tensors have each.
pub fn shapes(cfg: &ModelConfig) -> Vec<(usize, usize, usize)> {
    let mut m = std::collections::BTreeMap::new();
    for s in expected_tensors(cfg).iter().filter(|s| s.dtype == Dt::F8E4M3 && !s.name.contains("mtp.")) {
        *m.entry((s.shape[0], s.shape[1])).or_insert(0usize) += 1;
    }
    m.into_iter().map(|((n, k), c)| (n, k, c)).collect()
}

fn ptr(s: &CudaSlice<u8>, stream: &std::sync::Arc<cudarc::driver::CudaStream>) -> u64 {
    s.device_ptr(stream).0
}

pub fn run(preset: &str, reps: usize, cache: &Path) -> Result<Vec<ShapeRow>> {
    let cfg = ModelConfig::preset(preset)?;
    let gpu = Gpu::open()?;
    let (module, _) = gpu.module(&crate::exec::gpu::source(), cache, &Defines::default())?;
    let f = cu(module.load_function("k_ring_gemv"), "cuModuleGetFunction (k_ring_gemv)")?;
    let smem = 1024 + SLOTS * 32768;
    use cudarc::driver::sys::CUfunction_attribute as F;
    cu(f.set_attribute(F::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem as i32), "cuFuncSetAttribute")?;
    let stream = gpu.stream.clone();
    let mut rows = Vec::new();
    let mut rng = crate::model::synth::Rng::new(7);
    let table = e4m3_table();
    println!("{:>6} {:>6} {:>4} {:>8} {:>17} {:>17} {:>7} {:>10}", "N", "K", "uses", "MB", "loads only GB/s", "GEMV GB/s", "ratio", "max err");
    for (n, k, uses) in shapes(&cfg) {
        layout::check(n, k)?;
        let bytes = n * k;
        // fp8 codes without NaN (0x7f / 0xff), block scales, x; x pre-scaled by 2^64 for the kernel.
        let w: Vec<u8> = (0..bytes)
            .map(|_| {
                let b = (rng.next_u64() >> 24) as u8;
                if b & 0x7f == 0x7f { b ^ 1 } else { b }
            })
            .collect();
        let sc: Vec<f32> = (0..(n / 128) * (k / 128)).map(|_| rng.uniform() * 2e-3 + 1e-4).collect();
        let x: Vec<u16> = (0..k).map(|_| f32_to_bf16(rng.normal() * 0.5)).collect();
        let x64: Vec<u8> = x.iter().flat_map(|&b| f32_to_bf16(bf16_to_f32(b) * 2f32.powi(64)).to_le_bytes()).collect();
        let chunks = layout::to_chunks(&w, n, k)?;
        let copies = ROTATE_BYTES.div_ceil(bytes).max(1);
        let n_launch = copies * (2 * reps + 1);
        let mut wd = cu(stream.alloc_zeros::<u8>(copies * bytes), "cuMemAlloc (weights)")?;
        for c in 0..copies {
            cu(stream.memcpy_htod(&chunks, &mut wd.slice_mut(c * bytes..(c + 1) * bytes)), "weights")?;
        }
        let mut scd = cu(stream.alloc_zeros::<u8>(sc.len() * 4), "cuMemAlloc")?;
        cu(stream.memcpy_htod(&sc.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>(), &mut scd), "scales")?;
        let mut xd = cu(stream.alloc_zeros::<u8>(x64.len()), "cuMemAlloc")?;
        cu(stream.memcpy_htod(&x64, &mut xd), "x")?;
        let part = cu(stream.alloc_zeros::<u8>((k / 128) * n * 4), "cuMemAlloc (partials)")?;
        let tickets = cu(stream.alloc_zeros::<u8>(4 * n_launch), "cuMemAlloc (tickets)")?;
        let status = cu(stream.alloc_zeros::<u8>(8), "cuMemAlloc (status)")?;
        let (wp, sp, xp, pp, tp, stp) =
            (ptr(&wd, &stream), ptr(&scd, &stream), ptr(&xd, &stream), ptr(&part, &stream), ptr(&tickets, &stream), ptr(&status, &stream));
        let kc = layout::chunk_k(k) as u32;
        let cfg_l = LaunchConfig { grid_dim: (gpu.sms, 1, 1), block_dim: (THREADS, 1, 1), shared_mem_bytes: smem };
        let mut launch_i = 0usize;
        let mut launch = |copy: usize, compute: u32| -> Result<()> {
            let (wc, tk) = (wp + (copy * bytes) as u64, tp + 4 * launch_i as u64);
            launch_i += 1;
            let (nn, kk) = (n as u32, k as u32);
            let mut b = stream.launch_builder(&f);
            b.arg(&wc).arg(&sp).arg(&xp).arg(&pp).arg(&nn).arg(&kk).arg(&kc).arg(&tk).arg(&stp).arg(&compute);
            // SAFETY: k_ring_gemv's parameters (pointers into this function's allocations, which outlive
            // the launch; sizes as allocated above).
            cu(unsafe { b.launch(cfg_l) }.map(|_| ()), "launch k_ring_gemv")
        };
        // The check: one launch on copy 0, its partials summed in tile order against f64.
        launch(0, 1)?;
        gpu.stream.synchronize().map_err(|e| crate::error::Error::new(format!("sync: {e:?}")))?;
        let mut st = [0u8; 8];
        cu(stream.memcpy_dtoh(&status, &mut st), "status")?;
        let mut pb = vec![0u8; (k / 128) * n * 4];
        cu(stream.memcpy_dtoh(&part, &mut pb), "partials")?;
        cu(stream.synchronize(), "sync")?;
        let (done, bad) = (u32::from_le_bytes([st[0], st[1], st[2], st[3]]), u32::from_le_bytes([st[4], st[5], st[6], st[7]]));
        if bad != 0 || done as usize != (n / 32) * (k / kc as usize) {
            crate::bail!("gpu gemv {n}x{k}: {done} chunks done of {}, status {bad}", (n / 32) * (k / kc as usize));
        }
        let p: Vec<f32> = pb.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
        let (mut max_err, mut max_y) = (0f64, 0f64);
        for r in 0..n {
            // ORDER: tiles 0.. in order (the caller's sum, as the step's reduce will take it)
            let y = (0..k / 128).fold(0f32, |a, t| a + p[t * n + r]) as f64 * 2f64.powi(56);
            let want: f64 = (0..k)
                .map(|c| table[w[r * k + c] as usize] as f64 * sc[(r / 128) * (k / 128) + c / 128] as f64 * bf16_to_f32(x[c]) as f64)
                .sum();
            max_err = max_err.max((y - want).abs());
            max_y = max_y.max(want.abs());
        }
        let rel = max_err / max_y.max(f64::MIN_POSITIVE);
        // Timing: loads only and the GEMV alternated, `reps` rotations each, medians.
        let ev = || cu(gpu.ctx.new_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT)), "cuEventCreate");
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
        let (tl, tg) = (med(&mut times[0]), med(&mut times[1]));
        let gbps = |ms: f64| bytes as f64 / (ms * 1e-3) / 1e9;
        let row = ShapeRow { n, k, uses, loads_gbps: gbps(tl), gemv_gbps: gbps(tg), max_rel_err: rel };
        println!(
            "{:>6} {:>6} {:>4} {:>8.1} {:>9.0} ({:>4.1} %) {:>9.0} ({:>4.1} %) {:>7.3} {:>10.2e}",
            n,
            k,
            uses,
            bytes as f64 / 1e6,
            row.loads_gbps,
            row.loads_gbps / CEILING_GBPS * 100.0,
            row.gemv_gbps,
            row.gemv_gbps / CEILING_GBPS * 100.0,
            row.gemv_gbps / row.loads_gbps,
            rel
        );
        if rel > 1e-5 {
            crate::bail!("gpu gemv {n}x{k}: max error {rel:.2e} of the largest output (the tensor-core GEMV is wrong)");
        }
        rows.push(row);
    }
    let total: f64 = rows.iter().map(|r| (r.n * r.k * r.uses) as f64).sum();
    let t = |f: fn(&ShapeRow) -> f64| rows.iter().map(|r| (r.n * r.k * r.uses) as f64 / (f(r) * 1e9)).sum::<f64>();
    let (tl, tg) = (t(|r| r.loads_gbps), t(|r| r.gemv_gbps));
    println!(
        "the step's fp8 GEMVs one launch each ({:.2} GB): loads only {:.3} ms ({:.1} %), GEMV {:.3} ms ({:.1} %); floor {:.3} ms",
        total / 1e9,
        tl * 1e3,
        total / tl / 1e9 / CEILING_GBPS * 100.0,
        tg * 1e3,
        total / tg / 1e9 / CEILING_GBPS * 100.0,
        total / (CEILING_GBPS * 1e9) * 1e3
    );
    println!("verdict: ok (every shape within 1e-5 of its largest output against f64)");
    Ok(rows)
}
