// The GEMV's arithmetic, shared by the discrete kernels and the megakernel: fp8 / bf16 16-byte chunks
// times the prepared input, the warp's row dot products (`dot_rows`, the megakernel's) and the pipelined
// weight stream (`fp8_stream`, the discrete kernels'), the unit driver `gemv_rows` and the split-K
// reduce. Owns: every GEMV sum's order (the CPU reference's `dot_warp`). Refuses: float atomics.
#pragma once

// d = a * b + c on two bf16 lanes, one rounding each (round to nearest even, subnormals kept).
__device__ __forceinline__ unsigned bf16x2_fma(unsigned a, unsigned b, unsigned c) {
  unsigned d;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}


// A block scale as a bf16 pair of scale * 2^120 (the factor e4m3x2_widen leaves out), for bf16x2_fma.
__device__ __forceinline__ unsigned bf16_scale_pair(float scale) {
  unsigned sb = __float_as_uint(scale * 0x1p120f) >> 16;
  return sb | (sb << 16);
}

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

// acc[i] += the 16 fp8 weights v[i] times bf16 shared xs[0..16) for NR rows, each row exactly as
// chunk_fp8 (its elements in order, one fma each, the same bits): x is read and widened once for all
// rows. BS: every row's scales are bf16 below 2^8 (wbytes 1: one fma.rn.bf16x2 per pair); else the
// CPU's fp32 product then bf16 for every row (the same bits for a bf16 scale: its product is exact).
template <int NR, bool BS, bool LDS = true>
__device__ __forceinline__ void chunk_fp8_rows(const uint4* v, const unsigned short* xs, const float* scale, float* acc) {
  uint4 xa = LDS ? lds16(xs) : *(const uint4*)xs, xb = LDS ? lds16(xs + 8) : *(const uint4*)(xs + 8);
  unsigned xw[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
  unsigned s2[NR];
#pragma unroll
  for (int i = 0; i < NR; ++i) s2[i] = bf16_scale_pair(scale[i]);
#pragma unroll
  for (int q = 0; q < 4; ++q) {
#ifdef MK_BREAK_GEMV  // negative control for `mk gpu ops`: each pair of x's elements swapped (every fp8 GEMV wrong)
    float x[4] = {hi_bf(xw[2 * q]), lo_bf(xw[2 * q]), hi_bf(xw[2 * q + 1]), lo_bf(xw[2 * q + 1])};
#else
    float x[4] = {lo_bf(xw[2 * q]), hi_bf(xw[2 * q]), lo_bf(xw[2 * q + 1]), hi_bf(xw[2 * q + 1])};
#endif
#pragma unroll
    for (int i = 0; i < NR; ++i) {
      unsigned word = q == 0 ? v[i].x : q == 1 ? v[i].y : q == 2 ? v[i].z : v[i].w;
      if (BS) {
        unsigned d01 = bf16x2_fma(e4m3x2_widen(word, 0x9180), s2[i], 0x80008000u);
        unsigned d23 = bf16x2_fma(e4m3x2_widen(word, 0xB3A2), s2[i], 0x80008000u);
        acc[i] = fmaf(lo_bf(d01), x[0], acc[i]);
        acc[i] = fmaf(hi_bf(d01), x[1], acc[i]);
        acc[i] = fmaf(lo_bf(d23), x[2], acc[i]);
        acc[i] = fmaf(hi_bf(d23), x[3], acc[i]);
      } else {
#pragma unroll
        for (int b = 0; b < 4; ++b) {
          unsigned byte = (word >> (8 * b)) & 255u;
          float raw = __uint_as_float(((byte & 0x80u) << 24) | ((byte & 0x7fu) << 20)) * 0x1p120f;
          acc[i] = fmaf(bf(raw * scale[i]), x[b], acc[i]);
        }
      }
    }
  }
}

// acc += the 16 fp8 weights of v times bf16 shared xs[0..16), in element order. fp8 weights are
// dequantised as the oracle's bf16(e4m3 * scale): wbytes 1 (bf16 scales below 2^8) on bf16 pairs, code
// * (scale * 2^120) rounded once by fma.rn.bf16x2; wbytes 3 (other scales) as the CPU does, the fp32
// product e4m3 * scale then bf16. NaN codes (0x7f/0xff) are refused when the GPU path loads a
// checkpoint (they would decode to finite values here).
__device__ __forceinline__ float chunk_fp8(uint4 v, const unsigned short* xs, float scale, bool bf16_scale, float acc) {
  if (bf16_scale) chunk_fp8_rows<1, true, false>(&v, xs, &scale, &acc);
  else chunk_fp8_rows<1, false, false>(&v, xs, &scale, &acc);
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

// The warp's dot products of NR weight rows (wid[i], row[i]; all fp8 or all bf16, of one width K)
// with bf16 shared xs, k-group by k-group over groups [g0, g1): `part(i, g, value)` receives each
// (row, group) partial in group order, on every lane. ORDER inside a group (fixed, the CPU reference's
// `dot_warp` over a group): lane l sums its 16-byte chunks k = k0 + 16 l + 512 j (fp8; bf16: 8 l + 256 j)
// for j = 0, 1, .. in order, elements in order within a chunk, fma in fp32; then the warp butterfly.
// Memory-level parallelism: every lane issues all loads of GEMV_FP8_GROUPS groups (fp8) or one group
// (bf16) for all NR rows before any arithmetic: GEMV_FP8_GROUPS x NR x 2 (fp8) or NR x 4 (bf16) 16-byte
// loads in flight per lane. None of this changes the order of any sum.
template <int NR, typename Part>
__device__ void dot_rows(const DevCtx& c, const unsigned short* wid, const unsigned* row, const unsigned short* xs, unsigned g0, unsigned g1, Part part) {
  unsigned K = c.cols[wid[0]], lane = threadIdx.x & 31;
  unsigned char wb = c.wbytes[wid[0]];
  if (wb == 1 || wb == 3) {
    const unsigned char* w[NR];
    const float* sc[NR];
    bool bs[NR];
#pragma unroll
    for (int i = 0; i < NR; ++i) {
      bs[i] = c.wbytes[wid[i]] == 1;
      w[i] = (const unsigned char*)c.bufs[wid[i]] + (size_t)row[i] * K;
      sc[i] = c.scales[wid[i]] + (size_t)(row[i] / 128) * ((K + 127) / 128);
    }
    for (unsigned g = g0; g < g1; g += GEMV_FP8_GROUPS) {
      uint4 v[NR][GEMV_FP8_GROUPS][2];
#pragma unroll
      for (int i = 0; i < NR; ++i)
#pragma unroll
        for (int gg = 0; gg < GEMV_FP8_GROUPS; ++gg)
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            unsigned k = (g + gg) * KGROUP + lane * 16 + j * 512;
            bool ok = g + gg < g1 && k < min(K, (g + gg + 1) * KGROUP);
            v[i][gg][j] = ok ? ldw(w[i] + k) : make_uint4(0, 0, 0, 0);
          }
#pragma unroll
      for (int i = 0; i < NR; ++i)
#pragma unroll
        for (int gg = 0; gg < GEMV_FP8_GROUPS; ++gg) {
          if (g + gg >= g1) break;
          float acc = 0.f;
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            unsigned k = (g + gg) * KGROUP + lane * 16 + j * 512;
            if (k < min(K, (g + gg + 1) * KGROUP)) acc = chunk_fp8(v[i][gg][j], xs + k, sc[i][k / 128], bs[i], acc);
          }
          part(i, g + gg, warp_sum(acc));
        }
    }
  } else {
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
        float acc = 0.f;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          unsigned k = g * KGROUP + lane * 8 + j * 256;
          if (k < k1) acc = chunk_bf16(v[i][j], xs + k, acc);
        }
        part(i, g, warp_sum(acc));
      }
    }
  }
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

// A warp's fp8 GEMV as a stream of items (s, g): row sets s = 0 .. ns - 1 of NR (weight wid[i], row
// row_of(s, i)) pairs (a row at or past `lim` is skipped), times the prepared input, k-group g in
// [g0, g1) (item order: s, then g). The loads of item t + 1 (weights and their block scales) are issued
// before the arithmetic of item t, and item 0's before `prep()`, which prepares the input
// in shared memory and returns it: the first loads overlap the block's norm (weights never depend on
// activations). `part(s, i, g, v)`: the (row, group) partial on every lane of the warp, groups in order.
// ORDER: each (row, group) exactly as dot_rows (lane chunks in order, elements in order, one fma each,
// then the butterfly): the same bits, whichever pipelining.
template <bool B> struct BoolTag { static constexpr bool value = B; };
template <int NR, typename RowOf, typename Prep, typename Part>
__device__ void fp8_stream(const DevCtx& c, const unsigned short* wid, unsigned ns, unsigned lim, RowOf row_of, Prep prep, unsigned g0, unsigned g1, char* smem, Part part) {
  unsigned K = c.cols[wid[0]], lane = threadIdx.x & 31, kb = (K + 127) / 128, ng = g1 - g0, n = ns * ng;
  bool all_bs = true;
#pragma unroll
  for (int i = 0; i < NR; ++i) all_bs = all_bs && c.wbytes[wid[i]] == 1;
  struct Item {
    uint4 v[2][NR];
    float sc[2][NR];
  };
  unsigned ls = 0, lg = g0;  // the next item to load (set, group)
  auto load = [&](Item& it) {
#pragma unroll
    for (int i = 0; i < NR; ++i) {
      unsigned r = row_of(ls, i);
      const unsigned char* wr = (const unsigned char*)c.bufs[wid[i]] + (size_t)r * K;
      const float* sc = c.scales[wid[i]] + (size_t)(r / 128) * kb;
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        unsigned k = lg * KGROUP + lane * 16 + j * 512;
        bool ok = r < lim && k < min(K, (lg + 1) * KGROUP);
        it.v[j][i] = ok ? ldw(wr + k) : make_uint4(0, 0, 0, 0);
        it.sc[j][i] = ok ? sc[k / 128] : 0.f;
      }
    }
    if (++lg == g1) {
      lg = g0;
      ++ls;
    }
  };
  Item cur, nxt;
  if (n) load(cur);
  const unsigned short* xs = prep();
  auto items = [&](auto bs_tag) {
    constexpr bool BS = decltype(bs_tag)::value;
    unsigned s = 0, g = g0;
    for (unsigned t = 0; t < n; ++t) {
      if (t + 1 < n) load(nxt);
      float acc[NR];
#pragma unroll
      for (int i = 0; i < NR; ++i) acc[i] = 0.f;
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        unsigned k = g * KGROUP + lane * 16 + j * 512;
        if (k < min(K, (g + 1) * KGROUP)) chunk_fp8_rows<NR, BS>(cur.v[j], xs + k, cur.sc[j], acc);
      }
#pragma unroll
      for (int i = 0; i < NR; ++i) {
        float v = warp_sum(acc[i]);  // every lane, every row (converged: no collective emulation)
        if (row_of(s, i) < lim) part(s, i, g, v);
      }
      if (++g == g1) {
        g = g0;
        ++s;
      }
      cur = nxt;
    }
  };
  if (all_bs) items(BoolTag<true>());
  else items(BoolTag<false>());
}

// Row sets of a warp over rows [r0, r1) with `step` rows between its sets: r0 + warp + step * s < r1.
__device__ __forceinline__ unsigned warp_sets(unsigned r0, unsigned r1, unsigned step) {
  unsigned first = r0 + (threadIdx.x >> 5);
  return first < r1 ? (r1 - first + step - 1) / step : 0;
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

// For each row of the span (a warp per row, two rows at a time: rows r0 + warp + 16 s and that + 8):
// the per-group sums, either stored as split-K partials [g][rows] (FLAG_PARTIAL) or summed in group
// order and handed to `epilogue(row, value)` by lane 0. `prep()` prepares the input (every thread calls
// it once) and returns it; with STREAM, fp8 weights issue their first loads before it (fp8_stream).
template <bool STREAM, typename Prep, typename Epi>
__device__ void gemv_rows(const DevCtx& c, const Word& w, unsigned u, unsigned short wid, char* smem, Prep prep, Epi epilogue) {
  unsigned K = c.cols[wid];
  GemvSpan s = gemv_span(w, u, K);
  unsigned lane = threadIdx.x & 31;
  bool partial = w.flags & FLAG_PARTIAL;
  float* out = B<float>(c, w.ops[SLOT_OUT0]);
  unsigned short wids[2] = {wid, wid};
  unsigned char wb = c.wbytes[wid];
  // fp8 rows through fp8_stream in the discrete kernels, two rows a warp at a time (row r0 + warp +
  // 8 (2 s + i)); the megakernel keeps dot_rows (fp8_stream measured slower at its register budget:
  // docs/notebook/gemv.md). The same bits.
  if (STREAM && (wb == 1 || wb == 3)) {
    constexpr int NR = 2;
    float total[NR] = {};  // (set from the first group on; zeroed only to quiet the compiler)
    auto row_of = [&](unsigned set, int i) { return s.r0 + (threadIdx.x >> 5) + NR * WARPS * set + WARPS * i; };
    fp8_stream<NR>(c, wids, warp_sets(s.r0, s.r1, NR * WARPS), s.r1, row_of, prep, s.g0, s.g1, smem, [&](unsigned set, int i, unsigned g, float v) {
      if (partial) {
        if (lane == 0) out[(size_t)g * w.rows + row_of(set, i)] = v;
        return;
      }
      total[i] = (g == s.g0 ? 0.f : total[i]) + v;  // ORDER: k-groups in order, from 0 as dot_rows' callers
      if (g + 1 == s.g1 && lane == 0) epilogue(row_of(set, i), total[i]);
    });
    return;
  }
  const unsigned short* xs = prep();
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
      for (int i = 0; i < n; ++i) epilogue(rows[i], total[i]);
  });
}

// The split-K reduce of one unit: y[r] = bf(sum_g partial[g][r]), or with the residual add
// h[r] = bf(h[r] + bf(sum)). ORDER: groups in index order (the same as the CPU's row dot product).
__device__ void reduce_rows(const DevCtx& c, const Word& w, unsigned u, bool residual) {
  const float* p = B<float>(c, w.ops[SLOT_IN0]);
  unsigned short* y = B<unsigned short>(c, w.ops[SLOT_OUT0]);
  unsigned r0 = u * w.unit_rows, r1 = min(w.rows, r0 + w.unit_rows);
  for (unsigned r = r0 + threadIdx.x; r < r1; r += THREADS) {
    float s = 0.f;
    for (unsigned g = 0; g < w.arg0; ++g) s += p[(size_t)g * w.rows + r];
    y[r] = residual ? f2bf(bf2f(y[r]) + bf(s)) : f2bf(s);
  }
}
