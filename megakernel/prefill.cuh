// Prefill on the graph path (issue 28 item 6, its first form; src/exec/gpu/prefill.rs launches these).
// A prefill program (PREFILL, M_ROWS = its M of up to 128 rows) runs its words as the discrete kernels
// do, rows by `for_rows`, except three kinds the host replaces by a short sequence of launches:
// - an fp8 GEMV word (GemvNorm, GemvGateUp, GemvResidual): k_pf_x prepares its M inputs as its GEMV
//   would (prepared_input: RMS-normed with the word's norm weight or taken as is, times 2^64), k_pf_tile
//   (exact mode) or k_pf_quant (fast mode: e4m3 per token and 128-group) puts them in the GEMM's tiled
//   layout, the GEMM (gemm_bulk.cuh k_gemm_wg_bulk / k_gemm_fast_wg: bulk copies and wgmma, the weights
//   read once for 128 rows, in their arena chunk layout; split-K summed in split order by
//   k_gemm_reduce), then k_pf_out applies the GEMV's own epilogue to the fp32 totals;
// - a bf16 GemvNorm (GDN's in_proj_a / b): k_pf_x, then k_pf_gemv_bf16 (a warp an output);
// - GdnChunk: k_pf_gdn_in (each row's l2-normed q and k, v, the gates), the chunked gated delta rule
//   (gdn_chunk.cuh: prep, then the scan from the layer's state, which it leaves as the final state),
//   then k_pf_gdn_out (each row's heads rounded to bf16 and gated-RMS-normed: gdn_gated_out).
// Numerics: the GEMM's tile sums run one accumulator chain a 16 x 128 tile where the GEMV runs two, and
// split-K adds the splits' totals: a prefilled row equals a decoded one to summation order, not in bits;
// the chunked recurrence rounds as the oracle's prompt path does (WY form), not as T decode steps. The
// GPU prefill against the interpreter's is judged by the envelope (src/verify/prefill.rs).
// Every kernel reads its word from the program (prog[wi]) and its buffers through the context's row
// views, as the K_OP kernels do; the host launches them without the programmatic attribute (stream
// order), so the kernel after one waits for it whole.

// Row m = blockIdx.x of word wi's input, prepared as its GEMV prepares it, into X [M][K] (bf16).
// Shared memory: xrow_bytes(K) + 64 (the row, the block sums).
extern "C" __global__ void __launch_bounds__(THREADS) k_pf_x(const Word* prog, unsigned wi, DevCtx c, unsigned norm_slot, unsigned short* X) {
  extern __shared__ __align__(16) char smem[];
  const Word& w = prog[wi];
  const unsigned K = c.cols[w.ops[SLOT_IN0]];
  const unsigned short* xs = prepared_input(row_view(c, blockIdx.x), w, norm_slot, smem, true);
  unsigned short* dst = X + (size_t)blockIdx.x * K;
  for (unsigned i = threadIdx.x; i < K; i += THREADS) dst[i] = xs[i];
}

// Exact mode's GEMM input: X [M][K] (k_pf_x's) into Xt, the bulk GEMM's tiled layout (gemm_bulk.cuh:
// chunk 2 s + h's element 2 c + e of a row holds k 64 (s / 4) + 32 ((s % 4) / 2) + 8 c + 4 (s % 2) + 2 h
// + e of the k-tile): a thread a pair of elements (e = 0, 1 stay adjacent), M K / 2 threads. Rows M .. Tp
// hold whatever a wider word left (their columns are never stored).
extern "C" __global__ void __launch_bounds__(THREADS) k_pf_tile(const unsigned short* __restrict__ X, unsigned short* __restrict__ Xt, unsigned M, unsigned K) {
  const unsigned long long i = blockIdx.x * (unsigned long long)THREADS + threadIdx.x;
  if (i >= (unsigned long long)M * K / 2) return;
  const unsigned m = (unsigned)(i / (K / 2)), k = 2 * (unsigned)(i % (K / 2)), kt = k / 128, kk = k % 128;
  const unsigned s = 4 * (kk / 64) + 2 * ((kk % 64) / 32) + (kk % 8) / 4, h = (kk % 4) / 2, c = (kk % 32) / 8;
  const size_t at = ((size_t)(m / 8) * (K / 8) + kt * 16 + 2 * s + h) * 64 + (m % 8) * 8 + 2 * c;  // (in bf16s)
  *(unsigned*)(Xt + at) = *(const unsigned*)(X + (size_t)m * K + k);
}

// Word wi's outputs of row m = blockIdx.y from the GEMM's fp32 totals Y [M][N] (gate / up: Y the
// gate's, Y2 the up's), the GEMV's epilogues: GemvNorm bf(v); GemvResidual h = bf(h + bf(v));
// GemvGateUp bf(bf(silu(bf(g))) * bf(u)).
extern "C" __global__ void __launch_bounds__(THREADS) k_pf_out(const Word* prog, unsigned wi, DevCtx c, const float* Y, const float* Y2) {
  const Word& w = prog[wi];
  const unsigned N = w.rows, m = blockIdx.y;
  unsigned short* out = B<unsigned short>(row_view(c, m), w.ops[SLOT_OUT0]);
  for (unsigned n = blockIdx.x * THREADS + threadIdx.x; n < N; n += gridDim.x * THREADS) {
    const float v = Y[(size_t)m * N + n];
    if (w.opcode == OP_GEMV_RESIDUAL) out[n] = f2bf(bf2f(out[n]) + bf(v));
    else if (w.opcode == OP_GEMV_GATE_UP) out[n] = f2bf(bf(silu(bf(v))) * bf(Y2[(size_t)m * N + n]));
    else out[n] = f2bf(v);
  }
}

// A bf16 GemvNorm word (GDN's in_proj_a / b: 48 rows) over the M prepared rows X: a warp an output
// (blockIdx.x * WARPS + warp) of row m = blockIdx.y; lane l takes k = 8 l, 8 l + 256, .. (8 products in
// order), then the butterfly (ORDER: the lane's chunks in k order, then warp_sum's).
extern "C" __global__ void __launch_bounds__(THREADS) k_pf_gemv_bf16(const Word* prog, unsigned wi, DevCtx c, const unsigned short* X) {
  const Word& w = prog[wi];
  const unsigned N = w.rows, K = c.cols[w.ops[SLOT_IN0]], m = blockIdx.y;
  const unsigned n = blockIdx.x * WARPS + (threadIdx.x >> 5), lane = threadIdx.x & 31;
  if (n >= N) return;
  const unsigned short* wr = B<unsigned short>(c, w.ops[SLOT_W0]) + (size_t)n * K;
  const unsigned short* x = X + (size_t)m * K;
  float s = 0.f;
  for (unsigned k = 8 * lane; k < K; k += 256) {
    const uint4 a = *(const uint4*)(wr + k), b = *(const uint4*)(x + k);
    const unsigned aw[4] = {a.x, a.y, a.z, a.w}, bw[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      s += lo_bf(aw[q]) * lo_bf(bw[q]);
      s += hi_bf(aw[q]) * hi_bf(bw[q]);
    }
  }
  s = warp_sum(s);
  if (lane == 0) B<unsigned short>(row_view(c, m), w.ops[SLOT_OUT0])[n] = f2bf(s);
}

// GdnChunk's inputs for gdn_chunk.cuh, a block of 128 threads a (row m = blockIdx.x, value head j =
// blockIdx.y): q and k of j's key head l2-normed (GdnRecur's arithmetic: a sequential sum of squares,
// 1 / sqrt(ss + 1e-6); q then over sqrt(128)), written by the key head's first value head into q, k
// [M][hk][128]; v [M][hv][128]; beta = bf(sigmoid(b)) and g = -exp(A_log) softplus(a + dt_bias) into
// g, beta [M][hv].
extern "C" __global__ void __launch_bounds__(128) k_pf_gdn_in(const Word* prog, unsigned wi, DevCtx c, float* q, float* k, float* v, float* g, float* beta) {
  __shared__ float qs[128], ks[128], inv[2];
  const Word& w = prog[wi];
  const unsigned d = 128, m = blockIdx.x, j = blockIdx.y, t = threadIdx.x;
  const unsigned hk = w.arg0, hv = w.rows, qk = j / (hv / hk), key_dim = hk * d;
  const DevCtx r = row_view(c, m);
  const unsigned short* mixed = B<unsigned short>(r, w.ops[SLOT_IN0]);
  qs[t] = bf2f(mixed[qk * d + t]);
  ks[t] = bf2f(mixed[key_dim + qk * d + t]);
  v[((size_t)m * hv + j) * d + t] = bf2f(mixed[2 * key_dim + j * d + t]);
  __syncthreads();
  if (t < 2) {  // ORDER: the sum of squares in index order, as the CPU reference's l2norm
    const float* e = t == 0 ? qs : ks;
    float ss = 0.f;
    for (unsigned i = 0; i < d; ++i) ss += e[i] * e[i];
    inv[t] = 1.0f / sqrtf(ss + 1e-6f);
  }
  __syncthreads();
  if (j % (hv / hk) == 0) {
    q[((size_t)m * hk + qk) * d + t] = (qs[t] * inv[0]) / sqrtf((float)d);
    k[((size_t)m * hk + qk) * d + t] = ks[t] * inv[1];
  }
  if (t == 0) {
    const float b = bf2f(B<unsigned short>(r, w.ops[SLOT_IN1])[j]), a = bf2f(B<unsigned short>(r, w.ops[SLOT_IN2])[j]);
    const float x = a + B<float>(c, w.ops[SLOT_W1])[j];
    const float sp = x > 20.0f ? x : log1pf(expf(x));
    beta[(size_t)m * hv + j] = bf(sigm(b));
    g[(size_t)m * hv + j] = -expf(B<float>(c, w.ops[SLOT_W0])[j]) * sp;
  }
}

// GdnChunk's outputs of row m = blockIdx.x: each value head's o [M][hv][128] rounded to bf16, then its
// gated RMSNorm into OUT0 (gdn_gated_out, GdnRecur's arithmetic), a warp a head.
extern "C" __global__ void __launch_bounds__(THREADS) k_pf_gdn_out(const Word* prog, unsigned wi, DevCtx c, const float* o) {
  __shared__ unsigned pairs[WARPS][64];
  const Word& w = prog[wi];
  const unsigned m = blockIdx.x, hv = w.rows, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  for (unsigned j = warp; j < hv; j += WARPS) {
    const float* oj = o + ((size_t)m * hv + j) * 128;
    pairs[warp][lane] = (unsigned)f2bf(oj[2 * lane]) | ((unsigned)f2bf(oj[2 * lane + 1]) << 16);
    pairs[warp][32 + lane] = (unsigned)f2bf(oj[64 + 2 * lane]) | ((unsigned)f2bf(oj[65 + 2 * lane]) << 16);
    __syncwarp();
    gdn_gated_out(c, w, j, row_view(c, m), pairs[warp]);
    __syncwarp();
  }
}
