//! Rollback by replay on the CPU reference (issue 27, item 5): a verification round feeds k + 1 rows
//! (the last accepted token and k drafts) from the state S at its start; when only n of them are kept,
//! the state must be what n one-token steps from S give, bit for bit. Attention needs nothing: row r
//! writes its KV at position pos + r and reads positions <= pos + r, so entries past the kept rows are
//! never read before they are written again. The GDN conv rings and recurrent states do: the round
//! keeps S's (the frozen state) and each row's GDN projections (a ring of per-step inputs: `Trace::gdn`),
//! and `commit` re-runs the conv and the recurrence from S over the n kept rows (`gdn_recur`, the same
//! function as the step's). A GPU engine does the same with the rows' projections kept on the device.
//!
//! Owns: `Round`, `verify`, `commit`. Refuses: a commit of 0 rows or more rows than the round fed.

use super::forward::{gdn_recur, step_hidden, GdnInput, Mixer, State, Trace, Weights};
use crate::bail;
use crate::error::Result;

/// What a verification round keeps to roll back: the GDN states at its start and every row's GDN
/// projections (row-major: rows x GDN layers).
pub struct Round {
    start: usize,
    conv: Vec<Vec<f32>>,
    recurrent: Vec<Vec<f32>>,
    rows: Vec<Vec<GdnInput>>,
}

/// A row's logits and final-normed hidden state (`step_hidden`'s).
pub type RowOut = (Vec<f32>, Vec<f32>);

/// Feeds `tokens` (the round's rows) one after another from `state`; returns each row's logits and
/// final-normed hidden state, and the round to `commit`. `state` ends after every row.
pub fn verify(w: &Weights, state: &mut State, tokens: &[u32]) -> Result<(Vec<RowOut>, Round)> {
    let mut round =
        Round { start: state.pos, conv: state.conv.clone(), recurrent: state.recurrent.clone(), rows: Vec::new() };
    let mut out = Vec::with_capacity(tokens.len());
    for &t in tokens {
        let mut tr = Trace::default();
        out.push(step_hidden(w, state, t, Some(&mut tr))?);
        round.rows.push(tr.gdn);
    }
    Ok((out, round))
}

/// Keeps the first `n` rows of `round`: the GDN states re-run from the frozen ones over rows 0..n, the
/// position set to the round's start + n. With `skip_conv` (the negative control) the replay leaves the
/// conv rings at the frozen state.
pub fn commit(w: &Weights, state: &mut State, round: &Round, n: usize, skip_conv: bool) -> Result<()> {
    if n == 0 || n > round.rows.len() {
        bail!("rollback: {n} rows kept of a round of {}", round.rows.len());
    }
    state.pos = round.start + n;
    if n == round.rows.len() {
        return Ok(()); // every row kept: the state is the last row's
    }
    state.conv.clone_from(&round.conv);
    state.recurrent.clone_from(&round.recurrent);
    let cfg = &w.cfg;
    let gdn: Vec<_> =
        w.layers.iter().filter_map(|l| if let Mixer::Gdn(g) = &l.mixer { Some(g) } else { None }).collect();
    for (r, row) in round.rows[..n].iter().enumerate() {
        for (l, (g, inp)) in gdn.iter().zip(row).enumerate() {
            // (the negative control updates a scratch ring the state never sees)
            let mut scratch;
            let ring = if skip_conv {
                scratch = state.conv[l].clone();
                &mut scratch
            } else {
                &mut state.conv[l]
            };
            gdn_recur(cfg, g, inp, round.start + r, ring, &mut state.recurrent[l]);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::checkpoint::Checkpoint;

    /// Every state buffer's bits (conv rings, recurrent states, KV caches up to `pos`, the position).
    fn bits(st: &State, kvd: usize) -> Vec<u32> {
        let mut v = vec![st.pos as u32];
        for b in st.conv.iter().chain(&st.recurrent) {
            v.extend(b.iter().map(|x| x.to_bits()));
        }
        for b in st.k_cache.iter().chain(&st.v_cache) {
            v.extend(b[..st.pos * kvd].iter().map(|x| x.to_bits()));
        }
        v
    }

    #[test]
    fn a_rolled_back_round_is_the_sequential_state_for_every_accept_count() {
        let dir = std::env::temp_dir().join(format!("mk-rollback-{}", std::process::id()));
        let cfg = crate::model::config::ModelConfig::preset("tiny").unwrap();
        crate::model::synth::write_checkpoint(&cfg, 5, &dir).unwrap();
        let ck = Checkpoint::open(&dir).unwrap();
        let w = Weights::from_checkpoint(&ck);
        let kvd = cfg.attn_kv_dim();
        // a prompt of 6, then a round of k = 4 drafts (arbitrary ids) at positions 6..10 (the conv
        // rings wrap: slot p % 4)
        let mut s0 = State::new(&cfg, 64);
        for t in [3u32, 17, 250, 9, 77, 1000] {
            step_hidden(&w, &mut s0, t, None).unwrap();
        }
        let round_toks = [12u32, 500, 44, 8, 301];
        for n in 1..=round_toks.len() {
            let mut seq = s0.clone();
            for &t in &round_toks[..n] {
                step_hidden(&w, &mut seq, t, None).unwrap();
            }
            let mut st = s0.clone();
            let (rows, round) = verify(&w, &mut st, &round_toks).unwrap();
            assert_eq!(rows.len(), round_toks.len());
            commit(&w, &mut st, &round, n, false).unwrap();
            assert!(bits(&st, kvd) == bits(&seq, kvd), "{n} rows kept: the state differs from {n} sequential steps");
            // and decoding goes on identically from there
            let a = step_hidden(&w, &mut st, 42, None).unwrap().0;
            let b = step_hidden(&w, &mut seq, 42, None).unwrap().0;
            assert!(a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()));
            // negative control: the replay without the conv ring update must differ (n < all rows)
            if n < round_toks.len() {
                let mut bad = s0.clone();
                let (_, round) = verify(&w, &mut bad, &round_toks).unwrap();
                commit(&w, &mut bad, &round, n, true).unwrap();
                let mut seq = s0.clone();
                for &t in &round_toks[..n] {
                    step_hidden(&w, &mut seq, t, None).unwrap();
                }
                assert!(bits(&bad, kvd) != bits(&seq, kvd), "the negative control was not caught at n = {n}");
            }
        }
        let mut st = s0.clone();
        let (_, round) = verify(&w, &mut st, &round_toks).unwrap();
        assert!(commit(&w, &mut st, &round, 0, false).is_err());
        assert!(commit(&w, &mut st, &round, 6, false).unwrap_err().to_string().contains("6 rows kept of a round of 5"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
