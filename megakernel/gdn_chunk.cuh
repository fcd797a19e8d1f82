// Prefill's chunked gated delta rule (issue 28 item 2, the GPU half): the oracle's
// torch_chunk_gated_delta_rule (transformers 5.17: the WY / UT-transform form, chunk 64) over T tokens
// of every value head of a GDN layer, from each head's state, in fp32, in two launches:
// - k_gdn_chunk_prep, a block per (chunk, value head), state-free: the chunk's cumulative decay, the
//   intra-chunk attention (q_i . k_j) decay(i, j), the UT system A = (k_beta_i . k_j) decay(i, j) (j < i)
//   and its solve applied to v beta and k beta exp(cum) (forward substitution, a thread a column in
//   registers);
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
#define GDP (GD + 4)   // shared-memory row stride of a [GC][GD] tile: rows 16-byte aligned, and 8 lanes'
                       // float4s of 8 consecutive rows in distinct banks (row r at bank 4 r)
#define GAP (GC + 4)   // the same for [GC][GC]
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

__device__ __forceinline__ float4 lds4(const float* p) { return *reinterpret_cast<const float4*>(p); }
__device__ __forceinline__ float f4(const float4& v, int c) { return c == 0 ? v.x : c == 1 ? v.y : c == 2 ? v.z : v.w; }

// Rows [0, GC) of a [rows][hs][GD] tensor's head hd from token t0 into a [GC][GDP] tile, times
// scale[i] when scale is given (zeros past n: the oracle's padding). float4 copies.
__device__ __forceinline__ void gdnc_tile(float* dst, const float* src, unsigned t0, unsigned n, unsigned hs, unsigned hd, const float* scale) {
  for (unsigned p = threadIdx.x; p < GC * GD / 4; p += 256) {
    const unsigned i = p / (GD / 4), e = 4 * (p % (GD / 4));
    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
    if (i < n) {
      v = *reinterpret_cast<const float4*>(src + ((size_t)(t0 + i) * hs + hd) * GD + e);
      if (scale) v = make_float4(v.x * scale[i], v.y * scale[i], v.z * scale[i], v.w * scale[i]);
    }
    *reinterpret_cast<float4*>(dst + i * GDP + e) = v;
  }
}

// Shared memory: k and q of the chunk [GC][GDP] each, A [GC][GAP], cum and beta [GC] each (launch:
// `prep_smem`, src/verify/gdn_chunk.rs).
extern "C" __global__ void __launch_bounds__(256) k_gdn_chunk_prep(
    const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
    const float* __restrict__ g, const float* __restrict__ beta, unsigned T, unsigned hk, unsigned hv,
    float* __restrict__ cum_o, float* __restrict__ attn_o, float* __restrict__ nv_o, float* __restrict__ kcd_o) {
  extern __shared__ __align__(16) float sm[];
  float* ks = sm;
  float* qs = ks + GC * GDP;
  float* A = qs + GC * GDP;
  float* cum = A + GC * GAP;
  float* bet = cum + GC;
  const unsigned c = blockIdx.x, h = blockIdx.y, chunks = gridDim.x, tid = threadIdx.x;
  const unsigned t0 = c * GC, n = min((unsigned)GC, T - t0), kh = h / (hv / hk);
  gdnc_tile(ks, k, t0, n, hk, kh, nullptr);
  gdnc_tile(qs, q, t0, n, hk, kh, nullptr);
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
  {
    // A and attn: a thread's 4 x 4 pairs, rows i = 4 ti + a, columns j = tj + 16 b; ORDER: e ascending
    // from 0 (every pair, the masked ones too), then times the decay
    const unsigned ti = tid / 16, tj = tid % 16;
    float sa[4][4], sq[4][4], bi[4];
#pragma unroll
    for (int a = 0; a < 4; ++a) {
      bi[a] = bet[4 * ti + a];
#pragma unroll
      for (int b = 0; b < 4; ++b) sa[a][b] = sq[a][b] = 0.f;
    }
#pragma unroll 2
    for (unsigned e = 0; e < GD; e += 4) {
      float4 ki[4], qi[4], kj[4];
#pragma unroll
      for (int a = 0; a < 4; ++a) {
        ki[a] = lds4(ks + (4 * ti + a) * GDP + e);
        qi[a] = lds4(qs + (4 * ti + a) * GDP + e);
        kj[a] = lds4(ks + (tj + 16 * a) * GDP + e);
      }
#pragma unroll
      for (int x = 0; x < 4; ++x)
#pragma unroll
        for (int a = 0; a < 4; ++a) {
          const float kb = f4(ki[a], x) * bi[a];  // k_beta_i = k_i beta_i, rounded as the CPU's
#pragma unroll
          for (int b = 0; b < 4; ++b) {
            sa[a][b] = fmaf(kb, f4(kj[b], x), sa[a][b]);
            sq[a][b] = fmaf(f4(qi[a], x), f4(kj[b], x), sq[a][b]);
          }
        }
    }
#pragma unroll
    for (int a = 0; a < 4; ++a)
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        const unsigned i = 4 * ti + a, j = tj + 16 * b;
        const float d = j <= i ? gdnc_pair(cum[i], cum[j]) : 0.f;
        A[i * GAP + j] = j < i ? sa[a][b] * d : 0.f;
        attn_o[(base + i) * GC + j] = j <= i ? sq[a][b] * d : 0.f;
      }
  }
  __syncthreads();
  // column col of [v beta | k beta exp(cum)] (the CPU's v_beta and decayed_k_beta) in registers, from
  // global memory; (I + A)^-1 applied by forward substitution, a thread its column. ORDER: row i =
  // b_i - A[i][0] x_0 - A[i][1] x_1 - .. (j ascending).
  const unsigned col = tid;
  float x[GC];
#pragma unroll
  for (int i = 0; i < GC; ++i) {
    float b = 0.f;
    if (i < n) {
      b = col < GD ? v[((size_t)(t0 + i) * hv + h) * GD + col] * bet[i]
                   : (k[((size_t)(t0 + i) * hk + kh) * GD + col - GD] * bet[i]) * expf(cum[i]);
    }
    x[i] = b;
  }
#pragma unroll
  for (int i = 1; i < GC; ++i) {
    float r = x[i];
#pragma unroll
    for (int j4 = 0; j4 < i; j4 += 4) {
      const float4 a = lds4(A + i * GAP + j4);
#pragma unroll
      for (int u = 0; u < 4; ++u)
        if (j4 + u < i) r = fmaf(-f4(a, u), x[j4 + u], r);
    }
    x[i] = r;
  }
  float* dst = col < GD ? nv_o + base * GD + col : kcd_o + base * GD + col - GD;
#pragma unroll
  for (int i = 0; i < GC; ++i) dst[(size_t)i * GD] = x[i];
  if (tid < GC) cum_o[base + tid] = cum[tid];
}

// Shared memory: the state's columns S [GD][GDNC_DV], kcd (then k exp(last - cum)) and q exp(cum)
// [GC][GDP] each, attn [GC][GAP], v_new [GC][GDNC_DV], cum and the exps [GC] each (`scan_smem`).
// state: [hv][GD][GD] (row = k index), updated in place; out: [T][hv][GD].
extern "C" __global__ void __launch_bounds__(256) k_gdn_chunk_scan(
    const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ cum_i,
    const float* __restrict__ attn_i, const float* __restrict__ nv_i, const float* __restrict__ kcd_i,
    unsigned T, unsigned hk, unsigned hv, float* __restrict__ state, float* __restrict__ out) {
  constexpr unsigned DV = GDNC_DV, RSTEP = 256 / DV, NR = GC / RSTEP, NK = GD / RSTEP;
  extern __shared__ __align__(16) float sm[];
  float* S = sm;
  float* kc = S + GD * DV;
  float* qd = kc + GC * GDP;
  float* at = qd + GC * GDP;
  float* vn = at + GC * GAP;
  float* cm = vn + GC * DV;
  float* ex = cm + GC;
  const unsigned h = blockIdx.x, c0 = blockIdx.y * DV, tid = threadIdx.x, kh = h / (hv / hk);
  const unsigned chunks = (T + GC - 1) / GC;
  // this thread's column; its chunk rows r0 + RSTEP r (the products with S) and state rows NK r0 + r
  // (the update)
  const unsigned cc = tid % DV, r0 = tid / DV;
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
    gdnc_tile(kc, kcd_i + base * GD, 0, GC, 1, 0, nullptr);  // the prep's rows past n are zeros
    gdnc_tile(qd, q, t0, n, hk, kh, ex);
    for (unsigned p = tid; p < GC * GC / 4; p += 256) {
      const unsigned i = p / (GC / 4), j = 4 * (p % (GC / 4));
      *reinterpret_cast<float4*>(at + i * GAP + j) = *reinterpret_cast<const float4*>(attn_i + (base + i) * GC + j);
    }
    __syncthreads();
    // kcd S and (q exp(cum)) S for rows r0 + RSTEP r, column cc; ORDER: the state's rows ascending
    float ksum[NR], inter[NR];
#pragma unroll
    for (unsigned r = 0; r < NR; ++r) ksum[r] = inter[r] = 0.f;
#pragma unroll 2
    for (unsigned kk = 0; kk < GD; kk += 4) {
      float s[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) s[u] = S[(kk + u) * DV + cc];
#pragma unroll
      for (unsigned r = 0; r < NR; ++r) {
        const unsigned i = r0 + r * RSTEP;
        const float4 a = lds4(kc + i * GDP + kk), b = lds4(qd + i * GDP + kk);
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          ksum[r] = fmaf(f4(a, u), s[u], ksum[r]);
          inter[r] = fmaf(f4(b, u), s[u], inter[r]);
        }
      }
    }
#pragma unroll
    for (unsigned r = 0; r < NR; ++r) {
      const unsigned i = r0 + r * RSTEP;
      vn[i * DV + cc] = nv_i[(base + i) * GD + c0 + cc] - ksum[r];
    }
    __syncthreads();  // every row's v_new
    // out = inter + sum_j attn[i][j] v_new[j] (ORDER: j ascending from 0, then inter + intra; the
    // terms past j = i are attn's zeros, which leave the sum as it is)
    {
      float intra[NR];
#pragma unroll
      for (unsigned r = 0; r < NR; ++r) intra[r] = 0.f;
#pragma unroll 2
      for (unsigned j = 0; j < GC; j += 4) {
        float w[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) w[u] = vn[(j + u) * DV + cc];
#pragma unroll
        for (unsigned r = 0; r < NR; ++r) {
          const float4 a = lds4(at + (r0 + r * RSTEP) * GAP + j);
#pragma unroll
          for (int u = 0; u < 4; ++u) intra[r] = fmaf(f4(a, u), w[u], intra[r]);
        }
      }
#pragma unroll
      for (unsigned r = 0; r < NR; ++r) {
        const unsigned i = r0 + r * RSTEP;
        if (i < n) out[((size_t)(t0 + i) * hv + h) * GD + c0 + cc] = inter[r] + intra[r];
      }
    }
    // the state: S exp(last) + sum_i (k_i exp(last - cum_i)) v_new_i (kc's kcd is consumed: reuse it)
    const float last = cm[n - 1];
    __syncthreads();
    if (tid < GC) ex[tid] = expf(last - cm[tid]);
    __syncthreads();
    gdnc_tile(kc, k, t0, n, hk, kh, ex);
    __syncthreads();
    const float dec = expf(last);
    // ORDER: tokens ascending, each added to the decayed state (the CPU's)
    float sr[NK];
#pragma unroll
    for (unsigned r = 0; r < NK; ++r) sr[r] = S[(NK * r0 + r) * DV + cc] * dec;
    for (unsigned i = 0; i < n; ++i) {
      const float w = vn[i * DV + cc];
#pragma unroll
      for (unsigned r = 0; r < NK; r += 4) {
        const float4 a = lds4(kc + i * GDP + NK * r0 + r);
#pragma unroll
        for (int u = 0; u < 4; ++u) sr[r + u] = fmaf(f4(a, u), w, sr[r + u]);
      }
    }
#pragma unroll
    for (unsigned r = 0; r < NK; ++r) S[(NK * r0 + r) * DV + cc] = sr[r];
  }
  __syncthreads();
  for (unsigned p = tid; p < GD * DV; p += 256) st[(size_t)(p / DV) * GD + c0 + p % DV] = S[p];
}
