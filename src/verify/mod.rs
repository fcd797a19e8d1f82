//! The checks: the GPU against the CPU op by op (`opcheck`), M-row steps against one-row steps (`rows`),
//! the CPU reference against the oracle (`golden`, `trace`), the GPU sampler against the CPU's, the
//! head's mask against the scatter method (`mask`), the agent replay on both GPU paths (`agent`), and
//! the soaks and multi-step launches of `mk gpu` (`gpu`). Each reports the first difference it finds
//! (instruction, buffer, element) and has a negative control that must fail.

pub mod agent;
pub mod gdn_chunk;
pub mod gemm;
pub mod gemv;
pub mod golden;
pub mod gpu;
pub mod mask;
pub mod opcheck;
pub mod prefill;
pub mod rows;
pub mod spec;
pub mod trace;
