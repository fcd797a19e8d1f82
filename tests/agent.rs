//! The agent workload's trajectories (issue 29 item 5): the committed data is the generator's output,
//! has the seed's totals, replays append-only with every recorded count, and a corrupted count or text
//! is refused (the negative controls).

use mk::agent::trajectory::{self as tr, EMITTED, STEPS, TRAJECTORIES};

fn committed() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/experiments/agent/trajectories.json")).unwrap()
}

#[test]
fn the_committed_trajectories_are_the_generators_and_have_the_seeds_totals() {
    let ts = tr::generate().unwrap();
    assert_eq!(tr::to_json(&ts), committed(), "regenerate with `mk agent-trajectories --out experiments/agent/trajectories.json`");
    assert_eq!(tr::from_json(&committed()).unwrap(), ts);
    assert_eq!(ts.len(), TRAJECTORIES);
    assert_eq!(ts.iter().map(|t| t.steps.len()).sum::<usize>(), STEPS);
    assert_eq!(ts.iter().flat_map(|t| &t.steps).map(|s| s.emit).sum::<usize>(), EMITTED);
    let ctx: Vec<usize> = ts.iter().flat_map(|t| &t.steps).map(|s| s.context).collect();
    let (lo, hi) = (*ctx.iter().min().unwrap(), *ctx.iter().max().unwrap());
    assert!((1_450..=1_550).contains(&lo) && (33_500..=34_500).contains(&hi), "contexts {lo} to {hi}");
    // thinking off on the "off" trajectories: no reasoning tokens; on the others, some
    for t in &ts {
        let r: usize = t.steps.iter().map(|s| s.reasoning).sum();
        assert_eq!(r == 0, t.effort == tr::Effort::Off, "{}", t.name);
    }
}

#[test]
fn every_trajectory_replays_append_only_with_its_recorded_counts() {
    for t in tr::from_json(&committed()).unwrap() {
        let r = tr::replay(&t).unwrap();
        assert_eq!(r.prompt.len(), t.prompt);
        assert_eq!(r.steps.len(), t.steps.len());
        let mut ctx = r.prompt.len();
        for ((emit, append), s) in r.steps.iter().zip(&t.steps) {
            assert_eq!((ctx, *emit, append.len()), (s.context, s.emit, s.append), "{}", t.name);
            ctx += emit + append.len();
        }
        // a tool result's turn opens with the end of the assistant's turn's line and the user role
        let im_start = mk::tokenizer::Tokenizer::special_id("<|im_start|>").unwrap();
        assert!(r.steps.iter().filter(|s| !s.1.is_empty()).all(|s| s.1[..3].contains(&im_start)), "{}", t.name);
    }
}

#[test]
fn a_corrupted_count_or_text_is_refused() {
    let ts = tr::from_json(&committed()).unwrap();
    let mut t = ts[4].clone();
    t.steps[2].emit += 1;
    let e = tr::replay(&t).err().unwrap().to_string();
    assert!(e.contains("trajectory t05 step 2") && e.contains("recorded"), "{e}");
    let mut t = ts[4].clone();
    t.results[1].push_str(" and one more line");
    let e = tr::replay(&t).err().unwrap().to_string();
    assert!(e.contains("trajectory t05 step 1: appends"), "{e}");
    let mut t = ts[0].clone();
    t.user.push('!');
    assert!(tr::replay(&t).err().unwrap().to_string().contains("the prompt tokenizes to"));
    // malformed files: short errors, never a panic
    for bad in ["", "{}", "{\"trajectories\": [{\"name\": \"x\"}]}", "{\"trajectories\": 3}"] {
        assert!(tr::from_json(bad).err().unwrap().to_string().starts_with("trajectories:"), "{bad}");
    }
}
