// op_gemv_gate_up: act[r] = bf(bf(silu(bf(gate_r . n))) * bf(up_r . n)), n = rmsnorm(x) with W2.
__device__ void op_gemv_gate_up(const DevCtx& c, const Word& w, unsigned u, char* smem) {
  unsigned K = c.cols[w.ops[SLOT_IN0]];
  unsigned short* xs = (unsigned short*)smem;
  float* red = (float*)(smem + ((K * 2 + 15) / 16) * 16);
  block_rmsnorm(B<unsigned short>(c, w.ops[SLOT_IN0]), B<float>(c, w.ops[SLOT_W2]), K, c.eps, xs, red);
  unsigned short* out = B<unsigned short>(c, w.ops[SLOT_OUT0]);
  unsigned r0 = u * w.unit_rows, r1 = min(w.rows, r0 + w.unit_rows);
  unsigned groups = (K + KGROUP - 1) / KGROUP;
  for (unsigned r = r0 + (threadIdx.x >> 5); r < r1; r += WARPS) {
    float g = 0.f, up = 0.f;
    for (unsigned q = 0; q < groups; ++q) {  // ORDER: k-groups in order
      g += row_dot(c, w.ops[SLOT_W0], r, xs, q * KGROUP, min(K, (q + 1) * KGROUP));
      up += row_dot(c, w.ops[SLOT_W1], r, xs, q * KGROUP, min(K, (q + 1) * KGROUP));
    }
    if ((threadIdx.x & 31) == 0) out[r] = f2bf(bf(silu(bf(g))) * bf(up));
  }
}
