//! The checkpoint contract: every tensor a Qwen3.5 text checkpoint (plus its MTP head) holds, with
//! its dtype and shape, derived from the config. The synthetic generator writes exactly this list and
//! the loader validates against exactly this list, so the two cannot drift apart.
//!
//! Owns: tensor names (spec 2.2/2.3), which linears are fp8 with `weight_scale_inv`, and the sharding
//! plan of a synthetic release. Refuses: vision tensors (`model.visual.*` are tolerated on load and
//! ignored, never expected).

use super::config::{LayerKind, ModelConfig};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dt {
    Bf16,
    F32,
    F8E4M3,
}

impl Dt {
    pub fn bytes(self) -> usize {
        match self {
            Dt::Bf16 => 2,
            Dt::F32 => 4,
            Dt::F8E4M3 => 1,
        }
    }
    pub fn st(self) -> safetensors::Dtype {
        match self {
            Dt::Bf16 => safetensors::Dtype::BF16,
            Dt::F32 => safetensors::Dtype::F32,
            Dt::F8E4M3 => safetensors::Dtype::F8_E4M3,
        }
    }
    pub fn from_st(d: safetensors::Dtype) -> Option<Dt> {
        match d {
            safetensors::Dtype::BF16 => Some(Dt::Bf16),
            safetensors::Dtype::F32 => Some(Dt::F32),
            safetensors::Dtype::F8_E4M3 => Some(Dt::F8E4M3),
            _ => None,
        }
    }
}

/// What a tensor is, which decides how the generator fills it and how the loader reads it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Role {
    /// A linear weight `[out, in]`; `fp8` says whether it is e4m3 with a `weight_scale_inv` beside it.
    /// `gain` scales the synthetic std: std = gain / sqrt(in).
    Linear {
        fp8: bool,
        gain: f32,
    },
    /// The `[ceil(out/128), ceil(in/128)]` dequant multipliers of the fp8 linear named in the spec.
    Scale,
    /// A zero-centred norm weight used as (1 + w).
    NormOffset,
    /// A plain norm weight used as w (the GDN gated norm).
    NormPlain,
    Embedding,
    LmHead,
    Conv1d,
    ALog,
    DtBias,
}

#[derive(Debug, Clone, PartialEq)]
pub struct TensorSpec {
    pub name: String,
    /// The dtype the generator writes (the loader also accepts `alt_dtype`).
    pub dtype: Dt,
    pub alt_dtype: Option<Dt>,
    pub shape: Vec<usize>,
    pub role: Role,
    /// Which shard group it belongs to: 0 = embedding, 1 + layer index, n_layers + 1 = head and MTP.
    pub group: usize,
}

impl TensorSpec {
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
    pub fn bytes(&self) -> usize {
        self.numel() * self.dtype.bytes()
    }
}

/// Synthetic gains (see `synth.rs` for why): projections that read a normalised vector keep unit
/// variance; projections that write into the residual stream are scaled down so 64 layers of
/// additions stay realistic.
pub const GAIN_IN: f32 = 1.0;
pub const GAIN_OUT: f32 = 0.5;

struct Builder<'a> {
    cfg: &'a ModelConfig,
    out: Vec<TensorSpec>,
    group: usize,
}

impl Builder<'_> {
    fn push(&mut self, name: String, dtype: Dt, shape: Vec<usize>, role: Role) {
        // Small vectors may be stored in f32 by other writers; scales are bf16 or f32 (spec 2.3).
        let alt = match (dtype, role) {
            (Dt::Bf16, Role::Scale | Role::ALog | Role::DtBias | Role::NormOffset | Role::NormPlain) => Some(Dt::F32),
            _ => None,
        };
        self.out.push(TensorSpec { name, dtype, alt_dtype: alt, shape, role, group: self.group });
    }
    fn linear(&mut self, module: String, out: usize, inp: usize, gain: f32) {
        let fp8 = self.cfg.is_fp8(&module);
        if fp8 {
            self.push(format!("{module}.weight"), Dt::F8E4M3, vec![out, inp], Role::Linear { fp8, gain });
            self.push(
                format!("{module}.weight_scale_inv"),
                Dt::Bf16,
                vec![out.div_ceil(128), inp.div_ceil(128)],
                Role::Scale,
            );
        } else {
            self.push(format!("{module}.weight"), Dt::Bf16, vec![out, inp], Role::Linear { fp8, gain });
        }
    }
    fn norm(&mut self, name: String, n: usize) {
        self.push(name, Dt::Bf16, vec![n], Role::NormOffset);
    }
    fn attention(&mut self, p: &str) {
        let c = self.cfg;
        self.linear(format!("{p}self_attn.q_proj"), 2 * c.attn_q_dim(), c.hidden, GAIN_IN);
        self.linear(format!("{p}self_attn.k_proj"), c.attn_kv_dim(), c.hidden, GAIN_IN);
        self.linear(format!("{p}self_attn.v_proj"), c.attn_kv_dim(), c.hidden, GAIN_IN);
        self.linear(format!("{p}self_attn.o_proj"), c.hidden, c.attn_q_dim(), GAIN_OUT);
        self.norm(format!("{p}self_attn.q_norm.weight"), c.head_dim);
        self.norm(format!("{p}self_attn.k_norm.weight"), c.head_dim);
    }
    fn mlp_and_norms(&mut self, p: &str) {
        let c = self.cfg;
        self.norm(format!("{p}input_layernorm.weight"), c.hidden);
        self.norm(format!("{p}post_attention_layernorm.weight"), c.hidden);
        self.linear(format!("{p}mlp.gate_proj"), c.intermediate, c.hidden, GAIN_IN);
        self.linear(format!("{p}mlp.up_proj"), c.intermediate, c.hidden, GAIN_IN);
        self.linear(format!("{p}mlp.down_proj"), c.hidden, c.intermediate, GAIN_OUT);
    }
    fn gdn(&mut self, p: &str) {
        let c = self.cfg;
        let la = format!("{p}linear_attn.");
        self.linear(format!("{la}in_proj_qkv"), c.gdn_conv_dim(), c.hidden, GAIN_IN);
        self.linear(format!("{la}in_proj_z"), c.gdn_value_dim(), c.hidden, GAIN_IN);
        self.linear(format!("{la}in_proj_b"), c.gdn_v_heads, c.hidden, GAIN_IN);
        self.linear(format!("{la}in_proj_a"), c.gdn_v_heads, c.hidden, GAIN_IN);
        self.push(format!("{la}conv1d.weight"), Dt::Bf16, vec![c.gdn_conv_dim(), 1, c.conv_kernel], Role::Conv1d);
        self.push(format!("{la}A_log"), Dt::Bf16, vec![c.gdn_v_heads], Role::ALog);
        self.push(format!("{la}dt_bias"), Dt::Bf16, vec![c.gdn_v_heads], Role::DtBias);
        self.push(format!("{la}norm.weight"), Dt::Bf16, vec![c.gdn_v_dim], Role::NormPlain);
        self.linear(format!("{la}out_proj"), c.hidden, c.gdn_value_dim(), GAIN_OUT);
    }
}

/// Every tensor of the text model and MTP head, in a stable order (embedding, layers, final norm and
/// head, MTP).
pub fn expected_tensors(cfg: &ModelConfig) -> Vec<TensorSpec> {
    let mut b = Builder { cfg, out: Vec::new(), group: 0 };
    let p = &cfg.prefix;
    b.push(format!("{p}embed_tokens.weight"), Dt::Bf16, vec![cfg.vocab, cfg.hidden], Role::Embedding);
    for (i, kind) in cfg.layer_kinds.iter().enumerate() {
        b.group = 1 + i;
        let lp = format!("{p}layers.{i}.");
        b.mlp_and_norms(&lp);
        match kind {
            LayerKind::Gdn => b.gdn(&lp),
            LayerKind::Attention => b.attention(&lp),
        }
    }
    b.group = cfg.n_layers + 1;
    b.norm(format!("{p}norm.weight"), cfg.hidden);
    b.push("lm_head.weight".into(), Dt::Bf16, vec![cfg.vocab, cfg.hidden], Role::LmHead);
    for m in 0..cfg.mtp_layers {
        b.group = cfg.n_layers + 1;
        if m == 0 {
            b.linear("mtp.fc".into(), cfg.hidden, 2 * cfg.hidden, GAIN_IN);
            b.norm("mtp.pre_fc_norm_embedding.weight".into(), cfg.hidden);
            b.norm("mtp.pre_fc_norm_hidden.weight".into(), cfg.hidden);
            b.norm("mtp.norm.weight".into(), cfg.hidden);
        }
        let lp = format!("mtp.layers.{m}.");
        b.mlp_and_norms(&lp);
        b.attention(&lp);
    }
    b.out
}

/// True for tensors a real release carries that the text engine ignores (the vision tower).
pub fn is_ignored(name: &str) -> bool {
    name.starts_with("model.visual.") || name.starts_with("visual.")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_27b_has_the_real_tensor_counts_and_bytes() {
        let cfg = ModelConfig::preset("qwen3.5-27b").unwrap();
        let t = expected_tensors(&cfg);
        let fp8 = t.iter().filter(|s| s.dtype == Dt::F8E4M3).count();
        // 851 text tensors + 15 MTP (spec 2.2), plus one scale per fp8 linear.
        assert_eq!(t.len() - fp8, 851 + 15);
        // 48 GDN x 3 + 16 attn x 4 + 64 x 3 MLP + MTP (4 attn + 3 MLP) fp8 linears.
        assert_eq!(fp8, 48 * 3 + 16 * 4 + 64 * 3 + 7);
        let qkv = t
            .iter()
            .find(|s| s.name == "model.language_model.layers.0.linear_attn.in_proj_qkv.weight_scale_inv")
            .unwrap();
        assert_eq!(qkv.shape, vec![80, 40]);
        // The streamed bytes of one decode step: fp8 linears of the trunk, bf16 small projections,
        // conv, norms and the lm_head (seed Part 1: 24.3 GB fp8 + 2.6 GB bf16 = 26.9 GB).
        let step: usize =
            t.iter().filter(|s| !s.name.starts_with("mtp.") && s.role != Role::Embedding).map(|s| s.bytes()).sum();
        assert!((26.8e9..27.0e9).contains(&(step as f64)), "{step}");
    }
}
