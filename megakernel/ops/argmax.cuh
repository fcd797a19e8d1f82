// op_argmax: the greedy token from the lm_head candidates, written to ctrl[2]. The winner under a
// total order (a NaN below every number, then the larger value, then the lower id: the CPU's
// `argmax`), so the result does not depend on the order of combination: each thread scans a stride of
// the candidates, then a warp butterfly and the warps in order.
__device__ __forceinline__ bool beats(float v, float id, float bv, float bid) {
  if (v != v) return bv != bv && id < bid;
  return bv != bv || v > bv || (v == bv && id < bid);
}

__device__ void op_argmax(const DevCtx& c, const Word& w, unsigned, char* smem, bool) {
  const float* cand = B<float>(c, w.ops[SLOT_IN0]);
  float best = __int_as_float(0x7fc00000), id = 3.0e38f;
  for (unsigned i = threadIdx.x; i < w.arg0; i += THREADS)
    if (beats(cand[2 * i], cand[2 * i + 1], best, id)) { best = cand[2 * i]; id = cand[2 * i + 1]; }
  for (int o = 16; o > 0; o >>= 1) {
    float ob = __shfl_xor_sync(0xffffffffu, best, o), oi = __shfl_xor_sync(0xffffffffu, id, o);
    if (beats(ob, oi, best, id)) { best = ob; id = oi; }
  }
  float* red = (float*)smem;
  if ((threadIdx.x & 31) == 0) { red[2 * (threadIdx.x >> 5)] = best; red[2 * (threadIdx.x >> 5) + 1] = id; }
  BLOCK_SYNC();
  if (threadIdx.x == 0) {
    for (int k = 1; k < WARPS; ++k)
      if (beats(red[2 * k], red[2 * k + 1], best, id)) { best = red[2 * k]; id = red[2 * k + 1]; }
    B<unsigned>(c, w.ops[SLOT_OUT0])[2] = (unsigned)id;
  }
}
