//! The anchor of a GPU session's appends (issue 28 item 4 on the GPU; `GpuSession::append`): which
//! tokens an append runs through the prefill program, from the checkpoint it keeps at the session's last
//! whole multiple of its M.
//!
//! Owns: `plan`. Refuses: a checkpoint past the tokens fed or off the grid of M.

use crate::bail;
use crate::error::Result;

/// An append's plan: the tokens its prefill part runs (anchored at checkpoint `cp`: every token `fed`
/// since it, then the new ones; unanchored (`cp` None): the new ones) and how many of them, the whole
/// multiples of the prefill program's `mp` rows (0: no prefill program), go through it.
pub(super) fn plan(fed: &[u32], cp: Option<usize>, tokens: &[u32], mp: usize) -> Result<(Vec<u32>, usize)> {
    let run = match cp {
        Some(cp) if cp > fed.len() || (mp > 0 && cp % mp != 0) => {
            bail!(
                "agent: internal: the checkpoint at {cp} is not a multiple of {mp} below the {} tokens fed",
                fed.len()
            )
        }
        Some(cp) => [&fed[cp..], tokens].concat(),
        None => tokens.to_vec(),
    };
    let bulk = run.len().checked_div(mp).map_or(0, |q| q * mp);
    Ok((run, bulk))
}

#[cfg(test)]
mod tests {
    use super::plan;

    /// Anchored appends cut the history into the prefill's chunks exactly where one append of the whole
    /// history does (every chunk starting at a multiple of M from position 0, over the same tokens),
    /// whatever the appends and decoded tokens between them; unanchored ones do not (the control).
    #[test]
    fn anchored_appends_chunk_the_history_as_one_append_does() {
        let mp = 64;
        let mut r = crate::model::synth::Rng::new(7);
        let mut off_grid = 0;
        for trial in 0..50 {
            let (mut fed, mut cp, mut chunks, mut loose_chunks) = (Vec::new(), 0usize, Vec::new(), Vec::new());
            let mut at_append: Vec<u32> = Vec::new();
            let mut loose_pos = 0usize;
            for _ in 0..(1 + r.next_u64() % 8) {
                let tokens: Vec<u32> = (0..1 + r.next_u64() % 300).map(|_| r.next_u64() as u32 % 1000).collect();
                let (run, bulk) = plan(&fed, Some(cp), &tokens, mp).unwrap();
                for (i, c) in run[..bulk].chunks(mp).enumerate() {
                    chunks.push((cp + i * mp, c.to_vec()));
                }
                cp += bulk;
                // the control: chunks from where the append starts
                let (lrun, lbulk) = plan(&fed, None, &tokens, mp).unwrap();
                for (i, c) in lrun[..lbulk].chunks(mp).enumerate() {
                    loose_chunks.push((loose_pos + i * mp, c.to_vec()));
                }
                fed.extend_from_slice(&tokens);
                at_append = fed.clone();
                // decoded tokens between appends (the next append re-runs them)
                fed.extend((0..r.next_u64() % 40).map(|_| 7u32));
                loose_pos = fed.len();
            }
            // one append of the history as it stood at the last append (a stateless step's)
            let (all, bulk) = plan(&[], Some(0), &at_append, mp).unwrap();
            assert!(plan(&fed, Some(fed.len() + 64), &[1], mp).is_err() && plan(&fed, Some(1), &[1], mp).is_err());
            let want: Vec<(usize, Vec<u32>)> =
                all[..bulk].chunks(mp).enumerate().map(|(i, c)| (i * mp, c.to_vec())).collect();
            // (a chunk re-run later covers the same positions with the same tokens: the last one counts)
            let mut got: Vec<(usize, Vec<u32>)> = Vec::new();
            for c in chunks {
                got.retain(|g| g.0 != c.0);
                got.push(c);
            }
            got.sort();
            assert_eq!(got, want, "trial {trial}");
            assert_eq!(cp, at_append.len() / mp * mp, "trial {trial}");
            off_grid += loose_chunks.iter().filter(|c| c.0 % mp != 0).count();
        }
        assert!(off_grid > 0, "the control (unanchored appends) must start chunks off the grid");
    }
}
