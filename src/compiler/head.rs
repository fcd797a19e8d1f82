//! Every program's last three stages: the lm_head (the vocabulary's, or a pruned head's row list),
//! the argmax and the hand-off; Builder methods of the decode step's and the drafter's lowerings.

use super::{Builder, LM_UNIT_ROWS};
use crate::error::Result;
use crate::isa::{slot, BufKind, Opcode};
use crate::model::config::ModelConfig;

impl Builder<'_> {
    /// The logits and the lm_head units' candidates.
    pub(super) fn head_bufs(&mut self, cfg: &ModelConfig) -> (u16, u16) {
        self.head_bufs_rows(cfg.vocab)
    }
    /// The head's logits and candidates for `rows` rows (the vocabulary, or a pruned head's capacity).
    pub(super) fn head_bufs_rows(&mut self, rows: usize) -> (u16, u16) {
        let logits = self.act("logits", rows);
        let cand = self.scratch("candidates", 2 * (rows as u32).div_ceil(LM_UNIT_ROWS) as usize);
        (logits, cand)
    }
    /// The lm_head over `h` through the final norm `norm`, the argmax and the hand-off (every program's
    /// last three stages; `bufs` from head_bufs).
    pub(super) fn head(&mut self, cfg: &ModelConfig, ctrl: u16, h: u16, norm: &str, bufs: (u16, u16)) -> Result<()> {
        self.head_rows(cfg.vocab as u32, None, ctrl, h, norm, bufs)
    }
    /// `head` over `rows` rows: the vocabulary's, or with `list` (a pruned head's row list, ISA LmHead)
    /// the positions of that list (`bufs` from head_bufs_rows(rows)).
    pub(super) fn head_rows(
        &mut self,
        rows: u32,
        list: Option<u16>,
        ctrl: u16,
        h: u16,
        norm: &str,
        bufs: (u16, u16),
    ) -> Result<()> {
        let (logits, cand) = bufs;
        let lm_units = rows.div_ceil(LM_UNIT_ROWS);
        self.layer = 0;
        let mut lm = self.word(Opcode::LmHead, rows, LM_UNIT_ROWS);
        lm.ops[slot::W0] = self.weight("lm_head.weight")?;
        lm.ops[slot::W1] = self.weight(norm)?;
        lm.ops[slot::IN0] = h;
        if let Some(l) = list {
            lm.ops[slot::IN1] = l;
        } else if self.t.head_mask {
            // issue 30: a row's flag, then the vocabulary's bits 16 an element (`Program::head_mask`)
            let m = self.t.m_rows as u64;
            lm.ops[slot::IN2] = self.buf("head_mask", BufKind::Control, m, 1 + (rows as u64).div_ceil(16), 4);
        }
        lm.ops[slot::OUT0] = logits;
        lm.ops[slot::OUT1] = cand;
        self.stage(vec![lm]);
        let mut am = self.word(Opcode::Argmax, 1, 1);
        am.arg0 = lm_units;
        am.ops[slot::IN0] = cand;
        am.ops[slot::OUT0] = ctrl;
        self.stage(vec![am]);
        let mut end = self.word(Opcode::EndStep, 1, 1);
        end.ops[slot::IN0] = ctrl;
        self.stage(vec![end]);
        for i in 0..self.partial.len() {
            let need = self.partial_need[i];
            self.buffers[self.partial[i] as usize].cols = need;
        }
        Ok(())
    }
}
