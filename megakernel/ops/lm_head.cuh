// op_lm_head: logits of the unit's vocabulary rows, bf(W . rmsnorm(h)) (final norm in W1), and the
// unit's (max, argmax) candidate: first maximum in row order, so the lowest id wins ties (a NaN
// below every number, as op_argmax and the CPU's argmax).
// Sampling on: warp 1 counts the unit's logits into the sampler's histograms (integer
// atomics: exact counts in any order; lanes of one key add together) for the top-k threshold, so the
// sampler never reads the whole vocabulary to find it.
__device__ __forceinline__ void topk_count(const DevCtx& c, const unsigned short* logits, unsigned r0, unsigned r1) {
  if (!c.sampler || !(((const SampleParams*)c.sampler)->temperature > 0.0f)) return;
  unsigned lane = threadIdx.x & 31;
  for (unsigned base = r0; base < r1; base += 32) {
    bool in = base + lane < r1;
    unsigned key = in ? logit_key(logits[base + lane]) : 0xffffffffu;
    unsigned same = __match_any_sync(0xffffffffu, key);
    if (in && __ffs(same) - 1 == (int)lane) atomicAdd(c.sampler + SB_FULL + key, (unsigned)__popc(same));
    unsigned hi = in ? key >> 8 : 0xffffffffu;
    same = __match_any_sync(0xffffffffu, hi);
    if (in && __ffs(same) - 1 == (int)lane) atomicAdd(c.sampler + SB_HI + hi, (unsigned)__popc(same));
  }
}

// One 16 x 128 bf16 warp tile of the lm_head times x on tensor cores: wv the lane's 8 loads (lane
// (g, cq): [l] row g's elements 32 l + 8 cq .. + 7 of the tile, [4 + l] row g + 8's, l = 0..3: each
// load instruction reads 64 contiguous bytes of each of 16 rows, whole 32-byte sectors), xw its 16 words
// of x over the same elements. mma s (8) takes the rows' words 2 s and 2 s + 1 as A's k pairs 2 cq and
// 2 cq + 8 and x's words 2 s, 2 s + 1 as B's: one permutation of k for A and B, so the sum is the
// tile's dot product. Even s into d, odd into e (two accumulator chains).
__device__ __forceinline__ void bf16_tile_mma(const uint4 (&wv)[8], const unsigned (&xw)[16], float (&d)[4], float (&e)[4]) {
  const unsigned r0[16] = {wv[0].x, wv[0].y, wv[0].z, wv[0].w, wv[1].x, wv[1].y, wv[1].z, wv[1].w,
                           wv[2].x, wv[2].y, wv[2].z, wv[2].w, wv[3].x, wv[3].y, wv[3].z, wv[3].w};
  const unsigned r8[16] = {wv[4].x, wv[4].y, wv[4].z, wv[4].w, wv[5].x, wv[5].y, wv[5].z, wv[5].w,
                           wv[6].x, wv[6].y, wv[6].z, wv[6].w, wv[7].x, wv[7].y, wv[7].z, wv[7].w};
#pragma unroll
  for (int s = 0; s < 8; s += 2) {
#ifdef MK_BREAK_GEMV  // negative control: x's two k pairs of each mma swapped (the lm_head wrong)
    mma_bf16(d, r0[2 * s], r8[2 * s], r0[2 * s + 1], r8[2 * s + 1], xw[2 * s + 1], xw[2 * s]);
#else
    mma_bf16(d, r0[2 * s], r8[2 * s], r0[2 * s + 1], r8[2 * s + 1], xw[2 * s], xw[2 * s + 1]);
#endif
    mma_bf16(e, r0[2 * s + 2], r8[2 * s + 2], r0[2 * s + 3], r8[2 * s + 3], xw[2 * s + 2], xw[2 * s + 3]);
  }
}

// The unit's logits for MR inputs (row m's prepared at xs + m stride, on row view m) on tensor cores,
// each weight tile read once for all of them: warp w takes the 16 rows r0 + 16 (w % 4) .. and half
// w / 4 of the k-tiles (half 0: tiles 0 .. K / 256, half 1 the rest; each tile's 8 loads of 16 bytes a
// lane issued before its arithmetic), row m's input in B's column m (lane (g, cq) loads row
// min(g, MR - 1)'s; MR = 1: every column holds the one row); half 1's sums through shared memory `xch`
// ([4][MR][16] floats) to half 0's warps, which write the logits. ORDER of a logit: each half's
// tensor-core sum over its tiles in order (two chains d and e, d + e), then half 0 + half 1; the same
// for every column, so row m has the bits of a one-row step. Then row m's candidate by lane 0 of warp
// m, row m's top-k counts by warp 1. The host's unit is LM_UNIT_ROWS = 64 rows (word_checks).
// The pruned head (IN1 = [n, ids ..], the MTP drafter's, M = 1; ISA LmHead): rows are list positions below
// n, each scoring W's row ids[pos], logits by position, the candidate's id the list's; a unit past n
// offers (NaN, FLT_MAX), which every candidate beats.
#ifdef MK_HEAD_MASK
// The head mask (issue 30; IN2; only programs compiled with one define MK_HEAD_MASK, so the others
// compile exactly as before): row m's element 0 its flag (0: unmasked), element 1 + j the bits of ids
// 16 j .. 16 j + 15. A masked row's disallowed ids are not scored (their logits -inf, written by the
// unit: no separate pass), never proposed, and their weight rows not read unless another row allows
// them; a unit no row allows reads no weights at all. MK_BREAK_MASK (negative control): masks ignored.
__device__ __forceinline__ const unsigned* head_mask_row(const DevCtx& c, const Word& w, unsigned m) {
#ifdef MK_BREAK_MASK
  return nullptr;
#else
  if (w.ops[SLOT_IN2] == OPERAND_NONE) return nullptr;
  const unsigned* mk = B<unsigned>(row_view(c, m), w.ops[SLOT_IN2]);
  return mk[0] ? mk + 1 : nullptr;
#endif
}
__device__ __forceinline__ bool head_allows(const unsigned* mk, unsigned id) { return !mk || (mk[id >> 4] >> (id & 15) & 1u); }

// A masked row's candidate: the argmax's rule (op_argmax's, the CPU's) over the allowed rows of
// [r0, r1); none allowed: (NaN, FLT_MAX), which every candidate beats (the interpreter's).
__device__ __forceinline__ void head_candidate_masked(const unsigned short* logits, const unsigned* mk, unsigned r0, unsigned r1, float* cand) {
  unsigned q = r0;
  while (q < r1 && !head_allows(mk, q)) ++q;
  float best = q < r1 ? bf2f(logits[q]) : __int_as_float(0x7fc00000);
  const unsigned first = q;
  unsigned id = q;
  for (++q; q < r1; ++q) {
    if (!head_allows(mk, q)) continue;
    float v = bf2f(logits[q]);
    if (v > best || (best != best && v == v)) { best = v; id = q; }
  }
  cand[0] = best;
  cand[1] = first < r1 ? (float)id : __int_as_float(0x7f7fffff);
}
#endif

static_assert(WARPS == 8, "lm_head: 4 row tiles x 2 k-halves");
template <int MR>
__device__ void lm_head_rows(const DevCtx& c, const Word& w, unsigned u, const unsigned short* xs, unsigned stride, float* xch) {
  unsigned K = c.cols[w.ops[SLOT_IN0]];
#ifdef MK_MTP  // (drafter programs only: the target's lm_head compiles as before)
  const unsigned* list = MR == 1 && w.ops[SLOT_IN1] != OPERAND_NONE ? B<unsigned>(c, w.ops[SLOT_IN1]) : nullptr;
#else
  const unsigned* const list = nullptr;
#endif
  unsigned r0 = u * w.unit_rows, r1 = min(w.rows, r0 + w.unit_rows);
  if (list) {
    r1 = min(r1, list[0]);
    if (r0 >= r1) {
      if (threadIdx.x == 0) {
        float* cand = B<float>(c, w.ops[SLOT_OUT1]);
        cand[2 * u] = __int_as_float(0x7fc00000);
        cand[2 * u + 1] = __int_as_float(0x7f7fffff);  // FLT_MAX, as the interpreter's
      }
      return;
    }
  }
#ifdef MK_HEAD_MASK
  // the rows' masks; `live`: some row allows some id of the unit
  const unsigned* mks[MR];
  bool live = false;
#pragma unroll
  for (int m = 0; m < MR; ++m) {
    mks[m] = head_mask_row(c, w, m);
    if (!mks[m]) live = true;
    else
      for (unsigned e = r0 >> 4; e < (r1 + 15) >> 4; ++e) live |= mks[m][e] != 0u;
  }
#endif
  {
    const unsigned warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, cq = lane & 3;
    const unsigned tr = warp % 4, half = warp / 4, nt = K / 128, ta = half ? nt / 2 : 0, tb = half ? nt : nt / 2;
    const unsigned ra = r0 + 16 * tr + g, rb = ra + 8;  // the lane's two rows
    const unsigned short* W = B<unsigned short>(c, w.ops[SLOT_W0]);
#ifdef MK_HEAD_MASK
    const bool ina = ra < r1, inb = rb < r1;
    bool oka = false, okb = false;  // a weight row is read when some input row allows its id
#pragma unroll
    for (int m = 0; m < MR; ++m) {
      oka |= ina && head_allows(mks[m], ra);
      okb |= inb && head_allows(mks[m], rb);
    }
    const unsigned t_end = live ? tb : ta;  // a unit no row allows reads no weights
#else
    const bool oka = ra < r1, okb = rb < r1;
    const unsigned t_end = tb;
#endif
    const unsigned short* wa = W + (size_t)(oka ? (list ? list[1 + ra] : ra) : 0) * K + 8 * cq;
    const unsigned short* wb = W + (size_t)(okb ? (list ? list[1 + rb] : rb) : 0) * K + 8 * cq;
    const unsigned short* xr = xs + (MR == 1 ? 0 : min(g, (unsigned)MR - 1)) * stride + 8 * cq;
    float d[4] = {0.f, 0.f, 0.f, 0.f}, e[4] = {0.f, 0.f, 0.f, 0.f};
    for (unsigned t = ta; t < t_end; ++t) {
      uint4 wv[8];
#pragma unroll
      for (int l = 0; l < 4; ++l) {
        wv[l] = oka ? ldw(wa + t * 128 + 32 * l) : make_uint4(0, 0, 0, 0);
        wv[4 + l] = okb ? ldw(wb + t * 128 + 32 * l) : make_uint4(0, 0, 0, 0);
      }
      unsigned xw[16];
#pragma unroll
      for (int l = 0; l < 4; ++l) {
        const uint4 v = lds16(xr + t * 128 + 32 * l);
        xw[4 * l] = v.x;
        xw[4 * l + 1] = v.y;
        xw[4 * l + 2] = v.z;
        xw[4 * l + 3] = v.w;
      }
      bf16_tile_mma(wv, xw, d, e);
    }
    // D's columns 2 cq (d[0]: row g, d[2]: row g + 8) and 2 cq + 1 (d[1], d[3]): input rows < MR
    float* x4 = xch + tr * MR * 16;
    if (half == 1)
#pragma unroll
      for (int j = 0; j < 2; ++j)
        if (2 * cq + j < MR) {
          x4[(2 * cq + j) * 16 + g] = d[j] + e[j];
          x4[(2 * cq + j) * 16 + g + 8] = d[2 + j] + e[2 + j];
        }
    BLOCK_SYNC();
    if (half == 0)
#pragma unroll
      for (int j = 0; j < 2; ++j)
        if (2 * cq + j < MR) {
          unsigned short* out = B<unsigned short>(row_view(c, 2 * cq + j), w.ops[SLOT_OUT0]);
          const float va = (d[j] + e[j]) + x4[(2 * cq + j) * 16 + g], vb = (d[2 + j] + e[2 + j]) + x4[(2 * cq + j) * 16 + g + 8];
#ifdef MK_HEAD_MASK
          const unsigned* mk = head_mask_row(c, w, 2 * cq + j);  // (-inf: disallowed; not mks[]: a
                                                                  // runtime index would put it in local memory)
          if (ina) out[ra] = head_allows(mk, ra) ? f2bf(va) : (unsigned short)0xff80u;  // ORDER: half 0 + half 1
          if (inb) out[rb] = head_allows(mk, rb) ? f2bf(vb) : (unsigned short)0xff80u;
#else
          if (oka) out[ra] = f2bf(va);  // ORDER: half 0 + half 1
          if (okb) out[rb] = f2bf(vb);
#endif
        }
  }
  BLOCK_SYNC();
  const unsigned m = threadIdx.x >> 5;
  if ((threadIdx.x & 31) == 0 && m < MR) {
    const DevCtx r = row_view(c, m);
    const unsigned short* logits = B<unsigned short>(r, w.ops[SLOT_OUT0]);
#ifdef MK_HEAD_MASK
    if (const unsigned* mk = head_mask_row(c, w, m)) {
      head_candidate_masked(logits, mk, r0, r1, B<float>(r, w.ops[SLOT_OUT1]) + 2 * u);
    } else
#endif
    {
    float best = bf2f(logits[r0]);
    unsigned id = r0;
    for (unsigned q = r0 + 1; q < r1; ++q) {
      float v = bf2f(logits[q]);
      if (v > best || (best != best && v == v)) { best = v; id = q; }
    }
    float* cand = B<float>(r, w.ops[SLOT_OUT1]);
    cand[2 * u] = best;
    cand[2 * u + 1] = (float)(list ? list[1 + id] : id);
    }
  }
  if (!list && threadIdx.x >= 32 && threadIdx.x < 64)
    for (unsigned mm = 0; mm < MR; ++mm) topk_count(c, B<unsigned short>(row_view(c, mm), w.ops[SLOT_OUT0]), r0, r1);
}

// op_lm_head: an M-row step's rows in one pass over the vocabulary when their inputs fit
// (`mrow_gemv`), else (and at M = 1) one row.
__device__ void op_lm_head(const DevCtx& c, const Word& w, unsigned u, char* smem, bool fresh) {
  unsigned K = c.cols[w.ops[SLOT_IN0]];
  if constexpr (M_ROWS > 1) {
    if (mrow_gemv(c, w)) {
      prepared_rows(c, w, SLOT_W1, smem, fresh, M_ROWS);
      lm_head_rows<M_ROWS>(c, w, u, (const unsigned short*)smem, xrow_bytes(K) / 2, mrow_red(smem, K, true));
      return;
    }
  }
  lm_head_rows<1>(c, w, u, prepared_input(c, w, SLOT_W1, smem, fresh), 0, tile_red(smem, K));
}
