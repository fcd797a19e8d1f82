//! M-row verification steps on the GPU (issue 25 item 3, issue 27): one graph replay or one megakernel
//! launch over M tokens at positions pos .. pos + M, and their rollback (the deferred GDN commit: the
//! host's commit count and position in the control block, `isa::Opcode::GdnConv`).
//!
//! Owns: `step_rows`, `step_rows_timeline`, `commit_rows`, `flush_rows`. Refuses: a token count other
//! than M, sampling over M rows, a commit with no step to commit, one of 0 or more than M rows.

use super::{GpuExec, CTRL_COMMIT, CTRL_LEN, CTRL_POS, CTRL_TOKEN};
use crate::error::Result;

impl GpuExec {
    /// One verification step of an M-row program: token m at position pos + m for every row m, as one
    /// graph replay or one megakernel launch; returns each row's greedy next token (row m's logits are
    /// row m of `logits()`). The position moves on by M. Greedy only (the sampler takes one row).
    pub fn step_rows(&mut self, tokens: &[u32], mega: bool) -> Result<Vec<u32>> {
        let m = self.prog.target.m_rows as usize;
        if self.prog.target.prefill {
            crate::bail!("gpu: a prefill program steps with prefill_rows (every row kept, nothing to roll back)");
        }
        if tokens.len() != m {
            crate::bail!("gpu: {} tokens for a step of M = {m} rows", tokens.len());
        }
        for &t in tokens {
            self.check_token(t)?;
        }
        self.room(m, "rows")?;
        if self.sampling && m > 1 {
            crate::bail!("gpu: sampling takes one row; an M = {m} step is greedy");
        }
        let start = self.pos;
        let r = self.step_rows_unchecked(tokens, mega, false);
        self.rows_advance(r, start)
    }

    /// After a checked M-row step: the position moves on by M, the next step commits all M rows, and
    /// the step's rows may be rolled back (`commit_rows`) until the next step.
    fn rows_advance<T>(&mut self, r: Result<T>, start: usize) -> Result<T> {
        let m = self.prog.target.m_rows as usize;
        let v = self.advance(r, m)?;
        self.rows_start = Some(start);
        self.commit = m;
        Ok(v)
    }

    /// The position the next step writes, as the host holds it (`pos` reads the device's).
    pub fn next_pos(&self) -> usize {
        self.pos
    }

    /// The rows the next M-row step commits into the GDN states (0: nothing pending; `flush_rows`
    /// applies them now).
    pub fn pending_commit(&self) -> usize {
        self.commit
    }

    /// Keeps the first `n` rows (1 ..= M) of the last verification step: the position becomes its start
    /// + n, and the next step commits those n rows into the GDN states (the control block's commit
    /// count; attention needs nothing: the rows past n are written again before they are read).
    pub fn commit_rows(&mut self, n: usize) -> Result<()> {
        self.commit_rows_as(n, n)
    }

    /// NEGATIVE CONTROL for the rollback checks: the position rolled back but every row committed into
    /// the GDN states (the rejected drafts' updates kept). Never for use.
    #[doc(hidden)]
    pub fn commit_rows_keeping_all(&mut self, n: usize) -> Result<()> {
        let m = self.prog.target.m_rows as usize;
        self.commit_rows_as(n, m)
    }

    fn commit_rows_as(&mut self, n: usize, commit: usize) -> Result<()> {
        let m = self.prog.target.m_rows as usize;
        let start = crate::exec::commit_start("gpu", m, &mut self.rows_start, n)?;
        self.pos = start + n;
        self.commit = commit;
        self.put_rows_ctrl()
    }

    /// Row 0's position and commit count as the host holds them, into the device's control block (a
    /// snapshot, `pos()` and the next step's own write then agree with the host).
    fn put_rows_ctrl(&mut self) -> Result<()> {
        let off = self.layout.places[self.ctrl].off;
        self.put(off + 4 * CTRL_POS, &(self.pos as u32).to_le_bytes(), "write position")?;
        self.put(off + 4 * CTRL_COMMIT, &(self.commit as u32).to_le_bytes(), "write commit count")
    }

    /// Applies the pending commit now (for reading the GDN states): one step over padding (token 0 in
    /// every row) commits the kept rows, then its own rows are dropped (the position back, nothing to
    /// commit). Its KV writes lie at and past the position, where the next step writes before it reads.
    pub fn flush_rows(&mut self, mega: bool) -> Result<()> {
        let m = self.prog.target.m_rows as usize;
        if m < 2 {
            crate::bail!("gpu: flush takes an M-row program (this one has M = 1)");
        }
        let pos = self.pos;
        self.step_rows(&vec![0; m], mega)?;
        self.rows_start = None;
        self.pos = pos;
        self.commit = 0;
        self.put_rows_ctrl()
    }

    /// One megakernel M-row step that also returns its timeline (the megakernel's unit stamps).
    pub fn step_rows_timeline(&mut self, tokens: &[u32]) -> Result<(Vec<u32>, Vec<u64>)> {
        let m = self.prog.target.m_rows as usize;
        if tokens.len() != m || self.sampling && m > 1 {
            crate::bail!("gpu: a timed M = {m} step takes {m} tokens, greedy");
        }
        for &t in tokens {
            self.check_token(t)?;
        }
        self.room(m, "rows")?;
        self.zero(self.layout.tl, self.layout.tl + 32 * self.layout.total_units, "zero the timeline")?;
        let start = self.pos;
        let r = self.step_rows_unchecked(tokens, true, true);
        let t = self.rows_advance(r, start)?;
        Ok((t, self.read_timeline()?))
    }

    pub(super) fn step_rows_unchecked(&mut self, tokens: &[u32], mega: bool, timeline: bool) -> Result<Vec<u32>> {
        self.write_rows_ctrl(tokens)?;
        if mega {
            self.step_mega_unchecked(tokens[0], 1, timeline, self.prog.words.len() as u32)?;
        } else {
            self.step_unchecked(tokens[0], false, |_, _| Ok(()))?;
        }
        self.rows_next(tokens.len())
    }

    /// The control blocks of an M-row step: row m position pos + m, token m; row 0 also the commit count
    /// of the last step's rows.
    pub(super) fn write_rows_ctrl(&mut self, tokens: &[u32]) -> Result<()> {
        let mut ctrl = Vec::with_capacity(tokens.len() * CTRL_LEN);
        for (r, &t) in tokens.iter().enumerate() {
            let commit = if r == 0 { self.commit as f32 } else { 0.0 };
            ctrl.extend([(self.pos + r) as f32, t as f32, 0.0, commit]);
        }
        self.write(self.ctrl, &ctrl)
    }

    /// Each of the first m rows' next token after a step.
    pub(super) fn rows_next(&self, m: usize) -> Result<Vec<u32>> {
        let c = self.read_u32(self.ctrl, 0, m * CTRL_LEN)?;
        Ok((0..m).map(|r| c[r * CTRL_LEN + CTRL_TOKEN]).collect())
    }
}
