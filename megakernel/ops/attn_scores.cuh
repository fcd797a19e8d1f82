// op_attn_scores: unit (KV head, 256-position partition). For each of the group's query heads: the
// query (norm + RoPE of its half of q_proj), scores bf(bf(q . k_j) / 16) for the partition's positions
// (thread per position, dims in order), and the partition's max and sum of exp(s - max) in position order.
__device__ void op_attn_scores(const DevCtx& c, const Word& w, unsigned u, char* smem) {
  unsigned pos = B<unsigned>(c, w.ops[SLOT_IN1])[0], n_ctx = pos + 1;
  unsigned parts = w.arg0, group = w.arg1, kvh = u / parts, part = u % parts;
  unsigned p0 = part * ATTN_PART, p1 = min(n_ctx, p0 + ATTN_PART);
  if (p0 >= n_ctx) return;
  unsigned d = c.head_dim, kvd = c.n_kv_heads * d, max_ctx = parts * ATTN_PART;
  float* q = (float*)smem;
  float* red = q + d;
  float* sc = red + WARPS;
  const unsigned short* kc = B<unsigned short>(c, w.ops[SLOT_ST0]);
  float scaling = 1.0f / sqrtf((float)d);
  for (unsigned h = kvh * group; h < (kvh + 1) * group; ++h) {
    head_norm(c, B<unsigned short>(c, w.ops[SLOT_IN0]) + 2 * d * h, B<float>(c, w.ops[SLOT_W0]), q, red);
    rope_head(c, q, pos);
    unsigned j = p0 + threadIdx.x;
    if (j < p1) {
      const unsigned short* k = kc + (size_t)j * kvd + kvh * d;
      float s = 0.f;
      for (unsigned i = 0; i < d; ++i) s += q[i] * bf2f(k[i]);
      s = bf(bf(s) * scaling);
      sc[threadIdx.x] = s;
      B<float>(c, w.ops[SLOT_OUT0])[(size_t)h * max_ctx + j] = s;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      float m = __int_as_float(0xff800000), l = 0.f;
      for (unsigned i = 0; i < p1 - p0; ++i) m = fmaxf(m, sc[i]);
      for (unsigned i = 0; i < p1 - p0; ++i) l += expf(sc[i] - m);
      float* st = B<float>(c, w.ops[SLOT_OUT1]) + ((size_t)h * parts + part) * 2;
      st[0] = m;
      st[1] = l;
    }
    __syncthreads();
  }
}
