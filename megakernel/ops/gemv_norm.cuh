// op_gemv_norm: rows of bf(W . rmsnorm(x)) (norm weight in W1; none when W1 is unused), or split-K
// partials. Each unit recomputes the norm statistic itself (norms are folded into consumers).
__device__ void op_gemv_norm(const DevCtx& c, const Word& w, unsigned u, char* smem, bool fresh) {
  unsigned short* out = B<unsigned short>(c, w.ops[SLOT_OUT0]);
  gemv_rows(c, w, u, w.ops[SLOT_W0], smem, [&] { return prepared_input(c, w, SLOT_W1, smem, fresh); },
            [](unsigned) { return 0.f; }, [&](unsigned r, float v, float) { out[r] = f2bf(v); });
}
