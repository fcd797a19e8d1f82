// GEMV_RING: the discrete GEMV kernels with their weights streamed through one block-wide shared-memory
// ring (r_* kernels, launched by the host instead of k_* when GEMV_RING is set).
//
// Why: the register streams keep about 2 KB of weights in flight per warp, 32 KB per SM, and reach
// 42-58 % of the read ceiling; with the arithmetic removed (GEMV_READ_ONLY) only 57-68 %
// (results/probe_16f76fa): the limit is the bytes in flight and each unit's ramp, not the arithmetic.
// H200 probe 5 (shared/device/H200.md, style G) streamed a step's weights at 93 % of the floor with
// one block per SM, a loader warp feeding a deep ring by bulk copies and chunks handed out by ticket.
// This is that shape for the engine's GEMV units (no code of the probe's is used).
//
// History (each measured on the H200, all with the same bits): thread 0 as the producer between its
// own items and 16 copies of 1 KB per item, 55.7 ms/token against 12.3 (results/ring_37e2404); one
// copy per 16 KB item, 62.2 (results/ring_d03d3b7); the consumers only waiting and releasing, 16.7,
// and without the arithmetic, 50.6 (results/ringdiag_b5e5ad1). Derived (not measured): thread 0
// refilled slots only between its own items, with a non-blocking test made as it finished an item,
// usually before the other warps had released it, so a freed slot waited a whole item for its refill
// and the ring ran about one item deep (latency-bound at ~1 us per 16 KB, as measured, at any depth);
// and every item and piece re-derived its unit through dependent global loads on the critical path.
// The third version moved all of that off it:
// - a dedicated producer warp (the block has THREADS + 32 threads; the ops' joins are BLOCK_SYNC, the
//   join of the THREADS consumer threads only), which alone touches tickets, copies and scales;
// - the launch's words decoded once into shared memory (pointers, shapes), the consumers' per-unit
//   values from there, the item record carrying (word, unit, chunk, sub);
// - the unit's block-scale row (fp8) brought into the slot's scale area with each item (a bulk copy;
//   by the producer's lanes where a row is not whole 16-byte chunks);
// - ring reads without memory clobbers.
// Measured 22.66 ms/token (results/ring3_ea76f3b); with pieces dealt to warps in turn (below) 23.13
// (results/ring4_1fa230c). With the consumers doing nothing (RING_NOCOMPUTE) 9.70 against the default
// kernels' 12.27: the consumers' arithmetic is the limit, ~2.6k cycles per warp for its two 1 KB pieces
// of an item (results/ring5_8d23545; the proxy fence is not the cause, results/ring6_6e140ff). Hence
// RING_PAIR (a warp's pieces of an item loaded first, no branch between their chunks; not yet measured) and
// RING_SLOT_KB=32 (half the producer's items; not yet measured).
//
// A unit's weight bytes, for each of its weights (sub 0; gate/up: the gate, then sub 1 the up), are
// its rows' k-ranges one after another (row r0 from group g0, .., row r1 - 1 to group g1: one
// contiguous range of memory when the unit spans whole rows, else a segment per row), cut into RING_SLOT
// items (16 or 32 KB), one bulk copy per row segment an item touches. A (row, k-group) piece is 1,024 fp8 or 2,048
// bf16 bytes and never straddles items (the host checks). Every consumer warp consumes every item in
// order (the slot's full barrier: the copies' bytes and the producer's arrival; its empty barrier: one
// arrival per consumer warp), so the item sequence, and the phase of each barrier, is the same for
// all. RING_EARLY issues the block's first unit's first items before griddepcontrol.wait: weights and
// scales never depend on the predecessor kernel.
//
// Bits: an item's pieces are dealt to the consumer warps in turn (piece q of the item to warp q % CW,
// CW = RING_CWARPS = 8 or 16; RING_SLOT_KB / CW at a time), so that every warp works on every item (rows to warps left ~3 of 8 warps busy per item of
// a split-K unit: results/ring3_ea76f3b). Every (row, group) partial is computed exactly as dot_rows
// (lane l's chunks in order, elements in order, one fma each, then the butterfly); split-K partials go
// to memory as before, and a whole-row unit's partials to shared memory (pv), summed per row in group
// order from 0 by the row's warp after the unit's last item (one join of the consumers per unit), the
// same epilogues: the bits of the k_* kernels and of the megakernel, which the per-instruction diff of
// every run checks.
#ifndef RING_BREAK
#define RING_BREAK 0      // the op check's negative control for the ring kernels: every row's first piece off by 1
#endif
#ifndef TC_PAIR
#define TC_PAIR 1         // RING_TC: a consumer warp computes two consecutive items of a (unit, weight) at once
#endif
#ifndef TC_WHOLE
#define TC_WHOLE 0        // RING_TC: a consumer warp computes a whole item (all 8 chunks, TC_ILP chains at once; items
                          // dealt to the warps in turn) instead of one chunk of every item (NOT YET MEASURED)
#endif
#ifndef TC_ILP
#define TC_ILP 2          // TC_WHOLE: chunks whose mma chains a warp interleaves (1, 2, 4 or 8; ptxas at the ring
                          // block's 168-register cap (9 warps count as 12): 2 spills 0-8 bytes, 4 spills 36-44, 8 ~660)
#endif
static_assert(8 % TC_ILP == 0, "TC_ILP divides the item's 8 chunks");
#ifndef TC_DIAG
#define TC_DIAG 0         // DIAGNOSTIC, WRONG RESULTS (RING_TC): bit 0 the consumers load their chunk but skip its
                          // arithmetic; bit 1 they skip the unit ends (warp-order sums, epilogues)
#endif
#ifndef RING_NOCOMPUTE
#define RING_NOCOMPUTE 0  // DIAGNOSTIC, WRONG RESULTS: the consumers only wait for and release each item
#endif
#define RING_SLOT (RING_SLOT_KB * 1024u)
static_assert(RING_SLOT_KB == 16 || RING_SLOT_KB == 32, "RING_SLOT_KB is 16 or 32");
#define RING_MAX 16
#define RING_WORDS 4      // words of one ring launch at most (a GDN layer's qkv, z, b, a)
#define RING_SC 576u      // bytes of block scales per slot: a scale row of at most 144 blocks (K <= 18,432)
// RING_CWARPS consumer warps (8, or 16: a second group of 8 joins the first at barrier 1; the ops'
// preparations run on the first 8 only, their joins at barrier 0 of 256 threads) and the producer warp.
#define CW RING_CWARPS
#define RING_THREADS (CW * 32 + 32)
static_assert(CW == WARPS || CW == 2 * WARPS, "RING_CWARPS is 8 or 16");
// The join of every consumer thread (BLOCK_SYNC when they are the ops' 256).
#define CONSUMER_SYNC() asm volatile("bar.sync %0, %1;" ::"n"(CW == WARPS ? 0 : 1), "n"(CW * 32) : "memory")
#define RING_PV 288       // (row, group) partials of a whole-row unit, both weights: 16 rows x 18 groups of one
                          // weight or 9 of two (host-checked)
static_assert(RING_SLOTS >= 2 && RING_SLOTS <= RING_MAX, "RING_SLOTS is 2..16");
static_assert(!(GEMV_RING && GEMV_MMA) || RING_TC, "the ring computes dot_rows' order (RING_TC: GEMV_MMA's); GEMV_MMA changes the k_* kernels' order");
static_assert(!RING_TC || (GEMV_RING && GEMV_MMA && RING_SLOT_KB == 16 && CW == WARPS), "RING_TC: GEMV_RING and GEMV_MMA on, 16 KB items, 8 consumer warps");
// RING_TC: an fp8 item (16 rows x one k-group) lands by one tensor copy (the weight's tensor map, the
// 3D view of src/cuda/tile.rs: box {128 bytes, 16 rows, 8 chunks}, no swizzle) as [chunk][row][128
// bytes]; TC_RED floats of warps' chunk sums per unit parity (weights x groups x 8 warps x 16 rows),
// before the ring. (A first version copied the item's 16 rows by 16 bulk copies of 1 KB each: the
// mechanics alone took 13.7 ms/token, the whole 17.6 against the default 12.2; results/tc_18c84a7.)
// Measured with the tensor copy: 15.18 against 12.25, the mechanics alone 9.03 (results/tc_7cfb8d5);
// with TC_PAIR 13.80 (results/tcpair_236b085): lost, off. Without arithmetic 11.13; a warp spends ~1,300
// cycles on its chunk of an item, the 8 warps in lockstep (results/tcdiag_84719b1).
#define SLOT_STRIDE RING_SLOT
#define TC_RED 1536u
// One tensor copy of box {c0, c1, c2} (innermost first) of the map at `tmap` (global memory) into dst.
__device__ __forceinline__ void tensor3_to_shared(void* dst, const void* tmap, int c0, int c1, int c2, unsigned long long* b) {
  asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];"
               ::"r"(smem_addr(dst)), "l"(tmap), "r"(c0), "r"(c1), "r"(c2), "r"(smem_addr(b)) : "memory");
}

// The ring's byte offset in dynamic shared memory: after x (bf16, K) and 64 floats of block sums,
// 128-aligned; the slots' scale areas follow the slots (the host's ring_smem_bytes lays out the same).
__device__ __forceinline__ unsigned ring_base(unsigned K) { return (((K * 2 + 15) / 16) * 16 + 256 + 127) / 128 * 128; }
// The slots' offset: after RING_TC's two halves of TC_RED floats (at ring_base).
__device__ __forceinline__ unsigned ring_off(unsigned K) { return ring_base(K) + (RING_TC ? 2 * TC_RED * 4 : 0); }

__device__ __forceinline__ void mbar_init_n(unsigned long long* b, unsigned n) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(b)), "r"(n) : "memory");
}
// The bytes a phase waits for, without an arrival (sm_90): the copies may be issued before the arrival.
__device__ __forceinline__ void mbar_expect_tx_only(unsigned long long* b, unsigned bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(b)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(unsigned long long* b) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(b)) : "memory");
}
// 16 bytes of the ring: volatile (kept after the barrier wait, itself volatile with a memory clobber)
// but without a memory clobber, so that nothing else is reloaded around it.
__device__ __forceinline__ uint4 ring_ld16(const void* p) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(smem_addr(p)));
  return v;
}
__device__ __forceinline__ float ring_ldf(const void* p) {
  float v;
  asm volatile("ld.shared.f32 %0, [%1];" : "=f"(v) : "r"(smem_addr(p)));
  return v;
}

// One word of a ring launch, decoded once into shared memory (words in hand-out order).
struct RingWord {
  const unsigned char* w[2];  // weights: sub 0 (W0), sub 1 (gate/up's W1)
  const float* s[2];          // their block scales (fp8)
  const void* tm[2];          // RING_TC: their tensor maps
  void* out;                  // bf16 outputs, or fp32 split-K partials
  unsigned first;             // the launch unit index of its first unit
  unsigned units, rows, unit_rows, k_parts, wi;
  unsigned char eb, bs, partial, tc;  // tc: RING_TC items (16 rows x one k-group, mma_unit_bs's arithmetic)
};

// The per-op parts of a ring GEMV: the prepared input and the per-row epilogue (GU: gate/up, two
// weights, the epilogue gets both totals).
struct RingNorm {
  static constexpr bool GU = false, RES = false;
  static __device__ const unsigned short* prep(const DevCtx& c, const Word& w, char* smem) { return prepared_input<true>(c, w, SLOT_W1, smem, true); }
  static __device__ void epi(unsigned short* out, unsigned r, float v, float, float) { out[r] = f2bf(v); }
};
struct RingResidual {
  static constexpr bool GU = false, RES = true;
  static __device__ const unsigned short* prep(const DevCtx& c, const Word& w, char* smem) { return prepared_input<true>(c, w, SLOT_W1, smem, true); }
  // h0: bf2f(h[r]), loaded at the unit's start (off the critical path): f2bf(bf2f(h[r]) + bf(v))
  static __device__ void epi(unsigned short* h, unsigned r, float v, float, float h0) { h[r] = f2bf(h0 + bf(v)); }
};
struct RingGatedNormResidual {
  static constexpr bool GU = false, RES = true;
  static __device__ const unsigned short* prep(const DevCtx& c, const Word& w, char* smem) { return gated_norm_input<true>(c, w, smem, true); }
  static __device__ void epi(unsigned short* h, unsigned r, float v, float u, float h0) { RingResidual::epi(h, r, v, u, h0); }
};
struct RingGateUp {
  static constexpr bool GU = true, RES = false;
  static __device__ const unsigned short* prep(const DevCtx& c, const Word& w, char* smem) { return prepared_input<true>(c, w, SLOT_W2, smem, true); }
  static __device__ void epi(unsigned short* out, unsigned r, float g, float u, float) { out[r] = f2bf(bf(silu(bf(g))) * bf(u)); }
};

// The rows and k-groups of unit u of a word (gemv_span on the decoded word).
__device__ __forceinline__ GemvSpan ring_span(const RingWord& rw, unsigned u, unsigned K) {
  unsigned kp = u % rw.k_parts, rs = u / rw.k_parts, groups = (K + KGROUP - 1) / KGROUP;
  return GemvSpan{rs * rw.unit_rows, min(rw.rows, rs * rw.unit_rows + rw.unit_rows), kp * groups / rw.k_parts, (kp + 1) * groups / rw.k_parts};
}

// RING_STAMPS: the items stamped, and the ring launches so far in this process (to stamp a warm one).
#define RING_STAMP_ITEMS 64
__device__ unsigned ring_launches;
// The kernels' static shared memory within the host's RING_STATIC (3,136 bytes; RING_STAMPS: 3,584 more).
static_assert(RING_MAX * (2 * 8 + 16) + RING_WORDS * sizeof(RingWord) + 16 + 2 * RING_PV * 4 <= 3200, "ring static shared memory over RING_STATIC");
static_assert(6 * RING_STAMP_ITEMS * 8 <= 3584, "ring stamps over the host's room");

template <typename Op>
__device__ void ring_launch(const Word* prog, unsigned wi, unsigned nw, const DevCtx& c, char* smem) {
  __shared__ unsigned long long full[RING_MAX], empty[RING_MAX];
  __shared__ uint4 meta[RING_MAX];  // (word, sub | end << 8 | unit's last item << 9, unit in the word, chunk)
  __shared__ float pv[2][RING_PV];  // a whole-row unit's (row, group) partials (weight, row, group order), by unit parity
  __shared__ RingWord words[RING_WORDS];
  __shared__ unsigned stamping;  // RING_STAMPS: this block stamps its items
  __shared__ unsigned xs_off;    // the prepared input's offset in smem (for the second group of consumers)
#if RING_STAMPS
  // clock64 of item t: issued (lane 0 after its copies), slot free (the producer's wait over), landed
  // (warp 0's wait over), warp 0 done, the last consumer warp (CW - 1, "7") done and its wait over; st_n: the block's items.
  __shared__ long long st_issue[RING_STAMP_ITEMS], st_free[RING_STAMP_ITEMS], st_land[RING_STAMP_ITEMS],
      st_done0[RING_STAMP_ITEMS], st_done7[RING_STAMP_ITEMS], st_land7[RING_STAMP_ITEMS];
  __shared__ unsigned st_n;
#endif
  const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const unsigned K = c.cols[prog[wi].ops[SLOT_IN0]], kb = (K + 127) / 128;
  // RING_TC: tensor copies land at 128-byte aligned addresses (1,024 here: room for swizzled boxes); the
  // dynamic shared memory begins after the kernel's static arrays, so the slots start past a pad (the
  // host's ring_smem_tc allows 1,024 bytes for it).
  const unsigned pad = RING_TC ? (1024u - (smem_addr(smem + ring_off(K)) & 1023u)) & 1023u : 0u;
  char* ring = smem + ring_off(K) + pad;
  const unsigned D = min((unsigned)RING_SLOTS, (dynamic_smem_bytes() - ring_off(K) - pad) / (SLOT_STRIDE + RING_SC));
  char* scales = ring + D * SLOT_STRIDE;  // slot s's block scales at s * RING_SC
  float* tcred = (float*)(smem + ring_base(K));  // RING_TC: [parity][TC_RED]
  unsigned* tk = c.tickets + 2 * wi;
  if (threadIdx.x < nw) {  // word k handed out k-th (GEMV_REVERSE: the last word first)
    unsigned k = threadIdx.x, at = GEMV_REVERSE ? wi + nw - 1 - k : wi + k, first = 0;
    for (unsigned j = 0; j < k; ++j) first += prog[GEMV_REVERSE ? wi + nw - 1 - j : wi + j].units;
    const Word& w = prog[at];
    RingWord rw;
    for (int i = 0; i < 2; ++i) {
      unsigned short id = (Op::GU && i == 1) ? w.ops[SLOT_W1] : w.ops[SLOT_W0];
      rw.w[i] = (const unsigned char*)c.bufs[id];
      rw.s[i] = c.scales[id];
      rw.tm[i] = c.tmaps + 128 * (size_t)id;
    }
    unsigned char wb = c.wbytes[w.ops[SLOT_W0]];
    // bf16-exact scales (code 1) on the fast path only when every weight of the word has them, as fp8_stream
    bool all_bs = wb == 1 && (!Op::GU || c.wbytes[w.ops[SLOT_W1]] == 1);
    rw.out = c.bufs[w.ops[SLOT_OUT0]];
    rw.first = first;
    rw.units = w.units;
    rw.rows = w.rows;
    rw.unit_rows = w.unit_rows;
    rw.k_parts = w.k_parts;
    rw.wi = at;
    rw.eb = wb == 2 ? 2 : 1;
    rw.bs = all_bs;
    rw.partial = (w.flags & FLAG_PARTIAL) != 0;
    // (the condition of mma_path, for every weight of the word: the megakernel's and k_*'s choice)
    rw.tc = RING_TC && (wb == 1 || wb == 3) && (!Op::GU || c.wbytes[w.ops[SLOT_W1]] == 1 || c.wbytes[w.ops[SLOT_W1]] == 3) && K % KGROUP == 0 && w.unit_rows == 16;
    words[k] = rw;
  }
  if (threadIdx.x == 0) {
    stamping = 0;
    if (RING_STAMPS && blockIdx.x == 0) stamping = atomicAdd(&ring_launches, 1u) + 1 == RING_STAMPS;
    for (unsigned d = 0; d < D; ++d) {
      mbar_init_n(&full[d], 1);
      mbar_init_n(&empty[d], CW);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();  // (every thread of the block, the producer warp's too: the only such join)
  unsigned total = 0;
  for (unsigned k = 0; k < nw; ++k) total += words[k].units;

  if (warp == CW) {  // ---- the producer warp: lane 0 issues, every lane stages scales ----
    // RING_TC: the host wrote the tensor maps; the tensormap proxy of the issuing lane sees them after this
    if (RING_TC && lane < 2 * nw && words[lane >> 1].tc && ((lane & 1) == 0 || Op::GU))
      asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;" ::"l"(words[lane >> 1].tm[lane & 1]) : "memory");
    __syncwarp();
    unsigned t = 0, i = blockIdx.x, next = 0, k = 0, u = 0, sub = 0, ch = 0, nc = 0, span = 0, len = 0;
    GemvSpan sp{0, 0, 0, 0};
    float sv[5];  // lane l's scales l + 32 j of the current (unit, sub)'s scale row (kb <= 144 < 160)
    // Scale rows of whole 16-byte chunks (kb % 4 == 0: every 27B weight) come by a bulk copy with each
    // item, else the lanes load and store them (the tiny preset).
    const bool scale_copy = kb % 4 == 0;
    auto start_sub = [&]() {  // the current (unit, sub): its byte sequence and its scale row
      const RingWord& rw = words[k];
      span = (min(K, sp.g1 * KGROUP) - sp.g0 * KGROUP) * rw.eb;
      len = (sp.r1 - sp.r0) * span;
      nc = rw.tc ? sp.g1 - sp.g0 : (len + RING_SLOT - 1) / RING_SLOT;  // (RING_TC: an item a k-group)
      ch = 0;
      if (rw.eb == 1 && !scale_copy) {  // (else each item's copies bring the scale row)
        const float* srow = rw.s[sub] + (size_t)(sp.r0 / 128) * kb;
#pragma unroll
        for (int j = 0; j < 5; ++j) sv[j] = lane + 32 * j < kb ? srow[lane + 32 * j] : 0.f;
      }
    };
    auto start_unit = [&]() {  // unit i (< total): its word and span
      k = 0;
      while (k + 1 < nw && i >= words[k + 1].first) ++k;
      u = i - words[k].first;
      sp = ring_span(words[k], u, K);
      sub = 0;
      start_sub();
    };
    // Item t into its slot (free): the scales, the record, the copies; then the next item's place.
    auto issue = [&]() {
      unsigned s = t % D;
      const RingWord& rw = words[k];
      const bool sc = rw.eb == 1 && scale_copy;
      if (rw.tc) {  // 16 rows x group g0 + ch: one tensor copy (rows past the weight's end land as zeros)
        if (lane == 0) {
          mbar_expect_tx_only(&full[s], RING_SLOT + (sc ? kb * 4 : 0));
          if (sc) bulk_to_shared(scales + s * RING_SC, rw.s[sub] + (size_t)(sp.r0 / 128) * kb, kb * 4, &full[s]);
          tensor3_to_shared(ring + s * SLOT_STRIDE, rw.tm[sub], 0, (int)sp.r0, (int)((sp.g0 + ch) * (KGROUP / 128)), &full[s]);
        }
      } else if (lane == 0) {  // the copies first (their bytes expected, no arrival yet: the phase cannot complete)
        unsigned v0 = ch * RING_SLOT, v1 = min(len, v0 + RING_SLOT);
        mbar_expect_tx_only(&full[s], v1 - v0 + (sc ? kb * 4 : 0));
        if (sc) bulk_to_shared(scales + s * RING_SC, rw.s[sub] + (size_t)(sp.r0 / 128) * kb, kb * 4, &full[s]);
        const unsigned char* base = rw.w[sub] + ((size_t)sp.r0 * K + sp.g0 * KGROUP) * rw.eb;
        char* dst = ring + s * SLOT_STRIDE;
        if (span == K * rw.eb) {  // whole rows: the sequence is contiguous in memory
          bulk_to_shared(dst, base + v0, v1 - v0, &full[s]);
        } else {  // a segment per row (split-K units)
          for (unsigned v = v0; v < v1;) {
            unsigned j = v / span, e = min(v1, (j + 1) * span);
            bulk_to_shared(dst + (v - v0), base + (size_t)j * K * rw.eb + (v - j * span), e - v, &full[s]);
            v = e;
          }
        }
      }
      if (rw.eb == 1 && !scale_copy) {  // then the block scales (their loads may still be in flight)
        float* dst = (float*)(scales + s * RING_SC);
#pragma unroll
        for (int j = 0; j < 5; ++j)
          if (lane + 32 * j < kb) dst[lane + 32 * j] = sv[j];
      }
      __syncwarp();  // the lanes' scales before lane 0's arrival (release)
      if (lane == 0) {
        const bool last = ch + 1 == nc && sub + 1 == (Op::GU ? 2u : 1u);  // the unit's last item
        meta[s] = make_uint4(k, sub | (unsigned)last << 9, u, ch);
        mbar_arrive(&full[s]);
#if RING_STAMPS
        if (stamping && t < RING_STAMP_ITEMS) st_issue[t] = clock64();
#endif
      }
      ++t;
      if (++ch == nc && ++sub < (Op::GU ? 2u : 1u)) start_sub();
    };
    auto wait_slot = [&]() {  // the slot of item t free (its previous item released by every consumer)
      if (t >= D && lane == 0) {
        mbar_wait(&empty[t % D], (t / D - 1) & 1);
        if (RING_FENCE) asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // the consumers' reads before the next copy (insurance)
      }
#if RING_STAMPS
      if (lane == 0 && stamping && t < RING_STAMP_ITEMS) st_free[t] = clock64();
#endif
      __syncwarp();
    };
    start_unit();
    if (RING_EARLY)
      while (t < D && sub < (Op::GU ? 2u : 1u)) issue();
    pdl_join();
    if (DEVICE_STOP && stopped(c)) {  // the copies in flight land before the block leaves (no ticket taken)
      if (lane == 0)
        for (unsigned q = 0; q < t; ++q) mbar_wait(&full[q % D], (q / D) & 1);
      return;
    }
    for (;;) {
      if (lane == 0) next = GEMV_DYNAMIC ? gridDim.x + atomicAdd(tk, 1u) : i + gridDim.x;  // used at the unit's end
      while (sub < (Op::GU ? 2u : 1u)) {
        wait_slot();
        issue();
      }
      i = __shfl_sync(0xffffffffu, next, 0);
      if (i >= total) break;
      start_unit();
    }
    wait_slot();  // the end marker
    if (lane == 0) {
      meta[t % D] = make_uint4(0, 1u << 8, 0, 0);
      mbar_arrive(&full[t % D]);
      // The ticket pair self-resets for the next launch (as K_GEMV: this block's last ticket was past the end).
      if (GEMV_DYNAMIC && atomicAdd(tk + 1, 1u) == gridDim.x - 1) {
        tk[0] = 0;
        tk[1] = 0;
      }
    }
    return;
  }

  // ---- the consumer warps: every item in order ----
  pdl_join();
  if (DEVICE_STOP && stopped(c)) return;
  const unsigned short* xs = (const unsigned short*)smem;
  unsigned last_word = 0xffffffffu, last_unit = 0xffffffffu;
  float h0[2] = {0.f, 0.f};  // the residual's prior bf2f(h[r]) of the warp's rows, loaded at the unit's start
  // The current unit, decoded once (not per item): its word, span and derived sizes.
  GemvSpan sp{0, 0, 0, 0};
  unsigned G = 1, span = 0, n = 0, eb = 1, piece = KGROUP;
  bool single = true, bf16w = false, bs = false, partial = false, tcw = false;
  float h0t = 0.f;  // RING_TC: row lane's prior bf2f(h[r]) (warp 0's lanes 0..15), loaded at the unit's start
  const unsigned lq = lane >> 2, lt = lane & 3;  // RING_TC: the lane's rows lq, lq + 8 and 16-byte piece lt
  void* out = nullptr;
  unsigned wrows = 0;
  unsigned s = 0, phase = 0;  // the next item's slot and its full barrier's parity (counters, no divisions)
  unsigned par = 0;           // the unit's half of pv
  for (unsigned t = 0;; ++t) {  // (t: the item, for RING_STAMPS)
    (void)t;
    mbar_wait(&full[s], phase);
#if RING_STAMPS
    if (stamping && lane == 0 && warp == 0 && t < RING_STAMP_ITEMS) st_land[t] = clock64();
    if (stamping && lane == 0 && warp == CW - 1 && t < RING_STAMP_ITEMS) st_land7[t] = clock64();
#endif
    uint4 m = ring_ld16(&meta[s]);
    if ((m.y >> 8) & 1) {
#if RING_STAMPS
      if (threadIdx.x == 0) st_n = t;
#endif
      break;
    }
    if (m.x != last_word) {  // another word's input (the first, or a launch of several words)
      if (last_word != 0xffffffffu) {
        __syncwarp();
        CONSUMER_SYNC();  // every consumer is done reading the previous one
      }
      if (warp < WARPS) {  // (the ops' 256 threads)
        xs = Op::prep(c, prog[words[m.x].wi], smem);
        if (threadIdx.x == 0) xs_off = (unsigned)((const char*)xs - smem);
      }
      if (CW > WARPS) {  // the second group sees the prepared input
        __syncwarp();  // (thread 0's store above: the warp converged before the aligned bar.sync)
        CONSUMER_SYNC();
        xs = (const unsigned short*)(smem + xs_off);
      }
      last_word = m.x;
      last_unit = 0xffffffffu;
    }
    const unsigned sub = m.y & 255u, key = m.z * 2 + sub;  // (unit, sub)
    if (key != last_unit) {
      const RingWord& rw = words[m.x];
      sp = ring_span(rw, m.z, K);
      eb = rw.eb;
      piece = KGROUP * eb;
      G = sp.g1 - sp.g0;
      span = (min(K, sp.g1 * KGROUP) - sp.g0 * KGROUP) * eb;
      n = (sp.r1 - sp.r0) * G;
      single = (sp.r1 - sp.r0) * span <= RING_SLOT;
      bf16w = eb == 2;
      bs = rw.bs;
      partial = rw.partial;
      tcw = rw.tc;
      out = rw.out;
      wrows = rw.rows;
      last_unit = key;
      // The residual's h[r] of the warp's rows at the unit's start: its latency hides behind the unit.
      if (Op::RES && !partial && sub == 0 && lane == 0)
#pragma unroll
        for (int ri = 0; ri < 16 / CW; ++ri)
          if (sp.r0 + warp + CW * ri < sp.r1) h0[ri] = bf2f(((const unsigned short*)out)[sp.r0 + warp + CW * ri]);
      if (Op::RES && !partial && tcw && sub == 0 && warp == 0 && sp.r0 + lane < sp.r1 && lane < 16)
        h0t = bf2f(((const unsigned short*)out)[sp.r0 + lane]);
    }
    // The item's pieces q0 .. q1 - 1 of the (unit, sub) sequence: piece q is row r0 + q / G, group
    // g0 + q % G, at (q / G) span + (q % G) piece. (The host takes the ring only where pieces never
    // straddle items: K a multiple of 1,024, or every (unit, sub) within one item.)
    const unsigned q0 = single ? 0 : m.w * (RING_SLOT / piece), q1 = single ? n : min(n, q0 + RING_SLOT / piece);
    const char* slot = ring + s * SLOT_STRIDE - m.w * RING_SLOT;  // (sequence offsets minus the item's start)
    const char* sc = scales + s * RING_SC;
    // A lane's sum over piece q (row j, group g) in dot_rows' order.
    auto piece_acc = [&](unsigned q) {
      unsigned j = q / G, g = sp.g0 + (q - j * G), k0 = g * KGROUP, k1 = min(K, k0 + KGROUP);
      const char* pc = slot + j * span + (g - sp.g0) * piece;
      float acc = 0.f;
      if (bf16w) {
#pragma unroll
        for (int jj = 0; jj < 4; ++jj) {
          unsigned k = k0 + lane * 8 + jj * 256;
          if (k < k1) acc = chunk_bf16(ring_ld16(pc + 2 * (k - k0)), xs + k, acc);
        }
      } else {
#pragma unroll
        for (int jj = 0; jj < 2; ++jj) {
          unsigned k = k0 + lane * 16 + jj * 512;
          if (k < k1) acc = chunk_fp8(ring_ld16(pc + (k - k0)), xs + k, ring_ldf(sc + 4 * (k / 128)), bs, acc);
        }
      }
      return acc;
    };
    // Piece q's partial v (lane 0): a split-K partial to memory, else to pv for the unit's end.
    auto put = [&](unsigned q, float v) {
      unsigned j = q / G, g = sp.g0 + (q - j * G);
#if RING_BREAK
      if (g == sp.g0) v += 1.0f;
#endif
      if (partial) ((float*)out)[(size_t)g * wrows + sp.r0 + j] = v;
      else pv[par][sub * n + q] = v;
    };
    // RING_PAIR (every fp8 piece whole: K a multiple of 1,024): the warp's NP pieces of the item
    // (q, q + CW, ..; NP = RING_SLOT_KB / CW: 2 with 8 warps and 16 KB slots, 4 with 32 KB) loaded first and computed with no branch
    // between their chunks (the scales' kind a template argument), so that NP chains interleave; each
    // piece's chunks in the same order as piece_acc, the same bits.
    constexpr int NP = RING_SLOT_KB / CW;  // (an item holds RING_SLOT_KB fp8 pieces)
    auto multi_fp8 = [&](auto bs_tag, const unsigned* qs, float* r) {
      constexpr bool BS = decltype(bs_tag)::value;
      unsigned k[NP];
      const char* pp[NP];
#pragma unroll
      for (int i = 0; i < NP; ++i) {
        const unsigned j = qs[i] / G, g = qs[i] - j * G;
        k[i] = (sp.g0 + g) * KGROUP + lane * 16;
        pp[i] = slot + j * span + g * KGROUP + lane * 16;
      }
      uint4 w[2][NP];
      float sv[2][NP];
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int i = 0; i < NP; ++i) w[h][i] = ring_ld16(pp[i] + 512 * h);
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int i = 0; i < NP; ++i) sv[h][i] = ring_ldf(sc + 4 * ((k[i] + 512 * h) / 128));
#pragma unroll
      for (int i = 0; i < NP; ++i) r[i] = 0.f;
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int i = 0; i < NP; ++i) chunk_fp8_rows<1, BS, false>(&w[h][i], xs + k[i] + 512 * h, &sv[h][i], &r[i]);
    };
    const bool fast = RING_PAIR && !bf16w && K % KGROUP == 0;
    // RING_TC's whole-row unit end: thread r (< the unit's rows) sums row r's (weight, group) values in
    // rd (weight-major, groups `stride` floats apart) in group order from 0 (ORDER: as mma_unit_bs's
    // callers) and runs the epilogue.
    auto tc_epilogue = [&](const float* rd, unsigned stride) {
      if (threadIdx.x >= sp.r1 - sp.r0) return;
      float t0 = 0.f, t1 = 0.f;
      for (unsigned g = 0; g < G; ++g) t0 += rd[g * stride + threadIdx.x];  // ORDER: groups in order
      if (Op::GU)
        for (unsigned g = 0; g < G; ++g) t1 += rd[(G + g) * stride + threadIdx.x];
      Op::epi((unsigned short*)out, sp.r0 + threadIdx.x, t0, t1, h0t);
    };
    bool pair = false;  // RING_TC with TC_PAIR: this item and the next (slot s2) computed together
    unsigned s2 = 0;
    if (tcw) {
      // RING_TC: warp w's 128-wide chunk w of the item's group (16 rows, [chunk][row][128 bytes]) as
      // mma_unit_bs computes it; lanes with t == 0 leave the chunk sums of rows lq, lq + 8 in the unit's
      // half of tcred. TC_PAIR: when the next item is the same (unit, weight)'s next group (items of a
      // (unit, weight) are consecutive, m.w = 0 .. G - 1) and both are whole groups, the warp waits for
      // it too and runs both chunks' mma chains interleaved (each chain's sequence as mma_chunk's: the
      // same bits), one loop pass for two items.
      const unsigned gi = m.w, k0 = (sp.g0 + gi) * KGROUP + warp * 128, kend = min(K, (sp.g0 + gi + 1) * KGROUP);
      pair = TC_PAIR && !TC_WHOLE && !(TC_DIAG & 1) && !RING_NOCOMPUTE && gi + 1 < G && (sp.g0 + gi + 2) * KGROUP <= K;
      if (pair) {
        s2 = s + 1 == D ? 0 : s + 1;
        mbar_wait(&full[s2], s + 1 == D ? phase ^ 1u : phase);
      }
      if (TC_WHOLE && !RING_NOCOMPUTE) {
        // TC_WHOLE: item t is warp t % CW's; its 8 chunks (whole: K is a multiple of 1,024) in TC_ILP
        // interleaved chains, each (group, row)'s chunk sums added in chunk order from 0 within the lane
        // (ORDER: mma_unit_bs's warps in order), so the bits are the chunk-per-warp form's.
        if (t % CW == warp) {
          const unsigned kg = (sp.g0 + gi) * KGROUP;
          const char* rp = ring + s * SLOT_STRIDE + lq * 128 + 16 * lt;
          float v0 = 0.f, v1 = 0.f;
#pragma unroll
          for (int c0 = 0; c0 < 8; c0 += TC_ILP) {
            uint4 v[TC_ILP][2][2];
            const unsigned short* xh[TC_ILP];
            float scl[TC_ILP];
            float d[TC_ILP][4] = {};
#pragma unroll
            for (int i = 0; i < TC_ILP; ++i) {
              const unsigned c = c0 + i;
#pragma unroll
              for (int h = 0; h < 2; ++h) {
                v[i][h][0] = ring_ld16(rp + c * 2048 + 64 * h);
                v[i][h][1] = ring_ld16(rp + c * 2048 + 1024 + 64 * h);
              }
              xh[i] = xs + kg + 128 * c + 16 * lt;
              scl[i] = ring_ldf(sc + 4 * ((kg + 128 * c) / 128));
            }
            if (bs) mma_chunks<true, TC_ILP>(v, 2, xh, scl, d);
            else mma_chunks<false, TC_ILP>(v, 2, xh, scl, d);
#pragma unroll
            for (int i = 0; i < TC_ILP; ++i) {
              v0 += d[i][0];  // ORDER: chunks in order
              v1 += d[i][2];
            }
          }
#if RING_BREAK
          if (gi == 0) {
            v0 += 1.0f;
            v1 += 1.0f;
          }
#endif
          if (lt == 0) {
            if (partial) {
              float* po = (float*)out + (size_t)(sp.g0 + gi) * wrows + sp.r0;
              if (sp.r0 + lq < sp.r1) po[lq] = v0;
              if (sp.r0 + lq + 8 < sp.r1) po[lq + 8] = v1;
            } else {
              float* rr = tcred + par * TC_RED + (sub * G + gi) * 16;
              rr[lq] = v0;
              rr[lq + 8] = v1;
            }
          }
        }
      } else if (!RING_NOCOMPUTE) {
        const unsigned nh = k0 < kend ? min(2u, (kend - k0) / 64) : 0u;
        auto load = [&](uint4 (&v)[2][2], unsigned slot) {
          const char* rp = ring + slot * SLOT_STRIDE + warp * 2048 + lq * 128 + 16 * lt;
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            v[h][0] = ring_ld16(rp + 64 * h);
            v[h][1] = ring_ld16(rp + 1024 + 64 * h);
          }
        };
        auto keep = [&](unsigned g, const float* d) {
          if (lt == 0) {
            float* rr = tcred + par * TC_RED + ((sub * G + g) * WARPS + warp) * 16;
            rr[lq] = d[0];
            rr[lq + 8] = d[2];
          }
        };
        if (pair) {
          uint4 v[2][2][2];
          load(v[0], s);
          load(v[1], s2);
          const float sc2[2] = {ring_ldf(sc + 4 * (k0 / 128)), ring_ldf(scales + s2 * RING_SC + 4 * ((k0 + KGROUP) / 128))};
          const unsigned short* xh[2] = {xs + k0 + 16 * lt, xs + k0 + KGROUP + 16 * lt};
          float d[2][4] = {};
          if (bs) mma_chunks<true, 2>(v, 2, xh, sc2, d);
          else mma_chunks<false, 2>(v, 2, xh, sc2, d);
          keep(gi, d[0]);
          keep(gi + 1, d[1]);
        } else {
          uint4 v[2][2];
          load(v, s);
          const float scale = k0 < kend ? ring_ldf(sc + 4 * (k0 / 128)) : 0.f;
          float d[4] = {0.f, 0.f, 0.f, 0.f};
          if (TC_DIAG & 1) d[0] = __uint_as_float(v[0][0].x ^ v[1][1].w) + scale;  // (the loads kept)
          else if (bs) mma_chunk<true>(v, nh, xs + k0 + 16 * lt, scale, d);
          else mma_chunk<false>(v, nh, xs + k0 + 16 * lt, scale, d);
          keep(gi, d);
        }
      }
    } else if (fast) {
      for (unsigned q = q0 + warp; q < q1 && !RING_NOCOMPUTE; q += NP * CW) {
        // (pieces past the item's end are computed as piece q again and not kept: no branch)
        unsigned qs[NP];
        float x[NP];
#pragma unroll
        for (int i = 0; i < NP; ++i) qs[i] = q + i * CW < q1 ? q + i * CW : q;
        if (bs) multi_fp8(BoolTag<true>{}, qs, x);
        else multi_fp8(BoolTag<false>{}, qs, x);
#pragma unroll
        for (int i = 0; i < NP; ++i) x[i] = warp_sum(x[i]);
        if (lane == 0)
#pragma unroll
          for (int i = 0; i < NP; ++i)
            if (q + i * CW < q1) put(q + i * CW, x[i]);
      }
    } else {
      // The warp's pieces: q0 + warp, q0 + warp + CW, .. two at a time (independent chains).
      for (unsigned q = q0 + warp; q < q1 && !RING_NOCOMPUTE; q += 2 * CW) {
        const bool two = q + CW < q1;
        float x0 = piece_acc(q), x1 = two ? piece_acc(q + CW) : 0.f;
        float v0 = warp_sum(x0), v1 = warp_sum(x1);
        if (lane == 0) {
          put(q, v0);
          if (two) put(q + CW, v1);
        }
      }
    }
    __syncwarp();
#if RING_STAMPS
    if (stamping && lane == 0 && t < RING_STAMP_ITEMS) {
      if (warp == 0) st_done0[t] = clock64();
      if (warp == CW - 1) st_done7[t] = clock64();
    }
#endif
    if (pair) {  // the first of the two: released, and the second's record is the item's from here on
      if (lane == 0) mbar_arrive(&empty[s]);
      if (++s == D) {
        s = 0;
        phase ^= 1u;
      }
      m = ring_ld16(&meta[s2]);
      ++t;
    }
    if (lane == 0) mbar_arrive(&empty[s]);  // the warp is done with the slot
    if (++s == D) {
      s = 0;
      phase ^= 1u;
    }
    // A whole-row unit's end: every warp's partials in pv, then warp w's rows w, w + CW (16 / CW rows), their groups
    // summed in order from 0 (ORDER: as dot_rows' t = 0 + v_0 + v_1 + ..), the epilogue. (pv's halves
    // alternate by unit: the next unit's writes cannot reach this one's before its end's join.)
    if (TC_WHOLE && ((m.y >> 9) & 1) && tcw && !partial && !RING_NOCOMPUTE) {
      // TC_WHOLE's unit end: the (weight, group, row) values in tcred, the rows' groups in order from 0
      // (ORDER: as mma_unit_bs's callers) and the epilogue; one join (the halves alternate by unit).
      __syncwarp();
      CONSUMER_SYNC();
      tc_epilogue(tcred + par * TC_RED, 16);
      par ^= 1u;
    } else if (!TC_WHOLE && ((m.y >> 9) & 1) && tcw && !RING_NOCOMPUTE && !(TC_DIAG & 2)) {
      // RING_TC's unit end (mma_unit_bs's order): every (weight, group, row)'s 8 chunk sums in warp order
      // (a split-K partial goes to memory), then the rows' groups in order from 0 and the epilogue.
      __syncwarp();
      CONSUMER_SYNC();
      float* rd = tcred + par * TC_RED;
      const unsigned nsub = Op::GU ? 2u : 1u, nr = sp.r1 - sp.r0;
      for (unsigned e = threadIdx.x; e < nsub * G * 16; e += CW * 32) {
        float* rr = rd + (size_t)(e / 16) * WARPS * 16 + e % 16;
        float v = 0.f;
#pragma unroll
        for (int k = 0; k < WARPS; ++k) v += rr[k * 16];  // ORDER: warps in order
#if RING_BREAK
        if ((e / 16) % G == 0) v += 1.0f;
#endif
        if (!partial) rr[0] = v;
        else if (e % 16 < nr) ((float*)out)[(size_t)(sp.g0 + (e / 16) % G) * wrows + sp.r0 + e % 16] = v;
      }
      if (!partial) {
        CONSUMER_SYNC();
        tc_epilogue(rd, WARPS * 16);
      }
      par ^= 1u;
    } else if (((m.y >> 9) & 1) && !partial && !RING_NOCOMPUTE) {
      __syncwarp();  // (lane 0's arrival above: the warp converged before the aligned bar.sync)
      CONSUMER_SYNC();
      if (lane == 0)
#pragma unroll
        for (int ri = 0; ri < 16 / CW; ++ri) {
          const unsigned j = warp + CW * ri;
          if (sp.r0 + j >= sp.r1) continue;
          float t0 = 0.f, t1 = 0.f;
          for (unsigned g = 0; g < G; ++g) t0 += pv[par][j * G + g];
          if (Op::GU)
            for (unsigned g = 0; g < G; ++g) t1 += pv[par][n + j * G + g];
          Op::epi((unsigned short*)out, sp.r0 + j, t0, t1, h0[ri]);
        }
      par ^= 1u;
    }
  }
#if RING_STAMPS
  // (the producer's stamps were written before its end marker's release; the last warp's before this join)
  CONSUMER_SYNC();
  if (stamping && threadIdx.x == 0) {
    printf("ring stamps: launch %u, word %u, %u slots, K %u (clock64 from item 0's issue)\n", (unsigned)RING_STAMPS, wi, D, K);
    for (unsigned t = 0; t < min(st_n, (unsigned)RING_STAMP_ITEMS); ++t)
      printf("ring item %u issue %lld free %lld land %lld done0 %lld land7 %lld done7 %lld\n", t, st_issue[t] - st_issue[0],
             t >= D ? st_free[t] - st_issue[0] : 0ll, st_land[t] - st_issue[0], st_done0[t] - st_issue[0],
             st_land7[t] - st_issue[0], st_done7[t] - st_issue[0]);
  }
#endif
}

// The kernels only when the ring is on (the host loads them only then): the default module stays as it was.
#if GEMV_RING
#define K_RING(name, OpT)                                                                            \
  extern "C" __global__ void __launch_bounds__(RING_THREADS, RING_BLOCKS) r_##name(const Word* prog, unsigned wi, unsigned nw, DevCtx c) { \
    extern __shared__ __align__(128) char smem[];                                                    \
    ring_launch<OpT>(prog, wi, nw, c, smem);                                                         \
  }
K_RING(gemv_norm, RingNorm)
K_RING(gemv_gate_up, RingGateUp)
K_RING(gemv_gated_norm_residual, RingGatedNormResidual)
K_RING(gemv_residual, RingResidual)
#endif
#undef CW
#undef CONSUMER_SYNC
