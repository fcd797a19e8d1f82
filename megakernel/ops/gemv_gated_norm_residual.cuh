// op_gemv_gated_norm_residual: GDN out_proj. x = gated RMSNorm of each value head of core (IN0) with
// z (IN1) and the plain weight W1: bf(bf(w * bf(x * rstd)) * silu(z)); then h[r] = bf(h[r] + bf(W0 . x))
// or split-K partials.
#define GATED_HEADS 6  // value heads per warp the one-round-trip gated norm handles (6 x 8 warps = 48, the 27B's)
// One 128-wide head's gated RMSNorm by one warp (the one arithmetic of GemvGatedNormResidual's input and
// GdnStep): lane l holds the bf16 pairs at 2 l (cw[0], zw[0]) and 64 + 2 l (cw[1], zw[1]) of the head's
// values and gates, wn the norm weight at 2 l, 2 l + 1, 64 + 2 l, 65 + 2 l. ORDER of the sum of squares:
// the lane's four elements in that order, then the butterfly. Writes the pairs to dst[lane], dst[32 + lane] (times s: 2^64 for an fp8 GEMV).
__device__ __forceinline__ void gated_head(const DevCtx& c, const unsigned* cw, const unsigned* zw, const float* wn, unsigned* dst, float s = 1.0f) {
  const unsigned d = 128, lane = threadIdx.x & 31;
  float x[4] = {lo_bf(cw[0]), hi_bf(cw[0]), lo_bf(cw[1]), hi_bf(cw[1])};
  float zz[4] = {lo_bf(zw[0]), hi_bf(zw[0]), lo_bf(zw[1]), hi_bf(zw[1])};
  float ss = 0.f;
#pragma unroll
  for (int e = 0; e < 4; ++e) ss += x[e] * x[e];
  ss = warp_sum(ss);
  float rstd = 1.0f / sqrtf(ss * (1.0f / (float)d) + c.eps);
  unsigned o[4];
#pragma unroll
  for (int e = 0; e < 4; ++e) o[e] = f2bf(bf(wn[e] * bf(x[e] * rstd)) * silu(zz[e]) * s);
  dst[lane] = o[0] | (o[1] << 16);
  dst[32 + lane] = o[2] | (o[3] << 16);
}
// The prepared input (into shared memory, when `fresh`): the gated norm of every value head, for nx rows
// (1, or an M-row GEMV's M_ROWS: row m's in slot m, xrow_bytes apart; the rows one after another with
// no barrier between them, each row's loads before its arithmetic).
__device__ const unsigned short* gated_norm_input(const DevCtx& c, const Word& w, char* smem, bool fresh, unsigned nx = 1) {
  unsigned K = c.cols[w.ops[SLOT_IN0]];
  const float* nw = B<float>(c, w.ops[SLOT_W1]);
  unsigned d = c.gdn_dim, lane = threadIdx.x & 31;
  // Warp w normalises heads w, w + 8, ..; lane l takes the bf16 pairs at 2 l and 64 + 2 l of a head
  // (d = 128); ORDER of a head's sum of squares: the lane's four elements in that order, then the
  // butterfly. With at most GATED_HEADS heads a warp every load of the warp's heads is issued before any
  // arithmetic (one round trip to memory); else head by head. The same arithmetic either way. The host refuses a GDN head size other than 128 (GDN_HEAD_DIM).
  unsigned short* xs0 = (unsigned short*)smem;
  if (!fresh) return xs0;
  unsigned heads = K / d, warp = threadIdx.x >> 5;
  float wn[4] = {nw[2 * lane], nw[2 * lane + 1], nw[64 + 2 * lane], nw[65 + 2 * lane]};
  const float s = input_scale(c, w.ops[SLOT_W0]);
  for (unsigned m = 0; m < (M_ROWS == 1 ? 1 : nx); ++m) {
    const DevCtx r = row_view(c, m);
    const unsigned short* core = B<unsigned short>(r, w.ops[SLOT_IN0]);
    const unsigned short* z = B<unsigned short>(r, w.ops[SLOT_IN1]);
    unsigned short* xs = (unsigned short*)(smem + m * xrow_bytes(K));
    auto head = [&](unsigned hh, const unsigned* cw, const unsigned* zw) { gated_head(c, cw, zw, wn, (unsigned*)(xs + hh * d), s); };
    auto load = [&](const unsigned short* src, unsigned hh, unsigned* v) {
      const unsigned* p = (const unsigned*)(src + hh * d);
      v[0] = p[lane];
      v[1] = p[32 + lane];
    };
    if (heads <= GATED_HEADS * WARPS) {
      unsigned cw[GATED_HEADS][2], zw[GATED_HEADS][2];
#pragma unroll
      for (int j = 0; j < GATED_HEADS; ++j)
        if (warp + j * WARPS < heads) {
          load(core, warp + j * WARPS, cw[j]);
          load(z, warp + j * WARPS, zw[j]);
        }
#pragma unroll
      for (int j = 0; j < GATED_HEADS; ++j)
        if (warp + j * WARPS < heads) head(warp + j * WARPS, cw[j], zw[j]);
    } else {
      for (unsigned hh = warp; hh < heads; hh += WARPS) {
        unsigned cw[2], zw[2];
        load(core, hh, cw);
        load(z, hh, zw);
        head(hh, cw, zw);
      }
    }
  }
  BLOCK_SYNC();  // fresh is the same for the whole block
  return xs0;
}
__device__ void op_gemv_gated_norm_residual(const DevCtx& c, const Word& w, unsigned u, char* smem, bool fresh) {
  gemv_rows(c, w, u, w.ops[SLOT_W0], smem, [&](unsigned nx) { return gated_norm_input(c, w, smem, fresh, nx); },
            [&](const DevCtx& r, unsigned row) { return bf2f(B<unsigned short>(r, w.ops[SLOT_OUT0])[row]); },
            [&](const DevCtx& r, unsigned row, float v, float hr) { B<unsigned short>(r, w.ops[SLOT_OUT0])[row] = f2bf(hr + bf(v)); });
}
