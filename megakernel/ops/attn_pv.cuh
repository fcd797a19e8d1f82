// op_attn_pv: unit (KV head, partition). Merges every partition's statistics (M = max, L = sum of
// l_p exp(m_p - M) in partition order), then o_p[d] = sum_j bf(exp(s_j - M) / L) v_j[d] over the
// partition's positions in order (thread per dim).
__device__ void op_attn_pv(const DevCtx& c, const Word& w, unsigned u, char* smem) {
  unsigned pos = B<unsigned>(c, w.ops[SLOT_IN2])[0], n_ctx = pos + 1;
  unsigned parts = w.arg0, group = w.arg1, kvh = u / parts, part = u % parts;
  unsigned p0 = part * ATTN_PART, p1 = min(n_ctx, p0 + ATTN_PART);
  if (p0 >= n_ctx) return;
  unsigned d = c.head_dim, kvd = c.n_kv_heads * d, max_ctx = parts * ATTN_PART, n_parts = (n_ctx + ATTN_PART - 1) / ATTN_PART;
  float* p = (float*)smem;
  float* ml = p + ATTN_PART;
  const unsigned short* vc = B<unsigned short>(c, w.ops[SLOT_ST1]);
  for (unsigned h = kvh * group; h < (kvh + 1) * group; ++h) {
    if (threadIdx.x == 0) {
      const float* st = B<float>(c, w.ops[SLOT_IN1]) + (size_t)h * parts * 2;
      float m = __int_as_float(0xff800000), l = 0.f;
      for (unsigned i = 0; i < n_parts; ++i) m = fmaxf(m, st[2 * i]);
      for (unsigned i = 0; i < n_parts; ++i) l += st[2 * i + 1] * expf(st[2 * i] - m);
      ml[0] = m;
      ml[1] = l;
    }
    __syncthreads();
    unsigned j = p0 + threadIdx.x;
    if (j < p1) p[threadIdx.x] = bf(expf(B<float>(c, w.ops[SLOT_IN0])[(size_t)h * max_ctx + j] - ml[0]) / ml[1]);
    __syncthreads();
    if (threadIdx.x < d) {
      float o = 0.f;
      for (unsigned i = 0; i < p1 - p0; ++i) o += p[i] * bf2f(vc[(size_t)(p0 + i) * kvd + kvh * d + threadIdx.x]);
      B<float>(c, w.ops[SLOT_OUT0])[((size_t)h * parts + part) * d + threadIdx.x] = o;
    }
    __syncthreads();
  }
}
