// op_gemv_gate_up: act[r] = bf(bf(silu(bf(gate_r . n))) * bf(up_r . n)), n = rmsnorm(x) with W2.
// fp8: a row group of 32 at a time, gate's k-groups then up's (fp8_row_group; an M-row step's rows in
// one pass, fp8_rows_m), the epilogue on the row's thread; bf16: a warp a row, gate and up together
// (dot_rows). Row sums: k-groups in order, from 0.
__device__ void op_gemv_gate_up(const DevCtx& c, const Word& w, unsigned u, char* smem, bool fresh) {
  unsigned K = c.cols[w.ops[SLOT_IN0]];
  unsigned r0 = u * w.unit_rows, r1 = min(w.rows, r0 + w.unit_rows);
  unsigned groups = (K + KGROUP - 1) / KGROUP;
  unsigned short wids[2] = {w.ops[SLOT_W0], w.ops[SLOT_W1]};
  // the epilogue of row `row` of row view r: gate's total arrives first (i = 0), then up's
  auto act = [&](float& acc, const DevCtx& r, int i, unsigned row, float v) {
    if (i == 0) acc = v;
    else B<unsigned short>(r, w.ops[SLOT_OUT0])[row] = f2bf(bf(silu(bf(acc))) * bf(v));
  };
  if constexpr (M_ROWS > 1) {
    if (mrow_gemv(c, w)) {
      const bool xsm = mrow_x_in_smem(w);
      if (xsm && !MROW_SKIP_PREP) prepared_rows(c, w, SLOT_W2, smem, fresh, M_ROWS);
      const MrowX xl{c, (const unsigned short*)smem, xrow_bytes(K) / 2, w.ops[SLOT_IN0], xsm, 0u};
      for (unsigned rg = r0 / 32; rg * 32 < r1; ++rg) {
        float acc = 0.f;
        fp8_rows_m<2>(c, wids, rg, 0, groups, xl, mrow_red(smem, K, xsm), false, 0, 0,
                      [&](int i, unsigned m, unsigned row, float v) { act(acc, row_view(c, m), i, row, v); });
      }
      return;
    }
  }
  const unsigned short* xs = prepared_input(c, w, SLOT_W2, smem, fresh);
  if (is_fp8(c, wids[0])) {
    for (unsigned rg = r0 / 32; rg * 32 < r1; ++rg) {
      if (rg * 32 != r0) BLOCK_SYNC();
      float acc = 0.f;  // gate's row total on warp 0's lanes, until up's arrives
      fp8_row_group<2>(c, wids, rg, 0, groups, xs, tile_red(smem, K), false, nullptr, 0,
                       [&](int i, unsigned row, float v) { act(acc, c, i, row, v); });
    }
    return;
  }
  unsigned short* out = B<unsigned short>(c, w.ops[SLOT_OUT0]);
  for (unsigned r = r0 + (threadIdx.x >> 5); r < r1; r += WARPS) {
    float acc[2] = {0.f, 0.f};
    unsigned rows[2] = {r, r};
    dot_rows<2>(c, wids, rows, xs, 0, groups, [&](int i, unsigned, float v) { acc[i] += v; });  // ORDER: k-groups in order
    if ((threadIdx.x & 31) == 0) out[r] = f2bf(bf(silu(bf(acc[0]))) * bf(acc[1]));
  }
}
