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
// The launch's work is a sequence of items, each one 16 KB slot: (unit, k-group, sub) where sub picks
// the gate (0) or up (1) tile of gate/up, or for bf16 weights the unit's rows 0-7 (0) or 8-15 (1); fp8
// items hold the unit's 16 rows x 1,024 bytes of one k-group, bf16 items 8 rows x 2,048 bytes (one
// bulk copy per row: rows are K apart in memory). Thread 0 is also the producer: it issues every item
// whose slot is free, before consuming each item (non-blocking; it blocks only for the item the block
// needs next), running ahead across units: it takes the next unit's ticket as it starts a unit, so a
// block's ring stays full through unit boundaries. Every warp consumes every item in order (the slot's
// full barrier: the copies' bytes; its empty barrier: one arrival per warp), so the item sequence, and
// the phase of each barrier, is the same for all. RING_EARLY issues the block's first unit's copies
// before griddepcontrol.wait: weights never depend on the predecessor kernel.
//
// Bits: warp w computes rows w and w + 8 of each unit (bf16: row w of the half), every (row, group)
// partial exactly as dot_rows (lane l's chunks in order, elements in order, one fma each, then the
// butterfly), groups summed in order from 0, the same epilogues: the bits of the k_* kernels and of
// the megakernel, which the per-instruction diff of every run checks.
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
  unsigned p_i = blockIdx.x, p_next = 0, p_t = 0, p_g = 0, p_sub = 0, p_nsub = 1, p_u = 0;
  bool p_have_next = false, p_unit_done = false, p_done = false;
  const Word* p_w = prog;
  GemvSpan p_s{0, 0, 0, 0};
  auto p_start = [&]() {  // unit p_i (< total) becomes the one being issued
    p_w = prog + launch_word_at(prog, wi, nw, &p_u, p_i, GEMV_REVERSE);
    p_s = gemv_span(*p_w, p_u, K);
    p_g = p_s.g0;
    p_sub = 0;
    p_nsub = (Op::GU || c.wbytes[p_w->ops[SLOT_W0]] == 2) ? 2 : 1;
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
    unsigned ra = p_s.r0 + (eb == 2 ? 8 * p_sub : 0), rz = min(p_s.r1, ra + (eb == 2 ? 8 : 16));
    unsigned k0 = p_g * KGROUP, bytes = (min(K, k0 + KGROUP) - k0) * eb, n = rz > ra ? rz - ra : 0;
    meta[s] = make_uint4(p_i, p_g, p_sub, 0);
    mbar_expect_tx(&full[s], n * bytes);  // (n = 0: a plain arrival, the phase completes at once)
    const char* src = (const char*)c.bufs[wid] + ((size_t)ra * K + k0) * eb;
    for (unsigned j = 0; j < n; ++j) bulk_to_shared(ring + s * RING_SLOT + j * KGROUP * eb, src + (size_t)j * K * eb, bytes, &full[s]);
    ++p_t;
    if (++p_sub == p_nsub) {
      p_sub = 0;
      if (++p_g == p_s.g1) p_unit_done = true;
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
    unsigned g = m.y, k0 = g * KGROUP, k1 = min(K, k0 + KGROUP);
    const char* slot = ring + s * RING_SLOT;
#pragma unroll
    for (int ri = 0; ri < 2; ++ri) {
      if (bf16w && (unsigned)ri != m.z) continue;  // a bf16 item holds one of the two rows
      unsigned r = sp.r0 + warp + WARPS * ri;
      if (r >= sp.r1) continue;
      float acc = 0.f;
      if (bf16w) {
        const char* row = slot + warp * 2 * KGROUP;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          unsigned k = k0 + lane * 8 + j * 256;
          if (k < k1) acc = chunk_bf16(lds16(row + 2 * (k - k0)), xs + k, acc);
        }
      } else {
        const char* row = slot + (warp + WARPS * ri) * KGROUP;
        const float* sc = c.scales[wid] + (size_t)(r / 128) * kb;
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          unsigned k = k0 + lane * 16 + j * 512;
          if (k < k1) acc = chunk_fp8(lds16(row + (k - k0)), xs + k, sc[k / 128], bs, acc);
        }
      }
      float v = warp_sum(acc);
      if (partial) {
        if (lane == 0) B<float>(c, w.ops[SLOT_OUT0])[(size_t)g * w.rows + r] = v;
      } else if (Op::GU && m.z == 1) {
        t1[ri] = (g == sp.g0 ? 0.f : t1[ri]) + v;  // ORDER: k-groups in order, from 0
      } else {
        t0[ri] = (g == sp.g0 ? 0.f : t0[ri]) + v;
      }
    }
    __syncwarp();
    if (lane == 0) mbar_arrive(&empty[s]);  // the warp is done with the slot
    unsigned nsub = (Op::GU || bf16w) ? 2 : 1;
    if (!partial && g + 1 == sp.g1 && m.z + 1 == nsub && lane == 0) {  // the unit's last item
#pragma unroll
      for (int ri = 0; ri < 2; ++ri) {
        unsigned r = sp.r0 + warp + WARPS * ri;
        if (r < sp.r1) Op::epi(c, w, r, t0[ri], t1[ri]);
      }
    }
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
