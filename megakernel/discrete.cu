// The discrete path: one thin kernel per opcode. A launch covers `nw` consecutive words of one stage
// with the same opcode (no ordering between them: the validator proves them race-free); block b runs
// the b-th unit counted across those words. The megakernel calls the same op_* device functions, so
// the arithmetic of a unit is the same.
__device__ __forceinline__ Word launch_word(const Word* prog, unsigned wi, unsigned nw, unsigned* u) {
  *u = blockIdx.x;
  while (nw > 1 && *u >= prog[wi].units) {
    *u -= prog[wi].units;
    ++wi;
    --nw;
  }
  return prog[wi];
}
#define K_OP(name)                                                                                   \
  extern "C" __global__ void __launch_bounds__(THREADS) k_##name(const Word* prog, unsigned wi, unsigned nw, DevCtx c) { \
    extern __shared__ __align__(16) char smem[];                                                     \
    unsigned u;                                                                                      \
    Word w = launch_word(prog, wi, nw, &u);                                                          \
    op_##name(c, w, u, smem);                                                                        \
  }
K_OP(embed)
K_OP(gemv_norm)
K_OP(gemv_gate_up)
K_OP(gemv_gated_norm_residual)
K_OP(gemv_residual)
K_OP(reduce_store)
K_OP(reduce_residual)
K_OP(gdn_conv)
K_OP(gdn_recur)
K_OP(attn_kv)
K_OP(attn_scores)
K_OP(attn_pv)
K_OP(attn_reduce_gate)
K_OP(lm_head)
K_OP(argmax)
K_OP(end_step)
