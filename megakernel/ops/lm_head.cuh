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

__device__ void op_lm_head(const DevCtx& c, const Word& w, unsigned u, char* smem, bool fresh) {
  unsigned K = c.cols[w.ops[SLOT_IN0]];
  unsigned short* xs = prepared_input(c, w, SLOT_W1, smem, fresh);
  unsigned short* logits = B<unsigned short>(c, w.ops[SLOT_OUT0]);
  unsigned r0 = u * w.unit_rows, r1 = min(w.rows, r0 + w.unit_rows);
  unsigned groups = (K + KGROUP - 1) / KGROUP;
  unsigned short wids[2] = {w.ops[SLOT_W0], w.ops[SLOT_W0]};
  warp_row_pairs(r0, r1, [&](const unsigned* rows, int n) {
    float v[2] = {0.f, 0.f};
    auto part = [&](int i, unsigned, float p) { v[i] += p; };  // ORDER: k-groups in order
    if (n == 2) dot_rows<2>(c, wids, rows, xs, 0, groups, part);
    else dot_rows<1>(c, wids, rows, xs, 0, groups, part);
    if ((threadIdx.x & 31) == 0)
      for (int i = 0; i < n; ++i) logits[rows[i]] = f2bf(v[i]);
  });
  BLOCK_SYNC();
  if (threadIdx.x == 0) {
    float best = bf2f(logits[r0]);
    unsigned id = r0;
    for (unsigned r = r0 + 1; r < r1; ++r) {
      float v = bf2f(logits[r]);
      if (v > best || (best != best && v == v)) { best = v; id = r; }
    }
    float* cand = B<float>(c, w.ops[SLOT_OUT1]);
    cand[2 * u] = best;
    cand[2 * u + 1] = (float)id;
  }
  if (threadIdx.x >= 32 && threadIdx.x < 64) topk_count(c, logits, r0, r1);
}
