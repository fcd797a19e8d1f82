#![recursion_limit = "256"]
//! mk: a research inference engine for Qwen3.5-27B on one GPU.
//!
//! Layers (imports flow downward only): `experiment` (a RON spec in, a results folder out) and
//! `verify` (the checks: GPU against CPU op by op, M rows, the oracle's goldens and traces, the
//! sampler, soaks), `compiler` (model -> program), `exec` (runs programs: the CPU interpreter, the
//! GPU's graph and megakernel), `model` (config, checkpoints, CPU reference), `isa` (the contract:
//! opcodes, words, programs, validation, the weights an executor receives), `agent` (the agent workload's
//! trajectories, over the tokenizer), `grammar` (constrained tool calls: llguidance masks over the
//! tokenizer, honoured by the CPU reference's and the interpreter's head), `tokenizer`, `error`.

pub mod agent;
pub mod compiler;
pub mod error;
pub mod exec;
pub mod experiment;
pub mod grammar;
pub mod isa;
pub mod model;
pub mod tokenizer;
pub mod verify;
