// op_gdn_recur: the gated delta rule for value head j = unit (fp32): l2norm of its q/k head (j / (Hv/Hk)),
// q / sqrt(128), beta = bf(sigmoid(b)), decay = exp(-exp(A_log) softplus(a + dt_bias)); thread v owns
// state column v: kv = sum_k (S[k][v] decay) k[k]; delta = (v - kv) beta; S[k][v] = S[k][v] decay +
// k[k] delta; o[v] = sum_k S[k][v] q[k]. ORDER: k = 0..127 in order, as the CPU reference.
// Thread v loads its whole state column into registers first (128 independent loads in flight, issued
// before the norms so their latency overlaps them), then works from registers and stores it back once.
__device__ void op_gdn_recur(const DevCtx& c, const Word& w, unsigned u, char* smem, bool) {
  const unsigned d = 128;
  unsigned j = u, hk = w.arg0, hv = w.rows, qk = j / (hv / hk);
  const unsigned short* mixed = B<unsigned short>(c, w.ops[SLOT_IN0]);
  float* qs = (float*)smem;
  float* ks = qs + d;
  float* sh = ks + d;  // [0] q inv norm, [1] k inv norm
  unsigned key_dim = hk * d;
  float* S = B<float>(c, w.ops[SLOT_ST0]) + (size_t)j * d * d;
  float col[128];
  if (threadIdx.x < d) {
#pragma unroll
    for (unsigned k = 0; k < d; ++k) col[k] = S[k * d + threadIdx.x];
  }
  if (threadIdx.x < d) {
    qs[threadIdx.x] = bf2f(mixed[qk * d + threadIdx.x]);
    ks[threadIdx.x] = bf2f(mixed[key_dim + qk * d + threadIdx.x]);
  }
  __syncthreads();
  if (threadIdx.x < 2) {  // ORDER: sequential sum of squares, as the CPU reference's l2norm
    float* v = threadIdx.x == 0 ? qs : ks;
    float ss = 0.f;
    for (unsigned i = 0; i < d; ++i) ss += v[i] * v[i];
    sh[threadIdx.x] = 1.0f / sqrtf(ss + 1e-6f);
  }
  __syncthreads();
  float scale = sqrtf((float)d);
  if (threadIdx.x < d) {
    qs[threadIdx.x] = (qs[threadIdx.x] * sh[0]) / scale;
    ks[threadIdx.x] = ks[threadIdx.x] * sh[1];
  }
  __syncthreads();
  if (threadIdx.x >= d) return;
  unsigned v = threadIdx.x;
  float b = bf2f(B<unsigned short>(c, w.ops[SLOT_IN1])[j]);
  float a = bf2f(B<unsigned short>(c, w.ops[SLOT_IN2])[j]);
  float beta = bf(sigm(b));
  float x = a + B<float>(c, w.ops[SLOT_W1])[j];
  float sp = x > 20.0f ? x : log1pf(expf(x));
  float decay = expf(-expf(B<float>(c, w.ops[SLOT_W0])[j]) * sp);
  float kv = 0.f;
#pragma unroll
  for (unsigned k = 0; k < d; ++k) kv += (col[k] * decay) * ks[k];
  float vv = bf2f(mixed[2 * key_dim + j * d + v]);
  float delta = (vv - kv) * beta;
  float o = 0.f;
#pragma unroll
  for (unsigned k = 0; k < d; ++k) {
    float sn = col[k] * decay + ks[k] * delta;
    S[k * d + v] = sn;
    o += sn * qs[k];
  }
  B<unsigned short>(c, w.ops[SLOT_OUT0])[j * d + v] = f2bf(o);
}
