//! The compiler: a model config and a target (SM count, threads per block, M rows, context) lowered
//! into the program of one decode step. No CUDA here: scheduling research runs in unit tests.
//!
//! Owns: the order of words, their unit shapes (row slices, split-K), buffers and counters. Every word
//! of a stage waits for the whole previous stage (one counter per stage); the words of one stage are
//! independent and may run concurrently. Refuses: nondeterminism (the same input gives the same
//! program, byte for byte: no hash-map iteration, no clocks).
//!
//! Unit shapes are starting points sized for the H200 (132 SMs), to be re-derived by measurement on
//! the GPU (issues 5, 6 and 25): GEMV units of 32 rows (fp8: one chunk row group, two mma tiles of
//! rows; always a multiple of 32 for fp8 weights); split-K when a GEMV has
//! fewer than `SPLIT_BELOW_UNITS_PER_SM` row slices per SM, into at most one part per 1,024-wide
//! k-group, so dynamic unit handout has enough small units to balance the SMs.

mod drafter;
mod head;

pub use drafter::{compile_drafter, compile_drafter_pruned, DraftInput};

use crate::bail;
use crate::error::{Context, Result};
use crate::isa::access::{ATTN_HEAD_DIM, CHUNK_ROWS, CTRL_LEN, GDN_HEAD_DIM, GDN_HIST_HEAD, KGROUP};
use crate::isa::{
    slot, BufKind, Buffer, GdnLowering, Opcode, Program, Target, UnitPolicy, Word, FLAG_LAST_ROW, FLAG_PARTIAL,
    FLAG_ROW_UNITS, FORMAT, NONE, NO_COUNTER,
};
use crate::model::config::{LayerKind, ModelConfig};
use crate::model::forward::ATTN_PART;
use crate::model::tensors::{expected_tensors, Dt, TensorSpec};

/// Output rows per GEMV unit by default (one chunk row group: two tensor-core tiles of rows;
/// `Target::gemv_unit_rows`).
pub const GEMV_UNIT_ROWS: u32 = crate::isa::DEFAULT_GEMV_UNIT_ROWS;
/// Split a GEMV's reduction axis when it has fewer row slices than this many per SM.
pub const SPLIT_BELOW_UNITS_PER_SM: u32 = 4;
/// Blocks per SM a GEMV launch keeps resident (the kernels' launch bounds, `GEMV_MIN_BLOCKS` in
/// megakernel/common.cuh, 2 since results/stream_f8ddd5c; the megakernel's 2 too): a launch's units run in
/// rounds of this many per SM.
pub const GEMV_BLOCKS_PER_SM: u32 = 2;
/// What a split costs (its reduce stage: one more launch and a pass over the partials), in rounds of
/// one k-group unit per resident block (estimated at 4 blocks per SM and 16-row units: a reduce launch measured
/// about 5 us on the 27B, a round of 16 KB units on 528 blocks is 1.9 us at 4.62 TB/s; not refitted
/// for 2 blocks per SM, where a round is 264 units: the 27B's shapes came out the same).
pub const SPLIT_COST_ROUNDS: u32 = 2;
/// What starting a unit costs beyond its k-groups, in the same rounds (fitted to one measurement at 4
/// blocks per SM: the 27B's down projection took 58.7 us per layer as 640 units of 8-9 groups and 67.1
/// us as 5,440 units of one group, results/balanced_0b2f3f9; a fit of 1.1).
pub const UNIT_OVERHEAD_ROUNDS: u32 = 1;
/// Output rows of a bf16 GEMV unit (the GDN's a and b projections; at most the target's unit rows).
pub const BF16_UNIT_ROWS: u32 = 8;
/// Vocabulary rows per lm_head unit.
pub const LM_UNIT_ROWS: u32 = 64;
/// Conv channels per GdnConv unit; hidden elements per Embed unit; rows per split-K reduce unit.
pub const CONV_UNIT: u32 = 128;
pub const EMBED_UNIT: u32 = 1024;
pub const REDUCE_UNIT: u32 = 128;

/// The default target: one H200 (the kernels run 256 threads per block).
pub fn h200(m_rows: u32) -> Target {
    Target {
        sms: 132,
        threads: 256,
        m_rows,
        max_context: 32768,
        units: UnitPolicy::Balanced,
        gemv_unit_rows: GEMV_UNIT_ROWS,
        gdn: GdnLowering::Fused,
        prefill: false,
        head_mask: false,
    }
}

/// The buffers an attention layer's words use (shared by every attention layer of a program).
#[derive(Clone, Copy)]
struct AttnBufs {
    ctrl: u16,
    h: u16,
    q: u16,
    k: u16,
    v: u16,
    scores: u16,
    stats: u16,
    attn_part: u16,
    attn_out: u16,
    parts: usize,
}

struct Builder<'a> {
    t: &'a Target,
    specs: Vec<TensorSpec>,
    buffers: Vec<Buffer>,
    words: Vec<Word>,
    /// The counter the next stage waits on and its full count.
    prev: Option<(u32, u32)>,
    n_counters: u32,
    /// Scratch buffers for split-K partials, one per split word of a stage (reused across stages).
    partial: Vec<u16>,
    partial_need: Vec<u64>,
    layer: u16,
}

impl<'a> Builder<'a> {
    fn new(cfg: &ModelConfig, t: &'a Target) -> Builder<'a> {
        Builder {
            t,
            specs: expected_tensors(cfg),
            buffers: Vec::new(),
            words: Vec::new(),
            prev: None,
            n_counters: 0,
            partial: Vec::new(),
            partial_need: Vec::new(),
            layer: 0,
        }
    }
    /// The attention layers' activations and scratch (every attention layer of a program shares them).
    fn attn_bufs(&mut self, cfg: &ModelConfig, ctrl: u16, h: u16) -> AttnBufs {
        let parts = self.t.max_context as usize / ATTN_PART;
        let q = self.act("q", 2 * cfg.attn_q_dim());
        let k = self.act("k", cfg.attn_kv_dim());
        let v = self.act("v", cfg.attn_kv_dim());
        let scores = self.scratch("attn_scores", cfg.n_heads * parts * ATTN_PART);
        let stats = self.scratch("attn_stats", cfg.n_heads * parts * 2);
        let attn_part = self.scratch("attn_partial", cfg.n_heads * parts * ATTN_HEAD_DIM);
        let attn_out = self.act("attn_out", cfg.attn_q_dim());
        AttnBufs { ctrl, h, q, k, v, scores, stats, attn_part, attn_out, parts }
    }
    fn program(self, name: &str, shape: String) -> Program {
        Program {
            format: FORMAT,
            model: name.to_string(),
            shape,
            target: self.t.clone(),
            n_counters: self.n_counters,
            buffers: self.buffers,
            words: self.words,
        }
    }
    fn buf(&mut self, name: &str, kind: BufKind, rows: u64, cols: u64, elem_bytes: u32) -> u16 {
        self.buffers.push(Buffer { name: name.to_string(), kind, rows, cols, elem_bytes });
        (self.buffers.len() - 1) as u16
    }
    fn act(&mut self, name: &str, cols: usize) -> u16 {
        let m = self.t.m_rows as u64;
        self.buf(name, BufKind::Activation, m, cols as u64, 2)
    }
    fn scratch(&mut self, name: &str, cols: usize) -> u16 {
        let m = self.t.m_rows as u64;
        self.buf(name, BufKind::Scratch, m, cols as u64, 4)
    }
    /// The buffer of checkpoint tensor `name` (its scale travels with it for fp8).
    fn weight(&mut self, name: &str) -> Result<u16> {
        let Some(s) = self.specs.iter().find(|s| s.name == name) else {
            bail!("compile: the model has no tensor {name}");
        };
        let (rows, cols) = match s.shape.len() {
            1 => (1, s.shape[0]),
            _ => (s.shape[0], s.shape[1..].iter().product()),
        };
        let bytes = if s.dtype == Dt::F8E4M3 { 1 } else { 2 };
        Ok(self.buf(name, BufKind::Weight, rows as u64, cols as u64, bytes))
    }
    fn word(&self, op: Opcode, rows: u32, unit_rows: u32) -> Word {
        let mut w = Word::new(op);
        w.layer = self.layer;
        w.m_rows = self.t.m_rows as u8; // 1-8, checked by compile() and compile_drafter()
        w.rows = rows;
        w.unit_rows = unit_rows as u16; // the constants here and GEMV unit rows <= 256, checked by compile() and compile_drafter()
        if self.t.prefill && matches!(op, Opcode::LmHead | Opcode::Argmax) {
            // a prefill's head: the next token after the prompt, the last row's
            w.flags |= FLAG_LAST_ROW;
        } else if w.m_rows > 1 && op.row_split() {
            // the M rows side by side on as many units (in a unit one after another, the attention
            // words of an M = 8 step took 3.6 ms of 36.8: results/issue27_verified_692c8ee)
            w.flags |= FLAG_ROW_UNITS;
        }
        w.units = w.expected_units() as u32;
        w
    }
    /// Appends a stage: every word waits for the previous stage and signals a new counter.
    fn stage(&mut self, mut words: Vec<Word>) {
        let c = self.n_counters;
        self.n_counters += 1;
        let mut count = 0;
        for w in &mut words {
            (w.wait, w.wait_target) = self.prev.unwrap_or((NO_COUNTER, 0));
            w.signal = c;
            count += w.units;
        }
        self.words.extend(words);
        self.prev = Some((c, count));
    }
    /// A GEMV word over `rows` outputs reading `k` inputs. It is split-K when its whole stage has
    /// fewer than `SPLIT_BELOW_UNITS_PER_SM` row slices per SM (`stage_rows` output rows over all the
    /// stage's GEMVs: a small GEMV beside big ones needs no split, the big ones keep the SMs busy). A
    /// split word writes partials to the `which`-th partial buffer, else it writes `out`.
    fn gemv(
        &mut self,
        op: Opcode,
        rows: usize,
        k: usize,
        out: u16,
        which: usize,
        stage_rows: usize,
        weight: &str,
    ) -> (Word, bool) {
        let groups = k.div_ceil(KGROUP) as u32;
        let slots = GEMV_BLOCKS_PER_SM * self.t.sms;
        // fp8 weights are read a chunk (32 rows x one k-group) at a time: whole row groups a unit
        let fp8 = self.specs.iter().any(|s| s.name == weight && s.dtype == Dt::F8E4M3);
        let unit_rows = if fp8 {
            self.t.gemv_unit_rows.div_ceil(CHUNK_ROWS as u32) * CHUNK_ROWS as u32
        } else {
            // bf16 GEMVs (the GDN's a and b: a row per value head) are short and read 2 bytes a weight:
            // a 32-row unit kept one block streaming 320 KB at the end of its stage while the others
            // idled (results/issue25_probe_73304db); a warp a row
            self.t.gemv_unit_rows.min(BF16_UNIT_ROWS)
        };
        let mut w = self.word(op, rows as u32, unit_rows);
        let row_units = w.row_units();
        let stage_units = (stage_rows as u32).div_ceil(unit_rows).max(row_units);
        let k_parts = match self.t.units {
            // (a prefill program's GEMVs are whole: the GPU's GEMM picks its own split, prefill.rs)
            _ if op == Opcode::GemvGateUp || op == Opcode::MtpFc || groups < 2 || self.t.prefill => 1,
            UnitPolicy::Balanced => split_parts(row_units, stage_units - row_units, groups, slots),
            UnitPolicy::Fixed => {
                let want = SPLIT_BELOW_UNITS_PER_SM * self.t.sms;
                if stage_units < want {
                    groups.min(want.div_ceil(stage_units))
                } else {
                    1
                }
            }
        };
        let split = k_parts > 1;
        if split {
            w.k_parts = k_parts as u16; // at most one part per k-group
            w.units = row_units * k_parts;
            w.flags |= FLAG_PARTIAL;
            w.arg0 = groups;
            w.ops[slot::OUT0] = self.partial_buf(which, groups as u64 * rows as u64);
        } else {
            w.ops[slot::OUT0] = out;
        }
        (w, split)
    }
    /// The `which`-th partial buffer (split-K and range partials), grown to `need` floats.
    fn partial_buf(&mut self, which: usize, need: u64) -> u16 {
        while self.partial.len() <= which {
            let name = format!("partial{}", self.partial.len());
            let id = self.scratch(&name, 1);
            self.partial.push(id);
            self.partial_need.push(1);
        }
        self.partial_need[which] = self.partial_need[which].max(need);
        self.partial[which]
    }
    /// One stage of projections of `rmsnorm(h)` (`prefix` + name + `.weight` into `out`, `rows` each),
    /// split-K as the whole stage needs, then a stage with the reduces of the split ones.
    fn norm_projections(
        &mut self,
        prefix: &str,
        projs: &[(&str, u16, usize)],
        norm: u16,
        h: u16,
        k: usize,
    ) -> Result<()> {
        let stage_rows = projs.iter().map(|p| p.2).sum();
        let (mut stage, mut reduces) = (Vec::new(), Vec::new());
        for &(name, out, rows) in projs {
            let wname = format!("{prefix}{name}.weight");
            let (mut w, split) = self.gemv(Opcode::GemvNorm, rows, k, out, reduces.len(), stage_rows, &wname);
            w.ops[slot::W0] = self.weight(&wname)?;
            w.ops[slot::W1] = norm;
            w.ops[slot::IN0] = h;
            if split {
                reduces.push(self.reduce(Opcode::ReduceStore, &w, out));
            }
            stage.push(w);
        }
        // bf16 words first: their units are the stage's slowest a row, so blocks take them before the fp8
        // ones rather than finish the stage on them (the order of a stage's words changes no bits)
        stage.sort_by_key(|w| w.op(slot::W0).is_some_and(|b| self.buffers[b].elem_bytes == 1));
        self.stage(stage);
        if !reduces.is_empty() {
            self.stage(reduces);
        }
        Ok(())
    }

    /// A GEMV that adds into the residual stream `h`, and its reduce when it was split.
    /// One full-attention layer (its input norm folded into q / k / v, `kv` its KV cache's index): the
    /// projections, AttnKv, AttnScores, AttnPv, AttnReduceGate, o_proj with the residual.
    fn attention_layer(&mut self, cfg: &ModelConfig, lp: &str, ai: usize, ab: &AttnBufs, in_norm: u16) -> Result<()> {
        let b = self;
        let AttnBufs { ctrl, h, q, k, v, scores, stats, attn_part, attn_out, parts } = *ab;
        let (t, hd) = (b.t, cfg.hidden);
        let sa = format!("{lp}self_attn.");
        let projs =
            [("q_proj", q, 2 * cfg.attn_q_dim()), ("k_proj", k, cfg.attn_kv_dim()), ("v_proj", v, cfg.attn_kv_dim())];
        b.norm_projections(&sa, &projs, in_norm, h, hd)?;
        let kc = b.buf(&format!("k_cache.{ai}"), BufKind::State, t.max_context as u64, cfg.attn_kv_dim() as u64, 2);
        let vc = b.buf(&format!("v_cache.{ai}"), BufKind::State, t.max_context as u64, cfg.attn_kv_dim() as u64, 2);
        let mut kv = b.word(Opcode::AttnKv, cfg.n_kv_heads as u32, 1);
        kv.ops[slot::W0] = b.weight(&format!("{sa}k_norm.weight"))?;
        kv.ops[slot::IN0] = k;
        kv.ops[slot::IN1] = v;
        kv.ops[slot::IN2] = ctrl;
        kv.ops[slot::ST0] = kc;
        kv.ops[slot::ST1] = vc;
        b.stage(vec![kv]);
        let group = (cfg.n_heads / cfg.n_kv_heads) as u32;
        let mut sc = b.word(Opcode::AttnScores, (cfg.n_kv_heads * parts) as u32, 1);
        sc.arg0 = parts as u32;
        sc.arg1 = group;
        sc.ops[slot::W0] = b.weight(&format!("{sa}q_norm.weight"))?;
        sc.ops[slot::IN0] = q;
        sc.ops[slot::IN1] = ctrl;
        sc.ops[slot::OUT0] = scores;
        sc.ops[slot::OUT1] = stats;
        sc.ops[slot::ST0] = kc;
        b.stage(vec![sc]);
        let mut pv = b.word(Opcode::AttnPv, (cfg.n_kv_heads * parts) as u32, 1);
        pv.arg0 = parts as u32;
        pv.arg1 = group;
        pv.ops[slot::IN0] = scores;
        pv.ops[slot::IN1] = stats;
        pv.ops[slot::IN2] = ctrl;
        pv.ops[slot::OUT0] = attn_part;
        pv.ops[slot::ST1] = vc;
        b.stage(vec![pv]);
        let mut rg = b.word(Opcode::AttnReduceGate, cfg.n_heads as u32, 1);
        rg.arg0 = parts as u32;
        rg.ops[slot::IN0] = attn_part;
        rg.ops[slot::IN1] = q;
        rg.ops[slot::IN2] = ctrl;
        rg.ops[slot::OUT0] = attn_out;
        b.stage(vec![rg]);
        let o_name = format!("{sa}o_proj.weight");
        let (mut o, split) = b.gemv(Opcode::GemvResidual, hd, cfg.attn_q_dim(), h, 0, hd, &o_name);
        o.ops[slot::W0] = b.weight(&o_name)?;
        o.ops[slot::IN0] = attn_out;
        b.residual_stage(o, split, h);
        Ok(())
    }
    /// The FFN of layer prefix `lp`: post-attention norm folded into gate/up (SwiGLU epilogue into
    /// `act`), down with the residual add into `h`.
    fn ffn(&mut self, cfg: &ModelConfig, lp: &str, h: u16, act: u16) -> Result<()> {
        let (b, hd) = (self, cfg.hidden);
        // The FFN: post-attention norm folded into gate/up, SwiGLU epilogue, down with the residual.
        let gate = format!("{lp}mlp.gate_proj.weight");
        let (mut gu, _) = b.gemv(Opcode::GemvGateUp, cfg.intermediate, hd, act, 0, cfg.intermediate, &gate);
        gu.ops[slot::W0] = b.weight(&gate)?;
        gu.ops[slot::W1] = b.weight(&format!("{lp}mlp.up_proj.weight"))?;
        gu.ops[slot::W2] = b.weight(&format!("{lp}post_attention_layernorm.weight"))?;
        gu.ops[slot::IN0] = h;
        b.stage(vec![gu]);
        let down = format!("{lp}mlp.down_proj.weight");
        let (mut dn, split) = b.gemv(Opcode::GemvResidual, hd, cfg.intermediate, h, 0, hd, &down);
        dn.ops[slot::W0] = b.weight(&down)?;
        dn.ops[slot::IN0] = act;
        b.residual_stage(dn, split, h);
        Ok(())
    }
    fn residual_stage(&mut self, w: Word, split: bool, h: u16) {
        self.stage(vec![w]);
        if split {
            let red = self.reduce(Opcode::ReduceResidual, &w, h);
            self.stage(vec![red]);
        }
    }

    /// The split-K reduce that follows a split GEMV.
    fn reduce(&mut self, op: Opcode, gemv: &Word, out: u16) -> Word {
        let mut r = self.word(op, gemv.rows, REDUCE_UNIT);
        r.arg0 = gemv.arg0;
        r.ops[slot::IN0] = gemv.ops[slot::OUT0];
        r.ops[slot::OUT0] = out;
        r
    }
}

/// Split-K parts for a GEMV word of `row_units` row slices over `groups` k-groups, beside `other`
/// unsplit units of the same stage (same input width, so `groups` groups each), on `slots` resident
/// blocks. Blocks run a launch's units strided, so its makespan is about ceil(units / slots) rounds
/// of the largest unit; in k-group rounds, with the other words' units counted as that many units of
/// this word's size: cost(k) = ceil((row_units k + other groups / ceil(groups / k)) / slots)
/// x (ceil(groups / k) + `UNIT_OVERHEAD_ROUNDS`), plus `SPLIT_COST_ROUNDS` when k > 1. The cheapest k
/// wins (ties: fewer parts). E.g. the 27B's down projection (160 slices of 32 rows, 17 groups, 264
/// slots): k = 1 costs 18, k = 2 2 x 10 + 2, k = 3 2 x 7 + 2 (chosen), k = 17 11 x 2 + 2; the GDN
/// out_proj (160 slices, 6 groups): k = 1 costs 7, k = 3 2 x 3 + 2 (k = 1: no split, no reduce).
pub fn split_parts(row_units: u32, other: u32, groups: u32, slots: u32) -> u32 {
    let cost = |k: u32| {
        let per_unit = groups.div_ceil(k);
        let units = row_units * k + (other * groups).div_ceil(per_unit);
        units.div_ceil(slots) * (per_unit + UNIT_OVERHEAD_ROUNDS) + if k > 1 { SPLIT_COST_ROUNDS } else { 0 }
    };
    (1..=groups).min_by_key(|&k| (cost(k), k)).unwrap_or(1)
}

/// What every lowering needs of the model and the target (the kernels' head sizes, unit rows that fit a
/// word's 16 bits and the GEMV kernels' shapes).
fn check(cfg: &ModelConfig, t: &Target, what: &str) -> Result<()> {
    t.check().context(what.to_string())?;
    if cfg.head_dim != ATTN_HEAD_DIM || cfg.gdn_k_dim != GDN_HEAD_DIM || cfg.gdn_v_dim != GDN_HEAD_DIM {
        bail!("{what}: head dims must be {ATTN_HEAD_DIM} (attention) and {GDN_HEAD_DIM} (GDN)");
    }
    if t.gemv_unit_rows % 8 != 0 || !(8..=256).contains(&t.gemv_unit_rows) {
        bail!("{what}: GEMV unit rows {} (a multiple of 8 from 8 to 256)", t.gemv_unit_rows);
    }
    Ok(())
}

/// Lowers `cfg` for `t` into the program of one decode step.
pub fn compile(cfg: &ModelConfig, name: &str, t: &Target) -> Result<Program> {
    check(cfg, t, "compile")?;
    // M > 1 (a verification step over M consecutive positions) lowers GDN split: every op runs its
    // rows in order inside each unit, and the fused step's conv ring slots of a group's q/k channels
    // (written by the group's first head, read by the others) would be overwritten by one head's later
    // row while another head still reads them; GdnConv owns its channels' ring, so its rows are safe.
    let t = &{
        let mut t = t.clone();
        if t.m_rows > 1 || t.prefill {
            t.gdn = GdnLowering::Split;
        }
        t
    };
    let mut b = Builder::new(cfg, t);
    let (hd, p) = (cfg.hidden, cfg.prefix.clone());
    // Activations and scratch, shared by all layers (ordered reuse).
    // One control row per row m: (position + m, token m, next token m).
    let ctrl = b.buf("ctrl", BufKind::Control, t.m_rows as u64, CTRL_LEN as u64, 4);
    let h = b.act("h", hd);
    let qkv = b.act("qkv", cfg.gdn_conv_dim());
    let z = b.act("z", cfg.gdn_value_dim());
    let gb = b.act("gdn_b", cfg.gdn_v_heads);
    let ga = b.act("gdn_a", cfg.gdn_v_heads);
    // The split form's conv output; the fused form has none (its conv stays inside GdnStep).
    let conv_out = match t.gdn {
        GdnLowering::Split => b.act("conv_out", cfg.gdn_conv_dim()),
        GdnLowering::Fused => NONE,
    };
    // The recurrence's output, gated-normed per head (by GdnStep or GdnRecur): out_proj's input as it is.
    let core = b.act("core", cfg.gdn_value_dim());
    let ab = b.attn_bufs(cfg, ctrl, h);
    let act = b.act("act", cfg.intermediate);
    let head = b.head_bufs(cfg);

    let embed = b.weight(&format!("{p}embed_tokens.weight"))?;
    let mut e = b.word(Opcode::Embed, hd as u32, EMBED_UNIT);
    e.ops[slot::W0] = embed;
    e.ops[slot::IN0] = ctrl;
    e.ops[slot::OUT0] = h;
    b.stage(vec![e]);

    let (mut gi, mut ai) = (0, 0);
    for (li, kind) in cfg.layer_kinds.iter().enumerate() {
        b.layer = li as u16;
        let lp = format!("{p}layers.{li}.");
        let in_norm = b.weight(&format!("{lp}input_layernorm.weight"))?;
        match kind {
            LayerKind::Gdn => {
                let la = format!("{lp}linear_attn.");
                let projs = [
                    ("in_proj_qkv", qkv, cfg.gdn_conv_dim()),
                    ("in_proj_z", z, cfg.gdn_value_dim()),
                    ("in_proj_b", gb, cfg.gdn_v_heads),
                    ("in_proj_a", ga, cfg.gdn_v_heads),
                ];
                b.norm_projections(&la, &projs, in_norm, h, hd)?;
                let ring = b.buf(&format!("conv_state.{gi}"), BufKind::State, cfg.gdn_conv_dim() as u64, 4, 2);
                let rec = b.buf(
                    &format!("recurrent_state.{gi}"),
                    BufKind::State,
                    cfg.gdn_v_heads as u64,
                    (GDN_HEAD_DIM * GDN_HEAD_DIM) as u64,
                    4,
                );
                let (a_log, dt_bias) = (b.weight(&format!("{la}A_log"))?, b.weight(&format!("{la}dt_bias"))?);
                let (taps, norm_w) = (b.weight(&format!("{la}conv1d.weight"))?, b.weight(&format!("{la}norm.weight"))?);
                let out_proj = b.weight(&format!("{la}out_proj.weight"))?;
                match t.gdn {
                    GdnLowering::Fused => {
                        let mut st = b.word(Opcode::GdnStep, cfg.gdn_v_heads as u32, 1);
                        st.arg0 = cfg.gdn_k_heads as u32;
                        st.ops[slot::W0] = a_log;
                        st.ops[slot::W1] = dt_bias;
                        st.ops[slot::W2] = taps;
                        st.ops[slot::W3] = norm_w;
                        st.ops[slot::IN0] = qkv;
                        st.ops[slot::IN1] = gb;
                        st.ops[slot::IN2] = ga;
                        st.ops[slot::IN3] = ctrl;
                        st.ops[slot::IN4] = z;
                        st.ops[slot::OUT0] = core;
                        st.ops[slot::ST0] = rec;
                        st.ops[slot::ST1] = ring;
                        b.stage(vec![st]);
                        let (mut o, split) = b.gemv(
                            Opcode::GemvResidual,
                            hd,
                            cfg.gdn_value_dim(),
                            h,
                            0,
                            hd,
                            &format!("{la}out_proj.weight"),
                        );
                        o.ops[slot::W0] = out_proj;
                        o.ops[slot::IN0] = core;
                        b.residual_stage(o, split, h);
                    }
                    GdnLowering::Split => {
                        // M rows: the rows' inputs kept for the next step's deferred commit (the ring
                        // and the state advance only over the rows the next step says were kept); a
                        // prefill keeps every row: its conv and recurrence write the state at once
                        let m = t.m_rows as u64;
                        let deferred = m > 1 && !t.prefill;
                        let kept = |b: &mut Builder, name: &str, cols: u64| {
                            if deferred {
                                b.buf(&format!("{name}.{gi}"), BufKind::State, m, cols, 2)
                            } else {
                                NONE
                            }
                        };
                        let kept_qkv = kept(&mut b, "gdn_kept_qkv", cfg.gdn_conv_dim() as u64);
                        let kept_rec = kept(&mut b, "gdn_kept_rows", (cfg.gdn_v_heads * GDN_HIST_HEAD) as u64);
                        let mut c = b.word(Opcode::GdnConv, cfg.gdn_conv_dim() as u32, CONV_UNIT);
                        c.ops[slot::W0] = taps;
                        c.ops[slot::IN0] = qkv;
                        c.ops[slot::IN1] = ctrl;
                        c.ops[slot::OUT0] = conv_out;
                        c.ops[slot::ST0] = ring;
                        c.ops[slot::ST1] = kept_qkv;
                        b.stage(vec![c]);
                        let recur = if t.prefill { Opcode::GdnChunk } else { Opcode::GdnRecur };
                        let mut r = b.word(recur, cfg.gdn_v_heads as u32, 1);
                        r.arg0 = cfg.gdn_k_heads as u32;
                        r.ops[slot::W0] = a_log;
                        r.ops[slot::W1] = dt_bias;
                        r.ops[slot::W3] = norm_w;
                        r.ops[slot::IN0] = conv_out;
                        r.ops[slot::IN1] = gb;
                        r.ops[slot::IN2] = ga;
                        r.ops[slot::IN4] = z;
                        r.ops[slot::OUT0] = core;
                        r.ops[slot::ST0] = rec;
                        r.ops[slot::ST1] = kept_rec;
                        if deferred {
                            r.ops[slot::IN3] = ctrl;
                        }
                        b.stage(vec![r]);
                        let (mut o, split) = b.gemv(
                            Opcode::GemvResidual,
                            hd,
                            cfg.gdn_value_dim(),
                            h,
                            0,
                            hd,
                            &format!("{la}out_proj.weight"),
                        );
                        o.ops[slot::W0] = out_proj;
                        o.ops[slot::IN0] = core;
                        b.residual_stage(o, split, h);
                    }
                }
                gi += 1;
            }
            LayerKind::Attention => {
                b.attention_layer(cfg, &lp, ai, &ab, in_norm)?;
                ai += 1;
            }
        }
        b.ffn(cfg, &lp, h, act)?;
    }
    b.head(cfg, ctrl, h, &format!("{p}norm.weight"), head)?;
    let shape = format!(
        "hidden {}, {} layers ({} GDN + {} attention), FFN {}, vocab {}",
        cfg.hidden,
        cfg.n_layers,
        cfg.n_gdn_layers(),
        cfg.n_attn_layers(),
        cfg.intermediate,
        cfg.vocab
    );
    Ok(b.program(name, shape))
}
