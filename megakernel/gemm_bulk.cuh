// PROBE (issue 28, "the GEMM's next design"): prefill's GEMM by bulk copies and warpgroup MMA (sm_90a),
// in both numerics modes, as standalone kernels for `mk gpu gemm --kernel fastwg` (fast mode: e4m3
// activations, wgmma e4m3 m64n128k32) and `--kernel wgbulk` (exact mode: bf16 activations times 2^64,
// the weights widened as every exact form does, wgmma bf16 m64n128k16), not yet prefill launches. The
// question they answer: do loads that cost no instructions (cp.async.bulk into a ring of stages, a
// producer warp, mbarriers) lift the GEMM off the load-issue ceiling the mma.sync forms share (session 28:
// loads alone 63 % of the time; the cp.async wgmma form no faster)? Numerics: k_gemm_fast's (fast) and
// k_gemm_fp8's (exact): a tile's sum times its scales, tiles in order.
//
// Block: 288 threads; warps 0-7 are two consumer warpgroups (warpgroup c: weight rows n0 + 64 c .. + 63,
// warp w of it the chunk layout's warp tile 4 c + w, as gemm_load_w lays them), warp 8 the producer.
// GEMM_FW_STAGES stages, each: the 8 weight warp tiles (16 KB, 8 bulk copies of 2 KB: the chunk
// layout's tiles are contiguous), 128 tokens' k-tile of x (16 copies, a token group's k-tile each: 1 KB
// of e4m3 or 2 KB of bf16) and in fast mode their scales (512 B, one copy). full[s] (1 arrival: the
// producer's expect_tx, then the copies' bytes) and empty[s] (8 arrivals: lane 0 of each consumer warp
// once its wgmma have read the stage).
//
// x's layout for these kernels (the producer of x writes it so: `mk gpu gemm` on the host, here): wgmma's
// no-swizzle K-major core matrices of 8 tokens x 16 bytes, [Tp / 8][K bytes / 16][8 tokens][16 bytes], Tp
// = T rounded up to 128 (rows past T any finite values: their columns are never stored), and within a k-tile the k order of the weights' fragments
// (the chunk layout's lane order: lane c's A bytes of row g at k 32 (b / 8) + 8 c + b % 8). Fast mode:
// chunk 2 J + h's byte 4 c + e holds physical k 32 J + 8 c + 4 h + e (k32 step J, c = 0 .. 3, e = 0 .. 3:
// lane c's a0 / a2 of step J); exact mode: chunk 2 s + h's element 2 c + e holds physical k 64 (s / 4) +
// 32 ((s % 4) / 2) + 8 c + 4 (s % 2) + 2 h + e (k16 step s, e = 0, 1: gemm_wg_load's order). A token
// group's k-tile (8 or 16 chunks) is contiguous; in shared memory token group q's sits at q x its bytes,
// chunk j's at 128 j: step j's descriptor starts at 256 j, LBO 128 (its two k chunks), SBO the group's
// bytes. Fast mode's scales: [K / 128][Tp] floats.

#define GEMM_FW_STAGES 4
#define GEMM_FW_TOKENS 128
#define GEMM_FW_THREADS 288
// a stage's bytes: the weights, x (e4m3 or bf16), fast mode's scales (the host's smem: GEMM_FW_STAGES
// stages, then 16 bytes of barriers a stage)
#define GEMM_FW_STAGE_BYTES(FAST) (8 * 2048 + GEMM_FW_TOKENS * ((FAST) ? 128 : 256) + ((FAST) ? GEMM_FW_TOKENS * 4 : 0))

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// (mbar_init, mbar_expect, mbar_arrive, bulk_copy: ring.cuh.) Until the phase of parity `parity` of
// barrier b has completed; a hang (2^26 looks) traps, so that the launch fails instead of never ending.
__device__ __forceinline__ void mbar_wait_or_trap(unsigned long long* b, unsigned parity) {
  for (unsigned long long i = 0; i < (1ull << 26); ++i) {
    unsigned ok;
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                 : "=r"(ok) : "r"(smem_addr(b)), "r"(parity) : "memory");
    if (ok) return;
  }
  __trap();
}
// d (64 floats, as wgmma_m64n128's) = (accumulate ? d : 0) + A (4 registers of e4m3) x B (desc), k32.
__device__ __forceinline__ void wgmma_e4m3_m64n128(float (&d)[64], unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned long long desc, unsigned accumulate) {
  asm volatile(
      "{ .reg .pred p; setp.ne.b32 p, %68, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, {%64, %65, %66, %67}, %69, p, 1, 1; }"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(accumulate), "l"(desc));
}
#endif

// W, S as k_gemm_fp8's (N a multiple of 128); X (e4m3 or bf16 times 2^64) and Xs (fast mode) in the layouts
// above (Tp tokens); Y, kps as k_gemm_fp8's.
template <bool FAST>
__device__ __forceinline__ void gemm_bulk(const unsigned char* __restrict__ W, const float* __restrict__ S, const unsigned char* __restrict__ X, const float* __restrict__ Xs, float* __restrict__ Y, unsigned T, unsigned Tp, unsigned N, unsigned K, unsigned kps) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(16) char smem[];  // (as every kernel's: the copies and descriptors need 16)
  constexpr unsigned SB = GEMM_FW_STAGE_BYTES(FAST), XB = FAST ? 128 : 256;  // stage bytes, a token's x bytes a k-tile
  unsigned long long* full = (unsigned long long*)(smem + GEMM_FW_STAGES * SB);
  unsigned long long* empty = full + GEMM_FW_STAGES;
  const unsigned n0 = blockIdx.x * GEMM_ROWS, t0 = blockIdx.y * GEMM_FW_TOKENS, z = blockIdx.z;
  const unsigned kt0 = z * kps, nk = min(K / 128, kt0 + kps) - min(K / 128, kt0);
  const unsigned warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, cq = lane & 3;
  if (threadIdx.x == 0) {
    for (int s = 0; s < GEMM_FW_STAGES; ++s) {
      mbar_init(full + s, 1);
      mbar_init(empty + s, 8);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (warp == 8) {
    // the producer: k-tile i into stage i % STAGES once the consumers released its previous use
    const unsigned kc = chunk_k(K), tiles = kc / 128;
    for (unsigned i = 0; i < nk; ++i) {
      const unsigned s = i % GEMM_FW_STAGES, kt = kt0 + i;
      if (i >= GEMM_FW_STAGES) mbar_wait_or_trap(empty + s, (i / GEMM_FW_STAGES - 1) & 1);
      if (lane == 0) mbar_expect(full + s, SB);
      __syncwarp();
      char* st = smem + s * SB;
      if (lane < 8) {
        // weight warp tile `lane` (row group n0 / 32 + lane / 2, half lane % 2), as gemm_load_w's
        const unsigned rg = n0 / 32 + lane / 2, t = (kt * 128 % kc) / 128;
        bulk_copy(st + lane * 2048, W + ((size_t)rg * (K / kc) + kt * 128 / kc) * 32 * kc + ((lane % 2) * tiles + t) * 2048, 2048, full + s);
      } else if (lane < 24) {
        // token group lane - 8: its k-tile (8 chunks of e4m3 or 16 of bf16)
        const unsigned q = lane - 8;
        bulk_copy(st + 8 * 2048 + q * 8 * XB, X + ((size_t)(t0 / 8 + q) * (K * XB / 128) + kt * XB) * 8, 8 * XB, full + s);
      } else if (FAST && lane == 24) {
        bulk_copy(st + 8 * 2048 + GEMM_FW_TOKENS * 128, Xs + (size_t)kt * Tp + t0, GEMM_FW_TOKENS * 4, full + s);
      }
    }
    return;
  }
  // a consumer warp: rows rw .. rw + 15 (warpgroup warp / 4, its warp warp % 4)
  const unsigned rw = n0 + 16 * warp;
  const float* srow = S + (size_t)(n0 / 128) * (K / 128);
  float tot[64], acc[64];
#pragma unroll
  for (int e = 0; e < 64; ++e) tot[e] = 0.f;
  for (unsigned i = 0; i < nk; ++i) {
    const unsigned s = i % GEMM_FW_STAGES;
    mbar_wait_or_trap(full + s, (i / GEMM_FW_STAGES) & 1);
    __syncwarp();  // (the lanes leave the wait loop on their own: converged before wgmma's .aligned)
    const char* st = smem + s * SB;
    const uint4* a = (const uint4*)(st + warp * 2048) + lane;
    const uint4 v0 = lds16(a), v1 = lds16(a + 32), v2 = lds16(a + 64), v3 = lds16(a + 96);
    const unsigned r0[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
    const unsigned r8[8] = {v2.x, v2.y, v2.z, v2.w, v3.x, v3.y, v3.z, v3.w};
    const char* b = st + 8 * 2048;
#ifdef MK_BREAK_GEMV  // negative control: each step reads its neighbour's two k chunks (every product wrong)
#define GEMM_FW_STEP(j) ((j) ^ 1)
#else
#define GEMM_FW_STEP(j) (j)
#endif
    if (FAST) {
      wgmma_fence();
#pragma unroll
      for (int j = 0; j < 4; ++j)
        wgmma_e4m3_m64n128(acc, r0[2 * j], r8[2 * j], r0[2 * j + 1], r8[2 * j + 1], wg_desc(b + 256 * GEMM_FW_STEP(j), 128, 8 * XB), j > 0);
    } else {
      // every step's A widened before the first wgmma (as k_gemm_wg: in-flight A registers untouched)
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
      for (int j = 0; j < 8; ++j) wgmma_m64n128(acc, aw[j][0], aw[j][1], aw[j][2], aw[j][3], wg_desc(b + 256 * GEMM_FW_STEP(j), 128, 8 * XB), j > 0);
    }
#undef GEMM_FW_STEP
    wgmma_commit();
    wgmma_wait0();
#pragma unroll
    for (int e = 0; e < 64; ++e) asm volatile("" : "+f"(acc[e])::"memory");
    if (FAST) {
      // this lane's tokens' scales (D columns 8 j + 2 cq, + 1), then the stage is free
      float2 sx[16];
      const float* xs = (const float*)(b + GEMM_FW_TOKENS * XB);
#pragma unroll
      for (int j = 0; j < 16; ++j) sx[j] = *(const float2*)(xs + 8 * j + 2 * cq);
      __syncwarp();
      if (lane == 0) mbar_arrive(empty + s);
      const float sw = srow[kt0 + i];
#pragma unroll
      for (int j = 0; j < 16; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) tot[4 * j + e] += acc[4 * j + e] * ((e & 1) ? sx[j].y : sx[j].x) * sw;  // ORDER: k-tiles in order
    } else {
      __syncwarp();
      if (lane == 0) mbar_arrive(empty + s);
      const float sc = srow[kt0 + i] * 0x1p56f;
#pragma unroll
      for (int e = 0; e < 64; ++e) tot[e] += sc * acc[e];  // ORDER: k-tiles in order
    }
  }
  gemm_wg_store(Y + (size_t)z * T * N, tot, T, N, rw, t0, g, cq);
#else
  __trap();  // (compiled for an architecture without wgmma: the host compiles these kernels for sm_90a)
#endif
}

extern "C" __global__ void __launch_bounds__(GEMM_FW_THREADS, 1)
k_gemm_fast_wg(const unsigned char* __restrict__ W, const float* __restrict__ S, const unsigned char* __restrict__ X, const float* __restrict__ Xs, float* __restrict__ Y, unsigned T, unsigned Tp, unsigned N, unsigned K, unsigned kps) {
  gemm_bulk<true>(W, S, X, Xs, Y, T, Tp, N, K, kps);
}
// (Xs unused: exact mode's x carries no scales)
extern "C" __global__ void __launch_bounds__(GEMM_FW_THREADS, 1)
k_gemm_wg_bulk(const unsigned char* __restrict__ W, const float* __restrict__ S, const unsigned char* __restrict__ X, const float* __restrict__ Xs, float* __restrict__ Y, unsigned T, unsigned Tp, unsigned N, unsigned K, unsigned kps) {
  gemm_bulk<false>(W, S, X, Xs, Y, T, Tp, N, K, kps);
}
