// op_gemv_residual: o_proj / down_proj: h[r] = bf(h[r] + bf(W . x)), or split-K partials.
__device__ void op_gemv_residual(const DevCtx& c, const Word& w, unsigned u, char* smem, bool fresh) {
  unsigned short* h = B<unsigned short>(c, w.ops[SLOT_OUT0]);
  gemv_rows(c, w, u, w.ops[SLOT_W0], smem, [&] { return prepared_input(c, w, SLOT_W1, smem, fresh); },  // W1 unused: x as is
            [&](unsigned r) { return bf2f(h[r]); }, [&](unsigned r, float v, float hr) { h[r] = f2bf(hr + bf(v)); });
}
