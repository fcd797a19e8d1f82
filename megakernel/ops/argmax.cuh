// op_argmax: the greedy token from the lm_head candidates in vocabulary order (strictly greater wins:
// the lowest id on ties), written to ctrl[2].
__device__ void op_argmax(const DevCtx& c, const Word& w, unsigned, char*) {
  if (threadIdx.x != 0) return;
  const float* cand = B<float>(c, w.ops[SLOT_IN0]);
  float best = cand[0], id = cand[1];
  for (unsigned i = 1; i < w.arg0; ++i)
    if (cand[2 * i] > best || best != best) { best = cand[2 * i]; id = cand[2 * i + 1]; }
  B<unsigned>(c, w.ops[SLOT_OUT0])[2] = (unsigned)id;
}
