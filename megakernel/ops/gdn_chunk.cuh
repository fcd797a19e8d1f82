// op_gdn_chunk: a prefill program's chunked GDN word (issue 28, `Opcode::GdnChunk`). Not a GPU path yet:
// the host refuses prefill programs before anything launches (src/exec/gpu/mod.rs), and the chunked
// recurrence's kernels are the probe's two launches (gdn_chunk.cuh, `mk gpu gdn-chunk`) until a prefill
// program runs on the GPU. Here only so that every opcode keeps its op, its kernel and its name; if it
// ever runs, it stops the kernel rather than leave its outputs unwritten. (No case in the megakernel's
// dispatch: its register allocation stays that of the decode step's ops.)
__device__ void op_gdn_chunk(const DevCtx&, const Word&, unsigned, char*, bool) { __trap(); }
