//! The agent step on the GPU paths (issue 29 item 3; the CPU reference's is `step::agent_step`) and the
//! fixed-count replay on it (item 5). One session resident on the GPU at a time (the GPU's session pool,
//! several sessions' KV in pages, is not built), held by two programs of the same model:
//! - appends run as passes of an M-row verification program: M tokens a pass at positions pos .. pos +
//!   M, the weights read once a pass; the last pass padded with token 0 and its padding rolled back
//!   (`commit_rows`: the deferred GDN commit), then flushed (one more pass) before the state moves on.
//!   This is the GPU's prefill until issue 28's prefill program runs there;
//! - decoding runs one-row steps of the plain program (graph replays one in flight ahead, or the
//!   megakernel's N steps in one launch);
//! - the state moves between the two by device copies (`GpuExec::take_state`: the GDN states and the KV
//!   rows below the position);
//! - with a prefill program (`set_prefill`, issue 28: M rows a step on the graph path, the GEMM and the
//!   chunked GDN), appends are anchored (`append`): the prefill program keeps the state at the session's
//!   last whole multiple of its M, and an append re-runs the tokens since it with its own, the whole
//!   chunks through the prefill program, the rest as above; so a session's bits do not depend on where
//!   its appends began, and a stateless session (one append from 0) is the resident one bit for bit.
//!
//! An M-row step's rows are one-row steps bit for bit (`mk gpu rows`), so the tokens do not depend on how
//! the history was cut into passes: a resident session and a stateless one (the whole history re-run
//! every step) emit the same tokens, and so do the graph and the megakernel. `mk gpu agent` checks both,
//! with a negative control (a hand-off that forgets the state).
//!
//! Owns: `GpuSession` (append and its anchor (the plan: `anchor`), decode, the hand-offs and their clocks; park, restore and the
//! state digest are `gpu_park`'s, the replays `gpu_replay`'s). Refuses: programs
//! that are not an M-row and a one-row program of one context, an empty append, a count of 0, a
//! trajectory past the context.

use std::time::Instant;

use crate::bail;
use crate::error::Result;
use crate::exec::gpu::GpuExec;

/// Appends shorter than this run as one-row steps (no hand-off, no flush): a pass of M = 8 rows costs
/// about two one-row steps on the 27B (`mk gpu rows`: 2.0-2.1x, H100, session 29) and an append by passes
/// pays one pass more (the flush), so below 4 tokens one-row steps are cheaper (derived from those
/// measured costs).
pub const ROWS_FROM: usize = 4;

/// Where a session's time outside its steps' own work went: the state's hand-offs and the flushes.
#[derive(Debug, Clone, Default)]
pub struct Moves {
    pub handoffs: usize,
    pub bytes: u64,
    pub handoff_ms: f64,
    pub flushes: usize,
    pub flush_ms: f64,
    /// M-row passes run for appends (the flushes not counted) and one-row steps run for short appends.
    pub passes: usize,
    /// Prefill steps run for appends (with a prefill program) and the tokens they took.
    pub prefill_steps: usize,
    /// Tokens an anchored append ran again (those since the checkpoint), besides its own.
    pub rerun_tokens: usize,
    pub short_steps: usize,
    /// Parks and restores (`park`, `restore`): per restore the position, the park's ms and its own ms.
    pub parked: Vec<(usize, f64, f64)>,
    pub park_bytes: u64,
}

/// Pinned host memory (a park slot's, the digest's).
pub(super) type Pinned = cudarc::driver::PinnedHostSlice<u8>;

/// One session on one GPU path.
pub struct GpuSession {
    /// The M-row program (appends).
    pub rows: GpuExec,
    /// The one-row program (decoding, short appends).
    pub one: GpuExec,
    /// The megakernel (else the graph).
    pub mega: bool,
    /// The prefill program (appends' whole multiples of its M), if any (`set_prefill`).
    pub(super) prefill: Option<GpuExec>,
    /// The one-row program holds the state now (else the M-row program, or the prefill program when
    /// `in_prefill`).
    pub(super) in_one: bool,
    pub(super) in_prefill: bool,
    pub moves: Moves,
    /// Park slots (a session each while it is off the GPU): pinned host memory for the state at the max
    /// context (allocated by the slot's first park, host memory only) and, while a state is parked,
    /// its position and its entry in `Moves::parked`.
    pub(super) slots: Vec<(Option<Pinned>, Option<(usize, usize)>)>,
    /// Per park slot, the anchor's part: the prefill program's state at its checkpoint (pinned host
    /// memory, with a prefill program) and, while parked, the session's tokens (`fed`).
    pub(super) anchor_slots: Vec<(Option<Pinned>, Option<(Vec<u32>, Option<usize>)>)>,
    /// Every token the session has fed the model since its reset, in order (the appends' and the decoded
    /// ones): what an anchored append re-runs from the checkpoint.
    pub(super) fed: Vec<u32>,
    /// Pinned host memory for `state_digest` (allocated by its first call).
    pub(super) digest_buf: Option<Pinned>,
    /// NEGATIVE CONTROL: appends through the prefill program not anchored (its chunks start where each
    /// append starts, from the state as it is: the state then depends on where the appends began).
    /// Never for use.
    #[doc(hidden)]
    pub unanchored: bool,
    /// NEGATIVE CONTROL: restores leave the state buffers named with this prefix as they are (empty:
    /// none; `recurrent_state.`: the GDN states not restored). Never for use.
    #[doc(hidden)]
    pub restore_skips: &'static str,
    /// NEGATIVE CONTROL: the hand-off to the one-row program moves only the position, not the state
    /// (it decodes from whatever state it held). Never for use.
    #[doc(hidden)]
    pub forget_state: bool,
}

impl GpuSession {
    pub fn new(rows: GpuExec, one: GpuExec, mega: bool) -> Result<GpuSession> {
        let (r, o) = (&rows.program().target, &one.program().target);
        if r.m_rows < 2 || o.m_rows != 1 {
            bail!(
                "agent: a GPU session takes an M-row program (M = {}) and a one-row one (M = {})",
                r.m_rows,
                o.m_rows
            );
        }
        if r.max_context != o.max_context {
            bail!("agent: the two programs hold {} and {} positions", r.max_context, o.max_context);
        }
        let mut s = GpuSession {
            rows,
            one,
            mega,
            prefill: None,
            in_one: false,
            in_prefill: false,
            moves: Moves::default(),
            slots: Vec::new(),
            anchor_slots: Vec::new(),
            fed: Vec::new(),
            digest_buf: None,
            unanchored: false,
            restore_skips: "",
            forget_state: false,
        };
        s.reset()?;
        Ok(s)
    }

    /// A session of `ctx` positions (rounded up to 256) of the model `cfg`: its M-row and one-row
    /// programs (and with `prefill` > 0 a prefill program of that many rows) compiled here, every one
    /// sharing the weights of `share` when given (one copy of the 27 GB; else uploaded once from `up`).
    /// `head_mask`: programs compiled with a head mask (the grammar's).
    #[allow(clippy::too_many_arguments)]
    pub fn open(
        cfg: &crate::model::config::ModelConfig,
        up: &dyn crate::isa::weights::Weights,
        share: Option<&GpuExec>,
        (m, prefill): (u32, u32),
        ctx: usize,
        head_mask: bool,
        cache: &std::path::Path,
        defines: &crate::exec::gpu::Defines,
    ) -> Result<GpuSession> {
        use crate::exec::gpu::Gpu;
        let target = |m: u32| {
            let mut t = crate::compiler::h200(m);
            t.max_context = ctx.div_ceil(256) as u32 * 256;
            t.head_mask = head_mask;
            t
        };
        let pm = crate::compiler::compile(cfg, "checkpoint", &target(m))?;
        let p1 = crate::compiler::compile(cfg, "checkpoint", &target(1))?;
        let rows = match share {
            Some(other) => GpuExec::new_sharing(Gpu::open()?, &pm, up, other, cache, defines)?,
            None => GpuExec::new(Gpu::open()?, &pm, up, cache, defines)?,
        };
        let one = GpuExec::new_sharing(Gpu::open()?, &p1, up, &rows, cache, defines)?;
        let mut s = GpuSession::new(rows, one, false)?;
        if prefill > 0 {
            let mut t = target(prefill);
            (t.prefill, t.head_mask) = (true, false);
            let pp = crate::compiler::compile(cfg, "checkpoint", &t)?;
            s.set_prefill(Some(GpuExec::new_sharing(Gpu::open()?, &pp, up, &s.one, cache, defines)?))?;
        }
        Ok(s)
    }

    /// One short append and two decoded tokens: the CUDA graphs the replays launch are captured here, not
    /// inside the first timed step. Leaves the session mid-sequence (every replay resets first); returns
    /// the last token.
    pub fn warm(&mut self, prompt: &[u32]) -> Result<u32> {
        self.reset()?;
        let first = self.append(&prompt[..prompt.len().min(16)])?;
        let last = *self.decode_open(first, 2)?.last().unwrap_or(&first);
        Ok(last)
    }

    /// Appends' whole multiples of the prefill program's M through it (None: appends by M-row passes
    /// only). A prefill program of the same context; the session is reset.
    pub fn set_prefill(&mut self, p: Option<GpuExec>) -> Result<()> {
        if let Some(t) = p.as_ref().map(|p| &p.program().target) {
            if !t.prefill || t.max_context as usize != self.context() {
                bail!("agent: a session's prefill program must be a prefill program of {} positions", self.context());
            }
        }
        self.prefill = p;
        self.reset()
    }

    /// The prefill program's M (0: none).
    pub fn prefill_rows(&self) -> usize {
        self.prefill.as_ref().map_or(0, |p| p.program().target.m_rows as usize)
    }

    /// An empty session (position 0, every state zero, no stop token; parked states stay parked).
    pub fn reset(&mut self) -> Result<()> {
        self.rows.reset()?;
        self.one.reset()?;
        if let Some(p) = self.prefill.as_mut() {
            p.reset()?;
        }
        self.one.set_stop(None)?;
        self.in_one = false;
        self.in_prefill = false;
        self.fed.clear();
        Ok(())
    }

    pub fn context(&self) -> usize {
        self.one.program().target.max_context as usize
    }

    /// The position the next token is written at.
    pub fn pos(&self) -> usize {
        if let (true, Some(p)) = (self.in_prefill, self.prefill.as_ref()) {
            return p.next_pos();
        }
        if self.in_one {
            self.one.next_pos()
        } else {
            self.rows.next_pos()
        }
    }

    pub(super) fn m(&self) -> usize {
        self.rows.program().target.m_rows as usize
    }

    /// The state into the one-row program: the M-row program's pending rows flushed, then copied.
    pub(super) fn to_one(&mut self) -> Result<()> {
        if self.in_one {
            return Ok(());
        }
        if self.in_prefill {
            return self.from_prefill(true);
        }
        self.flush()?;
        let t = Instant::now();
        if self.forget_state {
            self.one.seek(self.rows.next_pos())?;
        } else {
            self.moves.bytes += self.one.take_state(&self.rows)?;
        }
        self.one.sync()?;
        self.moves.handoffs += 1;
        self.moves.handoff_ms += t.elapsed().as_secs_f64() * 1e3;
        self.in_one = true;
        Ok(())
    }

    /// The state into the M-row program (nothing pending on the one-row side).
    fn to_rows(&mut self) -> Result<()> {
        if self.in_prefill {
            return self.from_prefill(false);
        }
        if !self.in_one {
            return Ok(());
        }
        let t = Instant::now();
        self.moves.bytes += self.rows.take_state(&self.one)?;
        self.rows.sync()?;
        self.moves.handoffs += 1;
        self.moves.handoff_ms += t.elapsed().as_secs_f64() * 1e3;
        self.in_one = false;
        Ok(())
    }

    /// The state from the prefill program into the one-row program (`one`) or the M-row one.
    fn from_prefill(&mut self, one: bool) -> Result<()> {
        let Some(p) = self.prefill.as_ref() else {
            bail!("agent: no prefill program holds the state");
        };
        let t = Instant::now();
        let dst = if one { &mut self.one } else { &mut self.rows };
        if one && self.forget_state {
            dst.seek(p.next_pos())?;
        } else {
            self.moves.bytes += dst.take_state(p)?;
        }
        dst.sync()?;
        self.moves.handoffs += 1;
        self.moves.handoff_ms += t.elapsed().as_secs_f64() * 1e3;
        (self.in_prefill, self.in_one) = (false, one);
        Ok(())
    }

    /// The M-row program's pending rows committed (a flush), timed.
    fn flush(&mut self) -> Result<()> {
        if self.rows.pending_commit() > 0 {
            let t = Instant::now();
            self.rows.flush_rows(self.mega)?;
            self.moves.flushes += 1;
            self.moves.flush_ms += t.elapsed().as_secs_f64() * 1e3;
        }
        Ok(())
    }

    /// The state into the prefill program (the M-row program's pending rows flushed first).
    fn to_prefill(&mut self) -> Result<()> {
        if self.in_prefill {
            return Ok(());
        }
        if !self.in_one {
            self.flush()?;
        }
        let Some(p) = self.prefill.as_mut() else {
            bail!("agent: no prefill program");
        };
        let t = Instant::now();
        let src = if self.in_one { &self.one } else { &self.rows };
        self.moves.bytes += p.take_state(src)?;
        p.sync()?;
        self.moves.handoffs += 1;
        self.moves.handoff_ms += t.elapsed().as_secs_f64() * 1e3;
        (self.in_prefill, self.in_one) = (true, false);
        Ok(())
    }

    fn step_one(&mut self, t: u32) -> Result<u32> {
        if self.mega {
            self.one.step_mega(t)
        } else {
            self.one.step(t, false, |_, _| Ok(()))
        }
    }

    /// Appends through the prefill program are anchored (with one, and not the negative control).
    pub(super) fn anchored(&self) -> bool {
        self.prefill.is_some() && !self.unanchored
    }

    /// Appends `tokens` to the session; returns the greedy token after the last of them.
    ///
    /// With a prefill program of M rows the append is anchored (issue 28 item 4, as the CPU's
    /// `model::prefill::Session`): the prefill program keeps the state at the session's last checkpoint
    /// (the last whole multiple of M its chunks reached, counted from position 0), and an append re-runs
    /// every token since it (those decoded included) with the new ones, the whole chunks through the
    /// prefill program (which then stands at the new checkpoint), the rest as below. So the state is the
    /// one a single prefill over the whole history makes, bit for bit, however the history was cut
    /// into appends and decoded tokens (the M-row passes and one-row steps being the same bits).
    pub fn append(&mut self, tokens: &[u32]) -> Result<u32> {
        let Some(&last) = tokens.last() else {
            bail!("agent: nothing to append (a step starts with the tokens it adds)");
        };
        // (the padding of the last pass and the flush take up to M positions past the tokens)
        let m = self.m();
        if self.pos() + tokens.len() + m > self.context() {
            bail!(
                "context overflow: appending {} tokens at position {} (the session holds {}, less {m} for a pass's padding)",
                tokens.len(),
                self.pos(),
                self.context()
            );
        }
        // the whole multiples of the prefill program's M through it, then the rest as below
        let mp = self.prefill_rows();
        if self.anchored() && self.fed.len() != self.pos() {
            bail!("agent: internal: the session fed {} tokens and stands at position {}", self.fed.len(), self.pos());
        }
        let cp = match (self.anchored(), self.prefill.as_ref()) {
            (true, Some(p)) => Some(p.next_pos()),
            _ => None,
        };
        let (run, bulk) = super::anchor::plan(&self.fed, cp, tokens, mp)?;
        self.moves.rerun_tokens += run.len() - tokens.len();
        // (a failed append leaves the session to be reset: its tokens are counted as fed first)
        self.fed.extend_from_slice(tokens);
        let mut next = 0;
        if bulk > 0 {
            if self.anchored() {
                // from the checkpoint the prefill program holds: the state elsewhere is dropped (the M-row
                // program's pending rows with it: a hand-off into it seeks, which clears them anyway)
                let at = self.rows.next_pos();
                self.rows.seek(at)?;
                (self.in_prefill, self.in_one) = (true, false);
            } else {
                self.to_prefill()?;
            }
            for s in run[..bulk].chunks(mp) {
                if let Some(p) = self.prefill.as_mut() {
                    next = p.prefill_rows(s)?;
                }
                self.moves.prefill_steps += 1;
            }
        }
        let run = if bulk > 0 { &run[bulk..] } else { tokens };
        let tokens = run;
        if tokens.is_empty() {
            return Ok(next);
        }
        if tokens.len() < ROWS_FROM {
            self.to_one()?;
            for &t in &tokens[..tokens.len() - 1] {
                self.step_one(t)?;
            }
            self.moves.short_steps += tokens.len();
            return self.step_one(last);
        }
        self.to_rows()?;
        for pass in tokens.chunks(m) {
            let mut row = pass.to_vec();
            row.resize(m, 0);
            let out = self.rows.step_rows(&row, self.mega)?;
            if pass.len() < m {
                self.rows.commit_rows(pass.len())?;
            }
            next = out[pass.len() - 1];
            self.moves.passes += 1;
        }
        Ok(next)
    }

    /// Emits `n` greedy tokens, the first being `first` (the token the append or the last step chose):
    /// every emitted token goes into the session, so the next append follows the last of them (n
    /// one-row steps; the token the last one chooses is dropped).
    pub fn decode(&mut self, first: u32, n: usize) -> Result<Vec<u32>> {
        if n == 0 {
            bail!("agent: a step emits at least one token");
        }
        let next = self.steps(first, n)?;
        let mut out = Vec::with_capacity(n);
        out.push(first);
        out.extend_from_slice(&next[..n - 1]);
        Ok(out)
    }

    /// `decode` that leaves the last emitted token out of the session (n - 1 steps): the caller feeds
    /// it (`feed`, or as the first row of a constrained pass, `constrained`).
    pub fn decode_open(&mut self, first: u32, n: usize) -> Result<Vec<u32>> {
        if n == 0 {
            bail!("agent: a step emits at least one token");
        }
        let mut out = Vec::with_capacity(n);
        out.push(first);
        if n > 1 {
            out.extend(self.steps(first, n - 1)?);
        }
        Ok(out)
    }

    /// `decode` by greedy speculation at a controlled acceptance (issue 29 item 5, issue 27's forced
    /// drafts): the M-row program verifies rounds of k = M - 1 drafts, the first `agree` of each the
    /// plain greedy continuation `truth` (the tokens `decode` emits here, `truth[0]` = `first`), the rest
    /// wrong. The same tokens as `decode` (the rounds keep exactly what greedy decoding emits) and the
    /// same state after (the last token fed). Returns the tokens and the rounds' statistics.
    pub fn decode_speculative(
        &mut self,
        first: u32,
        n: usize,
        truth: &[u32],
        agree: usize,
    ) -> Result<(Vec<u32>, crate::model::spec_generate::SpecStats)> {
        if n == 0 || truth.len() < n || truth[0] != first {
            bail!(
                "agent: speculation over {n} tokens needs the plain continuation's {n} tokens, starting with the first"
            );
        }
        if agree >= self.m() {
            bail!("agent: {agree} agreeing drafts of a round of {}", self.m() - 1);
        }
        if n == 1 {
            self.feed(first)?;
            return Ok((vec![first], Default::default()));
        }
        self.to_rows()?;
        let p0 = self.rows.next_pos();
        let vocab = self.rows.vocab();
        let mut forced = crate::exec::spec::Forced::new(truth, agree, p0, vocab);
        let mut target = crate::exec::gpu::spec::GpuTarget { exec: &mut self.rows, mega: self.mega, overlap: false };
        let (rest, stats) = crate::exec::spec::speculate_mtp(&mut target, &mut forced, &[first], n - 1, None)?;
        let mut out = Vec::with_capacity(n);
        out.push(first);
        out.extend_from_slice(&rest);
        // the rounds fed the first n - 1; the last token into the session (the next append follows it)
        self.fed.extend_from_slice(&out[..n - 1]);
        let last = out[n - 1];
        self.feed(last)?;
        Ok((out, stats))
    }

    /// Feeds one token (a one-row step); returns the greedy token after it.
    pub fn feed(&mut self, t: u32) -> Result<u32> {
        Ok(self.steps(t, 1)?[0])
    }

    /// `n` one-row steps from `first`, each on the token the last one chose: their tokens.
    fn steps(&mut self, first: u32, n: usize) -> Result<Vec<u32>> {
        self.to_one()?;
        let next = if self.mega { self.one.step_mega_n(first, n)? } else { self.one.generate(first, n)? };
        if next.len() != n {
            bail!("agent: {} of {n} decode steps ran (a stop token is set?)", next.len());
        }
        self.fed.push(first);
        self.fed.extend_from_slice(&next[..n - 1]);
        Ok(next)
    }

    /// Constrained greedy decoding after `prompt` (fed first, its last row scored under the grammar's
    /// mask; `grammar::decode::generate_steps`): on the one-row program (`overlap`: the graph computes
    /// each mask while the step's body runs), or with `rows` on the M-row program (forced spans as rows
    /// of one pass). Both programs must have a head mask. The tokens it emits after its last pass's rows
    /// are not fed (the last one; with forced spans, a span that ended the turn or reached the cap):
    /// `pos` tells how far the session got.
    pub fn constrained(
        &mut self,
        prompt: &[u32],
        m: &mut crate::grammar::ToolMatcher,
        o: &crate::grammar::decode::Opts,
        rows: bool,
        overlap: bool,
    ) -> Result<crate::grammar::decode::Out> {
        use crate::exec::gpu::spec::GpuTarget;
        let p0 = self.pos();
        let out = if rows {
            self.to_rows()?;
            let mut t = GpuTarget { exec: &mut self.rows, mega: self.mega, overlap: false };
            crate::grammar::decode::generate_steps(&mut t, prompt, m, o)?
        } else {
            self.to_one()?;
            let mut t = GpuTarget { exec: &mut self.one, mega: self.mega, overlap };
            crate::grammar::decode::generate_steps(&mut t, prompt, m, o)?
        };
        // the tokens it fed: the prompt, then the emitted ones as far as the position moved
        let n = self.pos().saturating_sub(p0);
        self.fed.extend(prompt.iter().chain(&out.tokens).take(n));
        Ok(out)
    }
}

pub use super::gpu_replay::{replay, replay_interleaved, replay_speculative};
