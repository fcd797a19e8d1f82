//! The CPU reference forward: deterministic, errors on bad input, realistic synthetic magnitudes.

mod common;
use mk::model::checkpoint::Checkpoint;
use mk::model::config::ModelConfig;
use mk::model::forward::{step, State, Weights};
use mk::model::{stats, synth};

#[test]
fn steps_are_deterministic_and_bad_input_is_an_error() {
    let ck = Checkpoint::open(common::tiny()).unwrap();
    let w = Weights::from_checkpoint(&ck);
    let mut a = State::new(&w.cfg, 3);
    let mut b = State::new(&w.cfg, 3);
    for t in [1u32, 248_000, 42] {
        let la = step(&w, &mut a, t, None).unwrap();
        let lb = step(&w, &mut b, t, None).unwrap();
        assert!(la.iter().zip(&lb).all(|(x, y)| x.to_bits() == y.to_bits()));
    }
    let e = step(&w, &mut a, 7, None).unwrap_err().to_string();
    assert!(e.contains("context overflow"), "{e}");
    let mut c = State::new(&w.cfg, 3);
    let e = step(&w, &mut c, 248_320, None).unwrap_err().to_string();
    assert!(e.contains("token id 248320 is out of range"), "{e}");
}

/// 64 layers (the 27B's depth) at the tiny width: activations stay finite, the residual stream grows
/// moderately, and the logits have realistic margins (see synth.rs for the recipe).
#[test]
fn synthetic_magnitudes_stay_realistic_through_64_layers() {
    let cfg = ModelConfig::preset("tiny").unwrap().with_layers(64);
    let dir = common::scratch().join("tiny64");
    synth::write_checkpoint(&cfg, 3, &dir).unwrap();
    let ck = Checkpoint::open(&dir).unwrap();
    let w = Weights::from_checkpoint(&ck);
    let s = stats::measure(&w, 24, 9).unwrap();
    stats::print(&s);
    assert!(s.all_finite);
    let (first, last) = (s.hidden_rms[0], s.hidden_rms[63]);
    assert!(last > first && last < 12.0 * first, "residual rms {first} -> {last}");
    assert!((1.0..10.0).contains(&s.logits.std_mean), "{:?}", s.logits);
    assert!(s.logits.top1_z_median > 5.0, "top-1 must stand out of the bulk: {:?}", s.logits);
    assert!(s.logits.margin_p50 > 0.5, "{:?}", s.logits);
    std::fs::remove_dir_all(&dir).unwrap();
}
