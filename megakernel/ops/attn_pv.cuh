// op_attn_pv: unit (KV head, partition). Merges every partition's statistics for each of the group's
// query heads (M = max, L = sum of l_p exp(m_p - M) in partition order; thread hh does head hh), then
// o_p[d] = sum_j bf(exp(s_j - M) / L) v_j[d] over the partition's positions in order (thread per dim;
// each value row is loaded once for all the group's heads, ATTN_UNROLL rows in flight).
__device__ void op_attn_pv(const DevCtx& c, const Word& w, unsigned u, char* smem, bool) {
  unsigned pos = B<unsigned>(c, w.ops[SLOT_IN2])[0], n_ctx = pos + 1;
  unsigned parts = w.arg0, group = w.arg1, kvh = u / parts, part = u % parts;
  unsigned p0 = part * ATTN_PART, p1 = min(n_ctx, p0 + ATTN_PART);
  if (p0 >= n_ctx) return;
  unsigned d = c.head_dim, kvd = c.n_kv_heads * d, max_ctx = parts * ATTN_PART, n_parts = (n_ctx + ATTN_PART - 1) / ATTN_PART;
  float* p = (float*)smem;             // [group][ATTN_PART]
  float* ml = p + group * ATTN_PART;   // [group][2]
  const unsigned short* vc = B<unsigned short>(c, w.ops[SLOT_ST1]);
  if (threadIdx.x < group) {
    const float* st = B<float>(c, w.ops[SLOT_IN1]) + (size_t)(kvh * group + threadIdx.x) * parts * 2;
    float m = __int_as_float(0xff800000), l = 0.f;
    for (unsigned i = 0; i < n_parts; ++i) m = fmaxf(m, st[2 * i]);
    for (unsigned i = 0; i < n_parts; ++i) l += st[2 * i + 1] * expf(st[2 * i] - m);
    ml[2 * threadIdx.x] = m;
    ml[2 * threadIdx.x + 1] = l;
  }
  __syncthreads();
  unsigned n = p1 - p0;
  for (unsigned i = threadIdx.x; i < group * ATTN_PART; i += THREADS) {
    unsigned hh = i / ATTN_PART, jj = i % ATTN_PART;
    if (jj < n) p[i] = bf(expf(B<float>(c, w.ops[SLOT_IN0])[(size_t)(kvh * group + hh) * max_ctx + p0 + jj] - ml[2 * hh]) / ml[2 * hh + 1]);
  }
  __syncthreads();
  unsigned t = threadIdx.x;
  if (t >= d) return;
  float o[MAX_GROUP];
#pragma unroll
  for (int hh = 0; hh < MAX_GROUP; ++hh) o[hh] = 0.f;
  const unsigned short* vcol = vc + (size_t)p0 * kvd + kvh * d + t;
  for (unsigned i0 = 0; i0 < n; i0 += ATTN_UNROLL) {
    float v[ATTN_UNROLL];
#pragma unroll
    for (int k = 0; k < ATTN_UNROLL; ++k) v[k] = i0 + k < n ? bf2f(vcol[(size_t)(i0 + k) * kvd]) : 0.f;
#pragma unroll
    for (int k = 0; k < ATTN_UNROLL; ++k) {
      if (i0 + k >= n) break;
#pragma unroll
      for (int hh = 0; hh < MAX_GROUP; ++hh)
        if (hh < group) o[hh] += p[hh * ATTN_PART + i0 + k] * v[k];  // ORDER: positions in order
    }
  }
#pragma unroll
  for (int hh = 0; hh < MAX_GROUP; ++hh)
    if (hh < group) B<float>(c, w.ops[SLOT_OUT0])[((size_t)(kvh * group + hh) * parts + part) * d + t] = o[hh];
}
