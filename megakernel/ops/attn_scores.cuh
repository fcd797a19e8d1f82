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
  BLOCK_SYNC();
  if (threadIdx.x == 0) {
    float m = red[0];
    for (int w = 1; w < WARPS; ++w) m = fmaxf(m, red[w]);
    red[0] = m;
  }
  BLOCK_SYNC();
  float m = red[0];
  BLOCK_SYNC();
  return m;
}

// warp_sum of eight values at once, by reduce-scatter: at the steps xor 16, 8 and 4 a lane keeps half
// of its values and sends its partner the other half, so head h's sum ends in lanes (l >> 2) & 7 == h
// after 4 + 2 + 1 + 1 + 1 = 9 shuffles (warp_sum: 5 a head). ORDER: every addition is the butterfly's own
// (a lane's partial plus its xor partner's; IEEE addition commutes, and the butterfly leaves the same
// bits in every lane), so each head's sum is warp_sum's, bit for bit.
static_assert(MAX_GROUP <= 8, "warp_sum_heads8 reduces at most eight query heads");
__device__ __forceinline__ float warp_sum_heads8(const float* a) {
  unsigned lane = threadIdx.x & 31;
  bool b4 = lane & 16, b3 = lane & 8, b2 = lane & 4;
  float b[4], c[2];
#pragma unroll
  for (int i = 0; i < 4; ++i) {  // value i of this lane: head i + 4 b4
    float send = b4 ? a[i] : a[i + 4];
    b[i] = (b4 ? a[i + 4] : a[i]) + __shfl_xor_sync(0xffffffffu, send, 16);
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {  // head i + 2 b3 + 4 b4
    float send = b3 ? b[i] : b[i + 2];
    c[i] = (b3 ? b[i + 2] : b[i]) + __shfl_xor_sync(0xffffffffu, send, 8);
  }
  float send = b2 ? c[0] : c[1];  // head b2 + 2 b3 + 4 b4 = (lane >> 2) & 7
  float d = (b2 ? c[1] : c[0]) + __shfl_xor_sync(0xffffffffu, send, 4);
  d += __shfl_xor_sync(0xffffffffu, d, 2);
  d += __shfl_xor_sync(0xffffffffu, d, 1);
  return d;
}

// The prologue: head_norm then rope_head for each of the group's query heads (q_proj rows 2 d h ..,
// gate rows between), all heads at once: every load issued first, one barrier for the heads' warp sums
// (`red`: group x WARPS floats), the same sums in the same order (each head's warp_sum, then its warp
// sums from 0 in warp order, as block_sum), the same roundings, so the same bits with 4 barriers
// instead of 5 a head and one round trip to memory instead of two a head.
__device__ void heads_norm_rope(const DevCtx& c, const unsigned short* src, const float* w, unsigned group, float* x, float* red, unsigned pos) {
  unsigned d = c.head_dim, t = threadIdx.x, rot = c.rotary_dim, half = rot / 2;
  float v[MAX_GROUP];
#pragma unroll
  for (unsigned h = 0; h < MAX_GROUP; ++h) v[h] = h < group && t < d ? bf2f(src[2 * d * h + t]) : 0.f;
  float wt = t < d ? w[t] : 0.f;
  const float* cs = c.rope + (size_t)pos * 2 * rot;
  float c0 = t < rot ? cs[t] : 0.f, c1 = t < rot ? cs[rot + t] : 0.f;
#pragma unroll
  for (unsigned h = 0; h < MAX_GROUP; ++h) {
    if (h >= group) break;
    float s = warp_sum(v[h] * v[h]);
    if ((t & 31) == 0) red[h * WARPS + (t >> 5)] = s;
  }
  BLOCK_SYNC();
  if (t < group) {
    float tot = 0.f;
    for (int k = 0; k < WARPS; ++k) tot += red[t * WARPS + k];  // ORDER: warps in order, from 0 (block_sum)
    red[group * WARPS + t] = 1.0f / sqrtf(tot * (1.0f / (float)d) + c.eps);
  }
  BLOCK_SYNC();
  if (t < d)
#pragma unroll
    for (unsigned h = 0; h < MAX_GROUP; ++h)
      if (h < group) x[h * d + t] = bf((v[h] * red[group * WARPS + h]) * (1.0f + wt));
  BLOCK_SYNC();
  float nv[MAX_GROUP];
  if (t < rot)
#pragma unroll
    for (unsigned h = 0; h < MAX_GROUP; ++h)
      if (h < group) {
        float r = t < half ? -x[h * d + t + half] : x[h * d + t - half];
        nv[h] = bf(bf(x[h * d + t] * c0) + bf(r * c1));
      }
  BLOCK_SYNC();
  if (t < rot)
#pragma unroll
    for (unsigned h = 0; h < MAX_GROUP; ++h)
      if (h < group) x[h * d + t] = nv[h];
  BLOCK_SYNC();
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
#ifdef MK_BREAK_ROPE  // negative control for gpu_small's envelope: queries rotated for the next position
  const unsigned rpos = min(pos + 1, c.max_ctx - 1);
#else
  const unsigned rpos = pos;
#endif
  heads_norm_rope(c, B<unsigned short>(c, w.ops[SLOT_IN0]) + 2 * d * kvh * group, B<float>(c, w.ops[SLOT_W0]), group, q, sc, rpos);
  // The queries again, packed as bf16 pairs (exactly: q is bf16-valued after norm and RoPE) in the
  // order the lanes read them, [head][i][lane] = dims 8 lane + 2i, 8 lane + 2i + 1: one conflict-free
  // 32-bit read per pair per position (reading the floats, lanes 32 bytes apart, was 8-way bank
  // conflicted: the scores word took 139 us per unit at 32K).
  unsigned* q2 = (unsigned*)(sc + group * ATTN_PART);  // [group][4][32]
  for (unsigned e = threadIdx.x; e < group * 128; e += THREADS) {
    const float* qq = q + (e / 128) * d + 8 * (e % 32) + 2 * ((e / 32) % 4);
    q2[e] = (unsigned)f2bf(qq[0]) | ((unsigned)f2bf(qq[1]) << 16);
  }
  BLOCK_SYNC();
#define QWORD(hh, i) q2[((hh) * 4 + (i)) * 32 + lane]
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
      float a[8];
#pragma unroll
      for (unsigned hh = 0; hh < 8; ++hh) {
        a[hh] = 0.f;
        if (hh >= group) continue;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          unsigned qw = QWORD(hh, i);
          a[hh] += lo_bf(qw) * lo_bf(kw[i]);
          a[hh] += hi_bf(qw) * hi_bf(kw[i]);
        }
      }
      float d = warp_sum_heads8(a);  // head (lane >> 2) & 7's warp_sum, bit for bit
      unsigned hh = (lane >> 2) & 7;
      if ((lane & 3) == 0 && hh < group) {
        float s = bf(bf(d) * scaling);
        sc[hh * ATTN_PART + j - p0] = s;
        B<float>(c, w.ops[SLOT_OUT0])[(size_t)(kvh * group + hh) * max_ctx + j] = s;
      }
    }
  }
  BLOCK_SYNC();
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
#undef QWORD
