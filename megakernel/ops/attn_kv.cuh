// op_attn_kv: KV head h = unit: k = rope(bf((k * rstd) * (1 + w))) and v written to the caches at pos.
// RoPE: pairs (i, i + rot/2), bf(bf(x cos) + bf(rotate_half(x) sin)) with the CPU's bf16 tables.
__device__ void rope_head(const DevCtx& c, float* x, unsigned pos) {
  unsigned rot = c.rotary_dim, half = rot / 2, t = threadIdx.x;
  float v = 0.f;
  if (t < rot) {
    const float* cs = c.rope + (size_t)pos * 2 * rot;
    float r = t < half ? -x[t + half] : x[t - half];
    v = bf(bf(x[t] * cs[t]) + bf(r * cs[rot + t]));
  }
  BLOCK_SYNC();
  if (t < rot) x[t] = v;
  BLOCK_SYNC();
}

// Zero-centred RMSNorm of one 256-wide head into shared x (f32 of bf16 values).
__device__ void head_norm(const DevCtx& c, const unsigned short* src, const float* w, float* x, float* red) {
  unsigned d = c.head_dim, t = threadIdx.x;
  float v = t < d ? bf2f(src[t]) : 0.f;
  float ss = block_sum(v * v, red);
  float rstd = 1.0f / sqrtf(ss * (1.0f / (float)d) + c.eps);
  if (t < d) x[t] = bf((v * rstd) * (1.0f + w[t]));
  BLOCK_SYNC();
}

__device__ void op_attn_kv(const DevCtx& c, const Word& w, unsigned u, char* smem, bool) {
  unsigned pos = B<unsigned>(c, w.ops[SLOT_IN2])[0];
  unsigned d = c.head_dim, kvd = c.n_kv_heads * d, h = u;
  float* x = (float*)smem;
  float* red = x + d;
  head_norm(c, B<unsigned short>(c, w.ops[SLOT_IN0]) + h * d, B<float>(c, w.ops[SLOT_W0]), x, red);
  rope_head(c, x, pos);
  if (threadIdx.x < d) {
    size_t at = (size_t)pos * kvd + h * d + threadIdx.x;
    B<unsigned short>(c, w.ops[SLOT_ST0])[at] = f2bf(x[threadIdx.x]);
    B<unsigned short>(c, w.ops[SLOT_ST1])[at] = B<unsigned short>(c, w.ops[SLOT_IN1])[h * d + threadIdx.x];
  }
}
