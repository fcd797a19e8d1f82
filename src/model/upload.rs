//! The model's side of an upload: a checkpoint's tensors as the named host buffers an executor takes
//! (`isa::weights::Weights`): fp8 linears with their block scales as f32, bf16 matrices as bytes, the
//! small vectors as f32, the RoPE tables of the CPU reference.
//!
//! Owns: which tensor is stored how. Refuses: a checkpoint whose values were not scanned (`Upload::new`
//! runs the deep check: the kernels do not decode NaN codes).

use super::checkpoint::Checkpoint;
use super::tensors::{Dt, Role};
use crate::error::Result;
use crate::isa::weights::{HostWeight, ModelDims, Weights};

/// A checkpoint whose every value has been checked, ready to upload.
pub struct Upload<'a> {
    ck: &'a Checkpoint,
}

impl<'a> Upload<'a> {
    /// Scans every value first (NaN / Inf codes are refused with the tensor's name).
    pub fn new(ck: &'a Checkpoint) -> Result<Upload<'a>> {
        ck.deep_check()?;
        Ok(Upload { ck })
    }

    /// For a caller that has just run `ck.deep_check()` itself (the experiment runner scans once for
    /// all its paths).
    pub fn scanned(ck: &'a Checkpoint) -> Upload<'a> {
        Upload { ck }
    }
}

impl Weights for Upload<'_> {
    fn dims(&self) -> ModelDims {
        let c = &self.ck.config;
        ModelDims {
            rotary_dim: c.rotary_dim,
            head_dim: c.head_dim,
            gdn_v_dim: c.gdn_v_dim,
            n_heads: c.n_heads,
            n_kv_heads: c.n_kv_heads,
            gdn_k_heads: c.gdn_k_heads,
            gdn_v_heads: c.gdn_v_heads,
            rms_eps: c.rms_eps as f32,
        }
    }

    fn weight(&self, name: &str) -> Result<HostWeight<'_>> {
        let spec = self
            .ck
            .specs()
            .iter()
            .find(|s| s.name == name)
            .ok_or_else(|| crate::error::Error::new(format!("upload: the checkpoint has no tensor {name}")))?;
        Ok(match spec.role {
            Role::Linear { .. } | Role::Embedding | Role::LmHead if spec.dtype == Dt::F8E4M3 => {
                let module = name.trim_end_matches(".weight");
                HostWeight::Fp8 {
                    bytes: self.ck.bytes(name),
                    scales: self.ck.f32_vec(&format!("{module}.weight_scale_inv")),
                }
            }
            Role::Linear { .. } | Role::Embedding | Role::LmHead => HostWeight::Bf16(self.ck.bytes(name)),
            _ => HostWeight::F32(self.ck.f32_vec(name)),
        })
    }

    fn rope(&self, pos: usize) -> (Vec<f32>, Vec<f32>) {
        let c = &self.ck.config;
        super::ops::rope_tables(pos, c.rotary_dim, c.rope_theta)
    }
}
