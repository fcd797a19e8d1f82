// op_gdn_conv: for each channel of the unit, the current input goes to ring slot pos % 4, then
// out = bf(silu(bf(t0 x[p-3] + t1 x[p-2] + t2 x[p-1] + t3 x[p]))), taps summed oldest first.
__device__ void op_gdn_conv(const DevCtx& c, const Word& w, unsigned u, char*, bool) {
  unsigned pos = B<unsigned>(c, w.ops[SLOT_IN1])[0];
  const unsigned short* qkv = B<unsigned short>(c, w.ops[SLOT_IN0]);
  const float* t = B<float>(c, w.ops[SLOT_W0]);
  unsigned short* ring = B<unsigned short>(c, w.ops[SLOT_ST0]);
  unsigned short* out = B<unsigned short>(c, w.ops[SLOT_OUT0]);
  unsigned r0 = u * w.unit_rows, r1 = min(w.rows, r0 + w.unit_rows);
  for (unsigned ch = r0 + threadIdx.x; ch < r1; ch += THREADS) {
    unsigned short* r = ring + 4 * ch;
    r[pos % 4] = qkv[ch];
    const float* tp = t + 4 * ch;
    float acc = tp[0] * bf2f(r[(pos + 1) % 4]) + tp[1] * bf2f(r[(pos + 2) % 4]) + tp[2] * bf2f(r[(pos + 3) % 4]) + tp[3] * bf2f(r[pos % 4]);
    out[ch] = f2bf(silu(bf(acc)));
  }
}
