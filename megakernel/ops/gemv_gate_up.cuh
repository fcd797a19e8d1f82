// op_gemv_gate_up: act[r] = bf(bf(silu(bf(gate_r . n))) * bf(up_r . n)), n = rmsnorm(x) with W2.
// fp8: a row group of 32 at a time, gate's k-groups then up's (fp8_group), the epilogue on warp 0's
// lanes; bf16: a warp a row, gate and up together (dot_rows). Row sums: k-groups in order, from 0.
template <bool STREAM, typename Src>
__device__ void op_gemv_gate_up(const DevCtx& c, const Word& w, unsigned u, char* smem, bool fresh, Src& src) {
  unsigned K = c.cols[w.ops[SLOT_IN0]];
  const unsigned short* xs = prepared_input<STREAM>(c, w, SLOT_W2, smem, fresh);
  unsigned short* out = B<unsigned short>(c, w.ops[SLOT_OUT0]);
  unsigned r0 = u * w.unit_rows, r1 = min(w.rows, r0 + w.unit_rows);
  unsigned groups = (K + KGROUP - 1) / KGROUP;
  unsigned short wids[2] = {w.ops[SLOT_W0], w.ops[SLOT_W1]};
  if (is_fp8(c, wids[0])) {
    float* red = tile_red(smem, K);
    unsigned par = 0;
    for (unsigned rg = r0 / 32; rg * 32 < r1; ++rg) {
      float acc[2] = {0.f, 0.f};
      for (int i = 0; i < 2; ++i)
        for (unsigned g = 0; g < groups; ++g, par ^= 1u)
          fp8_group(c, src, wids[i], rg, g, xs, red, par, [&](unsigned, float p) { acc[i] = (g == 0 ? 0.f : acc[i]) + p; });
      if (threadIdx.x < 32) out[rg * 32 + threadIdx.x] = f2bf(bf(silu(bf(acc[0]))) * bf(acc[1]));
    }
    return;
  }
  for (unsigned r = r0 + (threadIdx.x >> 5); r < r1; r += WARPS) {
    float acc[2] = {0.f, 0.f};
    unsigned rows[2] = {r, r};
    dot_rows<2>(c, wids, rows, xs, 0, groups, [&](int i, unsigned, float v) { acc[i] += v; });  // ORDER: k-groups in order
    if ((threadIdx.x & 31) == 0) out[r] = f2bf(bf(silu(bf(acc[0]))) * bf(acc[1]));
  }
}
