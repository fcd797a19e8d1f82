// op_attn_scores: unit (KV head, 256-position partition). For each of the group's query heads: the
// query (norm + RoPE of its half of q_proj, all kept in shared memory), then a warp per position: lane
// l multiplies its 8 contiguous dims (one 16-byte load of the key row) in order, the warp folds by
// butterfly, and
// bf(bf(q . k_j) / 16) is the score; then the partition's max and the sum of exp(s - max) in block
// order (thread t holds position t). The CPU reference takes both in the same order (dot_warp,
// sum_lanes).
__device__ float block_max(float v, float* red) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    float m = red[0];
    for (int w = 1; w < WARPS; ++w) m = fmaxf(m, red[w]);
    red[0] = m;
  }
  __syncthreads();
  float m = red[0];
  __syncthreads();
  return m;
}

__device__ void op_attn_scores(const DevCtx& c, const Word& w, unsigned u, char* smem, bool) {
  unsigned pos = B<unsigned>(c, w.ops[SLOT_IN1])[0], n_ctx = pos + 1;
  unsigned parts = w.arg0, group = w.arg1, kvh = u / parts, part = u % parts;
  unsigned p0 = part * ATTN_PART, p1 = min(n_ctx, p0 + ATTN_PART);
  if (p0 >= n_ctx) return;
  unsigned d = c.head_dim, kvd = c.n_kv_heads * d, max_ctx = parts * ATTN_PART;
  unsigned warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  float* q = (float*)smem;              // [group][d]
  float* red = q + group * d;           // [WARPS]
  float* sc = red + WARPS;              // [group][ATTN_PART], then the packed queries q2
  const unsigned short* kc = B<unsigned short>(c, w.ops[SLOT_ST0]);
  float scaling = 1.0f / sqrtf((float)d);
  for (unsigned hh = 0; hh < group; ++hh) {
    unsigned h = kvh * group + hh;
    head_norm(c, B<unsigned short>(c, w.ops[SLOT_IN0]) + 2 * d * h, B<float>(c, w.ops[SLOT_W0]), q + hh * d, red);
#ifdef MK_BREAK_ROPE  // negative control for gpu_small's envelope: queries rotated for the next position
    rope_head(c, q + hh * d, min(pos + 1, c.max_ctx - 1));
#else
    rope_head(c, q + hh * d, pos);
#endif
  }
  // The queries again, packed as bf16 pairs (exactly: q is bf16-valued after norm and RoPE) in the
  // order the lanes read them, [head][i][lane] = dims 8 lane + 2i, 8 lane + 2i + 1: one conflict-free
  // 32-bit read per pair per position (reading the floats, lanes 32 bytes apart, was 8-way bank
  // conflicted: the scores word took 139 us per unit at 32K).
  unsigned* q2 = (unsigned*)(sc + group * ATTN_PART);  // [group][4][32]
  for (unsigned e = threadIdx.x; e < group * 128; e += THREADS) {
    const float* qq = q + (e / 128) * d + 8 * (e % 32) + 2 * ((e / 32) % 4);
    q2[e] = (unsigned)f2bf(qq[0]) | ((unsigned)f2bf(qq[1]) << 16);
  }
  __syncthreads();
  // A warp per position, ATTN_UNROLL positions' key loads in flight per warp; each key row is read
  // once for all the group's query heads.
  for (unsigned j0 = p0 + warp; j0 < p1; j0 += ATTN_UNROLL * WARPS) {
    uint4 kv[ATTN_UNROLL];
#pragma unroll
    for (int t = 0; t < ATTN_UNROLL; ++t) {
      unsigned j = j0 + t * WARPS;
      kv[t] = j < p1 ? *(const uint4*)(kc + (size_t)j * kvd + kvh * d + 8 * lane) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int t = 0; t < ATTN_UNROLL; ++t) {
      unsigned j = j0 + t * WARPS;
      if (j >= p1) break;
      unsigned kw[4] = {kv[t].x, kv[t].y, kv[t].z, kv[t].w};
#pragma unroll
      for (unsigned hh = 0; hh < MAX_GROUP; ++hh) {
        if (hh >= group) break;
        float acc = 0.f;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          unsigned qw = q2[(hh * 4 + i) * 32 + lane];
          acc += lo_bf(qw) * lo_bf(kw[i]);
          acc += hi_bf(qw) * hi_bf(kw[i]);
        }
        float s = bf(bf(warp_sum(acc)) * scaling);
        if (lane == 0) {
          sc[hh * ATTN_PART + j - p0] = s;
          B<float>(c, w.ops[SLOT_OUT0])[(size_t)(kvh * group + hh) * max_ctx + j] = s;
        }
      }
    }
  }
  __syncthreads();
  unsigned t = threadIdx.x, n = p1 - p0;
  for (unsigned hh = 0; hh < group; ++hh) {
    float v = t < n ? sc[hh * ATTN_PART + t] : __int_as_float(0xff800000);
    float m = block_max(v, red);
    float l = block_sum(t < n ? expf(v - m) : 0.f, red);
    if (t == 0) {
      float* st = B<float>(c, w.ops[SLOT_OUT1]) + ((size_t)(kvh * group + hh) * parts + part) * 2;
      st[0] = m;
      st[1] = l;
    }
  }
}
