// op_end_step: hands the token over (token = next, position + 1). Counter reset: the CPU interpreter
// resets its counters here; on the GPU the host zeroes the megakernel's counters and hand-out tickets
// before each launch (resetting here would race with blocks still taking EndStep's tickets), and
// the discrete path has none.
// M rows: every control row (position, token, next) hands over, each position moving on by M, and row
// 0's commit count becomes M (the next step commits every row of this one into the GDN states unless
// the host rolls back first); the stop looks at the last row.
__device__ void op_end_step(const DevCtx& c, const Word& w, unsigned, char*, bool) {
  if (threadIdx.x != 0) return;
  unsigned* ctrl = B<unsigned>(c, w.ops[SLOT_IN0]);
  for (unsigned m = 0; m < w.m_rows; ++m) {
    unsigned* r = ctrl + CTRL_LEN * m;
    r[1] = r[2];
    r[0] += w.m_rows;
  }
  if (w.m_rows > 1) ctrl[CTRL_COMMIT] = w.m_rows;
  ctrl += CTRL_LEN * (w.m_rows - 1);
  // The device-side stop: this step produced the stop token, so it is the last.
  if (c.stop[0] != 0 && ctrl[1] == c.stop[0] - 1) c.stop[1] = 1;
}
