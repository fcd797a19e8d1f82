//! The CPU reference forward: one token at a time, exactly the oracle's decode path
//! (`causal_conv1d_update` + `torch_recurrent_gated_delta_rule` for GDN layers, eager attention with a
//! KV cache), every rounding point reproduced (see `ops.rs`).
//!
//! Owns: `Weights` (typed views of a validated checkpoint), `State` (conv ring, fp32 recurrent state,
//! KV cache, position) and `Model::step`. Refuses: out-of-range token ids and context overflow (errors).

use std::borrow::Cow;

use super::checkpoint::Checkpoint;
use super::config::{LayerKind, ModelConfig};
use super::numerics::{bf, bf16_to_f32};
use super::ops::{self, Linear, LinearW};
use crate::bail;
use crate::error::Result;

pub struct GdnWeights<'a> {
    pub in_proj_qkv: Linear<'a>,
    pub in_proj_z: Linear<'a>,
    pub in_proj_b: Linear<'a>,
    pub in_proj_a: Linear<'a>,
    /// `[conv_dim, 4]`, tap 3 multiplies the current token.
    pub conv1d: Vec<f32>,
    pub a_log: Vec<f32>,
    pub dt_bias: Vec<f32>,
    pub norm: Vec<f32>,
    pub out_proj: Linear<'a>,
}

pub struct AttnWeights<'a> {
    pub q_proj: Linear<'a>,
    pub k_proj: Linear<'a>,
    pub v_proj: Linear<'a>,
    pub o_proj: Linear<'a>,
    pub q_norm: Vec<f32>,
    pub k_norm: Vec<f32>,
}

pub enum Mixer<'a> {
    Gdn(GdnWeights<'a>),
    Attn(AttnWeights<'a>),
}

pub struct LayerWeights<'a> {
    pub input_norm: Vec<f32>,
    pub post_norm: Vec<f32>,
    pub mixer: Mixer<'a>,
    pub gate: Linear<'a>,
    pub up: Linear<'a>,
    pub down: Linear<'a>,
}

pub struct Weights<'a> {
    pub cfg: ModelConfig,
    pub embed: Cow<'a, [u16]>,
    pub layers: Vec<LayerWeights<'a>>,
    pub final_norm: Vec<f32>,
    pub lm_head: Linear<'a>,
}

fn linear<'a>(ck: &'a Checkpoint, module: &str) -> Linear<'a> {
    let name = format!("{module}.weight");
    let shape = ck.shape(&name);
    let (rows, cols) = (shape[0], shape[1]);
    let w = if ck.dtype(&name) == super::tensors::Dt::F8E4M3 {
        LinearW::Fp8 { w: ck.bytes(&name), scales: ck.f32_vec(&format!("{module}.weight_scale_inv")) }
    } else {
        LinearW::Bf16(ck.bf16(&name))
    };
    Linear { rows, cols, w }
}

impl<'a> Weights<'a> {
    /// Views of a validated checkpoint (small vectors are widened to f32, exactly).
    pub fn from_checkpoint(ck: &'a Checkpoint) -> Weights<'a> {
        let cfg = ck.config.clone();
        let p = cfg.prefix.clone();
        let layers = cfg
            .layer_kinds
            .iter()
            .enumerate()
            .map(|(i, kind)| {
                let lp = format!("{p}layers.{i}.");
                let mixer = match kind {
                    LayerKind::Gdn => {
                        let la = format!("{lp}linear_attn.");
                        Mixer::Gdn(GdnWeights {
                            in_proj_qkv: linear(ck, &format!("{la}in_proj_qkv")),
                            in_proj_z: linear(ck, &format!("{la}in_proj_z")),
                            in_proj_b: linear(ck, &format!("{la}in_proj_b")),
                            in_proj_a: linear(ck, &format!("{la}in_proj_a")),
                            conv1d: ck.f32_vec(&format!("{la}conv1d.weight")),
                            a_log: ck.f32_vec(&format!("{la}A_log")),
                            dt_bias: ck.f32_vec(&format!("{la}dt_bias")),
                            norm: ck.f32_vec(&format!("{la}norm.weight")),
                            out_proj: linear(ck, &format!("{la}out_proj")),
                        })
                    }
                    LayerKind::Attention => {
                        let sa = format!("{lp}self_attn.");
                        Mixer::Attn(AttnWeights {
                            q_proj: linear(ck, &format!("{sa}q_proj")),
                            k_proj: linear(ck, &format!("{sa}k_proj")),
                            v_proj: linear(ck, &format!("{sa}v_proj")),
                            o_proj: linear(ck, &format!("{sa}o_proj")),
                            q_norm: ck.f32_vec(&format!("{sa}q_norm.weight")),
                            k_norm: ck.f32_vec(&format!("{sa}k_norm.weight")),
                        })
                    }
                };
                LayerWeights {
                    input_norm: ck.f32_vec(&format!("{lp}input_layernorm.weight")),
                    post_norm: ck.f32_vec(&format!("{lp}post_attention_layernorm.weight")),
                    mixer,
                    gate: linear(ck, &format!("{lp}mlp.gate_proj")),
                    up: linear(ck, &format!("{lp}mlp.up_proj")),
                    down: linear(ck, &format!("{lp}mlp.down_proj")),
                }
            })
            .collect();
        Weights {
            embed: ck.bf16(&format!("{p}embed_tokens.weight")),
            final_norm: ck.f32_vec(&format!("{p}norm.weight")),
            lm_head: linear(ck, "lm_head"),
            layers,
            cfg,
        }
    }
}

/// Per-sequence state. Layouts follow the oracle's cache so goldens compare directly.
#[derive(Clone)]
pub struct State {
    /// Next position to be written (= tokens consumed so far).
    pub pos: usize,
    /// Per GDN layer: `[conv_dim, 3]` past pre-activation qkv inputs (bf16 values), oldest first.
    pub conv: Vec<Vec<f32>>,
    /// Per GDN layer: `[v_heads, 128 (K), 128 (V)]` fp32 (HF layout).
    pub recurrent: Vec<Vec<f32>>,
    /// Per attention layer: keys `[t][kv_heads][256]` post-norm post-RoPE, bf16 values.
    pub k_cache: Vec<Vec<f32>>,
    /// Per attention layer: values `[t][kv_heads][256]`.
    pub v_cache: Vec<Vec<f32>>,
    pub max_context: usize,
}

impl State {
    pub fn new(cfg: &ModelConfig, max_context: usize) -> State {
        let g = cfg.n_gdn_layers();
        let a = cfg.n_attn_layers();
        State {
            pos: 0,
            conv: vec![vec![0.0; cfg.gdn_conv_dim() * (cfg.conv_kernel - 1)]; g],
            recurrent: vec![vec![0.0; cfg.gdn_v_heads * cfg.gdn_k_dim * cfg.gdn_v_dim]; g],
            k_cache: vec![Vec::new(); a],
            v_cache: vec![Vec::new(); a],
            max_context,
        }
    }
}

/// What a step can optionally record (for diffs and goldens).
#[derive(Default)]
pub struct Trace {
    /// Residual stream after each layer (bf16 values).
    pub hidden: Vec<Vec<f32>>,
}

/// Runs one token through the model, advancing `state`; returns the bf16 logits (as f32).
pub fn step(w: &Weights, state: &mut State, token: u32, trace: Option<&mut Trace>) -> Result<Vec<f32>> {
    let cfg = &w.cfg;
    if token as usize >= cfg.vocab {
        bail!("token id {token} is out of range (vocabulary {})", cfg.vocab);
    }
    if state.pos >= state.max_context {
        bail!("context overflow: position {} >= max context {}", state.pos, state.max_context);
    }
    let eps = cfg.rms_eps as f32;
    let hd = cfg.hidden;
    let t = token as usize;
    let mut h: Vec<f32> = w.embed[t * hd..(t + 1) * hd].iter().map(|b| bf16_to_f32(*b)).collect();
    let mut xn = vec![0f32; hd];
    let (mut gi, mut ai) = (0, 0);
    let mut trace = trace;
    for layer in &w.layers {
        ops::rms_norm_offset(&h, &layer.input_norm, eps, &mut xn);
        let mixed = match &layer.mixer {
            Mixer::Gdn(g) => {
                let o = gdn_layer(cfg, g, &xn, &mut state.conv[gi], &mut state.recurrent[gi]);
                gi += 1;
                o
            }
            Mixer::Attn(a) => {
                let o = attention_layer(cfg, a, &xn, state.pos, &mut state.k_cache[ai], &mut state.v_cache[ai]);
                ai += 1;
                o
            }
        };
        residual_add(&mut h, &mixed);
        ops::rms_norm_offset(&h, &layer.post_norm, eps, &mut xn);
        let act = mlp_gate_up(&layer.gate, &layer.up, &xn);
        residual_add(&mut h, &layer.down.gemv(&act));
        if let Some(tr) = trace.as_deref_mut() {
            tr.hidden.push(h.clone());
        }
    }
    ops::rms_norm_offset(&h, &w.final_norm, eps, &mut xn);
    let logits = w.lm_head.gemv(&xn);
    state.pos += 1;
    Ok(logits)
}

/// `h = bf(h + x)`: the decoder layer's bf16 residual add.
pub fn residual_add(h: &mut [f32], x: &[f32]) {
    for (a, b) in h.iter_mut().zip(x) {
        *a = bf(*a + b);
    }
}

/// `bf( bf(silu(bf(gate x))) * bf(up x) )`: SwiGLU with the reference's three roundings.
pub fn mlp_gate_up(gate: &Linear, up: &Linear, x: &[f32]) -> Vec<f32> {
    let g = gate.gemv(x);
    let u = up.gemv(x);
    g.iter().zip(&u).map(|(g, u)| bf(bf(ops::silu(*g)) * u)).collect()
}

/// One GDN layer for one token: projections, conv ring, gates, fp32 recurrence, gated norm, out_proj.
pub fn gdn_layer(cfg: &ModelConfig, g: &GdnWeights, x: &[f32], conv: &mut [f32], s: &mut [f32]) -> Vec<f32> {
    let qkv = g.in_proj_qkv.gemv(x);
    let z = g.in_proj_z.gemv(x);
    let b = g.in_proj_b.gemv(x);
    let a = g.in_proj_a.gemv(x);
    let mixed = conv_step(&qkv, &g.conv1d, conv);
    let core = gdn_core(cfg, &mixed, &b, &a, &g.a_log, &g.dt_bias, s);
    let dv = cfg.gdn_v_dim;
    let mut normed = vec![0f32; core.len()];
    for hh in 0..cfg.gdn_v_heads {
        let r = hh * dv..(hh + 1) * dv;
        ops::rms_norm_gated(&core[r.clone()], &z[r.clone()], &g.norm, cfg.rms_eps as f32, &mut normed[r]);
    }
    g.out_proj.gemv(&normed)
}

/// `causal_conv1d_update` + SiLU: `bf(silu(bf(sum_k w[c,k] x[c, t-3+k])))`, conv state shifted.
/// ORDER: taps summed k = 0..3 (oldest input first).
pub fn conv_step(qkv: &[f32], w: &[f32], conv: &mut [f32]) -> Vec<f32> {
    let mut out = vec![0f32; qkv.len()];
    for c in 0..qkv.len() {
        let st = &mut conv[3 * c..3 * c + 3];
        let taps = &w[4 * c..4 * c + 4];
        let acc = taps[0] * st[0] + taps[1] * st[1] + taps[2] * st[2] + taps[3] * qkv[c];
        out[c] = bf(ops::silu(bf(acc)));
        st.copy_within(1..3, 0);
        st[2] = qkv[c];
    }
    out
}

/// `torch_recurrent_gated_delta_rule` for one token (fp32 throughout), output rounded to bf16.
pub fn gdn_core(
    cfg: &ModelConfig,
    mixed: &[f32],
    b: &[f32],
    a: &[f32],
    a_log: &[f32],
    dt_bias: &[f32],
    s: &mut [f32],
) -> Vec<f32> {
    let (dk, dv, hk, hv) = (cfg.gdn_k_dim, cfg.gdn_v_dim, cfg.gdn_k_heads, cfg.gdn_v_heads);
    let key_dim = hk * dk;
    let mut q = mixed[..key_dim].to_vec();
    let mut k = mixed[key_dim..2 * key_dim].to_vec();
    let v = &mixed[2 * key_dim..];
    let scale = (dk as f32).sqrt();
    for h in 0..hk {
        ops::l2norm(&mut q[h * dk..(h + 1) * dk]);
        ops::l2norm(&mut k[h * dk..(h + 1) * dk]);
        for x in &mut q[h * dk..(h + 1) * dk] {
            *x /= scale;
        }
    }
    let mut out = vec![0f32; hv * dv];
    for j in 0..hv {
        let qk = j / (hv / hk); // value head j reads q/k head j / 3
        let (qh, kh) = (&q[qk * dk..(qk + 1) * dk], &k[qk * dk..(qk + 1) * dk]);
        let vh = &v[j * dv..(j + 1) * dv];
        let beta = bf(ops::sigmoid(b[j]));
        let gate = -a_log[j].exp() * ops::softplus(a[j] + dt_bias[j]);
        let decay = gate.exp();
        let st = &mut s[j * dk * dv..(j + 1) * dk * dv];
        for x in st.iter_mut() {
            *x *= decay;
        }
        // ORDER: kv_mem[v] and o[v] sum over k = 0..127 in order.
        let mut kv_mem = vec![0f32; dv];
        for (kk, kval) in kh.iter().enumerate() {
            for (m, sv) in kv_mem.iter_mut().zip(&st[kk * dv..(kk + 1) * dv]) {
                *m += sv * kval;
            }
        }
        let delta: Vec<f32> = vh.iter().zip(&kv_mem).map(|(vv, m)| (vv - m) * beta).collect();
        let mut o = vec![0f32; dv];
        for (kk, kval) in kh.iter().enumerate() {
            let row = &mut st[kk * dv..(kk + 1) * dv];
            for (sv, d) in row.iter_mut().zip(&delta) {
                *sv += kval * d;
            }
            for (ov, sv) in o.iter_mut().zip(row.iter()) {
                *ov += sv * qh[kk];
            }
        }
        for (dst, ov) in out[j * dv..(j + 1) * dv].iter_mut().zip(&o) {
            *dst = bf(*ov);
        }
    }
    out
}

/// One gated full-attention layer for one token at `pos` (eager attention, GQA, KV append).
pub fn attention_layer(
    cfg: &ModelConfig,
    a: &AttnWeights,
    x: &[f32],
    pos: usize,
    kc: &mut Vec<f32>,
    vc: &mut Vec<f32>,
) -> Vec<f32> {
    let qg = a.q_proj.gemv(x);
    let k = a.k_proj.gemv(x);
    let v = a.v_proj.gemv(x);
    let q = attn_q(cfg, &qg, &a.q_norm, pos);
    kc.extend_from_slice(&attn_k(cfg, &k, &a.k_norm, pos));
    vc.extend_from_slice(&v);
    let mut o = attn_core(cfg, &q, kc, vc, pos + 1);
    attn_gate(cfg, &mut o, &qg);
    a.o_proj.gemv(&o)
}

/// Queries of all heads: per-head (1 + w) RMSNorm then partial RoPE. `qg` is the q_proj output, with
/// query and gate interleaved per head: rows [512h, 512h+256) query, [512h+256, 512h+512) gate.
pub fn attn_q(cfg: &ModelConfig, qg: &[f32], q_norm: &[f32], pos: usize) -> Vec<f32> {
    let (nh, d) = (cfg.n_heads, cfg.head_dim);
    let (cos, sin) = ops::rope_tables(pos, cfg.rotary_dim, cfg.rope_theta);
    let mut q = vec![0f32; nh * d];
    for h in 0..nh {
        ops::rms_norm_offset(&qg[2 * d * h..2 * d * h + d], q_norm, cfg.rms_eps as f32, &mut q[h * d..(h + 1) * d]);
        ops::apply_rope(&mut q[h * d..(h + 1) * d], &cos, &sin);
    }
    q
}

/// Keys of all KV heads as the cache stores them: per-head (1 + w) RMSNorm then partial RoPE.
pub fn attn_k(cfg: &ModelConfig, k: &[f32], k_norm: &[f32], pos: usize) -> Vec<f32> {
    let (nkv, d) = (cfg.n_kv_heads, cfg.head_dim);
    let (cos, sin) = ops::rope_tables(pos, cfg.rotary_dim, cfg.rope_theta);
    let mut kn = vec![0f32; nkv * d];
    for h in 0..nkv {
        ops::rms_norm_offset(&k[h * d..(h + 1) * d], k_norm, cfg.rms_eps as f32, &mut kn[h * d..(h + 1) * d]);
        ops::apply_rope(&mut kn[h * d..(h + 1) * d], &cos, &sin);
    }
    kn
}

/// Eager attention of every query head over cache positions [0, n_ctx): bf16 output before the gate.
/// `kc`/`vc` are `[t][kv_heads][head_dim]`; query head h reads KV head h / (n_heads / n_kv_heads).
pub fn attn_core(cfg: &ModelConfig, q: &[f32], kc: &[f32], vc: &[f32], n_ctx: usize) -> Vec<f32> {
    let (nh, nkv, d) = (cfg.n_heads, cfg.n_kv_heads, cfg.head_dim);
    let scaling = 1.0 / (d as f32).sqrt();
    let mut attn = vec![0f32; nh * d];
    for h in 0..nh {
        let kvh = h / (nh / nkv);
        let qh = &q[h * d..(h + 1) * d];
        // scores = bf(q . k) * 1/16 (bf16 matmul output, then an exact power-of-two scale).
        let scores: Vec<f32> =
            (0..n_ctx).map(|j| bf(bf(ops::dot(qh, &kc[(j * nkv + kvh) * d..][..d])) * scaling)).collect();
        // softmax in fp32 (ORDER: max and sum in position order), probabilities rounded to bf16.
        let m = scores.iter().fold(f32::NEG_INFINITY, |a, b| a.max(*b));
        let e: Vec<f32> = scores.iter().map(|s| (s - m).exp()).collect();
        let mut sum = 0f32;
        for x in &e {
            sum += x;
        }
        // o = bf(sum_j p_j v_j), ORDER: positions in order.
        let out = &mut attn[h * d..(h + 1) * d];
        for (j, x) in e.iter().enumerate() {
            let pj = bf(x / sum);
            let vrow = &vc[(j * nkv + kvh) * d..][..d];
            for (o, vv) in out.iter_mut().zip(vrow) {
                *o += pj * vv;
            }
        }
        for o in out.iter_mut() {
            *o = bf(*o);
        }
    }
    attn
}

/// The output gate: `bf(o * bf(sigmoid(gate)))` with the gate half of each head's q_proj rows.
pub fn attn_gate(cfg: &ModelConfig, o: &mut [f32], qg: &[f32]) {
    let d = cfg.head_dim;
    for h in 0..cfg.n_heads {
        let gate = &qg[2 * d * h + d..2 * d * (h + 1)];
        for (ov, gv) in o[h * d..(h + 1) * d].iter_mut().zip(gate) {
            *ov = bf(*ov * bf(ops::sigmoid(*gv)));
        }
    }
}
