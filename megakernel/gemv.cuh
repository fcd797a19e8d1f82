// The GEMV's arithmetic, shared by the discrete kernels and the megakernel. fp8 weights: the chunk
// layout (src/exec/gpu/layout.rs) on tensor cores, a chunk (32 rows x one k-group) at a time
// (`fp8_tiles`, `fp8_row_group`); bf16 weights: the warp's row dot products (`dot_rows`). The unit driver `gemv_rows`
// and the split-K reduce. Owns: every GEMV sum's order (the CPU reference's `Linear::row_dot`: a row is
// the sequential sum of its k-group partials, a k-group's partial the sequential sum of its 128-wide
// tiles). Refuses: float atomics.
#pragma once

// A weight load: 16 bytes through the non-coherent path, not kept in L1 (weights are read once a step).
__device__ __forceinline__ uint4 ldw(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

// Two e4m3 codes (bytes 0,1 or 2,3 of w: sel 0x9180 / 0xB3A2) widened exactly to a bf16 pair times
// 2^-120: prmt puts each code in the low byte of its half with its sign replicated above it, the shift
// by 4 brings exponent and mantissa to bf16's bits 10..4 and the sign copy to bit 15, the mask keeps
// those (e4m3 subnormals become bf16 subnormals).
// (PTX prmt, not __byte_perm: the selector's sign-replicate bit is PTX's, the intrinsic's is masked.)
__device__ __forceinline__ unsigned e4m3x2_widen(unsigned w, unsigned sel) {
  unsigned y;
  asm("prmt.b32 %0, %1, 0, %2;" : "=r"(y) : "r"(w), "r"(sel));
  return (y << 4) & 0x87f087f0u;
}

// A generic pointer into shared memory as a shared-window address.
__device__ __forceinline__ unsigned smem_addr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
// 16 bytes of shared memory (a generic pointer into it; ld.shared: the compiler cannot always tell).
__device__ __forceinline__ uint4 lds16(const void* p) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(smem_addr(p)));
  return v;
}

// 16 bytes global -> shared, not kept in L1; zeros when !pred (src-size 0).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool pred) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(smem_addr(dst)), "l"(src), "r"(pred ? 16 : 0) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N> __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }

// d += A (16 x 16 bf16, row) x B (16 x 8 bf16, col), fp32 accumulation in the tensor core's order.
__device__ __forceinline__ void mma_bf16(float (&d)[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0, unsigned b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// One 16 x 128 fp8 warp tile of the chunk layout times x on tensor cores: wv the lane's 4 loads of the
// tile (lane (g, cq): [0] row g's k-bytes 8 cq .. + 7 and 32 + 8 cq .. + 7 of the first 64, [1] the same of
// the second 64, [2] / [3] row g + 8), xw its 16 words of x (bf16 pairs times 2^64 at 8 cq, 32 + 8 cq,
// 64 + 8 cq and 96 + 8 cq, 8 each: permuted as the weights, layout.rs).
// e4m3 widened exactly (times 2^-120); mma j (8, two accumulators interleaved) takes the lane's bytes
// 4 j .. 4 j + 3 of both rows. d + e is the tile's fp32 sum (times 2^-56): D's rows g (d[0]) and g + 8
// (d[2]) for B's column 2 cq (d[1], d[3]: column 2 cq + 1). ORDER: the tensor core's within each mma,
// then d + e. The engine's GEMV (fp8_tiles) and the standalone ring (ring.cuh) both take it.
__device__ __forceinline__ void fp8_tile_mma(const uint4 (&wv)[4], const unsigned (&xw)[16], float (&d)[4], float (&e)[4]) {
  const unsigned r0[8] = {wv[0].x, wv[0].y, wv[0].z, wv[0].w, wv[1].x, wv[1].y, wv[1].z, wv[1].w};
  const unsigned r8[8] = {wv[2].x, wv[2].y, wv[2].z, wv[2].w, wv[3].x, wv[3].y, wv[3].z, wv[3].w};
#pragma unroll
  for (int j = 0; j < 8; j += 2) {
    mma_bf16(d, e4m3x2_widen(r0[j], 0x9180), e4m3x2_widen(r8[j], 0x9180), e4m3x2_widen(r0[j], 0xB3A2),
             e4m3x2_widen(r8[j], 0xB3A2), xw[2 * j], xw[2 * j + 1]);
    mma_bf16(e, e4m3x2_widen(r0[j + 1], 0x9180), e4m3x2_widen(r8[j + 1], 0x9180), e4m3x2_widen(r0[j + 1], 0xB3A2),
             e4m3x2_widen(r8[j + 1], 0xB3A2), xw[2 * j + 2], xw[2 * j + 3]);
  }
}

// The k-bytes of one chunk of an fp8 weight of K columns (layout.rs `chunk_k`): 1,024, or the largest of
// 512 / 256 / 128 dividing K.
__device__ __forceinline__ unsigned chunk_k(unsigned K) {
  return K % 1024 == 0 ? 1024 : K % 512 == 0 ? 512 : K % 256 == 0 ? 256 : 128;
}

// This warp's block scale of tile `warp` of k-group kg of row group rg (0 past the group's tiles).
__device__ __forceinline__ float fp8_tile_scale(const float* S, unsigned K, unsigned rg, unsigned kg) {
  const unsigned kt = kg * KGROUP + (threadIdx.x >> 5) * 128;
  return kt < min(K, (kg + 1) * KGROUP) ? S[(size_t)(rg / 4) * (K / 128) + kt / 128] : 0.f;
}

// The tile sums of row group rg (rows 32 rg ..) of fp8 weight `wid` (K columns) over k-group kg for one
// row of input: `xload(m, k)` gives the 8 bf16 of the prepared input (x * 2^64) at k. Into shared
// memory red[t][32] (t: the group's 128-wide tiles; no barrier: the caller joins, fp8_row_group). Warp w
// takes tile w (the chunk layout's warp tiles (h, t) of both 16-row halves h: 2 x 4 loads of 16 bytes a
// lane, all issued before any arithmetic), widens e4m3 exactly to bf16 and runs 2 x 8 mma.sync
// m16n8k16 with the input in every column of B, permuted as the layout permutes the weights, then
// applies the 128 x 128 block scale (times 2^56: sc0, fp8_tile_scale, loaded a group ahead by the
// caller) to the tile's fp32 sum once. ORDER within a tile: the tensor core's (two accumulators,
// d + e), the same for every column of B: fp8_rows_m's M rows get the same bits. The same instructions
// on the same bytes in both paths.
static_assert(KGROUP / 128 == WARPS, "fp8_tiles: a warp per 128-wide tile of a k-group");
template <typename XLoad>
__device__ __forceinline__ void fp8_tiles(const DevCtx& c, unsigned short wid, unsigned K, unsigned rg, unsigned kg, float sc0, XLoad xload, float* red) {
  const unsigned kc = chunk_k(K), T = kc / 128;
  const unsigned warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, cq = lane & 3;
  const unsigned k0 = kg * KGROUP, nt = (min(K, k0 + KGROUP) - k0) / 128;
  const unsigned kt = k0 + warp * 128, t = (kt % kc) / 128;
  // the group's chunks are contiguous in the chunk layout (32 x its width bytes)
  const uint4* grp = (const uint4*)((const unsigned char*)c.bufs[wid] + ((size_t)rg * (K / kc) + k0 / kc) * 32 * kc);
  uint4 wv[2][4];
  if (warp < nt) {
    const uint4* tile = grp + (kt / kc - k0 / kc) * 2 * kc + lane;  // (32 kc bytes a chunk: 2 kc uint4)
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int i = 0; i < 4; ++i) wv[h][i] = ldw(tile + (h * T + t) * 128 + 32 * i);
  }
#ifdef MK_LOADS_ONLY  // probe (wrong results): the same loads, no arithmetic (the memory pipeline alone)
  if (warp < nt) {
    unsigned v = 0;
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int i = 0; i < 4; ++i) v ^= wv[h][i].x ^ wv[h][i].y ^ wv[h][i].z ^ wv[h][i].w;
    red[warp * 32 + lane] = __uint_as_float(v & 0x3fffffffu) * sc0;
  }
  return;
#endif
  if (warp < nt) {
    const float sc = sc0 * 0x1p56f;
    const uint4 xa = xload(0, kt + 8 * cq), xb = xload(0, kt + 32 + 8 * cq);
    const uint4 xc = xload(0, kt + 64 + 8 * cq), xd = xload(0, kt + 96 + 8 * cq);
#ifdef MK_BREAK_GEMV  // negative control for `mk gpu ops`: the two halves of x's 16-byte pieces swapped (every fp8 GEMV wrong)
    const unsigned xw[16] = {xb.x, xb.y, xb.z, xb.w, xa.x, xa.y, xa.z, xa.w, xd.x, xd.y, xd.z, xd.w, xc.x, xc.y, xc.z, xc.w};
#else
    const unsigned xw[16] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w, xc.x, xc.y, xc.z, xc.w, xd.x, xd.y, xd.z, xd.w};
#endif
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float d[4] = {0.f, 0.f, 0.f, 0.f}, e[4] = {0.f, 0.f, 0.f, 0.f};
      fp8_tile_mma(wv[h], xw, d, e);
      // D's column 0 (d[0]: row g, d[2]: row g + 8; every column holds the same sums)
      if (cq == 0) {
        red[warp * 32 + h * 16 + g] = sc * (d[0] + e[0]);
        red[warp * 32 + h * 16 + g + 8] = sc * (d[2] + e[2]);
      }
    }
  }
}

// ORDER of an fp8 k-group's partial (one row or M, both paths): its tile sums in two runs, tiles
// 0 .. RUN_TILES - 1 and RUN_TILES .. (fewer where K ends), each summed from 0 in tile order, then
// run 0 + run 1 (+0 for an empty run). (The CPU reference sums the group's tiles in one run: GPU
// against CPU is an envelope.) Two runs so that an M-row unit can hand each to one warp (fp8_rows_m).
#define RUN_TILES 4
static_assert(KGROUP / 128 == 2 * RUN_TILES, "fp8: a k-group is two runs of tiles");

// Row group rg of NW fp8 weights wid[0..NW) (gate and up: 2) over k-groups [g0, g1): every group's tiles
// (fp8_tiles, k-groups in order, weight by weight), a join, the group partials, a join, then
// `done(i, row, total)` on lanes of warp 0 (row 32 rg + lane; with `partial`, each group partial goes to
// out[g][rows] instead). ORDER: a group partial = run 0 + run 1 (RUN_TILES); a row = 0 + partial g0 +
// partial g0 + 1 + .. in group order (the CPU's `row_dot`). red: NW x
// groups x 256 tile sums, then NW x groups x 32 partials (`tile_red`; launch.rs sizes it).
template <int NW, typename Done>
__device__ void fp8_row_group(const DevCtx& c, const unsigned short* wid, unsigned rg, unsigned g0, unsigned g1, const unsigned short* xs, float* red, bool partial, float* out, unsigned rows, Done done) {
  const unsigned K = c.cols[wid[0]], ng = g1 - g0;
  float* sums = red + NW * ng * 256;  // the group partials [NW ng][32]
  const float* S[NW];  // the weights' block scales (their pointers read once a row group)
#pragma unroll
  for (int i = 0; i < NW; ++i) S[i] = c.scales[wid[i]];
  float sc = fp8_tile_scale(S[0], K, rg, g0);
#pragma unroll
  for (int i = 0; i < NW; ++i)
    for (unsigned g = g0; g < g1; ++g) {
      // the next group's scale (the next weight's first) in flight while this group computes
      const bool last = g + 1 == g1;
      const float next = last ? (i + 1 < NW ? fp8_tile_scale(S[i + 1 < NW ? i + 1 : i], K, rg, g0) : 0.f) : fp8_tile_scale(S[i], K, rg, g + 1);
      fp8_tiles(c, wid[i], K, rg, g, sc, [&](unsigned, unsigned k) { return lds16(xs + k); }, red + (i * ng + g - g0) * 256);
      sc = next;
    }
  BLOCK_SYNC();
  for (unsigned p = threadIdx.x; p < NW * ng * 32; p += THREADS) {
    const unsigned j = p / 32, r = p % 32, g = g0 + j % ng, nt = (min(K, (g + 1) * KGROUP) - g * KGROUP) / 128;
    float s0 = 0.f, s1 = 0.f;  // ORDER: the group partial's two runs (RUN_TILES)
    for (unsigned t = 0; t < min(nt, (unsigned)RUN_TILES); ++t) s0 += red[j * 256 + t * 32 + r];
    for (unsigned t = RUN_TILES; t < nt; ++t) s1 += red[j * 256 + t * 32 + r];
    const float s = s0 + s1;
    if (partial) out[(size_t)g * rows + rg * 32 + r] = s;
    else sums[p] = s;
  }
  if (partial) return;
  BLOCK_SYNC();
  if (threadIdx.x < 32)
#pragma unroll
    for (int i = 0; i < NW; ++i) {
      float total = 0.f;
      for (unsigned gi = 0; gi < ng; ++gi) total += sums[(i * ng + gi) * 32 + threadIdx.x];
      done(i, rg * 32 + threadIdx.x, total);
    }
}

// M_ROWS rows of a verification step (M_ROWS > 1), row group rg of NW fp8 weights over k-groups
// [g0, g1), the weights read once for all rows, with one join: the work is cut into items (weight i,
// group, run q, 16-row half h), item it on warp it % WARPS, each a run of up to RUN_TILES tiles of one
// half (4 loads of 16 bytes a lane a tile, a tile's loads issued before its arithmetic) summed
// in registers from 0 in tile order (fp8_tile_mma, the block scale times 2^56 on each tile's sum, as
// fp8_tiles: the same instructions), row n's input in B's column n (lane (g, cq) loads row
// min(g, M_ROWS - 1)'s, `xload(m, k)`); the runs into red [NW][groups][2][M_ROWS][32]; a join; then
// thread (m, r) (m = warp < M_ROWS) forms row m's group partials of row 32 rg + r (run 0 + run 1) and
// either stores each to row m's split-K buffer (`partial`: id `out`, [g][rows]) or sums them in group
// order and calls `done(i, m, row, total)`; a join (red is reused). ORDER: fp8_row_group's, so row m
// has the bits of a one-row step.
template <int NW, typename XLoad, typename Done>
__device__ void fp8_rows_m(const DevCtx& c, const unsigned short* wid, unsigned rg, unsigned g0, unsigned g1, XLoad xload, float* red, bool partial, unsigned short out, unsigned rows, Done done) {
  const unsigned K = c.cols[wid[0]], ng = g1 - g0, kc = chunk_k(K), T = kc / 128;
  const unsigned warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, cq = lane & 3;
  const unsigned mx = min(g, (unsigned)M_ROWS - 1);  // B's column g: row g's input
  for (unsigned it = warp; it < NW * ng * 4; it += WARPS) {
    const unsigned h = it & 1, q = (it >> 1) & 1, gi = (it >> 2) % ng, i = (it >> 2) / ng;
    const unsigned k0 = (g0 + gi) * KGROUP, nt = (min(K, k0 + KGROUP) - k0) / 128;
    const unsigned t0 = q * RUN_TILES, n = t0 < nt ? min(nt - t0, (unsigned)RUN_TILES) : 0u;
    // the group's chunks are contiguous in the chunk layout (32 x its width bytes); tile tt of half h
    const uint4* grp = (const uint4*)((const unsigned char*)c.bufs[wid[i]] + ((size_t)rg * (K / kc) + k0 / kc) * 32 * kc) + lane;
    const float* S = c.scales[wid[i]] + (size_t)(rg / 4) * (K / 128) + k0 / 128;
    auto load = [&](unsigned j, uint4 (&wv)[4], float& sc) {
      const unsigned kt = k0 + (t0 + j) * 128, t = (kt % kc) / 128;
      const uint4* tile = grp + (kt / kc - k0 / kc) * 2 * kc + (h * T + t) * 128;
#pragma unroll
      for (int l = 0; l < 4; ++l) wv[l] = ldw(tile + 32 * l);
      sc = S[t0 + j] * 0x1p56f;
    };
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    auto tile_sum = [&](unsigned j, const uint4 (&wv)[4], float sc) {
#ifdef MK_LOADS_ONLY  // probe (wrong results): the weight loads alone, no x and no arithmetic
      acc[0] += __uint_as_float((wv[0].x ^ wv[1].y ^ wv[2].z ^ wv[3].w) & 0x3fffffffu) * sc;
      return;
#endif
      const unsigned kt = k0 + (t0 + j) * 128;
      // (the 4 lanes cq of row mx: 64 contiguous bytes an instruction, whole sectors: layout.rs)
      const uint4 xa = xload(mx, kt + 8 * cq), xb = xload(mx, kt + 32 + 8 * cq);
      const uint4 xc = xload(mx, kt + 64 + 8 * cq), xd = xload(mx, kt + 96 + 8 * cq);
#ifdef MK_BREAK_GEMV  // negative control, as fp8_tiles'
      const unsigned xw[16] = {xb.x, xb.y, xb.z, xb.w, xa.x, xa.y, xa.z, xa.w, xd.x, xd.y, xd.z, xd.w, xc.x, xc.y, xc.z, xc.w};
#else
      const unsigned xw[16] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w, xc.x, xc.y, xc.z, xc.w, xd.x, xd.y, xd.z, xd.w};
#endif
      float d[4] = {0.f, 0.f, 0.f, 0.f}, e[4] = {0.f, 0.f, 0.f, 0.f};
      fp8_tile_mma(wv, xw, d, e);
#pragma unroll
      for (int l = 0; l < 4; ++l) acc[l] += sc * (d[l] + e[l]);  // ORDER: tiles in order, from 0
    };
    // one tile in flight a warp (two, tile j + 1's loads issued before tile j's arithmetic, LOST: spills,
    // 36.5 against 29.5 ms for the 27B's M = 8 megakernel step, docs/notebook/speculation.md)
#pragma unroll 1
    for (unsigned j = 0; j < n; ++j) {
      uint4 wv[4];
      float sc;
      load(j, wv, sc);
      tile_sum(j, wv, sc);
    }
    // D's columns 2 cq (acc[0]: row g, acc[2]: row g + 8) and 2 cq + 1 (acc[1], acc[3]): input rows < M
    float* run = red + ((i * ng + gi) * 2 + q) * M_ROWS * 32 + h * 16 + g;
#pragma unroll
    for (int j = 0; j < 2; ++j)
      if (2 * cq + j < M_ROWS) {
        run[(2 * cq + j) * 32] = acc[j];
        run[(2 * cq + j) * 32 + 8] = acc[2 + j];
      }
  }
  BLOCK_SYNC();
  const unsigned m = warp, r = lane;
  if (m < M_ROWS)
#pragma unroll
    for (int i = 0; i < NW; ++i) {
      float tot = 0.f;
      for (unsigned gi = 0; gi < ng; ++gi) {
        const float* run = red + ((i * ng + gi) * 2) * M_ROWS * 32 + m * 32 + r;
        const float pg = run[0] + run[M_ROWS * 32];  // ORDER: run 0 + run 1
        if (partial) ((float*)c.bufs[m * c.n_bufs + out])[(size_t)(g0 + gi) * rows + rg * 32 + r] = pg;
        else tot += pg;  // ORDER: groups in order, from 0
      }
      if (!partial) done(i, m, rg * 32 + r, tot);
    }
  BLOCK_SYNC();
}

// An M-row fp8 GEMV's input loader for fp8_tiles (row m's 8 bf16 at k, times 2^64): the prepared rows in
// shared memory (xrow_bytes apart), or, for an input taken as is (`mrow_x_in_smem` false), straight
// from row m's activation: loaded through L2 (another block of the megakernel wrote it), scaled as
// prepared_input scales it (the same bits).
struct MrowX {
  const DevCtx& c;
  const unsigned short* xs;
  unsigned stride, in;
  bool smem;
  unsigned kb;  // the first k in shared memory (a staged k-range: mrow_stage)
  __device__ __forceinline__ uint4 operator()(unsigned m, unsigned k) const {
    if (smem) return lds16(xs + m * stride + k - kb);
    const unsigned short* x = (const unsigned short*)c.bufs[m * c.n_bufs + in] + k;
    uint4 v;
    asm volatile("ld.global.cg.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(x));
    return scaled8(v, 0x1p64f);
  }
};

// An M-row unit's input taken as is (`mrow_x_in_smem` false), staged: k-range [kb, kb + kn) of the M
// rows' activations (another block wrote them: cp.async.cg reads L2) into shared memory once, [M][kn],
// then scaled by 2^64 in place, each thread the pieces it copied (scaled8: the bits MrowX's global read
// makes), and a join. So a unit's two 16-row halves and its row groups read x there, not from L2 for
// every tile (down_proj, o_proj, out_proj at M = 8). Whether a word stages (`mrow_stage_k`, the unit's
// kn, or 0): its widest unit's range (ceil(groups / k_parts) k-groups) fits MROW_X_BYTES (launch.rs
// sizes the shared memory by the same rule).
// The probe MK_SKIP_PREP (wrong results; `mk gpu rows`' timings): an M-row fp8 GEMV unit neither
// prepares nor stages its inputs (the shared-memory rows are read as they are), so beside MK_LOADS_ONLY
// it leaves the weight stream alone.
#ifdef MK_SKIP_PREP
constexpr bool MROW_SKIP_PREP = true;
#else
constexpr bool MROW_SKIP_PREP = false;
#endif
__device__ __forceinline__ unsigned mrow_stage_k(const Word& w, unsigned K, unsigned g0, unsigned g1) {
  const unsigned widest = min(K, ((K + KGROUP - 1) / KGROUP + w.k_parts - 1) / w.k_parts * KGROUP);
  return M_ROWS * widest * 2 <= MROW_X_BYTES ? min(K, g1 * KGROUP) - g0 * KGROUP : 0u;
}
__device__ __noinline__ void mrow_stage(const DevCtx& c, unsigned short in, unsigned kb, unsigned kn, unsigned short* xs) {
  const unsigned per = kn / 8, n = M_ROWS * per;
  for (unsigned p = threadIdx.x; p < n; p += THREADS) {
    const unsigned m = p / per, j = p % per;
    cp_async16(xs + m * kn + 8 * j, (const unsigned short*)c.bufs[m * c.n_bufs + in] + kb + 8 * j, true);
  }
  cp_async_commit();
  cp_async_wait<0>();
  for (unsigned p = threadIdx.x; p < n; p += THREADS) {
    uint4* q = (uint4*)(xs + (p / per) * kn + 8 * (p % per));
    *q = scaled8(*q, 0x1p64f);
  }
  BLOCK_SYNC();
}

// The 8 bf16 of v as floats, in element order.
__device__ __forceinline__ void widen_bf16x8(uint4 v, float* f) {
  const unsigned words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    f[2 * q] = lo_bf(words[q]);
    f[2 * q + 1] = hi_bf(words[q]);
  }
}
// chunk_bf16 on weights already widened (widen_bf16x8): the same fmas in the same order.
__device__ __forceinline__ float chunk_bf16_wide(const float* wf, const unsigned short* xs, float acc) {
  uint4 xa = *(const uint4*)xs;
  unsigned xw[4] = {xa.x, xa.y, xa.z, xa.w};
#pragma unroll
  for (int q = 0; q < 4; ++q) {
#ifdef MK_BREAK_GEMV  // negative control, as chunk_bf16's
    acc = fmaf(wf[2 * q], hi_bf(xw[q]), acc);
    acc = fmaf(wf[2 * q + 1], lo_bf(xw[q]), acc);
#else
    acc = fmaf(wf[2 * q], lo_bf(xw[q]), acc);
    acc = fmaf(wf[2 * q + 1], hi_bf(xw[q]), acc);
#endif
  }
  return acc;
}
// acc += the 8 bf16 weights of v times bf16 xs[0..8), in element order.
__device__ __forceinline__ float chunk_bf16(uint4 v, const unsigned short* xs, float acc) {
  uint4 xa = *(const uint4*)xs;
  unsigned words[4] = {v.x, v.y, v.z, v.w};
  unsigned xw[4] = {xa.x, xa.y, xa.z, xa.w};
#pragma unroll
  for (int q = 0; q < 4; ++q) {
#ifdef MK_BREAK_GEMV  // negative control: each pair of x's elements swapped (every bf16 GEMV and the lm_head wrong)
    acc = fmaf(lo_bf(words[q]), hi_bf(xw[q]), acc);
    acc = fmaf(hi_bf(words[q]), lo_bf(xw[q]), acc);
#else
    acc = fmaf(lo_bf(words[q]), lo_bf(xw[q]), acc);
    acc = fmaf(hi_bf(words[q]), hi_bf(xw[q]), acc);
#endif
  }
  return acc;
}

// The warp's dot products of NR bf16 weight rows (wid[i], row[i]; of one width K) with MR bf16 shared
// inputs (row m's at xs + m stride), k-group by k-group over groups [g0, g1): `part(i, m, g, value)`
// receives each (row, input, group) partial in group order, on every lane. ORDER inside a group
// (fixed, the same for every input): lane l sums its 16-byte chunks k = k0 + 8 l + 256 j for j = 0, 1,
// .. in order, elements in order within a chunk, fma in fp32; then the warp butterfly. Every lane issues
// a group's loads for all NR rows before any arithmetic; each weight load serves the MR inputs.
template <int NR, int MR, typename Part>
__device__ void dot_rows_m(const DevCtx& c, const unsigned short* wid, const unsigned* row, const unsigned short* xs, unsigned stride, unsigned g0, unsigned g1, Part part) {
  unsigned K = c.cols[wid[0]], lane = threadIdx.x & 31;
  const unsigned short* w[NR];
#pragma unroll
  for (int i = 0; i < NR; ++i) w[i] = (const unsigned short*)c.bufs[wid[i]] + (size_t)row[i] * K;
  for (unsigned g = g0; g < g1; ++g) {
    unsigned k1 = min(K, (g + 1) * KGROUP);
    uint4 v[NR][4];
#pragma unroll
    for (int i = 0; i < NR; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        unsigned k = g * KGROUP + lane * 8 + j * 256;
        v[i][j] = k < k1 ? ldw(w[i] + k) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
    for (int i = 0; i < NR; ++i) {
      if (MR == 1) {
        float acc = 0.f;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          unsigned k = g * KGROUP + lane * 8 + j * 256;
          if (k < k1) acc = chunk_bf16(v[i][j], xs + k, acc);
        }
        part(i, 0, g, warp_sum(acc));
        continue;
      }
      // MR rows: weight row i widened once (32 floats a lane), then each row's sums from them
      // (chunk_bf16's operations on the same values in the same order: the same bits)
      float wf[4][8];
#pragma unroll
      for (int j = 0; j < 4; ++j) widen_bf16x8(v[i][j], wf[j]);
#pragma unroll
      for (int m = 0; m < MR; ++m) {
        float acc = 0.f;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          unsigned k = g * KGROUP + lane * 8 + j * 256;
          if (k < k1) acc = chunk_bf16_wide(wf[j], xs + m * stride + k, acc);
        }
        part(i, m, g, warp_sum(acc));
      }
    }
  }
}
// dot_rows_m for one input: `part(i, g, value)`.
template <int NR, typename Part>
__device__ __forceinline__ void dot_rows(const DevCtx& c, const unsigned short* wid, const unsigned* row, const unsigned short* xs, unsigned g0, unsigned g1, Part part) {
  dot_rows_m<NR, 1>(c, wid, row, xs, 0, g0, g1, [&](int i, int, unsigned g, float v) { part(i, g, v); });
}

// The warp's rows of a unit: rows r0 + warp, r0 + warp + WARPS, .. below r1, two at a time (a lone last
// row alone), each with `per_row(NR, rows)` choosing the dot_rows call.
template <typename PerRow>
__device__ __forceinline__ void warp_row_pairs(unsigned r0, unsigned r1, PerRow per_row) {
  for (unsigned r = r0 + (threadIdx.x >> 5); r < r1; r += 2 * WARPS) {
    if (r + WARPS < r1) {
      unsigned rows[2] = {r, r + WARPS};
      per_row(rows, 2);
    } else {
      unsigned rows[1] = {r};
      per_row(rows, 1);
    }
  }
}
// The warp's rows of a unit by pairs (warp_row_pairs, `at_once` 2) or one at a time (1).
template <typename PerRow>
__device__ __forceinline__ void warp_rows(unsigned r0, unsigned r1, int at_once, PerRow per_row) {
  if (at_once == 2) {
    warp_row_pairs(r0, r1, per_row);
    return;
  }
  for (unsigned r = r0 + (threadIdx.x >> 5); r < r1; r += WARPS) {
    unsigned rows[1] = {r};
    per_row(rows, 1);
  }
}

// The rows and k-groups of unit u of a GEMV word.
struct GemvSpan { unsigned r0, r1, g0, g1; };
__device__ __forceinline__ GemvSpan gemv_span(const Word& w, unsigned u, unsigned K) {
  unsigned kp = u % w.k_parts, rs = u / w.k_parts;
  unsigned groups = (K + KGROUP - 1) / KGROUP;
  GemvSpan s;
  s.r0 = rs * w.unit_rows;
  s.r1 = min(w.rows, s.r0 + w.unit_rows);
  s.g0 = kp * groups / w.k_parts;
  s.g1 = (kp + 1) * groups / w.k_parts;
  return s;
}

// The shared memory after a GEMV's prepared input of K bf16 (16-byte aligned) and the block sums (8
// floats): fp8_row_group's tile sums and group partials (NW x groups x (8 + 1) x 32 floats; launch.rs
// sizes it).
__device__ __forceinline__ float* tile_red(char* smem, unsigned K) { return (float*)(smem + xrow_bytes(K) + 32); }

// For each row of the span: the per-group sums, either stored as split-K partials [g][rows]
// (FLAG_PARTIAL) or summed in group order and handed to `epilogue(r, row, value, pre(r, row))` (r: the
// row view the row belongs to; one thread a row; fp8: `pre`, what the epilogue reads, is loaded before
// the row group's weights stream by). `prep(nx)` prepares the inputs of nx rows (1, or M_ROWS) side by
// side (every thread calls it; it honours the op's `fresh`) and returns them; fp8 weights read it times
// 2^64 (the prep scales it: `prepared_input`). fp8: whole row groups of 32 (the
// compiler's unit rows are multiples of 32, fp8 row counts too: layout.rs), their k-groups in order.
// An M-row step's fp8 word (`mrow_gemv`) takes all M rows here in one pass over its weights
// (fp8_rows_m), its inputs prepared side by side or read as they are (`mrow_x_in_smem`).
template <typename Prep, typename Pre, typename Epi>
__device__ void gemv_rows(const DevCtx& c, const Word& w, unsigned u, unsigned short wid, char* smem, Prep prep, Pre pre, Epi epilogue) {
  unsigned K = c.cols[wid];
  GemvSpan s = gemv_span(w, u, K);
  unsigned lane = threadIdx.x & 31;
  bool partial = w.flags & FLAG_PARTIAL;
  if constexpr (M_ROWS > 1) {
    if (mrow_gemv(c, w)) {
      const bool xsm = mrow_x_in_smem(w);
      if (xsm && !MROW_SKIP_PREP) prep(M_ROWS);
      if (!is_fp8(c, wid)) {
        // bf16 (its inputs in shared memory: mrow_gemv): each weight load applied to the M rows, a warp
        // a row (dot_rows_m: row m's sums in dot_rows' order, so the bits of a one-row step)
        for (unsigned row = s.r0 + (threadIdx.x >> 5); row < s.r1; row += WARPS) {
          float total[M_ROWS] = {};
          dot_rows_m<1, M_ROWS>(c, &wid, &row, (const unsigned short*)smem, xrow_bytes(K) / 2, s.g0, s.g1, [&](int, int mm, unsigned g, float v) {
            if (!partial) total[mm] += v;  // ORDER: k-groups in order
            else if (lane == 0) B<float>(row_view(c, mm), w.ops[SLOT_OUT0])[(size_t)g * w.rows + row] = v;
          });
          if (!partial && lane == 0)
#pragma unroll
            for (int mm = 0; mm < M_ROWS; ++mm) {
              const DevCtx r = row_view(c, mm);
              epilogue(r, row, total[mm], pre(r, row));
            }
        }
        return;
      }
      // an input taken as is: the unit's k-range staged (mrow_stage), or read from L2 tile by tile
      const unsigned kn = xsm ? 0u : mrow_stage_k(w, K, s.g0, s.g1);
      if (kn && !MROW_SKIP_PREP) mrow_stage(c, w.ops[SLOT_IN0], s.g0 * KGROUP, kn, (unsigned short*)smem);
      const MrowX xl{c, (const unsigned short*)smem, kn ? kn : xrow_bytes(K) / 2, w.ops[SLOT_IN0], xsm || kn, kn ? s.g0 * KGROUP : 0u};
      float* red = kn ? (float*)(smem + M_ROWS * kn * 2 + 32) : mrow_red(smem, K, xsm);
      const unsigned m = threadIdx.x >> 5;
      for (unsigned rg = s.r0 / 32; rg * 32 < s.r1; ++rg) {
        const float pv = !partial && m < M_ROWS ? pre(row_view(c, m), rg * 32 + lane) : 0.f;
        fp8_rows_m<1>(c, &wid, rg, s.g0, s.g1, xl, red, partial, w.ops[SLOT_OUT0], w.rows,
                      [&](int, unsigned mm, unsigned r, float v) { epilogue(row_view(c, mm), r, v, pv); });
      }
      return;
    }
  }
  float* out = B<float>(c, w.ops[SLOT_OUT0]);
  const unsigned short* xs = prep(1);
  if (is_fp8(c, wid)) {
    // whole row groups (the compiler's fp8 unit rows are multiples of 32); a barrier between them
    for (unsigned rg = s.r0 / 32; rg * 32 < s.r1; ++rg) {
      if (rg * 32 != s.r0) BLOCK_SYNC();
      // what the epilogue reads (the residual row), loaded before the row group streams by
      const float pv = !partial && threadIdx.x < 32 ? pre(c, rg * 32 + threadIdx.x) : 0.f;
      fp8_row_group<1>(c, &wid, rg, s.g0, s.g1, xs, tile_red(smem, K), partial, out, w.rows,
                       [&](int, unsigned r, float v) { epilogue(c, r, v, pv); });
    }
    return;
  }
  unsigned short wids[2] = {wid, wid};
  warp_row_pairs(s.r0, s.r1, [&](const unsigned* rows, int n) {
    float total[2] = {0.f, 0.f};
    auto part = [&](int i, unsigned g, float v) {
      if (partial) {
        if (lane == 0) out[(size_t)g * w.rows + rows[i]] = v;
      } else {
        total[i] += v;  // ORDER: k-groups in order
      }
    };
    if (n == 2) dot_rows<2>(c, wids, rows, xs, s.g0, s.g1, part);
    else dot_rows<1>(c, wids, rows, xs, s.g0, s.g1, part);
    if (!partial && lane == 0)
      for (int i = 0; i < n; ++i) epilogue(c, rows[i], total[i], pre(c, rows[i]));
  });
}
// The split-K reduce of one unit: y[r] = bf(sum_g partial[g][r]), or with the residual add
// h[r] = bf(h[r] + bf(sum)). ORDER: groups in index order (the same as the CPU's row dot product). An
// M-row step's M rows in one loop over (row, output) pairs, row m on row view m.
__device__ void reduce_rows(const DevCtx& c, const Word& w, unsigned u, bool residual) {
  unsigned r0 = u * w.unit_rows, r1 = min(w.rows, r0 + w.unit_rows), n = r1 - r0;
  for (unsigned q = threadIdx.x; q < M_ROWS * n; q += THREADS) {
    const unsigned r = r0 + (M_ROWS == 1 ? q : q % n);
    const DevCtx rv = M_ROWS == 1 ? c : row_view(c, q / n);
    const float* p = B<float>(rv, w.ops[SLOT_IN0]);
    unsigned short* y = B<unsigned short>(rv, w.ops[SLOT_OUT0]);
    float s = 0.f;
    for (unsigned g = 0; g < w.arg0; ++g) s += p[(size_t)g * w.rows + r];
    y[r] = residual ? f2bf(bf2f(y[r]) + bf(s)) : f2bf(s);
  }
}
