// op_reduce_residual: h[r] = bf(h[r] + bf(sum_g partial[g][r])), groups in index order (see reduce_rows).
__device__ void op_reduce_residual(const DevCtx& c, const Word& w, unsigned u, char*, bool) { reduce_rows(c, w, u, true); }
