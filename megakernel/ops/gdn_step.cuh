// op_gdn_step (GdnStep): value head j = unit. Its q / k / v channels' causal conv (GdnConv's arithmetic,
// conv_out4), the recurrence (gdn_head, GdnRecur's), then the gated RMSNorm of its 128 outputs by warp 0
// (gated_head, GdnRecur's) into OUT0: the same bits as the split form's
// two words, in one unit (a join a layer fewer).
// The conv ring's q / k channels are written by the group's first head (j % (Hv / Hk) == 0) only; every
// head of the group reads the ring's three older slots (pos + 1 .. pos + 3 mod 4), which no unit writes
// in this step, and takes the new input from qkv, so the group's heads never race.
__device__ void op_gdn_step(const DevCtx& c, const Word& w, unsigned u, char* smem, bool) {
  const unsigned d = 128;
  unsigned j = u, hk = w.arg0, hv = w.rows, ratio = hv / hk, qk = j / ratio, key_dim = hk * d;
  unsigned pos = B<unsigned>(c, w.ops[SLOT_IN3])[0];
  const unsigned short* qkv = B<unsigned short>(c, w.ops[SLOT_IN0]);
  const float* taps = B<float>(c, w.ops[SLOT_W2]);
  unsigned short* ring = B<unsigned short>(c, w.ops[SLOT_ST1]);
  // After gdn_head's rows: the head's bf16 outputs, its gates z (bf16 pairs) and the norm weight, the
  // latter two loaded with the conv's inputs (no registers held across the recurrence).
  unsigned short* os = (unsigned short*)((float*)smem + 5 * d + 2);
  unsigned* zs = (unsigned*)((float*)smem + 5 * d + 2 + d / 2);
  float* wns = (float*)smem + 6 * d + 2;
  const unsigned lane = threadIdx.x & 31;
  gdn_head<1>(
      c, w, j, smem,
      [&](unsigned, float* qs, float* ks, float* vs) {
        static_assert(THREADS >= 192 && THREADS <= 384, "GdnStep: two conv channels of the head's 384 per thread at most");
        const unsigned t = threadIdx.x;
        const unsigned zv = t < d / 2 ? ((const unsigned*)(B<unsigned short>(c, w.ops[SLOT_IN4]) + j * d))[t] : 0u;
        const float nv = t < d ? B<float>(c, w.ops[SLOT_W3])[t] : 0.f;
        // Channel i of the head's q | k | v (384): threads take i and i + THREADS; every load of both
        // (input, three older ring slots; the taps in conv_out4) is issued before either's arithmetic.
        auto chan = [&](unsigned i) {
          unsigned seg = i / d, e = i % d;
          return seg == 0 ? qk * d + e : seg == 1 ? key_dim + qk * d + e : 2 * key_dim + j * d + e;
        };
        const unsigned i0 = threadIdx.x, i1 = threadIdx.x + THREADS;
        const bool has1 = i1 < 3 * d;
        const unsigned c0 = chan(i0), c1 = has1 ? chan(i1) : c0;
        unsigned short* r0 = ring + 4 * c0;
        unsigned short* r1 = ring + 4 * c1;
        unsigned short n0 = qkv[c0], a0 = r0[(pos + 1) % 4], b0 = r0[(pos + 2) % 4], e0 = r0[(pos + 3) % 4];
        unsigned short n1 = qkv[c1], a1 = r1[(pos + 1) % 4], b1 = r1[(pos + 2) % 4], e1 = r1[(pos + 3) % 4];
        const float* t0 = taps + 4 * c0;
        const float* t1 = taps + 4 * c1;
        float tp0[4] = {t0[0], t0[1], t0[2], t0[3]}, tp1[4] = {t1[0], t1[1], t1[2], t1[3]};
        auto put = [&](unsigned i, float v) {
          unsigned seg = i / d, e = i % d;
          (seg == 0 ? qs : seg == 1 ? ks : vs)[e] = v;
        };
        if (i0 / d == 2 || j % ratio == 0) r0[pos % 4] = n0;
        put(i0, bf2f(conv_out4(tp0, a0, b0, e0, n0)));
        if (has1) {
          if (i1 / d == 2 || j % ratio == 0) r1[pos % 4] = n1;
          put(i1, bf2f(conv_out4(tp1, a1, b1, e1, n1)));
        }
        if (t < d / 2) zs[t] = zv;
        if (t < d) wns[t] = nv;
      },
      [&](unsigned, unsigned v, unsigned short o) { os[v] = o; });
  BLOCK_SYNC();
  if (threadIdx.x < 32) {
    const unsigned* ow = (const unsigned*)os;
    const unsigned cw[2] = {ow[lane], ow[32 + lane]}, zw[2] = {zs[lane], zs[32 + lane]};
    const float wn[4] = {wns[2 * lane], wns[2 * lane + 1], wns[64 + 2 * lane], wns[65 + 2 * lane]};
    gated_head(c, cw, zw, wn, (unsigned*)(B<unsigned short>(c, w.ops[SLOT_OUT0]) + j * d));
  }
}
