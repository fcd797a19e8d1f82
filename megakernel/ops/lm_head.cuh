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

// The unit's logits for MR inputs (row m's prepared at xs + m stride, on row view m): each weight row
// read once for all of them (dot_rows_m), then row m's candidate by lane 0 of warp m, row m's top-k
// counts by warp 1.
// The pruned head (IN1 = [n, ids ..], the MTP drafter's, M = 1; ISA LmHead): rows are list positions below
// n, each scoring W's row ids[pos], logits by position, the candidate's id the list's; a unit past n
// offers (NaN, FLT_MAX), which every candidate beats.
template <int MR>
__device__ void lm_head_rows(const DevCtx& c, const Word& w, unsigned u, const unsigned short* xs, unsigned stride) {
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
  unsigned groups = (K + KGROUP - 1) / KGROUP;
  unsigned short wids[2] = {w.ops[SLOT_W0], w.ops[SLOT_W0]};
  // one row a warp at a time for MR rows (its 32 widened weights and MR sums: pairs spilled at M = 8)
  warp_rows(r0, r1, MR == 1 ? 2 : 1, [&](const unsigned* rows, int n) {
    float v[2][MR];
#pragma unroll
    for (int m = 0; m < MR; ++m) v[0][m] = v[1][m] = 0.f;
    auto part = [&](int i, int m, unsigned, float p) { v[i][m] += p; };  // ORDER: k-groups in order
    const unsigned ids[2] = {list ? list[1 + rows[0]] : rows[0], list && n == 2 ? list[1 + rows[1]] : rows[n - 1]};
    if (n == 2) dot_rows_m<2, MR>(c, wids, ids, xs, stride, 0, groups, part);
    else dot_rows_m<1, MR>(c, wids, ids, xs, stride, 0, groups, part);
    if ((threadIdx.x & 31) == 0)
#pragma unroll
      for (int m = 0; m < MR; ++m)
        for (int i = 0; i < n; ++i) B<unsigned short>(row_view(c, m), w.ops[SLOT_OUT0])[rows[i]] = f2bf(v[i][m]);
  });
  BLOCK_SYNC();
  const unsigned m = threadIdx.x >> 5;
  if ((threadIdx.x & 31) == 0 && m < MR) {
    const DevCtx r = row_view(c, m);
    const unsigned short* logits = B<unsigned short>(r, w.ops[SLOT_OUT0]);
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
      lm_head_rows<M_ROWS>(c, w, u, (const unsigned short*)smem, xrow_bytes(K) / 2);
      return;
    }
  }
  lm_head_rows<1>(c, w, u, prepared_input(c, w, SLOT_W1, smem, fresh), 0);
}
