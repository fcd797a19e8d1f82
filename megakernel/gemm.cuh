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
// (row g of a column's 8 tokens, its 64 bytes at the layout's permuted k, as bytes of the token's
// k-tile: 16 cq, 64 + 16 cq, 128 + 16 cq, 192 + 16 cq; layout.rs). GEMM_STAGES k-tiles in flight by
// cp.async (A: 8 x 2 KB, B: 64 x 256 bytes, rows padded to 272 bytes: a quarter warp's 16-byte reads hit
// distinct banks).

#define GEMM_THREADS 256
#define GEMM_ROWS 128   // weight rows a block
#define GEMM_TOKENS 64  // tokens a block
#define GEMM_STAGES 3   // k-tiles in flight (src/verify/gemm.rs sizes the shared memory for 3)
#ifndef GEMM_MIN_BLOCKS
#define GEMM_MIN_BLOCKS 1  // blocks per SM ptxas must fit (2: at most 128 registers)
#endif
#define GEMM_B_STRIDE 272  // bytes of a token's k-tile in shared memory (256 + 16)
#define GEMM_STAGE_BYTES (8 * 2048 + GEMM_TOKENS * GEMM_B_STRIDE)

// (cp_async16, cp_async_commit, cp_async_wait: gemv.cuh)
// 4 bytes global -> shared (through L1); zeros when !pred.
__device__ __forceinline__ void cp_async4(void* dst, const void* src, bool pred) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(smem_addr(dst)), "l"(src), "r"(pred ? 4 : 0) : "memory");
}

// A warp's 2 x 4 mma tiles of accumulators set to zero.
__device__ __forceinline__ void gemm_zero(float (&a)[2][4][4]) {
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int n = 0; n < 4; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) a[h][n][e] = 0.f;
}

// k-tile kt of the block's weight rows (n0 ..): the 8 warp tiles (row group rl = tile / 2 of the block,
// half h = tile % 2), 128 pieces of 16 bytes each, into the first 16 KB of stage st.
__device__ __forceinline__ void gemm_load_w(char* st, const unsigned char* W, unsigned N, unsigned K, unsigned n0, unsigned kt) {
  const unsigned kc = chunk_k(K), tiles = kc / 128, t = (kt * 128 % kc) / 128, tid = threadIdx.x;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const unsigned p = tid + GEMM_THREADS * i, tile = p / 128, piece = p % 128, rg = n0 / 32 + tile / 2;
    const bool ok = rg * 32 < N;
    const unsigned char* src = W + ((size_t)(ok ? rg : 0) * (K / kc) + kt * 128 / kc) * 32 * kc + ((tile % 2) * tiles + t) * 2048 + piece * 16;
    cp_async16(st + tile * 2048 + piece * 16, src, ok);
  }
}

// k-tile kt of the block's weight rows (n0 ..) and tokens (t0 ..) into stage st.
__device__ __forceinline__ void gemm_load(char* st, const unsigned char* W, const unsigned short* X, unsigned T, unsigned N, unsigned K, unsigned n0, unsigned t0, unsigned kt) {
  gemm_load_w(st, W, N, K, n0, kt);
  char* b = st + 8 * 2048;
  const unsigned tid = threadIdx.x;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    // B: token row r, its 16 pieces of 8 bf16
    const unsigned p = tid + GEMM_THREADS * i, r = p / 16, piece = p % 16, tok = t0 + r;
    const bool ok = tok < T;
    cp_async16(b + r * GEMM_B_STRIDE + piece * 16, X + (size_t)(ok ? tok : 0) * K + kt * 128 + piece * 8, ok);
  }
}

// A warp's 32 rows (rw ..) x 32 tokens (tw ..) of totals into Y [T][N] (a split's partial): D of tile h,
// column n: rows g (e 0, 1) and g + 8 (e 2, 3), tokens 2 cq and 2 cq + 1.
__device__ __forceinline__ void gemm_store(float* y, const float (&tot)[2][4][4], unsigned T, unsigned N, unsigned rw, unsigned tw, unsigned g, unsigned cq) {
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int n = 0; n < 4; ++n) {
      const unsigned row = rw + 16 * h + g, tok = tw + 8 * n + 2 * cq;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const unsigned r = row + 8 * (e >> 1), t = tok + (e & 1);
        if (t < T) y[(size_t)t * N + r] = tot[h][n][e];
      }
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
  gemm_zero(tot);
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
      const char* b = st + 8 * 2048 + (32 * wt + 8 * n + g) * GEMM_B_STRIDE + 16 * cq;
      const uint4 xa = lds16(b), xb = lds16(b + 64), xc = lds16(b + 128), xd = lds16(b + 192);
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
    gemm_zero(acc);
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
  gemm_store(Y + (size_t)z * T * N, tot, T, N, rw, t0 + 32 * wt, g, cq);
}

// A warpgroup form's warp: its 16 rows (rw ..) x 128 tokens (t0 ..) of totals into Y [T][N] (a split's
// partial): wgmma's D, n8 chunk j's four at 4 j (rows g, g + 8; tokens 2 cq, 2 cq + 1).
__device__ __forceinline__ void gemm_wg_store(float* y, const float (&tot)[64], unsigned T, unsigned N, unsigned rw, unsigned t0, unsigned g, unsigned cq) {
#pragma unroll
  for (int j = 0; j < 16; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const unsigned r = rw + g + 8 * (e >> 1), t = t0 + 8 * j + 2 * cq + (e & 1);
      if (t < T) y[(size_t)t * N + r] = tot[4 * j + e];
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

// ---- the warpgroup form (sm_90a: wgmma; k_gemm_wg, `mk gpu gemm --kernel wg`): the same numerics.
// Block: 2 warpgroups x 64 weight rows (warp w: rows 16 w .., the chunk layout's warp tile of row group
// n0 / 32 + w / 2, half w % 2, as loaded: wgmma's register A fragment is mma.sync's per warp) x GEMM_WG_TOKENS
// tokens (B from shared memory in the no-swizzle K-major canonical layout: core matrices of 8 tokens x 16
// bytes, core matrix (k chunk c of 8, token group q) at (16 c + q) x 128 bytes, so a k16 step's B starts
// at 4096 s, its two k chunks 2048 apart (LBO), its token groups 128 apart (SBO); x permuted in k as the
// weights' fragments are: gemm_wg_load). A k-tile: 8 wgmma
// m64n128k16 into the tile accumulator (the first with scale-d 0), committed and waited, then scaled into
// the running total (two sets of 64 floats a thread).
#define GEMM_WG_TOKENS 128
#define GEMM_WG_B_BYTES (GEMM_WG_TOKENS * 256)
#define GEMM_WG_STAGE_BYTES (8 * 2048 + GEMM_WG_B_BYTES)
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// The matrix descriptor (no swizzle): start address, LBO (core matrices adjacent in K), SBO (adjacent in
// N), all >> 4 (PTX ISA, "matrix descriptor"; CUTLASS make_gmma_desc's K-major INTERLEAVE case agrees).
__device__ __forceinline__ unsigned long long wg_desc(const void* p, unsigned lbo, unsigned sbo) {
  return (unsigned long long)((smem_addr(p) & 0x3FFFF) >> 4) | ((unsigned long long)(lbo >> 4) << 16) | ((unsigned long long)(sbo >> 4) << 32);
}
// d (64 floats: n8 chunk j's four at 4 j, as mma.sync's D) = (zero ? 0 : d) + A (4 registers) x B (desc).
__device__ __forceinline__ void wgmma_m64n128(float (&d)[64], unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned long long desc, unsigned accumulate) {
  asm volatile(
      "{ .reg .pred p; setp.ne.b32 p, %68, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, {%64, %65, %66, %67}, %69, p, 1, 1, 0; }"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(accumulate), "l"(desc));
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory"); }

// k-tile kt of the block's weight rows and GEMM_WG_TOKENS tokens into stage st (A as gemm_load's; B in
// the canonical layout).
__device__ __forceinline__ void gemm_wg_load(char* st, const unsigned char* W, const unsigned short* X, unsigned T, unsigned N, unsigned K, unsigned n0, unsigned t0, unsigned kt) {
  gemm_load_w(st, W, N, K, n0, kt);
  const unsigned tid = threadIdx.x;
  // B: the tokens' x in the k order the weights' fragments hold (review, session 23): wgmma's logical k
  // 2 c + 8 h + e of step s pairs with the A registers' bytes, physical k 64 (s / 4) + 32 ((s % 4) / 2)
  // + 8 c + 4 (s % 2) + 2 h + e (the chunk layout's lane order: lane c's byte b at k 32 (b / 8) + 8 c +
  // b % 8). So each 4-byte pair of x at physical p (even) goes to core matrix 2 s + h (s = 4 (p / 64) +
  // 2 ((p % 64) / 32) + (p % 8) / 4, h = (p % 4) / 2), byte 4 c (c = (p % 32) / 8) of its token's row:
  // 4-byte copies, a warp's 32 reading 128 contiguous bytes.
  char* b = st + 8 * 2048;
#pragma unroll 8
  for (int i = 0; i < GEMM_WG_TOKENS * 64 / GEMM_THREADS; ++i) {
    const unsigned w = tid + GEMM_THREADS * i, r = w / 64, p = 2 * (w % 64), tok = t0 + r;
    const unsigned s = 4 * (p / 64) + 2 * ((p % 64) / 32) + (p % 8) / 4, h = (p % 4) / 2, c = (p % 32) / 8;
    const bool ok = tok < T;
#ifdef MK_BREAK_GEMV  // negative control: the two pairs of each 4-element group of x exchanged (every product wrong)
    const unsigned px = p ^ 2;
#else
    const unsigned px = p;
#endif
    cp_async4(b + (16 * (2 * s + h) + r / 8) * 128 + (r % 8) * 16 + 4 * c, X + (size_t)(ok ? tok : 0) * K + kt * 128 + px, ok);
  }
}
#endif

// As k_gemm_fp8 (the same arguments, layouts and numerics), GEMM_WG_TOKENS tokens a block.
extern "C" __global__ void __launch_bounds__(GEMM_THREADS, 1)
k_gemm_wg(const unsigned char* __restrict__ W, const float* __restrict__ S, const unsigned short* __restrict__ X, float* __restrict__ Y, unsigned T, unsigned N, unsigned K, unsigned kps) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(16) char smem[];  // (as every kernel's; wgmma's no-swizzle operands need 16)
  const unsigned n0 = blockIdx.x * GEMM_ROWS, t0 = blockIdx.y * GEMM_WG_TOKENS, z = blockIdx.z;
  const unsigned kt0 = z * kps, nk = min(K / 128, kt0 + kps) - min(K / 128, kt0);
  const unsigned warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, cq = lane & 3;
  // the warpgroup's rows: warp w's 16 (w = 4 wg + w'); a warpgroup past N skips the arithmetic
  const unsigned rw = n0 + 16 * warp, wg0 = n0 + 64 * (warp / 4);
  const bool active = wg0 < N;
  const float* srow = S + (size_t)(min(rw, N - 1) / 128) * (K / 128);
  float tot[64], acc[64];
#pragma unroll
  for (int e = 0; e < 64; ++e) tot[e] = 0.f;
#pragma unroll
  for (int s = 0; s < GEMM_STAGES - 1; ++s) {
    if (s < nk) gemm_wg_load(smem + s * GEMM_WG_STAGE_BYTES, W, X, T, N, K, n0, t0, kt0 + s);
    cp_async_commit();
  }
  for (unsigned i = 0; i < nk; ++i) {
    cp_async_wait<GEMM_STAGES - 2>();
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // the copies visible to wgmma's reads
    __syncthreads();
    if (i + GEMM_STAGES - 1 < nk)
      gemm_wg_load(smem + (i + GEMM_STAGES - 1) % GEMM_STAGES * GEMM_WG_STAGE_BYTES, W, X, T, N, K, n0, t0, kt0 + i + GEMM_STAGES - 1);
    cp_async_commit();
    if (!active) continue;
    const char* st = smem + i % GEMM_STAGES * GEMM_WG_STAGE_BYTES;
    const uint4* a = (const uint4*)(st + warp * 2048) + lane;
    const uint4 v0 = lds16(a), v1 = lds16(a + 32), v2 = lds16(a + 64), v3 = lds16(a + 96);
    const unsigned r0[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
    const unsigned r8[8] = {v2.x, v2.y, v2.z, v2.w, v3.x, v3.y, v3.z, v3.w};
    const char* b = st + 8 * 2048;
    // every step's A widened before the first wgmma (an in-flight wgmma's A registers must not be
    // rewritten: widening into the same ones made ptxas wait for each wgmma before the next)
    unsigned aw[8][4];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      aw[j][0] = e4m3x2_widen(r0[j], 0x9180);
      aw[j][1] = e4m3x2_widen(r8[j], 0x9180);
      aw[j][2] = e4m3x2_widen(r0[j], 0xB3A2);
      aw[j][3] = e4m3x2_widen(r8[j], 0xB3A2);
    }
    wgmma_fence();
#pragma unroll
    for (int j = 0; j < 8; ++j) wgmma_m64n128(acc, aw[j][0], aw[j][1], aw[j][2], aw[j][3], wg_desc(b + 4096 * j, 2048, 128), j > 0);
    wgmma_commit();
    wgmma_wait0();
    // (the accumulator's reads below stay after the wait: an empty asm naming every register)
#pragma unroll
    for (int e = 0; e < 64; ++e) asm volatile("" : "+f"(acc[e])::"memory");
    const float sc = srow[kt0 + i] * 0x1p56f;
#pragma unroll
    for (int e = 0; e < 64; ++e) tot[e] += sc * acc[e];  // ORDER: k-tiles in order
  }
  cp_async_wait<0>();
  if (!active || rw >= N) return;
  gemm_wg_store(Y + (size_t)z * T * N, tot, T, N, rw, t0, g, cq);
#else
  __trap();  // (compiled for an architecture without wgmma: the host compiles this kernel for sm_90a)
#endif
}

// The splits' partials summed: out[i] = parts[0][i] + parts[1][i] + .. (ORDER: split by split).
extern "C" __global__ void k_gemm_reduce(const float* __restrict__ parts, float* __restrict__ out, unsigned long long count, unsigned splits) {
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < count; i += (unsigned long long)gridDim.x * blockDim.x) {
    float s = parts[i];
    for (unsigned z = 1; z < splits; ++z) s += parts[z * count + i];
    out[i] = s;
  }
}
