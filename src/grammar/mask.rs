//! Masks of allowed token ids and the three ways a step's choice honours one (issue 30 items 2 and 3
//! on the CPU):
//!
//! - `scatter_argmax`, the production engines' method and the reference here: -inf into every
//!   disallowed logit, then the argmax over all of them;
//! - `argmax_masked`, the mask inside the argmax: disallowed ids are skipped by the scan itself (no -inf
//!   pass, nothing written);
//! - `masked_head`, the masked head: only the allowed rows of the lm_head are scored at all (a row list
//!   built from the mask), so a step that allows a few hundred ids reads a few hundred rows.
//!
//! All three give the same token for every mask and logits with a number among the allowed ids (tests
//! below and in tests/grammar.rs). Where every allowed logit is NaN the scatter method picks a disallowed
//! id (-inf is a number, NaN ranks below every number); the other two stay inside the mask.
//!
//! Owns: `Mask` (one bit per id, 32 ids a word, bit i of word i / 32 is id i: llguidance's layout and a
//! device bitmask's), the three choices. Refuses: an empty mask, bits past the vocabulary, logits of
//! another width than the mask, row ids off the head.

use crate::bail;
use crate::error::Result;
use crate::model::numerics::bf;
use crate::model::ops::{argmax, Linear};

/// Allowed ids of a vocabulary of `n`, as bits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mask {
    words: Vec<u32>,
    n: usize,
}

impl Mask {
    pub fn words_for(n: usize) -> usize {
        n.div_ceil(32)
    }

    /// A mask from its words (`words_for(n)` of them, no bit at or past `n`).
    pub fn from_words(words: &[u32], n: usize) -> Result<Mask> {
        if words.len() != Mask::words_for(n) {
            bail!("mask: {} words for a vocabulary of {n} (expected {})", words.len(), Mask::words_for(n));
        }
        if n % 32 != 0 && words[words.len() - 1] >> (n % 32) != 0 {
            bail!("mask: bits set past the vocabulary of {n}");
        }
        Ok(Mask { words: words.to_vec(), n })
    }

    /// The mask allowing exactly `ids`.
    pub fn from_ids(ids: &[u32], n: usize) -> Result<Mask> {
        let mut words = vec![0u32; Mask::words_for(n)];
        for &id in ids {
            if id as usize >= n {
                bail!("mask: id {id} is off the vocabulary of {n}");
            }
            words[id as usize / 32] |= 1 << (id % 32);
        }
        Ok(Mask { words, n })
    }

    /// Every id allowed.
    pub fn all(n: usize) -> Mask {
        let mut words = vec![u32::MAX; Mask::words_for(n)];
        if n % 32 != 0 {
            *words.last_mut().unwrap_or(&mut 0) = (1u32 << (n % 32)) - 1;
        }
        Mask { words, n }
    }

    pub fn words(&self) -> &[u32] {
        &self.words
    }

    /// The vocabulary size.
    pub fn len(&self) -> usize {
        self.n
    }

    pub fn is_empty(&self) -> bool {
        self.count() == 0
    }

    #[inline]
    pub fn allows(&self, id: u32) -> bool {
        (id as usize) < self.n && self.words[id as usize / 32] >> (id % 32) & 1 == 1
    }

    /// How many ids are allowed.
    pub fn count(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// The allowed ids, ascending: the masked head's row list.
    pub fn ids(&self) -> Vec<u32> {
        let mut out = Vec::new();
        for (i, &w) in self.words.iter().enumerate() {
            let mut w = w;
            while w != 0 {
                out.push(i as u32 * 32 + w.trailing_zeros());
                w &= w - 1;
            }
        }
        out
    }

    /// The only allowed id, if exactly one is.
    pub fn single(&self) -> Option<u32> {
        (self.count() == 1).then(|| self.ids()[0])
    }
}

fn check(logits: &[f32], mask: &Mask) -> Result<()> {
    if logits.len() != mask.len() {
        bail!("mask: {} logits for a mask of {} ids", logits.len(), mask.len());
    }
    if mask.is_empty() {
        bail!("mask: no id is allowed");
    }
    Ok(())
}

/// The scatter method: -inf into every disallowed logit (a copy), then the argmax.
pub fn scatter_argmax(logits: &[f32], mask: &Mask) -> Result<u32> {
    check(logits, mask)?;
    let mut l = logits.to_vec();
    for (i, v) in l.iter_mut().enumerate() {
        if !mask.allows(i as u32) {
            *v = f32::NEG_INFINITY;
        }
    }
    Ok(argmax(&l) as u32)
}

/// The mask inside the argmax: the scan visits allowed ids only (argmax's total order: NaN below every
/// number, then the larger value, then the lower id), one word of the mask at a time.
pub fn argmax_masked(logits: &[f32], mask: &Mask) -> Result<u32> {
    check(logits, mask)?;
    let mut best: Option<usize> = None;
    for (wi, &w) in mask.words().iter().enumerate() {
        let mut w = w;
        while w != 0 {
            let i = wi * 32 + w.trailing_zeros() as usize;
            w &= w - 1;
            let v = logits[i];
            best = match best {
                None => Some(i),
                Some(b) if v > logits[b] || (logits[b].is_nan() && !v.is_nan()) => Some(i),
                keep => keep,
            };
        }
    }
    Ok(best.unwrap_or(0) as u32)
}

/// The masked head: the lm_head's rows `rows` (ascending, as `Mask::ids`) scored on the final-normed
/// hidden state `xn` (each `bf(row · xn)`, the full head's value for that row) and their argmax; returns
/// the token and the rows' logits.
pub fn masked_head(lm_head: &Linear, xn: &[f32], rows: &[u32]) -> Result<(u32, Vec<f32>)> {
    if rows.is_empty() {
        bail!("masked head: no row to score");
    }
    if xn.len() != lm_head.cols {
        bail!("masked head: hidden state of {} for a head of {} columns", xn.len(), lm_head.cols);
    }
    if let Some(&r) = rows.iter().find(|&&r| r as usize >= lm_head.rows) {
        bail!("masked head: row {r} is off the head's {} rows", lm_head.rows);
    }
    let vals: Vec<f32> = rows.iter().map(|&r| bf(lm_head.row_dot(xn, r as usize))).collect();
    // ascending rows: argmax's lowest position on ties is the lowest id
    Ok((rows[argmax(&vals)], vals))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mask_bits_round_trip_and_refuse_bad_input() {
        let m = Mask::from_ids(&[0, 31, 32, 99], 100).unwrap();
        assert_eq!(m.ids(), [0, 31, 32, 99]);
        assert_eq!((m.count(), m.allows(31), m.allows(33), m.allows(100)), (4, true, false, false));
        assert_eq!(Mask::from_words(m.words(), 100).unwrap(), m);
        assert_eq!(Mask::all(100).count(), 100);
        assert!(Mask::from_ids(&[100], 100).unwrap_err().to_string().contains("off the vocabulary"));
        assert!(Mask::from_words(&[0; 3], 100).unwrap_err().to_string().contains("expected 4"));
        assert!(Mask::from_words(&[0, 0, 0, 1 << 4], 100).unwrap_err().to_string().contains("past"));
        let e = argmax_masked(&[0.0; 100], &Mask::from_ids(&[], 100).unwrap()).unwrap_err();
        assert!(e.to_string().contains("no id"));
        assert!(argmax_masked(&[0.0; 99], &m).is_err());
    }

    #[test]
    fn in_argmax_mask_equals_scatter_and_ignoring_it_does_not() {
        // a pseudo-random walk of logits with ties; masks of 1, a few and many ids
        let n = 1000;
        let logits: Vec<f32> = (0..n).map(|i| ((i * 7919 % 257) as f32 / 8.0).floor()).collect();
        let mut differ = 0;
        for (s, k) in [(1u32, 1usize), (3, 5), (11, 40), (17, 600)] {
            let ids: Vec<u32> = (0..k as u32).map(|j| (j * 97 + s * 13) % n as u32).collect();
            let m = Mask::from_ids(&ids, n).unwrap();
            let want = scatter_argmax(&logits, &m).unwrap();
            assert_eq!(argmax_masked(&logits, &m).unwrap(), want);
            assert!(m.allows(want));
            differ += (argmax(&logits) as u32 != want) as usize;
        }
        // negative control: the unmasked argmax leaves the mask
        assert!(differ >= 3, "{differ}");
        // NaN: the in-argmax mask stays inside the mask, scatter does not
        let mut l = vec![0.0f32; 64];
        l[5] = f32::NAN;
        let m = Mask::from_ids(&[5], 64).unwrap();
        assert_eq!(argmax_masked(&l, &m).unwrap(), 5);
        assert_eq!(scatter_argmax(&l, &m).unwrap(), 0);
    }
}
