//! Rollback on the interpreter (issue 27, item 5): the program-level semantics the GPU paths share. A
//! verification step runs an M-row program over the last accepted token and the drafts (positions
//! pos .. pos + M); when only the first n rows are kept, the state must be what n one-token steps from
//! the step's start give, bit for bit. Attention needs nothing (row r writes its KV at pos + r and reads
//! positions <= pos + r: entries past the kept rows are written again before any read). The GDN
//! layers' state updates are DEFERRED (`Opcode::GdnConv`, `GdnRecur`): an M-row step computes its rows
//! from the committed conv ring and recurrent state without writing them and keeps each row's inputs to
//! the two words (the ring of per-step inputs); the next step first replays the kept rows it is told
//! to keep (ctrl[0][COMMIT]) into the state, from the state frozen at the last step's start, with the
//! one-row arithmetic. So a rollback costs nothing but two control words, and the state is read and
//! written once a layer a step. `commit_rows` sets them; `flush_rows` makes the committed state real
//! now (a step over padding whose own rows are then dropped), for reading the state or handing it on.
//!
//! Owns: `commit_rows`, `flush_rows`. Refuses: one-row programs (their GDN state is written at once),
//! a commit of 0 rows or more than the step fed, a commit with no step to commit.

use super::Interp;
use crate::bail;
use crate::error::Result;
use crate::isa::access::{CTRL_COMMIT, CTRL_POS};

impl Interp<'_> {
    /// Keeps the first `n` rows (1 ..= M) of the last M-row step: the position becomes its start + n,
    /// and the next step commits those n rows into the GDN states. The caller feeds the next step's
    /// tokens (or `flush_rows`).
    pub fn commit_rows(&mut self, n: usize) -> Result<()> {
        self.commit_rows_as(n, n)
    }

    /// NEGATIVE CONTROL for the rollback checks: the position rolled back to start + n but every row
    /// of the step committed into the GDN states (the rejected drafts' updates kept, and the ring's
    /// slots of the commit placed from start + n - M). Never for use.
    #[doc(hidden)]
    pub fn commit_rows_keeping_all(&mut self, n: usize) -> Result<()> {
        let m = self.prog.target.m_rows as usize;
        self.commit_rows_as(n, m)
    }

    fn commit_rows_as(&mut self, n: usize, commit: usize) -> Result<()> {
        let m = self.prog.target.m_rows as usize;
        let start = crate::exec::commit_start("interpreter", m, &mut self.rows_start, n)?;
        self.select(0);
        self.bufs[self.ctrl][CTRL_POS] = (start + n) as f32;
        self.bufs[self.ctrl][CTRL_COMMIT] = commit as f32;
        Ok(())
    }

    /// Applies the pending commit now: one step over padding (token 0 in every row) commits the kept
    /// rows into the GDN states, then its own rows are dropped (position back, nothing to commit). Its
    /// KV writes lie at and past the position, where the next step writes before it reads.
    pub fn flush_rows(&mut self) -> Result<()> {
        let m = self.prog.target.m_rows as usize;
        if m < 2 {
            bail!("interpreter: flush takes an M-row program (this one has M = 1)");
        }
        let pos = self.pos();
        self.step_rows(&vec![0; m], super::Order::Program)?;
        self.rows_start = None;
        self.select(0);
        self.bufs[self.ctrl][CTRL_POS] = pos as f32;
        self.bufs[self.ctrl][CTRL_COMMIT] = 0.0;
        Ok(())
    }
}
