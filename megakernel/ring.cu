// GEMV_RING: the discrete GEMV kernels with their weights streamed through one block-wide shared-memory
// ring (r_* kernels, launched by the host instead of k_* when GEMV_RING is set).
//
// Why: the register streams keep about 2 KB of weights in flight per warp, 32 KB per SM, and reach
// 42-58 % of the read ceiling; with the arithmetic removed (GEMV_READ_ONLY) only 57-68 %
// (results/probe_16f76fa): the limit is the bytes in flight and each unit's ramp, not the arithmetic.
// H200 probe 5 (shared/device/H200.md, style G) streamed a step's weights at 93 % of the floor with
// one block per SM, a deep ring fed by bulk copies and chunks handed out by ticket. This is that shape
// for the engine's GEMV units (no code of the probe's is used).
//
// A unit's weight bytes, for each of its weights (sub 0; gate/up: the gate, then sub 1 the up), are
// its rows' k-ranges one after another (row r0 from group g0, .., row r1 - 1 to group g1: one
// contiguous range of memory when the unit spans whole rows, else a segment per row). That sequence is
// cut into 16 KB items, each copied by one bulk copy per row segment it touches (one copy for whole
// rows: many small copies from one thread measured 4.5x slower than the register stream, the issue
// rate of 1 KB copies being the limit). Pieces of one (row, k-group) are 1,024 fp8 or 2,048 bf16
// bytes and never straddle items. Thread 0 is also the producer: it issues every item whose slot is
// free, before consuming each item (non-blocking; it blocks only for the item the block needs next),
// running ahead across units: it takes the next unit's ticket as it starts a unit, so a block's ring
// stays full through unit boundaries. Every warp consumes every item in order (the slot's full
// barrier: the copies' bytes; its empty barrier: one arrival per warp), so the item sequence, and the
// phase of each barrier, is the same for all. RING_EARLY issues the block's first unit's copies
// before griddepcontrol.wait: weights never depend on the predecessor kernel.
//
// Bits: warp w computes rows w and w + 8 of each unit (its pieces, wherever they fall), every
// (row, group) partial exactly as dot_rows (lane l's chunks in order, elements in order, one fma each,
// then the butterfly), groups summed in order from 0, the same epilogues: the bits of the k_* kernels
// and of the megakernel, which the per-instruction diff of every run checks.
#ifndef RING_BREAK
#define RING_BREAK 0
#endif
#ifndef RING_NOCOMPUTE
#define RING_NOCOMPUTE 0  // DIAGNOSTIC, WRONG RESULTS: the consumers only wait for and release each item
#endif
#define RING_SLOT 16384u
#define RING_MAX 16
static_assert(RING_SLOTS >= 2 && RING_SLOTS <= RING_MAX, "RING_SLOTS is 2..16");

// The ring's byte offset in dynamic shared memory: after x (bf16, K) and 64 floats of block sums,
// 128-aligned (the host's ring_smem_bytes lays out the same).
__device__ __forceinline__ unsigned ring_base(unsigned K) { return (((K * 2 + 15) / 16) * 16 + 256 + 127) / 128 * 128; }

__device__ __forceinline__ void mbar_init_n(unsigned long long* b, unsigned n) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(b)), "r"(n) : "memory");
}
__device__ __forceinline__ void mbar_arrive(unsigned long long* b) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(b)) : "memory");
}
// Non-blocking: whether the phase of the given parity has completed.
__device__ __forceinline__ bool mbar_test(unsigned long long* b, unsigned parity) {
  unsigned ok;
  asm volatile("{\n .reg .pred p;\n mbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
               : "=r"(ok) : "r"(smem_addr(b)), "r"(parity) : "memory");
  return ok;
}

// The per-op parts of a ring GEMV: the prepared input and the per-row epilogue (GU: gate/up, two
// weights, the epilogue gets both totals).
struct RingNorm {
  static constexpr bool GU = false;
  static __device__ const unsigned short* prep(const DevCtx& c, const Word& w, char* smem) { return prepared_input<true>(c, w, SLOT_W1, smem, true); }
  static __device__ void epi(const DevCtx& c, const Word& w, unsigned r, float v, float) { B<unsigned short>(c, w.ops[SLOT_OUT0])[r] = f2bf(v); }
};
struct RingResidual {
  static constexpr bool GU = false;
  static __device__ const unsigned short* prep(const DevCtx& c, const Word& w, char* smem) { return prepared_input<true>(c, w, SLOT_W1, smem, true); }
  static __device__ void epi(const DevCtx& c, const Word& w, unsigned r, float v, float) {
    unsigned short* h = B<unsigned short>(c, w.ops[SLOT_OUT0]);
    h[r] = f2bf(bf2f(h[r]) + bf(v));
  }
};
struct RingGatedNormResidual {
  static constexpr bool GU = false;
  static __device__ const unsigned short* prep(const DevCtx& c, const Word& w, char* smem) { return gated_norm_input<true>(c, w, smem, true); }
  static __device__ void epi(const DevCtx& c, const Word& w, unsigned r, float v, float u) { RingResidual::epi(c, w, r, v, u); }
};
struct RingGateUp {
  static constexpr bool GU = true;
  static __device__ const unsigned short* prep(const DevCtx& c, const Word& w, char* smem) { return prepared_input<true>(c, w, SLOT_W2, smem, true); }
  static __device__ void epi(const DevCtx& c, const Word& w, unsigned r, float g, float u) {
    B<unsigned short>(c, w.ops[SLOT_OUT0])[r] = f2bf(bf(silu(bf(g))) * bf(u));
  }
};

template <typename Op>
__device__ void ring_launch(const Word* prog, unsigned wi, unsigned nw, const DevCtx& c, char* smem) {
  __shared__ unsigned long long full[RING_MAX], empty[RING_MAX];
  __shared__ uint4 meta[RING_MAX];  // (launch unit index, k-group, sub, end) of the slot's item
  const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const unsigned K = c.cols[prog[wi].ops[SLOT_IN0]], kb = (K + 127) / 128;
  char* ring = smem + ring_base(K);
  const unsigned D = min((unsigned)RING_SLOTS, (dynamic_smem_bytes() - ring_base(K)) / RING_SLOT);
  unsigned total = 0;
  for (unsigned k = 0; k < nw; ++k) total += prog[wi + k].units;
  unsigned* tk = c.tickets + 2 * wi;
  if (threadIdx.x == 0) {
    for (unsigned d = 0; d < D; ++d) {
      mbar_init_n(&full[d], 1);
      mbar_init_n(&empty[d], WARPS);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();

  // ---- the producer's state (thread 0's; the other threads carry it unused) ----
  unsigned p_i = blockIdx.x, p_next = 0, p_t = 0, p_c = 0, p_nc = 0, p_sub = 0, p_u = 0;
  bool p_have_next = false, p_unit_done = false, p_done = false;
  const Word* p_w = prog;
  GemvSpan p_s{0, 0, 0, 0};
  auto p_chunks = [&]() {  // items of the current (unit, sub): its bytes in 16 KB pieces
    unsigned short wid = (Op::GU && p_sub == 1) ? p_w->ops[SLOT_W1] : p_w->ops[SLOT_W0];
    unsigned eb = c.wbytes[wid] == 2 ? 2 : 1;
    p_nc = ((p_s.r1 - p_s.r0) * (min(K, p_s.g1 * KGROUP) - p_s.g0 * KGROUP) * eb + RING_SLOT - 1) / RING_SLOT;
    p_c = 0;
  };
  auto p_start = [&]() {  // unit p_i (< total) becomes the one being issued
    p_w = prog + launch_word_at(prog, wi, nw, &p_u, p_i, GEMV_REVERSE);
    p_s = gemv_span(*p_w, p_u, K);
    p_sub = 0;
    p_chunks();
    p_unit_done = false;
  };
  auto p_ticket = [&]() {  // the block's next unit (taken as a unit starts: its latency hides)
    p_next = GEMV_DYNAMIC ? gridDim.x + atomicAdd(tk, 1u) : p_i + gridDim.x;
    p_have_next = true;
  };
  // Issues the next item into its slot, which must be free; false when it must wait for a ticket.
  auto p_issue = [&]() -> bool {
    unsigned s = p_t % D;
    if (p_unit_done) {
      if (!p_have_next) return false;
      p_i = p_next;
      p_have_next = false;
      if (p_i >= total) {  // no more units: the end marker
        meta[s] = make_uint4(0, 0, 0, 1);
        mbar_arrive(&full[s]);
        ++p_t;
        p_done = true;
        return true;
      }
      p_start();
      p_ticket();
    }
    unsigned short wid = (Op::GU && p_sub == 1) ? p_w->ops[SLOT_W1] : p_w->ops[SLOT_W0];
    unsigned eb = c.wbytes[wid] == 2 ? 2 : 1;
    unsigned span = (min(K, p_s.g1 * KGROUP) - p_s.g0 * KGROUP) * eb, len = (p_s.r1 - p_s.r0) * span;
    unsigned v0 = p_c * RING_SLOT, v1 = min(len, v0 + RING_SLOT);  // the item's range of the sequence
    meta[s] = make_uint4(p_i, p_c, p_sub, 0);
    mbar_expect_tx(&full[s], v1 - v0);
    const char* base = (const char*)c.bufs[wid] + ((size_t)p_s.r0 * K + p_s.g0 * KGROUP) * eb;
    char* dst = ring + s * RING_SLOT;
    if (span == K * eb) {  // whole rows: the sequence is contiguous in memory
      bulk_to_shared(dst, base + v0, v1 - v0, &full[s]);
    } else {  // a segment per row (split-K units)
      for (unsigned v = v0; v < v1;) {
        unsigned j = v / span, e = min(v1, (j + 1) * span);
        bulk_to_shared(dst + (v - v0), base + (size_t)j * K * eb + (v - j * span), e - v, &full[s]);
        v = e;
      }
    }
    ++p_t;
    if (++p_c == p_nc) {
      if (++p_sub == ((Op::GU) ? 2u : 1u)) p_unit_done = true;
      else p_chunks();
    }
    return true;
  };
  // Issues items while their slots are free; blocks only while item need - 1 is not yet issued.
  auto produce = [&](unsigned need) {
    while (!p_done) {
      if (p_t >= D) {
        unsigned long long* e = &empty[p_t % D];
        unsigned par = (p_t / D - 1) & 1;  // the slot's previous item consumed by every warp
        if (!mbar_test(e, par)) {
          if (p_t >= need) return;
          mbar_wait(e, par);
        }
      }
      if (!p_issue()) return;
    }
  };

  if (threadIdx.x == 0) {
    p_start();
    if (RING_EARLY) produce(0);  // the first unit's items, as many as the ring holds
  }
  pdl_join();
  if (DEVICE_STOP && stopped(c)) {
    // The copies in flight land before the block leaves (no ticket was taken).
    if (threadIdx.x == 0)
      for (unsigned t = 0; t < p_t; ++t) mbar_wait(&full[t % D], (t / D) & 1);
    return;
  }
  if (threadIdx.x == 0) p_ticket();

  // ---- every warp consumes every item in order ----
  const unsigned short* xs = (const unsigned short*)smem;
  unsigned last_word = 0xffffffffu;
  float t0[2] = {0.f, 0.f}, t1[2] = {0.f, 0.f};  // the warp's rows' totals (t1: the up weight's)
  for (unsigned t = 0;; ++t) {
    if (threadIdx.x == 0) produce(t + 1);
    unsigned s = t % D;
    mbar_wait(&full[s], (t / D) & 1);
    uint4 m = lds16(&meta[s]);  // (ld.shared, volatile asm: after the barrier's acquire)
    if (m.w) break;
    unsigned u, widx = launch_word_at(prog, wi, nw, &u, m.x, GEMV_REVERSE);
    const Word& w = prog[widx];
    if (widx != last_word) {  // another word's input (the first, or a launch of several words)
      if (last_word != 0xffffffffu) __syncthreads();  // every warp is done reading the previous one
      xs = Op::prep(c, w, smem);
      last_word = widx;
    }
    GemvSpan sp = gemv_span(w, u, K);
    unsigned short wid = (Op::GU && m.z == 1) ? w.ops[SLOT_W1] : w.ops[SLOT_W0];
    bool bf16w = c.wbytes[wid] == 2, bs = c.wbytes[wid] == 1, partial = w.flags & FLAG_PARTIAL;
    unsigned eb = bf16w ? 2 : 1, G = sp.g1 - sp.g0, piece = KGROUP * eb;
    unsigned span = (min(K, sp.g1 * KGROUP) - sp.g0 * KGROUP) * eb, n = (sp.r1 - sp.r0) * G;
    // The item's pieces q0 .. q1 - 1 of the (unit, sub) sequence: piece q is row r0 + q / G, group
    // g0 + q % G, at (q / G) span + (q % G) piece. (The host takes the ring only where pieces never
    // straddle items: K a multiple of 1,024, or every (unit, sub) within one item.)
    bool single = (sp.r1 - sp.r0) * span <= RING_SLOT;
    unsigned q0 = single ? 0 : m.y * (RING_SLOT / piece), q1 = single ? n : min(n, q0 + RING_SLOT / piece);
    const char* slot = ring + s * RING_SLOT;
    // A lane's sum over piece q's chunks (dot_rows' order), for row r.
    auto piece_acc = [&](unsigned q, unsigned r) {
      unsigned g = sp.g0 + q % G, k0 = g * KGROUP, k1 = min(K, k0 + KGROUP);
      const char* pc = slot + (q / G) * span + (q % G) * piece - m.y * RING_SLOT;
      float acc = 0.f;
      if (bf16w) {
#pragma unroll
        for (int jj = 0; jj < 4; ++jj) {
          unsigned k = k0 + lane * 8 + jj * 256;
          if (k < k1) acc = chunk_bf16(lds16(pc + 2 * (k - k0)), xs + k, acc);
        }
      } else {
        const float* sc = c.scales[wid] + (size_t)(r / 128) * kb;
#pragma unroll
        for (int jj = 0; jj < 2; ++jj) {
          unsigned k = k0 + lane * 16 + jj * 512;
          if (k < k1) acc = chunk_fp8(lds16(pc + (k - k0)), xs + k, sc[k / 128], bs, acc);
        }
      }
      return acc;
    };
#pragma unroll
    for (int ri = 0; ri < 2 && !RING_NOCOMPUTE; ++ri) {
      unsigned j = warp + WARPS * ri, r = sp.r0 + j;
      // The piece's (row, group) partial v, taken in group order.
      auto emit = [&](unsigned q, float v) {
        unsigned g = sp.g0 + q % G;
#if RING_BREAK  // the op check's negative control for the ring kernels: every row's first piece off by 1
        if (g == sp.g0) v += 1.0f;
#endif
        if (partial) {
          if (lane == 0) B<float>(c, w.ops[SLOT_OUT0])[(size_t)g * w.rows + r] = v;
        } else if (Op::GU && m.z == 1) {
          t1[ri] = (g == sp.g0 ? 0.f : t1[ri]) + v;  // ORDER: k-groups in order, from 0
        } else {
          t0[ri] = (g == sp.g0 ? 0.f : t0[ri]) + v;
        }
        // The row's last piece of the unit's last weight: the epilogue.
        if (!partial && g + 1 == sp.g1 && (!Op::GU || m.z == 1) && lane == 0) Op::epi(c, w, r, t0[ri], t1[ri]);
      };
      unsigned a = max(q0, j * G), b = min(q1, (j + 1) * G);  // this row's pieces in the item
      // Two pieces at a time (independent chains), emitted in order.
      for (unsigned q = a; q < b; q += 2) {
        float x0 = piece_acc(q, r), x1 = q + 1 < b ? piece_acc(q + 1, r) : 0.f;
        float v0 = warp_sum(x0), v1 = warp_sum(x1);
        emit(q, v0);
        if (q + 1 < b) emit(q + 1, v1);
      }
    }
    __syncwarp();
    if (lane == 0) mbar_arrive(&empty[s]);  // the warp is done with the slot
  }
  // The ticket pair self-resets for the next launch (as K_GEMV: the block's last ticket was past the end).
  if (GEMV_DYNAMIC && threadIdx.x == 0 && atomicAdd(tk + 1, 1u) == gridDim.x - 1) {
    tk[0] = 0;
    tk[1] = 0;
  }
}

#define K_RING(name, OpT)                                                                            \
  extern "C" __global__ void __launch_bounds__(THREADS, RING_BLOCKS) r_##name(const Word* prog, unsigned wi, unsigned nw, DevCtx c) { \
    extern __shared__ __align__(128) char smem[];                                                    \
    ring_launch<OpT>(prog, wi, nw, c, smem);                                                         \
  }
K_RING(gemv_norm, RingNorm)
K_RING(gemv_gate_up, RingGateUp)
K_RING(gemv_gated_norm_residual, RingGatedNormResidual)
K_RING(gemv_residual, RingResidual)
