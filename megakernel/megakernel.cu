// The megakernel: one cooperatively launched persistent kernel (MEGA_BLOCKS_PER_SM blocks per SM, the
// generated header's: 2, at the GEMV kernels' 128 registers) that
// executes the whole program of one step, or of n_steps steps (the in-kernel token loop: EndStep
// advances the control block on the device, a grid join separates steps). Blocks walk the words in
// program order; the units of a word are handed out dynamically (an integer atomic per word), so which
// block runs a unit never changes its bits: a unit is a fixed piece of work and calls the same op_* as
// the discrete path's k_* kernels. Before a unit runs, its word's counter must reach the word's target
// (acquire load by one thread, bounded by a wall-clock limit: a hang becomes an error naming the first
// word that hung); after it, its counter is incremented (release). Integer atomics only. The host
// zeroes the counters, unit tickets and the step count before every launch; within a launch they only
// grow: in step s a word's tickets are s * (units + gridDim.x) onwards (every block takes each word's
// units plus one ticket past the end, per step) and its wait target is wait_target + s * wait_stride
// (its counter's increments per step).

__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}


__device__ __noinline__ void dispatch(const DevCtx& c, const Word& w, unsigned u, char* smem, bool fresh) {
  switch (w.opcode) {
    case OP_EMBED: op_embed(c, w, u, smem, fresh); break;
    case OP_GEMV_NORM: op_gemv_norm(c, w, u, smem, fresh); break;
    case OP_GEMV_GATE_UP: op_gemv_gate_up(c, w, u, smem, fresh); break;
    case OP_GEMV_RESIDUAL: op_gemv_residual(c, w, u, smem, fresh); break;
    case OP_REDUCE_STORE: op_reduce_store(c, w, u, smem, fresh); break;
    case OP_REDUCE_RESIDUAL: op_reduce_residual(c, w, u, smem, fresh); break;
    case OP_GDN_CONV: op_gdn_conv(c, w, u, smem, fresh); break;
    case OP_GDN_RECUR: op_gdn_recur(c, w, u, smem, fresh); break;
    case OP_ATTN_KV: op_attn_kv(c, w, u, smem, fresh); break;
    case OP_ATTN_SCORES: op_attn_scores(c, w, u, smem, fresh); break;
    case OP_ATTN_PV: op_attn_pv(c, w, u, smem, fresh); break;
    case OP_ATTN_REDUCE_GATE: op_attn_reduce_gate(c, w, u, smem, fresh); break;
    case OP_LM_HEAD: op_lm_head(c, w, u, smem, fresh); break;
    case OP_ARGMAX: op_argmax(c, w, u, smem, fresh); break;
    case OP_END_STEP: op_end_step(c, w, u, smem, fresh); break;
    case OP_GDN_STEP: op_gdn_step(c, w, u, smem, fresh); break;
#ifdef MK_MTP  // (the drafter's fc: its case moves ptxas's allocation of the whole dispatch, 272 / 648 bytes of
               // spills to 608 / 1,352, so only a drafter's program compiles it: the host defines MK_MTP)
    case OP_MTP_FC: op_mtp_fc(c, w, u, smem, fresh); break;
#endif
    default: break;
  }
}

// Thread 0 waits until *p >= target (acquire), bounded by the time limit and stopping at once when
// another block already stopped; on a timeout `code` (1 + the word, or n_words + 1 for the join
// between steps) and the step `s` are recorded, the first hang kept. Returns to every thread whether
// the wait succeeded.
__device__ bool block_wait(const MkCtl& k, const unsigned* p, unsigned target, unsigned code, unsigned s, unsigned* ok_s) {
  if (threadIdx.x == 0) {
    *ok_s = 1;
    unsigned long long t0 = global_ns();
    while (ld_acquire(p) < target) {
      if (global_ns() - t0 > k.timeout_ns || *(volatile unsigned*)k.error != 0) {
        if (atomicCAS(k.error, 0u, code) == 0u) k.error[1] = s;
        *ok_s = 0;
        break;
      }
      __nanosleep(64);  // (0, 512, 2000 ns measured no better: results/issue25_probe_73304db run4)
    }
  }
  BLOCK_SYNC();
  bool ok = *ok_s != 0;
  BLOCK_SYNC();
  return ok;
}

extern "C" __global__ void __launch_bounds__(THREADS, MEGA_BLOCKS_PER_SM) megakernel(const Word* prog, unsigned n_words, DevCtx c, MkCtl k) {
#if PREFILL
  __trap();  // (a prefill program runs on the graph path only: the host refuses it here first)
#else
  extern __shared__ __align__(16) char smem[];
  __shared__ unsigned unit_s[2], ok_s, stop_s, ready_s;
  unsigned par = 0;
  const unsigned G = gridDim.x;
  for (unsigned s = 0; s < k.n_steps; ++s) {
    if (s > 0) {
      // The join between steps: every block finished step s - 1 (so no unit of it still reads a buffer
      // this step overwrites). Then the device-side stop: did step s - 1 produce the stop token? Decided
      // from the step's token (fixed once the join is passed, written before the EndStep block's release
      // of step_done), not from the stopped flag, which step s's EndStep may set while a slow block
      // has yet to read it (that block would return without joining, and the others hang).
      if (!block_wait(k, k.step_done, s * G, n_words + 1, s, &ok_s)) return;
      if (threadIdx.x == 0) stop_s = c.stop[0] != 0 && ((volatile unsigned*)k.tokens)[s - 1] == c.stop[0] - 1;
      BLOCK_SYNC();
      if (stop_s) return;
    }
    unsigned prepared = 0xffffffffu;  // the word whose GEMV input shared memory holds ; none at a step's start
    for (unsigned wi = 0; wi < n_words; ++wi) {
      Word w = prog[wi];
      const unsigned first_ticket = s * (w.units + G);
      // The counter is looked at until the block has once seen it at its target (it only
      // grows within a launch: later units of the word need no look), and the next unit's ticket is
      // taken before the fence that publishes this unit (its round trip overlaps the fence's).
      bool seen = w.wait == NO_COUNTER;
      unsigned long long t_ticket = 0;
      const bool stamp = k.stamps && s == 0 && threadIdx.x == 0;
      if (threadIdx.x == 0) {
        unit_s[par] = atomicAdd(&k.next[wi], 1u) - first_ticket;
        if (stamp) t_ticket = global_ns();
      }
      BLOCK_SYNC();
      unsigned u = unit_s[par];
      par ^= 1u;  // unit_s is double-buffered: the slot written next was read before the last barrier
      while (u < w.units) {
        unsigned long long t_ready = t_ticket;
        if (!seen) {
          // One look at the counter first (acquire, then the barrier: as block_wait); only a block that
          // must wait then waits.
          const unsigned* ctr = &k.counters[w.wait];
          const unsigned target = w.wait_target + s * k.wait_stride[wi];
          if (threadIdx.x == 0) ready_s = ld_acquire(ctr) >= target;
          BLOCK_SYNC();
          if (!ready_s && !block_wait(k, ctr, target, wi + 1, s, &ok_s)) return;
          if (stamp) t_ready = global_ns();
          seen = true;
          // Every thread reads what the producers wrote after the acquire by thread 0 and the barrier.
        }
        for_rows(c, w, u, [&](const DevCtx& r, bool row, unsigned ru) { dispatch(r, w, ru, smem, row || wi != prepared); });
        prepared = wi;
        BLOCK_SYNC();
        if (threadIdx.x == 0) {
          unsigned next = atomicAdd(&k.next[wi], 1u);
          // EndStep (one unit) just moved the token into the control block: keep it for the host.
          if (w.opcode == OP_END_STEP) k.tokens[s] = B<unsigned>(c, w.ops[SLOT_IN0])[1];
          __threadfence();
          atomicAdd(&k.counters[w.signal], 1u);
          unit_s[par] = next - first_ticket;
          unsigned long long t_done = stamp ? global_ns() : 0;
          if (stamp) {
            unsigned long long* e = k.stamps + 4 * (size_t)(k.unit_base[wi] + u);
            e[0] = ((unsigned long long)wi << 48) | ((unsigned long long)blockIdx.x << 32) | u;
            e[1] = t_ticket;
            e[2] = t_ready;
            e[3] = t_done;
          }
          t_ticket = t_done;
        }
        BLOCK_SYNC();
        u = unit_s[par];
        par ^= 1u;
      }
    }
    if (threadIdx.x == 0) {
      __threadfence();
      atomicAdd(k.step_done, 1u);
    }
  }
#endif
}
