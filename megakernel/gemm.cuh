// Prefill's GEMM (issue 28), exact mode, as a standalone kernel for now (`mk gpu gemm` checks it against
// the CPU in f64 and times it; not yet a word of a program): Y[T][N] = X[T][K] W^T for T rows of bf16
// activations against an fp8 weight in its arena chunk layout (src/exec/gpu/layout.rs: no second copy).
//
// Numerics: the GEMV's rounding points (gemv.cuh fp8_tiles): e4m3 widened exactly to bf16 (x 2^-120), x
// pre-scaled by 2^64 in bf16 (exact), mma.sync m16n8k16 with fp32 accumulation, each 16 x 128 tile's
// fp32 sum times its 128 x 128 block scale (x 2^56) added to the row's running fp32 total, k-tiles in
// order. ORDER within a tile: one accumulator chain over its 8 k16 steps (the GEMV interleaves two and
// adds them): a prefilled row equals a decoded one to summation order, not bit for bit. Split-K: split z
// takes k-tiles [z kps, (z + 1) kps) into its own partial Y + z T N; k_gemm_reduce sums the splits in
// order z = 0, 1, .. (no atomics).
//
// Shape: a block of GEMM_THREADS (8 warps) takes 128 weight rows x 64 tokens; warp (wn, wt) = (warp % 4,
// warp / 4) rows 32 wn .. (two 16-row mma tiles: the chunk layout's warp tiles h = 0, 1 of row group
// n0 / 32 + wn) x tokens 32 wt .. (four 8-token mma columns). The weight rows sit in A (their chunk-layout
// fragments are the mma's A fragments as loaded, each widened once for the four columns), the tokens in B
// (row g of a column's 8 tokens, its 64 bytes at the layout's permuted k: 32 cq, 32 cq + 16, 128 + 32 cq,
// 144 + 32 cq). GEMM_STAGES k-tiles in flight by cp.async (A: 8 x 2 KB, B: 64 x 256 bytes, rows padded
// to 272 bytes: a quarter warp's 16-byte reads hit distinct banks).

#define GEMM_THREADS 256
#define GEMM_ROWS 128   // weight rows a block
#define GEMM_TOKENS 64  // tokens a block
#define GEMM_STAGES 3   // k-tiles in flight (src/verify/gemm.rs sizes the shared memory for 3)
#ifndef GEMM_MIN_BLOCKS
#define GEMM_MIN_BLOCKS 1  // blocks per SM ptxas must fit (2: at most 128 registers)
#endif
#define GEMM_B_STRIDE 272  // bytes of a token's k-tile in shared memory (256 + 16)
#define GEMM_STAGE_BYTES (8 * 2048 + GEMM_TOKENS * GEMM_B_STRIDE)

// 16 bytes global -> shared, not kept in L1; zeros when !pred (src-size 0).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool pred) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(smem_addr(dst)), "l"(src), "r"(pred ? 16 : 0) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N> __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }

// k-tile kt of the block's weight rows (n0 ..) and tokens (t0 ..) into stage st.
__device__ __forceinline__ void gemm_load(char* st, const unsigned char* W, const unsigned short* X, unsigned T, unsigned N, unsigned K, unsigned n0, unsigned t0, unsigned kt) {
  const unsigned kc = chunk_k(K), tiles = kc / 128, t = (kt * 128 % kc) / 128, tid = threadIdx.x;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    // A: the 8 warp tiles (row group rl = tile / 2 of the block, half h = tile % 2), 128 pieces each
    const unsigned p = tid + GEMM_THREADS * i, tile = p / 128, piece = p % 128, rg = n0 / 32 + tile / 2;
    const bool ok = rg * 32 < N;
    const unsigned char* src = W + ((size_t)(ok ? rg : 0) * (K / kc) + kt * 128 / kc) * 32 * kc + ((tile % 2) * tiles + t) * 2048 + piece * 16;
    cp_async16(st + tile * 2048 + piece * 16, src, ok);
  }
  char* b = st + 8 * 2048;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    // B: token row r, its 16 pieces of 8 bf16
    const unsigned p = tid + GEMM_THREADS * i, r = p / 16, piece = p % 16, tok = t0 + r;
    const bool ok = tok < T;
    cp_async16(b + r * GEMM_B_STRIDE + piece * 16, X + (size_t)(ok ? tok : 0) * K + kt * 128 + piece * 8, ok);
  }
}

// W: N x K fp8 in the chunk layout; S: [N / 128][K / 128] block scales; X: [T][K] bf16 times 2^64; Y:
// [gridDim.z][T][N] fp32 (split z's partial; the result itself when gridDim.z = 1); kps: k-tiles a split.
// COMPUTE false: the loads-only probe (k_gemm_fp8_loads, `mk gpu gemm`'s premise test: the memory
// pipeline alone, compiled apart so that the GEMM's own code is unchanged by it).
template <bool COMPUTE>
__device__ __forceinline__ void gemm_fp8(const unsigned char* __restrict__ W, const float* __restrict__ S, const unsigned short* __restrict__ X, float* __restrict__ Y, unsigned T, unsigned N, unsigned K, unsigned kps) {
  extern __shared__ __align__(16) char smem[];
  const unsigned n0 = blockIdx.x * GEMM_ROWS, t0 = blockIdx.y * GEMM_TOKENS, z = blockIdx.z;
  const unsigned kt0 = z * kps, nk = min(K / 128, kt0 + kps) - min(K / 128, kt0);
  const unsigned warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, cq = lane & 3;
  const unsigned wn = warp & 3, wt = warp >> 2, rw = n0 + 32 * wn;  // the warp's first weight row
  const bool active = rw < N;
  const float* srow = S + (size_t)(min(rw, N - 1) / 128) * (K / 128);
  float tot[2][4][4];
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int n = 0; n < 4; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) tot[h][n][e] = 0.f;
#pragma unroll
  for (int s = 0; s < GEMM_STAGES - 1; ++s) {
    if (s < nk) gemm_load(smem + s * GEMM_STAGE_BYTES, W, X, T, N, K, n0, t0, kt0 + s);
    cp_async_commit();
  }
  for (unsigned i = 0; i < nk; ++i) {
    cp_async_wait<GEMM_STAGES - 2>();
    __syncthreads();  // stage i landed for every thread; every warp is past stage i - 1's reads
    if (i + GEMM_STAGES - 1 < nk)
      gemm_load(smem + (i + GEMM_STAGES - 1) % GEMM_STAGES * GEMM_STAGE_BYTES, W, X, T, N, K, n0, t0, kt0 + i + GEMM_STAGES - 1);
    cp_async_commit();
    if (!active) continue;
    const char* st = smem + i % GEMM_STAGES * GEMM_STAGE_BYTES;
    // the warp's two A tiles as loaded (lane (g, cq): [0] / [1] row g, [2] / [3] row g + 8) and its four
    // token columns' x; then k16 step j of all 2 x 4 (tile, column) pairs side by side (8 independent
    // accumulator chains), each A fragment widened once for its four columns
    uint4 av[2][4];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint4* a = (const uint4*)(st + (2 * wn + h) * 2048) + lane;
#pragma unroll
      for (int q = 0; q < 4; ++q) av[h][q] = lds16(a + 32 * q);
    }
    unsigned xw[4][16];
#pragma unroll
    for (int n = 0; n < 4; ++n) {
      const char* b = st + 8 * 2048 + (32 * wt + 8 * n + g) * GEMM_B_STRIDE + 32 * cq;
      const uint4 xa = lds16(b), xb = lds16(b + 16), xc = lds16(b + 128), xd = lds16(b + 144);
#ifdef MK_BREAK_GEMV  // negative control: the two halves of x's 16-byte pieces swapped (as the GEMV's)
      const uint4 p[4] = {xb, xa, xd, xc};
#else
      const uint4 p[4] = {xa, xb, xc, xd};
#endif
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        xw[n][4 * q] = p[q].x;
        xw[n][4 * q + 1] = p[q].y;
        xw[n][4 * q + 2] = p[q].z;
        xw[n][4 * q + 3] = p[q].w;
      }
    }
    if (!COMPUTE) {
      // the loads-only probe (wrong results): the same cp.async traffic and shared-memory reads, no
      // widening or mma (their values folded into one accumulator so that the reads stay)
      unsigned v = 0;
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int q = 0; q < 4; ++q) v ^= av[h][q].x ^ av[h][q].y ^ av[h][q].z ^ av[h][q].w;
#pragma unroll
      for (int n = 0; n < 4; ++n)
#pragma unroll
        for (int q = 0; q < 16; ++q) v ^= xw[n][q];
      tot[0][0][0] += __uint_as_float(v & 0x3fffffffu);
      continue;
    }
    float acc[2][4][4];
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int n = 0; n < 4; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[h][n][e] = 0.f;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        // mma j's A: bytes 4 j .. of rows g and g + 8 (word j % 4 of load j / 4 and of load 2 + j / 4)
        const uint4 lo = av[h][j / 4], hi = av[h][2 + j / 4];
        const unsigned r0 = (j % 4 == 0) ? lo.x : (j % 4 == 1) ? lo.y : (j % 4 == 2) ? lo.z : lo.w;
        const unsigned r8 = (j % 4 == 0) ? hi.x : (j % 4 == 1) ? hi.y : (j % 4 == 2) ? hi.z : hi.w;
        const unsigned a0 = e4m3x2_widen(r0, 0x9180), a1 = e4m3x2_widen(r8, 0x9180);
        const unsigned a2 = e4m3x2_widen(r0, 0xB3A2), a3 = e4m3x2_widen(r8, 0xB3A2);
#pragma unroll
        for (int n = 0; n < 4; ++n) mma_bf16(acc[h][n], a0, a1, a2, a3, xw[n][2 * j], xw[n][2 * j + 1]);
      }
    }
    const float sc = srow[kt0 + i] * 0x1p56f;
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int n = 0; n < 4; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) tot[h][n][e] += sc * acc[h][n][e];  // ORDER: k-tiles in order
  }
  cp_async_wait<0>();
  if (!active) return;
  float* y = Y + (size_t)z * T * N;
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int n = 0; n < 4; ++n) {
      // D: rows g (e 0, 1) and g + 8 (e 2, 3) of the tile, columns (tokens) 2 cq and 2 cq + 1
      const unsigned row = rw + 16 * h + g, tok = t0 + 32 * wt + 8 * n + 2 * cq;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const unsigned r = row + 8 * (e >> 1), t = tok + (e & 1);
        if (t < T) y[(size_t)t * N + r] = tot[h][n][e];
      }
    }
}

extern "C" __global__ void __launch_bounds__(GEMM_THREADS, GEMM_MIN_BLOCKS)
k_gemm_fp8(const unsigned char* __restrict__ W, const float* __restrict__ S, const unsigned short* __restrict__ X, float* __restrict__ Y, unsigned T, unsigned N, unsigned K, unsigned kps) {
  gemm_fp8<true>(W, S, X, Y, T, N, K, kps);
}
extern "C" __global__ void __launch_bounds__(GEMM_THREADS, GEMM_MIN_BLOCKS)
k_gemm_fp8_loads(const unsigned char* __restrict__ W, const float* __restrict__ S, const unsigned short* __restrict__ X, float* __restrict__ Y, unsigned T, unsigned N, unsigned K, unsigned kps) {
  gemm_fp8<false>(W, S, X, Y, T, N, K, kps);
}

// The splits' partials summed: out[i] = parts[0][i] + parts[1][i] + .. (ORDER: split by split).
extern "C" __global__ void k_gemm_reduce(const float* __restrict__ parts, float* __restrict__ out, unsigned long long count, unsigned splits) {
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < count; i += (unsigned long long)gridDim.x * blockDim.x) {
    float s = parts[i];
    for (unsigned z = 1; z < splits; ++z) s += parts[z * count + i];
    out[i] = s;
  }
}
