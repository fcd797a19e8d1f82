//! The head's control rows an executor writes before a step: a pruned drafter's row list (issue 27)
//! and the head mask of grammar-constrained decoding (issue 30), each from what the host holds (ids,
//! llguidance-layout masks) to the buffer's elements, checked.

use super::{slot, Opcode, Program};
use crate::bail;
use crate::error::Result;

impl Program {
    /// The control row a pruned drafter program's head reads (`compile_drafter_pruned`): its buffer and
    /// [n, ids .., 0 ..] for a working vocabulary `ids` (ascending, distinct, below the weight's rows, at
    /// most the capacity), for an executor to write before a step.
    pub fn head_rows(&self, ids: &[u32]) -> Result<(usize, Vec<f32>)> {
        let p = self;
        let Some(at) = p.buffer_id("head_rows") else {
            bail!("head rows: program {} has no pruned head (compile_drafter_pruned)", p.model);
        };
        if p.buffers[at].cols < 2 {
            bail!("head rows: program {}'s row list has no room for an id", p.model);
        }
        let cap = p.buffers[at].cols as usize - 1;
        let vocab =
            p.words.iter().find(|w| w.opcode == Opcode::LmHead).and_then(|w| w.op(slot::W0)).map(|b| p.buffers[b].rows);
        if ids.is_empty() || ids.len() > cap {
            bail!("head rows: {} ids for a pruned head of 1 ..= {cap}", ids.len());
        }
        if let Some(i) = ids.windows(2).position(|w| w[0] >= w[1]) {
            bail!("head rows: ids must ascend (id {} at {i} before {})", ids[i], ids[i + 1]);
        }
        let vocab = vocab.unwrap_or(0);
        if let Some(&id) = ids.iter().find(|&&id| id as u64 >= vocab) {
            bail!("head rows: id {id} is off the vocabulary of {vocab}");
        }
        let mut v = vec![0f32; cap + 1];
        v[0] = ids.len() as f32;
        for (d, &id) in v[1..].iter_mut().zip(ids) {
            *d = id as f32;
        }
        Ok((at, v))
    }

    /// The head mask's contents for the next steps (issue 30; a program compiled with
    /// `Target::head_mask`): one mask per row (M of them; a row's `None` unmasked), or none (empty: every
    /// row unmasked). A mask is the vocabulary's bits in llguidance's layout (id i is bit i % 32 of word
    /// i / 32; `ceil(vocab / 32)` words, no bit past the vocabulary) with at least one id allowed. The
    /// buffer holds per row a flag (1: masked), then the bits 16 ids an element (ids 16 j .. 16 j + 15 in
    /// element 1 + j): whole u32 control elements below 2^16, so the interpreter's f32 holds them exactly.
    pub fn head_mask(&self, masks: &[Option<Vec<u32>>]) -> Result<(usize, Vec<f32>)> {
        let p = self;
        // the LmHead's IN2 and its rows (what the validator sized the buffer by)
        let Some((at, vocab)) = p
            .words
            .iter()
            .find(|w| w.opcode == Opcode::LmHead)
            .and_then(|w| w.op(slot::IN2).map(|b| (b, w.rows as usize)))
        else {
            bail!("head masks: program {} has no head mask (compile it with a head mask: Target::head_mask)", p.model);
        };
        let m = p.target.m_rows as usize;
        if !masks.is_empty() && masks.len() != m {
            bail!("head masks: {} masks for an M = {m} program", masks.len());
        }
        let cols = p.buffers[at].cols as usize;
        let mut v = vec![0f32; m * cols];
        for (r, mk) in masks.iter().enumerate() {
            let Some(mk) = mk else { continue };
            if mk.len() != vocab.div_ceil(32) {
                bail!("head masks: row {r}'s mask has {} words for a vocabulary of {vocab}", mk.len());
            }
            if vocab % 32 != 0 && mk[mk.len() - 1] >> (vocab % 32) != 0 {
                bail!("head masks: row {r}'s mask has bits past the vocabulary of {vocab}");
            }
            if mk.iter().all(|w| *w == 0) {
                bail!("head masks: row {r}'s mask allows no id");
            }
            let row = &mut v[r * cols..(r + 1) * cols];
            row[0] = 1.0;
            for (j, e) in row[1..].iter_mut().enumerate() {
                *e = (mk.get(j / 2).map_or(0, |w| w >> (16 * (j % 2))) & 0xffff) as f32;
            }
        }
        Ok((at, v))
    }
}
