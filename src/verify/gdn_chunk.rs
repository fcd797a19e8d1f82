//! `mk gpu gdn-chunk`: prefill's chunked gated delta rule on the GPU (megakernel/gdn_chunk.cuh, issue 28
//! item 2) for one GDN layer of a preset (its value and q / k heads) at each asked prompt length T,
//! from a nonzero state: checked against the CPU's `gdn_chunk::chunked` (every head at T <= 1,024, three
//! heads beyond), outputs and final states, then timed (the prep and the scan apart and together; the
//! issue's bar: 0.2 ms a layer at 4,096 tokens, FlashQLA 0.194, FLA 0.344 on the H200).

use std::path::Path;

use cudarc::driver::{CudaSlice, DevicePtr, LaunchConfig, PushKernelArg};

use crate::error::Result;
use crate::exec::gpu::{cu, Defines, Gpu};
use crate::model::config::ModelConfig;
use crate::model::gdn_chunk::{chunked, HeadSeq};

/// megakernel/gdn_chunk.cuh's chunk, head dimension and block.
const GC: usize = 64;
const GD: usize = 128;
const THREADS: u32 = 256;
/// The check's bound: the largest |GPU - CPU| of a head's outputs (and of its final state) over their
/// largest magnitude (fmaf and expf against the CPU's mul + add and exp: ~1e-6 expected).
pub const TOLERANCE: f64 = 1e-4;

/// The prep's shared memory: k and q [64][132], A [64][68], cum and beta [64].
pub fn prep_smem() -> u32 {
    ((2 * GC * (GD + 4) + GC * (GC + 4) + 2 * GC) * 4) as u32
}

/// The scan's: the state's dv columns [128][dv], kcd and q exp(cum) [64][132], attn [64][68], v_new
/// [64][dv], cum and the exps [64].
pub fn scan_smem(dv: usize) -> u32 {
    ((GD * dv + 2 * GC * (GD + 4) + GC * (GC + 4) + GC * dv + 2 * GC) * 4) as u32
}

/// One T's figures.
#[derive(Debug)]
pub struct ChunkRow {
    pub t: usize,
    pub heads_checked: usize,
    pub out_err: f64,
    pub state_err: f64,
    pub prep_ms: f64,
    pub scan_ms: f64,
    pub ms: f64,
}

fn ptr(s: &CudaSlice<f32>, stream: &std::sync::Arc<cudarc::driver::CudaStream>) -> u64 {
    s.device_ptr(stream).0
}

/// The largest |a - b| over the largest |b|, and where.
fn rel(a: &[f32], b: &[f32]) -> (f64, usize) {
    let m = b.iter().fold(0f64, |m, x| m.max(x.abs() as f64)).max(f64::MIN_POSITIVE);
    let (mut d, mut at) = (0f64, 0);
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        let e = if x.is_finite() { (*x as f64 - *y as f64).abs() } else { f64::INFINITY };
        if e > d {
            (d, at) = (e, i);
        }
    }
    (d / m, at)
}

/// Inputs of T tokens as the oracle's kernel takes them: q, k `[T][hk][128]` unit vectors (q over
/// sqrt(128)), v `[T][hv][128]` in (-1, 1), g in (-1, 0], beta in (0.05, 0.95) `[T][hv]`, a state
/// `[hv][128][128]` in (-0.5, 0.5) (as left by an earlier prompt).
struct Inputs {
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    g: Vec<f32>,
    beta: Vec<f32>,
    state: Vec<f32>,
}

fn inputs(t: usize, hk: usize, hv: usize, seed: u64) -> Inputs {
    let mut r = crate::model::synth::Rng::new(seed);
    let mut unit = |scale: f32| -> Vec<f32> {
        let mut all = Vec::with_capacity(t * hk * GD);
        for _ in 0..t * hk {
            let mut x: Vec<f32> = (0..GD).map(|_| r.uniform() * 2.0 - 1.0).collect();
            crate::model::ops::l2norm(&mut x);
            all.extend(x.iter().map(|e| e * scale));
        }
        all
    };
    let q = unit(1.0 / (GD as f32).sqrt());
    let k = unit(1.0);
    let v = (0..t * hv * GD).map(|_| r.uniform() * 2.0 - 1.0).collect();
    let g = (0..t * hv).map(|_| -r.uniform()).collect();
    let beta = (0..t * hv).map(|_| 0.05 + 0.9 * r.uniform()).collect();
    let state = (0..hv * GD * GD).map(|_| r.uniform() - 0.5).collect();
    Inputs { q, k, v, g, beta, state }
}

/// Head h's outputs `[T][128]` and final state on the CPU (`gdn_chunk::chunked`, chunk 64).
fn cpu_head(x: &Inputs, t: usize, hk: usize, hv: usize, h: usize) -> Result<(Vec<f32>, Vec<f32>)> {
    let kh = h / (hv / hk);
    let pick = |m: &[f32], heads: usize, head: usize| -> Vec<f32> {
        (0..t).flat_map(|i| m[(i * heads + head) * GD..(i * heads + head + 1) * GD].iter().copied()).collect()
    };
    let (q, k, v) = (pick(&x.q, hk, kh), pick(&x.k, hk, kh), pick(&x.v, hv, h));
    let g: Vec<f32> = (0..t).map(|i| x.g[i * hv + h]).collect();
    let beta: Vec<f32> = (0..t).map(|i| x.beta[i * hv + h]).collect();
    let mut s = x.state[h * GD * GD..(h + 1) * GD * GD].to_vec();
    let seq = HeadSeq { q: &q, k: &k, v: &v, g: &g, beta: &beta, dk: GD, dv: GD };
    let out = chunked(&seq, GC, &mut s)?;
    Ok((out, s))
}

pub fn run(preset: &str, ts: &[usize], reps: usize, cache: &Path, defines: &Defines) -> Result<Vec<ChunkRow>> {
    let cfg = ModelConfig::preset(preset)?;
    if cfg.gdn_k_dim != GD || cfg.gdn_v_dim != GD {
        crate::bail!(
            "gpu gdn-chunk: the kernel takes GDN heads of {GD} (the preset's: {} / {})",
            cfg.gdn_k_dim,
            cfg.gdn_v_dim
        );
    }
    if ts.is_empty() || ts.contains(&0) {
        crate::bail!("gpu gdn-chunk: --t needs prompt lengths of at least 1");
    }
    let dv = defines.get("GDNC_DV") as usize;
    if ![16, 32, 64].contains(&dv) {
        crate::bail!("gpu gdn-chunk: GDNC_DV = {dv} (16, 32 or 64)");
    }
    let (hk, hv) = (cfg.gdn_k_heads, cfg.gdn_v_heads);
    let gpu = Gpu::open()?;
    let (module, _) = gpu.module_for(&gpu.arch, &crate::exec::gpu::source(), cache, defines)?;
    let prep = cu(module.load_function("k_gdn_chunk_prep"), "cuModuleGetFunction (k_gdn_chunk_prep)")?;
    let scan = cu(module.load_function("k_gdn_chunk_scan"), "cuModuleGetFunction (k_gdn_chunk_scan)")?;
    use cudarc::driver::sys::CUfunction_attribute as F;
    for (f, b) in [(&prep, prep_smem()), (&scan, scan_smem(dv))] {
        cu(f.set_attribute(F::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, b as i32), "cuFuncSetAttribute")?;
    }
    let stream = gpu.stream.clone();
    println!(
        "gpu gdn-chunk on {}: {hv} value heads ({hk} q / k heads) of {GD}, chunk {GC}, GDNC_DV {dv}; T = {ts:?}",
        gpu.name
    );
    println!(
        "{:>6} {:>7} {:>10} {:>10} {:>9} {:>9} {:>9} {:>12}",
        "T", "checked", "out err", "state err", "prep ms", "scan ms", "ms", "tokens/s"
    );
    let mut rows = Vec::new();
    for &t in ts {
        let x = inputs(t, hk, hv, 7 + t as u64);
        let chunks = t.div_ceil(GC);
        let up = |v: &[f32], what: &str| -> Result<CudaSlice<f32>> {
            let mut d = cu(stream.alloc_zeros::<f32>(v.len().max(1)), "cuMemAlloc")?;
            cu(stream.memcpy_htod(v, &mut d), what)?;
            Ok(d)
        };
        let (dq, dk, dvv, dg, db) =
            (up(&x.q, "q")?, up(&x.k, "k")?, up(&x.v, "v")?, up(&x.g, "g")?, up(&x.beta, "beta")?);
        let dstate = up(&x.state, "state")?;
        let zeros = |n: usize| cu(stream.alloc_zeros::<f32>(n), "cuMemAlloc (scratch)");
        let (dcum, dattn) = (zeros(hv * chunks * GC)?, zeros(hv * chunks * GC * GC)?);
        let (dnv, dkcd, dout) = (zeros(hv * chunks * GC * GD)?, zeros(hv * chunks * GC * GD)?, zeros(t * hv * GD)?);
        let p = |s: &CudaSlice<f32>| ptr(s, &stream);
        let (pq, pk, pv, pg, pb) = (p(&dq), p(&dk), p(&dvv), p(&dg), p(&db));
        let (pc, pa, pn, pkc, po) = (p(&dcum), p(&dattn), p(&dnv), p(&dkcd), p(&dout));
        let (t32, hk32, hv32) = (t as u32, hk as u32, hv as u32);
        let cfg_p = LaunchConfig {
            grid_dim: (chunks as u32, hv as u32, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: prep_smem(),
        };
        let cfg_s = LaunchConfig {
            grid_dim: (hv as u32, (GD / dv) as u32, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: scan_smem(dv),
        };
        let launch_prep = || -> Result<()> {
            let mut b = stream.launch_builder(&prep);
            b.arg(&pq).arg(&pk).arg(&pv).arg(&pg).arg(&pb).arg(&t32).arg(&hk32).arg(&hv32);
            b.arg(&pc).arg(&pa).arg(&pn).arg(&pkc);
            // SAFETY: k_gdn_chunk_prep's parameters: q, k of t x hk x 128, v of t x hv x 128, g, beta of
            // t x hv floats; the scratch of hv x chunks x (64, 64 x 64, 64 x 128, 64 x 128) floats; all
            // allocated above for this t and alive past the launch.
            cu(unsafe { b.launch(cfg_p) }.map(|_| ()), "launch k_gdn_chunk_prep")
        };
        let pst = p(&dstate);
        let launch_scan = |state: u64| -> Result<()> {
            let mut b = stream.launch_builder(&scan);
            b.arg(&pq).arg(&pk).arg(&pc).arg(&pa).arg(&pn).arg(&pkc).arg(&t32).arg(&hk32).arg(&hv32);
            b.arg(&state).arg(&po);
            // SAFETY: k_gdn_chunk_scan reads the prep's scratch and q, k (sizes above), updates a state
            // of hv x 128 x 128 floats and writes t x hv x 128 outputs, all allocated for this t.
            cu(unsafe { b.launch(cfg_s) }.map(|_| ()), "launch k_gdn_chunk_scan")
        };
        // The check: one prefill from the state, against the CPU head by head.
        launch_prep()?;
        launch_scan(pst)?;
        let mut out = vec![0f32; t * hv * GD];
        let mut fin = vec![0f32; hv * GD * GD];
        cu(stream.memcpy_dtoh(&dout, &mut out), "out")?;
        cu(stream.memcpy_dtoh(&dstate, &mut fin), "state")?;
        cu(stream.synchronize(), "sync")?;
        let heads: Vec<usize> = if t <= 1024 { (0..hv).collect() } else { vec![0, hv / 2, hv - 1] };
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(heads.len()).max(1);
        let cpu: Vec<Result<(Vec<f32>, Vec<f32>)>> = std::thread::scope(|s| {
            let parts: Vec<_> = heads
                .chunks(heads.len().div_ceil(threads))
                .map(|hs| s.spawn(|| hs.iter().map(|&h| cpu_head(&x, t, hk, hv, h)).collect::<Vec<_>>()))
                .collect();
            parts.into_iter().flat_map(|j| j.join().unwrap_or_default()).collect()
        });
        if cpu.len() != heads.len() {
            crate::bail!("gpu gdn-chunk: the CPU reference's threads failed");
        }
        let (mut out_err, mut state_err) = (0f64, 0f64);
        for (&h, c) in heads.iter().zip(cpu) {
            let (want_out, want_state) = c?;
            let got_out: Vec<f32> =
                (0..t).flat_map(|i| out[(i * hv + h) * GD..(i * hv + h + 1) * GD].iter().copied()).collect();
            let (eo, at) = rel(&got_out, &want_out);
            let (es, sat) = rel(&fin[h * GD * GD..(h + 1) * GD * GD], &want_state);
            if eo > TOLERANCE || es > TOLERANCE {
                crate::bail!(
                    "gpu gdn-chunk at T = {t}: head {h} differs from the CPU's chunked form beyond {TOLERANCE:.0e} of the largest magnitude: outputs {eo:.2e} (token {}, column {}: {} vs {}), final state {es:.2e} (row {}, column {}): the chunked GDN is wrong",
                    at / GD,
                    at % GD,
                    got_out[at],
                    want_out[at],
                    sat / GD,
                    sat % GD
                );
            }
            (out_err, state_err) = (out_err.max(eo), state_err.max(es));
        }
        // Timing: `reps` rounds of the prep then the scan (which goes on updating the same state: the
        // same work whatever its values), each timed apart; the medians.
        let ev = || cu(gpu.ctx.new_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT)), "cuEventCreate");
        let (e0, e1, e2) = (ev()?, ev()?, ev()?);
        let mut times = [Vec::new(), Vec::new()];
        for _ in 0..reps {
            cu(e0.record(&stream), "event")?;
            launch_prep()?;
            cu(e1.record(&stream), "event")?;
            launch_scan(pst)?;
            cu(e2.record(&stream), "event")?;
            cu(e2.synchronize(), "event sync")?;
            times[0].push(cu(e0.elapsed_ms(&e1), "elapsed")? as f64);
            times[1].push(cu(e1.elapsed_ms(&e2), "elapsed")? as f64);
        }
        let med = |v: &mut Vec<f64>| {
            v.sort_by(|a, b| a.total_cmp(b));
            v[v.len() / 2]
        };
        let (prep_ms, scan_ms) = (med(&mut times[0]), med(&mut times[1]));
        let ms = prep_ms + scan_ms;
        println!(
            "{:>6} {:>7} {:>10.2e} {:>10.2e} {:>9.4} {:>9.4} {:>9.4} {:>12.0}",
            t,
            heads.len(),
            out_err,
            state_err,
            prep_ms,
            scan_ms,
            ms,
            t as f64 / (ms * 1e-3)
        );
        rows.push(ChunkRow { t, heads_checked: heads.len(), out_err, state_err, prep_ms, scan_ms, ms });
    }
    println!(
        "verdict: ok (every checked head's outputs and final state within {TOLERANCE:.0e} of the CPU's chunked form; ms a layer of {hv} heads: the bar is 0.2 at T = 4,096)"
    );
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernels_shared_memory_fits_two_blocks_an_sm() {
        // 228 KiB an SM on the H200 (227 a block): two blocks of each kernel at every GDNC_DV
        assert!(2 * prep_smem() <= 228 << 10, "{}", prep_smem());
        for dv in [16, 32, 64] {
            assert!(scan_smem(dv) <= 227 << 10, "{dv}: {}", scan_smem(dv));
        }
        assert!(2 * scan_smem(32) <= 228 << 10);
    }

    #[test]
    fn inputs_describe_t_tokens_and_the_cpu_head_runs() {
        let x = inputs(70, 1, 3, 1);
        assert_eq!((x.q.len(), x.v.len(), x.g.len(), x.state.len()), (70 * 128, 70 * 3 * 128, 70 * 3, 3 * 128 * 128));
        let (out, s) = cpu_head(&x, 70, 1, 3, 2).unwrap();
        assert_eq!((out.len(), s.len()), (70 * 128, 128 * 128));
        assert!(out.iter().chain(&s).all(|v| v.is_finite()));
    }
}
