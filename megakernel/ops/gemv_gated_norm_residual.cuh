// op_gemv_gated_norm_residual: GDN out_proj. x = gated RMSNorm of each value head of core (IN0) with
// z (IN1) and the plain weight W1: bf(bf(w * bf(x * rstd)) * silu(z)); then h[r] = bf(h[r] + bf(W0 . x))
// or split-K partials.
template <bool STREAM>
__device__ void op_gemv_gated_norm_residual(const DevCtx& c, const Word& w, unsigned u, char* smem, bool fresh) {
  unsigned K = c.cols[w.ops[SLOT_IN0]];
  const unsigned short* core = B<unsigned short>(c, w.ops[SLOT_IN0]);
  const unsigned short* z = B<unsigned short>(c, w.ops[SLOT_IN1]);
  const float* nw = B<float>(c, w.ops[SLOT_W1]);
  unsigned d = c.gdn_dim, lane = threadIdx.x & 31;
  auto prep = [&]() -> const unsigned short* {
    unsigned short* xs = (unsigned short*)smem;
    if (!fresh) return xs;
    for (unsigned hh = threadIdx.x >> 5; hh < K / d; hh += WARPS) {
      float ss = 0.f;
      for (unsigned i = lane; i < d; i += 32) { float v = bf2f(core[hh * d + i]); ss += v * v; }
      ss = warp_sum(ss);
      float rstd = 1.0f / sqrtf(ss * (1.0f / (float)d) + c.eps);
      for (unsigned i = lane; i < d; i += 32) {
        float normed = bf(bf2f(core[hh * d + i]) * rstd);
        float weighted = bf(nw[i] * normed);
        xs[hh * d + i] = f2bf(weighted * silu(bf2f(z[hh * d + i])));
      }
    }
    __syncthreads();  // fresh is the same for the whole block
    return xs;
  };
  unsigned short* h = B<unsigned short>(c, w.ops[SLOT_OUT0]);
  gemv_rows<STREAM>(c, w, u, w.ops[SLOT_W0], smem, prep, [&](unsigned r, float v) { h[r] = f2bf(bf2f(h[r]) + bf(v)); });
}
