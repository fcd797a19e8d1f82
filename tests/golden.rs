//! The CPU reference against the oracle's goldens (transformers 5.17 on the H200, tiny preset, seed 0),
//! with the envelope calibrated on the oracle's own noise, and the negative control: the same check
//! must reject a reference with a wrong RoPE theta.

mod common;
use mk::model::checkpoint::Checkpoint;
use mk::model::forward::Weights;
use mk::verify::golden::{compare, envelope, load_dir, verdict, MEAN_FACTOR};
use std::path::Path;

fn goldens() -> Vec<mk::verify::golden::Golden> {
    let g = load_dir(&Path::new(env!("CARGO_MANIFEST_DIR")).join("goldens/tiny")).unwrap();
    // The goldens were recorded on the checkpoint this test regenerates.
    let made: serde_json::Value = serde_json::from_str(&g[0].meta["checkpoint"]).unwrap();
    assert_eq!((made["preset"].as_str(), made["seed"].as_u64()), (Some("tiny"), Some(common::SEED)));
    assert_eq!(g[0].meta["transformers"], "5.17.0");
    g
}

#[test]
fn the_reference_agrees_with_the_oracle_inside_its_own_envelope() {
    let g = goldens();
    let ck = Checkpoint::open(common::tiny()).unwrap();
    let w = Weights::from_checkpoint(&ck);
    let env = envelope(&g).unwrap();
    let c = compare(&w, &g, usize::MAX).unwrap();
    println!("{env:?}\n{c:?}");
    assert!(env.positions >= 800);
    let why = verdict(&c, &env, MEAN_FACTOR);
    assert!(why.is_empty(), "{why:?}");
    // The final states, relative to their largest magnitude (rounding-level differences only).
    assert!(c.recurrent_rel < 0.05 && c.conv_rel < 0.02 && c.kv_rel < 0.05, "{c:?}");
}

#[test]
fn negative_control_a_wrong_rope_theta_is_rejected() {
    let g = goldens();
    let ck = Checkpoint::open(common::tiny()).unwrap();
    let mut w = Weights::from_checkpoint(&ck);
    w.cfg.rope_theta = 1e4;
    let env = envelope(&g).unwrap();
    let c = compare(&w, &g, 2).unwrap();
    let why = verdict(&c, &env, MEAN_FACTOR);
    println!("{c:?}\n{why:?}");
    assert!(why.iter().any(|r| r.contains("envelope")), "the check must reject a wrong RoPE theta: {c:?}");
}

/// Issue 28 item 5: the reference's prefill (the GDN by chunks, `model::prefill`) against the oracle's
/// prompt path (one forward over each prompt), inside the same envelope; beside it, the decode steps
/// against the prompt path (the two orders of the GDN sums: how far apart the oracle's own two paths'
/// counterparts on our side are).
#[test]
fn the_prefill_agrees_with_the_oracles_prompt_path_inside_its_envelope() {
    use mk::verify::golden::{compare_path, OraclePath};
    let g = goldens();
    let ck = Checkpoint::open(common::tiny()).unwrap();
    let w = Weights::from_checkpoint(&ck);
    let env = envelope(&g).unwrap();
    let c = compare_path(&w, &g, usize::MAX, OraclePath::Prompt).unwrap();
    println!("{env:?}\nprefill vs the prompt path: {c:?}");
    let why = verdict(&c, &env, MEAN_FACTOR);
    assert!(why.is_empty(), "{why:?}");
    assert!(c.recurrent_rel < 0.05 && c.conv_rel < 0.02 && c.kv_rel < 0.05, "{c:?}");
}

/// Issue 28 item 1: fast mode (fp8 activations, W8A8 dynamic as HF's FP8Linear and the production
/// engines) against the oracle's goldens (dequantised up front, W8A16): a different function by design,
/// so its distance is reported (docs/notebook/prefill.md: top-1 92.3 %, largest logit difference 1.5,
/// mean 0.66 on these goldens, about 6x the oracle's own noise) and bounded here. The mean above twice
/// the envelope's is the check that fast mode is on at all (exact mode's is 1.2x).
#[test]
fn fast_mode_against_the_goldens_stays_inside_its_reported_distance() {
    use mk::model::ops::{Activations, SumOrder};
    let g = goldens();
    let ck = Checkpoint::open(common::tiny()).unwrap();
    let w = Weights::with_numerics(&ck, SumOrder::Canonical, Activations::Fp8Dynamic);
    let env = envelope(&g).unwrap();
    let c = compare(&w, &g, usize::MAX).unwrap();
    println!("{env:?}\nfast mode: {c:?}");
    assert!(c.top1_vs_decode >= 0.90 && c.top1_vs_decode_tie_aware >= 0.95, "{c:?}");
    assert!(c.max_abs <= 2.0 && c.mean_abs <= 8.0 * env.mean_abs, "{c:?}");
    assert!(c.mean_abs > 2.0 * env.mean_abs, "fast mode no farther from the goldens than exact mode: {c:?}");
    assert!(c.recurrent_rel < 0.1 && c.conv_rel < 0.1 && c.kv_rel < 0.1, "{c:?}");
    // the prefill (chunked GDN) in fast mode against the oracle's prompt path: the same distance
    // (notebook: top-1 92.1 %, 1.5, 0.657)
    let p = mk::verify::golden::compare_path(&w, &g, usize::MAX, mk::verify::golden::OraclePath::Prompt).unwrap();
    println!("fast mode's prefill against the prompt path: {p:?}");
    assert!(p.top1_vs_decode >= 0.90 && p.max_abs <= 2.0 && p.mean_abs > 2.0 * env.mean_abs, "{p:?}");
}
