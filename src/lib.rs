#![recursion_limit = "256"]
//! mk: a research inference engine for Qwen3.5-27B on one GPU.
//!
//! Layers (imports flow downward only): `model` (config, checkpoints, CPU reference), `golden`
//! (oracle goldens and the calibrated comparison), `error`.

pub mod error;
pub mod golden;

pub mod model;
pub mod trace;
