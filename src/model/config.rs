//! The model's shape: a serde mirror of Hugging Face's `config.json`, resolved into one `ModelConfig`.
//!
//! Owns: parsing a real `config.json` (the multimodal `Qwen3_5ForConditionalGeneration` wrapper with
//! `text_config`, or a text-only `Qwen3_5ForCausalLM` one) with its FP8 `quantization_config`; the
//! three presets; writing a `config.json` for synthetic checkpoints in the real release's layout.
//! Refuses: shapes the engine's kernels cannot run (matrix dimensions that are not multiples of 128,
//! head dimensions other than 128/256, ratios that do not divide); each gets a one-line error.

use serde::Deserialize;
use serde_json::{json, Value};

use crate::bail;
use crate::error::{Context, Result};

/// What a decoder layer mixes its sequence with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum LayerKind {
    /// Gated DeltaNet (`linear_attention`): conv ring + fp32 recurrent state.
    Gdn,
    /// Gated full attention (`full_attention`): KV cache.
    Attention,
}

/// FP8 block quantisation as declared by `quantization_config`.
#[derive(Debug, Clone, PartialEq)]
pub struct Fp8Quant {
    /// `[rows, cols]` of one scale block; the engine requires `[128, 128]`.
    pub block: [usize; 2],
    /// Module names (HF semantics: substring match) kept in bf16.
    pub not_converted: Vec<String>,
    pub activation_scheme: String,
}

/// The resolved shape of the text model plus its MTP head. Names follow the checkpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    /// Preset name, or "checkpoint" when parsed from a file.
    pub name: String,
    /// Tensor-name prefix of the text trunk: `model.language_model.` (multimodal release) or `model.`.
    pub prefix: String,
    pub hidden: usize,
    pub n_layers: usize,
    pub intermediate: usize,
    pub vocab: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    /// Rotated dims per attention head (`head_dim * partial_rotary_factor`).
    pub rotary_dim: usize,
    pub rope_theta: f64,
    pub gdn_k_heads: usize,
    pub gdn_v_heads: usize,
    pub gdn_k_dim: usize,
    pub gdn_v_dim: usize,
    pub conv_kernel: usize,
    pub rms_eps: f64,
    pub layer_kinds: Vec<LayerKind>,
    pub mtp_layers: usize,
    pub eos_token_id: u32,
    pub quant: Option<Fp8Quant>,
}

/// The `modules_to_not_convert` of the 27B FP8 release as far as it is known (spec 1.4): the GDN
/// gate projections and the MTP fusion stay bf16; names are matched as substrings, as HF does.
pub use crate::isa::access::MAX_POSITIONS;
pub const DEFAULT_NOT_CONVERTED: [&str; 5] = ["lm_head", "embed_tokens", "in_proj_a", "in_proj_b", "mtp.fc"];

impl ModelConfig {
    pub fn preset(name: &str) -> Result<ModelConfig> {
        // Every preset keeps the real head dimensions (128 GDN, 256 attention), the real ratios
        // (6 query heads per KV head, 3 value heads per q/k head, 3 GDN layers then 1 attention
        // layer) and the real vocabulary, so every kernel runs unchanged on every preset.
        let (hidden, n_layers, intermediate, n_kv_heads, gdn_k_heads) = match name {
            // ~0.13 B parameters, almost all of them the 248,320-row embedding and head.
            "tiny" => (256, 4, 512, 1, 1),
            // ~2 B parameters: big enough that GPU kernels see realistic row counts.
            "small" => (2048, 16, 6144, 2, 8),
            "qwen3.5-27b" => (5120, 64, 17408, 4, 16),
            _ => bail!("unknown preset '{name}' (expected tiny, small or qwen3.5-27b)"),
        };
        let cfg = ModelConfig {
            name: name.to_string(),
            prefix: "model.language_model.".into(),
            hidden,
            n_layers,
            intermediate,
            vocab: 248_320,
            n_heads: 6 * n_kv_heads,
            n_kv_heads,
            head_dim: 256,
            rotary_dim: 64,
            rope_theta: 1e7,
            gdn_k_heads,
            gdn_v_heads: 3 * gdn_k_heads,
            gdn_k_dim: 128,
            gdn_v_dim: 128,
            conv_kernel: 4,
            rms_eps: 1e-6,
            layer_kinds: default_layer_kinds(n_layers, 4),
            mtp_layers: 1,
            eos_token_id: 248_044,
            quant: Some(Fp8Quant {
                block: [128, 128],
                not_converted: DEFAULT_NOT_CONVERTED.iter().map(|s| s.to_string()).collect(),
                activation_scheme: "dynamic".into(),
            }),
        };
        cfg.validate()?;
        Ok(cfg)
    }

    /// The same shape with `n` layers (every 4th full attention), e.g. a 64-layer tiny model to check
    /// that synthetic magnitudes stay realistic through the 27B's depth.
    pub fn with_layers(mut self, n: usize) -> ModelConfig {
        self.n_layers = n;
        self.layer_kinds = default_layer_kinds(n, 4);
        self
    }

    /// Parses the text of a `config.json`.
    pub fn from_json_str(text: &str) -> Result<ModelConfig> {
        let root: Value = serde_json::from_str(text).context("config.json is not valid JSON")?;
        let archs: Vec<String> =
            root.get("architectures").and_then(|a| serde_json::from_value(a.clone()).ok()).unwrap_or_default();
        let (text_val, prefix) = match root.get("text_config") {
            Some(t) => (t.clone(), "model.language_model."),
            None if archs.iter().any(|a| a.contains("ConditionalGeneration")) => {
                bail!("config.json: architecture {archs:?} needs a text_config")
            }
            None => (root.clone(), "model."),
        };
        let tc: TextConfigJson = serde_json::from_value(text_val).context("config.json text config")?;
        // quantization_config sits at the top level in the FP8 releases; accept it inside text_config too.
        let qv = root.get("quantization_config").or_else(|| root.get("text_config")?.get("quantization_config"));
        let quant = match qv {
            None => None,
            Some(q) => Some(parse_quant(q)?),
        };
        tc.resolve(prefix, quant)
    }

    pub fn from_file(path: &std::path::Path) -> Result<ModelConfig> {
        let text = std::fs::read_to_string(path).with_context(|| format!("read {}", path.display()))?;
        ModelConfig::from_json_str(&text).with_context(|| format!("{}", path.display()))
    }

    /// Checks everything the engine relies on; the error names the offending field.
    pub fn validate(&self) -> Result<()> {
        let mult = |what: &str, v: usize| -> Result<()> {
            if v == 0 || v % 128 != 0 {
                bail!("config: {what} = {v} is not a positive multiple of 128");
            }
            Ok(())
        };
        mult("hidden_size", self.hidden)?;
        mult("intermediate_size", self.intermediate)?;
        mult("vocab_size", self.vocab)?;
        mult("linear key dim (heads x dim)", self.gdn_k_heads * self.gdn_k_dim)?;
        mult("linear value dim (heads x dim)", self.gdn_v_heads * self.gdn_v_dim)?;
        mult("attention kv dim (heads x dim)", self.n_kv_heads * self.head_dim)?;
        if self.head_dim != 256 || self.gdn_k_dim != 128 || self.gdn_v_dim != 128 {
            bail!(
                "config: head dims (attention {}, linear key {}, linear value {}) must be 256/128/128",
                self.head_dim,
                self.gdn_k_dim,
                self.gdn_v_dim
            );
        }
        if self.n_kv_heads == 0 || self.n_heads % self.n_kv_heads != 0 {
            bail!(
                "config: num_attention_heads {} is not a multiple of num_key_value_heads {}",
                self.n_heads,
                self.n_kv_heads
            );
        }
        if self.gdn_k_heads == 0 || self.gdn_v_heads % self.gdn_k_heads != 0 {
            bail!(
                "config: linear_num_value_heads {} is not a multiple of linear_num_key_heads {}",
                self.gdn_v_heads,
                self.gdn_k_heads
            );
        }
        if self.rotary_dim == 0 || self.rotary_dim % 2 != 0 || self.rotary_dim > self.head_dim {
            bail!("config: rotary dim {} must be even and at most head_dim {}", self.rotary_dim, self.head_dim);
        }
        if self.conv_kernel != 4 {
            bail!(
                "config: linear_conv_kernel_dim = {} (the engine's conv ring holds 3 past inputs: 4 taps)",
                self.conv_kernel
            );
        }
        if self.layer_kinds.len() != self.n_layers {
            bail!("config: layer_types has {} entries for {} layers", self.layer_kinds.len(), self.n_layers);
        }
        if let Some(q) = &self.quant {
            if q.block != [128, 128] {
                bail!("config: quantization_config.weight_block_size {:?} (the engine supports [128, 128])", q.block);
            }
        }
        if self.eos_token_id as usize >= self.vocab {
            bail!("config: eos_token_id {} >= vocab_size {}", self.eos_token_id, self.vocab);
        }
        Ok(())
    }

    pub fn n_gdn_layers(&self) -> usize {
        self.layer_kinds.iter().filter(|k| **k == LayerKind::Gdn).count()
    }
    pub fn n_attn_layers(&self) -> usize {
        self.n_layers - self.n_gdn_layers()
    }
    /// q|k|v channels of a GDN layer (= conv channels).
    pub fn gdn_conv_dim(&self) -> usize {
        2 * self.gdn_k_heads * self.gdn_k_dim + self.gdn_v_heads * self.gdn_v_dim
    }
    pub fn gdn_value_dim(&self) -> usize {
        self.gdn_v_heads * self.gdn_v_dim
    }
    pub fn gdn_key_dim(&self) -> usize {
        self.gdn_k_heads * self.gdn_k_dim
    }
    /// Query width (without the interleaved output gate).
    pub fn attn_q_dim(&self) -> usize {
        self.n_heads * self.head_dim
    }
    pub fn attn_kv_dim(&self) -> usize {
        self.n_kv_heads * self.head_dim
    }
    /// Whether the linear named `module` (full name without `.weight`) is stored in fp8.
    pub fn is_fp8(&self, module: &str) -> bool {
        match &self.quant {
            None => false,
            Some(q) => !q.not_converted.iter().any(|n| module.contains(n.as_str())),
        }
    }

    /// A `config.json` in the layout of the real multimodal FP8 release (vision tower omitted: the
    /// engine is text-only and synthetic checkpoints carry no vision tensors).
    pub fn to_hf_json(&self) -> Value {
        let layer_types: Vec<&str> = self
            .layer_kinds
            .iter()
            .map(|k| if *k == LayerKind::Gdn { "linear_attention" } else { "full_attention" })
            .collect();
        let mut root = json!({
            "architectures": ["Qwen3_5ForConditionalGeneration"],
            "model_type": "qwen3_5",
            "image_token_id": 248056,
            "video_token_id": 248057,
            "vision_start_token_id": 248053,
            "vision_end_token_id": 248054,
            "tie_word_embeddings": false,
            "transformers_version": "4.57.0.dev0",
            "text_config": {
                "model_type": "qwen3_5_text",
                "attention_bias": false,
                "attention_dropout": 0.0,
                "attn_output_gate": true,
                "dtype": "bfloat16",
                "eos_token_id": self.eos_token_id,
                "full_attention_interval": 4,
                "head_dim": self.head_dim,
                "hidden_act": "silu",
                "hidden_size": self.hidden,
                "initializer_range": 0.02,
                "intermediate_size": self.intermediate,
                "layer_types": layer_types,
                "linear_conv_kernel_dim": self.conv_kernel,
                "linear_key_head_dim": self.gdn_k_dim,
                "linear_num_key_heads": self.gdn_k_heads,
                "linear_num_value_heads": self.gdn_v_heads,
                "linear_value_head_dim": self.gdn_v_dim,
                "max_position_embeddings": 262144,
                "mlp_only_layers": [],
                "mtp_num_hidden_layers": self.mtp_layers,
                "mtp_use_dedicated_embeddings": false,
                "num_attention_heads": self.n_heads,
                "num_hidden_layers": self.n_layers,
                "num_key_value_heads": self.n_kv_heads,
                "rms_norm_eps": self.rms_eps,
                "tie_word_embeddings": false,
                "use_cache": true,
                "vocab_size": self.vocab,
                "mamba_ssm_dtype": "float32",
                "rope_parameters": {
                    "mrope_interleaved": true,
                    "mrope_section": [11, 11, 10],
                    "rope_type": "default",
                    "rope_theta": self.rope_theta,
                    "partial_rotary_factor": self.rotary_dim as f64 / self.head_dim as f64
                }
            }
        });
        if let Some(q) = &self.quant {
            root["quantization_config"] = json!({
                "quant_method": "fp8",
                "fmt": "e4m3",
                "activation_scheme": q.activation_scheme,
                "weight_block_size": q.block,
                "modules_to_not_convert": q.not_converted,
            });
        }
        root
    }
}

/// HF's rule when `layer_types` is absent: every `interval`-th layer is full attention.
fn default_layer_kinds(n_layers: usize, interval: usize) -> Vec<LayerKind> {
    (0..n_layers).map(|i| if (i + 1) % interval == 0 { LayerKind::Attention } else { LayerKind::Gdn }).collect()
}

fn parse_quant(q: &Value) -> Result<Fp8Quant> {
    #[derive(Deserialize)]
    struct QuantJson {
        quant_method: String,
        #[serde(default)]
        fmt: Option<String>,
        #[serde(default)]
        activation_scheme: Option<String>,
        weight_block_size: Option<[usize; 2]>,
        #[serde(default)]
        modules_to_not_convert: Option<Vec<String>>,
    }
    let qj: QuantJson = serde_json::from_value(q.clone()).context("config.json quantization_config")?;
    if qj.quant_method != "fp8" {
        bail!("config.json: quantization_config.quant_method '{}' (the engine reads fp8 checkpoints)", qj.quant_method);
    }
    if let Some(f) = &qj.fmt {
        if f != "e4m3" {
            bail!("config.json: quantization_config.fmt '{f}' (the engine reads e4m3)");
        }
    }
    Ok(Fp8Quant {
        block: qj.weight_block_size.context("config.json: quantization_config has no weight_block_size")?,
        not_converted: qj
            .modules_to_not_convert
            .unwrap_or_else(|| DEFAULT_NOT_CONVERTED.iter().map(|s| s.to_string()).collect()),
        activation_scheme: qj.activation_scheme.unwrap_or_else(|| "dynamic".into()),
    })
}

/// The fields of `text_config` the engine reads; defaults are HF's class defaults (spec 1.1).
#[derive(Deserialize)]
struct TextConfigJson {
    #[serde(default)]
    model_type: Option<String>,
    hidden_size: usize,
    num_hidden_layers: usize,
    intermediate_size: usize,
    #[serde(default = "d_vocab")]
    vocab_size: usize,
    num_attention_heads: usize,
    num_key_value_heads: usize,
    #[serde(default = "d_head_dim")]
    head_dim: usize,
    #[serde(default = "d_eps")]
    rms_norm_eps: f64,
    #[serde(default)]
    layer_types: Option<Vec<String>>,
    #[serde(default = "d_interval")]
    full_attention_interval: usize,
    #[serde(default = "d_conv")]
    linear_conv_kernel_dim: usize,
    #[serde(default = "d_128")]
    linear_key_head_dim: usize,
    #[serde(default = "d_128")]
    linear_value_head_dim: usize,
    #[serde(default = "d_16")]
    linear_num_key_heads: usize,
    #[serde(default = "d_32")]
    linear_num_value_heads: usize,
    #[serde(default)]
    rope_parameters: Option<Value>,
    #[serde(default)]
    rope_theta: Option<f64>,
    #[serde(default)]
    partial_rotary_factor: Option<f64>,
    #[serde(default)]
    mtp_num_hidden_layers: Option<usize>,
    #[serde(default)]
    eos_token_id: Option<Value>,
    #[serde(default)]
    tie_word_embeddings: Option<bool>,
    #[serde(default)]
    attn_output_gate: Option<bool>,
}

fn d_vocab() -> usize {
    248_320
}
fn d_head_dim() -> usize {
    256
}
fn d_eps() -> f64 {
    1e-6
}
fn d_interval() -> usize {
    4
}
fn d_conv() -> usize {
    4
}
fn d_128() -> usize {
    128
}
fn d_16() -> usize {
    16
}
fn d_32() -> usize {
    32
}

impl TextConfigJson {
    fn resolve(self, prefix: &str, quant: Option<Fp8Quant>) -> Result<ModelConfig> {
        if let Some(mt) = &self.model_type {
            if !mt.starts_with("qwen3_5") {
                bail!("config.json: model_type '{mt}' is not a Qwen3.5 text model");
            }
        }
        if self.tie_word_embeddings == Some(true) {
            bail!("config.json: tie_word_embeddings = true (Qwen3.5 keeps lm_head untied)");
        }
        if self.attn_output_gate == Some(false) {
            bail!("config.json: attn_output_gate = false (the engine implements the gated attention of Qwen3.5)");
        }
        let layer_kinds = match &self.layer_types {
            None => default_layer_kinds(self.num_hidden_layers, self.full_attention_interval),
            Some(lt) => lt
                .iter()
                .enumerate()
                .map(|(i, t)| match t.as_str() {
                    "linear_attention" => Ok(LayerKind::Gdn),
                    "full_attention" => Ok(LayerKind::Attention),
                    other => Err(crate::error::Error::new(format!("config.json: layer_types[{i}] = '{other}'"))),
                })
                .collect::<Result<Vec<_>>>()?,
        };
        let rope = self.rope_parameters.unwrap_or(Value::Null);
        let rope_theta = rope.get("rope_theta").and_then(Value::as_f64).or(self.rope_theta).unwrap_or(1e7);
        if let Some(rt) = rope.get("rope_type").and_then(Value::as_str) {
            if rt != "default" {
                bail!("config.json: rope_type '{rt}' (the engine implements default RoPE)");
            }
        }
        let partial =
            rope.get("partial_rotary_factor").and_then(Value::as_f64).or(self.partial_rotary_factor).unwrap_or(0.25);
        // HF: int(head_dim * partial_rotary_factor)
        let rotary_dim = (self.head_dim as f64 * partial) as usize;
        let eos = match &self.eos_token_id {
            None => 248_044,
            Some(Value::Number(n)) => n.as_u64().context("config.json: eos_token_id is not an id")? as u32,
            Some(Value::Array(a)) => {
                a.first().and_then(Value::as_u64).context("config.json: eos_token_id list is empty")? as u32
            }
            Some(other) => bail!("config.json: eos_token_id = {other}"),
        };
        let cfg = ModelConfig {
            name: "checkpoint".into(),
            prefix: prefix.into(),
            hidden: self.hidden_size,
            n_layers: self.num_hidden_layers,
            intermediate: self.intermediate_size,
            vocab: self.vocab_size,
            n_heads: self.num_attention_heads,
            n_kv_heads: self.num_key_value_heads,
            head_dim: self.head_dim,
            rotary_dim,
            rope_theta,
            gdn_k_heads: self.linear_num_key_heads,
            gdn_v_heads: self.linear_num_value_heads,
            gdn_k_dim: self.linear_key_head_dim,
            gdn_v_dim: self.linear_value_head_dim,
            conv_kernel: self.linear_conv_kernel_dim,
            rms_eps: self.rms_norm_eps,
            layer_kinds,
            mtp_layers: self.mtp_num_hidden_layers.unwrap_or(0),
            eos_token_id: eos,
            quant,
        };
        cfg.validate()?;
        Ok(cfg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_keep_the_real_ratios() {
        for p in ["tiny", "small", "qwen3.5-27b"] {
            let c = ModelConfig::preset(p).unwrap();
            assert_eq!(c.n_heads / c.n_kv_heads, 6);
            assert_eq!(c.gdn_v_heads / c.gdn_k_heads, 3);
            assert_eq!(c.vocab, 248_320);
            assert_eq!(c.n_gdn_layers(), 3 * c.n_attn_layers());
            assert_eq!(c.layer_kinds[3], LayerKind::Attention);
        }
    }

    #[test]
    fn json_round_trip_of_every_preset() {
        for p in ["tiny", "small", "qwen3.5-27b"] {
            let c = ModelConfig::preset(p).unwrap();
            let back = ModelConfig::from_json_str(&c.to_hf_json().to_string()).unwrap();
            assert_eq!(ModelConfig { name: c.name.clone(), ..back }, c);
        }
    }

    #[test]
    fn the_real_27b_config_resolves_exactly() {
        // The text_config of Qwen/Qwen3.5-27B (spec 1.1) with the FP8 quantization_config (spec 1.4).
        let real = r#"{"architectures":["Qwen3_5ForConditionalGeneration"],"model_type":"qwen3_5",
          "quantization_config":{"quant_method":"fp8","fmt":"e4m3","activation_scheme":"dynamic","weight_block_size":[128,128],
             "modules_to_not_convert":["lm_head","model.language_model.embed_tokens","model.language_model.layers.0.linear_attn.in_proj_a"]},
          "text_config":{"attention_bias":false,"attn_output_gate":true,"dtype":"bfloat16","eos_token_id":248044,
          "full_attention_interval":4,"head_dim":256,"hidden_act":"silu","hidden_size":5120,"intermediate_size":17408,
          "linear_conv_kernel_dim":4,"linear_key_head_dim":128,"linear_num_key_heads":16,"linear_num_value_heads":48,
          "linear_value_head_dim":128,"max_position_embeddings":262144,"model_type":"qwen3_5_text","mtp_num_hidden_layers":1,
          "num_attention_heads":24,"num_hidden_layers":64,"num_key_value_heads":4,"rms_norm_eps":1e-06,"vocab_size":248320,
          "mamba_ssm_dtype":"float32","rope_parameters":{"mrope_interleaved":true,"mrope_section":[11,11,10],"rope_type":"default",
          "rope_theta":10000000,"partial_rotary_factor":0.25}},"tie_word_embeddings":false}"#;
        let c = ModelConfig::from_json_str(real).unwrap();
        let p = ModelConfig::preset("qwen3.5-27b").unwrap();
        assert_eq!((c.hidden, c.n_layers, c.intermediate, c.rotary_dim), (5120, 64, 17408, 64));
        assert_eq!(c.layer_kinds, p.layer_kinds);
        assert_eq!(c.gdn_conv_dim(), 10240);
        assert!(c.is_fp8("model.language_model.layers.5.mlp.gate_proj"));
        assert!(!c.is_fp8("model.language_model.layers.0.linear_attn.in_proj_a"));
    }

    #[test]
    fn a_text_only_config_uses_the_model_prefix() {
        let c = ModelConfig::preset("tiny").unwrap();
        let mut text = c.to_hf_json()["text_config"].clone();
        text["architectures"] = json!(["Qwen3_5ForCausalLM"]);
        let back = ModelConfig::from_json_str(&text.to_string()).unwrap();
        assert_eq!(back.prefix, "model.");
        assert!(back.quant.is_none());
        assert!(!back.is_fp8("model.layers.0.mlp.gate_proj"));
    }

    #[test]
    fn bad_configs_name_the_field() {
        let c = ModelConfig::preset("tiny").unwrap();
        let mut j = c.to_hf_json();
        j["text_config"]["hidden_size"] = json!(300);
        let e = ModelConfig::from_json_str(&j.to_string()).unwrap_err();
        assert!(e.message().contains("hidden_size = 300"), "{e}");
        let mut j = c.to_hf_json();
        j["text_config"]["layer_types"][0] = json!("sliding");
        assert!(ModelConfig::from_json_str(&j.to_string()).unwrap_err().message().contains("layer_types[0]"));
        assert!(ModelConfig::from_json_str("{").unwrap_err().message().contains("not valid JSON"));
        assert!(ModelConfig::preset("huge").is_err());
    }
}
