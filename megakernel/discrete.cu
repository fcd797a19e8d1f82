// The discrete path: one thin kernel per opcode. A launch covers `nw` consecutive words of one stage
// with the same opcode (no ordering between them: the validator proves them race-free); block b runs
// the b-th unit counted across those words. `fresh` (the ops' last argument) is false only when the
// block's previous unit was of the same word, so that a GEMV may keep its prepared input. The megakernel calls the same op_* device functions, so
// the arithmetic of a unit is the same.
// With `rev` (the GEMV kernels) the launch's words are taken last first: a GDN layer's norm-folded
// projections share a launch as [qkv, z, b, a], and the b / a units (bf16, twice the bytes of the
// others) would otherwise be its last tickets, a tail. Which block runs a unit changes no bits.
__device__ __forceinline__ unsigned launch_word_at(const Word* prog, unsigned wi, unsigned nw, unsigned* u, unsigned i, bool rev = false) {
  auto at = [&](unsigned k) { return rev ? wi + nw - 1 - k : wi + k; };  // the k-th word handed out
  unsigned k = 0;
  *u = i;
  while (k + 1 < nw && *u >= prog[at(k)].units) *u -= prog[at(k++)].units;
  return at(k);
}
// The GEMV kernels run several units a block (the host launches fewer blocks than units, all
// co-resident); a GEMV's prepared input (normed x in shared memory) is then computed once per block and
// word, not once per unit. The block joins its warps between units.
// Programmatic dependent launch: the wait for the predecessor kernel (a no-op in a launch without the
// attribute) and the signal that lets the successor launch, given once this kernel's own wait is over.
__device__ __forceinline__ void pdl_join() {
  asm volatile("griddepcontrol.wait;\n\tgriddepcontrol.launch_dependents;" ::: "memory");
}
// GRAPH_STAMPS: the graph's timeline, in the megakernel's format (four u64 per unit at
// unit_base[word] + unit: word << 48 | SM << 32 | unit, then %globaltimer when the block started the unit
// (its first: when the block started), when its wait for the predecessor kernel was over, and when
// every warp was done). Thread 0, after a barrier. Off (0) by default: the default graph has no stamp.
__device__ __forceinline__ unsigned long long stamp_now() { return GRAPH_STAMPS ? global_ns() : 0ull; }
__device__ __forceinline__ void graph_stamp(const DevCtx& c, unsigned word, unsigned u, unsigned long long t_start, unsigned long long t_ready) {
  if (!GRAPH_STAMPS || c.stamps == nullptr || threadIdx.x != 0) return;
  unsigned sm;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
  unsigned long long* e = c.stamps + 4 * (size_t)(c.unit_base[word] + u);
  e[0] = ((unsigned long long)word << 48) | ((unsigned long long)sm << 32) | u;
  e[1] = t_start;
  e[2] = t_ready;
  e[3] = global_ns();
}
#define K_OP(name)                                                                                   \
  extern "C" __global__ void __launch_bounds__(THREADS) k_##name(const Word* prog, unsigned wi, unsigned nw, DevCtx c) { \
    extern __shared__ __align__(16) char smem[];                                                     \
    unsigned long long t_start = stamp_now();                                                        \
    pdl_join();                                                                                      \
    unsigned long long t_ready = stamp_now();                                                        \
    if (stopped(c)) return;                                                                          \
    unsigned u;                                                                                      \
    unsigned wx = launch_word_at(prog, wi, nw, &u, blockIdx.x);                                      \
    for_rows(c, prog[wx], u, [&](const DevCtx& r, bool, unsigned ru) { op_##name(r, prog[wx], ru, smem, true); }); \
    if (GRAPH_STAMPS) {                                                                              \
      __syncthreads();                                                                               \
      graph_stamp(c, wx, u, t_start, t_ready);                                                       \
    }                                                                                                \
  }
// The GEMV kernels: a block runs several units (only they loop: the others' code, the GDN step's
// register column above all, stays one unit a block): its first is unit blockIdx.x and each next one a
// ticket (an integer atomic on the launch's pair in c.tickets, taken at the start of a unit so that its
// latency hides behind the unit), gridDim.x + ticket; the block that finishes last zeroes the pair for
// the next launch (every block counts itself finished after its ticket past the end, so no ticket is
// taken after that). A unit's bits do not depend on which block runs it.
#define K_GEMV(name, MIN_BLOCKS)                                                                     \
  extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS) k_##name(const Word* prog, unsigned wi, unsigned nw, DevCtx c) { \
    extern __shared__ __align__(16) char smem[];                                                     \
    unsigned long long t_start = stamp_now();                                                        \
    pdl_join();                                                                                      \
    unsigned long long t_ready = stamp_now();                                                        \
    if (stopped(c)) return;                                                                          \
    __shared__ unsigned next_s[2];                                                                   \
    unsigned* tk = c.tickets + 2 * wi;                                                               \
    unsigned total = 0, last = 0xffffffffu, parity = 0;                                              \
    for (unsigned k = 0; k < nw; ++k) total += prog[wi + k].units;                                   \
    for (unsigned i = blockIdx.x; i < total;) {                                                      \
      unsigned nxt = 0;                                                                              \
      if (threadIdx.x == 0) nxt = gridDim.x + atomicAdd(tk, 1u);                                     \
      unsigned u;                                                                                    \
      unsigned wx = launch_word_at(prog, wi, nw, &u, i, true);                                       \
      Word w = prog[wx];                                                                             \
      unsigned here = i - u; /* the word's first unit index in the launch: identifies the word */    \
      /* A unit of another word prepares its input over the shared memory the warps still read. */   \
      __syncthreads();                                                                               \
      for_rows(c, w, u, [&](const DevCtx& r, bool row, unsigned ru) { op_##name(r, w, ru, smem, row || here != last); }); \
      last = here;                                                                                   \
      /* double-buffered: the slot written here was last read before the barrier above */            \
      if (threadIdx.x == 0) next_s[parity] = nxt;                                                    \
      __syncthreads();                                                                               \
      nxt = next_s[parity];                                                                          \
      parity ^= 1u;                                                                                  \
      if (GRAPH_STAMPS) { /* every warp done (the barrier above) */                                  \
        graph_stamp(c, wx, u, t_start, t_ready);                                                     \
        t_start = t_ready = stamp_now();                                                             \
      }                                                                                              \
      i = nxt;                                                                                       \
    }                                                                                                \
    /* (the block's last ticket is ordered before its finished count by the ticket's returned value, */ \
    /* read before the count; a fence there measured slower: docs/notebook/gemv.md) */               \
    if (threadIdx.x == 0 && atomicAdd(tk + 1, 1u) == gridDim.x - 1) {                                \
      tk[0] = 0;                                                                                     \
      tk[1] = 0;                                                                                     \
    }                                                                                                \
  }
K_OP(embed)
K_GEMV(gemv_norm, GEMV_MIN_BLOCKS)
K_GEMV(gemv_gate_up, GEMV_MIN_BLOCKS)
K_GEMV(gemv_residual, GEMV_MIN_BLOCKS)
K_OP(reduce_store)
K_OP(reduce_residual)
K_OP(gdn_conv)
K_OP(gdn_recur)
K_OP(attn_kv)
K_OP(attn_scores)
K_OP(attn_pv)
K_OP(attn_reduce_gate)
K_GEMV(lm_head, GEMV_MIN_BLOCKS)
K_OP(argmax)
K_OP(end_step)
K_OP(gdn_step)
K_OP(gdn_chunk)
K_GEMV(mtp_fc, GEMV_MIN_BLOCKS)
