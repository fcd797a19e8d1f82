// op_gemv_norm: rows of bf(W . rmsnorm(x)) (norm weight in W1; none when W1 is unused), or split-K
// partials. Each unit recomputes the norm statistic itself (norms are folded into consumers).
__device__ void op_gemv_norm(const DevCtx& c, const Word& w, unsigned u, char* smem, bool fresh) {
  unsigned K = c.cols[w.ops[SLOT_IN0]];
  unsigned short* xs = (unsigned short*)smem;
  float* red = (float*)(smem + ((K * 2 + 15) / 16) * 16);
  const unsigned short* x = B<unsigned short>(c, w.ops[SLOT_IN0]);
  if (!fresh) {
    // xs still holds this word's input (the block's previous unit was of this word)
  } else if (w.ops[SLOT_W1] != OPERAND_NONE) {
    block_rmsnorm(x, B<float>(c, w.ops[SLOT_W1]), K, c.eps, xs, red);
  } else {
    for (unsigned i = threadIdx.x; i < K; i += THREADS) xs[i] = x[i];
    __syncthreads();
  }
  unsigned short* out = B<unsigned short>(c, w.ops[SLOT_OUT0]);
  gemv_rows(c, w, u, w.ops[SLOT_W0], xs, [&](unsigned r, float v) { out[r] = f2bf(v); });
}
