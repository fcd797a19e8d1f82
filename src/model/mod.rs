//! The model: config, checkpoint contract, synthetic generator, loader, CPU reference ops and forward.
//! Nothing here touches CUDA.

pub mod checkpoint;
pub mod config;
pub mod forward;
pub mod gdn_chunk;
pub mod mtp;
pub mod numerics;
pub mod ops;
pub mod prefill;
pub mod rollback;
pub mod sample;
pub mod spec_generate;
pub mod speculate;
pub mod stats;
pub mod synth;
#[cfg(test)]
pub(crate) mod tempdir;
pub mod tensors;
pub mod upload;
pub mod weights;
