//! Executors of programs: the CPU interpreter (`interp`), the discrete-kernel CUDA graph and the
//! megakernel (`gpu`). Executors never see the model's structure: weights arrive as named
//! buffers of the program.

pub mod gpu;
pub mod interp;
pub mod spec;
