//! Executors of programs: the CPU interpreter (here), the discrete-kernel CUDA graph and the
//! megakernel (issues 5 and 6). Executors never see the model's structure: weights arrive as named
//! buffers of the program.

pub mod interp;
