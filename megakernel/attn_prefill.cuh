// Causal attention over a prefill step's M rows (issue 28 item 3; src/exec/gpu/prefill.rs launches it in
// place of a layer's AttnScores, and launches nothing for its AttnPv and AttnReduceGate): k_pf_attn
// takes one query head and 16 of the step's rows (positions p .. p + 15) against the KV cache's keys 0 ..
// p + 15 (AttnKv has written this step's rows), on tensor cores (mma.sync m16n8k16, bf16 in, fp32
// accumulation), and writes AttnReduceGate's output (the gated head) for its rows.
//
// Numerics: the decode words' rounding points, in other summation orders. Each query head normed and
// rotated exactly as heads_norm_rope does (the same sums in the same order: the same bf16 queries); a
// score bf(bf(q . k) / sqrt(d)) with q . k the mma's fp32 sum; two passes over the keys, as the oracle's
// softmax: the first the row's max M and sum L of exp(s - M) (each warp online over its tiles, then
// the warps' (m, l) merged in warp order: L = sum_w l_w exp(m_w - M)), the second the probabilities
// bf(exp(s - M) / L) (rounded to bf16 before PV, as the reference) times the values, fp32 sums; o =
// bf(sum of the warps' partials in warp order), then the gate bf(o * bf(sigmoid(g))). A prefilled row's
// attention equals a decoded one's to summation order (the GPU prefill check's envelope), not in bits.
//
// Shape: a block of 8 warps (PFA_SMEM bytes of shared memory, one block an SM) per (query head, 16 rows);
// the keys in tiles of 16, tile i to warp i % 8 (each warp its own K and V tiles by cp.async, its own
// running statistics and fp32 output partial, 16 rows x 256 dims in registers). The queries in shared
// memory as bf16 [16][264] (rows 528 bytes apart: ldmatrix's eight 16-byte rows fall in distinct banks),
// the tiles the same way.

#if PREFILL
#define PFA_WARPS 8
#define PFA_ROWS 16
#define PFA_KEYS 16
#define PFA_STRIDE 264                                    // bf16 a row in shared memory (256 + 8)
#define PFA_TILE_BYTES (PFA_KEYS * PFA_STRIDE * 2)         // one K or V tile
#define PFA_Q_BYTES (PFA_ROWS * PFA_STRIDE * 2)
#define PFA_SMEM (PFA_Q_BYTES + PFA_WARPS * 2 * PFA_TILE_BYTES + PFA_WARPS * PFA_ROWS * 2 * 4 + PFA_ROWS * 4)
static_assert(PFA_WARPS * PFA_ROWS * 256 * 4 <= PFA_WARPS * 2 * PFA_TILE_BYTES, "the warps' partials fit in their tiles");

__device__ __forceinline__ void ldsm_x4(unsigned (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p))
               : "memory");
}
__device__ __forceinline__ void ldsm_x4_t(unsigned (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p))
               : "memory");
}

// Keys k0 .. k0 + 15 of KV head kvh (cache [positions][kvd] bf16) into a tile, by cp.async: lane l
// copies bytes 16 l .. of every row; a key at or past n_keys is zeros.
__device__ __forceinline__ void pfa_load(unsigned short* tile, const unsigned short* cache, unsigned kvd, unsigned kvh, unsigned k0, unsigned n_keys, unsigned lane) {
#pragma unroll
  for (int i = 0; i < PFA_KEYS; ++i) {
    const unsigned key = k0 + i;
    const bool ok = key < n_keys;
    cp_async16(tile + i * PFA_STRIDE + 8 * lane, cache + (size_t)(ok ? key : 0) * kvd + kvh * 256 + 8 * lane, ok);
  }
}

// S = Q K^T for the 16 rows and a tile's 16 keys: acc[j] the n8 tile of keys 8 j .., as mma's D (rows g
// and g + 8, keys 2 cq and 2 cq + 1). ORDER: the 16 k-steps of 16 dims in order, each an mma.
__device__ __forceinline__ void pfa_scores(float (&acc)[2][4], const unsigned short* q, const unsigned short* k, unsigned lane) {
#pragma unroll
  for (int j = 0; j < 2; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[j][e] = 0.f;
  const unsigned mi = lane >> 3, ri = lane & 7;
  // ldmatrix x4's four 8 x 8 matrices: A's (rows 0-7 | 8-15) x (dims 0-7 | 8-15) as a0..a3; B's
  // (keys 0-7, dims 0-7), (keys 0-7, dims 8-15), (keys 8-15, ..) as b0, b1 of n8 tiles 0 and 1
  const unsigned short* qa = q + (ri + 8 * (mi & 1)) * PFA_STRIDE + 8 * (mi >> 1);
  const unsigned short* kb = k + (ri + 8 * (mi >> 1)) * PFA_STRIDE + 8 * (mi & 1);
#pragma unroll
  for (int kk = 0; kk < 16; ++kk) {
    unsigned a[4], b[4];
    ldsm_x4(a, qa + 16 * kk);
    ldsm_x4(b, kb + 16 * kk);
    mma_bf16(acc[0], a[0], a[1], a[2], a[3], b[0], b[1]);
    mma_bf16(acc[1], a[0], a[1], a[2], a[3], b[2], b[3]);
  }
}

// The scores of acc as the decode word rounds them, -inf where key > the row's position (causal).
__device__ __forceinline__ void pfa_mask(float (&s)[2][4], const float (&acc)[2][4], unsigned k0, const unsigned* rowpos, unsigned lane) {
  const unsigned g = lane >> 2, cq = lane & 3;
  const float scaling = 1.0f / sqrtf(256.0f);
#pragma unroll
  for (int j = 0; j < 2; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const unsigned key = k0 + 8 * j + 2 * cq + (e & 1), row = g + 8 * (e >> 1);
#ifdef MK_BREAK_ATTN  // NEGATIVE CONTROL: each row also sees the next position's key
      const bool ok = key <= rowpos[row] + 1;
#else
      const bool ok = key <= rowpos[row];
#endif
      s[j][e] = ok ? bf(bf(acc[j][e]) * scaling) : __int_as_float(0xff800000);
    }
}

// Tile kt's keys (and with V its values) loaded into the warp's tiles, then its masked scores: one
// sweep's step, both passes' (the caller syncs the warp before the tiles are loaded again).
__device__ __forceinline__ void pfa_tile(float (&s)[2][4], const unsigned short* Q, unsigned short* K, unsigned short* V, const unsigned short* kc, const unsigned short* vc, unsigned kvd, unsigned kvh, unsigned kt, unsigned n_keys, const unsigned* rowpos, unsigned lane) {
  pfa_load(K, kc, kvd, kvh, kt * PFA_KEYS, n_keys, lane);
  if (V) pfa_load(V, vc, kvd, kvh, kt * PFA_KEYS, n_keys, lane);
  cp_async_commit();
  cp_async_wait<0>();
  __syncwarp();
  float acc[2][4];
  pfa_scores(acc, Q, K, lane);
  pfa_mask(s, acc, kt * PFA_KEYS, rowpos, lane);
}

// A (query head h = blockIdx.x, rows 16 blockIdx.y ..) block of a layer's attention over the prefill
// step's m_rows rows: ws, wp, wo the layer's AttnScores (queries, q_norm, K cache, positions), AttnPv
// (V cache) and AttnReduceGate (gate, output) words.
extern "C" __global__ void __launch_bounds__(PFA_WARPS * 32, 1) k_pf_attn(const Word* prog, unsigned ws, unsigned wp, unsigned wo, DevCtx c, unsigned m_rows) {
  extern __shared__ __align__(16) char smem[];
  const Word& w = prog[ws];
  const unsigned d = 256, h = blockIdx.x, r0 = blockIdx.y * PFA_ROWS, group = w.arg1, kvh = h / group;
  const unsigned kvd = c.n_kv_heads * d, rot = c.rotary_dim, half = rot / 2;
  const unsigned warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2;
  unsigned short* Q = (unsigned short*)smem;
  unsigned short* K = (unsigned short*)(smem + PFA_Q_BYTES + warp * 2 * PFA_TILE_BYTES);
  unsigned short* V = K + PFA_TILE_BYTES / 2;
  float* stats = (float*)(smem + PFA_Q_BYTES + PFA_WARPS * 2 * PFA_TILE_BYTES);  // [warp][row][m, l]
  unsigned* rowpos = (unsigned*)(stats + PFA_WARPS * PFA_ROWS * 2);
  // The queries: row rr = warp, warp + 8 (a row past the step: zeros, position 0). heads_norm_rope's
  // arithmetic: lane l holds dims 32 i + l, the sum of squares warp i's butterfly then the 8 warps' in
  // order (block_sum), the same roundings.
  for (unsigned rr = warp; rr < PFA_ROWS; rr += PFA_WARPS) {
    unsigned short* qr = Q + rr * PFA_STRIDE;
    const unsigned row = r0 + rr;
    if (row >= m_rows) {
      for (unsigned i = lane; i < d; i += 32) qr[i] = 0;
      if (lane == 0) rowpos[rr] = 0;
      continue;
    }
    const DevCtx v = row_view(c, row);
    const unsigned short* src = B<unsigned short>(v, w.ops[SLOT_IN0]) + 2 * d * h;
    const unsigned pos = B<unsigned>(v, w.ops[SLOT_IN1])[0];
    const float* wn = B<float>(c, w.ops[SLOT_W0]);
    float x[8], tot = 0.f;
#pragma unroll
    for (int i = 0; i < 8; ++i) x[i] = bf2f(src[32 * i + lane]);
#pragma unroll
    for (int i = 0; i < 8; ++i) tot += warp_sum(x[i] * x[i]);  // ORDER: as block_sum (warp i's dims 32 i ..)
    const float inv = 1.0f / sqrtf(tot * (1.0f / (float)d) + c.eps);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      x[i] = bf((x[i] * inv) * (1.0f + wn[32 * i + lane]));
      qr[32 * i + lane] = f2bf(x[i]);
    }
    __syncwarp();
    const float* cs = c.rope + (size_t)pos * 2 * rot;
    float nv[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const unsigned t = 32 * i + lane;
      if (t < rot) {
        const float r = t < half ? -bf2f(qr[t + half]) : bf2f(qr[t - half]);
        nv[i] = bf(bf(x[i] * cs[t]) + bf(r * cs[rot + t]));
      }
    }
    __syncwarp();
#pragma unroll
    for (int i = 0; i < 8; ++i)
      if (32 * i + lane < rot) qr[32 * i + lane] = f2bf(nv[i]);
    if (lane == 0) rowpos[rr] = pos;
  }
  __syncthreads();
  unsigned n_keys = 0;  // keys 0 .. the last row's position
  for (unsigned rr = 0; rr < PFA_ROWS; ++rr) n_keys = max(n_keys, rowpos[rr] + 1);
  const unsigned tiles = (n_keys + PFA_KEYS - 1) / PFA_KEYS;
  const unsigned short* kc = B<unsigned short>(c, w.ops[SLOT_ST0]);
  const unsigned short* vc = B<unsigned short>(c, prog[wp].ops[SLOT_ST1]);
  const float NEG = __int_as_float(0xff800000);
  // Pass 1: each warp's running max and sum for rows g, g + 8 over its tiles (the quad's four lanes
  // hold a row's 16 scores a tile; ORDER: a lane's own in (j, e) order, then xor 1, xor 2).
  float mr[2] = {NEG, NEG}, lr[2] = {0.f, 0.f};
  for (unsigned kt = warp; kt < tiles; kt += PFA_WARPS) {
    float s[2][4];
    pfa_tile(s, Q, K, nullptr, kc, vc, kvd, kvh, kt, n_keys, rowpos, lane);
    __syncwarp();  // (the tile is read: the next load may overwrite it)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float tm = fmaxf(fmaxf(s[0][2 * r], s[0][2 * r + 1]), fmaxf(s[1][2 * r], s[1][2 * r + 1]));
      tm = fmaxf(tm, __shfl_xor_sync(0xffffffffu, tm, 1));
      tm = fmaxf(tm, __shfl_xor_sync(0xffffffffu, tm, 2));
      const float mn = fmaxf(mr[r], tm);
      float e = 0.f;
      if (mn != NEG) {
        e = ((expf(s[0][2 * r] - mn) + expf(s[0][2 * r + 1] - mn)) + expf(s[1][2 * r] - mn)) + expf(s[1][2 * r + 1] - mn);
      }
      e += __shfl_xor_sync(0xffffffffu, e, 1);
      e += __shfl_xor_sync(0xffffffffu, e, 2);
      if (mn != NEG) {
        lr[r] = lr[r] * expf(mr[r] - mn) + e;
        mr[r] = mn;
      }
    }
  }
  if ((lane & 3) == 0)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      stats[(warp * PFA_ROWS + g + 8 * r) * 2] = mr[r];
      stats[(warp * PFA_ROWS + g + 8 * r) * 2 + 1] = lr[r];
    }
  __syncthreads();
  // The rows' M and L: the warps' (m, l) in warp order (a warp without keys for the row adds nothing).
  float M[2], L[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const unsigned row = g + 8 * r;
    M[r] = NEG;
    for (unsigned q = 0; q < PFA_WARPS; ++q) M[r] = fmaxf(M[r], stats[(q * PFA_ROWS + row) * 2]);
    L[r] = 0.f;
    for (unsigned q = 0; q < PFA_WARPS; ++q) {
      const float mq = stats[(q * PFA_ROWS + row) * 2];
      if (mq != NEG) L[r] += stats[(q * PFA_ROWS + row) * 2 + 1] * expf(mq - M[r]);
    }
  }
  // Pass 2: the probabilities bf(exp(s - M) / L) as A fragments (mma's D layout of the two n8 tiles is
  // A's of one k16 step), times the tile's values (B by ldmatrix.trans), into o: dims 8 n + 2 cq, rows
  // g, g + 8. ORDER: the warp's tiles in order, each one mma a dim tile.
  float o[32][4];
#pragma unroll
  for (int n = 0; n < 32; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[n][e] = 0.f;
  const unsigned mi = lane >> 3, ri = lane & 7;
  const unsigned short* vb = V + (ri + 8 * (mi & 1)) * PFA_STRIDE + 8 * (mi >> 1);
  for (unsigned kt = warp; kt < tiles; kt += PFA_WARPS) {
    float s[2][4];
    pfa_tile(s, Q, K, V, kc, vc, kvd, kvh, kt, n_keys, rowpos, lane);
    unsigned a[4];
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const float p0 = s[j][2 * r] == NEG ? 0.f : bf(expf(s[j][2 * r] - M[r]) / L[r]);
        const float p1 = s[j][2 * r + 1] == NEG ? 0.f : bf(expf(s[j][2 * r + 1] - M[r]) / L[r]);
        a[2 * j + r] = (unsigned)f2bf(p0) | ((unsigned)f2bf(p1) << 16);
      }
#pragma unroll
    for (int n2 = 0; n2 < 16; ++n2) {
      unsigned b[4];
      ldsm_x4_t(b, vb + 16 * n2);
      mma_bf16(o[2 * n2], a[0], a[1], a[2], a[3], b[0], b[1]);
      mma_bf16(o[2 * n2 + 1], a[0], a[1], a[2], a[3], b[2], b[3]);
    }
    __syncwarp();
  }
  __syncthreads();  // every warp is done with its tiles: their room takes the partials
  float* part = (float*)(smem + PFA_Q_BYTES);  // [warp][row][256]
  const unsigned cq = lane & 3;
#pragma unroll
  for (int n = 0; n < 32; ++n) {
    *(float2*)(part + (warp * PFA_ROWS + g) * d + 8 * n + 2 * cq) = make_float2(o[n][0], o[n][1]);
    *(float2*)(part + (warp * PFA_ROWS + g + 8) * d + 8 * n + 2 * cq) = make_float2(o[n][2], o[n][3]);
  }
  __syncthreads();
  const Word& wg = prog[wo];
  const unsigned t = threadIdx.x;  // dim t
  for (unsigned rr = 0; rr < PFA_ROWS && r0 + rr < m_rows; ++rr) {
    float sum = 0.f;
    for (unsigned q = 0; q < PFA_WARPS; ++q) sum += part[(q * PFA_ROWS + rr) * d + t];  // ORDER: warps in order
    const DevCtx v = row_view(c, r0 + rr);
    const float gate = bf2f(B<unsigned short>(v, wg.ops[SLOT_IN1])[2 * d * h + d + t]);
    B<unsigned short>(v, wg.ops[SLOT_OUT0])[h * d + t] = f2bf(bf(sum) * bf(sigm(gate)));
  }
}
#endif
