// op_attn_reduce_gate: head h = unit: o = bf(sum_p o_p) over the partitions in order, then the output
// gate bf(o * bf(sigmoid(g))) with the gate half of the head's q_proj rows.
__device__ void op_attn_reduce_gate(const DevCtx& c, const Word& w, unsigned u, char*, bool) {
  unsigned pos = B<unsigned>(c, w.ops[SLOT_IN2])[0], n_parts = (pos + ATTN_PART) / ATTN_PART;
  unsigned parts = w.arg0, d = c.head_dim, h = u, t = threadIdx.x;
  if (t >= d) return;
  const float* part = B<float>(c, w.ops[SLOT_IN0]) + (size_t)h * parts * d;
  float s = 0.f;
  for (unsigned i = 0; i < n_parts; ++i) s += part[i * d + t];
  float g = bf2f(B<unsigned short>(c, w.ops[SLOT_IN1])[2 * d * h + d + t]);
  B<unsigned short>(c, w.ops[SLOT_OUT0])[h * d + t] = f2bf(bf(s) * bf(sigm(g)));
}
