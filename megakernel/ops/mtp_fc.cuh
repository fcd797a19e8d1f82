// op_mtp_fc: the MTP drafter's fc (issue 27): h[r] = bf(W . [bf(rmsnorm(e; W1)), bf(rmsnorm(g; W2))]),
// e = IN0, g = bf(rmsnorm(IN1; W3)) (the residual stream handed in, through its final norm); the
// embedding half first (model::mtp::draft_step's order). Checked by `mk gpu ops DIR --drafter` with the
// release's bf16 fc (every checkpoint's: mtp.fc is not quantised); the fp8 form (the 2^64 input scale,
// g in the tile sums' room) and the megakernel's case (the op check runs k_mtp_fc) have not run yet.

// The fc's prepared input (into shared memory, when `fresh`): both halves normed by block_rmsnorm (its
// order), times 2^64 for an fp8 fc; g passes through the tile sums' room first (the GEMV's, unused
// until the preparation is done; launch.rs sizes it for both).
__device__ const unsigned short* mtp_fc_input(const DevCtx& c, const Word& w, char* smem, bool fresh) {
  const unsigned K = c.cols[w.ops[SLOT_IN0]], K2 = c.cols[w.ops[SLOT_W0]];
  unsigned short* xs = (unsigned short*)smem;
  if (!fresh) return xs;
  float* red = (float*)(smem + xrow_bytes(K2));
  unsigned short* g = (unsigned short*)tile_red(smem, K2);
  const float s = input_scale(c, w.ops[SLOT_W0]);
  block_rmsnorm(B<unsigned short>(c, w.ops[SLOT_IN0]), B<float>(c, w.ops[SLOT_W1]), K, c.eps, xs, red, s);
  block_rmsnorm(B<unsigned short>(c, w.ops[SLOT_IN1]), B<float>(c, w.ops[SLOT_W3]), K, c.eps, g, red, 1.0f);
  block_rmsnorm(g, B<float>(c, w.ops[SLOT_W2]), K, c.eps, xs + K, red, s);
  return xs;
}

__device__ void op_mtp_fc(const DevCtx& c, const Word& w, unsigned u, char* smem, bool fresh) {
  gemv_rows(c, w, u, w.ops[SLOT_W0], smem, [&](unsigned) { return mtp_fc_input(c, w, smem, fresh); },
            [](const DevCtx&, unsigned) { return 0.f; },
            [&](const DevCtx& r, unsigned row, float v, float) { B<unsigned short>(r, w.ops[SLOT_OUT0])[row] = f2bf(v); });
}
