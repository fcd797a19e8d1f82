// Prefill's chunked gated delta rule (issue 28 item 2, the GPU half): the oracle's
// torch_chunk_gated_delta_rule (transformers 5.17: the WY / UT-transform form, chunk 64) over T tokens
// of every value head of a GDN layer, from each head's state, in fp32, in two launches:
// - k_gdn_chunk_prep, a block per (chunk, value head), state-free: the chunk's cumulative decay, the
//   intra-chunk attention (q_i . k_j) decay(i, j), the UT system A = (k_beta_i . k_j) decay(i, j) (j < i)
//   and its solve applied to v beta and k beta exp(cum) (forward substitution, a thread a column);
// - k_gdn_chunk_scan, a block per (value head, GDNC_DV columns of the state: the delta rule's state
//   columns evolve independently), the chunks in order: v_new = nv - kcd S, out = (q exp(cum)) S +
//   attn v_new, S = S exp(cum_last) + sum_i k_i exp(cum_last - cum_i) v_new_i, the state slice in shared
//   memory across the chunks (read and written once a launch).
// The CPU's src/model/gdn_chunk.rs `chunked` is the reference: the same operations in the same order
// (ORDER: every sum over its index ascending, from 0, as gdn_chunk.rs), but fmaf here where the CPU
// rounds the product first, and CUDA's expf: the two agree within an envelope, not in bits (`mk gpu
// gdn-chunk` measures it).
// Inputs: q, k [T][hk][128] (l2-normed; q times 1/sqrt(128)), v [T][hv][128], g (log decay <= 0) and beta
// [T][hv]; value head h reads q / k head h / (hv / hk) (the model's repeat-interleave). The prep's
// scratch for the scan, per (value head, chunk): cum [64], attn [64][64] (zero above the diagonal), nv
// [64][128] = (I + A)^-1 v beta, kcd [64][128] = (I + A)^-1 k beta exp(cum); rows past T are zeros (the
// oracle pads the last chunk with zeros). Refuses: float atomics (none).
#pragma once

#define GC 64          // tokens a chunk
#define GD 128         // the head dimension (dk = dv)
#define GCP (GD + 1)   // shared-memory row stride of a [GC][GD] tile (a column's 64 rows in 64 banks)
#define GAP (GC + 1)   // the same for [GC][GC]
#ifndef GDNC_DV
#define GDNC_DV 32     // state columns a scan block (16, 32 or 64)
#endif
static_assert(GDNC_DV == 16 || GDNC_DV == 32 || GDNC_DV == 64, "GDNC_DV: 16, 32 or 64");

// The decay between tokens i >= j of a chunk (1 under the negative control: the decay dropped inside
// the chunks, which the check must reject).
__device__ __forceinline__ float gdnc_pair(float ci, float cj) {
#ifdef MK_BREAK_GDN
  return 1.f;
#else
  return expf(ci - cj);
#endif
}

// Shared memory: k and q of the chunk [GC][GCP] each, A [GC][GAP], cum and beta [GC] each; the solve's
// columns [GC][256] then overlay k and q (launch: GDNC_PREP_SMEM bytes, src/verify/gdn_chunk.rs).
extern "C" __global__ void __launch_bounds__(256) k_gdn_chunk_prep(
    const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
    const float* __restrict__ g, const float* __restrict__ beta, unsigned T, unsigned hk, unsigned hv,
    float* __restrict__ cum_o, float* __restrict__ attn_o, float* __restrict__ nv_o, float* __restrict__ kcd_o) {
  extern __shared__ float sm[];
  float* ks = sm;
  float* qs = ks + GC * GCP;
  float* A = qs + GC * GCP;
  float* cum = A + GC * GAP;
  float* bet = cum + GC;
  float* xs = sm;  // [GC][256]: 16,384 floats over ks and qs' 16,512
  const unsigned c = blockIdx.x, h = blockIdx.y, chunks = gridDim.x, tid = threadIdx.x;
  const unsigned t0 = c * GC, n = min((unsigned)GC, T - t0), kh = h / (hv / hk);
  for (unsigned p = tid; p < GC * GD; p += 256) {
    const unsigned i = p / GD, e = p % GD;
    const size_t src = ((size_t)(t0 + i) * hk + kh) * GD + e;
    ks[i * GCP + e] = i < n ? k[src] : 0.f;
    qs[i * GCP + e] = i < n ? q[src] : 0.f;
  }
  if (tid < GC) bet[tid] = tid < n ? beta[(size_t)(t0 + tid) * hv + h] : 0.f;
  if (tid == 0) {  // ORDER: the cumulative decay, tokens ascending (the padding adds 0)
    float acc = 0.f;
    for (unsigned i = 0; i < GC; ++i) {
      acc += i < n ? g[(size_t)(t0 + i) * hv + h] : 0.f;
      cum[i] = acc;
    }
  }
  __syncthreads();
  const size_t base = ((size_t)h * chunks + c) * GC;  // this (head, chunk)'s first scratch row
  // A and attn, a (i, j) pair a thread at a time; ORDER: e ascending from 0, then times the decay
  for (unsigned p = tid; p < GC * GC; p += 256) {
    const unsigned i = p / GC, j = p % GC;
    float sa = 0.f, sq = 0.f;
    if (j <= i) {
      const float bi = bet[i];
#pragma unroll 8
      for (unsigned e = 0; e < GD; ++e) {
        const float kj = ks[j * GCP + e];
        sa = fmaf(ks[i * GCP + e] * bi, kj, sa);  // k_beta_i = k_i beta_i, rounded as the CPU's
        sq = fmaf(qs[i * GCP + e], kj, sq);
      }
      const float d = gdnc_pair(cum[i], cum[j]);
      sa *= d;
      sq *= d;
    }
    A[i * GAP + j] = j < i ? sa : 0.f;
    attn_o[(base + i) * GC + j] = sq;
  }
  __syncthreads();  // k and q read for the last time: the solve's columns take their place
  // column col of [v beta | k beta exp(cum)] (the CPU's v_beta and decayed_k_beta), from global memory
  const unsigned col = tid;
  for (unsigned i = 0; i < GC; ++i) {
    float b = 0.f;
    if (i < n) {
      b = col < GD ? v[((size_t)(t0 + i) * hv + h) * GD + col] * bet[i]
                   : (k[((size_t)(t0 + i) * hk + kh) * GD + col - GD] * bet[i]) * expf(cum[i]);
    }
    xs[i * 256 + col] = b;
  }
  // (I + A)^-1 b by forward substitution, a thread its column (no barrier: nobody else reads it);
  // ORDER: row i = b_i - A[i][0] x_0 - A[i][1] x_1 - .. (j ascending)
  for (unsigned i = 1; i < GC; ++i) {
    float r = xs[i * 256 + col];
    for (unsigned j = 0; j < i; ++j) r = fmaf(-A[i * GAP + j], xs[j * 256 + col], r);
    xs[i * 256 + col] = r;
  }
  for (unsigned i = 0; i < GC; ++i) {
    const float x = xs[i * 256 + col];
    if (col < GD) nv_o[(base + i) * GD + col] = x;
    else kcd_o[(base + i) * GD + col - GD] = x;
  }
  if (tid < GC) cum_o[base + tid] = cum[tid];
}

// Shared memory: the state's columns S [GD][GDNC_DV], kcd (then k exp(last - cum)) and q exp(cum)
// [GC][GCP] each, attn [GC][GAP], v_new [GC][GDNC_DV], cum and the exps [GC] each (GDNC_SCAN_SMEM).
// state: [hv][GD][GD] (row = k index), updated in place; out: [T][hv][GD].
extern "C" __global__ void __launch_bounds__(256) k_gdn_chunk_scan(
    const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ cum_i,
    const float* __restrict__ attn_i, const float* __restrict__ nv_i, const float* __restrict__ kcd_i,
    unsigned T, unsigned hk, unsigned hv, float* __restrict__ state, float* __restrict__ out) {
  constexpr unsigned DV = GDNC_DV, RSTEP = 256 / DV, NR = GC / RSTEP, NK = GD / RSTEP;
  extern __shared__ float sm[];
  float* S = sm;
  float* kc = S + GD * DV;
  float* qd = kc + GC * GCP;
  float* at = qd + GC * GCP;
  float* vn = at + GC * GAP;
  float* cm = vn + GC * DV;
  float* ex = cm + GC;
  const unsigned h = blockIdx.x, c0 = blockIdx.y * DV, tid = threadIdx.x, kh = h / (hv / hk);
  const unsigned chunks = (T + GC - 1) / GC;
  const unsigned cc = tid % DV, r0 = tid / DV;  // this thread's column and its first row (rows RSTEP apart)
  float* st = state + (size_t)h * GD * GD;
  for (unsigned p = tid; p < GD * DV; p += 256) S[p] = st[(size_t)(p / DV) * GD + c0 + p % DV];
  for (unsigned c = 0; c < chunks; ++c) {
    const unsigned t0 = c * GC, n = min((unsigned)GC, T - t0);
    const size_t base = ((size_t)h * chunks + c) * GC;
    __syncthreads();  // the previous chunk is done with kc, at, vn, cm, ex (and S is updated)
    if (tid < GC) {
      cm[tid] = cum_i[base + tid];
      ex[tid] = expf(cm[tid]);
    }
    __syncthreads();
    for (unsigned p = tid; p < GC * GD; p += 256) {
      const unsigned i = p / GD, e = p % GD;
      kc[i * GCP + e] = kcd_i[(base + i) * GD + e];
      qd[i * GCP + e] = i < n ? q[((size_t)(t0 + i) * hk + kh) * GD + e] * ex[i] : 0.f;
    }
    for (unsigned p = tid; p < GC * GC; p += 256) at[(p / GC) * GAP + p % GC] = attn_i[base * GC + p];
    __syncthreads();
    // kcd S and (q exp(cum)) S for rows r0 + RSTEP r, column cc; ORDER: the state's rows ascending
    float ksum[NR], inter[NR];
#pragma unroll
    for (unsigned r = 0; r < NR; ++r) ksum[r] = inter[r] = 0.f;
    for (unsigned kk = 0; kk < GD; ++kk) {
      const float s = S[kk * DV + cc];
#pragma unroll
      for (unsigned r = 0; r < NR; ++r) {
        const unsigned i = r0 + r * RSTEP;
        ksum[r] = fmaf(kc[i * GCP + kk], s, ksum[r]);
        inter[r] = fmaf(qd[i * GCP + kk], s, inter[r]);
      }
    }
#pragma unroll
    for (unsigned r = 0; r < NR; ++r) {
      const unsigned i = r0 + r * RSTEP;
      vn[i * DV + cc] = nv_i[(base + i) * GD + c0 + cc] - ksum[r];
    }
    __syncthreads();  // every row's v_new
    // out = inter + sum_{j <= i} attn[i][j] v_new[j] (ORDER: j ascending from 0, then inter + intra)
#pragma unroll
    for (unsigned r = 0; r < NR; ++r) {
      const unsigned i = r0 + r * RSTEP;
      float a = 0.f;
      for (unsigned j = 0; j <= i; ++j) a = fmaf(at[i * GAP + j], vn[j * DV + cc], a);
      if (i < n) out[((size_t)(t0 + i) * hv + h) * GD + c0 + cc] = inter[r] + a;
    }
    // the state: S exp(last) + sum_i (k_i exp(last - cum_i)) v_new_i (kc's kcd is consumed: reuse it)
    const float last = cm[n - 1];
    __syncthreads();
    if (tid < GC) ex[tid] = expf(last - cm[tid]);
    __syncthreads();
    for (unsigned p = tid; p < GC * GD; p += 256) {
      const unsigned i = p / GD, e = p % GD;
      kc[i * GCP + e] = i < n ? k[((size_t)(t0 + i) * hk + kh) * GD + e] * ex[i] : 0.f;
    }
    __syncthreads();
    const float dec = expf(last);
    // ORDER: tokens ascending, each added to the decayed state (the CPU's)
#pragma unroll 4
    for (unsigned r = 0; r < NK; ++r) {
      const unsigned kk = r0 + r * RSTEP;
      float s = S[kk * DV + cc] * dec;
      for (unsigned i = 0; i < n; ++i) s = fmaf(kc[i * GCP + kk], vn[i * DV + cc], s);
      S[kk * DV + cc] = s;
    }
  }
  __syncthreads();
  for (unsigned p = tid; p < GD * DV; p += 256) st[(size_t)(p / DV) * GD + c0 + p % DV] = S[p];
}
