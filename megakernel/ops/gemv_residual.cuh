// op_gemv_residual: o_proj / down_proj: h[r] = bf(h[r] + bf(W . x)), or split-K partials.
__device__ void op_gemv_residual(const DevCtx& c, const Word& w, unsigned u, char* smem, bool fresh) {
  gemv_rows(c, w, u, w.ops[SLOT_W0], smem,
            [&](unsigned nx) { return prepared_rows(c, w, SLOT_W1, smem, fresh, nx); },  // W1 unused: x as is
            [&](const DevCtx& r, unsigned row) { return bf2f(B<unsigned short>(r, w.ops[SLOT_OUT0])[row]); },
            [&](const DevCtx& r, unsigned row, float v, float hr) { B<unsigned short>(r, w.ops[SLOT_OUT0])[row] = f2bf(hr + bf(v)); });
}
