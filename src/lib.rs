#![recursion_limit = "256"]
//! mk: a research inference engine for Qwen3.5-27B on one GPU.
//!
//! Layers (imports flow downward only): `experiment` (a RON spec in, a results folder out), `compiler` (model -> program), `exec` (runs programs: the CPU
//! interpreter today), `isa` (the contract: opcodes, words, programs, validation), `model` (config,
//! checkpoints, CPU reference), `golden` and `trace` (checks against the oracle), `error`.

pub mod compiler;
pub mod cuda;
pub mod error;
pub mod exec;
pub mod experiment;
pub mod golden;
pub mod isa;
pub mod model;
pub mod tokenizer;
pub mod trace;
