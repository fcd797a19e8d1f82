// op_gemv_norm: rows of bf(W . rmsnorm(x)) (norm weight in W1; none when W1 is unused), or split-K
// partials. Each unit recomputes the norm statistic itself (norms are folded into consumers).
__device__ void op_gemv_norm(const DevCtx& c, const Word& w, unsigned u, char* smem, bool fresh) {
  gemv_rows(c, w, u, w.ops[SLOT_W0], smem,
            [&](unsigned nx) { return prepared_rows(c, w, SLOT_W1, smem, fresh, nx); },
            [](const DevCtx&, unsigned) { return 0.f; },
            [&](const DevCtx& r, unsigned row, float v, float) { B<unsigned short>(r, w.ops[SLOT_OUT0])[row] = f2bf(v); });
}
