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

/// One shape's device buffers: `copies` copies of the weights (the rotation), scales, x, partials.
struct Shape {
    n: usize,
    k: usize,
    uses: usize,
    copies: usize,
    w: CudaSlice<u8>,
    scale: CudaSlice<u8>,
    x: CudaSlice<u8>,
    part: CudaSlice<u8>,
    /// Host copies for the check: row-major codes, scales, the M_MAX input rows (bf16, row after row).
    host: (Vec<u8>, Vec<f32>, Vec<u16>),
}

/// Input rows of a verification step the kernel takes at most (the mma's 8 columns).
const M_MAX: usize = 8;

/// RingSeg of megakernel/ring.cuh, for `m` input rows.
fn seg(sh: &Shape, copy: usize, m: usize, stream: &std::sync::Arc<cudarc::driver::CudaStream>) -> Vec<u8> {
    let mut b = Vec::with_capacity(48);
    for p in [
        ptr(&sh.w, stream) + (copy * sh.n * sh.k) as u64,
        ptr(&sh.scale, stream),
        ptr(&sh.x, stream),
        ptr(&sh.part, stream),
    ] {
        b.extend_from_slice(&p.to_le_bytes());
    }
    for v in [sh.n, sh.k, layout::chunk_k(sh.k), m] {
        b.extend_from_slice(&(v as u32).to_le_bytes());
    }
    b
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
    // The percentages' denominator: the read ceiling measured on this GPU (cached by GPU and driver).
    let ceiling = crate::exec::gpu::device::read_ceiling_gbps(cache)?;
    println!("the read ceiling: {ceiling:.0} GB/s (measured)");
    let mut rng = crate::model::synth::Rng::new(7);
    let table = e4m3_table();
    // Every shape's buffers first (the step's sequence below reads them all).
    let mut sh = Vec::new();
    for (n, k, uses) in shapes(&cfg) {
        layout::check(n, k)?;
        let bytes = n * k;
        // fp8 codes without NaN (0x7f / 0xff), block scales, x; x pre-scaled by 2^64 for the kernel.
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
        let sc: Vec<f32> = (0..(n / 128) * (k / 128)).map(|_| rng.uniform() * 2e-3 + 1e-4).collect();
        let x: Vec<u16> = (0..M_MAX * k).map(|_| f32_to_bf16(rng.normal() * 0.5)).collect();
        let x64: Vec<u8> = x.iter().flat_map(|&b| f32_to_bf16(bf16_to_f32(b) * 2f32.powi(64)).to_le_bytes()).collect();
        let chunks = layout::to_chunks(&w, n, k)?;
        let copies = ROTATE_BYTES.div_ceil(bytes).max(1);
        let mut wd = cu(stream.alloc_zeros::<u8>(copies * bytes), "cuMemAlloc (weights)")?;
        for c in 0..copies {
            cu(stream.memcpy_htod(&chunks, &mut wd.slice_mut(c * bytes..(c + 1) * bytes)), "weights")?;
        }
        let mut scale = cu(stream.alloc_zeros::<u8>(sc.len() * 4), "cuMemAlloc")?;
        cu(stream.memcpy_htod(&sc.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>(), &mut scale), "scales")?;
        let mut xd = cu(stream.alloc_zeros::<u8>(x64.len()), "cuMemAlloc")?;
        cu(stream.memcpy_htod(&x64, &mut xd), "x")?;
        let part = cu(stream.alloc_zeros::<u8>(M_MAX * (k / 128) * n * 4), "cuMemAlloc (partials)")?;
        sh.push(Shape { n, k, uses, copies, w: wd, scale, x: xd, part, host: (w, sc, x) });
    }
    // Launches of a sequence of segments (RingSeg bytes), each with fresh zero tickets.
    let max_segs = 8192;
    let mut segs_d = cu(stream.alloc_zeros::<u8>(48 * max_segs), "cuMemAlloc (segments)")?;
    let mut tickets = cu(stream.alloc_zeros::<u8>(4 * max_segs * 64), "cuMemAlloc (tickets)")?;
    let mut status = cu(stream.alloc_zeros::<u8>(8), "cuMemAlloc (status)")?;
    let (sp, tp0, stp) = (ptr(&segs_d, &stream), ptr(&tickets, &stream), ptr(&status, &stream));
    let cfg_l = LaunchConfig { grid_dim: (gpu.sms, 1, 1), block_dim: (THREADS, 1, 1), shared_mem_bytes: smem };
    // The ticket pool's next free entry (zeroed with the pool: `zero`).
    let tick_at = std::cell::Cell::new(0usize);
    // `nseg` segments already in segs_d at `first`; tickets from the pool (64 launches between zeroings).
    let launch = |first: usize, nseg: usize, compute: u32| -> Result<()> {
        if tick_at.get() + nseg > max_segs * 64 {
            crate::bail!("gpu gemv: ticket pool exhausted");
        }
        let (sg, tk, ns) = (sp + 48 * first as u64, tp0 + 4 * tick_at.get() as u64, nseg as u32);
        tick_at.set(tick_at.get() + nseg);
        let mut b = stream.launch_builder(&f);
        b.arg(&sg).arg(&ns).arg(&tk).arg(&stp).arg(&compute);
        // SAFETY: k_ring_gemv's parameters; every pointer is into this function's allocations, which
        // outlive the launch.
        cu(unsafe { b.launch(cfg_l) }.map(|_| ()), "launch k_ring_gemv")
    };
    let ev = || cu(gpu.ctx.new_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT)), "cuEventCreate");
    let (e0, e1) = (ev()?, ev()?);
    let med = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    };
    let mut rows = Vec::new();
    println!(
        "{:>6} {:>6} {:>4} {:>8} {:>17} {:>17} {:>7} {:>10}",
        "N", "K", "uses", "MB", "loads only GB/s", "GEMV GB/s", "ratio", "max err"
    );
    for s in &sh {
        let (n, k, bytes) = (s.n, s.k, s.n * s.k);
        // Segments 0 .. copies: copy c of this shape (one launch each).
        let mut bytes_segs: Vec<u8> = (0..s.copies).flat_map(|c| seg(s, c, 1, &stream)).collect();
        bytes_segs.extend(seg(s, 0, M_MAX, &stream)); // (segment `copies`: the check, all M_MAX rows)
        cu(stream.memcpy_htod(&bytes_segs, &mut segs_d.slice_mut(0..bytes_segs.len())), "segments")?;
        cu(stream.memset_zeros(&mut tickets), "zero the tickets")?;
        tick_at.set(0);
        cu(stream.memset_zeros(&mut status), "status")?;
        // The check: one launch on copy 0 with all M_MAX input rows, every row's partials summed in tile
        // order against f64.
        launch(s.copies, 1, 1)?;
        let mut st = [0u8; 8];
        cu(stream.memcpy_dtoh(&status, &mut st), "status")?;
        let mut pb = vec![0u8; M_MAX * (k / 128) * n * 4];
        cu(stream.memcpy_dtoh(&s.part, &mut pb), "partials")?;
        cu(stream.synchronize(), "sync")?;
        let kc = layout::chunk_k(k);
        let (done, bad) =
            (u32::from_le_bytes([st[0], st[1], st[2], st[3]]), u32::from_le_bytes([st[4], st[5], st[6], st[7]]));
        if bad != 0 || done as usize != (n / 32) * (k / kc) {
            crate::bail!("gpu gemv {n}x{k}: {done} chunks done of {}, status {bad}", (n / 32) * (k / kc));
        }
        let p: Vec<f32> = pb.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
        let (w, sc, x) = &s.host;
        let (mut max_err, mut max_y) = (0f64, 0f64);
        let tiles = k / 128;
        for m in 0..M_MAX {
            for r in 0..n {
                // ORDER: tiles 0.. in order (the caller's sum, as the step's reduce will take it)
                let y = (0..tiles).fold(0f32, |a, t| a + p[(m * tiles + t) * n + r]) as f64 * 2f64.powi(56);
                let want: f64 = (0..k)
                    .map(|c| {
                        table[w[r * k + c] as usize] as f64
                            * sc[(r / 128) * tiles + c / 128] as f64
                            * bf16_to_f32(x[m * k + c]) as f64
                    })
                    .sum();
                max_err = max_err.max((y - want).abs());
                max_y = max_y.max(want.abs());
            }
        }
        let rel = max_err / max_y.max(f64::MIN_POSITIVE);
        if rel > 1e-5 {
            crate::bail!("gpu gemv {n}x{k}: max error {rel:.2e} of the largest output (the tensor-core GEMV is wrong)");
        }
        // Timing: loads only and the GEMV alternated, `reps` rotations each (one launch a copy), medians.
        let mut times = [Vec::new(), Vec::new()];
        for _ in 0..reps {
            for compute in [0u32, 1] {
                cu(stream.memset_zeros(&mut tickets), "zero the tickets")?;
                tick_at.set(0);
                cu(e0.record(&stream), "event")?;
                for c in 0..s.copies {
                    launch(c, 1, compute)?;
                }
                cu(e1.record(&stream), "event")?;
                cu(e1.synchronize(), "event sync")?;
                times[compute as usize].push(cu(e0.elapsed_ms(&e1), "elapsed")? as f64 / s.copies as f64);
            }
        }
        let (tl, tg) = (med(&mut times[0]), med(&mut times[1]));
        let gbps = |ms: f64| bytes as f64 / (ms * 1e-3) / 1e9;
        let row = ShapeRow { n, k, uses: s.uses, loads_gbps: gbps(tl), gemv_gbps: gbps(tg), max_rel_err: rel };
        println!(
            "{:>6} {:>6} {:>4} {:>8.1} {:>9.0} ({:>4.1} %) {:>9.0} ({:>4.1} %) {:>7.3} {:>10.2e}",
            n,
            k,
            s.uses,
            bytes as f64 / 1e6,
            row.loads_gbps,
            row.loads_gbps / ceiling * 100.0,
            row.gemv_gbps,
            row.gemv_gbps / ceiling * 100.0,
            row.gemv_gbps / row.loads_gbps,
            rel
        );
        rows.push(row);
    }
    let total: f64 = rows.iter().map(|r| (r.n * r.k * r.uses) as f64).sum();
    let t = |f: fn(&ShapeRow) -> f64| rows.iter().map(|r| (r.n * r.k * r.uses) as f64 / (f(r) * 1e9)).sum::<f64>();
    let (tl, tg) = (t(|r| r.loads_gbps), t(|r| r.gemv_gbps));
    let pct = |secs: f64| total / secs / 1e9 / ceiling * 100.0;
    println!(
        "the step's fp8 GEMVs, one launch each (summed, {:.2} GB): loads only {:.3} ms ({:.1} %), GEMV {:.3} ms ({:.1} %); floor {:.3} ms",
        total / 1e9,
        tl * 1e3,
        pct(tl),
        tg * 1e3,
        pct(tg),
        total / (ceiling * 1e9) * 1e3
    );
    // The step's fp8 GEMVs in the contract's order as ONE launch (the loader running ahead across GEMV
    // boundaries), each use on the next copy of its shape (rotating).
    let step_segs = |m: usize| -> (Vec<u8>, usize) {
        let mut next_copy = vec![0usize; sh.len()];
        let (mut out, mut bytes) = (Vec::new(), 0usize);
        for spec in expected_tensors(&cfg).iter().filter(|s| s.dtype == Dt::F8E4M3 && !s.name.contains("mtp.")) {
            let i = sh.iter().position(|s| (s.n, s.k) == (spec.shape[0], spec.shape[1])).unwrap_or(0);
            out.extend(seg(&sh[i], next_copy[i] % sh[i].copies, m, &stream));
            next_copy[i] += 1;
            bytes += sh[i].n * sh[i].k;
        }
        (out, bytes)
    };
    let (segs1, step_bytes) = step_segs(1);
    let nseg = segs1.len() / 48;
    if nseg > max_segs {
        crate::bail!("gpu gemv: {nseg} segments (at most {max_segs})");
    }
    // Segments 0 .. nseg: M = 1; then M = 2, 4, 8 after each other (the same weights, more input rows).
    let ms = [1usize, 2, 4, 8];
    let mut all = segs1.clone();
    for &m in &ms[1..] {
        all.extend(step_segs(m).0);
    }
    if all.len() / 48 > max_segs {
        crate::bail!("gpu gemv: {} segments (at most {max_segs})", all.len() / 48);
    }
    cu(stream.memcpy_htod(&all, &mut segs_d.slice_mut(0..all.len())), "segments")?;
    // times[0]: loads only (M = 1); times[1 + i]: the GEMV at ms[i] input rows.
    let mut times = vec![Vec::new(); 1 + ms.len()];
    for rep in 0..=reps {
        for (slot, first, compute) in
            [(0usize, 0usize, 0u32)].into_iter().chain(ms.iter().enumerate().map(|(i, _)| (1 + i, i * nseg, 1)))
        {
            cu(stream.memset_zeros(&mut tickets), "zero the tickets")?;
            tick_at.set(0);
            cu(e0.record(&stream), "event")?;
            launch(first, nseg, compute)?;
            cu(e1.record(&stream), "event")?;
            cu(e1.synchronize(), "event sync")?;
            if rep > 0 {
                times[slot].push(cu(e0.elapsed_ms(&e1), "elapsed")? as f64);
            }
        }
    }
    let mut st = [0u8; 8];
    cu(stream.memcpy_dtoh(&status, &mut st), "status")?;
    cu(stream.synchronize(), "sync")?;
    if st[4..8] != [0, 0, 0, 0] {
        crate::bail!("gpu gemv: the step's launch ran a wait past its bound");
    }
    let (tl, tg) = (med(&mut times[0]), med(&mut times[1]));
    let pct = |ms: f64| step_bytes as f64 / (ms * 1e-3) / 1e9 / ceiling * 100.0;
    println!(
        "the step's {nseg} fp8 GEMVs in ONE launch ({:.2} GB): loads only {tl:.3} ms ({:.1} %), GEMV {tg:.3} ms ({:.1} %)",
        step_bytes as f64 / 1e9,
        pct(tl),
        pct(tg)
    );
    for (i, &m) in ms.iter().enumerate().skip(1) {
        let t = med(&mut times[1 + i]);
        println!(
            "  with M = {m} input rows (weights read once): {t:.3} ms ({:.1} % of the ceiling in weight bytes), {:.3}x M = 1",
            pct(t),
            t / tg
        );
    }
    println!("verdict: ok (every shape within 1e-5 of its largest output against f64)");
    Ok(rows)
}
