// op_lm_head: logits of the unit's vocabulary rows, bf(W . rmsnorm(h)) (final norm in W1), and the
// unit's (max, argmax) candidate: first maximum in row order, so the lowest id wins ties.
__device__ void op_lm_head(const DevCtx& c, const Word& w, unsigned u, char* smem) {
  unsigned K = c.cols[w.ops[SLOT_IN0]];
  unsigned short* xs = (unsigned short*)smem;
  float* red = (float*)(smem + ((K * 2 + 15) / 16) * 16);
  block_rmsnorm(B<unsigned short>(c, w.ops[SLOT_IN0]), B<float>(c, w.ops[SLOT_W1]), K, c.eps, xs, red);
  unsigned short* logits = B<unsigned short>(c, w.ops[SLOT_OUT0]);
  unsigned r0 = u * w.unit_rows, r1 = min(w.rows, r0 + w.unit_rows);
  unsigned groups = (K + KGROUP - 1) / KGROUP;
  for (unsigned r = r0 + (threadIdx.x >> 5); r < r1; r += WARPS) {
    float v = 0.f;
    for (unsigned g = 0; g < groups; ++g) v += row_dot(c, w.ops[SLOT_W0], r, xs, g * KGROUP, min(K, (g + 1) * KGROUP));  // ORDER: k-groups in order
    if ((threadIdx.x & 31) == 0) logits[r] = f2bf(v);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float best = bf2f(logits[r0]);
    unsigned id = r0;
    for (unsigned r = r0 + 1; r < r1; ++r) {
      float v = bf2f(logits[r]);
      if (v > best || best != best) { best = v; id = r; }
    }
    float* cand = B<float>(c, w.ops[SLOT_OUT1]);
    cand[2 * u] = best;
    cand[2 * u + 1] = (float)id;
  }
}
