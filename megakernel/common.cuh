// Shared definitions of every op: the device context (buffer pointers by id), number formats and the
// fixed-order reductions. Owns: bf16/e4m3 conversions and reductions. Refuses: float atomics (none
// anywhere in megakernel/): every reduction below has a fixed order.
#pragma once

// THREADS, KGROUP, ATTN_PART, MAX_GROUP, the sampler's SB_* layout and the DevCtx struct come from
// the generated header (src/exec/gpu/abi.rs).
#define WARPS (THREADS / 32)
// Tunables (performance only, never bits): an experiment's `defines` (src/exec/gpu/defines.rs lists
// them) override these defaults through NVRTC -D.
#ifndef GEMV_MIN_BLOCKS
#define GEMV_MIN_BLOCKS 2  // the discrete GEMV kernels' launch bounds: blocks per SM ptxas must fit (registers)
#endif
#ifndef GRAPH_STAMPS
#define GRAPH_STAMPS 0     // discrete kernels stamp every unit (%globaltimer, as the megakernel's timeline) into
                           // DevCtx::stamps: the graph's per-word times inside the captured step
#endif
#ifndef PREFILL
#define PREFILL 0          // a prefill program's kernels (issue 28; the host prepends it with M_ROWS: prefill.cuh)
#endif
#ifndef M_ROWS
#define M_ROWS 1           // the program's M (rows of a verification step); the host prepends it to the source
                           // for M > 1 programs, so M = 1 programs compile exactly as before (no row loop)
#endif
#define PV_GROUPS 4    // attention PV: position groups a unit's warps split its positions into (pairs of warps)
static_assert(WARPS == 2 * PV_GROUPS, "attention PV: two warps (128 dims each) per position group");
#ifndef ATTN_UNROLL
#define ATTN_UNROLL 4  // positions whose K/V loads a warp / thread has in flight at once
#endif
#ifndef PV_UNROLL
#define PV_UNROLL ATTN_UNROLL  // the same for attention PV's value rows alone (its order of sums does not depend on it)
#endif
static_assert(PV_UNROLL >= 1, "PV_UNROLL: at least one value row in flight");

// The sampler's block in the arena (DevCtx::sampler, SB_* in the generated header) starts with
// SampleParams; words SB_COUNT .. SB_CANDS are zero between steps (k_sample zeroes them after use; the
// host at reset and set_sampling).
struct SampleParams {
  float temperature;
  unsigned top_k;
  float top_p;
  unsigned pad;
  unsigned long long seed;
};
// A bf16 logit's 16-bit key, ascending with its value: NaN lowest, -0 as +0 (top-k is a threshold on
// values, and -0 == +0).
__device__ __forceinline__ unsigned logit_key(unsigned short b) {
  if ((b & 0x7fffu) > 0x7f80u) return 0;
  if (b == 0x8000u) b = 0;
  return (b & 0x8000u) ? (~b & 0xffffu) : (b | 0x8000u);
}

// The sequence stopped (an earlier step produced the stop token): every later kernel of the graph
// returns at once, so replays queued past the stop change nothing. The host clears it (reset).
__device__ __forceinline__ bool stopped(const DevCtx& c) { return ((volatile const unsigned*)c.stop)[1] != 0; }

__device__ __forceinline__ float bf2f(unsigned short b) { return __uint_as_float(((unsigned)b) << 16); }

// Round-to-nearest-even to bf16 (NaN stays NaN), as the CPU reference's half::bf16::from_f32.
__device__ __forceinline__ unsigned short f2bf(float f) {
  unsigned u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (unsigned short)(u >> 16);
}
__device__ __forceinline__ float bf(float f) { return bf2f(f2bf(f)); }
// The low / high bf16 of a packed pair as f32.
__device__ __forceinline__ float lo_bf(unsigned w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float hi_bf(unsigned w) { return __uint_as_float(w & 0xffff0000u); }

// float8_e4m3fn: bias 7, no infinities, 0x7f/0xff NaN.
__device__ __forceinline__ float e4m3(unsigned b) {
  unsigned e = (b >> 3) & 15u, m = b & 7u;
  float v = e == 0 ? (float)m * 0.001953125f : __uint_as_float(((e + 120u) << 23) | (m << 20));
  if (e == 15u && m == 7u) v = __int_as_float(0x7fc00000);
  return (b & 0x80u) ? -v : v;
}

// The GPU's wall clock in ns (the timelines' stamps, the megakernel's wait limit).
__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ float silu(float x) { return x / (1.0f + expf(-x)); }
__device__ __forceinline__ float sigm(float x) { return 1.0f / (1.0f + expf(-x)); }

// The join of a block's THREADS threads (every kernel runs its ops on blocks of THREADS threads).
#define BLOCK_SYNC() asm volatile("bar.sync 0, %0;" ::"n"(THREADS) : "memory")

// ORDER: butterfly over lanes (xor 16, 8, 4, 2, 1); every lane ends with the same value.
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// ORDER: thread t sums its own terms in order, warps reduce by butterfly, then warp sums are added in
// warp order by thread 0. Returns the total to every thread. `red` is WARPS floats of shared memory.
__device__ __forceinline__ float block_sum(float v, float* red) {
  v = warp_sum(v);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
  BLOCK_SYNC();
  float t = 0.f;
  if (threadIdx.x == 0) {
    for (int w = 0; w < WARPS; ++w) t += red[w];
    red[0] = t;
  }
  BLOCK_SYNC();
  t = red[0];
  BLOCK_SYNC();
  return t;
}

template <typename T> __device__ __forceinline__ T* B(const DevCtx& c, unsigned short id) { return (T*)c.bufs[id]; }

// ss += the squares of a 16-byte chunk of bf16, in element order.
__device__ __forceinline__ float chunk_squares(uint4 v, float ss) {
  unsigned vw[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    float lo = lo_bf(vw[q]), hi = hi_bf(vw[q]);
    ss += lo * lo;
    ss += hi * hi;
  }
  return ss;
}
// A 16-byte chunk of bf16 x normed: bf((x * rstd) * (1 + w) * s) for its 8 weights w (s: 1, or 2^64
// for an fp8 GEMV's input: exactly bf(..) * 2^64 wherever that is a normal bf16).
__device__ __forceinline__ uint4 chunk_normed(uint4 v, float4 wa, float4 wb, float rstd, float s) {
  unsigned vw[4] = {v.x, v.y, v.z, v.w}, o[4];
  float ww[8] = {wa.x, wa.y, wa.z, wa.w, wb.x, wb.y, wb.z, wb.w};
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    unsigned lo = f2bf((lo_bf(vw[q]) * rstd) * (1.0f + ww[2 * q]) * s);
    unsigned hi = f2bf((hi_bf(vw[q]) * rstd) * (1.0f + ww[2 * q + 1]) * s);
    o[q] = lo | (hi << 16);
  }
  return make_uint4(o[0], o[1], o[2], o[3]);
}

// A block-wide zero-centred RMSNorm of bf16 x[0..n) into bf16 shared memory out:
// bf((x * rstd) * (1 + w)), rstd = 1 / sqrt(sum(x^2) * (1/n) + eps). ORDER of the sum: thread t sums
// its terms in order (n % 8 == 0: 16-byte chunks t, t + THREADS, .., elements in order within a chunk;
// else elements t, t + THREADS, ..), then block_sum. x, w and out are 16-byte aligned (arena, shared).
// With n % 8 == 0 and n <= NORM_CHUNKS x 8 x THREADS a thread loads its x chunks and norm weights once,
// all before the block sum (one round trip to memory instead of three).
#define NORM_CHUNKS 3
__device__ void block_rmsnorm(const unsigned short* x, const float* w, unsigned n, float eps, unsigned short* out, float* red, float s) {
  float ss = 0.f;
  if (n % 8 == 0 && n <= NORM_CHUNKS * 8 * THREADS) {
    uint4 xv[NORM_CHUNKS];
    float4 wa[NORM_CHUNKS], wb[NORM_CHUNKS];
#pragma unroll
    for (int j = 0; j < NORM_CHUNKS; ++j) {
      unsigned i = 8 * (threadIdx.x + j * THREADS);
      if (i < n) {
        xv[j] = *(const uint4*)(x + i);
        wa[j] = *(const float4*)(w + i);
        wb[j] = *(const float4*)(w + i + 4);
      }
    }
#pragma unroll
    for (int j = 0; j < NORM_CHUNKS; ++j)
      if (8 * (threadIdx.x + j * THREADS) < n) ss = chunk_squares(xv[j], ss);
    ss = block_sum(ss, red);
    float rstd = 1.0f / sqrtf(ss * (1.0f / (float)n) + eps);
#pragma unroll
    for (int j = 0; j < NORM_CHUNKS; ++j) {
      unsigned i = 8 * (threadIdx.x + j * THREADS);
      if (i < n) *(uint4*)(out + i) = chunk_normed(xv[j], wa[j], wb[j], rstd, s);
    }
  } else if (n % 8 == 0) {
    for (unsigned i = 8 * threadIdx.x; i < n; i += 8 * THREADS) ss = chunk_squares(*(const uint4*)(x + i), ss);
    ss = block_sum(ss, red);
    float rstd = 1.0f / sqrtf(ss * (1.0f / (float)n) + eps);
    for (unsigned i = 8 * threadIdx.x; i < n; i += 8 * THREADS)
      *(uint4*)(out + i) = chunk_normed(*(const uint4*)(x + i), *(const float4*)(w + i), *(const float4*)(w + i + 4), rstd, s);
  } else {
    for (unsigned i = threadIdx.x; i < n; i += THREADS) { float v = bf2f(x[i]); ss += v * v; }
    ss = block_sum(ss, red);
    float rstd = 1.0f / sqrtf(ss * (1.0f / (float)n) + eps);
    for (unsigned i = threadIdx.x; i < n; i += THREADS) out[i] = f2bf((bf2f(x[i]) * rstd) * (1.0f + w[i]) * s);
  }
  BLOCK_SYNC();
}

// Whether a weight is fp8 (storage codes 1 and 3; 2 is bf16).
__device__ __forceinline__ bool is_fp8(const DevCtx& c, unsigned short wid) { return c.wbytes[wid] != 2; }

// The fp8 GEMV's input as the tensor cores take it: x times 2^64 in bf16 (exact wherever x * 2^64 is a
// normal bf16: a power of two; the widened weights carry 2^-120, the products' 2^-56 comes off with the
// block scale), folded into the preparation's last rounding. 1 for bf16 weights.
__device__ __forceinline__ float input_scale(const DevCtx& c, unsigned short wid) { return is_fp8(c, wid) ? 0x1p64f : 1.0f; }

// 8 bf16 times s (a power of two: exact wherever the result is a normal bf16; s = 1 leaves them).
__device__ __forceinline__ uint4 scaled8(uint4 v, float s) {
  if (s == 1.0f) return v;
  unsigned w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int q = 0; q < 4; ++q) w[q] = (unsigned)f2bf(lo_bf(w[q]) * s) | ((unsigned)f2bf(hi_bf(w[q]) * s) << 16);
  return make_uint4(w[0], w[1], w[2], w[3]);
}

// Bytes of one prepared GEMV input of K bf16 in shared memory (16-byte aligned rows).
__device__ __forceinline__ unsigned xrow_bytes(unsigned K) { return (K * 2 + 15) / 16 * 16; }

// Row view m of the context: activations, scratch and the control block start m rows in (bufs + m
// n_bufs); weights, states and KV caches are shared.
__device__ __forceinline__ DevCtx row_view(const DevCtx& c, unsigned m) {
  DevCtx r = c;
  r.bufs = c.bufs + (size_t)m * c.n_bufs;
  return r;
}

// A GEMV's prepared input in shared memory: x = IN0 (bf16, K = its width) as bf16 in row slot m of nx
// (smem + m xrow_bytes(K); an M-row GEMV prepares its M rows side by side, 1 otherwise), either
// RMS-normed with the norm weight in slot `norm` or copied as is (norm unused); times 2^64 for an fp8
// weight in W0 (`input_scale`). Recomputed only when `fresh` (a block's first unit of the word):
// otherwise shared memory still holds it. The 32 bytes after the nx rows are the block sums (WARPS
// floats), then the caller's.
__device__ unsigned short* prepared_input(const DevCtx& c, const Word& w, unsigned norm_slot, char* smem, bool fresh, unsigned m = 0, unsigned nx = 1) {
  unsigned K = c.cols[w.ops[SLOT_IN0]];
  unsigned short* xs = (unsigned short*)(smem + m * xrow_bytes(K));
  if (!fresh) return xs;
  const unsigned short* x = B<unsigned short>(c, w.ops[SLOT_IN0]);
  const float s = input_scale(c, w.ops[SLOT_W0]);
  if (w.ops[norm_slot] != OPERAND_NONE) {
    block_rmsnorm(x, B<float>(c, w.ops[norm_slot]), K, c.eps, xs, (float*)(smem + nx * xrow_bytes(K)), s);
  } else {
    if (K % 8 == 0)
      for (unsigned i = 8 * threadIdx.x; i < K; i += 8 * THREADS) *(uint4*)(xs + i) = scaled8(*(const uint4*)(x + i), s);
    else
      for (unsigned i = threadIdx.x; i < K; i += THREADS) xs[i] = f2bf(bf2f(x[i]) * s);
    BLOCK_SYNC();
  }
  return xs;
}


// The prepared inputs of nx rows (1, or an M-row GEMV's M_ROWS) side by side (prepared_input's), when
// `fresh`. M rows with a norm (K % 8 == 0, K <= NORM_CHUNKS x 8 x THREADS) in block_rmsnorm's order:
// thread t sums the squares of its chunks 8 (t + j THREADS) in order, the warp butterfly, the warps'
// sums added in warp order from 0 (block_sum's), so row m's bits are block_rmsnorm's; but rows two at a
// time with every load of a pair issued before its arithmetic (the raw chunks stored into the row's
// slot as they are summed), one barrier, then each thread normalises its own chunks in place
// (chunk_normed): two barriers for all rows instead of three a row. The warp sums go to the room after
// the block sums ([nx][WARPS] floats; launch.rs reserves it).
// (Out of line: inlined, its loads moved ptxas's allocation of the M-row GEMVs' weight loops, k_gemv_norm
// 268 -> 456 bytes of spills; a call costs a register save once a unit.)
__device__ __noinline__ unsigned short* prepared_rows_m(const DevCtx& c, const Word& w, unsigned norm_slot, char* smem, bool fresh, unsigned nx) {
  const unsigned K = c.cols[w.ops[SLOT_IN0]];
  if (!fresh || w.ops[norm_slot] == OPERAND_NONE || K % 8 != 0 || K > NORM_CHUNKS * 8 * THREADS) {
    for (unsigned m = 0; m < nx; ++m) prepared_input(row_view(c, m), w, norm_slot, smem, fresh, m, nx);
    return (unsigned short*)smem;
  }
  const unsigned t = threadIdx.x, warp = t >> 5, lane = t & 31;
  float* sums = (float*)(smem + nx * xrow_bytes(K) + 32);
  auto row = [&](unsigned m) { return (unsigned short*)(smem + m * xrow_bytes(K)); };
  for (unsigned m = 0; m < nx; m += 2) {
    uint4 xv[2][NORM_CHUNKS];
#pragma unroll
    for (int r = 0; r < 2; ++r)
      if (m + r < nx) {
        const unsigned short* x = B<unsigned short>(row_view(c, m + r), w.ops[SLOT_IN0]);
#pragma unroll
        for (int j = 0; j < NORM_CHUNKS; ++j) {
          const unsigned i = 8 * (t + j * THREADS);
          if (i < K) xv[r][j] = *(const uint4*)(x + i);
        }
      }
#pragma unroll
    for (int r = 0; r < 2; ++r)
      if (m + r < nx) {
        float ss = 0.f;
#pragma unroll
        for (int j = 0; j < NORM_CHUNKS; ++j) {
          const unsigned i = 8 * (t + j * THREADS);
          if (i < K) {
            ss = chunk_squares(xv[r][j], ss);
            *(uint4*)(row(m + r) + i) = xv[r][j];
          }
        }
        ss = warp_sum(ss);
        if (lane == 0) sums[(m + r) * WARPS + warp] = ss;
      }
  }
  BLOCK_SYNC();
  const float* nw = B<float>(c, w.ops[norm_slot]);
  const float s = input_scale(c, w.ops[SLOT_W0]);
  float4 wa[NORM_CHUNKS], wb[NORM_CHUNKS];
#pragma unroll
  for (int j = 0; j < NORM_CHUNKS; ++j) {
    const unsigned i = 8 * (t + j * THREADS);
    if (i < K) {
      wa[j] = *(const float4*)(nw + i);
      wb[j] = *(const float4*)(nw + i + 4);
    }
  }
  for (unsigned m = 0; m < nx; ++m) {
    float total = 0.f;  // ORDER: block_sum's (warps in order from 0)
#pragma unroll
    for (unsigned j = 0; j < WARPS; ++j) total += sums[m * WARPS + j];
    const float rstd = 1.0f / sqrtf(total * (1.0f / (float)K) + c.eps);
#pragma unroll
    for (int j = 0; j < NORM_CHUNKS; ++j) {
      const unsigned i = 8 * (t + j * THREADS);
      if (i < K) *(uint4*)(row(m) + i) = chunk_normed(*(const uint4*)(row(m) + i), wa[j], wb[j], rstd, s);
    }
  }
  BLOCK_SYNC();
  return (unsigned short*)smem;
}
__device__ __forceinline__ unsigned short* prepared_rows(const DevCtx& c, const Word& w, unsigned norm_slot, char* smem, bool fresh, unsigned nx) {
  if (M_ROWS == 1 || nx == 1) return prepared_input(c, w, norm_slot, smem, fresh);
  return prepared_rows_m(c, w, norm_slot, smem, fresh, nx);
}

// M-row steps: whether a GEMV word's M inputs are prepared in shared memory (normed inputs) rather than
// read as they are from each row's activation.
__device__ __forceinline__ bool mrow_x_in_smem(const Word& w) {
  switch (w.opcode) {
    case OP_GEMV_NORM:
    case OP_GEMV_RESIDUAL: return w.ops[SLOT_W1] != OPERAND_NONE;
    case OP_GEMV_GATE_UP: return w.ops[SLOT_W2] != OPERAND_NONE;
    default: return true;  // the lm_head's
  }
}
// Whether a unit of word w runs the M rows of a verification step (M_ROWS > 1) in one pass over its
// weights: the fp8 GEMVs, the bf16 ones whose inputs are normed into shared memory (GDN's a and b) and
// the lm_head, when their M prepared inputs fit MROW_X_BYTES (launch.rs
// `mrow_gemv` decides the same for the shared memory it sizes). Every other word runs its rows one after
// another (for_rows).
__device__ __forceinline__ bool mrow_gemv(const DevCtx& c, const Word& w) {
  // (a prefill program's M of up to 128 rows never fits: its GEMVs are the host's GEMM, prefill.cuh)
  if (M_ROWS == 1 || PREFILL) return false;
  switch (w.opcode) {
    case OP_GEMV_NORM:
    case OP_GEMV_RESIDUAL:
      // fp8: fp8_rows_m; bf16 (GDN's a and b): dot_rows_m, over inputs prepared in shared memory
      if (!is_fp8(c, w.ops[SLOT_W0]) && !mrow_x_in_smem(w)) return false;
      break;
    case OP_GEMV_GATE_UP:
      if (!is_fp8(c, w.ops[SLOT_W0])) return false;
      break;
    case OP_LM_HEAD: break;
    default: return false;
  }
  return !mrow_x_in_smem(w) || M_ROWS * xrow_bytes(c.cols[w.ops[SLOT_IN0]]) <= MROW_X_BYTES;
}
// An M-row fp8 GEMV's runs (weights x groups x 2 x M_ROWS x 32 floats: fp8_rows_m) after its prepared
// inputs and block sums.
__device__ __forceinline__ float* mrow_red(char* smem, unsigned K, bool x_smem) {
  return (float*)(smem + (x_smem ? M_ROWS * xrow_bytes(K) : 0) + 32);
}

// M rows (M_ROWS > 1: a verification step over positions pos .. pos + M): a word whose op takes every
// row itself (`mrow_word`: the op runs once), a word whose units split the rows (FLAG_ROW_UNITS: units
// row-major over (row m, one row's unit), so unit u runs row u / (units / M) as unit u mod (units / M)
// of a one-row step, the rows side by side on as many blocks), any other op once per row, rows in order,
// row m on the row-m view of the buffers (`row_view`: row m holds position pos + m and token m), so row
// m computes the bits a one-row step at position pos + m computes. A barrier precedes every row: row
// m + 1 reads what row m wrote (the recurrent state, the conv ring) and re-prepares the shared-memory
// input. EndStep runs once over every row. M_ROWS == 1: the op, once. f(c, row, u): row is true inside
// the row loop and for a row unit (each row re-prepares its input), u the unit the op runs.
// Whether word w's unit takes the M rows of a step itself (M_ROWS > 1): the M-row GEMVs (`mrow_gemv`),
// the split-K reduces (rows independent: one loop over (row, output) pairs), GdnRecur (its state
// column in registers across the rows, gdn_head) and GdnConv (the deferred commit: its channels' ring
// window in registers across the rows).
__device__ __forceinline__ bool mrow_word(const DevCtx& c, const Word& w) {
  return M_ROWS > 1 && (mrow_gemv(c, w) || w.opcode == OP_REDUCE_STORE || w.opcode == OP_REDUCE_RESIDUAL ||
                        w.opcode == OP_GDN_RECUR || w.opcode == OP_GDN_CONV);
}

// One call of f in either program, so that ptxas inlines the op (a third call site made the ops real
// calls, their registers saved across them: k_gdn_conv's 32 bytes of spills at M = 8). A one-row program
// passes the context itself: the M-row form's select between it and a row view (`whole ? c : view`)
// changed the whole one-row megakernel's code and cost it 1 ms a step on the H200 (13.0 vs 12.0 ms in
// one run, results/issue27_staged_7a13d02 run4); at M = 8 the select measured 0.1-0.7 ms better than a
// row view always (row 0's for a whole word), so it stays there.
template <typename F> __device__ __forceinline__ void for_rows(const DevCtx& c, const Word& w, unsigned u, F f) {
#if M_ROWS == 1
  f(c, false, u);
#else
  const bool whole = w.opcode == OP_END_STEP || mrow_word(c, w);
  const bool split = !whole && (w.flags & FLAG_ROW_UNITS);
  const unsigned per = split ? w.units / w.m_rows : 1u;
  // (FLAG_LAST_ROW, a prefill program's head: the last row alone, on its view)
  const unsigned m0 = split ? u / per : (w.flags & FLAG_LAST_ROW) ? w.m_rows - 1u : 0u, m1 = whole ? 1u : split ? m0 + 1 : w.m_rows;
  for (unsigned m = m0; m < m1; ++m) {
    // (a row loop's barrier, also before row 0: the unit before, of the same word, may still read its
    // input; a row unit's is the caller's, after the previous unit)
    if (!whole && !split) BLOCK_SYNC();
    f(whole ? c : row_view(c, m), !whole, split ? u % per : u);
  }
#endif
}
