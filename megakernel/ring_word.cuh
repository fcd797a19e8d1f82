// The consumers' side of the megakernel's weight ring (ring.cuh has the loader and the pieces): a ring
// word's input prepared once a block, its pieces computed warp by warp, the last arriver's epilogue.
// Owns: the ring words' summation order (fp8_row_group's, on partials in global memory instead of
// shared memory: the same bits). Refuses: float atomics (the arrival counts are integers).

// A ring word's prepared input in shared memory (every block that computes any of its pieces; the same
// calls the ops make with `fresh`).
__device__ __forceinline__ const unsigned short* ring_prep(const DevCtx& c, const Word& w, char* smem) {
  switch (w.opcode) {
    case OP_GEMV_NORM:
    case OP_GEMV_RESIDUAL: return prepared_input(c, w, SLOT_W1, smem, true);  // (W1 unused: x as is)
    case OP_GEMV_GATE_UP: return prepared_input(c, w, SLOT_W2, smem, true);
    default: return gated_norm_input(c, w, smem, true);
  }
}

__device__ __forceinline__ void red_add_release(unsigned* p, unsigned v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ float ld_cg(const float* p) {
  float v;
  asm volatile("ld.global.cg.f32 %0, [%1];" : "=f"(v) : "l"(p));
  return v;
}

// The unit of a ring word that piece (rg, g) belongs to (gemv_span's inverse), and its piece count.
__device__ __forceinline__ unsigned ring_unit(const Word& w, const RingGeo& q, unsigned rg, unsigned g) {
  unsigned kp = 0;
  while ((kp + 1) * q.groups / w.k_parts <= g) ++kp;
  return (rg * 32 / w.unit_rows) * w.k_parts + kp;
}
__device__ __forceinline__ unsigned ring_unit_pieces(const Word& w, const RingGeo& q, unsigned u) {
  const GemvSpan s = gemv_span(w, u, q.K);
  return (s.r1 - s.r0 + 31) / 32 * q.nw * (s.g1 - s.g0);
}

// The epilogue of unit u by one warp (lane l: row 32 rg + l of each of the unit's row groups), once all
// its pieces' tile sums are in `part` (piece p's at p x 256: [8 tiles][32 rows], so that a warp's
// stores of its tile and the epilogue's loads of a tile are 128 contiguous bytes), the loads of
// RING_EPI_GROUPS groups in flight at once (one round trip for a unit of up to 8 k-groups). ORDER:
// fp8_row_group's (a group partial = 0 + tile 0 + tile 1 + .. in tile order; a row = 0 + partial g0 +
// partial g0 + 1 + .. in group order; gate's total then up's), so the bits are the discrete path's.
// Split-K words (FLAG_PARTIAL) store each group partial for their reduce word instead.
#define RING_EPI_GROUPS 8
__device__ __noinline__ void ring_epilogue(const DevCtx& c, const Word& w, const RingGeo& q, unsigned u, const float* part) {
  const GemvSpan s = gemv_span(w, u, q.K);
  const unsigned lane = threadIdx.x & 31;
  const bool partial = w.flags & FLAG_PARTIAL;
  const bool residual = w.opcode == OP_GEMV_RESIDUAL || w.opcode == OP_GEMV_GATED_NORM_RESIDUAL;
  unsigned short* out = B<unsigned short>(c, w.ops[SLOT_OUT0]);
  for (unsigned rg = s.r0 / 32; rg * 32 < s.r1; ++rg) {
    const unsigned row = rg * 32 + lane;
    const float hr = residual && !partial ? bf2f(out[row]) : 0.f;
    float tot[2] = {0.f, 0.f};
    for (unsigned i = 0; i < q.nw; ++i)
      for (unsigned g0 = s.g0; g0 < s.g1; g0 += RING_EPI_GROUPS) {
        float v[RING_EPI_GROUPS][KGROUP / 128];
#pragma unroll
        for (unsigned j = 0; j < RING_EPI_GROUPS; ++j) {
          const unsigned g = g0 + j;
          const unsigned nt = g < s.g1 ? (min(q.K, (g + 1) * KGROUP) - g * KGROUP) / 128 : 0;
          const float* pp = part + (size_t)((rg * q.nw + i) * q.groups + g) * 256 + lane;
#pragma unroll
          for (unsigned t = 0; t < KGROUP / 128; ++t) v[j][t] = t < nt ? ld_cg(pp + t * 32) : 0.f;
        }
#pragma unroll
        for (unsigned j = 0; j < RING_EPI_GROUPS; ++j) {
          const unsigned g = g0 + j;
          if (g >= s.g1) break;
          const unsigned nt = (min(q.K, (g + 1) * KGROUP) - g * KGROUP) / 128;
          float sum = 0.f;
#pragma unroll
          for (unsigned t = 0; t < KGROUP / 128; ++t)
            if (t < nt) sum += v[j][t];
          if (partial) B<float>(c, w.ops[SLOT_OUT0])[(size_t)g * w.rows + row] = sum;
          else tot[i] += sum;
        }
      }
    if (partial) continue;
    switch (w.opcode) {
      case OP_GEMV_NORM: out[row] = f2bf(tot[0]); break;
      case OP_GEMV_GATE_UP: out[row] = epi_swiglu(tot[0], tot[1]); break;
      default: out[row] = epi_residual(hr, tot[0]); break;
    }
  }
}

// The consumers' position in the ring (every consumer warp keeps its own copy: the warps take every
// slot, each at its own pace), and the pump (thread 0's; the other threads' copy is unused).
struct RingPos {
  unsigned slot, round;
  __device__ __forceinline__ void next() {
    if (++slot == MK_SLOTS) {
      slot = 0;
      ++round;
    }
  }
};

// The block's pieces of a ring word, by unit (RING_LIST at most between flushes; thread 0 writes).
#define RING_LIST 64
struct RingList {
  unsigned unit[RING_LIST];
  unsigned done[RING_LIST];  // the units whose last piece this block's flush counted
  unsigned n_done;
};

// The block's arrivals for its n listed pieces, then the epilogues of the units they completed. Every
// consumer thread: a join (every warp's sums stored), warp 0 fences once (release: every sum of the
// block before any count; cumulative through the join) and counts piece j on lane j % 32 (integer
// atomics; a unit is complete when its count reaches a multiple of its pieces: the counts only grow
// within a launch), fences again (acquire: the other blocks' sums before this block reads them), then
// the completed units' epilogues, warp w taking the w-th, w + 8-th, .. and signalling the word's counter.
__device__ __noinline__ void ring_flush(const DevCtx& c, const MkCtl& k, const Word& w, const RingGeo& q, unsigned wi, unsigned s, unsigned n,
                                        RingList* rl, unsigned* arrive, const float* part) {
  const unsigned warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  BLOCK_SYNC();
  if (warp == 0) {
    asm volatile("fence.acq_rel.gpu;" ::: "memory");
    unsigned nd = 0;
    for (unsigned j0 = 0; j0 < n; j0 += 32) {
      const unsigned j = j0 + lane;
      bool last = false;
      unsigned u = 0;
      if (j < n) {
        u = rl->unit[j];
        last = (atomicAdd(arrive + u, 1u) + 1) % ring_unit_pieces(w, q, u) == 0;
      }
      const unsigned b = __ballot_sync(0xffffffffu, last);
      if (last) rl->done[nd + __popc(b & ((1u << lane) - 1))] = u;
      nd += __popc(b);
    }
    asm volatile("fence.acq_rel.gpu;" ::: "memory");
    if (lane == 0) rl->n_done = nd;
  }
  BLOCK_SYNC();
  const unsigned nd = rl->n_done;
  for (unsigned d = warp; d < nd; d += WARPS) {
    const unsigned u = rl->done[d];
    const unsigned long long t0 = k.stamps && s == 0 ? global_ns() : 0;
    ring_epilogue(c, w, q, u, part);
    __syncwarp();
    if (lane == 0) {
      red_add_release(&k.counters[w.signal], 1u);
      if (k.stamps && s == 0) {  // the timeline: the unit's epilogue (its pieces ran on many blocks)
        unsigned long long* e = k.stamps + 4 * (size_t)(k.unit_base[wi] + u);
        e[0] = ((unsigned long long)wi << 48) | ((unsigned long long)blockIdx.x << 32) | u;
        e[1] = t0;
        e[2] = t0;
        e[3] = global_ns();
      }
    }
  }
  BLOCK_SYNC();  // (the list is refilled next)
}

// Warp by warp, every piece the block's pump put in the ring for ring word wi (up to its end marker):
// the warp's tile of the piece (both 16-row halves of k-tile `warp`: fp8_tiles' arithmetic on the slot's
// bytes) and its sums to the word's partials; thread 0 lists the piece's unit and fills the ring while it
// waits for a slot. At the end marker (or a full list) the block counts its pieces' arrivals and runs
// the epilogues of the units it completed (ring_flush): no fence or atomic a piece. xs: the prepared
// input. False when a wait ran past its limit (the error word holds `code`).
__device__ __noinline__ bool ring_pieces(const Word* prog, unsigned n_words, const DevCtx& c, const MkCtl& k, const Word& w, unsigned wi, unsigned s,
                                         MkRing* r, unsigned char* slots, RingPos& pos, MkPump& pump, RingList* rl, const unsigned short* xs, unsigned code) {
  const RingGeo q = ring_geo(c, w);
  const unsigned warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g8 = lane >> 2, cq = lane & 3;
  const unsigned T = q.kc / 128;
  float* part = k.ring_part + (size_t)k.ring_tab[2 * wi] * 256;
  const float* S[2] = {c.scales[w.ops[SLOT_W0]], c.scales[q.nw == 2 ? w.ops[SLOT_W1] : w.ops[SLOT_W0]]};
  unsigned* arrive = k.ring_arrive + k.ring_tab[2 * wi + 1];
  unsigned n = 0;  // pieces listed (the same on every warp: every warp takes every slot)
  for (;;) {
    // the slot, thread 0 filling the ring meanwhile (bounded: a hang becomes the error word)
    {
      unsigned long long t0 = 0;
      for (unsigned it = 0;; ++it) {
        if (threadIdx.x == 0) pump.fill(prog, n_words, c, k, r, slots);
#if RING_TRYWAIT  // the other warps wait in the barrier's suspended form instead of spinning
        if (warp != 0) {
          unsigned ok;
          asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                       : "=r"(ok) : "r"(smem_addr(&r->full[pos.slot])), "r"(pos.round & 1) : "memory");
          if (ok) break;
        } else
#endif
        if (mbar_test(&r->full[pos.slot], pos.round & 1)) break;
        if ((it & 15) == 0) {
          if (it == 0) t0 = global_ns();
          else if (global_ns() - t0 > k.timeout_ns || *(volatile unsigned*)k.error != 0) {
            atomicCAS(k.error, 0u, code);
            return false;
          }
        }
      }
    }
    const unsigned p = ((volatile unsigned*)r->hdr)[pos.slot];
    const unsigned char* sb = slots + (size_t)pos.slot * MK_RING_SLOT_BYTES;
    if (p == RING_END) {
      __syncwarp();
      if (lane == 0) mbar_arrive(&r->empty[pos.slot]);
      pos.next();
      ring_flush(c, k, w, q, wi, s, n, rl, arrive, part);
      return true;
    }
    const unsigned g = p % q.groups, i = (p / q.groups) % q.nw, rg = p / (q.groups * q.nw);
    const unsigned k0 = g * KGROUP, nt = (min(q.K, k0 + KGROUP) - k0) / 128;
    const unsigned kt = k0 + warp * 128, t = (kt % q.kc) / 128;
    uint4 wv[2][4];
    if (warp < nt) {
      const uint4* tile = (const uint4*)sb + (kt / q.kc - k0 / q.kc) * 2 * q.kc + lane;
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int j = 0; j < 4; ++j) wv[h][j] = lds16(tile + (h * T + t) * 128 + 32 * j);
    }
    __syncwarp();
    if (lane == 0) mbar_arrive(&r->empty[pos.slot]);  // the bytes are in registers: the slot can refill
    pos.next();
    if (threadIdx.x == 0) rl->unit[n] = ring_unit(w, q, rg, g);
#ifdef MK_LOADS_ONLY  // probe (wrong results): the pieces' bytes taken, no arithmetic, no sums stored
    if (false) {
#else
    if (warp < nt) {
#endif
      const float sc = fp8_tile_scale(S[i], q.K, rg, g) * 0x1p56f;
      const uint4 xa = lds16(xs + kt + 16 * cq), xb = lds16(xs + kt + 16 * cq + 8);
      const uint4 xc = lds16(xs + kt + 64 + 16 * cq), xd = lds16(xs + kt + 72 + 16 * cq);
#ifdef MK_BREAK_GEMV  // the negative control, as fp8_tiles'
      const unsigned xw[16] = {xb.x, xb.y, xb.z, xb.w, xa.x, xa.y, xa.z, xa.w, xd.x, xd.y, xd.z, xd.w, xc.x, xc.y, xc.z, xc.w};
#else
      const unsigned xw[16] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w, xc.x, xc.y, xc.z, xc.w, xd.x, xd.y, xd.z, xd.w};
#endif
      float* pp = part + (size_t)p * 256 + warp * 32;  // [tile][row]
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float d[4] = {0.f, 0.f, 0.f, 0.f}, e[4] = {0.f, 0.f, 0.f, 0.f};
        fp8_tile_mma(wv[h], xw, d, e);
        // D's column 0 (lanes cq = 0): rows g8 (d[0]) and g8 + 8 (d[2]) of half h; fp8_tiles' values
        if (cq == 0) {
          pp[h * 16 + g8] = sc * (d[0] + e[0]);
          pp[h * 16 + g8 + 8] = sc * (d[2] + e[2]);
        }
      }
    }
    if (++n == RING_LIST) {
      ring_flush(c, k, w, q, wi, s, n, rl, arrive, part);
      n = 0;
    }
  }
}

// At an early exit (the device-side stop, a hang): thread 0 waits for the copies still in flight into
// the ring (the puts its consumers never took) before the block leaves.
__device__ void ring_drain(const MkCtl& k, MkRing* r, const RingPos& pos, const MkPump& pump) {
  RingPos q = pos;
  for (unsigned n = 0; n < MK_SLOTS && (q.round < pump.round || (q.round == pump.round && q.slot < pump.slot)); ++n) {
    const unsigned long long t0 = global_ns();
    while (!mbar_test(&r->full[q.slot], q.round & 1) && global_ns() - t0 < k.timeout_ns) {
    }
    q.next();
  }
}
