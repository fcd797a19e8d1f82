// op_gemv_gate_up: act[r] = bf(bf(silu(bf(gate_r . n))) * bf(up_r . n)), n = rmsnorm(x) with W2.
template <bool STREAM>
__device__ void op_gemv_gate_up(const DevCtx& c, const Word& w, unsigned u, char* smem, bool fresh) {
  unsigned K = c.cols[w.ops[SLOT_IN0]];
  auto prep = [&] { return prepared_input<STREAM>(c, w, SLOT_W2, smem, fresh); };
  unsigned short* out = B<unsigned short>(c, w.ops[SLOT_OUT0]);
  unsigned r0 = u * w.unit_rows, r1 = min(w.rows, r0 + w.unit_rows);
  unsigned groups = (K + KGROUP - 1) / KGROUP;
  unsigned short wids[2] = {w.ops[SLOT_W0], w.ops[SLOT_W1]};
  unsigned char wb = c.wbytes[wids[0]];
  if (!STREAM || (wb != 1 && wb != 3)) {  // dot_rows (bf16 weights, or not streamed)
    unsigned short* xs = prep();
    for (unsigned r = r0 + (threadIdx.x >> 5); r < r1; r += WARPS) {
      float acc[2] = {0.f, 0.f};
      unsigned rows[2] = {r, r};
      dot_rows<2>(c, wids, rows, xs, 0, groups, [&](int i, unsigned, float v) { acc[i] += v; });  // ORDER: k-groups in order
      if ((threadIdx.x & 31) == 0) out[r] = f2bf(bf(silu(bf(acc[0]))) * bf(acc[1]));
    }
    return;
  }
  // Row r0 + warp + 8 s of gate (i = 0) and up (i = 1) together (their loads in flight at once).
  float acc[2] = {0.f, 0.f};
  auto row_of = [&](unsigned set, int) { return r0 + (threadIdx.x >> 5) + WARPS * set; };
  fp8_stream<2>(c, wids, warp_sets(r0, r1, WARPS), r1, row_of, prep, 0, groups, smem, [&](unsigned set, int i, unsigned g, float v) {
    acc[i] = (g == 0 ? 0.f : acc[i]) + v;  // ORDER: k-groups in order, from 0
    if (g + 1 == groups && i == 1 && (threadIdx.x & 31) == 0)
      out[row_of(set, 0)] = f2bf(bf(silu(bf(acc[0]))) * bf(acc[1]));
  });
}
