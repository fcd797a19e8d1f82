// The GPU sampler (discrete path): temperature, top-k, top-p and the draw, exactly as the CPU's
// `model::sample` (transformers' warpers in its order, its tie rules, `exp_mk`, `uniform_at`), so a
// GPU-sampled token equals the CPU's choice on the same logits, bit for bit. k_sample_collect (many
// blocks: the top-k threshold from the counts the lm_head left) then k_sample (one block of 1,024 threads) between the Argmax and EndStep words;
// greedy (temperature 0) leaves the argmax's token.
// Needs 1 <= top_k <= SAMPLE_MAX (the host refuses others: full-vocabulary sampling is CPU-only).
// top-k keeps every id at or above the k-th value (transformers' rule), so ties can keep more than k:
// room for SAMPLE_CAP; more sets the status word (sticky: the host reports it) and leaves the argmax's
// token. (Measured: top-k 2048 on the tiny preset's 248K bf16 logits tied past 2,048.)

#define SAMPLE_THREADS 1024
#ifndef TOPK_BREAK
#define TOPK_BREAK 0  // negative control: 1 raises the fused top-k's threshold by one key (`mk gpu sample` must fail)
#endif
// (SAMPLE_MAX, SAMPLE_CAP, COLLECT_THREADS: the generated header)


// e^x from IEEE +, -, * only, in the CPU's order (--fmad=false: nothing fuses). See exp_mk in
// src/model/sample.rs; the constants are the same f32 bits.
__device__ float exp_mk(float x) {
  const float LOG2E = __uint_as_float(0x3fb8aa3bu), LN2_HI = __uint_as_float(0x3f317200u), LN2_LO = __uint_as_float(0x35bfbe8eu);
  if (x != x) return x;
  if (x > 88.72284f) return __int_as_float(0x7f800000);
  if (x < -103.97208f) return 0.0f;
  float n = floorf(x * LOG2E + 0.5f);
  float r = (x - n * LN2_HI) - n * LN2_LO;
  float p = 1.0f + r * (1.0f + r * (0.5f + r * (__uint_as_float(0x3e2aaaabu) + r * (__uint_as_float(0x3d2aaaabu) +
            r * (__uint_as_float(0x3c088889u) + r * (__uint_as_float(0x3ab60b61u) + r * __uint_as_float(0x39500d01u)))))));
  int ni = (int)n, n1 = ni / 2, n2 = ni - ni / 2;
  return p * __uint_as_float((unsigned)(n1 + 127) << 23) * __uint_as_float((unsigned)(n2 + 127) << 23);
}

// SplitMix64's (pos + 1)-th output from seed, top 24 bits in [0, 1) (uniform_at in sample.rs).
__device__ float uniform_at(unsigned long long seed, unsigned long long pos) {
  unsigned long long z = seed + (pos + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return (float)(z >> 40) / 16777216.0f;
}


// f32 total order (Rust's total_cmp) as an unsigned key.
__device__ __forceinline__ unsigned total_key(float f) {
  unsigned u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// Sorts n (<= SAMPLE_CAP) (key_hi, key_lo) pairs ascending in shared memory (bitonic, padded to a
// power of two with the largest keys). Every thread takes part.
__device__ void bitonic_sort(unsigned* hi, unsigned* lo, unsigned n) {
  unsigned m = 1;
  while (m < n) m <<= 1;
  for (unsigned i = n + threadIdx.x; i < m; i += SAMPLE_THREADS) { hi[i] = 0xffffffffu; lo[i] = 0xffffffffu; }
  __syncthreads();
  for (unsigned size = 2; size <= m; size <<= 1)
    for (unsigned stride = size >> 1; stride > 0; stride >>= 1) {
      for (unsigned i = threadIdx.x; i < m; i += SAMPLE_THREADS) {
        unsigned j = i ^ stride;
        if (j > i) {
          bool up = (i & size) == 0;
          bool gt = hi[i] > hi[j] || (hi[i] == hi[j] && lo[i] > lo[j]);
          if (gt == up) {
            unsigned a = hi[i], b = lo[i];
            hi[i] = hi[j]; lo[i] = lo[j]; hi[j] = a; lo[j] = b;
          }
        }
      }
      __syncthreads();
    }
}

// top-p over the n kept ids (key_lo, in id order) and the draw; ctrl[2] receives the token.
// Every thread calls it (the sorts).
__device__ void sample_kept(const unsigned short* logits, unsigned n, unsigned* key_hi, unsigned* key_lo, unsigned* sh,
                            unsigned* ctrl, const SampleParams* sp) {
  float T = sp->temperature;
  unsigned t = threadIdx.x;
  // top-p: ascending (score, id), the ascending prefix with cumulative probability <= 1 - p removed.
  unsigned first = 0;
  if (sp->top_p < 1.0f) {
    for (unsigned i = t; i < n; i += SAMPLE_THREADS) key_hi[i] = total_key(bf2f(logits[key_lo[i]]) / T);
    __syncthreads();
    bitonic_sort(key_hi, key_lo, n);
    if (t == 0) {
      // ORDER: as the CPU, ascending; scores rebuilt from the keys' ids.
      float m = __int_as_float(0xff800000);
      for (unsigned i = 0; i < n; ++i) m = fmaxf(m, bf2f(logits[key_lo[i]]) / T);
      float z = 0.0f;
      for (unsigned i = 0; i < n; ++i) z += exp_mk(bf2f(logits[key_lo[i]]) / T - m);
      float cum = 0.0f, lim = 1.0f - sp->top_p;
      unsigned cut = 0;
      for (unsigned i = 0; i < n; ++i) {
        cum += exp_mk(bf2f(logits[key_lo[i]]) / T - m) / z;
        if (cum <= lim && i + 1 < n) cut = i + 1;
        else break;
      }
      sh[0] = cut;
    }
    __syncthreads();
    first = sh[0];
    __syncthreads();
    // Back to id order: the removed prefix gets the largest key and sorts last.
    for (unsigned i = t; i < n; i += SAMPLE_THREADS) key_hi[i] = i < first ? 0xffffffffu : key_lo[i];
    __syncthreads();
    bitonic_sort(key_hi, key_lo, n);
    n -= first;
  }
  // The draw over the kept ids in id order (key_lo holds them).
  if (t == 0) {
    float m = __int_as_float(0xff800000);
    for (unsigned i = 0; i < n; ++i) m = fmaxf(m, bf2f(logits[key_lo[i]]) / T);
    float z = 0.0f;
    for (unsigned i = 0; i < n; ++i) z += exp_mk(bf2f(logits[key_lo[i]]) / T - m);
    float u = fminf(fmaxf(uniform_at(sp->seed, ctrl[0]), 0.0f), 1.0f), target = u * z, cum = 0.0f;
    unsigned pick = n ? key_lo[n - 1] : ctrl[2];
    for (unsigned i = 0; i < n; ++i) {
      cum += exp_mk(bf2f(logits[key_lo[i]]) / T - m);
      if (cum > target) { pick = key_lo[i]; break; }
    }
    ctrl[2] = pick;
  }
}

// The bin holding the k-th largest of 256 counts (h[255] first), by one warp, as the serial walk
// `while (b > 0 && above + h[b] < k) above += h[b--]`: lane l sums bins 255 - 8l .. 248 - 8l, a warp
// scan (integers: exact) finds the first lane whose running count reaches k (else the last: bin 0),
// that lane walks its eight. Returns the bin; *need = k - the count above it.
__device__ unsigned kth_bin(const unsigned* h, unsigned k, unsigned* need) {
  unsigned lane = threadIdx.x & 31, top = 255 - 8 * lane, s = 0;
#pragma unroll
  for (int j = 0; j < 8; ++j) s += h[top - j];
  unsigned x = s;
  for (int o = 1; o < 32; o <<= 1) {
    unsigned y = __shfl_up_sync(0xffffffffu, x, o);
    if (lane >= (unsigned)o) x += y;
  }
  unsigned reach = __ballot_sync(0xffffffffu, x >= k);
  unsigned L = reach ? __ffs(reach) - 1 : 31;
  unsigned above = __shfl_sync(0xffffffffu, x - s, L), b = 255 - 8 * L;
  while (b > 0 && above + h[b] < k) above += h[b--];  // (every lane the same walk: no divergence)
  *need = k - above;
  return b;
}

// The ids at or above the k-th largest key, from the counts the lm_head left (SB_HI,
// SB_FULL): every block finds the threshold (two warp walks over 256 bins: 2 KB read) while its 2,048
// logits load, then appends its kept ids at an integer atomic (any order: k_sample sorts them by id).
// A NaN (key 0) is never kept. One thread per 8 ids; grid ceil(V / (8 COLLECT_THREADS)) blocks.
extern "C" __global__ void __launch_bounds__(COLLECT_THREADS) k_sample_collect(const unsigned short* logits, unsigned V, unsigned* sb,
                                                                  const unsigned* stop) {
  const SampleParams* sp = (const SampleParams*)sb;
  if (!(sp->temperature > 0.0f)) return;
  if (((volatile const unsigned*)stop)[1] != 0) return;
  __shared__ unsigned kth_s;
  unsigned i0 = 8 * (blockIdx.x * COLLECT_THREADS + threadIdx.x);
  unsigned short v[8];
  bool whole = i0 + 8 <= V && (V & 7u) == 0;  // (the buffer is 256-byte aligned: a 16-byte load)
  if (whole) {
    uint4 q = *(const uint4*)(logits + i0);
    const unsigned w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int e = 0; e < 8; ++e) v[e] = (unsigned short)(w[e >> 1] >> (16 * (e & 1)));
  } else {
#pragma unroll
    for (int e = 0; e < 8; ++e) v[e] = i0 + e < V ? logits[i0 + e] : 0x7fc0u;  // past the end: a NaN, never kept
  }
  if (threadIdx.x < 32) {
    unsigned need, b1 = kth_bin(sb + SB_HI, sp->top_k, &need);
    unsigned b0 = kth_bin(sb + SB_FULL + 256 * b1, need, &need);
    if (threadIdx.x == 0) kth_s = ((b1 << 8) | b0) + TOPK_BREAK;
  }
  __syncthreads();
  unsigned kth = kth_s;
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    unsigned key = logit_key(v[e]);
    if (key >= kth && key != 0) {
      unsigned at = atomicAdd(sb + SB_COUNT, 1u);
      if (at < SAMPLE_CAP) sb[SB_CANDS + at] = i0 + e;
    }
  }
}

// k_sample_collect's ids into key_lo in id order (ids are distinct: a sort by id alone);
// returns how many (more than SAMPLE_CAP: the ones past it were never written).
__device__ unsigned kept_collected(const unsigned* sb, unsigned* key_hi, unsigned* key_lo) {
  unsigned n = ((volatile const unsigned*)sb)[SB_COUNT];
  if (n > SAMPLE_CAP) return n;
  for (unsigned i = threadIdx.x; i < n; i += SAMPLE_THREADS) key_hi[i] = key_lo[i] = sb[SB_CANDS + i];
  __syncthreads();
  bitonic_sort(key_hi, key_lo, n);
  return n;
}

// The sampler: k_sample_collect's kept ids, then top-p and the draw (sample_kept). One block of 1,024
// threads between the Argmax and EndStep words. It then zeroes the counts for the next step.
extern "C" __global__ void __launch_bounds__(SAMPLE_THREADS) k_sample(const unsigned short* logits, unsigned V, unsigned* ctrl,
                                                                     unsigned* sb, const unsigned* stop) {
  __shared__ unsigned sh[33];
  __shared__ unsigned key_hi[SAMPLE_CAP], key_lo[SAMPLE_CAP];
  const SampleParams* sp = (const SampleParams*)sb;
  if (!(sp->temperature > 0.0f)) return;  // greedy: the argmax's token stands (and nothing was counted)
  if (((volatile const unsigned*)stop)[1] == 0) {  // (else the sequence stopped: DevCtx::stop)
    unsigned n = kept_collected(sb, key_hi, key_lo);
    if (threadIdx.x == 0) sb[SB_KEPT] = n;
    if (n > SAMPLE_CAP) {
      if (threadIdx.x == 0) sb[SB_STATUS] = 1;  // the argmax's token stands
    } else {
      sample_kept(logits, n, key_hi, key_lo, sh, ctrl, sp);
    }
  }
  __syncthreads();  // every read of the count is done
  uint4* z = (uint4*)(sb + SB_COUNT);
  for (unsigned i = threadIdx.x; i < (SB_CANDS - SB_COUNT) / 4; i += SAMPLE_THREADS) z[i] = make_uint4(0, 0, 0, 0);
}
