// The fp8 GEMV of decode step v2 (issue 25), as a standalone kernel for now: weights in the chunk layout
// (src/exec/gpu/layout.rs), one bulk copy a chunk into a shared-memory ring, a loader lane that takes
// chunks by integer ticket (RING_PIPE in flight), consumer warps on tensor cores. Measured per shape by
// `mk gpu gemv` beside the same kernel with the arithmetic off (loads only: the same bytes, the same
// ring). Not yet a word of the program: the step's GEMVs are gemv.cuh's.
//
// Numerics (issue 25, "decided"): e4m3 widened exactly to bf16 (code x 2^-120: prmt, shift, mask), x
// pre-scaled by 2^64 in bf16 (exact), mma.sync m16n8k16 (fp32 accumulation in the tensor core's order),
// the 128 x 128 block scale applied once to each 16 x 128 tile's fp32 sum; each warp's tile sum goes to
// a fixed slot (tile, row), so which block ran a chunk changes no bit. Against the CPU: an envelope.

#define RING_SLOTS 6        // 32 KB slots: 192 KB a block (one block per SM)
#define RING_SLOT_BYTES 32768
#define RING_CONSUMERS 16   // consumer warps (2 row halves x up to 8 k-tiles of a chunk)
#define RING_PIPE 4         // tickets in flight on the loader lane (H200.md: 83.5 % with 4)
#define RING_THREADS (32 * RING_CONSUMERS + 32)


__device__ __forceinline__ void mbar_init(unsigned long long* b, unsigned n) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(b)), "r"(n) : "memory");
}
__device__ __forceinline__ void mbar_expect(unsigned long long* b, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(b)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(unsigned long long* b) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(b)) : "memory");
}
// Bounded wait on a phase (a hang becomes status 2, never a spin forever).
__device__ __forceinline__ bool mbar_wait(unsigned long long* b, unsigned parity, unsigned* status) {
  for (unsigned long long i = 0; i < (1ull << 26); ++i) {
    unsigned ok;
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                 : "=r"(ok) : "r"(smem_addr(b)), "r"(parity) : "memory");
    if (ok) return true;
  }
  atomicExch(status, 2u);
  return false;
}
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, unsigned bytes, unsigned long long* b) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
               ::"r"(smem_addr(dst)), "l"(src), "r"(bytes), "r"(smem_addr(b)) : "memory");
}

// One GEMV of a sequence: W (n x k fp8, chunk layout, kc k-bytes a chunk), its block scales, x (m rows of
// k bf16 times 2^64: the rows of a verification step, 1-8) and its partials part[row m][tile][out row]
// (tile: a 128-wide k-tile). The mma's 8 columns carry the m inputs: the weights are read once for all.
struct RingSeg {
  const unsigned char* w;
  const float* scale;
  const unsigned short* x;
  float* part;
  unsigned n, k, kc, m;
};
static_assert(sizeof(RingSeg) == 48, "RingSeg as src/verify/gemv.rs lays it out");

// The GEMVs segs[0 .. nseg) in one persistent launch: part[tile][row] = scale(row, tile) x the tile's sum,
// y[row] = 2^56 x the sum over tiles in tile order (the caller's). The loader runs ahead across GEMV
// boundaries (weights never depend on activations): a segment's last slot carries an end marker, and
// the next segment's chunks follow in the ring at once. One block per SM, RING_THREADS threads;
// tickets[s] zero before the launch. `compute` 0: loads only (the consumers take each chunk's bytes
// into registers and release the slot, no arithmetic). status: [0] chunks done, [1] 0 or 2 (a wait ran
// past its bound).
extern "C" __global__ void __launch_bounds__(RING_THREADS, 1)
k_ring_gemv(const RingSeg* __restrict__ segs, unsigned nseg, unsigned* tickets, unsigned* status, unsigned compute) {
  extern __shared__ __align__(16) char smem[];  // (the same declaration as every kernel's: its alignment is the TU's)
  unsigned long long* full = (unsigned long long*)smem;
  unsigned long long* empty = full + RING_SLOTS;
  unsigned* hdr = (unsigned*)(empty + RING_SLOTS);
  unsigned char* ring = (unsigned char*)smem + 1024;
  const unsigned tid = threadIdx.x;
  if (tid == 0) {
    for (int i = 0; i < RING_SLOTS; ++i) {
      mbar_init(&full[i], 1);
      mbar_init(&empty[i], RING_CONSUMERS);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (tid >= 32 * RING_CONSUMERS) {  // the loader: lane 0 alone
    if (tid != 32 * RING_CONSUMERS) return;
    unsigned slot = 0, round = 0;
    for (unsigned s = 0; s < nseg; ++s) {
      const RingSeg sg = segs[s];
      const unsigned chunk_bytes = 32 * sg.kc, n_chunks = (sg.n / 32) * (sg.k / sg.kc);
      unsigned q[RING_PIPE];
#pragma unroll
      for (int i = 0; i < RING_PIPE; ++i) q[i] = atomicAdd(&tickets[s], 1u);
      for (;;) {
        const unsigned c = q[0];
#pragma unroll
        for (int i = 0; i + 1 < RING_PIPE; ++i) q[i] = q[i + 1];
        q[RING_PIPE - 1] = atomicAdd(&tickets[s], 1u);
        if (round > 0 && !mbar_wait(&empty[slot], (round - 1) & 1, status + 1)) return;
        if (c >= n_chunks) {
          hdr[slot] = 0;  // the segment's end
          mbar_arrive(&full[slot]);
        } else {
          hdr[slot] = c + 1;
          mbar_expect(&full[slot], chunk_bytes);
          bulk_copy(ring + slot * RING_SLOT_BYTES, sg.w + (size_t)c * chunk_bytes, chunk_bytes, &full[slot]);
        }
        if (++slot == RING_SLOTS) {
          slot = 0;
          ++round;
        }
        if (c >= n_chunks) break;
      }
    }
    return;
  }
  const unsigned warp = tid >> 5, lane = tid & 31, g = lane >> 2, cq = lane & 3;
  unsigned slot = 0, round = 0;
  for (unsigned s = 0; s < nseg; ++s) {
    const RingSeg sg = segs[s];
    const unsigned tiles = sg.kc / 128, kcs = sg.k / sg.kc;
    const unsigned h = warp / tiles, t = warp % tiles;  // this warp's tile of a chunk (warps past 2 tiles: none)
    const bool has_tile = warp < 2 * tiles;
    for (;;) {
      if (!mbar_wait(&full[slot], round & 1, status + 1)) return;
      const unsigned c1 = hdr[slot];
      const unsigned c = c1 - 1, rg = c / kcs, kk = c - rg * kcs;
      uint4 wv[4], xv[4];
      if (c1 != 0 && has_tile) {
        const uint4* base = (const uint4*)(ring + slot * RING_SLOT_BYTES + warp * 2048) + lane;
#pragma unroll
        for (int i = 0; i < 4; ++i) wv[i] = base[32 * i];
        // lane (g, cq) holds B's column g: input row g (columns past m repeat row 0, never written)
        // (x at the layout's permuted k: 8 cq, 32 + 8 cq, 64 + 8 cq, 96 + 8 cq; layout.rs)
        const unsigned short* xk = sg.x + (size_t)(g < sg.m ? g : 0) * sg.k + kk * sg.kc + t * 128 + 8 * cq;
        xv[0] = *(const uint4*)xk;
        xv[1] = *(const uint4*)(xk + 32);
        xv[2] = *(const uint4*)(xk + 64);
        xv[3] = *(const uint4*)(xk + 96);
      }
      __syncwarp();
      if (lane == 0) mbar_arrive(&empty[slot]);  // the bytes are in registers: the slot can refill
      if (++slot == RING_SLOTS) {
        slot = 0;
        ++round;
      }
      if (c1 == 0) break;  // the segment's end
      if (!has_tile) continue;
      const unsigned row = rg * 32 + h * 16 + g, tile = kk * tiles + t;
      float d[4] = {0.f, 0.f, 0.f, 0.f}, e[4] = {0.f, 0.f, 0.f, 0.f};
      if (compute) {
        const unsigned xw[16] = {xv[0].x, xv[0].y, xv[0].z, xv[0].w, xv[1].x, xv[1].y, xv[1].z, xv[1].w,
                                 xv[2].x, xv[2].y, xv[2].z, xv[2].w, xv[3].x, xv[3].y, xv[3].z, xv[3].w};
        fp8_tile_mma(wv, xw, d, e);  // (gemv.cuh: the engine's GEMV runs the same tile arithmetic)
      } else {
        unsigned v = 0;
#pragma unroll
        for (int i = 0; i < 4; ++i) v ^= wv[i].x ^ wv[i].y ^ wv[i].z ^ wv[i].w;
        d[0] = (float)(v & 1u);
      }
      // D's columns 2 cq and 2 cq + 1 (input rows): out rows g (d[0], d[1]) and g + 8 (d[2], d[3])
      const unsigned c0 = 2 * cq, tiles_k = sg.k / 128;
      if (c0 < sg.m) {
        const float sc = sg.scale[(size_t)(row / 128) * tiles_k + tile];
        float* pm = sg.part + ((size_t)c0 * tiles_k + tile) * sg.n;
        pm[row] = sc * (d[0] + e[0]);
        pm[row + 8] = sc * (d[2] + e[2]);
        if (c0 + 1 < sg.m) {
          pm += (size_t)tiles_k * sg.n;
          pm[row] = sc * (d[1] + e[1]);
          pm[row + 8] = sc * (d[3] + e[3]);
        }
      }
      if (lane == 0 && h == 0 && t == 0) atomicAdd(status, 1u);
    }
  }
}
