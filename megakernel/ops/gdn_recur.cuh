// op_gdn_recur: the gated delta rule for value head j = unit (fp32): l2norm of its q/k head (j / (Hv/Hk)),
// q / sqrt(128), beta = bf(sigmoid(b)), decay = exp(-exp(A_log) softplus(a + dt_bias)); thread v owns
// state column v: kv = sum_k (S[k][v] decay) k[k]; delta = (v - kv) beta; S[k][v] = S[k][v] decay +
// k[k] delta; o[v] = sum_k S[k][v] q[k]. ORDER: k = 0..127 in order, as the CPU reference. Then the
// head's gated RMSNorm (z = IN4, the norm weight W3: gdn_gated_out) into OUT0, out_proj's input as is.
// A thread loads its half of a state column into registers first (its loads
// all in flight, issued before the norms so their latency overlaps them), then works from registers and
// stores it back once.
// The head's body, shared by op_gdn_recur and op_gdn_step (GdnStep), over one row or several (an M-row
// step's GdnRecur: the kept rows it commits, then its own rows, one after another, the state column
// kept in registers between them and stored once where the commit ends: the values a row loop would
// store and load back, so the bits of one-row steps): `mixed(m, qs, ks, vs)` fills shared q, k and v of head j for row m (f32 of the bf16
// conv outputs; called by every thread, for row 0 after the state loads are issued, followed by a block
// barrier), `out(m, v, o)` takes row m's output element v (one thread each). Every thread reaches the
// end (no early return: the caller may join the block after it).
// Shared memory: GDN_STEP_SMEM floats.
// One 128-wide head's gated RMSNorm by one warp, bf(bf(w * bf(x * rstd)) * silu(z)) (the one arithmetic
// of GdnStep's and GdnRecur's outputs): lane l holds the bf16 pairs at 2 l (cw[0], zw[0]) and 64 + 2 l
// (cw[1], zw[1]) of the head's values and gates, wn the norm weight at 2 l, 2 l + 1, 64 + 2 l, 65 + 2 l.
// ORDER of the sum of squares: the lane's four elements in that order, then the butterfly. Writes the
// pairs to dst[lane], dst[32 + lane].
__device__ __forceinline__ void gated_head(const DevCtx& c, const unsigned* cw, const unsigned* zw, const float* wn, unsigned* dst) {
  const unsigned d = 128, lane = threadIdx.x & 31;
  float x[4] = {lo_bf(cw[0]), hi_bf(cw[0]), lo_bf(cw[1]), hi_bf(cw[1])};
  float zz[4] = {lo_bf(zw[0]), hi_bf(zw[0]), lo_bf(zw[1]), hi_bf(zw[1])};
  float ss = 0.f;
#pragma unroll
  for (int e = 0; e < 4; ++e) ss += x[e] * x[e];
  ss = warp_sum(ss);
  float rstd = 1.0f / sqrtf(ss * (1.0f / (float)d) + c.eps);
  unsigned o[4];
#pragma unroll
  for (int e = 0; e < 4; ++e) o[e] = f2bf(bf(wn[e] * bf(x[e] * rstd)) * silu(zz[e]));
  dst[lane] = o[0] | (o[1] << 16);
  dst[32 + lane] = o[2] | (o[3] << 16);
}
// q, k, v, the two norms, two exchange rows; GdnStep's output, gates and norm weight
#define GDN_STEP_SMEM (7 * 128 + 2)
// gdn_rows: the body over `rows` rows (MR == 1: one), the state stored back after row `store` only (none
// when store >= rows), `gates(m, b, a)` giving row m's raw b and a (called by every thread).
// `stage()` (every thread; may join the block) runs once after the state loads are issued, before the
// first row: the M-row form loads every row's inputs into shared memory there (one round trip for all).
template <int MR, typename Stage, typename Gates, typename Mixed, typename Out>
__device__ void gdn_rows(const DevCtx& c, const Word& w, unsigned j, char* smem, unsigned rows_, unsigned store_, Stage stage, Gates gates, Mixed mixed, Out out) {
  const unsigned rows = MR == 1 ? 1u : rows_, store = MR == 1 ? 0u : store_;
  const unsigned d = 128;
  float* qs = (float*)smem;
  float* ks = qs + d;
  float* vs = ks + d;
  float* sh = vs + d;  // [0] q inv norm, [1] k inv norm
  float* S = B<float>(c, w.ops[SLOT_ST0]) + (size_t)j * d * d;
  static_assert(THREADS == 256, "two threads per state column of 128");
  // Thread t owns half h = t / 128 (k = 64 h .. 64 h + 63) of state column v = t % 128: 64 registers,
  // every thread busy. The sums over k keep their order: half 0 sums k = 0..63, hands its partial over
  // shared memory, half 1 continues with k = 64..127 (the same sequence of roundings as one thread).
  float* xch = sh + 2;     // [128]: half 0's partial sum of column v (kv, then o)
  float* dlt = xch + d;    // [128]: delta of column v, from half 1
  const unsigned v = threadIdx.x & (d - 1), h = threadIdx.x / d, k0 = h * (d / 2);
  float col[64];
#pragma unroll
  for (unsigned k = 0; k < d / 2; ++k) col[k] = S[(k0 + k) * d + v];
  const float dt_bias = B<float>(c, w.ops[SLOT_W1])[j], a_log = B<float>(c, w.ops[SLOT_W0])[j];
  stage();
  for (unsigned m = 0; m < rows; ++m) {
  // The head's gate inputs, loaded with the state (one round trip for all), then q, k and v.
  unsigned short b_raw, a_raw;
  gates(m, b_raw, a_raw);
  mixed(m, qs, ks, vs);
  BLOCK_SYNC();
  if (threadIdx.x < 2) {  // ORDER: sequential sum of squares, as the CPU reference's l2norm
    // 32 elements at a time into registers (16-byte shared loads issued together), then the chain
    // (4 x 32 = d elements: the head size is the constant 128).
    const float4* vq = (const float4*)(threadIdx.x == 0 ? qs : ks);
    float ss = 0.f;
    for (unsigned c8 = 0; c8 < 4; ++c8) {
      float4 e[8];
#pragma unroll
      for (unsigned i = 0; i < 8; ++i) e[i] = vq[8 * c8 + i];
#pragma unroll
      for (unsigned i = 0; i < 8; ++i) {
        ss += e[i].x * e[i].x;
        ss += e[i].y * e[i].y;
        ss += e[i].z * e[i].z;
        ss += e[i].w * e[i].w;
      }
    }
    sh[threadIdx.x] = 1.0f / sqrtf(ss + 1e-6f);
  }
  BLOCK_SYNC();
  float scale = sqrtf((float)d);
  if (threadIdx.x < d) {
    qs[threadIdx.x] = (qs[threadIdx.x] * sh[0]) / scale;
    ks[threadIdx.x] = ks[threadIdx.x] * sh[1];
  }
  BLOCK_SYNC();

  float b = bf2f(b_raw);
  float a = bf2f(a_raw);
  float beta = bf(sigm(b));
  float x = a + dt_bias;
  float sp = x > 20.0f ? x : log1pf(expf(x));
  float decay = expf(-expf(a_log) * sp);
  float kv = 0.f;
  if (h == 0) {
#pragma unroll
    for (unsigned k = 0; k < d / 2; ++k) kv += (col[k] * decay) * ks[k];
    xch[v] = kv;
  }
  BLOCK_SYNC();
  if (h == 1) {
    kv = xch[v];
#pragma unroll
    for (unsigned k = 0; k < d / 2; ++k) kv += (col[k] * decay) * ks[k0 + k];
    float vv = vs[v];
    dlt[v] = (vv - kv) * beta;
  }
  BLOCK_SYNC();
  float delta = dlt[v], o = 0.f;
  if (h == 0) {
#pragma unroll
    for (unsigned k = 0; k < d / 2; ++k) {
      float sn = col[k] * decay + ks[k] * delta;
      if (m == store) S[k * d + v] = sn;
      col[k] = sn;
      o += sn * qs[k];
    }
    xch[v] = o;  // (half 1 read the kv partial before the last barrier)
  }
  BLOCK_SYNC();
  if (h == 1) {
    o = xch[v];
#pragma unroll
    for (unsigned k = 0; k < d / 2; ++k) {
      float sn = col[k] * decay + ks[k0 + k] * delta;
      if (m == store) S[(k0 + k) * d + v] = sn;
      col[k] = sn;
      o += sn * qs[k0 + k];
    }
    out(m, v, f2bf(o));
  }
  if (m + 1 < rows) BLOCK_SYNC();  // the next row refills q, k, v and the exchange rows
  }

}

// gdn_head: MR rows of the word's own inputs (IN1 = b, IN2 = a on row views), the state stored after
// the last (GdnStep's, and a one-row program's GdnRecur).
template <int MR, typename Mixed, typename Out>
__device__ __forceinline__ void gdn_head(const DevCtx& c, const Word& w, unsigned j, char* smem, Mixed mixed, Out out) {
  gdn_rows<MR>(
      c, w, j, smem, MR, MR - 1, [] {},
      [&](unsigned m, unsigned short& b, unsigned short& a) {
        const DevCtx rv = MR == 1 ? c : row_view(c, m);
        b = B<unsigned short>(rv, w.ops[SLOT_IN1])[j];
        a = B<unsigned short>(rv, w.ops[SLOT_IN2])[j];
      },
      mixed, out);
}

// The deferred form (M-row programs, ISA `GdnRecur`): the previous step's first n = ctrl[0][CTRL_COMMIT]
// kept rows of head j (ST1 [M][heads][GDN_HIST_HEAD]: k, v, b, a) replayed into the state (q = 0,
// outputs dropped: the state update does not read q), the state stored after the last of them, then the
// step's M rows from it in registers (not stored), each row's k, v, b and a kept for the next commit.
// Every row's inputs are staged in shared memory first (GDN_STAGE bf16 a row after GDN_STEP_SMEM floats:
// q, k, v, b, a; one round trip for the n + M rows instead of one a row), the kept rows read before the
// step's own rows overwrite them (a barrier between). A step row's outputs go to its stage row's q (read
// before them), then warp m gated-norms row m's (gated_head, z = IN4, the norm weight W3) into OUT0.
#define GDN_STAGE (3 * 128 + 2)
// Warp-wide: head j's gated norm of the bf16 outputs `ow` (pairs, shared memory) with row view r's z
// (IN4) and the norm weight (W3) into r's OUT0 (gated_head).
__device__ __forceinline__ void gdn_gated_out(const DevCtx& c, const Word& w, unsigned j, const DevCtx& r, const unsigned* ow) {
  const unsigned d = 128, lane = threadIdx.x & 31;
  const unsigned* z = (const unsigned*)(B<unsigned short>(r, w.ops[SLOT_IN4]) + j * d);
  const float* nw = B<float>(c, w.ops[SLOT_W3]);
  const unsigned cw[2] = {ow[lane], ow[32 + lane]}, zw[2] = {z[lane], z[32 + lane]};
  const float wn[4] = {nw[2 * lane], nw[2 * lane + 1], nw[64 + 2 * lane], nw[65 + 2 * lane]};
  gated_head(c, cw, zw, wn, (unsigned*)(B<unsigned short>(r, w.ops[SLOT_OUT0]) + j * d));
}
#if !PREFILL
__device__ void gdn_recur_rows(const DevCtx& c, const Word& w, unsigned j, char* smem) {
  const unsigned d = 128, hk = w.arg0, hv = w.rows, qk = j / (hv / hk), key_dim = hk * d, t = threadIdx.x;
  // (n <= M as the host sets it; clamped so that a corrupt control block cannot stage past the shared
  // memory launch.rs gives the word)
  const unsigned n = min(B<unsigned>(c, w.ops[SLOT_IN3])[CTRL_COMMIT], (unsigned)M_ROWS);
  unsigned short* kept = B<unsigned short>(c, w.ops[SLOT_ST1]);
  unsigned short* st = (unsigned short*)(smem + GDN_STEP_SMEM * 4);  // [n + M][GDN_STAGE]
  auto row = [&](unsigned r) { return kept + ((size_t)r * hv + j) * GDN_HIST_HEAD; };
  gdn_rows<M_ROWS>(
      c, w, j, smem, n + M_ROWS, n - 1,
      [&] {
        for (unsigned e = t; e < (n + M_ROWS) * d; e += THREADS) {
          const unsigned m = e / d, i = e % d;
          unsigned short* s = st + m * GDN_STAGE;
          if (m < n) {
            s[i] = 0;  // (q: bf16 +0)
            s[d + i] = row(m)[i];
            s[2 * d + i] = row(m)[d + i];
          } else {
            const unsigned short* mx = B<unsigned short>(row_view(c, m - n), w.ops[SLOT_IN0]);
            s[i] = mx[qk * d + i];
            s[d + i] = mx[key_dim + qk * d + i];
            s[2 * d + i] = mx[2 * key_dim + j * d + i];
          }
        }
        for (unsigned m = t; m < n + M_ROWS; m += THREADS) {
          unsigned short* s = st + m * GDN_STAGE;
          if (m < n) {
            s[3 * d] = row(m)[2 * d];
            s[3 * d + 1] = row(m)[2 * d + 1];
          } else {
            const DevCtx rv = row_view(c, m - n);
            s[3 * d] = B<unsigned short>(rv, w.ops[SLOT_IN1])[j];
            s[3 * d + 1] = B<unsigned short>(rv, w.ops[SLOT_IN2])[j];
          }
        }
        BLOCK_SYNC();
        // the step's rows kept for the next commit (every kept row was read above)
        for (unsigned e = t; e < M_ROWS * (2 * d + 2); e += THREADS) {
          const unsigned m = e / (2 * d + 2), i = e % (2 * d + 2);
          row(m)[i] = st[(n + m) * GDN_STAGE + d + i];  // k, v, b, a: the stage's from its k on
        }
      },
      [&](unsigned m, unsigned short& b, unsigned short& a) {
        b = st[m * GDN_STAGE + 3 * d];
        a = st[m * GDN_STAGE + 3 * d + 1];
      },
      [&](unsigned m, float* qs, float* ks, float* vs) {
        if (t < d) {
          qs[t] = bf2f(st[m * GDN_STAGE + t]);
          ks[t] = bf2f(st[m * GDN_STAGE + d + t]);
          vs[t] = bf2f(st[m * GDN_STAGE + 2 * d + t]);
        }
      },
      [&](unsigned m, unsigned v, unsigned short o) {
        if (m >= n) st[m * GDN_STAGE + v] = o;
      });
  BLOCK_SYNC();
  static_assert(M_ROWS <= WARPS, "GdnRecur: a warp per row's gated norm");
  const unsigned wi = t >> 5;
  if (wi < M_ROWS) gdn_gated_out(c, w, j, row_view(c, wi), (const unsigned*)(st + (n + wi) * GDN_STAGE));
}
#else
// (a prefill program's recurrence is GdnChunk's: the validator refuses GdnRecur there)
__device__ void gdn_recur_rows(const DevCtx&, const Word&, unsigned, char*) { __trap(); }
#endif

__device__ void op_gdn_recur(const DevCtx& c, const Word& w, unsigned u, char* smem, bool) {
  if (M_ROWS > 1) {
    gdn_recur_rows(c, w, u, smem);
    return;
  }
  const unsigned d = 128;
  unsigned j = u, hk = w.arg0, hv = w.rows, qk = j / (hv / hk), key_dim = hk * d;
  const unsigned short* mixed = B<unsigned short>(c, w.ops[SLOT_IN0]);
  unsigned short* os = (unsigned short*)((float*)smem + 5 * d + 2);  // the head's outputs (GdnStep's room)
  gdn_head<1>(
      c, w, j, smem,
      [&](unsigned, float* qs, float* ks, float* vs) {
        if (threadIdx.x < d) {
          qs[threadIdx.x] = bf2f(mixed[qk * d + threadIdx.x]);
          ks[threadIdx.x] = bf2f(mixed[key_dim + qk * d + threadIdx.x]);
          vs[threadIdx.x] = bf2f(mixed[2 * key_dim + j * d + threadIdx.x]);
        }
      },
      [&](unsigned, unsigned v, unsigned short o) { os[v] = o; });
  BLOCK_SYNC();
  if (threadIdx.x < 32) gdn_gated_out(c, w, j, c, (const unsigned*)os);
}
