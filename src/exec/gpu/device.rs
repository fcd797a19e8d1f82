//! The thin CUDA layer: finding the GPU (a clean error, never a panic, when there is none), NVRTC with
//! one options function, modules cached by source hash, and the CUDA sources of `megakernel/` stitched
//! into one translation unit behind the header generated from the ISA and this module's ABI.
//!
//! Owns: device discovery, compilation, the source text. Refuses: model knowledge (executors get
//! named buffers from the program).

use std::ffi::{c_char, CString};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cudarc::driver::{sys, CudaContext, CudaModule, CudaStream};
use cudarc::nvrtc::{result as nres, sys as nsys, Ptx};

use super::defines::Defines;
use crate::bail;
use crate::error::{Context, Error, Result};

/// The CUDA sources, in include order (one translation unit for NVRTC).
const SOURCES: [(&str, &str); 31] = [
    ("common.cuh", include_str!("../../../megakernel/common.cuh")),
    ("gemv.cuh", include_str!("../../../megakernel/gemv.cuh")),
    ("ring.cuh", include_str!("../../../megakernel/ring.cuh")),
    ("gemm.cuh", include_str!("../../../megakernel/gemm.cuh")),
    ("gemm_fast.cuh", include_str!("../../../megakernel/gemm_fast.cuh")),
    ("gemm_bulk.cuh", include_str!("../../../megakernel/gemm_bulk.cuh")),
    ("gdn_chunk.cuh", include_str!("../../../megakernel/gdn_chunk.cuh")),
    ("ops/embed.cuh", include_str!("../../../megakernel/ops/embed.cuh")),
    ("ops/gemv_norm.cuh", include_str!("../../../megakernel/ops/gemv_norm.cuh")),
    ("ops/gemv_gate_up.cuh", include_str!("../../../megakernel/ops/gemv_gate_up.cuh")),
    ("ops/gemv_residual.cuh", include_str!("../../../megakernel/ops/gemv_residual.cuh")),
    ("ops/reduce_store.cuh", include_str!("../../../megakernel/ops/reduce_store.cuh")),
    ("ops/reduce_residual.cuh", include_str!("../../../megakernel/ops/reduce_residual.cuh")),
    ("ops/gdn_conv.cuh", include_str!("../../../megakernel/ops/gdn_conv.cuh")),
    ("ops/gdn_recur.cuh", include_str!("../../../megakernel/ops/gdn_recur.cuh")),
    ("ops/attn_kv.cuh", include_str!("../../../megakernel/ops/attn_kv.cuh")),
    ("ops/attn_scores.cuh", include_str!("../../../megakernel/ops/attn_scores.cuh")),
    ("ops/attn_pv.cuh", include_str!("../../../megakernel/ops/attn_pv.cuh")),
    ("ops/attn_reduce_gate.cuh", include_str!("../../../megakernel/ops/attn_reduce_gate.cuh")),
    ("ops/lm_head.cuh", include_str!("../../../megakernel/ops/lm_head.cuh")),
    ("ops/argmax.cuh", include_str!("../../../megakernel/ops/argmax.cuh")),
    ("ops/end_step.cuh", include_str!("../../../megakernel/ops/end_step.cuh")),
    ("ops/gdn_step.cuh", include_str!("../../../megakernel/ops/gdn_step.cuh")),
    ("ops/mtp_fc.cuh", include_str!("../../../megakernel/ops/mtp_fc.cuh")),
    ("ops/gdn_chunk.cuh", include_str!("../../../megakernel/ops/gdn_chunk.cuh")),
    ("prefill.cuh", include_str!("../../../megakernel/prefill.cuh")),
    ("attn_prefill.cuh", include_str!("../../../megakernel/attn_prefill.cuh")),
    ("discrete.cu", include_str!("../../../megakernel/discrete.cu")),
    ("megakernel.cu", include_str!("../../../megakernel/megakernel.cu")),
    ("sample.cu", include_str!("../../../megakernel/sample.cu")),
    ("abi.cuh", include_str!("../../../megakernel/abi.cuh")),
];

/// The whole translation unit: the generated header (`header()`, not the committed copy), then the
/// sources.
pub fn source() -> String {
    let mut s = super::abi::header();
    for (name, text) in SOURCES.iter().filter(|(n, _)| *n != "abi.cuh") {
        s += &format!("// ---- megakernel/{name}\n{text}\n");
    }
    s
}

/// The NVRTC options, in one place, recorded in every result. fmad is off: elementwise ops round
/// exactly as written (as the CPU reference does); the GEMV uses fmaf explicitly where it wants FMA.
pub fn nvrtc_options(arch: &str, cuda_include: &Path, defines: &Defines) -> Vec<String> {
    let mut o = vec![
        format!("--gpu-architecture={arch}"),
        "--std=c++17".into(),
        "--fmad=false".into(),
        "--prec-div=true".into(),
        "--prec-sqrt=true".into(),
        "--ftz=false".into(),
        "-default-device".into(),
        format!("--include-path={}", cuda_include.display()),
    ];
    if cuda_include.join("cccl").is_dir() {
        o.push(format!("--include-path={}", cuda_include.join("cccl").display()));
    }
    // The run's tunables (an experiment's `defines`, validated): speed, never bits (but for the
    // negative controls), recorded with the options.
    o.extend(defines.flags());
    o
}

/// An open GPU: context, one stream, its name, SM count and architecture.
pub struct Gpu {
    pub ctx: Arc<CudaContext>,
    pub stream: Arc<CudaStream>,
    pub name: String,
    pub sms: u32,
    pub arch: String,
    pub cuda_home: PathBuf,
}

/// Preloads libnvrtc from the toolkit by path, so the by-name dlopen cudarc does later finds it.
fn preload_nvrtc(cuda_home: &Path) {
    for prefix in ["libnvrtc-builtins.so.", "libnvrtc.so."] {
        for d in [cuda_home.join("lib64"), cuda_home.join("targets/x86_64-linux/lib"), cuda_home.join("lib")] {
            let Ok(rd) = std::fs::read_dir(&d) else { continue };
            let mut names: Vec<PathBuf> = rd
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with(prefix) && !n.ends_with(".alt"))
                })
                .collect();
            names.sort_by_key(|p| p.as_os_str().len());
            if let Some(p) = names.first() {
                // SAFETY: loading the NVIDIA library only runs its initialisers; it stays loaded.
                if let Ok(lib) = unsafe { libloading::Library::new(p) } {
                    std::mem::forget(lib);
                    break;
                }
            }
        }
    }
}

impl Gpu {
    /// Opens device 0, or says plainly why there is no GPU.
    pub fn open() -> Result<Gpu> {
        // cudarc panics when libcuda is missing: check first.
        if !unsafe { sys::is_culib_present() } {
            bail!("no GPU: the NVIDIA driver library (libcuda.so.1) is not on this machine");
        }
        let cuda_home = PathBuf::from(std::env::var("CUDA_HOME").unwrap_or_else(|_| "/usr/local/cuda".into()));
        preload_nvrtc(&cuda_home);
        if !unsafe { nsys::is_culib_present() } {
            bail!(
                "no NVRTC: libnvrtc is not under {}/lib64 nor on the loader path (set CUDA_HOME)",
                cuda_home.display()
            );
        }
        let ctx = CudaContext::new(0).map_err(|e| Error::new(format!("no GPU: cannot open device 0: {e:?}")))?;
        // One explicit stream with explicit synchronisation (graph capture needs no event tracking).
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.new_stream().map_err(|e| Error::new(format!("cuStreamCreate: {e:?}")))?;
        let name = ctx.name().map_err(|e| Error::new(format!("cuDeviceGetName: {e:?}")))?;
        let sms = ctx
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map_err(|e| Error::new(format!("SM count: {e:?}")))? as u32;
        let cc = ctx.compute_capability().map_err(|e| Error::new(format!("compute capability: {e:?}")))?;
        Ok(Gpu { ctx, stream, name, sms, arch: format!("sm_{}{}", cc.0, cc.1), cuda_home })
    }

    pub fn options(&self, defines: &Defines) -> Vec<String> {
        nvrtc_options(&self.arch, &self.cuda_home.join("include"), defines)
    }

    /// Compiles `src` with NVRTC (or loads the CUBIN cached under `cache/cubin/<hash>.cubin`).
    pub fn module(&self, src: &str, cache: &Path, defines: &Defines) -> Result<(Arc<CudaModule>, String)> {
        self.module_for(&self.arch, src, cache, defines)
    }

    /// `module` for an architecture of this GPU's family, e.g. "sm_90a" (its arch-specific features:
    /// wgmma, for the prefill GEMM's probe; a CUBIN for sm_90a loads on sm_90 devices only).
    pub fn module_for(
        &self,
        arch: &str,
        src: &str,
        cache: &Path,
        defines: &Defines,
    ) -> Result<(Arc<CudaModule>, String)> {
        let opts = nvrtc_options(arch, &self.cuda_home.join("include"), defines);
        let hash = crate::isa::fnv_hex(&[src.as_bytes(), opts.join(" ").as_bytes(), arch.as_bytes()]);
        let file = cache.join("cubin").join(format!("{hash}.cubin"));
        let cubin = match std::fs::read(&file) {
            Ok(b) if !b.is_empty() => b,
            _ => {
                let b = nvrtc(src, &opts)?;
                if std::fs::create_dir_all(file.parent().unwrap_or(cache)).is_ok() {
                    let _ = std::fs::write(&file, &b);
                }
                b
            }
        };
        let m = self
            .ctx
            .load_module(Ptx::from_binary(cubin))
            .map_err(|e| Error::new(format!("cuModuleLoadData: {e:?}")))?;
        Ok((m, hash))
    }
}

/// NVRTC alone (no driver, no GPU): compiles the sources for `arch`; returns the CUBIN size. For
/// checking CUDA changes on a machine without a GPU (NVRTC from CUDA_HOME, e.g. the nvidia-cuda-nvrtc
/// wheel unpacked). With `resources`, also ptxas's per-kernel report (registers, spills). Returns the
/// CUBIN and NVRTC's log.
/// With `cubin` (the caller keeps the CUBIN) the line table is compiled in (`-lineinfo`). `m_rows`: the
/// sources as an M-row program compiles them (`rows_source`).
/// (`host`: the macros the host sets for some programs, MK_MTP or MK_HEAD_MASK, as `GpuExec::new` does.)
pub fn compile_check(
    arch: &str,
    resources: bool,
    cubin: bool,
    defines: &Defines,
    m_rows: u32,
    host: &[&str],
) -> Result<(Vec<u8>, String)> {
    let cuda_home = PathBuf::from(std::env::var("CUDA_HOME").unwrap_or_else(|_| "/usr/local/cuda".into()));
    preload_nvrtc(&cuda_home);
    if !unsafe { nsys::is_culib_present() } {
        bail!("no NVRTC: libnvrtc is not under {} nor on the loader path (set CUDA_HOME)", cuda_home.display());
    }
    let mut opts = nvrtc_options(arch, &cuda_home.join("include"), defines);
    if resources {
        opts.push("--ptxas-options=-v".into());
    }
    if cubin {
        opts.push("-lineinfo".into()); // (nvdisasm -g maps the SASS to source lines)
    }
    let pre: String = host.iter().map(|h| format!("#define {h} 1\n")).collect();
    nvrtc_with_log(&format!("{pre}{}", rows_source(m_rows)), &opts)
}

/// The sources for a program of M rows: M > 1 compiles the row loop and the M-row GEMVs in (`#define
/// M_ROWS`); M = 1 programs compile the sources unchanged.
pub fn rows_source(m_rows: u32) -> String {
    match m_rows {
        1 => source(),
        m => format!("#define M_ROWS {m}\n{}", source()),
    }
}

/// One kernel's resources from ptxas's verbose report.
#[derive(Debug, PartialEq)]
pub struct KernelResources {
    pub name: String,
    pub registers: u32,
    pub spill_stores: u32,
    pub spill_loads: u32,
    pub static_smem: u32,
}

/// Parses ptxas's `-v` report into one row per kernel, in report order: the `Compiling entry function
/// 'NAME'` line, then its spill line and its `Used N registers` line; and one row per non-inlined device
/// function (`Function properties for` a mangled name: the megakernel's ops; registers 0, ptxas reports
/// none), its name demangled to the identifier.
pub fn ptxas_resources(log: &str) -> Vec<KernelResources> {
    let num_before = |l: &str, unit: &str| -> Option<u32> {
        let i = l.find(unit)?;
        l[..i].split_whitespace().last()?.parse().ok()
    };
    let row = |name: String| KernelResources { name, registers: 0, spill_stores: 0, spill_loads: 0, static_smem: 0 };
    let mut out: Vec<KernelResources> = Vec::new();
    let mut cur: Option<usize> = None; // the row the next spill line belongs to
    let mut kernel: Option<usize> = None; // the entry function being compiled
    for l in log.lines() {
        if let Some(rest) = l.split("Compiling entry function '").nth(1) {
            out.push(row(rest.split('\'').next().unwrap_or("").to_string()));
            kernel = Some(out.len() - 1);
            cur = kernel;
        } else if let Some(name) = l.split("Function properties for ").nth(1) {
            let name = name.trim();
            cur = match kernel {
                Some(k) if out[k].name == name => Some(k),
                _ => {
                    out.push(row(demangle(name)));
                    Some(out.len() - 1)
                }
            };
        } else if l.contains("spill stores") {
            if let Some(k) = cur.and_then(|i| out.get_mut(i)) {
                k.spill_stores = num_before(l, "bytes spill stores").unwrap_or(0);
                k.spill_loads = num_before(l, "bytes spill loads").unwrap_or(0);
            }
        } else if l.contains("Used") && l.contains("registers") {
            if let Some(k) = kernel.and_then(|i| out.get_mut(i)) {
                k.registers = num_before(l, "registers").unwrap_or(0);
                k.static_smem = num_before(l, "bytes smem").unwrap_or(0);
            }
        }
    }
    out
}

/// A mangled C++ name's identifier (`_Z12mk_gemv_normRK6DevCtx..` -> `mk_gemv_norm`); other names as
/// they are.
fn demangle(name: &str) -> String {
    let Some(rest) = name.strip_prefix("_Z") else { return name.to_string() };
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    match digits.parse::<usize>() {
        Ok(n) if rest.len() >= digits.len() + n => rest[digits.len()..digits.len() + n].to_string(),
        _ => name.to_string(),
    }
}

fn cstr(v: &[c_char]) -> String {
    String::from_utf8_lossy(&v.iter().take_while(|c| **c != 0).map(|c| *c as u8).collect::<Vec<_>>()).into_owned()
}

/// NVRTC to CUBIN; a compile error comes back with the NVRTC log.
fn nvrtc(src: &str, opts: &[String]) -> Result<Vec<u8>> {
    nvrtc_with_log(src, opts).map(|(c, _)| c)
}

/// NVRTC to CUBIN and the compile log.
fn nvrtc_with_log(src: &str, opts: &[String]) -> Result<(Vec<u8>, String)> {
    let csrc = CString::new(src).context("CUDA source has a NUL byte")?;
    let name = CString::new("mk.cu").context("name")?;
    let prog =
        nres::create_program(&csrc, Some(&name)).map_err(|e| Error::new(format!("nvrtcCreateProgram: {e:?}")))?;
    let compiled = unsafe { nres::compile_program(prog, opts) };
    let log = unsafe { nres::get_program_log(prog) }.map(|v| cstr(&v)).unwrap_or_default();
    let out = (|| -> Result<Vec<u8>> {
        compiled.map_err(|e| {
            // (from the first error, not the first warning)
            let lines: Vec<&str> = log.lines().collect();
            let first = lines.iter().position(|l| l.contains(": error")).unwrap_or(0);
            Error::new(format!(
                "NVRTC: {e:?}: {}",
                lines[first..].iter().take(8).copied().collect::<Vec<_>>().join(" | ")
            ))
        })?;
        let mut size = 0usize;
        unsafe { nsys::nvrtcGetCUBINSize(prog, &mut size) }
            .result()
            .map_err(|e| Error::new(format!("nvrtcGetCUBINSize: {e:?}")))?;
        let mut buf = vec![0u8; size];
        unsafe { nsys::nvrtcGetCUBIN(prog, buf.as_mut_ptr() as *mut c_char) }
            .result()
            .map_err(|e| Error::new(format!("nvrtcGetCUBIN: {e:?}")))?;
        Ok(buf)
    })();
    let _ = unsafe { nres::destroy_program(prog) };
    out.map(|c| (c, log))
}

/// A GPU, if this machine has one: the model name from the NVIDIA driver's /proc entries.
pub fn gpu() -> Option<(String, String)> {
    let version = std::fs::read_to_string("/proc/driver/nvidia/version").ok()?;
    // "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build ...": the
    // first word made of digits and dots with a dot in it.
    let driver = version
        .split_whitespace()
        .find(|w| w.contains('.') && w.chars().all(|c| c.is_ascii_digit() || c == '.'))
        .unwrap_or("unknown")
        .to_string();
    let dir = std::fs::read_dir("/proc/driver/nvidia/gpus").ok()?.filter_map(|e| e.ok()).next()?;
    let info = std::fs::read_to_string(dir.path().join("information")).ok()?;
    let model = info.lines().find_map(|l| l.strip_prefix("Model:")).map(|m| m.trim().to_string())?;
    Some((model, driver))
}

/// The GPU's streaming-read bandwidth in GB/s (megakernel/bandwidth.cu over 1 GiB, more than twice
/// the L2: one warm-up, then the median of five), measured once per `key` (GPU and driver) and cached
/// in `cache/ceiling/`: the denominator of every bandwidth figure of a run (issue 26).
pub fn read_ceiling_gbps(cache: &Path) -> Result<f64> {
    let key = gpu().map_or_else(|| "gpu".to_string(), |(g, d)| format!("{g}_{d}"));
    let safe: String = key.chars().map(|c| if c.is_ascii_alphanumeric() || c == '.' { c } else { '_' }).collect();
    let file = cache.join("ceiling").join(format!("{safe}.txt"));
    if let Some(v) = std::fs::read_to_string(&file).ok().and_then(|t| t.trim().parse::<f64>().ok()).filter(|v| *v > 0.0)
    {
        return Ok(v);
    }
    let gpu = Gpu::open()?;
    let (module, _) = gpu.module(include_str!("../../../megakernel/bandwidth.cu"), cache, &Defines::default())?;
    let f =
        module.load_function("k_read_bw").map_err(|e| Error::new(format!("cuModuleGetFunction (k_read_bw): {e:?}")))?;
    let bytes = 1usize << 30;
    let stream = gpu.stream.clone();
    let cu = |r: std::result::Result<(), cudarc::driver::DriverError>, what: &str| {
        r.map_err(|e| Error::new(format!("{what}: {e:?}")))
    };
    let buf = stream.alloc_zeros::<u8>(bytes).map_err(|e| Error::new(format!("cuMemAlloc (1 GiB): {e:?}")))?;
    let sink = stream.alloc_zeros::<u32>(1).map_err(|e| Error::new(format!("cuMemAlloc: {e:?}")))?;
    let n16 = (bytes / 16) as u64;
    let cfg =
        cudarc::driver::LaunchConfig { grid_dim: (4 * gpu.sms, 1, 1), block_dim: (512, 1, 1), shared_mem_bytes: 0 };
    let ev = || {
        gpu.ctx
            .new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(|e| Error::new(format!("cuEventCreate: {e:?}")))
    };
    let (e0, e1) = (ev()?, ev()?);
    let mut ms = Vec::new();
    for i in 0..6 {
        use cudarc::driver::PushKernelArg;
        cu(e0.record(&stream), "cuEventRecord")?;
        let mut b = stream.launch_builder(&f);
        b.arg(&buf).arg(&n16).arg(&sink);
        // SAFETY: (const uint4*, unsigned long long, unsigned*) as k_read_bw declares; n16 16-byte words
        // are in `buf`, which outlives the launch.
        unsafe { b.launch(cfg) }.map(|_| ()).map_err(|e| Error::new(format!("launch k_read_bw: {e:?}")))?;
        cu(e1.record(&stream), "cuEventRecord")?;
        cu(e1.synchronize(), "cuEventSynchronize")?;
        if i > 0 {
            ms.push(e0.elapsed_ms(&e1).map_err(|e| Error::new(format!("cuEventElapsedTime: {e:?}")))? as f64);
        }
    }
    ms.sort_by(|a, b| a.total_cmp(b));
    let gbps = bytes as f64 / (ms[ms.len() / 2] * 1e-3) / 1e9;
    if std::fs::create_dir_all(file.parent().unwrap_or(cache)).is_ok() {
        let _ = std::fs::write(&file, format!("{gbps:.1}\n"));
    }
    Ok(gbps)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A lane-by-lane model of megakernel/ops/attn_scores.cuh's `warp_sum_heads8` (the reduce-scatter) against `warp_sum`'s butterfly: every head's sum, in the lanes that own it, bit
    /// for bit. `swap` models a wrong kept half at the first step (the negative control: it must differ).
    fn heads8(a: &[[f32; 8]; 32], swap: bool) -> [f32; 32] {
        let shfl = |v: &[f32; 32], o: usize| -> [f32; 32] { std::array::from_fn(|l| v[l ^ o]) };
        let bit = |l: usize, b: usize| l & (1 << b) != 0;
        let mut b = [[0f32; 4]; 32];
        for i in 0..4 {
            let send: [f32; 32] = std::array::from_fn(|l| if bit(l, 4) { a[l][i] } else { a[l][i + 4] });
            let r = shfl(&send, 16);
            for l in 0..32 {
                let keep = if bit(l, 4) != swap { a[l][i + 4] } else { a[l][i] };
                b[l][i] = keep + r[l];
            }
        }
        let mut c = [[0f32; 2]; 32];
        for i in 0..2 {
            let send: [f32; 32] = std::array::from_fn(|l| if bit(l, 3) { b[l][i] } else { b[l][i + 2] });
            let r = shfl(&send, 8);
            for l in 0..32 {
                c[l][i] = (if bit(l, 3) { b[l][i + 2] } else { b[l][i] }) + r[l];
            }
        }
        let send: [f32; 32] = std::array::from_fn(|l| if bit(l, 2) { c[l][0] } else { c[l][1] });
        let r = shfl(&send, 4);
        let mut d: [f32; 32] = std::array::from_fn(|l| (if bit(l, 2) { c[l][1] } else { c[l][0] }) + r[l]);
        for o in [2, 1] {
            let r = shfl(&d, o);
            for l in 0..32 {
                d[l] += r[l];
            }
        }
        d
    }

    #[test]
    fn attention_reduce_scatter_is_the_butterfly_bit_for_bit() {
        let mut rng = crate::model::synth::Rng::new(7);
        let mut wrong = 0;
        for _ in 0..200 {
            let a: [[f32; 8]; 32] = std::array::from_fn(|_| {
                std::array::from_fn(|_| (rng.uniform() - 0.5) * 2f32.powi((rng.uniform() * 16.0) as i32))
            });
            let got = heads8(&a, false);
            let bad = heads8(&a, true);
            for h in 0..8 {
                // warp_sum: v += shfl_xor(v, o) for o = 16, 8, 4, 2, 1; every lane ends with lane 0's bits.
                let mut v: [f32; 32] = std::array::from_fn(|l| a[l][h]);
                for o in [16, 8, 4, 2, 1] {
                    v = std::array::from_fn(|l| v[l] + v[l ^ o]);
                }
                assert!(v.iter().all(|x| x.to_bits() == v[0].to_bits()));
                for l in (0..32).filter(|l| (l >> 2) & 7 == h) {
                    assert_eq!(got[l].to_bits(), v[0].to_bits(), "head {h} lane {l}");
                    wrong += (bad[l].to_bits() != v[0].to_bits()) as usize;
                }
            }
        }
        assert!(wrong > 0, "the negative control was not caught");
    }

    #[test]
    fn ptxas_reports_parse_into_one_row_per_kernel() {
        let log = "ptxas info    : Compiling entry function 'k_gemv_norm' for 'sm_90'\n\
                   ptxas info    : Function properties for k_gemv_norm\n\
                   ptxas         .     24 bytes stack frame, 64 bytes spill stores, 92 bytes spill loads\n\
                   ptxas info    : Used 128 registers, used 1 barriers, 16 bytes smem\n\
                   ptxas info    : Compile time = 1.0 ms\n\
                   ptxas info    : Compiling entry function 'k_embed' for 'sm_90'\n\
                   ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n\
                   ptxas info    : Used 20 registers, used 0 barriers\n\
                   ptxas info    : Function properties for _Z12mk_gemv_normRK6DevCtxRK4WordjPcb\n\
                   ptxas         .     0 bytes stack frame, 48 bytes spill stores, 128 bytes spill loads\n";
        let r = ptxas_resources(log);
        assert_eq!(r.len(), 3);
        assert_eq!(
            (r[2].name.as_str(), r[2].registers, r[2].spill_stores, r[2].spill_loads),
            ("mk_gemv_norm", 0, 48, 128)
        );
        assert_eq!(
            r[0],
            KernelResources {
                name: "k_gemv_norm".into(),
                registers: 128,
                spill_stores: 64,
                spill_loads: 92,
                static_smem: 16
            }
        );
        assert_eq!((r[1].name.as_str(), r[1].registers, r[1].spill_stores, r[1].static_smem), ("k_embed", 20, 0, 0));
        assert!(ptxas_resources("no report").is_empty());
    }
}
