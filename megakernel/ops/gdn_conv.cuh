// op_gdn_conv: for each channel of the unit, the current input goes to ring slot pos % 4, then
// out = bf(silu(bf(t0 x[p-3] + t1 x[p-2] + t2 x[p-1] + t3 x[p]))), taps summed oldest first.
// One channel's output from its taps, the three older ring values (oldest first) and the new input (the
// one arithmetic of GdnConv and GdnStep).
__device__ __forceinline__ unsigned short conv_out4(const float* tp, unsigned short x1, unsigned short x2, unsigned short x3, unsigned short x_new) {
  float t0 = tp[0], t1 = tp[1], t2 = tp[2], t3 = tp[3];
  float acc = t0 * bf2f(x1) + t1 * bf2f(x2) + t2 * bf2f(x3) + t3 * bf2f(x_new);
  return f2bf(silu(bf(acc)));
}
__device__ void op_gdn_conv(const DevCtx& c, const Word& w, unsigned u, char*, bool) {
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
