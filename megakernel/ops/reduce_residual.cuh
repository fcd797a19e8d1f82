// op_reduce_residual: h[r] = bf(h[r] + bf(sum_g partial[g][r])), ORDER: groups in index order.
__device__ void op_reduce_residual(const DevCtx& c, const Word& w, unsigned u, char*) {
  const float* p = B<float>(c, w.ops[SLOT_IN0]);
  unsigned short* h = B<unsigned short>(c, w.ops[SLOT_OUT0]);
  unsigned r0 = u * w.unit_rows, r1 = min(w.rows, r0 + w.unit_rows);
  for (unsigned r = r0 + threadIdx.x; r < r1; r += THREADS) {
    float s = 0.f;
    for (unsigned g = 0; g < w.arg0; ++g) s += p[(size_t)g * w.rows + r];
    h[r] = f2bf(bf2f(h[r]) + bf(s));
  }
}
