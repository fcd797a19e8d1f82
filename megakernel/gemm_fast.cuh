// Prefill's GEMM in fast mode (issue 28 item 1, W8A8): the activations quantised to e4m3 per token and
// 128-wide k-group, fp8 x fp8 on tensor cores (mma.sync m16n8k32 e4m3, twice bf16's rate), against the
// same fp8 weights in their arena chunk layout (no second copy). `mk gpu gemm --kernel fast` checks and
// times it alone; a prefill step runs it when the executor is in fast mode (src/exec/gpu/prefill.rs).
//
// Numerics (the CPU reference's `Activations::Fp8Dynamic`, src/model/ops.rs, which follows the
// checkpoint's `activation_scheme: dynamic`): per token and k-group, s = max(max|x|, 1e-10) / 448 (IEEE
// division) and x_q = e4m3(x / s) (round to nearest even, saturating: cvt.rn.satfinite); a 16 x 128 tile's
// fp32 dot of e4m3 values, times s, times the weight's block scale (left to right, as the reference's
// `dot * s * s_w`), added to the row's running fp32 total, k-tiles in order. ORDER within a tile: one
// accumulator chain over its 4 k32 steps, each mma's own order inside; the reference sums a tile's 128
// products left to right and a k-group's tiles before the groups. Not equal to summation order alone:
// this card class's fp8 tensor cores add in fewer bits than fp32 (about 13 of mantissa, the products
// aligned to the largest), so a tile's sum is good to ~1e-4 of its terms' magnitudes; adding each
// 128-wide tile into an fp32 total is the usual bound on that (DeepSeek-V3's promotion interval; `mk gpu
// gemm` checks against the terms' magnitudes). Split-K as k_gemm_fp8 (partials, k_gemm_reduce in split
// order).
//
// Shape: k_gemm_fp8's (a block of 8 warps, 128 weight rows x 64 tokens; warp (wn, wt) rows 32 wn .. x
// tokens 32 wt ..). The weights' fragments are the e4m3 mma's A fragments as loaded, with no widening: a
// lane's row-g word j (bytes at the k the bf16 form's mma j takes) is a0 of k32 step j / 2 when j is even
// and a2 when odd (row g + 8: a1, a3). x is [T][K] e4m3 in natural k order: lane (g, cq) reads its token's
// 8 bytes at k 32 q + 8 cq (q = 0 .. 3) of the k-tile, which are the k of the weight words' bytes (the
// bf16 form's x pieces at half the bytes). Shared memory a stage: the weights' 8 warp tiles (16 KB), 64
// tokens x GEMM_F_STRIDE bytes (the 128 of the k-tile, padded: an 8-byte read of 16 lanes hits distinct
// banks), the 64 tokens' scales of the k-tile.

#define GEMM_F_STRIDE 160
#define GEMM_F_STAGE_BYTES (8 * 2048 + GEMM_TOKENS * GEMM_F_STRIDE + GEMM_TOKENS * 4)

__device__ __forceinline__ void mma_e4m3(float (&d)[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0, unsigned b1) {
  asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// 8 bytes of shared memory.
__device__ __forceinline__ uint2 lds8(const void* p) {
  uint2 v;
  asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "r"(smem_addr(p)));
  return v;
}

// k-tile kt of the block's weight rows (as gemm_load) and tokens' e4m3 x and scales into stage st.
__device__ __forceinline__ void gemm_fast_load(char* st, const unsigned char* W, const unsigned char* Xq, const float* Xs, unsigned T, unsigned N, unsigned K, unsigned n0, unsigned t0, unsigned kt) {
  gemm_load_w(st, W, N, K, n0, kt);
  char* b = st + 8 * 2048;
  const unsigned tid = threadIdx.x;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    // token row r, its 8 pieces of 16 e4m3
    const unsigned p = tid + GEMM_THREADS * i, r = p / 8, piece = p % 8, tok = t0 + r;
    const bool ok = tok < T;
    cp_async16(b + r * GEMM_F_STRIDE + piece * 16, Xq + (size_t)(ok ? tok : 0) * K + kt * 128 + piece * 16, ok);
  }
  if (tid < GEMM_TOKENS) {
    const unsigned tok = t0 + tid;
    const bool ok = tok < T;
    cp_async4(b + GEMM_TOKENS * GEMM_F_STRIDE + 4 * tid, Xs + (size_t)(ok ? tok : 0) * (K / 128) + kt, ok);
  }
}

// W, S as k_gemm_fp8's; Xq: [T][K] e4m3; Xs: [T][K / 128] the activations' scales; Y, kps as k_gemm_fp8's.
extern "C" __global__ void __launch_bounds__(GEMM_THREADS, GEMM_MIN_BLOCKS)
k_gemm_fast(const unsigned char* __restrict__ W, const float* __restrict__ S, const unsigned char* __restrict__ Xq, const float* __restrict__ Xs, float* __restrict__ Y, unsigned T, unsigned N, unsigned K, unsigned kps) {
  extern __shared__ __align__(16) char smem[];
  const unsigned n0 = blockIdx.x * GEMM_ROWS, t0 = blockIdx.y * GEMM_TOKENS, z = blockIdx.z;
  const unsigned kt0 = z * kps, nk = min(K / 128, kt0 + kps) - min(K / 128, kt0);
  const unsigned warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, cq = lane & 3;
  const unsigned wn = warp & 3, wt = warp >> 2, rw = n0 + 32 * wn;
  const bool active = rw < N;
  const float* srow = S + (size_t)(min(rw, N - 1) / 128) * (K / 128);
  float tot[2][4][4];
  gemm_zero(tot);
#pragma unroll
  for (int s = 0; s < GEMM_STAGES - 1; ++s) {
    if (s < nk) gemm_fast_load(smem + s * GEMM_F_STAGE_BYTES, W, Xq, Xs, T, N, K, n0, t0, kt0 + s);
    cp_async_commit();
  }
  for (unsigned i = 0; i < nk; ++i) {
    cp_async_wait<GEMM_STAGES - 2>();
    __syncthreads();  // stage i landed for every thread; every warp is past stage i - 1's reads
    if (i + GEMM_STAGES - 1 < nk)
      gemm_fast_load(smem + (i + GEMM_STAGES - 1) % GEMM_STAGES * GEMM_F_STAGE_BYTES, W, Xq, Xs, T, N, K, n0, t0, kt0 + i + GEMM_STAGES - 1);
    cp_async_commit();
    if (!active) continue;
    const char* st = smem + i % GEMM_STAGES * GEMM_F_STAGE_BYTES;
    // the warp's two A tiles as loaded: r0 words 0 .. 7 of row g, r8 of row g + 8
    unsigned r0[2][8], r8[2][8];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint4* a = (const uint4*)(st + (2 * wn + h) * 2048) + lane;
      const uint4 v0 = lds16(a), v1 = lds16(a + 32), v2 = lds16(a + 64), v3 = lds16(a + 96);
      const unsigned lo[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
      const unsigned hi[8] = {v2.x, v2.y, v2.z, v2.w, v3.x, v3.y, v3.z, v3.w};
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        r0[h][j] = lo[j];
        r8[h][j] = hi[j];
      }
    }
    // the four token columns' x (word j: the e4m3 of weight word j's k) and scales (this lane's D
    // columns: tokens 2 cq and 2 cq + 1 of each column)
    unsigned xw[4][8];
    float xs[4][2];
    const char* b = st + 8 * 2048;
    const float* sx = (const float*)(b + GEMM_TOKENS * GEMM_F_STRIDE);
#pragma unroll
    for (int n = 0; n < 4; ++n) {
      const char* bt = b + (32 * wt + 8 * n + g) * GEMM_F_STRIDE + 8 * cq;
#pragma unroll
      for (int q = 0; q < 4; ++q) {
#ifdef MK_BREAK_GEMV  // negative control: x's pieces q and q ^ 1 swapped (the k of the weights' words lost)
        const uint2 v = lds8(bt + 32 * (q ^ 1));
#else
        const uint2 v = lds8(bt + 32 * q);
#endif
        xw[n][2 * q] = v.x;
        xw[n][2 * q + 1] = v.y;
      }
      xs[n][0] = sx[32 * wt + 8 * n + 2 * cq];
      xs[n][1] = sx[32 * wt + 8 * n + 2 * cq + 1];
    }
    float acc[2][4][4];
    gemm_zero(acc);
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int n = 0; n < 4; ++n)
          mma_e4m3(acc[h][n], r0[h][2 * j], r8[h][2 * j], r0[h][2 * j + 1], r8[h][2 * j + 1], xw[n][2 * j], xw[n][2 * j + 1]);
    const float sw = srow[kt0 + i];
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int n = 0; n < 4; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) tot[h][n][e] += acc[h][n][e] * xs[n][e & 1] * sw;  // ORDER: k-tiles in order
  }
  cp_async_wait<0>();
  if (!active) return;
  gemm_store(Y + (size_t)z * T * N, tot, T, N, rw, t0 + 32 * wt, g, cq);
}

// The activations of a GEMM in fast mode: X [M][K] (bf16 times 2^64, as k_pf_x writes them) quantised per
// row and 128-wide k-group into Xq, e4m3 in the bulk GEMM's tiled layout (gemm_bulk.cuh: chunk 2 J + h's
// byte 4 c + e of a row holds k 32 J + 8 c + 4 h + e of the k-tile), and Xs [K / 128][Tp]: a warp a (row,
// group), lane l values 4 l .. 4 l + 3 (J = l / 8, c = (l % 8) / 2, h = l % 2: its 4 bytes contiguous;
// the group's max is exact in any order). Rows M .. Tp of Xq hold whatever a wider
// word left (their columns are never stored); their scales are never written (zeros).
extern "C" __global__ void __launch_bounds__(THREADS) k_pf_quant(const unsigned short* __restrict__ X, unsigned char* __restrict__ Xq, float* __restrict__ Xs, unsigned M, unsigned K, unsigned Tp) {
  const unsigned groups = K / 128, lane = threadIdx.x & 31;
  const unsigned gi = blockIdx.x * WARPS + (threadIdx.x >> 5);
  if (gi >= M * groups) return;
  const unsigned m = gi / groups, kg = gi % groups;
  const uint2 raw = *(const uint2*)(X + (size_t)m * K + kg * 128 + 4 * lane);
  float v[4] = {lo_bf(raw.x) * 0x1p-64f, hi_bf(raw.x) * 0x1p-64f, lo_bf(raw.y) * 0x1p-64f, hi_bf(raw.y) * 0x1p-64f};
  float amax = fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3])));
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const float s = fmaxf(amax, 1e-10f) / 448.f;
  unsigned short p01, p23;
  // cvt packs its first source into the upper byte
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(p01) : "f"(v[1] / s), "f"(v[0] / s));
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(p23) : "f"(v[3] / s), "f"(v[2] / s));
  const unsigned J = lane / 8, c = (lane % 8) / 2, h = lane % 2;
  const size_t at = ((size_t)(m / 8) * (K / 16) + kg * 8 + 2 * J + h) * 128 + (m % 8) * 16 + 4 * c;
  *(unsigned*)(Xq + at) = (unsigned)p01 | ((unsigned)p23 << 16);
  if (lane == 0) Xs[(size_t)kg * Tp + m] = s;
}
