// The discrete path: one thin kernel per opcode; block b of a launch runs unit b of word wi.
// The megakernel calls the same op_* device functions, so the arithmetic of a unit is the same.
extern "C" __global__ void __launch_bounds__(THREADS) k_embed(const Word* prog, unsigned wi, DevCtx c) {
  extern __shared__ __align__(16) char smem[];
  Word w = prog[wi];
  op_embed(c, w, blockIdx.x, smem);
}
extern "C" __global__ void __launch_bounds__(THREADS) k_gemv_norm(const Word* prog, unsigned wi, DevCtx c) {
  extern __shared__ __align__(16) char smem[];
  Word w = prog[wi];
  op_gemv_norm(c, w, blockIdx.x, smem);
}
extern "C" __global__ void __launch_bounds__(THREADS) k_gemv_gate_up(const Word* prog, unsigned wi, DevCtx c) {
  extern __shared__ __align__(16) char smem[];
  Word w = prog[wi];
  op_gemv_gate_up(c, w, blockIdx.x, smem);
}
extern "C" __global__ void __launch_bounds__(THREADS) k_gemv_gated_norm_residual(const Word* prog, unsigned wi, DevCtx c) {
  extern __shared__ __align__(16) char smem[];
  Word w = prog[wi];
  op_gemv_gated_norm_residual(c, w, blockIdx.x, smem);
}
extern "C" __global__ void __launch_bounds__(THREADS) k_gemv_residual(const Word* prog, unsigned wi, DevCtx c) {
  extern __shared__ __align__(16) char smem[];
  Word w = prog[wi];
  op_gemv_residual(c, w, blockIdx.x, smem);
}
extern "C" __global__ void __launch_bounds__(THREADS) k_reduce_store(const Word* prog, unsigned wi, DevCtx c) {
  extern __shared__ __align__(16) char smem[];
  Word w = prog[wi];
  op_reduce_store(c, w, blockIdx.x, smem);
}
extern "C" __global__ void __launch_bounds__(THREADS) k_reduce_residual(const Word* prog, unsigned wi, DevCtx c) {
  extern __shared__ __align__(16) char smem[];
  Word w = prog[wi];
  op_reduce_residual(c, w, blockIdx.x, smem);
}
extern "C" __global__ void __launch_bounds__(THREADS) k_gdn_conv(const Word* prog, unsigned wi, DevCtx c) {
  extern __shared__ __align__(16) char smem[];
  Word w = prog[wi];
  op_gdn_conv(c, w, blockIdx.x, smem);
}
extern "C" __global__ void __launch_bounds__(THREADS) k_gdn_recur(const Word* prog, unsigned wi, DevCtx c) {
  extern __shared__ __align__(16) char smem[];
  Word w = prog[wi];
  op_gdn_recur(c, w, blockIdx.x, smem);
}
extern "C" __global__ void __launch_bounds__(THREADS) k_attn_kv(const Word* prog, unsigned wi, DevCtx c) {
  extern __shared__ __align__(16) char smem[];
  Word w = prog[wi];
  op_attn_kv(c, w, blockIdx.x, smem);
}
extern "C" __global__ void __launch_bounds__(THREADS) k_attn_scores(const Word* prog, unsigned wi, DevCtx c) {
  extern __shared__ __align__(16) char smem[];
  Word w = prog[wi];
  op_attn_scores(c, w, blockIdx.x, smem);
}
extern "C" __global__ void __launch_bounds__(THREADS) k_attn_pv(const Word* prog, unsigned wi, DevCtx c) {
  extern __shared__ __align__(16) char smem[];
  Word w = prog[wi];
  op_attn_pv(c, w, blockIdx.x, smem);
}
extern "C" __global__ void __launch_bounds__(THREADS) k_attn_reduce_gate(const Word* prog, unsigned wi, DevCtx c) {
  extern __shared__ __align__(16) char smem[];
  Word w = prog[wi];
  op_attn_reduce_gate(c, w, blockIdx.x, smem);
}
extern "C" __global__ void __launch_bounds__(THREADS) k_lm_head(const Word* prog, unsigned wi, DevCtx c) {
  extern __shared__ __align__(16) char smem[];
  Word w = prog[wi];
  op_lm_head(c, w, blockIdx.x, smem);
}
extern "C" __global__ void __launch_bounds__(THREADS) k_argmax(const Word* prog, unsigned wi, DevCtx c) {
  extern __shared__ __align__(16) char smem[];
  Word w = prog[wi];
  op_argmax(c, w, blockIdx.x, smem);
}
extern "C" __global__ void __launch_bounds__(THREADS) k_end_step(const Word* prog, unsigned wi, DevCtx c) {
  extern __shared__ __align__(16) char smem[];
  Word w = prog[wi];
  op_end_step(c, w, blockIdx.x, smem);
}
