// Shared definitions of every op: the device context (buffer pointers by id), number formats and the
// fixed-order reductions. Owns: bf16/e4m3 conversions and reductions. Refuses: float atomics (none
// anywhere in megakernel/): every reduction below has a fixed order.
#pragma once

#define THREADS 256
#define WARPS (THREADS / 32)
#define GEMV_UNIT_ROWS 16
#define KGROUP 1024
#define ATTN_PART 256
// Tunables (performance only, never bits): NVRTC -D from MK_CUDA_DEFINES overrides them.
#ifndef GEMV_FP8_GROUPS
#define GEMV_FP8_GROUPS 1  // fp8 k-groups whose loads a lane issues at once (x 2 rows x 2 chunks); 1 with
                           // GEMV_MIN_BLOCKS=4 measured 0.87x the graph's ms/token of 2 with 1 (results/occupancy_62eb875)
#endif
#ifndef UNIT_LOOP
#define UNIT_LOOP 1        // a block runs several units of a word and prepares a GEMV's input once
                           // (measured: megakernel 34.8 -> 25.4 ms/token on the 27B, graph 16.4 -> 16.0)
#endif
#ifndef UNIT_SYNC
#define UNIT_SYNC 1        // 1: a discrete GEMV block joins its warps after every unit; 0: only before a unit
                           // of another word (whose prepared input overwrites shared memory), so warps
                           // run on into the next unit of the same word with their loads in flight
                           // (0 measured within noise of 1 on the 27B: results/unitsync_72e2775)
#endif
#ifndef MEGA_BLOCKS_PER_SM
#define MEGA_BLOCKS_PER_SM 3  // megakernel blocks per SM (its launch bounds; the host launches as many);
                              // 3 measured 0.74x the ms/token of 1 on the 27B (results/occupancy_62eb875)
#endif
#ifndef GEMV_MIN_BLOCKS
#define GEMV_MIN_BLOCKS 2  // the discrete GEMV kernels' launch bounds: blocks per SM ptxas must fit (registers);
                           // the host sizes their weight ring so that as many fit in shared memory
#endif
#ifndef GEMV_DYNAMIC
#define GEMV_DYNAMIC 1     // discrete GEMV launches (UNIT_LOOP) hand their units out by an integer ticket
                           // per launch, on as many blocks as are resident (0: block b runs units b,
                           // b + grid, .. on ceil(units / rounds) blocks: uneven blocks per SM)
#endif
#ifndef TICKET_FENCE
#define TICKET_FENCE 0     // fences around a discrete GEMV block's finished count (the formal order of its last
                           // ticket before the count, and of the count before the last block's reset); not
                           // yet measured (scripts/device_probe2.sh)
#endif
#ifndef GEMV_REVERSE
#define GEMV_REVERSE 1     // a discrete GEMV launch of several words hands out the last word's units first
                           // (measured 27B graph 12.31 against 12.45 ms/token: results/rev_bc7d07f)
#endif
#ifndef GRAPH_PDL
#define GRAPH_PDL 1        // the graph's kernels are launched programmatically dependent (the host reads
                           // this too): a kernel may start while its predecessor runs; a GEMV block first
                           // prefetches its first unit's weights into L2, then every kernel waits for its
                           // predecessor (griddepcontrol.wait) before anything else, then lets its own
                           // successor launch (so at most two kernels are resident at once)
#endif
#ifndef PDL_PREFETCH
#define PDL_PREFETCH 0     // with GRAPH_PDL: the GEMV blocks' L2 prefetch of their first unit before the wait
                           // (measured 13.90 against 12.39 ms/token without: results/pdl_*)
#endif
#ifndef L2_AHEAD
#define L2_AHEAD 0         // fp8_stream: a warp asks L2 for the item this many items ahead of the one it loads
                           // (one prefetch.global.L2 per 128-byte line, lanes 0 .. 8 NR - 1): bytes in
                           // flight without registers (0: none)
#endif
#ifndef DOT_L2_AHEAD
#define DOT_L2_AHEAD 0     // the same for dot_rows' fp8 rows (the megakernel's GEMV): k-groups ahead (0: none)
#endif
#ifndef MEGA_PREFETCH
#define MEGA_PREFETCH 0    // 1: a megakernel block that took a GEMV unit whose counter is not ready yet
                           // prefetches the unit's weights into L2 before it waits: weights never depend
                           // on activations, so DRAM streams while the block waits. Lost: 18.45 against
                           // 16.81 ms/token (results/pdl_*); before every wait, ready or not, 19.84 against
                           // 16.88 (results/dyn_878650e): whole units ahead overfill L2
#endif
#ifndef ATTN_RS
#define ATTN_RS 1          // attention scores: the query heads' warp sums by reduce-scatter (9 shuffles a
                           // position instead of 5 a head; the same bits). With ATTN_PROLOGUE and PV_STAGE
                           // measured at 32K: graph 14.13 vs 14.69, megakernel 16.97 vs 17.79 ms/token;
                           // context 16: graph 12.27 vs 12.38, megakernel 14.28 vs 14.14 (results/probe_16f76fa)
#endif
#ifndef ATTN_PROLOGUE
#define ATTN_PROLOGUE 1    // attention scores: the group's query heads normed and rotated together (the same
                           // bits, one round trip to memory); measured with ATTN_RS, above
#endif
#ifndef PV_STAGE
#define PV_STAGE 1         // attention PV: the partitions' (max, sum) pairs staged in shared memory by the
                           // whole block before the merge (the same bits); measured with ATTN_RS, above
#endif
#ifndef RING_TC
#define RING_TC 0          // the ring's consumers on tensor cores: an fp8 item is 16 rows x one k-group (a row 1,088
                           // bytes apart in the slot), warp w computes chunk w as mma_unit_bs (GEMV_MMA's order and
                           // bits: the megakernel and the k_* kernels take the tensor-core path too); implies
                           // GEMV_RING and GEMV_MMA
#endif
#ifndef GEMV_RING
#define GEMV_RING 0         // the discrete fp8 / bf16 GEMVs (not the lm_head) stream their weights through one
                           // block-wide shared-memory ring fed by bulk copies across units (ring.cuh; the host
                           // reads this too and launches the r_* kernels)
#endif
#ifndef RING_BLOCKS
#define RING_BLOCKS 1      // GEMV_RING: the ring kernels' blocks per SM (their launch bounds; the host sizes the
                           // ring so that as many fit in shared memory)
#endif
#ifndef RING_SLOTS
#define RING_SLOTS 12      // GEMV_RING: the ring's slots (RING_SLOT_KB each) at most (fewer when shared memory is short)
#endif
#ifndef RING_STAMPS
#define RING_STAMPS 0      // GEMV_RING DIAGNOSTIC: block 0 of the RING_STAMPS-th ring launch of the process prints
                           // its first 64 items' clock64 stamps (issue, landing, warps 0 and 7 done, slot free)
                           // with device printf; the host reads this too (static shared memory)
#endif
#ifndef PREP_ASYNC
#define PREP_ASYNC 0       // 1: a GEMV's unnormed input (o_proj, down_proj; both paths) copied into shared memory by
                           // cp.async, every chunk in flight at once (0: a loop, one round trip per 2,048
                           // elements; not yet measured)
#endif
#ifndef RING_CWARPS
#define RING_CWARPS 8      // GEMV_RING: consumer warps per ring block, 8 or 16 (the host reads this too: the
                           // block is RING_CWARPS + 1 warps)
#endif
#ifndef RING_SLOT_KB
#define RING_SLOT_KB 16    // GEMV_RING: a slot's (an item's) weight bytes in KB, 16 or 32 (the producer's cost is
                           // per item; the host reads this too)
#endif
#ifndef RING_PAIR
#define RING_PAIR 1        // GEMV_RING: a warp's two fp8 pieces of an item loaded first and computed without a
                           // branch between them (0: piece by piece, each chunk behind its bounds test)
#endif
#ifndef RING_FENCE
#define RING_FENCE 1       // GEMV_RING: the producer's fence.proxy.async after a slot's empty wait (CUTLASS's TMA
                           // pipelines order the consumers' reads before the next copy by the mbarrier alone)
#endif
#ifndef RING_EARLY
#define RING_EARLY 1       // GEMV_RING: a block's first unit's copies are issued before griddepcontrol.wait
                           // (weights never depend on the predecessor kernel)
#endif
#ifndef GEMV_READ_ONLY
#define GEMV_READ_ONLY 0   // DIAGNOSTIC, WRONG RESULTS: the fp8 GEMVs load their weights as ever but skip the
                           // arithmetic (a XOR per chunk), to time the loop structure alone
#endif
#ifndef PREFETCH_GROUPS
#define PREFETCH_GROUPS 0  // PDL_PREFETCH / MEGA_PREFETCH: only the unit's first k-groups of each row (a
                           // unit's first loads, about 16-32 KB a block, not the whole unit; 0: all of it)
#endif
#ifndef PREFETCH_LINES
#define PREFETCH_LINES 0   // L2 prefetches as one prefetch.global.L2 per 128-byte line (else bulk prefetches
                           // of up to 16 KB, cp.async.bulk.prefetch.L2)
#endif
#ifndef GRAPH_STAMPS
#define GRAPH_STAMPS 0     // discrete kernels stamp every unit (%globaltimer, as the megakernel's timeline) into
                           // DevCtx::stamps: the graph's per-word times inside the captured step (not the
                           // GEMV_RING kernels, nor the GEMVs with UNIT_LOOP=0)
#endif
#ifndef TOPK_FUSED
#define TOPK_FUSED 1       // sampling's top-k threshold from histograms the lm_head fills as it writes the logits
                           // (k_sample_collect then one pass of many blocks); 0: the one-block sampler's four
                           // passes over the logits (sample.cu)
#endif
#ifndef DEVICE_STOP
#define DEVICE_STOP 1      // graph kernels return at once after the stop token (0: timing the check's cost only)
#endif
#ifndef GEMV_TMA
#define GEMV_TMA 0         // GEMV weights streamed into a shared-memory ring by bulk copies (TMA)
#endif
#ifndef TMA_DEPTH
#define TMA_DEPTH 3        // ring slots (k-groups); TMA_DEPTH - 1 in flight while one is computed
#endif
static_assert(TMA_DEPTH >= 1, "TMA_DEPTH is at least 1");
#ifndef GEMV_MMA
#define GEMV_MMA 0         // fp8 GEMV on tensor cores (mma_unit_fp8) instead of the CUDA-core dot_rows
#endif
#if RING_TC  // (RING_TC implies both)
#undef GEMV_RING
#define GEMV_RING 1
#undef GEMV_MMA
#define GEMV_MMA 1
#endif
// The GEMV inputs' one-round-trip preps (STREAM: the discrete kernels) cost the tensor-core path
// spills (ptxas at 128 registers): it keeps the loop.
#define ONE_TRIP_PREP(STREAM) ((STREAM) && !GEMV_MMA)
#ifndef MMA_AHEAD
#define MMA_AHEAD 1        // tensor-core GEMV: items (2 KB a warp) in flight while one is computed, discrete
                           // kernels (2 and 3 spill at 128 registers and measured slower: results/mma_9f4c3b0)
#endif
#ifndef MEGA_MMA_AHEAD
#define MEGA_MMA_AHEAD 1   // the same in the megakernel (its register budget)
#endif
#ifndef GEMV_PIPE
#define GEMV_PIPE 1        // register path of fp8_stream: 1 issues the next item's weight loads before the
                           // current item's arithmetic; 0 loads, then computes, as dot_rows
#endif
#ifndef GEMV_STREAM
#define GEMV_STREAM 1      // the discrete fp8 GEMV kernels use fp8_stream (rows' x shared, pipelined loads);
                           // 0: dot_rows per row pair, loads then arithmetic (the same bits either way)
#endif
#ifndef RECUR_SPLIT
#define RECUR_SPLIT 1      // GDN recurrence: two threads per state column (64 registers of state each, the
                           // k sums handed from one half to the other in order); 0: one thread a column
#endif
#ifndef MEGA_LEAN
#define MEGA_LEAN 1        // megakernel: a word's counter is looked at only until the block saw it ready, and
                           // the next ticket is taken before the fence that publishes a unit (0: every unit
                           // looks, ticket after the release)
#endif
#ifndef MEGA_NOINLINE
#define MEGA_NOINLINE 0    // the megakernel calls each op as a function of its own (registers allocated per op)
#endif
#ifndef MEGA_GEMV_STREAM
#define MEGA_GEMV_STREAM 0 // the same for the megakernel: fp8_stream measured slower there (its 80-register
                           // budget; results/pipe_*), so it keeps dot_rows; through the cp.async ring too
                           // (GEMV_DEPTH 2 / 3: 18.1 / 17.9 against 14.2 ms/token, results/final_64b7705)
#endif
#ifndef GDN_STATE_EARLY
#define GDN_STATE_EARLY 0  // with GRAPH_PDL: the discrete GdnStep kernel issues its state loads before
                           // griddepcontrol.wait (the same bits; lost: 11.968 against 11.969
                           // ms/token, results/stateearly_65a537a)
#endif
#ifndef MEGA_STATE_EARLY
#define MEGA_STATE_EARLY 0 // the megakernel's block that must wait for a GdnStep unit issues the unit's state
                           // loads before waiting (the same bits; lost: 14.394 against 13.739
                           // ms/token, its spills slow every op; results/stateearly_65a537a)
#endif
#ifndef M_ROWS
#define M_ROWS 1           // the program's M (rows of a verification step); the host prepends it to the source
                           // for M > 1 programs, so M = 1 programs compile exactly as before (no row loop)
#endif
#ifndef MEGA_STEP_MIXED_FIRST
#define MEGA_STEP_MIXED_FIRST 0 // 1: the megakernel's GdnStep computes its conv before loading the state (one more
                                // round trip, fewer registers live at once; the same bits)
#endif
#ifndef MEGA_STREAM_NR1
#define MEGA_STREAM_NR1 0  // the megakernel's norm / residual / gated-norm GEMVs through fp8_stream one row at a
                           // time (pipelined loads at half MEGA_GEMV_STREAM's registers); 2: gate/up streamed
                           // too (its gate and up rows together); not yet measured
#endif
#ifndef GEMV_DEPTH
#define GEMV_DEPTH 0       // fp8 GEMV items (NR rows x one k-group) each warp keeps in its cp.async ring
                           // in shared memory (the host sizes the discrete kernels' shared memory for it;
                           // the megakernel's depth follows from its shared memory); 0: registers only
#endif
#ifndef GNR_MIN_BLOCKS
#define GNR_MIN_BLOCKS GEMV_MIN_BLOCKS  // GDN out_proj's launch bounds alone (its 320 units on the 27B fill
                                        // 2 x 132 resident blocks 1.2 times: 3 per SM would take one round;
                                        // registers only: with GEMV_DEPTH the host sizes shared memory for
                                        // GEMV_MIN_BLOCKS)
#endif
#ifndef WEIGHT_L2_HINT
#define WEIGHT_L2_HINT 0   // weight loads (ldw) ask L2 for 256-byte fetches (1), also an evict-first cache policy
                           // (2: weights are read once a step); 0: no hint
#endif
#ifndef WEIGHT_LOAD_NC
#define WEIGHT_LOAD_NC 1   // weights through ld.global.nc.L1::no_allocate (else plain loads)
#endif
#define MAX_GROUP 8    // query heads per KV head the attention ops handle (the host refuses more)
#define PV_GROUPS 4    // attention PV: position groups a unit's warps split its positions into (pairs of warps)
static_assert(WARPS == 2 * PV_GROUPS, "attention PV: two warps (128 dims each) per position group");
#ifndef ATTN_UNROLL
#define ATTN_UNROLL 4  // positions whose K/V loads a warp / thread has in flight at once
#endif
#ifndef ATTN_QREG
#define ATTN_QREG 0  // attention scores: the packed queries in registers (127 registers: fewer blocks per SM)
#endif
#ifndef PV_UNROLL
#define PV_UNROLL ATTN_UNROLL  // the same for attention PV's value rows alone (its order of sums does not depend on it)
#endif
static_assert(PV_UNROLL >= 1, "PV_UNROLL: at least one value row in flight");
#ifndef PV_MERGE_PAR
#define PV_MERGE_PAR 1  // attention PV: the partitions' exp(m_p - M) l_p products computed by the whole block
                        // (then summed in partition order by one thread a head, as before); 0: one thread a
                        // head computes and sums them (the same bits)
#endif

// The sampler's block in the arena (DevCtx::sampler), in u32 words: SampleParams and the sticky status,
// then what the fused top-k (TOPK_FUSED) keeps between the lm_head and the sampler; words SB_COUNT ..
// SB_CANDS are zero between steps (k_sample zeroes them after use; the host at reset and set_sampling).
struct SampleParams {
  float temperature;
  unsigned top_k;
  float top_p;
  unsigned pad;
  unsigned long long seed;
};
#define SB_STATUS 6       // sticky: more ids tied at the threshold than SAMPLE_CAP
#define SB_KEPT 7         // the last sampled step's ids at or above the top-k threshold (the GPU check reads it)
#define SB_COUNT 8        // ids at or above the threshold (k_sample_collect's integer atomic)
#define SB_HI 256         // [256] logits counted by their key's high byte (the lm_head)
#define SB_FULL 512       // [65536] logits counted by key (the lm_head)
#define SB_CANDS 66048    // [SAMPLE_CAP] the kept ids, in any order
#define SAMPLE_CAP 4096   // ids kept at most, ties at the k-th value included (a power of two: the bitonic sort's
                          // padding; 2 x 16 KB of the sampler's shared memory)
#define SB_WORDS (SB_CANDS + SAMPLE_CAP)

// A bf16 logit's 16-bit key, ascending with its value: NaN lowest, -0 as +0 (top-k is a threshold on
// values, and -0 == +0).
__device__ __forceinline__ unsigned logit_key(unsigned short b) {
  if ((b & 0x7fffu) > 0x7f80u) return 0;
  if (b == 0x8000u) b = 0;
  return (b & 0x8000u) ? (~b & 0xffffu) : (b | 0x8000u);
}

struct DevCtx {
  void* const* bufs;              // per buffer id: device pointer
  const float* const* scales;     // per buffer id: fp8 weight_scale_inv as f32 [rows/128][cols/128], else null
  const unsigned* rows;           // per buffer id: rows
  const unsigned* cols;           // per buffer id: cols
  const unsigned char* wbytes;    // per buffer id: storage (1 fp8 + bf16 scales, 2 bf16, 3 fp8 + other scales, 4 f32)
  const float* rope;              // [max_ctx][2][rotary_dim]: cos then sin, bf16 values (from the CPU tables)
  unsigned* stop;                 // the device-side stop: [0] stop token + 1 (0: none), [1] stopped (set by EndStep)
  unsigned* tickets;              // [n_words][2]: a discrete GEMV launch's unit tickets and finished blocks
                                  // (GEMV_DYNAMIC; indexed by the launch's first word, zero between launches)
  unsigned long long* stamps;     // GRAPH_STAMPS: the timeline slots (four u64 per unit), else null
  const unsigned* unit_base;      // [n_words]: each word's first timeline slot
  const unsigned char* tmaps;     // RING_TC: per buffer id a 128-byte tensor map (fp8 weights of whole items), else zeros
  unsigned* sampler;              // the sampler's block (SB_*), or null (the megakernel: it never samples)
  unsigned rotary_dim, head_dim, gdn_dim, n_heads, n_kv_heads, gdn_k_heads, gdn_v_heads, max_ctx;
  float eps;
  unsigned n_bufs;                // buffers per row view: bufs holds M_ROWS views of n_bufs pointers each
};
static_assert(sizeof(DevCtx) == 136, "DevCtx as src/cuda/discrete.rs lays it out");

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

__device__ __forceinline__ float silu(float x) { return x / (1.0f + expf(-x)); }
__device__ __forceinline__ float sigm(float x) { return 1.0f / (1.0f + expf(-x)); }

// The join of a block's THREADS threads: __syncthreads in every kernel launched with THREADS threads;
// in the ring GEMV kernels (ring.cu), whose producer warp (and, with RING_CWARPS=16, a second group of
// consumer warps) is extra, the join of warps 0-7 only.
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

// M rows (M_ROWS > 1: a verification step over positions pos .. pos + M): an op runs once per row, rows
// in order, row m on the row-m view of the buffers (bufs + m n_bufs: activations, scratch and the
// control block, whose row m holds position pos + m and token m, start m rows in; weights, states and
// KV caches are shared), so row m computes the bits a one-row step at position pos + m computes. A
// barrier precedes every row: row m + 1 reads what row m wrote (the recurrent state, the conv ring) and
// re-prepares the shared-memory input. EndStep runs once over every row. M_ROWS == 1: the op, once.
template <typename F> __device__ __forceinline__ void for_rows(const DevCtx& c, const Word& w, F f) {
  if (M_ROWS == 1 || w.opcode == OP_END_STEP) {
    f(c, false);
    return;
  }
  for (unsigned m = 0; m < w.m_rows; ++m) {
    __syncthreads();  // (also before row 0: the unit before, of the same word, may still read its input)
    DevCtx r = c;
    r.bufs = c.bufs + (size_t)m * c.n_bufs;
    f(r, true);
  }
}

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
// A 16-byte chunk of bf16 x normed: bf((x * rstd) * (1 + w)) for its 8 weights w.
__device__ __forceinline__ uint4 chunk_normed(uint4 v, float4 wa, float4 wb, float rstd) {
  unsigned vw[4] = {v.x, v.y, v.z, v.w}, o[4];
  float ww[8] = {wa.x, wa.y, wa.z, wa.w, wb.x, wb.y, wb.z, wb.w};
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    unsigned lo = f2bf((lo_bf(vw[q]) * rstd) * (1.0f + ww[2 * q]));
    unsigned hi = f2bf((hi_bf(vw[q]) * rstd) * (1.0f + ww[2 * q + 1]));
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
// (ONE_TRIP: the discrete GEMV kernels; the megakernel keeps the loop, its register budget is tight.)
#define NORM_CHUNKS 3
template <bool ONE_TRIP>
__device__ void block_rmsnorm(const unsigned short* x, const float* w, unsigned n, float eps, unsigned short* out, float* red) {
  float ss = 0.f;
  if (ONE_TRIP && n % 8 == 0 && n <= NORM_CHUNKS * 8 * THREADS) {
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
      if (i < n) *(uint4*)(out + i) = chunk_normed(xv[j], wa[j], wb[j], rstd);
    }
  } else if (n % 8 == 0) {
    for (unsigned i = 8 * threadIdx.x; i < n; i += 8 * THREADS) ss = chunk_squares(*(const uint4*)(x + i), ss);
    ss = block_sum(ss, red);
    float rstd = 1.0f / sqrtf(ss * (1.0f / (float)n) + eps);
    for (unsigned i = 8 * threadIdx.x; i < n; i += 8 * THREADS)
      *(uint4*)(out + i) = chunk_normed(*(const uint4*)(x + i), *(const float4*)(w + i), *(const float4*)(w + i + 4), rstd);
  } else {
    for (unsigned i = threadIdx.x; i < n; i += THREADS) { float v = bf2f(x[i]); ss += v * v; }
    ss = block_sum(ss, red);
    float rstd = 1.0f / sqrtf(ss * (1.0f / (float)n) + eps);
    for (unsigned i = threadIdx.x; i < n; i += THREADS) out[i] = f2bf((bf2f(x[i]) * rstd) * (1.0f + w[i]));
  }
  BLOCK_SYNC();
}

// A GEMV's prepared input in shared memory: x = IN0 (bf16, K = its width) as bf16 at smem[0..K), either
// RMS-normed with the norm weight in slot `norm` or copied as is (norm unused). Recomputed only when
// `fresh` (a block's first unit of the word): otherwise shared memory still holds it. The floats after
// it (16-byte aligned) are the caller's (block sums, the tensor-core GEMV's per-warp sums).
template <bool ONE_TRIP>
__device__ unsigned short* prepared_input(const DevCtx& c, const Word& w, unsigned norm_slot, char* smem, bool fresh) {
  unsigned K = c.cols[w.ops[SLOT_IN0]];
  unsigned short* xs = (unsigned short*)smem;
  if (!fresh) return xs;
  const unsigned short* x = B<unsigned short>(c, w.ops[SLOT_IN0]);
  if (w.ops[norm_slot] != OPERAND_NONE) {
    block_rmsnorm<ONE_TRIP>(x, B<float>(c, w.ops[norm_slot]), K, c.eps, xs, (float*)(smem + ((K * 2 + 15) / 16) * 16));
  } else {
    if (PREP_ASYNC && K % 8 == 0) {  // (the megakernel too: no register cost)
      // Every 16-byte chunk by cp.async (global to shared through L2, no registers): one round trip
      // instead of one per 2,048 elements (9 for a down_proj's 17,408).
      for (unsigned i = 8 * threadIdx.x; i < K; i += 8 * THREADS)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"((unsigned)__cvta_generic_to_shared(xs + i)), "l"(x + i)
                     : "memory");
      asm volatile("cp.async.wait_all;" ::: "memory");  // (this thread's copies landed; the join below shares them)
    } else if (K % 8 == 0)
      for (unsigned i = 8 * threadIdx.x; i < K; i += 8 * THREADS) *(uint4*)(xs + i) = *(const uint4*)(x + i);
    else
      for (unsigned i = threadIdx.x; i < K; i += THREADS) xs[i] = x[i];
    BLOCK_SYNC();
  }
  return xs;
}

// d = a * b + c on two bf16 lanes, one rounding each (round to nearest even, subnormals kept).
__device__ __forceinline__ unsigned bf16x2_fma(unsigned a, unsigned b, unsigned c) {
  unsigned d;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}


// A block scale as a bf16 pair of scale * 2^120 (the factor e4m3x2_widen leaves out), for bf16x2_fma.
__device__ __forceinline__ unsigned bf16_scale_pair(float scale) {
  unsigned sb = __float_as_uint(scale * 0x1p120f) >> 16;
  return sb | (sb << 16);
}

// A weight load: 16 bytes through the non-coherent path, not kept in L1 (weights are read once a step).
__device__ __forceinline__ uint4 ldw(const void* p) {
#if WEIGHT_LOAD_NC
  uint4 v;
#if WEIGHT_L2_HINT == 1
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
#elif WEIGHT_L2_HINT == 2
  unsigned long long pol;  // (an evict-first policy for the whole line; sm_90 takes it as a cache hint)
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
  asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p), "l"(pol));
#else
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
#endif
  return v;
#else
  return *(const uint4*)p;
#endif
}

// Two e4m3 codes (bytes 0,1 or 2,3 of w: sel 0x9180 / 0xB3A2) widened exactly to a bf16 pair times
// 2^-120: prmt puts each code in the low byte of its half with its sign replicated above it, the shift
// by 4 brings exponent and mantissa to bf16's bits 10..4 and the sign copy to bit 15, the mask keeps
// those (e4m3 subnormals become bf16 subnormals).
// (PTX prmt, not __byte_perm: the selector's sign-replicate bit is PTX's, the intrinsic's is masked.)
__device__ __forceinline__ unsigned e4m3x2_widen(unsigned w, unsigned sel) {
  unsigned y;
  asm("prmt.b32 %0, %1, 0, %2;" : "=r"(y) : "r"(w), "r"(sel));
  return (y << 4) & 0x87f087f0u;
}

// A generic pointer into shared memory as a shared-window address.
__device__ __forceinline__ unsigned smem_addr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
// 16 bytes of shared memory (a generic pointer into it; ld.shared: the compiler cannot always tell).
__device__ __forceinline__ uint4 lds16(const void* p) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(smem_addr(p)));
  return v;
}

// acc[i] += the 16 fp8 weights v[i] times bf16 shared xs[0..16) for NR rows, each row exactly as
// chunk_fp8 (its elements in order, one fma each, the same bits): x is read and widened once for all
// rows. BS: every row's scales are bf16 below 2^8 (wbytes 1: one fma.rn.bf16x2 per pair); else the
// CPU's fp32 product then bf16 for every row (the same bits for a bf16 scale: its product is exact).
template <int NR, bool BS, bool LDS = true>
__device__ __forceinline__ void chunk_fp8_rows(const uint4* v, const unsigned short* xs, const float* scale, float* acc) {
#if GEMV_READ_ONLY  // the diagnostic: the weights' bits folded into acc by two instructions a row, no x
#pragma unroll
  for (int i = 0; i < NR; ++i) acc[i] += __uint_as_float(((v[i].x ^ v[i].y ^ v[i].z ^ v[i].w) & 0x007fffffu) | 0x3f800000u);
  return;
#endif
  uint4 xa = LDS ? lds16(xs) : *(const uint4*)xs, xb = LDS ? lds16(xs + 8) : *(const uint4*)(xs + 8);
  unsigned xw[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
  unsigned s2[NR];
#pragma unroll
  for (int i = 0; i < NR; ++i) s2[i] = bf16_scale_pair(scale[i]);
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    float x[4] = {lo_bf(xw[2 * q]), hi_bf(xw[2 * q]), lo_bf(xw[2 * q + 1]), hi_bf(xw[2 * q + 1])};
#pragma unroll
    for (int i = 0; i < NR; ++i) {
      unsigned word = q == 0 ? v[i].x : q == 1 ? v[i].y : q == 2 ? v[i].z : v[i].w;
      if (BS) {
        unsigned d01 = bf16x2_fma(e4m3x2_widen(word, 0x9180), s2[i], 0x80008000u);
        unsigned d23 = bf16x2_fma(e4m3x2_widen(word, 0xB3A2), s2[i], 0x80008000u);
        acc[i] = fmaf(lo_bf(d01), x[0], acc[i]);
        acc[i] = fmaf(hi_bf(d01), x[1], acc[i]);
        acc[i] = fmaf(lo_bf(d23), x[2], acc[i]);
        acc[i] = fmaf(hi_bf(d23), x[3], acc[i]);
      } else {
#pragma unroll
        for (int b = 0; b < 4; ++b) {
          unsigned byte = (word >> (8 * b)) & 255u;
          float raw = __uint_as_float(((byte & 0x80u) << 24) | ((byte & 0x7fu) << 20)) * 0x1p120f;
          acc[i] = fmaf(bf(raw * scale[i]), x[b], acc[i]);
        }
      }
    }
  }
}

// acc += the 16 fp8 weights of v times bf16 shared xs[0..16), in element order. fp8 weights are
// dequantised as the oracle's bf16(e4m3 * scale): wbytes 1 (bf16 scales below 2^8) on bf16 pairs, code
// * (scale * 2^120) rounded once by fma.rn.bf16x2; wbytes 3 (other scales) as the CPU does, the fp32
// product e4m3 * scale then bf16. NaN codes (0x7f/0xff) are refused when the GPU path loads a
// checkpoint (they would decode to finite values here).
__device__ __forceinline__ float chunk_fp8(uint4 v, const unsigned short* xs, float scale, bool bf16_scale, float acc) {
  if (bf16_scale) chunk_fp8_rows<1, true, false>(&v, xs, &scale, &acc);
  else chunk_fp8_rows<1, false, false>(&v, xs, &scale, &acc);
  return acc;
}

// acc += the 8 bf16 weights of v times bf16 xs[0..8), in element order.
__device__ __forceinline__ float chunk_bf16(uint4 v, const unsigned short* xs, float acc) {
  uint4 xa = *(const uint4*)xs;
  unsigned words[4] = {v.x, v.y, v.z, v.w};
  unsigned xw[4] = {xa.x, xa.y, xa.z, xa.w};
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    acc = fmaf(lo_bf(words[q]), lo_bf(xw[q]), acc);
    acc = fmaf(hi_bf(words[q]), hi_bf(xw[q]), acc);
  }
  return acc;
}

// L2 prefetch (a hint: no value changes) of line `lane & 7` of row `lane >> 3` (< NR) of a k-group: an fp8
// k-group row is 1,024 bytes, 8 lines; lanes 8 NR .. 31 do nothing.
__device__ __forceinline__ void prefetch_line_l2(const unsigned char* row_base, unsigned g, unsigned K) {
  unsigned k = g * KGROUP + ((threadIdx.x & 7) << 7);
  if (k < min(K, (g + 1) * KGROUP)) asm volatile("prefetch.global.L2 [%0];" ::"l"(row_base + k));
}

// The warp's dot products of NR weight rows (wid[i], row[i]; all fp8 or all bf16, of one width K)
// with bf16 shared xs, k-group by k-group over groups [g0, g1): `part(i, g, value)` receives each
// (row, group) partial in group order, on every lane. ORDER inside a group (fixed, the CPU reference's
// `dot_warp` over a group): lane l sums its 16-byte chunks k = k0 + 16 l + 512 j (fp8; bf16: 8 l + 256 j)
// for j = 0, 1, .. in order, elements in order within a chunk, fma in fp32; then the warp butterfly.
// Memory-level parallelism: every lane issues all loads of GEMV_FP8_GROUPS groups (fp8) or one group
// (bf16) for all NR rows before any arithmetic: GEMV_FP8_GROUPS x NR x 2 (fp8) or NR x 4 (bf16) 16-byte
// loads in flight per lane. None of this changes the order of any sum.
template <int NR, typename Part>
__device__ void dot_rows(const DevCtx& c, const unsigned short* wid, const unsigned* row, const unsigned short* xs, unsigned g0, unsigned g1, Part part) {
  unsigned K = c.cols[wid[0]], lane = threadIdx.x & 31;
  unsigned char wb = c.wbytes[wid[0]];
  if (wb == 1 || wb == 3) {
    const unsigned char* w[NR];
    const float* sc[NR];
    bool bs[NR];
#pragma unroll
    for (int i = 0; i < NR; ++i) {
      bs[i] = c.wbytes[wid[i]] == 1;
      w[i] = (const unsigned char*)c.bufs[wid[i]] + (size_t)row[i] * K;
      sc[i] = c.scales[wid[i]] + (size_t)(row[i] / 128) * ((K + 127) / 128);
    }
    const unsigned pi = lane >> 3;  // the row whose lines this lane prefetches (DOT_L2_AHEAD)
    const unsigned char* pw = w[0];
#pragma unroll
    for (int i = 1; i < NR; ++i) pw = pi == (unsigned)i ? w[i] : pw;  // (no dynamic register index)
    if (DOT_L2_AHEAD && pi < NR)
      for (unsigned g = g0 + GEMV_FP8_GROUPS; g < min(g1, g0 + GEMV_FP8_GROUPS + DOT_L2_AHEAD); ++g) prefetch_line_l2(pw, g, K);
    for (unsigned g = g0; g < g1; g += GEMV_FP8_GROUPS) {
      if (DOT_L2_AHEAD && pi < NR)
        for (unsigned gg = 0; gg < GEMV_FP8_GROUPS; ++gg)
          if (g + GEMV_FP8_GROUPS + DOT_L2_AHEAD + gg < g1) prefetch_line_l2(pw, g + GEMV_FP8_GROUPS + DOT_L2_AHEAD + gg, K);
      uint4 v[NR][GEMV_FP8_GROUPS][2];
#pragma unroll
      for (int i = 0; i < NR; ++i)
#pragma unroll
        for (int gg = 0; gg < GEMV_FP8_GROUPS; ++gg)
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            unsigned k = (g + gg) * KGROUP + lane * 16 + j * 512;
            bool ok = g + gg < g1 && k < min(K, (g + gg + 1) * KGROUP);
            v[i][gg][j] = ok ? ldw(w[i] + k) : make_uint4(0, 0, 0, 0);
          }
#pragma unroll
      for (int i = 0; i < NR; ++i)
#pragma unroll
        for (int gg = 0; gg < GEMV_FP8_GROUPS; ++gg) {
          if (g + gg >= g1) break;
          float acc = 0.f;
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            unsigned k = (g + gg) * KGROUP + lane * 16 + j * 512;
            if (k < min(K, (g + gg + 1) * KGROUP)) acc = chunk_fp8(v[i][gg][j], xs + k, sc[i][k / 128], bs[i], acc);
          }
          part(i, g + gg, warp_sum(acc));
        }
    }
  } else {
    const unsigned short* w[NR];
#pragma unroll
    for (int i = 0; i < NR; ++i) w[i] = (const unsigned short*)c.bufs[wid[i]] + (size_t)row[i] * K;
    for (unsigned g = g0; g < g1; ++g) {
      unsigned k1 = min(K, (g + 1) * KGROUP);
      uint4 v[NR][4];
#pragma unroll
      for (int i = 0; i < NR; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          unsigned k = g * KGROUP + lane * 8 + j * 256;
          v[i][j] = k < k1 ? ldw(w[i] + k) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
      for (int i = 0; i < NR; ++i) {
        float acc = 0.f;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          unsigned k = g * KGROUP + lane * 8 + j * 256;
          if (k < k1) acc = chunk_bf16(v[i][j], xs + k, acc);
        }
        part(i, g, warp_sum(acc));
      }
    }
  }
}

// The warp's rows of a unit: rows r0 + warp, r0 + warp + WARPS, .. below r1, two at a time (a lone last
// row alone), each with `per_row(NR, rows)` choosing the dot_rows call.
template <typename PerRow>
__device__ __forceinline__ void warp_row_pairs(unsigned r0, unsigned r1, PerRow per_row) {
  for (unsigned r = r0 + (threadIdx.x >> 5); r < r1; r += 2 * WARPS) {
    if (r + WARPS < r1) {
      unsigned rows[2] = {r, r + WARPS};
      per_row(rows, 2);
    } else {
      unsigned rows[1] = {r};
      per_row(rows, 1);
    }
  }
}

// A warp's fp8 GEMV as a stream of items (s, g): row sets s = 0 .. ns - 1 of NR (weight wid[i], row
// row_of(s, i)) pairs (a row at or past `lim` is skipped), times the prepared input, k-group g in
// [g0, g1) (item order: s, then g). The loads of item t + 1 (weights and their block scales) are issued
// before the arithmetic of item t (GEMV_PIPE), and item 0's before `prep()`, which prepares the input
// in shared memory and returns it: the first loads overlap the block's norm (weights never depend on
// activations). `part(s, i, g, v)`: the (row, group) partial on every lane of the warp, groups in order.
// ORDER: each (row, group) exactly as dot_rows (lane chunks in order, elements in order, one fma each,
// then the butterfly): the same bits, whichever pipelining.
// ---- The fp8 GEMV's weight stream through a per-warp shared-memory ring (cp.async) ------------------
// Each warp owns `depth` slots after the prepared input (stream_ring_off); a slot holds one item: NR
// rows x one k-group of fp8 weights (lane l's two 16-byte chunks of row i at i * 1,024 + j * 512 + 16 l,
// as in global memory) and their block scales (lane l's at NR * 1,024 + (2 i + j) * 128 + 4 l). A lane
// copies and later reads only its own bytes, so cp.async.wait_group is its only synchronisation.
// Bytes in flight cost no registers.
__device__ __forceinline__ unsigned stream_slot_bytes(unsigned nr) { return nr * (KGROUP + 256); }
// After x (bf16, K), the block-sum / tensor-core floats of two weights and 16 gate totals (as the
// host's smem_bytes lays out gemv_nw(K, 2) + 64), 128-aligned.
__device__ __forceinline__ unsigned stream_ring_off(unsigned K) {
  unsigned red = 2 * ((K + KGROUP - 1) / KGROUP) * WARPS * 16;
  return (((K * 2 + 15) / 16) * 16 + 4 * (red > 8 ? red : 8) + 64 + 127) / 128 * 128;
}
__device__ __forceinline__ unsigned dynamic_smem_bytes() {
  unsigned v;
  asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(v));
  return v;
}
// The ring depth this launch's shared memory holds (at most GEMV_DEPTH; 0: the register path).
__device__ __forceinline__ unsigned stream_depth(unsigned K, unsigned nr) {
  unsigned have = dynamic_smem_bytes(), off = stream_ring_off(K);
  unsigned d = have > off ? (have - off) / (WARPS * stream_slot_bytes(nr)) : 0;
  return min(d, (unsigned)GEMV_DEPTH);
}
__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_addr(dst)), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async4(void* dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(smem_addr(dst)), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
// Waits until at most `pending` (0..3) of this thread's newest groups are still in flight.
__device__ __forceinline__ void cp_async_wait(unsigned pending) {
  switch (pending) {
    case 0: asm volatile("cp.async.wait_group 0;" ::: "memory"); break;
    case 1: asm volatile("cp.async.wait_group 1;" ::: "memory"); break;
    case 2: asm volatile("cp.async.wait_group 2;" ::: "memory"); break;
    default: asm volatile("cp.async.wait_group 3;" ::: "memory"); break;
  }
}
// 8 bytes of shared memory (a generic pointer into it).
__device__ __forceinline__ uint2 lds8(const void* p) {
  uint2 v;
  asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "r"(smem_addr(p)));
  return v;
}
__device__ __forceinline__ float lds_f32(const void* p) {
  float v;
  asm volatile("ld.shared.f32 %0, [%1];" : "=f"(v) : "r"(smem_addr(p)));
  return v;
}
static_assert(GEMV_DEPTH <= 4, "cp_async_wait handles at most 3 pending groups");

// fp8_stream's ring path: items t = 0 .. n - 1 (s = t / ng, g = g0 + t % ng); depth - 1 items are in
// flight before prep() and while item t is computed. The same arithmetic as the register path.
template <int NR, bool BS, typename RowOf, typename Prep, typename Part>
__device__ void fp8_ring(const DevCtx& c, const unsigned short* wid, unsigned n, unsigned ng, unsigned lim, RowOf row_of, Prep prep, unsigned g0, unsigned g1, char* smem, unsigned depth, Part part) {
  unsigned K = c.cols[wid[0]], lane = threadIdx.x & 31, kb = (K + 127) / 128, sb = stream_slot_bytes(NR);
  char* ring = smem + stream_ring_off(K) + (threadIdx.x >> 5) * depth * sb;
  unsigned ls = 0, lg = g0, lslot = 0;  // the next item to copy, and its slot
  auto issue = [&]() {
    char* slot = ring + lslot * sb;
#pragma unroll
    for (int i = 0; i < NR; ++i) {
      unsigned r = row_of(ls, i);
      const unsigned char* wr = (const unsigned char*)c.bufs[wid[i]] + (size_t)r * K;
      const float* sc = c.scales[wid[i]] + (size_t)(r / 128) * kb;
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        unsigned k = lg * KGROUP + lane * 16 + j * 512;
        if (r < lim && k < min(K, (lg + 1) * KGROUP)) {
          cp_async16(slot + i * KGROUP + j * 512 + lane * 16, wr + k);
          cp_async4(slot + NR * KGROUP + (2 * i + j) * 128 + lane * 4, sc + k / 128);
        }
      }
    }
    if (++lg == g1) {
      lg = g0;
      ++ls;
    }
    if (++lslot == depth) lslot = 0;
  };
  // depth - 1 groups before the loop, empty ones included (fewer items than that): item t is always
  // group t, and the loop's wait for depth - 1 pending groups then always covers it.
  unsigned issued = 0;
  for (unsigned d = 0; d + 1 < depth; ++d) {
    if (issued < n) {
      issue();
      ++issued;
    }
    cp_async_commit();
  }
  const unsigned short* xs = prep();
  unsigned s = 0, g = g0, slot = 0;
  for (unsigned t = 0; t < n; ++t) {
    if (issued < n) {
      issue();
      ++issued;
    }
    cp_async_commit();  // (empty past the last item: the count of groups behind item t stays depth - 1)
    cp_async_wait(depth - 1);
    const char* sl = ring + slot * sb;
    float acc[NR];
#pragma unroll
    for (int i = 0; i < NR; ++i) acc[i] = 0.f;
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      unsigned k = g * KGROUP + lane * 16 + j * 512;
      if (k < min(K, (g + 1) * KGROUP)) {
        uint4 v[NR];
        float sc[NR];
#pragma unroll
        for (int i = 0; i < NR; ++i) {
          bool ok = row_of(s, i) < lim;
          v[i] = ok ? lds16(sl + i * KGROUP + j * 512 + lane * 16) : make_uint4(0, 0, 0, 0);
          sc[i] = ok ? lds_f32(sl + NR * KGROUP + (2 * i + j) * 128 + lane * 4) : 0.f;
        }
        chunk_fp8_rows<NR, BS>(v, xs + k, sc, acc);
      }
    }
#pragma unroll
    for (int i = 0; i < NR; ++i) {
      float v = warp_sum(acc[i]);  // every lane, every row (converged)
      if (row_of(s, i) < lim) part(s, i, g, v);
    }
    if (++g == g1) {
      g = g0;
      ++s;
    }
    if (++slot == depth) slot = 0;
  }
}

template <bool B> struct BoolTag { static constexpr bool value = B; };
template <int N> struct IntTag { static constexpr int value = N; };
template <int NR, typename RowOf, typename Prep, typename Part>
__device__ void fp8_stream(const DevCtx& c, const unsigned short* wid, unsigned ns, unsigned lim, RowOf row_of, Prep prep, unsigned g0, unsigned g1, char* smem, Part part) {
  unsigned K = c.cols[wid[0]], lane = threadIdx.x & 31, kb = (K + 127) / 128, ng = g1 - g0, n = ns * ng;
  unsigned depth = stream_depth(K, NR);
  bool all_bs = true;
#pragma unroll
  for (int i = 0; i < NR; ++i) all_bs = all_bs && c.wbytes[wid[i]] == 1;
  if (depth > 0) {
    if (all_bs) fp8_ring<NR, true>(c, wid, n, ng, lim, row_of, prep, g0, g1, smem, depth, part);
    else fp8_ring<NR, false>(c, wid, n, ng, lim, row_of, prep, g0, g1, smem, depth, part);
    return;
  }
  struct Item {
    uint4 v[2][NR];
    float sc[2][NR];
  };
  unsigned ls = 0, lg = g0, lt = 0;  // the next item to load (set, group; index)
  // L2_AHEAD: items lt + 1 .. lt + L2_AHEAD are asked of L2 when item lt is loaded (item pt next).
  unsigned pt = 1, ps = g0 + 1 == g1 ? 1 : 0, pg = g0 + 1 == g1 ? g0 : g0 + 1;
  const unsigned pi = lane >> 3;  // the row (of NR) whose lines this lane prefetches
  const unsigned char* pb = (const unsigned char*)c.bufs[wid[0]];
#pragma unroll
  for (int i = 1; i < NR; ++i) pb = pi == (unsigned)i ? (const unsigned char*)c.bufs[wid[i]] : pb;  // (no dynamic register index)
  auto load = [&](Item& it) {
    if (L2_AHEAD) {
      for (; pt <= lt + L2_AHEAD && pt < n; ++pt) {
        unsigned r = row_of(ps, pi);
        if (pi < NR && r < lim) prefetch_line_l2(pb + (size_t)r * K, pg, K);
        if (++pg == g1) {
          pg = g0;
          ++ps;
        }
      }
      ++lt;
    }
#pragma unroll
    for (int i = 0; i < NR; ++i) {
      unsigned r = row_of(ls, i);
      const unsigned char* wr = (const unsigned char*)c.bufs[wid[i]] + (size_t)r * K;
      const float* sc = c.scales[wid[i]] + (size_t)(r / 128) * kb;
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        unsigned k = lg * KGROUP + lane * 16 + j * 512;
        bool ok = r < lim && k < min(K, (lg + 1) * KGROUP);
        it.v[j][i] = ok ? ldw(wr + k) : make_uint4(0, 0, 0, 0);
        it.sc[j][i] = ok ? sc[k / 128] : 0.f;
      }
    }
    if (++lg == g1) {
      lg = g0;
      ++ls;
    }
  };
  Item cur, nxt;
  if (n) load(cur);
  const unsigned short* xs = prep();
  auto items = [&](auto bs_tag) {
    constexpr bool BS = decltype(bs_tag)::value;
    unsigned s = 0, g = g0;
    for (unsigned t = 0; t < n; ++t) {
      if (GEMV_PIPE && t + 1 < n) load(nxt);
      float acc[NR];
#pragma unroll
      for (int i = 0; i < NR; ++i) acc[i] = 0.f;
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        unsigned k = g * KGROUP + lane * 16 + j * 512;
        if (k < min(K, (g + 1) * KGROUP)) chunk_fp8_rows<NR, BS>(cur.v[j], xs + k, cur.sc[j], acc);
      }
#pragma unroll
      for (int i = 0; i < NR; ++i) {
        float v = warp_sum(acc[i]);  // every lane, every row (converged: no collective emulation)
        if (row_of(s, i) < lim) part(s, i, g, v);
      }
      if (++g == g1) {
        g = g0;
        ++s;
      }
      if (GEMV_PIPE) cur = nxt;
      else if (t + 1 < n) load(cur);
    }
  };
  if (all_bs) items(BoolTag<true>());
  else items(BoolTag<false>());
}

// Row sets of a warp over rows [r0, r1) with `step` rows between its sets: r0 + warp + step * s < r1.
__device__ __forceinline__ unsigned warp_sets(unsigned r0, unsigned r1, unsigned step) {
  unsigned first = r0 + (threadIdx.x >> 5);
  return first < r1 ? (r1 - first + step - 1) / step : 0;
}

// The rows and k-groups of unit u of a GEMV word.
struct GemvSpan { unsigned r0, r1, g0, g1; };
__device__ __forceinline__ GemvSpan gemv_span(const Word& w, unsigned u, unsigned K) {
  unsigned kp = u % w.k_parts, rs = u / w.k_parts;
  unsigned groups = (K + KGROUP - 1) / KGROUP;
  GemvSpan s;
  s.r0 = rs * w.unit_rows;
  s.r1 = min(w.rows, s.r0 + w.unit_rows);
  s.g0 = kp * groups / w.k_parts;
  s.g1 = (kp + 1) * groups / w.k_parts;
  return s;
}

// ---- fp8 GEMV on tensor cores (seed 4.3) --------------------------------------------------------
// The pair as the oracle's bf16(e4m3 * scale): with a bf16-exact scale below 2^8 (`s2` = scale * 2^120
// in both halves) one fma.rn.bf16x2 rounds the exact product once; otherwise (fp32 scales) the CPU's
// fp32 product then bf16.
__device__ __forceinline__ unsigned dequant2(unsigned pair, bool bf16_scale, unsigned s2, float scale) {
  if (bf16_scale) return bf16x2_fma(pair, s2, 0x80008000u);
  float lo = bf(lo_bf(pair) * 0x1p120f * scale), hi = bf(hi_bf(pair) * 0x1p120f * scale);
  return (__float_as_uint(lo) >> 16) | (__float_as_uint(hi) & 0xffff0000u);
}

__device__ __forceinline__ void mma_bf16_16816(float* d, unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0, unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Shared floats the tensor-core GEMV of a unit needs for NW weights of width K.
__host__ __device__ constexpr unsigned mma_red_floats(unsigned nw, unsigned K) { return nw * ((K + KGROUP - 1) / KGROUP) * WARPS * 16; }

// N chunks' mma chains at once (mma_chunk's arguments per chunk, `nh` real halves each), interleaved:
// each chain's mma sequence, and so its bits, is the one chunk's alone; the later chunks' loads and
// dequants overlap the earlier ones' mma latency (RING_TC's consumers: TC_PAIR, TC_WHOLE).
template <bool BS, int N>
__device__ __forceinline__ void mma_chunks(const uint4 (&v)[N][2][2], unsigned nh, const unsigned short* const (&xh)[N], const float (&scale)[N], float (&d)[N][4]) {
  unsigned s2[N];
#pragma unroll
  for (int i = 0; i < N; ++i) s2[i] = bf16_scale_pair(scale[i]);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if ((unsigned)h >= nh) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int i = 0; i < N; ++i) {
        const unsigned wa = j == 0 ? v[i][h][0].x : j == 1 ? v[i][h][0].y : j == 2 ? v[i][h][0].z : v[i][h][0].w;
        const unsigned wb = j == 0 ? v[i][h][1].x : j == 1 ? v[i][h][1].y : j == 2 ? v[i][h][1].z : v[i][h][1].w;
        unsigned a0 = dequant2(e4m3x2_widen(wa, 0x9180), BS, s2[i], scale[i]);
        unsigned a1 = dequant2(e4m3x2_widen(wb, 0x9180), BS, s2[i], scale[i]);
        unsigned a2 = dequant2(e4m3x2_widen(wa, 0xB3A2), BS, s2[i], scale[i]);
        unsigned a3 = dequant2(e4m3x2_widen(wb, 0xB3A2), BS, s2[i], scale[i]);
        uint2 xb = lds8(xh[i] + 64 * h + 4 * j);  // x[16 t + 4j ..+4): B's two registers
#ifdef MK_BREAK_GEMV  // negative control for `mk gpu ops`: B's halves swapped, wrong k pairing
        mma_bf16_16816(d[i], a0, a1, a2, a3, xb.y, xb.x);
#else
        mma_bf16_16816(d[i], a0, a1, a2, a3, xb.x, xb.y);
#endif
      }
  }
}

// A warp's 128-wide chunk of 16 rows on tensor cores (lane (q, t): v[h][0] / v[h][1] the 16 bytes of row q
// / q + 8 at 64 h + 16 t of the chunk), its `nh` real 64-wide halves (0..2) in order, into d (mma's fixed
// accumulation); `xh` = x at the chunk's start + 16 t (shared memory). mma j of a half takes the lanes'
// bytes 4j..4j+3 with x[16 t + 4j ..+4) as B. The one arithmetic of mma_unit_bs and the ring's
// tensor-core consumers (RING_TC): the same bits wherever the bytes come from.
template <bool BS>
__device__ __forceinline__ void mma_chunk(const uint4 (&v)[2][2], unsigned nh, const unsigned short* xh, float scale, float* d) {
  const unsigned short* const xs1[1] = {xh};
  const float sc1[1] = {scale};
  mma_chunks<BS, 1>(reinterpret_cast<const uint4(&)[1][2][2]>(v), nh, xs1, sc1, reinterpret_cast<float(&)[1][4]>(*d));
}

// One item of the tensor-core stream: a warp's 16 rows x 128-wide chunk of one weight (lane (q, t): 16
// bytes of row q and of row q + 8 at k0 + 16 t and k0 + 64 + 16 t) and the chunk's block scale.
struct TcItem {
  uint4 v[2][2];  // [64-wide half][row q, row q + 8]
  float scale;
};

// The unit's rows [r0, r0 + 16) (those below r1 are real) of NW fp8 weights of width K (a multiple of
// 64) times the prepared bf16 input, per k-group over [g0, g1), on tensor cores (mma m16n8k16, bf16 in,
// fp32 accumulate; seed 4.3). Warp w owns the 128-wide chunk w of every k-group (8 warps x 128 = one
// group of 1,024): its items are (weight i, group g), g-major. An item's 64-wide half: lane (q = lane / 4,
// t = lane % 4) holds 16 bytes of row q and of row q + 8 at k = 16 t, straight from checkpoint row order;
// mma j (0..3) takes their bytes 4j..4j+3 with x[16 t + 4j ..+4) as B: a fixed permutation of k inside
// the half, the same for A and B, so the product is the dot product (every column of B is x, each of the
// 8 output columns is the result). The weights are dequantised as dot_rows does (the oracle's
// bf16(e4m3 * scale), dequant2), so only the summation order differs from the CUDA-core path.
// ORDER: per (weight, group, row) the tensor core's fixed accumulation over the chunk's two halves in
// order, then the 8 warps' chunk sums in warp order (shared `red`); `part(i, row, g, v)` is called by
// thread i * 16 + row - r0 for groups in order. Bits do not depend on which block runs the unit.
// Memory-level parallelism: AHEAD items' loads (64 bytes a lane each) are in flight while one is
// computed. `prep()` prepares the input in shared memory and returns it.
template <int NW, int AHEAD, bool BS, typename Prep, typename Part>
__device__ void mma_unit_bs(const DevCtx& c, const unsigned short* wid, unsigned r0, unsigned r1, Prep prep, unsigned g0, unsigned g1, Part part) {
  unsigned K = c.cols[wid[0]], lane = threadIdx.x & 31, warp = threadIdx.x >> 5, q = lane >> 2, t = lane & 3;
  unsigned ng = g1 - g0, kb = (K + 127) / 128, n = NW * ng;
  const unsigned char* wr[NW];  // row q's bytes at 16 t (row q + 8's are 8 K further)
  const float* sc[NW];
  bool ok0 = r0 + q < r1, ok1 = r0 + q + 8 < r1;
#pragma unroll
  for (int i = 0; i < NW; ++i) {
    wr[i] = (const unsigned char*)c.bufs[wid[i]] + (size_t)(r0 + q) * K + 16 * t;
    sc[i] = c.scales[wid[i]] + (size_t)(r0 / 128) * kb;
  }
  // Item tt: weight tt % NW, group g0 + tt / NW; its chunk starts at k0 (halves below kend are real).
  auto k0_of = [&](unsigned tt) { return (g0 + tt / NW) * KGROUP + warp * 128; };
  auto kend_of = [&](unsigned tt) { return min(K, (g0 + tt / NW + 1) * KGROUP); };
  auto load = [&](TcItem& it, unsigned tt) {
    unsigned i = tt % NW, k0 = k0_of(tt), kend = kend_of(tt);
    const unsigned char* p0 = wr[0];
    const float* s = sc[0];
#pragma unroll
    for (int j = 1; j < NW; ++j)
      if (i == (unsigned)j) {  // (no dynamic register index)
        p0 = wr[j];
        s = sc[j];
      }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      bool ok = k0 + 64 * h < kend;
      it.v[h][0] = ok && ok0 ? ldw(p0 + k0 + 64 * h) : make_uint4(0, 0, 0, 0);
      it.v[h][1] = ok && ok1 ? ldw(p0 + (size_t)8 * K + k0 + 64 * h) : make_uint4(0, 0, 0, 0);
    }
    it.scale = k0 < kend ? s[k0 / 128] : 0.f;
  };
  auto compute = [&](const TcItem& it, unsigned tt, const unsigned short* xs, float* red) {
    unsigned i = tt % NW, k0 = k0_of(tt), kend = kend_of(tt);
    float d[4] = {0.f, 0.f, 0.f, 0.f};
    mma_chunk<BS>(it.v, k0 < kend ? min(2u, (kend - k0) / 64) : 0u, xs + k0 + 16 * t, it.scale, d);
    if (t == 0) {
      float* rr = red + ((size_t)(i * ng + tt / NW) * WARPS + warp) * 16;
      rr[q] = d[0];
      rr[q + 8] = d[2];
    }
  };
  // (prep() first: its loads and the items' together cost more registers than the overlap is worth; a
  // block prepares the input only on its first unit of a word.)
  const unsigned short* xs = prep();
  float* red = (float*)((char*)xs + ((K * 2 + 15) / 16) * 16);
  TcItem buf[AHEAD + 1];
#pragma unroll
  for (int j = 0; j < AHEAD; ++j)
    if ((unsigned)j < n) load(buf[j], j);
  for (unsigned base = 0; base < n; base += AHEAD + 1) {
#pragma unroll
    for (int j = 0; j <= AHEAD; ++j) {
      unsigned tt = base + j;
      if (tt + AHEAD < n) load(buf[(j + AHEAD) % (AHEAD + 1)], tt + AHEAD);
      if (tt < n) compute(buf[j], tt, xs, red);
    }
  }
  __syncthreads();
  // The 8 warps' sums of each (weight, group, row), in warp order, into warp 0's slot (its own thread
  // reads all 8 first), then each (weight, row) thread hands its groups out in order.
  for (unsigned e = threadIdx.x; e < NW * ng * 16; e += THREADS) {
    float* rr = red + (size_t)(e / 16) * WARPS * 16 + e % 16;
    float v = 0.f;
#pragma unroll
    for (int k = 0; k < WARPS; ++k) v += rr[k * 16];  // ORDER: warps in order
    rr[0] = v;
  }
  __syncthreads();
  unsigned me = threadIdx.x;
  if (me < NW * 16) {
    unsigned i = me / 16, row = me % 16;
    if (r0 + row < r1)
      for (unsigned g = g0; g < g1; ++g) part(i, r0 + row, g, red[(size_t)(i * ng + (g - g0)) * WARPS * 16 + row]);
  }
  __syncthreads();
}

// mma_unit_bs with every weight's scales bf16-exact (BS: one fma.rn.bf16x2 per pair) or not.
template <int NW, int AHEAD, typename Prep, typename Part>
__device__ void mma_unit_fp8(const DevCtx& c, const unsigned short* wid, unsigned r0, unsigned r1, Prep prep, unsigned g0, unsigned g1, Part part) {
  bool all_bs = true;
#pragma unroll
  for (int i = 0; i < NW; ++i) all_bs = all_bs && c.wbytes[wid[i]] == 1;
  if (all_bs) mma_unit_bs<NW, AHEAD, true>(c, wid, r0, r1, prep, g0, g1, part);
  else mma_unit_bs<NW, AHEAD, false>(c, wid, r0, r1, prep, g0, g1, part);
}

// Whether a weight takes the tensor-core path (fp8, width a multiple of 64 and the unit 16 rows) when
// GEMV_MMA is on. Off by default: the first version (loads then arithmetic, no pipeline) measured 21.5
// against 17.6 ms/token (results/perf3_log); this pipelined one ties the graph at MMA_AHEAD=1 (12.43
// against 12.41: the GEMVs are not issue-bound), spills at 2 and 3, and costs the megakernel 8 ms a
// step in its per-unit block joins (22.2 against 14.0; results/mma_9f4c3b0).
__device__ __forceinline__ bool mma_path(const DevCtx& c, unsigned short wid, const Word& w) {
  unsigned char wb = c.wbytes[wid];
  return GEMV_MMA && (wb == 1 || wb == 3) && c.cols[wid] % 64 == 0 && w.unit_rows == 16;
}

__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}

// ---- GEMV weights through a shared-memory ring (GEMV_TMA) -------------------------------------------
// A unit's rows are streamed k-group by k-group (16 rows x 1,024 columns per weight, one bulk copy
// per row: rows are K apart in memory) into TMA_DEPTH slots, each with an mbarrier that completes when
// its bytes have landed; the warps compute a group from shared memory exactly as dot_rows does from
// global memory (same chunks, same order: the same bits), then the slot is refilled with the group
// TMA_DEPTH ahead. Bytes in flight cost no registers. (As HazyResearch's megakernels and the H200
// probe 5 stream weights; no code of theirs is used.)
__device__ __forceinline__ void mbar_init(unsigned long long* b) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(b)) : "memory");
}
__device__ __forceinline__ void mbar_inval(unsigned long long* b) {
  asm volatile("mbarrier.inval.shared::cta.b64 [%0];" ::"r"(smem_addr(b)) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(unsigned long long* b, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(b)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void bulk_to_shared(void* dst, const void* src, unsigned bytes, unsigned long long* b) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
               ::"r"(smem_addr(dst)), "l"(src), "r"(bytes), "r"(smem_addr(b)) : "memory");
}
__device__ __forceinline__ bool mbar_try(unsigned long long* b, unsigned parity) {
  unsigned ok;
  asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
               : "=r"(ok) : "r"(smem_addr(b)), "r"(parity) : "memory");
  return ok;
}
// Waits for the slot's phase; a copy that never lands (a bug) traps after 2 s instead of hanging.
__device__ __forceinline__ void mbar_wait(unsigned long long* b, unsigned parity) {
  if (mbar_try(b, parity)) return;
  unsigned long long t0 = global_ns();
  while (!mbar_try(b, parity))
    if (global_ns() - t0 > 2000000000ull) __trap();
}

// Byte offset of the ring in a GEMV's shared memory (after x and the sums; the host's smem_bytes adds
// TMA_DEPTH slots of NW x 16 x 1,024 elements and TMA_DEPTH 8-byte barriers after it).
__device__ __forceinline__ unsigned tma_ring_off(unsigned K, unsigned nw) {
  unsigned red = nw * ((K + KGROUP - 1) / KGROUP) * WARPS * 16;
  return (((K * 2 + 15) / 16) * 16 + 4 * ((red > 8 ? red : 8) + 16) + 127) / 128 * 128;
}

// The unit's rows [r0, r1) (at most 16) of NW weights (all fp8 or all bf16, width K) times xs over
// groups [g0, g1) through the ring. `part(i, j, g, v)`: weight i, row r0 + j, group g, the group's
// partial v (every lane of the warp that owns row j: warp w owns rows w and w + 8).
template <int NW, typename Part>
__device__ void tma_unit(const DevCtx& c, const unsigned short* wid, unsigned r0, unsigned r1, const unsigned short* xs, unsigned g0, unsigned g1, char* smem, Part part) {
  unsigned K = c.cols[wid[0]], lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  unsigned char wb = c.wbytes[wid[0]];
  bool fp8 = wb == 1 || wb == 3;
  unsigned eb = fp8 ? 1 : 2, nrows = min(16u, r1 - r0), slot_bytes = NW * 16 * KGROUP * eb;
  char* ring = smem + tma_ring_off(K, NW);
  unsigned long long* bar = (unsigned long long*)(ring + TMA_DEPTH * slot_bytes);
  if (threadIdx.x == 0) {
    for (int d = 0; d < TMA_DEPTH; ++d) mbar_init(&bar[d]);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  // Earlier generic writes to this shared memory (other ops, earlier units) before the async copies.
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  auto issue = [&](unsigned g) {  // thread 0
    unsigned slot = (g - g0) % TMA_DEPTH, k0 = g * KGROUP, width = min(K, k0 + KGROUP) - k0;
    mbar_expect_tx(&bar[slot], NW * nrows * width * eb);
    for (int i = 0; i < NW; ++i)
      for (unsigned j = 0; j < nrows; ++j)
        bulk_to_shared(ring + slot * slot_bytes + (i * 16 + j) * KGROUP * eb,
                       (const char*)c.bufs[wid[i]] + ((size_t)(r0 + j) * K + k0) * eb, width * eb, &bar[slot]);
  };
  if (threadIdx.x == 0)
    for (unsigned g = g0; g < min(g1, g0 + TMA_DEPTH); ++g) issue(g);
  const float* sc[NW];
  bool bs[NW];
  for (int i = 0; i < NW; ++i) {
    sc[i] = fp8 ? c.scales[wid[i]] + (size_t)(r0 / 128) * ((K + 127) / 128) : nullptr;
    bs[i] = c.wbytes[wid[i]] == 1;
  }
  for (unsigned g = g0; g < g1; ++g) {
    unsigned q = g - g0, slot = q % TMA_DEPTH, k0 = g * KGROUP, k1 = min(K, k0 + KGROUP);
    mbar_wait(&bar[slot], (q / TMA_DEPTH) & 1);
    const char* base = ring + slot * slot_bytes;
    for (unsigned j = warp; j < nrows; j += WARPS)
#pragma unroll
      for (int i = 0; i < NW; ++i) {
        const char* row = base + (i * 16 + j) * KGROUP * eb;
        float acc = 0.f;
        if (fp8) {
#pragma unroll
          for (int jj = 0; jj < 2; ++jj) {
            unsigned k = k0 + lane * 16 + jj * 512;
            if (k < k1) acc = chunk_fp8(*(const uint4*)(row + (k - k0)), xs + k, sc[i][k / 128], bs[i], acc);
          }
        } else {
#pragma unroll
          for (int jj = 0; jj < 4; ++jj) {
            unsigned k = k0 + lane * 8 + jj * 256;
            if (k < k1) acc = chunk_bf16(*(const uint4*)(row + 2 * (k - k0)), xs + k, acc);
          }
        }
        part(i, j, g, warp_sum(acc));
      }
    __syncthreads();  // every warp is done with the slot
    if (threadIdx.x == 0 && g + TMA_DEPTH < g1) issue(g + TMA_DEPTH);
  }
  if (threadIdx.x == 0)
    for (int d = 0; d < TMA_DEPTH; ++d) mbar_inval(&bar[d]);
  __syncthreads();
}

// Whether a GEMV unit streams its weights through the ring: the 16-row words (not the lm_head's
// 64-row units: a group of them would not fit the ring; bf16, it reaches 90 % with direct loads).
__device__ __forceinline__ bool tma_path(const Word& w) { return GEMV_TMA && w.unit_rows == 16; }

// Asks L2 for the weight bytes unit u of GEMV word w will read (nothing for other opcodes): the
// span's rows of W0 (and W1 for gate/up), whole rows when the word is not split (one contiguous
// range), else each row's k-groups; pieces of at most PREFETCH_PIECE bytes, one per thread in turn.
// A hint only (cp.async.bulk.prefetch.L2): it changes no value.
#define PREFETCH_PIECE 16384u
__device__ __forceinline__ void bulk_prefetch_l2(const void* p, unsigned bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
}
__device__ __noinline__ void prefetch_unit(const DevCtx& c, const Word& w, unsigned u) {  // (out of line: its registers are not the callers')
  unsigned nw;
  switch (w.opcode) {
    case OP_GEMV_GATE_UP: nw = 2; break;
    case OP_GEMV_NORM:
    case OP_GEMV_GATED_NORM_RESIDUAL:
    case OP_GEMV_RESIDUAL:
    case OP_LM_HEAD: nw = 1; break;
    default: return;
  }
  for (unsigned i = 0; i < nw; ++i) {
    unsigned short wid = w.ops[SLOT_W0 + i];
    unsigned K = c.cols[wid], eb = c.wbytes[wid] == 2 ? 2u : 1u;
    const char* base = (const char*)c.bufs[wid];
    GemvSpan s = gemv_span(w, u, K);
    // Byte ranges widened to 16-byte alignment (the bulk prefetch's unit; buffers start 256-aligned,
    // so a widened range stays inside the arena).
    auto range = [&](size_t a, size_t b, unsigned t, unsigned step) {
      a &= ~(size_t)15;
      b = (b + 15) & ~(size_t)15;
      if (PREFETCH_LINES) {
        for (size_t p = a + (size_t)t * 128; p < b; p += (size_t)step * 128)
          asm volatile("prefetch.global.L2 [%0];" ::"l"(base + p));
      } else {
        for (size_t p = a + (size_t)t * PREFETCH_PIECE; p < b; p += (size_t)step * PREFETCH_PIECE)
          bulk_prefetch_l2(base + p, (unsigned)min((size_t)PREFETCH_PIECE, b - p));
      }
    };
    if (w.k_parts == 1 && !PREFETCH_GROUPS) {  // rows r0 .. r1: one range
      range((size_t)s.r0 * K * eb, (size_t)s.r1 * K * eb, threadIdx.x, THREADS);
    } else {  // each row's k-groups (the first PREFETCH_GROUPS of them), a thread per row
      unsigned k0 = s.g0 * KGROUP, k1 = min(K, (PREFETCH_GROUPS ? min(s.g1, s.g0 + PREFETCH_GROUPS) : s.g1) * KGROUP);
      for (unsigned r = s.r0 + threadIdx.x; r < s.r1; r += THREADS) range(((size_t)r * K + k0) * eb, ((size_t)r * K + k1) * eb, 0, 1);
    }
  }
}

// For each row of the span (a warp per row, two rows at a time: rows r0 + warp + 16 s and that + 8):
// the per-group sums, either stored as split-K partials [g][rows] (FLAG_PARTIAL) or summed in group
// order and handed to `epilogue(row, value)` by lane 0. `prep()` prepares the input (every thread calls
// it once) and returns it; with STREAM, fp8 weights issue their first loads before it (fp8_stream).
template <bool STREAM, typename Prep, typename Epi>
__device__ void gemv_rows(const DevCtx& c, const Word& w, unsigned u, unsigned short wid, char* smem, Prep prep, Epi epilogue) {
  unsigned K = c.cols[wid];
  GemvSpan s = gemv_span(w, u, K);
  unsigned lane = threadIdx.x & 31;
  bool partial = w.flags & FLAG_PARTIAL;
  float* out = B<float>(c, w.ops[SLOT_OUT0]);
  unsigned short wids[2] = {wid, wid};
  unsigned char wb = c.wbytes[wid];
  if (tma_path(w)) {
    const unsigned short* xs = prep();
    float t0 = 0.f, t1 = 0.f;  // the warp's rows warp and warp + 8 (scalars: no local memory)
    tma_unit<1>(c, wids, s.r0, s.r1, xs, s.g0, s.g1, (char*)xs, [&](int, unsigned j, unsigned g, float v) {
      if (partial) {
        if (lane == 0) out[(size_t)g * w.rows + s.r0 + j] = v;
      } else if (j < WARPS) {
        t0 += v;  // ORDER: k-groups in order
      } else {
        t1 += v;
      }
    });
    if (!partial && lane == 0)
      for (unsigned j = threadIdx.x >> 5; j < s.r1 - s.r0; j += WARPS) epilogue(s.r0 + j, j < WARPS ? t0 : t1);
    return;
  }
  if (mma_path(c, wid, w)) {
    float total = 0.f;
    mma_unit_fp8<1, STREAM ? MMA_AHEAD : MEGA_MMA_AHEAD>(c, wids, s.r0, s.r1, prep, s.g0, s.g1, [&](int, unsigned r, unsigned g, float v) {
      if (partial) out[(size_t)g * w.rows + r] = v;
      else total += v;  // ORDER: k-groups in order
      if (!partial && g + 1 == s.g1) epilogue(r, total);
    });
    return;
  }
  // fp8 rows through fp8_stream, NR rows a warp at a time (row r0 + warp + 8 (NR s + i)): two in the
  // discrete kernels; one in the megakernel with MEGA_STREAM_NR1 (half the registers). The same bits.
  auto stream = [&](auto nr_tag) {
    constexpr int NR = decltype(nr_tag)::value;
    float total[NR] = {};  // (set from the first group on; zeroed only to quiet the compiler)
    auto row_of = [&](unsigned set, int i) { return s.r0 + (threadIdx.x >> 5) + NR * WARPS * set + WARPS * i; };
    fp8_stream<NR>(c, wids, warp_sets(s.r0, s.r1, NR * WARPS), s.r1, row_of, prep, s.g0, s.g1, smem, [&](unsigned set, int i, unsigned g, float v) {
      if (partial) {
        if (lane == 0) out[(size_t)g * w.rows + row_of(set, i)] = v;
        return;
      }
      total[i] = (g == s.g0 ? 0.f : total[i]) + v;  // ORDER: k-groups in order, from 0 as dot_rows' callers
      if (g + 1 == s.g1 && lane == 0) epilogue(row_of(set, i), total[i]);
    });
  };
  if (STREAM && (wb == 1 || wb == 3)) {
    stream(IntTag<2>());
    return;
  }
  if (!STREAM && MEGA_STREAM_NR1 && (wb == 1 || wb == 3)) {
    stream(IntTag<1>());
    return;
  }
  const unsigned short* xs = prep();
  warp_row_pairs(s.r0, s.r1, [&](const unsigned* rows, int n) {
    float total[2] = {0.f, 0.f};
    auto part = [&](int i, unsigned g, float v) {
      if (partial) {
        if (lane == 0) out[(size_t)g * w.rows + rows[i]] = v;
      } else {
        total[i] += v;  // ORDER: k-groups in order
      }
    };
    if (n == 2) dot_rows<2>(c, wids, rows, xs, s.g0, s.g1, part);
    else dot_rows<1>(c, wids, rows, xs, s.g0, s.g1, part);
    if (!partial && lane == 0)
      for (int i = 0; i < n; ++i) epilogue(rows[i], total[i]);
  });
}

// The split-K reduce of one unit: y[r] = bf(sum_g partial[g][r]), or with the residual add
// h[r] = bf(h[r] + bf(sum)). ORDER: groups in index order (the same as the CPU's row dot product).
__device__ void reduce_rows(const DevCtx& c, const Word& w, unsigned u, bool residual) {
  const float* p = B<float>(c, w.ops[SLOT_IN0]);
  unsigned short* y = B<unsigned short>(c, w.ops[SLOT_OUT0]);
  unsigned r0 = u * w.unit_rows, r1 = min(w.rows, r0 + w.unit_rows);
  for (unsigned r = r0 + threadIdx.x; r < r1; r += THREADS) {
    float s = 0.f;
    for (unsigned g = 0; g < w.arg0; ++g) s += p[(size_t)g * w.rows + r];
    y[r] = residual ? f2bf(bf2f(y[r]) + bf(s)) : f2bf(s);
  }
}
