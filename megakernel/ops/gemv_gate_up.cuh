// op_gemv_gate_up: act[r] = bf(bf(silu(bf(gate_r . n))) * bf(up_r . n)), n = rmsnorm(x) with W2.
template <bool STREAM>
__device__ void op_gemv_gate_up(const DevCtx& c, const Word& w, unsigned u, char* smem, bool fresh) {
  unsigned K = c.cols[w.ops[SLOT_IN0]];
  auto prep = [&] { return prepared_input<ONE_TRIP_PREP(STREAM)>(c, w, SLOT_W2, smem, fresh); };
  unsigned short* out = B<unsigned short>(c, w.ops[SLOT_OUT0]);
  unsigned r0 = u * w.unit_rows, r1 = min(w.rows, r0 + w.unit_rows);
  unsigned groups = (K + KGROUP - 1) / KGROUP;
  unsigned short wids[2] = {w.ops[SLOT_W0], w.ops[SLOT_W1]};
  if (tma_path(w)) {
    unsigned short* xs = prep();
    float g0 = 0.f, u0 = 0.f, g1 = 0.f, u1 = 0.f;  // gate, up of rows warp and warp + 8 (scalars)
    tma_unit<2>(c, wids, r0, r1, xs, 0, groups, smem, [&](int i, unsigned j, unsigned, float v) {
      float& a = j < WARPS ? (i == 0 ? g0 : u0) : (i == 0 ? g1 : u1);
      a += v;  // ORDER: k-groups in order
    });
    if ((threadIdx.x & 31) == 0)
      for (unsigned j = threadIdx.x >> 5; j < r1 - r0; j += WARPS)
        out[r0 + j] = f2bf(bf(silu(bf(j < WARPS ? g0 : g1))) * bf(j < WARPS ? u0 : u1));
    return;
  }
  if (mma_path(c, wids[0], w) && mma_path(c, wids[1], w)) {
    // Gate (i = 0) and up (i = 1) of the unit's rows together; thread 16 + row has up and takes the
    // gate's total from the shared slot its partner (thread row) left.
    float* gate = (float*)(smem + ((K * 2 + 15) / 16) * 16) + mma_red_floats(2, K);
    float total = 0.f;
    mma_unit_fp8<2, STREAM ? MMA_AHEAD : MEGA_MMA_AHEAD>(c, wids, r0, r1, prep, 0, groups, [&](int i, unsigned r, unsigned g, float v) {
      total += v;  // ORDER: k-groups in order
      if (g + 1 == groups && i == 0) gate[r - r0] = total;
    });
    if (threadIdx.x >= 16 && threadIdx.x < 32 && r0 + threadIdx.x - 16 < r1) {
      unsigned r = r0 + threadIdx.x - 16;
      out[r] = f2bf(bf(silu(bf(gate[r - r0]))) * bf(total));
    }
    return;
  }
  unsigned char wb = c.wbytes[wids[0]];
  if (!(STREAM || MEGA_STREAM_NR1 >= 2) || (wb != 1 && wb != 3)) {  // dot_rows (bf16 weights, or not streamed)
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
