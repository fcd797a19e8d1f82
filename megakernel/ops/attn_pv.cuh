// op_attn_pv: unit (KV head, partition). Merges every partition's statistics for each of the group's
// query heads (M = max, L = sum of l_p exp(m_p - M) in partition order; thread hh does head hh), then
// o_p[d] = sum_j bf(exp(s_j - M) / L) v_j[d] over the partition's positions (each value row loaded once
// for all the group's heads; the order below).
__device__ void op_attn_pv(const DevCtx& c, const Word& w, unsigned u, char* smem, bool) {
  unsigned pos = B<unsigned>(c, w.ops[SLOT_IN2])[0], n_ctx = pos + 1;
  unsigned parts = w.arg0, group = w.arg1, kvh = u / parts, part_idx = u % parts;
  unsigned p0 = part_idx * ATTN_PART, p1 = min(n_ctx, p0 + ATTN_PART);
  if (p0 >= n_ctx) return;
  unsigned d = c.head_dim, kvd = c.n_kv_heads * d, max_ctx = parts * ATTN_PART, n_parts = (n_ctx + ATTN_PART - 1) / ATTN_PART;
  float* p = (float*)smem;             // [group][ATTN_PART]
  float* ml = p + group * ATTN_PART;   // [group][2], then the position groups' sums
  const unsigned short* vc = B<unsigned short>(c, w.ops[SLOT_ST1]);
  // The group's (max, sum) pairs of every partition copied to shared memory by the whole block
  // first (the position groups' sums' room, free until the end), so the merge below reads shared
  // memory instead of a chain of n_parts global loads per head: the same values in the same order.
  const float* stats = B<float>(c, w.ops[SLOT_IN1]) + (size_t)kvh * group * parts * 2;
  float* staged = ml + 2 * MAX_GROUP;
  const bool stage = n_parts <= 2 * d;  // (group x n_parts x 2 floats fit in 4 x group x d)
  if (stage) {
    for (unsigned i = threadIdx.x; i < group * n_parts * 2; i += THREADS)
      staged[i] = stats[(size_t)(i / (2 * n_parts)) * parts * 2 + i % (2 * n_parts)];
    BLOCK_SYNC();
  }
  if (stage) {
    // The same sums from shared memory in three steps: each head's max (thread hh, partitions in
    // order), every partition's product l_p exp(m_p - M) by the whole block into its l_p's slot, then
    // each head's sum of the products in partition order (thread hh): the bits of the loop below.
    if (threadIdx.x < group) {
      const float* st = staged + threadIdx.x * n_parts * 2;
      float m = __int_as_float(0xff800000);
      for (unsigned i = 0; i < n_parts; ++i) m = fmaxf(m, st[2 * i]);
      ml[2 * threadIdx.x] = m;
    }
    BLOCK_SYNC();
    for (unsigned i = threadIdx.x; i < group * n_parts; i += THREADS) {
      float* e = staged + 2 * i;
      e[1] = e[1] * expf(e[0] - ml[2 * (i / n_parts)]);
    }
    BLOCK_SYNC();
    if (threadIdx.x < group) {
      const float* st = staged + threadIdx.x * n_parts * 2;
      float l = 0.f;
      for (unsigned i = 0; i < n_parts; ++i) l += st[2 * i + 1];
      ml[2 * threadIdx.x + 1] = l;
    }
  } else if (threadIdx.x < group) {
    const float* st = stage ? staged + threadIdx.x * n_parts * 2 : stats + (size_t)threadIdx.x * parts * 2;
    float m = __int_as_float(0xff800000), l = 0.f;
    for (unsigned i = 0; i < n_parts; ++i) m = fmaxf(m, st[2 * i]);
    for (unsigned i = 0; i < n_parts; ++i) l += st[2 * i + 1] * expf(st[2 * i] - m);
    ml[2 * threadIdx.x] = m;
    ml[2 * threadIdx.x + 1] = l;
  }
  BLOCK_SYNC();
  unsigned n = p1 - p0;
  for (unsigned i = threadIdx.x; i < group * ATTN_PART; i += THREADS) {
    unsigned hh = i / ATTN_PART, jj = i % ATTN_PART;
    if (jj < n) p[i] = bf(expf(B<float>(c, w.ops[SLOT_IN0])[(size_t)(kvh * group + hh) * max_ctx + p0 + jj] - ml[2 * hh]) / ml[2 * hh + 1]);
  }
  BLOCK_SYNC();
  // Warp w covers dims 128 (w & 1) + 4 lane .. + 4 (one 8-byte load per value row) of positions
  // p0 + w / 2, + 4, + 8, .. (PV_GROUPS = 4 position groups), PV_UNROLL rows in flight: 8 KB of the
  // unit's value rows in flight per block, against 2 KB when a thread read one dim per row. ORDER:
  // within a position group, positions in order; then the 4 groups' sums in group order (shared).
  unsigned warp = threadIdx.x >> 5, lane = threadIdx.x & 31, pg = warp >> 1, dim0 = (warp & 1) * 128 + 4 * lane;
  float o[MAX_GROUP][4];
#pragma unroll
  for (int hh = 0; hh < MAX_GROUP; ++hh)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[hh][e] = 0.f;
  const unsigned short* vrow = vc + (size_t)p0 * kvd + kvh * d + dim0;
  for (unsigned i0 = pg; i0 < n; i0 += PV_UNROLL * PV_GROUPS) {
    uint2 v[PV_UNROLL];
#pragma unroll
    for (int k = 0; k < PV_UNROLL; ++k) {
      unsigned i = i0 + k * PV_GROUPS;
      v[k] = i < n ? *(const uint2*)(vrow + (size_t)i * kvd) : make_uint2(0, 0);
    }
#pragma unroll
    for (int k = 0; k < PV_UNROLL; ++k) {
      unsigned i = i0 + k * PV_GROUPS;
      if (i >= n) break;
      float ve[4] = {lo_bf(v[k].x), hi_bf(v[k].x), lo_bf(v[k].y), hi_bf(v[k].y)};
#pragma unroll
      for (int hh = 0; hh < MAX_GROUP; ++hh) {
        if (hh >= group) break;
        float pr = p[hh * ATTN_PART + i];
#pragma unroll
        for (int e = 0; e < 4; ++e) o[hh][e] += pr * ve[e];
      }
    }
  }
  float* part = ml + 2 * MAX_GROUP;  // [PV_GROUPS][group][d]
#pragma unroll
  for (int hh = 0; hh < MAX_GROUP; ++hh) {
    if (hh >= group) break;
    *(float4*)(part + ((size_t)pg * group + hh) * d + dim0) = make_float4(o[hh][0], o[hh][1], o[hh][2], o[hh][3]);
  }
  BLOCK_SYNC();
  unsigned t = threadIdx.x;
  if (t >= d) return;
  for (unsigned hh = 0; hh < group; ++hh) {
    float sum = 0.f;
    for (unsigned g = 0; g < PV_GROUPS; ++g) sum += part[((size_t)g * group + hh) * d + t];  // ORDER: groups in order
    B<float>(c, w.ops[SLOT_OUT0])[((size_t)(kvh * group + hh) * parts + part_idx) * d + t] = sum;
  }
}
