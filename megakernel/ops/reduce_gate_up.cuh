// op_reduce_gate_up: act[r] = bf(bf(silu(bf(sum_g gate[g][r]))) * bf(sum_g up[g][r])) from the partials
// [2][groups][rows] of a gate/up word cut into ranges (FLAG_RANGES), groups in index order (as
// reduce_rows; gemv_gate_up's epilogue). One thread a row; an M-row step's rows one after another
// (for_rows hands the op each row's view).
__device__ void op_reduce_gate_up(const DevCtx& c, const Word& w, unsigned u, char*, bool) {
  const unsigned r0 = u * w.unit_rows, r1 = min(w.rows, r0 + w.unit_rows);
  const float* p = B<float>(c, w.ops[SLOT_IN0]);
  unsigned short* y = B<unsigned short>(c, w.ops[SLOT_OUT0]);
  for (unsigned r = r0 + threadIdx.x; r < r1; r += THREADS) {
    float g = 0.f, v = 0.f;
    for (unsigned k = 0; k < w.arg0; ++k) g += p[(size_t)k * w.rows + r];
    for (unsigned k = 0; k < w.arg0; ++k) v += p[(size_t)(w.arg0 + k) * w.rows + r];
    y[r] = f2bf(bf(silu(bf(g))) * bf(v));
  }
}
