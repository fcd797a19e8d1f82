//! The CPU reference forward: one token at a time, the oracle's decode path (`causal_conv1d_update` +
//! `torch_recurrent_gated_delta_rule` for GDN layers, eager attention with a KV cache), every rounding
//! point reproduced (`ops.rs`), every reduction in a fixed order.
//!
//! Owns: `State` (conv ring, fp32 recurrent state, KV cache, position), `step`, and the per-unit layer
//! functions (one channel range of the conv, one value head of the recurrence, one KV partition of
//! attention) that the program interpreter calls on its units, so both produce the same bits.
//! Refuses: out-of-range token ids and context overflow (errors).

use super::config::ModelConfig;
use super::numerics::{bf, bf16_to_f32};
use super::ops::{self, Linear};
pub use super::weights::{AttnWeights, GdnWeights, LayerWeights, Mixer, Weights};
use crate::bail;
use crate::error::Result;

pub use crate::isa::access::ATTN_PART;

/// Per-sequence state. Preallocated for `max_context` positions.
#[derive(Clone)]
pub struct State {
    /// Next position to be written (= tokens consumed so far).
    pub pos: usize,
    /// Per GDN layer: `[conv_dim, 4]` ring of pre-activation qkv inputs; slot `p % 4` holds position p.
    pub conv: Vec<Vec<f32>>,
    /// Per GDN layer: `[v_heads, 128 (K), 128 (V)]` fp32 (HF layout).
    pub recurrent: Vec<Vec<f32>>,
    /// Per attention layer: keys `[max_context][kv_heads][256]`, post-norm post-RoPE (bf16 values).
    pub k_cache: Vec<Vec<f32>>,
    /// Per attention layer: values `[max_context][kv_heads][256]`.
    pub v_cache: Vec<Vec<f32>>,
    pub max_context: usize,
}

impl State {
    pub fn new(cfg: &ModelConfig, max_context: usize) -> State {
        let kv = max_context * cfg.attn_kv_dim();
        State {
            pos: 0,
            conv: vec![vec![0.0; cfg.gdn_conv_dim() * 4]; cfg.n_gdn_layers()],
            recurrent: vec![vec![0.0; cfg.gdn_v_heads * cfg.gdn_k_dim * cfg.gdn_v_dim]; cfg.n_gdn_layers()],
            k_cache: vec![vec![0.0; kv]; cfg.n_attn_layers()],
            v_cache: vec![vec![0.0; kv]; cfg.n_attn_layers()],
            max_context,
        }
    }

    /// The conv state of GDN layer `l` as the oracle caches it: `[conv_dim, 3]`, oldest first.
    pub fn conv_ordered(&self, l: usize) -> Vec<f32> {
        let ring = &self.conv[l];
        let mut out = Vec::with_capacity(ring.len() / 4 * 3);
        for c in 0..ring.len() / 4 {
            for back in (1..=3).rev() {
                // position pos - back, zero before the sequence starts
                out.push(if self.pos >= back { ring[4 * c + (self.pos - back) % 4] } else { 0.0 });
            }
        }
        out
    }
}

/// What a step can optionally record (for diffs and goldens).
#[derive(Default)]
pub struct Trace {
    /// Residual stream after each layer (bf16 values).
    pub hidden: Vec<Vec<f32>>,
    /// Each GDN layer's projections (what replaying its conv and recurrence needs: `rollback`).
    pub gdn: Vec<GdnInput>,
}

/// Checks a token and the context before a step.
pub fn check_input(cfg: &ModelConfig, pos: usize, max_context: usize, token: u32) -> Result<()> {
    if token as usize >= cfg.vocab {
        bail!("token id {token} is out of range (vocabulary {})", cfg.vocab);
    }
    if pos >= max_context {
        bail!("context overflow: position {pos} >= max context {max_context}");
    }
    Ok(())
}

/// Runs one token through the model, advancing `state`; returns the bf16 logits (as f32).
pub fn step(w: &Weights, state: &mut State, token: u32, trace: Option<&mut Trace>) -> Result<Vec<f32>> {
    Ok(step_hidden(w, state, token, trace)?.0)
}

/// `step`, also returning the final-normed hidden state (bf16 values): what the lm_head scores and the
/// MTP drafter takes (`mtp`).
pub fn step_hidden(
    w: &Weights,
    state: &mut State,
    token: u32,
    trace: Option<&mut Trace>,
) -> Result<(Vec<f32>, Vec<f32>)> {
    let xn = step_body(w, state, token, trace)?;
    Ok((w.lm_head.gemv(&xn), xn))
}

/// `step_hidden` without the lm_head: the final-normed hidden state only, for a row whose logits nobody
/// reads (a forced token's) or a head that scores some rows only (`grammar::masked_head`).
pub fn step_body(w: &Weights, state: &mut State, token: u32, trace: Option<&mut Trace>) -> Result<Vec<f32>> {
    let cfg = &w.cfg;
    check_input(cfg, state.pos, state.max_context, token)?;
    let eps = cfg.rms_eps as f32;
    let hd = cfg.hidden;
    let t = token as usize;
    let mut h: Vec<f32> = w.embed[t * hd..(t + 1) * hd].iter().map(|b| bf16_to_f32(*b)).collect();
    let mut xn = vec![0f32; hd];
    let (mut gi, mut ai) = (0, 0);
    let mut trace = trace;
    for layer in &w.layers {
        decoder_layer(cfg, layer, &mut h, &mut xn, |xn| match &layer.mixer {
            Mixer::Gdn(g) => {
                let inp = gdn_project(g, xn);
                let o = gdn_mix(cfg, g, &inp, state.pos, &mut state.conv[gi], &mut state.recurrent[gi]);
                if let Some(tr) = trace.as_deref_mut() {
                    tr.gdn.push(inp);
                }
                gi += 1;
                o
            }
            Mixer::Attn(a) => {
                let o = attention_layer(cfg, a, xn, state.pos, &mut state.k_cache[ai], &mut state.v_cache[ai]);
                ai += 1;
                o
            }
        });
        if let Some(tr) = trace.as_deref_mut() {
            tr.hidden.push(h.clone());
        }
    }
    ops::rms_norm_block(&h, &w.final_norm, eps, &mut xn);
    state.pos += 1;
    Ok(xn)
}

/// One decoder layer on the residual stream `h` (bf16 values, in place): input norm, the mixer
/// (`mixer(normed x)`), residual add, post norm, SwiGLU MLP, residual add. `xn`: scratch of the hidden size.
pub fn decoder_layer(
    cfg: &ModelConfig,
    layer: &LayerWeights,
    h: &mut [f32],
    xn: &mut [f32],
    mixer: impl FnOnce(&[f32]) -> Vec<f32>,
) {
    let eps = cfg.rms_eps as f32;
    ops::rms_norm_block(h, &layer.input_norm, eps, xn);
    let mixed = mixer(xn);
    residual_add(h, &mixed);
    ops::rms_norm_block(h, &layer.post_norm, eps, xn);
    let act = mlp_gate_up(&layer.gate, &layer.up, xn);
    residual_add(h, &layer.down.gemv(&act));
}

/// `h = bf(h + x)`: the decoder layer's bf16 residual add.
pub fn residual_add(h: &mut [f32], x: &[f32]) {
    for (a, b) in h.iter_mut().zip(x) {
        *a = bf(*a + b);
    }
}

/// `bf( bf(silu(g)) * u )`: the SwiGLU epilogue on bf16 gate and up values.
#[inline]
pub fn swiglu(g: f32, u: f32) -> f32 {
    bf(bf(ops::silu(g)) * u)
}

/// SwiGLU with the reference's three roundings (gate and up outputs are bf16).
pub fn mlp_gate_up(gate: &Linear, up: &Linear, x: &[f32]) -> Vec<f32> {
    let g = gate.gemv(x);
    let u = up.gemv(x);
    g.iter().zip(&u).map(|(g, u)| swiglu(*g, *u)).collect()
}

/// A GDN layer's projections of one token's normed input (bf16 values).
#[derive(Clone)]
pub struct GdnInput {
    pub qkv: Vec<f32>,
    pub z: Vec<f32>,
    pub b: Vec<f32>,
    pub a: Vec<f32>,
}

/// The GDN layer's four projections.
pub fn gdn_project(g: &GdnWeights, x: &[f32]) -> GdnInput {
    GdnInput { qkv: g.in_proj_qkv.gemv(x), z: g.in_proj_z.gemv(x), b: g.in_proj_b.gemv(x), a: g.in_proj_a.gemv(x) }
}

/// The GDN layer's state update for one token at `pos`: the conv ring and the fp32 recurrence of every
/// value head; returns the heads' bf16 outputs (the core).
pub fn gdn_recur(
    cfg: &ModelConfig,
    g: &GdnWeights,
    inp: &GdnInput,
    pos: usize,
    ring: &mut [f32],
    s: &mut [f32],
) -> Vec<f32> {
    let mut mixed = vec![0f32; inp.qkv.len()];
    conv_channels(&inp.qkv, &g.conv1d, ring, pos, 0..inp.qkv.len(), &mut mixed);
    let (dk, dv) = (cfg.gdn_k_dim, cfg.gdn_v_dim);
    let mut core = vec![0f32; cfg.gdn_value_dim()];
    for j in 0..cfg.gdn_v_heads {
        let gates = GdnGates { b: inp.b[j], a: inp.a[j], a_log: g.a_log[j], dt_bias: g.dt_bias[j] };
        gdn_head(cfg, j, &mixed, gates, &mut s[j * dk * dv..(j + 1) * dk * dv], &mut core[j * dv..(j + 1) * dv]);
    }
    core
}

/// The rest of one GDN layer for one token after its projections: conv ring, gates, fp32 recurrence,
/// gated norm, out_proj.
pub fn gdn_mix(
    cfg: &ModelConfig,
    g: &GdnWeights,
    inp: &GdnInput,
    pos: usize,
    ring: &mut [f32],
    s: &mut [f32],
) -> Vec<f32> {
    let core = gdn_recur(cfg, g, inp, pos, ring, s);
    g.out_proj.gemv(&gated_norm(cfg, &core, &inp.z, &g.norm))
}

/// `causal_conv1d_update` + SiLU for channels `cs` at position `pos`: the current input goes to ring
/// slot `pos % 4`, then `out[c] = bf(silu(bf(sum_k w[c,k] x[c, pos-3+k])))`.
/// ORDER: taps summed k = 0..3 (oldest input first).
pub fn conv_channels(
    qkv: &[f32],
    w: &[f32],
    ring: &mut [f32],
    pos: usize,
    cs: std::ops::Range<usize>,
    out: &mut [f32],
) {
    for c in cs {
        let r = &mut ring[4 * c..4 * c + 4];
        r[pos % 4] = qkv[c];
        let taps = &w[4 * c..4 * c + 4];
        let acc =
            taps[0] * r[(pos + 1) % 4] + taps[1] * r[(pos + 2) % 4] + taps[2] * r[(pos + 3) % 4] + taps[3] * r[pos % 4];
        out[c] = bf(ops::silu(bf(acc)));
    }
}

/// The per-head gate inputs of one GDN value head.
#[derive(Clone, Copy)]
pub struct GdnGates {
    /// `in_proj_b` output (bf16) and `in_proj_a` output (bf16).
    pub b: f32,
    pub a: f32,
    pub a_log: f32,
    pub dt_bias: f32,
}

/// `torch_recurrent_gated_delta_rule` for value head `j` (fp32 throughout): l2norm of its q/k head
/// (head j / (v_heads / k_heads)), q / sqrt(128), beta = bf(sigmoid(b)), g = -exp(A_log) softplus(a +
/// dt_bias), the decayed delta-rule update of `s` (`[128 K][128 V]`), output rounded to bf16.
pub fn gdn_head(cfg: &ModelConfig, j: usize, mixed: &[f32], gates: GdnGates, s: &mut [f32], out: &mut [f32]) {
    let (dk, dv, hk, hv) = (cfg.gdn_k_dim, cfg.gdn_v_dim, cfg.gdn_k_heads, cfg.gdn_v_heads);
    let key_dim = hk * dk;
    let qk = j / (hv / hk);
    let mut q = mixed[qk * dk..(qk + 1) * dk].to_vec();
    let mut k = mixed[key_dim + qk * dk..key_dim + (qk + 1) * dk].to_vec();
    let v = &mixed[2 * key_dim + j * dv..2 * key_dim + (j + 1) * dv];
    ops::l2norm(&mut q);
    ops::l2norm(&mut k);
    let scale = (dk as f32).sqrt();
    for x in &mut q {
        *x /= scale;
    }
    let beta = bf(ops::sigmoid(gates.b));
    let decay = (-gates.a_log.exp() * ops::softplus(gates.a + gates.dt_bias)).exp();
    for x in s.iter_mut() {
        *x *= decay;
    }
    // ORDER: kv_mem[v] and o[v] sum over k = 0..127 in order.
    let mut kv_mem = vec![0f32; dv];
    for (kk, kval) in k.iter().enumerate() {
        for (m, sv) in kv_mem.iter_mut().zip(&s[kk * dv..(kk + 1) * dv]) {
            *m += sv * kval;
        }
    }
    let delta: Vec<f32> = v.iter().zip(&kv_mem).map(|(vv, m)| (vv - m) * beta).collect();
    let mut o = vec![0f32; dv];
    for (kk, kval) in k.iter().enumerate() {
        let row = &mut s[kk * dv..(kk + 1) * dv];
        for (sv, d) in row.iter_mut().zip(&delta) {
            *sv += kval * d;
        }
        for (ov, sv) in o.iter_mut().zip(row.iter()) {
            *ov += sv * q[kk];
        }
    }
    for (dst, ov) in out.iter_mut().zip(&o) {
        *dst = bf(*ov);
    }
}

/// The gated RMSNorm of every value head (the input transform of `out_proj`).
pub fn gated_norm(cfg: &ModelConfig, core: &[f32], z: &[f32], w: &[f32]) -> Vec<f32> {
    let dv = cfg.gdn_v_dim;
    let mut normed = vec![0f32; core.len()];
    for h in 0..core.len() / dv {
        let r = h * dv..(h + 1) * dv;
        ops::rms_norm_gated(&core[r.clone()], &z[r.clone()], w, cfg.rms_eps as f32, &mut normed[r]);
    }
    normed
}

/// One gated full-attention layer for one token at `pos` (eager attention, GQA, KV append).
pub fn attention_layer(
    cfg: &ModelConfig,
    a: &AttnWeights,
    x: &[f32],
    pos: usize,
    kc: &mut [f32],
    vc: &mut [f32],
) -> Vec<f32> {
    let kvd = cfg.attn_kv_dim();
    let qg = a.q_proj.gemv(x);
    let k = a.k_proj.gemv(x);
    let v = a.v_proj.gemv(x);
    let q = attn_q(cfg, &qg, &a.q_norm, pos);
    kc[pos * kvd..(pos + 1) * kvd].copy_from_slice(&attn_k(cfg, &k, &a.k_norm, pos));
    vc[pos * kvd..(pos + 1) * kvd].copy_from_slice(&v);
    let mut o = attn_core(cfg, &q, kc, vc, pos + 1);
    attn_gate(cfg, &mut o, &qg);
    a.o_proj.gemv(&o)
}

/// One head's (1 + w) RMSNorm then partial RoPE at `pos`: a query's or a key's.
fn norm_rope(cfg: &ModelConfig, x: &[f32], w: &[f32], pos: usize, out: &mut [f32]) {
    let (cos, sin) = ops::rope_tables(pos, cfg.rotary_dim, cfg.rope_theta);
    ops::rms_norm_offset(x, w, cfg.rms_eps as f32, out);
    ops::apply_rope(out, &cos, &sin);
}

/// `heads` heads of `head_dim` each, head h written by `f(h, out)`.
fn per_head(heads: usize, head_dim: usize, mut f: impl FnMut(usize, &mut [f32])) -> Vec<f32> {
    let mut v = vec![0f32; heads * head_dim];
    for (h, out) in v.chunks_mut(head_dim).enumerate() {
        f(h, out);
    }
    v
}

/// The query of head `h`: (1 + w) RMSNorm then partial RoPE. `qg` is the q_proj output, query and gate
/// interleaved per head: rows [512h, 512h+256) query, [512h+256, 512h+512) gate.
pub fn attn_q_head(cfg: &ModelConfig, qg: &[f32], q_norm: &[f32], pos: usize, h: usize, out: &mut [f32]) {
    let d = cfg.head_dim;
    norm_rope(cfg, &qg[2 * d * h..2 * d * h + d], q_norm, pos, out);
}

/// Queries of all heads.
pub fn attn_q(cfg: &ModelConfig, qg: &[f32], q_norm: &[f32], pos: usize) -> Vec<f32> {
    per_head(cfg.n_heads, cfg.head_dim, |h, out| attn_q_head(cfg, qg, q_norm, pos, h, out))
}

/// The key of KV head `h` as the cache stores it: (1 + w) RMSNorm then partial RoPE.
pub fn attn_k_head(cfg: &ModelConfig, k: &[f32], k_norm: &[f32], pos: usize, h: usize, out: &mut [f32]) {
    let d = cfg.head_dim;
    norm_rope(cfg, &k[h * d..(h + 1) * d], k_norm, pos, out);
}

/// Keys of all KV heads.
pub fn attn_k(cfg: &ModelConfig, k: &[f32], k_norm: &[f32], pos: usize) -> Vec<f32> {
    per_head(cfg.n_kv_heads, cfg.head_dim, |h, out| attn_k_head(cfg, k, k_norm, pos, h, out))
}

/// Scores of one query head over positions [p0, p1): `bf(bf(q . k_j) / 16)` (the bf16 matmul output,
/// then an exact power-of-two scale), written to `scores[j - p0]`; returns the partition's softmax
/// statistics (max m, sum of exp(s - m)). ORDER: the dot product as a warp takes it (`dot_warp`), the
/// sum of exponentials as a block of 256 threads, one position each (`sum_lanes`).
pub fn attn_scores_part(
    cfg: &ModelConfig,
    q: &[f32],
    kc: &[f32],
    kvh: usize,
    p0: usize,
    p1: usize,
    scores: &mut [f32],
) -> (f32, f32) {
    let (nkv, d) = (cfg.n_kv_heads, cfg.head_dim);
    let scaling = 1.0 / (d as f32).sqrt();
    for j in p0..p1 {
        scores[j - p0] = bf(bf(ops::dot_warp(q, &kc[(j * nkv + kvh) * d..][..d])) * scaling);
    }
    let s = &scores[..p1 - p0];
    let m = s.iter().fold(f32::NEG_INFINITY, |a, b| a.max(*b));
    let e: Vec<f32> = s.iter().map(|x| (x - m).exp()).collect();
    (m, ops::sum_lanes(&e, ATTN_PART))
}

/// Merges per-partition statistics into the global (M, L). ORDER: partitions in order.
pub fn attn_merge(stats: &[(f32, f32)]) -> (f32, f32) {
    let m = stats.iter().fold(f32::NEG_INFINITY, |a, s| a.max(s.0));
    let mut l = 0f32;
    for (mp, lp) in stats {
        l += lp * (mp - m).exp();
    }
    (m, l)
}

/// One partition's share of the output: `sum_j bf(exp(s_j - M) / L) v_j` over its positions, in order,
/// fp32 (the reference rounds each probability to bf16 before the product with v).
pub fn attn_pv_part(
    cfg: &ModelConfig,
    scores: &[f32],
    (m, l): (f32, f32),
    vc: &[f32],
    kvh: usize,
    p0: usize,
    out: &mut [f32],
) {
    let (nkv, d) = (cfg.n_kv_heads, cfg.head_dim);
    out.fill(0.0);
    for (i, s) in scores.iter().enumerate() {
        let p = bf((s - m).exp() / l);
        let vrow = &vc[((p0 + i) * nkv + kvh) * d..][..d];
        for (o, vv) in out.iter_mut().zip(vrow) {
            *o += p * vv;
        }
    }
}

/// Number of attention partitions covering `n_ctx` positions.
pub fn attn_parts(n_ctx: usize) -> usize {
    n_ctx.div_ceil(ATTN_PART)
}

/// Split-KV eager attention of every query head over cache positions [0, n_ctx): bf16 output before the
/// gate. `kc`/`vc` are `[t][kv_heads][head_dim]`; query head h reads KV head h / (n_heads / n_kv_heads).
pub fn attn_core(cfg: &ModelConfig, q: &[f32], kc: &[f32], vc: &[f32], n_ctx: usize) -> Vec<f32> {
    let (nh, nkv, d) = (cfg.n_heads, cfg.n_kv_heads, cfg.head_dim);
    let parts = attn_parts(n_ctx);
    let mut attn = vec![0f32; nh * d];
    let mut scores = vec![0f32; parts * ATTN_PART];
    let mut partial = vec![0f32; parts * d];
    for h in 0..nh {
        let kvh = h / (nh / nkv);
        let qh = &q[h * d..(h + 1) * d];
        let stats: Vec<(f32, f32)> = (0..parts)
            .map(|p| {
                let (p0, p1) = (p * ATTN_PART, ((p + 1) * ATTN_PART).min(n_ctx));
                attn_scores_part(cfg, qh, kc, kvh, p0, p1, &mut scores[p0..])
            })
            .collect();
        let ml = attn_merge(&stats);
        for p in 0..parts {
            let (p0, p1) = (p * ATTN_PART, ((p + 1) * ATTN_PART).min(n_ctx));
            attn_pv_part(cfg, &scores[p0..p1], ml, vc, kvh, p0, &mut partial[p * d..(p + 1) * d]);
        }
        attn_reduce(&partial, d, &mut attn[h * d..(h + 1) * d]);
    }
    attn
}

/// `o = bf(sum_p partial_p)`. ORDER: partitions in order.
pub fn attn_reduce(partial: &[f32], d: usize, out: &mut [f32]) {
    out.fill(0.0);
    for part in partial.chunks_exact(d) {
        for (o, x) in out.iter_mut().zip(part) {
            *o += x;
        }
    }
    for o in out.iter_mut() {
        *o = bf(*o);
    }
}

/// The output gate of head `h`: `bf(o * bf(sigmoid(gate)))` with the gate half of its q_proj rows.
pub fn attn_gate_head(cfg: &ModelConfig, o: &mut [f32], qg: &[f32], h: usize) {
    let d = cfg.head_dim;
    let gate = &qg[2 * d * h + d..2 * d * (h + 1)];
    for (ov, gv) in o.iter_mut().zip(gate) {
        *ov = bf(*ov * bf(ops::sigmoid(*gv)));
    }
}

/// The output gate of every head.
pub fn attn_gate(cfg: &ModelConfig, o: &mut [f32], qg: &[f32]) {
    let d = cfg.head_dim;
    for h in 0..cfg.n_heads {
        attn_gate_head(cfg, &mut o[h * d..(h + 1) * d], qg, h);
    }
}
/// Decodes `steps` tokens after `prompt` (greedy, or sampled with `params`): the draw of the step at
/// position p (the one whose logits are sampled) is `uniform_at(seed, p)`, as the GPU's sampler takes it.
pub fn generate(
    w: &Weights,
    prompt: &[u32],
    steps: usize,
    params: &super::sample::SamplingParams,
    seed: u64,
) -> Result<Vec<u32>> {
    params.check()?;
    if prompt.is_empty() {
        crate::bail!("generate: --prompt needs at least one token id");
    }
    let positions = prompt.len().saturating_add(steps);
    if positions > super::config::MAX_POSITIONS {
        crate::bail!(
            "generate: {} prompt tokens and {steps} steps pass the model's {} positions",
            prompt.len(),
            super::config::MAX_POSITIONS
        );
    }
    let mut state = State::new(&w.cfg, positions);
    let mut logits = Vec::new();
    for &t in prompt {
        logits = step(w, &mut state, t, None)?;
    }
    let mut out = Vec::with_capacity(steps);
    for i in 0..steps {
        let pos = (prompt.len() - 1 + i) as u64;
        let next = super::sample::sample(&logits, params, super::sample::uniform_at(seed, pos))?;
        out.push(next);
        if i + 1 < steps {
            logits = step(w, &mut state, next, None)?;
        }
    }
    Ok(out)
}
