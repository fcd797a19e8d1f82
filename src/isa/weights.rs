//! The weights as an executor receives them: by buffer name, in the storage the kernels read, with the
//! model numbers the kernels need. The model side implements `Weights` (`model::upload`); executors
//! never read a checkpoint.

use crate::error::Result;

/// A weight buffer's host bytes, as the kernels store it.
pub enum HostWeight<'a> {
    /// fp8 e4m3 codes with the block scales `[rows/128][cols/128]` as f32 (dequant: code * scale).
    Fp8 { bytes: &'a [u8], scales: Vec<f32> },
    /// bf16 little-endian bytes (the embedding, the lm_head, small projections).
    Bf16(&'a [u8]),
    /// Small vectors (norms, conv taps, A_log, dt_bias) as f32 values.
    F32(Vec<f32>),
}

/// The model numbers the kernels read from DevCtx.
#[derive(Clone, Copy, Debug)]
pub struct ModelDims {
    pub rotary_dim: usize,
    pub head_dim: usize,
    pub gdn_v_dim: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub gdn_k_heads: usize,
    pub gdn_v_heads: usize,
    pub rms_eps: f32,
}

/// What the executor uploads: the model's weights by buffer name, its dims and RoPE tables. The
/// implementer has validated every value (no NaN fp8 code: the kernels do not decode them).
pub trait Weights {
    fn dims(&self) -> ModelDims;
    fn weight(&self, name: &str) -> Result<HostWeight<'_>>;
    /// cos and sin of position `pos` (rotary_dim each, bf16 values: the CPU reference's own tables).
    fn rope(&self, pos: usize) -> (Vec<f32>, Vec<f32>);
}
