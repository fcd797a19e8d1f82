// op_gdn_conv: for each channel of the unit, the current input goes to ring slot pos % 4, then
// out = bf(silu(bf(t0 x[p-3] + t1 x[p-2] + t2 x[p-1] + t3 x[p]))), taps summed oldest first.
// One channel's output from its taps, the three older ring values (oldest first) and the new input (the
// one arithmetic of GdnConv and GdnStep).
__device__ __forceinline__ unsigned short conv_out4(const float* tp, unsigned short x1, unsigned short x2, unsigned short x3, unsigned short x_new) {
  float t0 = tp[0], t1 = tp[1], t2 = tp[2], t3 = tp[3];
  float acc = t0 * bf2f(x1) + t1 * bf2f(x2) + t2 * bf2f(x3) + t3 * bf2f(x_new);
  return f2bf(silu(bf(acc)));
}
// The deferred form (M-row programs, ISA `GdnConv`; M_ROWS > 1, every row in one unit on row 0's view):
// for each channel, the previous step's first n = ctrl[0][CTRL_COMMIT] kept inputs go into the ring at
// positions pos - n .. pos - 1 (the commit), then row m's output from the committed ring and rows < m
// (a window of three in registers), the ring left as committed, row m's input kept (ST1 [M][channels])
// for the next step's commit. conv_out4 for every output: the bits of one-row steps.
#if !PREFILL
__device__ void gdn_conv_rows(const DevCtx& c, const Word& w, unsigned u) {
  const unsigned* ctrl = B<unsigned>(c, w.ops[SLOT_IN1]);
  const unsigned pos = ctrl[0], n = ctrl[CTRL_COMMIT];
  const float* t = B<float>(c, w.ops[SLOT_W0]);
  unsigned short* ring = B<unsigned short>(c, w.ops[SLOT_ST0]);
  unsigned short* kept = B<unsigned short>(c, w.ops[SLOT_ST1]);
  const unsigned r0 = u * w.unit_rows, r1 = min(w.rows, r0 + w.unit_rows), C = w.rows;
  for (unsigned ch = r0 + threadIdx.x; ch < r1; ch += THREADS) {
    unsigned short* r = ring + 4 * ch;
    // Every load first (the ring, the n kept inputs, the M rows' inputs, the taps: one round trip; a
    // load after a store it may alias would wait for it, a round trip a row), then the arithmetic and
    // the stores. The values the ring would hold after the commit: the committed window's position
    // pos - b (b = 1..3) is kept row n - b from pos - n on, the ring's slot before it.
    unsigned short old[4], kx[M_ROWS], x[M_ROWS];
#pragma unroll
    for (unsigned i = 0; i < 4; ++i) old[i] = r[i];
#pragma unroll
    for (unsigned i = 0; i < M_ROWS; ++i) {
      kx[i] = i < n ? kept[i * C + ch] : (unsigned short)0;
      x[i] = B<unsigned short>(row_view(c, i), w.ops[SLOT_IN0])[ch];
    }
    const float* tp = t + 4 * ch;
    const float taps[4] = {tp[0], tp[1], tp[2], tp[3]};
    auto back = [&](unsigned b) {
      unsigned short v = old[(pos + 4 - b) % 4];
#pragma unroll
      for (unsigned i = 0; i < M_ROWS; ++i)
        if (i < n && i + b == n) v = kx[i];
      return v;
    };
    unsigned short x1 = back(3), x2 = back(2), x3 = back(1);
    // the commit: position pos - n + i (mod 4; n <= M <= 8), in order (a later row's write wins a slot)
#pragma unroll
    for (unsigned i = 0; i < M_ROWS; ++i)
      if (i < n) r[(pos + 3 * n + i) % 4] = kx[i];
#pragma unroll
    for (unsigned m = 0; m < M_ROWS; ++m) {
      B<unsigned short>(row_view(c, m), w.ops[SLOT_OUT0])[ch] = conv_out4(taps, x1, x2, x3, x[m]);
      kept[m * C + ch] = x[m];
      x1 = x2;
      x2 = x3;
      x3 = x[m];
    }
  }
}
#else
__device__ void gdn_conv_rows(const DevCtx&, const Word&, unsigned) { __trap(); }
#endif
// The prefill form (PREFILL: a prefill program keeps every row, nothing deferred): row m's output is
// conv_out4 of the window before it (rows m - 3 .. m - 1's inputs, the ring's values for positions
// before pos) and its input goes to ring slot (pos + m) % 4: the bits and the ring of M one-row steps.
// No output depends on another, so the unit's (channel, row) pairs run side by side (a thread a pair,
// not a channel's rows in order: a unit's 128 channels x 64 rows keep every thread busy); the ring is
// written after a barrier, once every read of it is done.
__device__ void gdn_conv_prefill(const DevCtx& c, const Word& w, unsigned u) {
  const unsigned pos = B<unsigned>(c, w.ops[SLOT_IN1])[0];
  const float* t = B<float>(c, w.ops[SLOT_W0]);
  unsigned short* ring = B<unsigned short>(c, w.ops[SLOT_ST0]);
  const unsigned r0 = u * w.unit_rows, r1 = min(w.rows, r0 + w.unit_rows), nch = r1 > r0 ? r1 - r0 : 0u, M = w.m_rows;
  for (unsigned i = threadIdx.x; i < nch * M; i += THREADS) {
    const unsigned ch = r0 + i % nch, m = i / nch;
    const unsigned short* r = ring + 4 * ch;
    // the input at position pos + m - j (j = 1 .. 3): row m - j's, or the ring's (slot (pos + m - j) % 4)
    auto back = [&](unsigned j) -> unsigned short {
      return m >= j ? B<unsigned short>(row_view(c, m - j), w.ops[SLOT_IN0])[ch] : r[(pos + m + 4 - j) % 4];
    };
    const unsigned short x1 = back(3), x2 = back(2), x3 = back(1);
    const unsigned short x = B<unsigned short>(row_view(c, m), w.ops[SLOT_IN0])[ch];
    const float* tp = t + 4 * ch;
    const float taps[4] = {tp[0], tp[1], tp[2], tp[3]};
    B<unsigned short>(row_view(c, m), w.ops[SLOT_OUT0])[ch] = conv_out4(taps, x1, x2, x3, x);
  }
  BLOCK_SYNC();  // every read of the ring above before the writes below
  // the last min(M, 4) rows' inputs into their slots (what M one-row steps leave there)
  for (unsigned i = threadIdx.x; i < nch * 4; i += THREADS) {
    const unsigned ch = r0 + i / 4, j = i % 4;
    if (M + j < 4) continue;  // (M < 4: only rows 0 .. M - 1 move the ring)
    const unsigned m = M + j - 4;
    ring[4 * ch + (pos + m) % 4] = B<unsigned short>(row_view(c, m), w.ops[SLOT_IN0])[ch];
  }
}
__device__ void op_gdn_conv(const DevCtx& c, const Word& w, unsigned u, char*, bool) {
  if (PREFILL) {
    gdn_conv_prefill(c, w, u);
    return;
  }
  if (M_ROWS > 1) {
    gdn_conv_rows(c, w, u);
    return;
  }
  unsigned pos = B<unsigned>(c, w.ops[SLOT_IN1])[0];
  const unsigned short* qkv = B<unsigned short>(c, w.ops[SLOT_IN0]);
  const float* t = B<float>(c, w.ops[SLOT_W0]);
  unsigned short* ring = B<unsigned short>(c, w.ops[SLOT_ST0]);
  unsigned short* out = B<unsigned short>(c, w.ops[SLOT_OUT0]);
  unsigned r0 = u * w.unit_rows, r1 = min(w.rows, r0 + w.unit_rows);
  for (unsigned ch = r0 + threadIdx.x; ch < r1; ch += THREADS) {
    unsigned short* r = ring + 4 * ch;
    // Every load first (the input, the three older ring slots, the taps: one round trip), then the
    // input into its slot. The same sum as reading it back from the ring.
    unsigned short x_new = qkv[ch], x1 = r[(pos + 1) % 4], x2 = r[(pos + 2) % 4], x3 = r[(pos + 3) % 4];
    const float* tp = t + 4 * ch;
    const float taps[4] = {tp[0], tp[1], tp[2], tp[3]};
    r[pos % 4] = x_new;
    out[ch] = conv_out4(taps, x1, x2, x3, x_new);
  }
}
