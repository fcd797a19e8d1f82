//! Prefill programs on the graph path (issue 28 item 6, its first form): M rows of a prompt a step (M up
//! to 128), the fp8 GEMV words as the tensor-core GEMM over the arena's chunk layout (gemm_bulk.cuh:
//! bulk copies and wgmma, 128 tokens a block, in exact or fast mode; so the module is compiled for
//! sm_90a), the bf16 GEMV words and the chunked GDN as their own kernels, every other word its
//! discrete kernel over the rows (megakernel/prefill.cuh says which and how they round).
//!
//! Owns: the prefill's scratch (allocated with the program, at startup), the launches that replace a
//! word, the split-K shape of a GEMM (`splits`), `prefill_rows`. Refuses: a prefill step on the
//! megakernel (not built), a token count other than M, a program that is not a prefill program, a GPU
//! other than sm_90, a GEMM whose rows are not a multiple of 128.

use cudarc::driver::{CudaFunction, CudaModule, CudaSlice, DevicePtr, LaunchConfig, PushKernelArg};

use super::abi::THREADS;
use super::{cu, GpuExec};
use crate::error::{Error, Result};
use crate::isa::access::GDN_HEAD_DIM;
use crate::isa::{slot, Opcode, Program, Word};

/// Weight rows a GEMM block (every form: megakernel/gemm.cuh, gemm_fast.cuh, gemm_bulk.cuh).
pub const GEMM_ROWS: usize = 128;
/// The prefill's GEMM (megakernel/gemm_bulk.cuh: bulk copies, wgmma; k_gemm_wg_bulk exact, k_gemm_fast_wg
/// fast): 288 threads, 128 weight rows x 128 tokens a block, four stages and their barriers.
const BULK_THREADS: u32 = 288;
const BULK_TOKENS: usize = 128;
const BULK_SMEM: u32 = 4 * (8 * 2048 + 128 * 256) + 4 * 16;
const BULK_FAST_SMEM: u32 = 4 * (8 * 2048 + 128 * 128 + 128 * 4) + 4 * 16;
/// The chunked GDN's chunk (gdn_chunk.cuh GC); its scan's state columns a block are the GDNC_DV define.
const GC: usize = 64;
/// k_pf_attn's block (megakernel/attn_prefill.cuh): 8 warps, 16 query rows; its shared memory: the
/// queries and each warp's K and V tiles of 16 keys (bf16 rows of 264), the warps' statistics, the rows'
/// positions.
const PFA_THREADS: u32 = 256;
const PFA_ROWS: u32 = 16;
const PFA_SMEM: u32 = 16 * 264 * 2 + 8 * 2 * 16 * 264 * 2 + 8 * 16 * 2 * 4 + 16 * 4;

/// The k-tiles a split and the splits of a T x N x K GEMM on `sms` SMs: enough blocks for two waves'
/// worth of the machine when the (row, token) tiles alone give fewer, at least 4 k-tiles a split.
pub fn splits(t: usize, n: usize, k: usize, sms: usize, tokens: usize) -> (usize, usize) {
    let tiles = n.div_ceil(GEMM_ROWS) * t.div_ceil(tokens);
    let kt = k / 128;
    let want = (2 * sms).div_ceil(tiles).clamp(1, (kt / 4).max(1));
    let kps = kt.div_ceil(want);
    (kps, kt.div_ceil(kps))
}

/// How the graph path runs a prefill program's word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Form {
    /// An fp8 GEMV word: inputs prepared, the GEMM (and its split-K reduce), the epilogue.
    Gemm,
    /// A bf16 GemvNorm (GDN's a and b): inputs prepared, a warp an output.
    Bf16,
    /// GdnChunk: inputs, the chunked rule's prep and scan, the gated outputs.
    Chunk,
    /// AttnScores: the layer's whole attention over the step's rows (causal, tensor cores; k_pf_attn),
    /// written where its AttnReduceGate writes.
    Attn,
    /// AttnPv and AttnReduceGate: nothing (their layer's Attn did their work).
    Skip,
    /// Its discrete kernel, rows by `for_rows`.
    Word,
}

/// The form of word `w` of prefill program `p`.
pub fn form(p: &Program, w: &Word) -> Form {
    let wbytes = |s: usize| w.op(s).map(|b| p.buffers[b].elem_bytes);
    match w.opcode {
        Opcode::GemvNorm | Opcode::GemvGateUp | Opcode::GemvResidual if wbytes(slot::W0) == Some(1) => Form::Gemm,
        Opcode::GemvNorm if wbytes(slot::W0) == Some(2) => Form::Bf16,
        Opcode::GdnChunk => Form::Chunk,
        Opcode::AttnScores => Form::Attn,
        Opcode::AttnPv | Opcode::AttnReduceGate => Form::Skip,
        _ => Form::Word,
    }
}

/// The prefill's scratch and kernels: X the prepared inputs [M][K], the GEMM's totals (gate's and up's)
/// and split partials, the chunked GDN's inputs, prep scratch and outputs. Device pointers taken once.
pub struct Scratch {
    _bufs: Vec<CudaSlice<u8>>,
    /// The prepared inputs [M][K] bf16 (k_pf_x's); exact mode's GEMM input in the bulk GEMM's tiled
    /// layout (k_pf_tile's); fast mode's e4m3 codes in it and scales [K / 128][Tp] (k_pf_quant's). Tp = M
    /// rounded up to the GEMM's 128 tokens: the rows past M hold whatever a wider word left there (their
    /// columns are never stored, and in fast mode their scales stay zero).
    x: u64,
    xt: u64,
    xq: u64,
    xs: u64,
    tp: u32,
    /// Fast mode (`Activations::Fp8Dynamic`): the GEMMs take the activations quantised (k_gemm_fast_wg).
    pub fast: bool,
    y: [u64; 2],
    parts: u64,
    gdn: [u64; 10],
    /// The scan's state columns a block (GDNC_DV, as the module was compiled).
    dv: usize,
    f: Kernels,
}

struct Kernels {
    x: CudaFunction,
    out: CudaFunction,
    bf16: CudaFunction,
    gdn_in: CudaFunction,
    gdn_out: CudaFunction,
    gemm: CudaFunction,
    gemm_fast: CudaFunction,
    quant: CudaFunction,
    tile: CudaFunction,
    reduce: CudaFunction,
    prep: CudaFunction,
    scan: CudaFunction,
    attn: CudaFunction,
}

/// The chunked GDN's prep and scan shared memory (gdn_chunk.cuh; src/verify/gdn_chunk.rs sizes the same).
fn prep_smem() -> u32 {
    ((2 * GC * (GDN_HEAD_DIM + 4) + GC * (GC + 4) + 2 * GC) * 4) as u32
}
fn scan_smem(dv: usize) -> u32 {
    ((GDN_HEAD_DIM * dv + 2 * GC * (GDN_HEAD_DIM + 4) + GC * (GC + 4) + GC * dv + 2 * GC) * 4) as u32
}

impl Scratch {
    /// The scratch a prefill program needs, sized from its words (the widest input, output and GEMM
    /// split), allocated now (startup) on `stream`.
    pub fn new(
        p: &Program,
        module: &std::sync::Arc<CudaModule>,
        stream: &std::sync::Arc<cudarc::driver::CudaStream>,
        sms: u32,
        dv: usize,
    ) -> Result<Scratch> {
        let m = p.target.m_rows as usize;
        let (mut kmax, mut nmax, mut parts) = (0usize, 0usize, 0usize);
        let (mut hk, mut hv) = (0usize, 0usize);
        for w in &p.words {
            let k = w.op(slot::IN0).map_or(0, |b| p.buffers[b].cols as usize);
            match form(p, w) {
                Form::Gemm => {
                    let n = w.rows as usize;
                    if !n.is_multiple_of(GEMM_ROWS) {
                        crate::bail!("gpu: a prefill GEMM of {n} rows (the bulk GEMM takes a multiple of {GEMM_ROWS})");
                    }
                    let (_, s) = splits(m, n, k, sms as usize, BULK_TOKENS);
                    (kmax, nmax) = (kmax.max(k), nmax.max(n));
                    if s > 1 {
                        parts = parts.max(s * m * n);
                    }
                }
                Form::Bf16 => kmax = kmax.max(k),
                Form::Chunk => (hk, hv) = (hk.max(w.arg0 as usize), hv.max(w.rows as usize)),
                Form::Attn | Form::Skip | Form::Word => {}
            }
        }
        let d = GDN_HEAD_DIM;
        let chunks = m.div_ceil(GC);
        // q, k [M][hk][d]; v [M][hv][d]; g, beta [M][hv]; cum, attn, nv, kcd per (head, chunk); out
        let gdn = [m * hk * d, m * hk * d, m * hv * d, m * hv, m * hv, hv * chunks * GC, hv * chunks * GC * GC];
        let gdn = [
            gdn[0],
            gdn[1],
            gdn[2],
            gdn[3],
            gdn[4],
            gdn[5],
            gdn[6],
            hv * chunks * GC * d,
            hv * chunks * GC * d,
            m * hv * d,
        ];
        let mut bufs = Vec::new();
        let mut alloc = |bytes: usize| -> Result<u64> {
            let b = cu(stream.alloc_zeros::<u8>(bytes.max(16)), "cuMemAlloc (prefill scratch)")?;
            let p = b.device_ptr(stream).0;
            bufs.push(b);
            Ok(p)
        };
        let tp = m.div_ceil(BULK_TOKENS) * BULK_TOKENS;
        let x = alloc(2 * m * kmax)?;
        let (xt, xq, xs) = (alloc(2 * tp * kmax)?, alloc(tp * kmax)?, alloc(4 * tp * kmax.div_ceil(128))?);
        let y = [alloc(4 * m * nmax)?, alloc(4 * m * nmax)?];
        let parts = alloc(4 * parts)?;
        let mut g = [0u64; 10];
        for (i, n) in gdn.iter().enumerate() {
            g[i] = alloc(4 * n)?;
        }
        let load = |name: &str, smem: u32| -> Result<CudaFunction> {
            let f = cu(module.load_function(name), &format!("cuModuleGetFunction ({name})"))?;
            if smem > 48 * 1024 {
                use cudarc::driver::sys::CUfunction_attribute as F;
                cu(
                    f.set_attribute(F::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem as i32),
                    "cuFuncSetAttribute",
                )?;
            }
            Ok(f)
        };
        let f = Kernels {
            // (a row of the widest input and the block sums: past 48 KiB for K > ~24K)
            x: load("k_pf_x", (kmax.div_ceil(8) * 16 + 64) as u32)?,
            out: load("k_pf_out", 0)?,
            bf16: load("k_pf_gemv_bf16", 0)?,
            gdn_in: load("k_pf_gdn_in", 0)?,
            gdn_out: load("k_pf_gdn_out", 0)?,
            gemm: load("k_gemm_wg_bulk", BULK_SMEM)?,
            gemm_fast: load("k_gemm_fast_wg", BULK_FAST_SMEM)?,
            quant: load("k_pf_quant", 0)?,
            tile: load("k_pf_tile", 0)?,
            reduce: load("k_gemm_reduce", 0)?,
            prep: load("k_gdn_chunk_prep", prep_smem())?,
            scan: load("k_gdn_chunk_scan", scan_smem(dv))?,
            attn: load("k_pf_attn", PFA_SMEM)?,
        };
        Ok(Scratch { _bufs: bufs, x, xt, xq, xs, tp: tp as u32, fast: false, y, parts, gdn: g, dv, f })
    }
}

fn grid(x: u32, y: u32, z: u32, threads: u32, smem: u32) -> LaunchConfig {
    LaunchConfig { grid_dim: (x, y, z), block_dim: (threads, 1, 1), shared_mem_bytes: smem }
}

impl GpuExec {
    /// Words first..first + n of a prefill program, where any of their forms is not the discrete
    /// kernel's: None for a group the caller launches as usual.
    pub(super) fn launch_prefill(&self, first: usize, n: usize) -> Option<Result<()>> {
        let s = self.prefill.as_ref()?;
        let forms: Vec<Form> = (first..first + n).map(|i| form(&self.prog, &self.prog.words[i])).collect();
        if forms.iter().all(|f| *f == Form::Word) {
            return None;
        }
        // word by word: a replaced word by its launches, any other by its discrete kernel alone
        Some((first..first + n).zip(forms).try_for_each(|(i, f)| {
            let r = if f == Form::Word { self.launch_words(i, 1) } else { self.launch_prefill_word(s, i) };
            r.map_err(|e| Error::new(format!("prefill word {i} ({:?}): {e}", self.prog.words[i].opcode)))
        }))
    }

    fn launch_prefill_word(&self, s: &Scratch, wi: usize) -> Result<()> {
        let p = &self.prog;
        let w = &p.words[wi];
        let m = p.target.m_rows;
        let stream = &self.gpu.stream;
        let prog = self.base + self.layout.prog as u64;
        let (wi32, ctx) = (wi as u32, self.ctx);
        let k = w.op(slot::IN0).map_or(0, |b| p.buffers[b].cols) as u32;
        let place = |sl: usize| -> Result<crate::exec::gpu::arena::Place> {
            w.op(sl).map(|b| self.layout.places[b]).ok_or_else(|| Error::new(format!("no operand in slot {sl}")))
        };
        // SAFETY (every launch below): the kernels' parameters are as prefill.cuh / gemm_bulk.cuh / gemm_fast.cuh /
        // gdn_chunk.cuh declare them, in order; the program, context and arena outlive the launch; the
        // scratch pointers are `Scratch`'s, sized in `Scratch::new` for this program's M and widest word.
        let prep_x = |norm: usize| -> Result<()> {
            let mut b = stream.launch_builder(&s.f.x);
            let ns = norm as u32;
            b.arg(&prog).arg(&wi32).arg(&ctx).arg(&ns).arg(&s.x);
            cu(unsafe { b.launch(grid(m, 1, 1, THREADS, k.div_ceil(8) * 16 + 64)) }.map(|_| ()), "launch k_pf_x")
        };
        match form(p, w) {
            Form::Gemm => {
                let norm = if w.opcode == Opcode::GemvGateUp { slot::W2 } else { slot::W1 };
                prep_x(norm)?;
                // the GEMM's input in its tiled layout: quantised (fast) or as is (exact)
                if s.fast {
                    let mut b = stream.launch_builder(&s.f.quant);
                    b.arg(&s.x).arg(&s.xq).arg(&s.xs).arg(&m).arg(&k).arg(&s.tp);
                    let warps = m * (k / 128);
                    let cfg = grid(warps.div_ceil(THREADS / 32), 1, 1, THREADS, 0);
                    cu(unsafe { b.launch(cfg) }.map(|_| ()), "launch k_pf_quant")?;
                } else {
                    let mut b = stream.launch_builder(&s.f.tile);
                    b.arg(&s.x).arg(&s.xt).arg(&m).arg(&k);
                    let cfg = grid((m * k / 2).div_ceil(THREADS), 1, 1, THREADS, 0);
                    cu(unsafe { b.launch(cfg) }.map(|_| ()), "launch k_pf_tile")?;
                }
                let n = w.rows;
                let (kps, sp) = splits(m as usize, n as usize, k as usize, self.gpu.sms as usize, BULK_TOKENS);
                let weights: &[usize] =
                    if w.opcode == Opcode::GemvGateUp { &[slot::W0, slot::W1] } else { &[slot::W0] };
                for (i, &ws) in weights.iter().enumerate() {
                    let pl = place(ws)?;
                    let (wp, sc) = (pl.addr, pl.scale_addr);
                    let out = if sp > 1 { s.parts } else { s.y[i] };
                    let kps32 = kps as u32;
                    let mut b = stream.launch_builder(if s.fast { &s.f.gemm_fast } else { &s.f.gemm });
                    // (exact mode passes Xs too: the kernel's signature is fast mode's, it reads none)
                    let xin = if s.fast { s.xq } else { s.xt };
                    b.arg(&wp).arg(&sc).arg(&xin).arg(&s.xs);
                    b.arg(&out).arg(&m).arg(&s.tp).arg(&n).arg(&k).arg(&kps32);
                    let cfg = grid(
                        n.div_ceil(GEMM_ROWS as u32),
                        s.tp / BULK_TOKENS as u32,
                        sp as u32,
                        BULK_THREADS,
                        if s.fast { BULK_FAST_SMEM } else { BULK_SMEM },
                    );
                    cu(unsafe { b.launch(cfg) }.map(|_| ()), "launch the GEMM")?;
                    if sp > 1 {
                        let (count, sp32) = (m as u64 * n as u64, sp as u32);
                        let mut b = stream.launch_builder(&s.f.reduce);
                        b.arg(&s.parts).arg(&s.y[i]).arg(&count).arg(&sp32);
                        let blocks = (count as u32).div_ceil(THREADS).min(4 * self.gpu.sms);
                        cu(unsafe { b.launch(grid(blocks, 1, 1, THREADS, 0)) }.map(|_| ()), "launch k_gemm_reduce")?;
                    }
                }
                let mut b = stream.launch_builder(&s.f.out);
                b.arg(&prog).arg(&wi32).arg(&ctx).arg(&s.y[0]).arg(&s.y[1]);
                cu(unsafe { b.launch(grid(n.div_ceil(THREADS), m, 1, THREADS, 0)) }.map(|_| ()), "launch k_pf_out")
            }
            Form::Bf16 => {
                prep_x(slot::W1)?;
                let mut b = stream.launch_builder(&s.f.bf16);
                b.arg(&prog).arg(&wi32).arg(&ctx).arg(&s.x);
                cu(
                    unsafe { b.launch(grid(w.rows.div_ceil(THREADS / 32), m, 1, THREADS, 0)) }.map(|_| ()),
                    "launch k_pf_gemv_bf16",
                )
            }
            Form::Chunk => {
                let [q, kk, v, g, beta, cum, attn, nv, kcd, o] = s.gdn;
                let (hk, hv) = (w.arg0, w.rows);
                let mut b = stream.launch_builder(&s.f.gdn_in);
                b.arg(&prog).arg(&wi32).arg(&ctx).arg(&q).arg(&kk).arg(&v).arg(&g).arg(&beta);
                cu(unsafe { b.launch(grid(m, hv, 1, 128, 0)) }.map(|_| ()), "launch k_pf_gdn_in")?;
                let chunks = m.div_ceil(GC as u32);
                let mut b = stream.launch_builder(&s.f.prep);
                b.arg(&q).arg(&kk).arg(&v).arg(&g).arg(&beta).arg(&m).arg(&hk).arg(&hv);
                b.arg(&cum).arg(&attn).arg(&nv).arg(&kcd);
                cu(
                    unsafe { b.launch(grid(chunks, hv, 1, THREADS, prep_smem())) }.map(|_| ()),
                    "launch k_gdn_chunk_prep",
                )?;
                let st = place(slot::ST0)?.addr;
                let mut b = stream.launch_builder(&s.f.scan);
                b.arg(&q).arg(&kk).arg(&cum).arg(&attn).arg(&nv).arg(&kcd).arg(&m).arg(&hk).arg(&hv);
                b.arg(&st).arg(&o);
                let cfg = grid(hv, (GDN_HEAD_DIM / s.dv) as u32, 1, THREADS, scan_smem(s.dv));
                cu(unsafe { b.launch(cfg) }.map(|_| ()), "launch k_gdn_chunk_scan")?;
                let mut b = stream.launch_builder(&s.f.gdn_out);
                b.arg(&prog).arg(&wi32).arg(&ctx).arg(&o);
                cu(unsafe { b.launch(grid(m, 1, 1, THREADS, 0)) }.map(|_| ()), "launch k_pf_gdn_out")
            }
            Form::Attn => {
                // the layer's AttnPv (the V cache) and AttnReduceGate (the gate, the output): the next ones
                let next = |op: Opcode| -> Result<u32> {
                    p.words[wi..]
                        .iter()
                        .position(|x| x.opcode == op)
                        .map(|i| (wi + i) as u32)
                        .ok_or_else(|| Error::new(format!("AttnScores word {wi} has no {op:?} after it")))
                };
                let (wp, wo) = (next(Opcode::AttnPv)?, next(Opcode::AttnReduceGate)?);
                let out = p.words[wo as usize]
                    .op(slot::OUT0)
                    .ok_or_else(|| Error::new(format!("AttnReduceGate word {wo} has no output")))?;
                let heads = (p.buffers[out].cols / 256) as u32;
                let mut b = stream.launch_builder(&s.f.attn);
                b.arg(&prog).arg(&wi32).arg(&wp).arg(&wo).arg(&ctx).arg(&m);
                let cfg = grid(heads, m.div_ceil(PFA_ROWS), 1, PFA_THREADS, PFA_SMEM);
                cu(unsafe { b.launch(cfg) }.map(|_| ()), "launch k_pf_attn")
            }
            Form::Skip => Ok(()),
            Form::Word => crate::bail!("not a prefill form"),
        }
    }

    /// The prefill GEMMs' numerics (issue 28 item 1): `Fp8Dynamic` (fast mode: the activations quantised
    /// to e4m3 per token and 128-group, k_gemm_fast_wg) or `Bf16` (exact mode, the default). A prefill
    /// program only; the captured graph is dropped (the next step captures the new launches).
    pub fn set_activations(&mut self, act: crate::model::ops::Activations) -> Result<()> {
        let Some(s) = self.prefill.as_mut() else {
            crate::bail!("gpu: fast mode is a prefill program's (this one is a decode or verification step)");
        };
        let fast = act == crate::model::ops::Activations::Fp8Dynamic;
        if s.fast != fast {
            s.fast = fast;
            (self.graph, self.split) = (None, None);
        }
        Ok(())
    }

    /// One step of a prefill program on the graph path: token m at position pos + m for every row m,
    /// every row kept (the GDN states and KV caches move on by M); returns the greedy next token after
    /// the last row (the last row's logits are the last row of `logits()`).
    pub fn prefill_rows(&mut self, tokens: &[u32]) -> Result<u32> {
        let m = self.prefill_check(tokens)?;
        let r = self.step_rows_unchecked(tokens, false, false);
        let t = self.advance(r, m)?;
        Ok(t[m - 1])
    }

    /// `prefill_rows` launched word by word, an event pair around each word's launches (a replaced
    /// word: all of its kernels; a skipped one: none), in stream order: the next token and each word's
    /// ms (`mk gpu prefill --profile`; eager launches, so the sum exceeds a graph replay's time by the
    /// launch gaps).
    pub fn prefill_rows_timed(&mut self, tokens: &[u32]) -> Result<(u32, Vec<f32>)> {
        let m = self.prefill_check(tokens)?;
        let r = self.prefill_timed_unchecked(tokens);
        let (t, ms) = self.advance(r, m)?;
        Ok((t[m - 1], ms))
    }

    fn prefill_timed_unchecked(&mut self, tokens: &[u32]) -> Result<(Vec<u32>, Vec<f32>)> {
        self.write_rows_ctrl(tokens)?;
        let ms = self.timed_words()?;
        Ok((self.rows_next(tokens.len())?, ms))
    }

    /// A prefill step's checks (a prefill program, M tokens in the vocabulary, room, greedy): M.
    fn prefill_check(&self, tokens: &[u32]) -> Result<usize> {
        let m = self.prog.target.m_rows as usize;
        if !self.prog.target.prefill {
            crate::bail!("gpu: prefill_rows takes a prefill program (this one is a decode or verification step)");
        }
        if tokens.len() != m {
            crate::bail!("gpu: {} tokens for a prefill step of M = {m} rows", tokens.len());
        }
        for &t in tokens {
            self.check_token(t)?;
        }
        self.room(m, "rows")?;
        if self.sampling {
            crate::bail!("gpu: a prefill step is greedy (its head runs the last row's argmax)");
        }
        Ok(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The 27B's prefill program: every fp8 GEMV word runs as the GEMM (whole: the compiler splits no
    /// prefill GEMV, so no reduce word follows one), GDN's a and b as the bf16 kernel, the chunked rule
    /// as its three launches, and nothing else is replaced.
    #[test]
    fn every_fp8_gemv_of_a_prefill_program_is_a_whole_gemm() {
        let cfg = crate::model::config::ModelConfig::preset("qwen3.5-27b").unwrap();
        let mut t = crate::compiler::h200(64);
        t.prefill = true;
        t.max_context = 256;
        let p = crate::compiler::compile(&cfg, "prefill", &t).unwrap();
        let count = |f: Form| p.words.iter().filter(|w| form(&p, w) == f).count();
        // GDN layers: qkv, z, out_proj; attention layers: q, k, v, o_proj; every layer: gate/up, down
        assert_eq!(count(Form::Gemm), 48 * 3 + 16 * 4 + 64 * 2);
        assert_eq!(count(Form::Bf16), 48 * 2);
        assert_eq!(count(Form::Chunk), 48);
        // attention: the scores word runs the whole layer, its PV and reduce words nothing
        assert_eq!((count(Form::Attn), count(Form::Skip)), (16, 32));
        assert!(p
            .words
            .iter()
            .all(|w| w.k_parts <= 1 && !matches!(w.opcode, Opcode::ReduceStore | Opcode::ReduceResidual)));
        // the lm_head (bf16) stays its own word: the last row only
        let head = p.words.iter().find(|w| w.opcode == Opcode::LmHead).unwrap();
        assert_eq!(form(&p, head), Form::Word);
        assert_ne!(head.flags & crate::isa::FLAG_LAST_ROW, 0);
    }

    /// The host's k_pf_attn shape is the kernel's (attn_prefill.cuh's defines, the same expression).
    #[test]
    fn the_attention_kernels_shape_is_the_hosts() {
        let src = include_str!("../../../megakernel/attn_prefill.cuh");
        for d in ["#define PFA_WARPS 8\n", "#define PFA_ROWS 16\n", "#define PFA_KEYS 16\n", "#define PFA_STRIDE 264 "]
        {
            assert!(src.contains(d), "{d}");
        }
        assert!(src.contains(
            "#define PFA_SMEM (PFA_Q_BYTES + PFA_WARPS * 2 * PFA_TILE_BYTES + PFA_WARPS * PFA_ROWS * 2 * 4 + PFA_ROWS * 4)"
        ));
        assert_eq!((PFA_THREADS, PFA_ROWS), (8 * 32, 16));
        assert_eq!(PFA_SMEM, 16 * 264 * 2 + 8 * 2 * (16 * 264 * 2) + 8 * 16 * 2 * 4 + 16 * 4);
    }

    #[test]
    fn small_gemms_split_k_and_large_ones_do_not() {
        // T = 64 rows of o_proj (5,120 x 6,144): 40 row tiles, split to fill two waves of 132 SMs
        let (kps, sp) = splits(64, 5120, 6144, 132, BULK_TOKENS);
        assert!(sp > 1 && kps * sp >= 6144 / 128 && kps >= 4, "{kps} {sp}");
        assert_eq!(splits(4096, 17408, 5120, 132, BULK_TOKENS).1, 1);
    }

    /// The bulk GEMM's launch shape here is gemm_bulk.cuh's.
    #[test]
    fn the_bulk_gemms_shape_is_the_hosts() {
        let src = include_str!("../../../megakernel/gemm_bulk.cuh");
        for d in ["#define GEMM_FW_STAGES 4", "#define GEMM_FW_TOKENS 128", "#define GEMM_FW_THREADS 288"] {
            assert!(src.contains(d), "{d}");
        }
        assert!(src.contains("(8 * 2048 + GEMM_FW_TOKENS * ((FAST) ? 128 : 256) + ((FAST) ? GEMM_FW_TOKENS * 4 : 0))"));
        assert_eq!((BULK_THREADS, BULK_TOKENS), (288, 128));
        assert_eq!(BULK_SMEM, 4 * (8 * 2048 + 128 * 256) + 4 * 16);
        assert_eq!(BULK_FAST_SMEM, 4 * (8 * 2048 + 128 * 128 + 128 * 4) + 4 * 16);
    }
}
