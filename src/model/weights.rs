//! Typed views of a validated checkpoint's tensors, as the CPU reference and the program interpreter use
//! them. Owns: `Weights`. Refuses: copying fp8 or bf16 matrices (they stay in the mapped file); small
//! vectors (norms, gates, conv taps) are widened to f32, exactly.

use std::borrow::Cow;

use super::checkpoint::Checkpoint;
use super::config::{LayerKind, ModelConfig};
use super::ops::{Activations, Linear, LinearW, SumOrder};

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

/// The linear `module` (`module.weight`, plus `module.weight_scale_inv` when fp8) as a view.
pub fn linear<'a>(ck: &'a Checkpoint, module: &str) -> Linear<'a> {
    let name = format!("{module}.weight");
    let shape = ck.shape(&name);
    let (rows, cols) = (shape[0], shape[1]);
    let w = if ck.dtype(&name) == super::tensors::Dt::F8E4M3 {
        LinearW::Fp8 { w: ck.bytes(&name), scales: ck.f32_vec(&format!("{module}.weight_scale_inv")) }
    } else {
        LinearW::Bf16(ck.bf16(&name))
    };
    Linear { rows, cols, w, order: SumOrder::Canonical, act: Activations::Bf16 }
}

impl<'a> Weights<'a> {
    /// Views of a validated checkpoint (small vectors are widened to f32, exactly).
    pub fn from_checkpoint(ck: &'a Checkpoint) -> Weights<'a> {
        Self::with_order(ck, SumOrder::Canonical)
    }

    /// As `from_checkpoint`, every linear summed in `order` (the noise twin uses `Reversed`).
    pub fn with_order(ck: &'a Checkpoint, order: SumOrder) -> Weights<'a> {
        Self::with_numerics(ck, order, Activations::Bf16)
    }

    /// As `with_order`, the fp8 linears' activations as `act` (`Fp8Dynamic`: fast mode, W8A8). The MTP
    /// drafter's weights (`mtp::MtpWeights`) stay exact mode whatever this says.
    pub fn with_numerics(ck: &'a Checkpoint, order: SumOrder, act: Activations) -> Weights<'a> {
        let linear = |module: &str| Linear { order, act, ..linear(ck, module) };
        let cfg = ck.config.clone();
        let p = cfg.prefix.clone();
        let layers = cfg
            .layer_kinds
            .iter()
            .enumerate()
            .map(|(i, kind)| layer(ck, &format!("{p}layers.{i}."), *kind, &linear))
            .collect();
        Weights {
            embed: ck.bf16(&format!("{p}embed_tokens.weight")),
            final_norm: ck.f32_vec(&format!("{p}norm.weight")),
            lm_head: linear("lm_head"),
            layers,
            cfg,
        }
    }
}

/// The decoder layer whose tensors start with `lp` (e.g. `model.language_model.layers.3.`, or the MTP
/// head's `mtp.layers.0.`), its mixer of `kind`, its linears made by `linear`.
pub fn layer<'a>(
    ck: &'a Checkpoint,
    lp: &str,
    kind: LayerKind,
    linear: &impl Fn(&str) -> Linear<'a>,
) -> LayerWeights<'a> {
    let mixer = match kind {
        LayerKind::Gdn => {
            let la = format!("{lp}linear_attn.");
            Mixer::Gdn(GdnWeights {
                in_proj_qkv: linear(&format!("{la}in_proj_qkv")),
                in_proj_z: linear(&format!("{la}in_proj_z")),
                in_proj_b: linear(&format!("{la}in_proj_b")),
                in_proj_a: linear(&format!("{la}in_proj_a")),
                conv1d: ck.f32_vec(&format!("{la}conv1d.weight")),
                a_log: ck.f32_vec(&format!("{la}A_log")),
                dt_bias: ck.f32_vec(&format!("{la}dt_bias")),
                norm: ck.f32_vec(&format!("{la}norm.weight")),
                out_proj: linear(&format!("{la}out_proj")),
            })
        }
        LayerKind::Attention => {
            let sa = format!("{lp}self_attn.");
            Mixer::Attn(AttnWeights {
                q_proj: linear(&format!("{sa}q_proj")),
                k_proj: linear(&format!("{sa}k_proj")),
                v_proj: linear(&format!("{sa}v_proj")),
                o_proj: linear(&format!("{sa}o_proj")),
                q_norm: ck.f32_vec(&format!("{sa}q_norm.weight")),
                k_norm: ck.f32_vec(&format!("{sa}k_norm.weight")),
            })
        }
    };
    LayerWeights {
        input_norm: ck.f32_vec(&format!("{lp}input_layernorm.weight")),
        post_norm: ck.f32_vec(&format!("{lp}post_attention_layernorm.weight")),
        mixer,
        gate: linear(&format!("{lp}mlp.gate_proj")),
        up: linear(&format!("{lp}mlp.up_proj")),
        down: linear(&format!("{lp}mlp.down_proj")),
    }
}
