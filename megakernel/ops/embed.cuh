// op_embed: h[rows of the unit] = embed[token][rows] (bf16 copy).
__device__ void op_embed(const DevCtx& c, const Word& w, unsigned u, char*, bool) {
  unsigned tok = B<unsigned>(c, w.ops[SLOT_IN0])[1];
  unsigned H = c.cols[w.ops[SLOT_W0]];
  const unsigned short* e = B<unsigned short>(c, w.ops[SLOT_W0]) + (size_t)tok * H;
  unsigned short* h = B<unsigned short>(c, w.ops[SLOT_OUT0]);
  unsigned r0 = u * w.unit_rows, r1 = min(w.rows, r0 + w.unit_rows);
  for (unsigned r = r0 + threadIdx.x; r < r1; r += THREADS) h[r] = e[r];
}
