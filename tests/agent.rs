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
    assert_eq!(
        tr::to_json(&ts),
        committed(),
        "regenerate with `mk agent-trajectories --out experiments/agent/trajectories.json`"
    );
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

mod common;

/// The fixed-count replay on the tiny reference (a truncated t01: its first 150 prompt tokens, three
/// steps of 5 emitted tokens and appends of 37 and 45, so the appends cross and miss the 64-token
/// boundaries): a resident session and a stateless one (the whole history re-prefilled each step) emit
/// the same tokens at every step, exactly the recorded counts, and end in the same state bit for bit; the
/// resident one prefills fewer tokens. The negative control (unanchored appends) ends in another state.
#[test]
fn resident_and_stateless_replays_emit_the_same_tokens_and_end_in_the_same_state() {
    use mk::agent::replay::{replay, Residency};
    let ck = mk::model::checkpoint::Checkpoint::open(common::tiny()).unwrap();
    let w = mk::model::forward::Weights::from_checkpoint(&ck);
    let t01 = tr::replay(&tr::from_json(&committed()).unwrap()[0]).unwrap();
    let r = tr::Replay {
        prompt: t01.prompt[..150].to_vec(),
        steps: vec![(5, t01.steps[0].1[..37].to_vec()), (5, t01.steps[1].1[..45].to_vec()), (5, vec![])],
    };
    let n = 150 + 15 + 37 + 45;
    let res = replay(&w, &r, Residency::Resident, 512).unwrap();
    let st = replay(&w, &r, Residency::Stateless, 512).unwrap();
    for (i, (a, b)) in res.steps.iter().zip(&st.steps).enumerate() {
        assert_eq!(a.emitted.len(), 5, "step {i}: the recorded count");
        assert_eq!(a.emitted, b.emitted, "step {i}: resident and stateless emit other tokens");
    }
    assert_eq!(common::first_difference(&res.session.state, &st.session.state, n), None);
    let (pr, ps): (usize, usize) =
        (res.steps.iter().map(|s| s.prefill_tokens).sum(), st.steps.iter().map(|s| s.prefill_tokens).sum());
    assert!(pr < ps, "resident prefilled {pr} tokens, stateless {ps}");
    assert_eq!(ps, 150 + (150 + 5 + 37) + (150 + 5 + 37 + 5 + 45));
    let bad = replay(&w, &r, Residency::ResidentUnanchored, 512).unwrap();
    assert!(
        common::first_difference(&bad.session.state, &st.session.state, n).is_some(),
        "the negative control must differ"
    );
    // a trajectory past the session's context is refused
    assert!(replay(&w, &r, Residency::Resident, 200).err().unwrap().to_string().contains("the session holds 200"));
}

/// Two truncated trajectories (t01's and t02's first 150 prompt tokens, two steps of 4 emitted tokens
/// and an append of 30 / 40 between) as sessions of one pool, their steps interleaved, emit what each
/// emits replayed alone and end in its state bit for bit (the pool: KV in 256-token pages).
#[test]
fn pooled_interleaved_replays_emit_what_each_emits_alone() {
    use mk::agent::replay::{replay, replay_pooled, Residency};
    let ck = mk::model::checkpoint::Checkpoint::open(common::tiny()).unwrap();
    let w = mk::model::forward::Weights::from_checkpoint(&ck);
    let ts = tr::from_json(&committed()).unwrap();
    let cut = |i: usize, a: usize| {
        let t = tr::replay(&ts[i]).unwrap();
        tr::Replay { prompt: t.prompt[..150].to_vec(), steps: vec![(4, t.steps[0].1[..a].to_vec()), (4, vec![])] }
    };
    let rs = [cut(0, 30), cut(1, 40)];
    let (runs, mut pool, ids) = replay_pooled(&w, &rs, 4, 512).unwrap();
    for (i, r) in rs.iter().enumerate() {
        let alone = replay(&w, r, Residency::Resident, 512).unwrap();
        for (k, (a, b)) in runs[i].iter().zip(&alone.steps).enumerate() {
            assert_eq!((&a.emitted, a.prefill_tokens), (&b.emitted, b.prefill_tokens), "trajectory {i} step {k}");
        }
        let n = alone.session.tokens().len();
        assert_eq!(
            common::first_difference(&pool.snapshot(ids[i], &w).unwrap(), &alone.session.state, n),
            None,
            "trajectory {i}"
        );
    }
    // a pool too small for the second session's prompt refuses it before running it
    let e = replay_pooled(&w, &rs, 1, 512).err().unwrap().to_string();
    assert!(e.contains("needs 1 more pages, 0 are free"), "{e}");
}

/// Issue 29 item 6: the ids a peer engine replays (`mk agent-trajectories --ids`) are the replay's, with
/// the model's config beside them.
#[test]
fn the_peers_ids_are_the_replays() {
    let ts = tr::from_json(&committed()).unwrap();
    let cfg = mk::model::config::ModelConfig::preset("tiny").unwrap();
    let text = tr::replays_json(&ts[..2], cfg.to_hf_json()).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["config"], cfg.to_hf_json());
    let out = v["trajectories"].as_array().unwrap();
    assert_eq!(out.len(), 2);
    for (t, o) in ts.iter().zip(out) {
        let r = tr::replay(t).unwrap();
        assert_eq!(o["name"], t.name.as_str());
        let ids = |x: &serde_json::Value| -> Vec<u32> {
            x.as_array().unwrap().iter().map(|i| i.as_u64().unwrap() as u32).collect()
        };
        assert_eq!(ids(&o["prompt"]), r.prompt);
        let steps = o["steps"].as_array().unwrap();
        assert_eq!(steps.len(), r.steps.len());
        for (s, (emit, append)) in steps.iter().zip(&r.steps) {
            assert_eq!(s["emit"].as_u64().unwrap() as usize, *emit);
            assert_eq!(ids(&s["append"]), *append);
        }
    }
}

#[test]
fn the_gpu_replay_refuses_bad_arguments_before_it_needs_a_gpu() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let args = |only: &str, m: u32| mk::verify::agent::Args {
        dir: root.join("no-such-checkpoint"),
        trajectories: root.join("experiments/agent/trajectories.json"),
        only: vec![only.to_string()],
        max_steps: 1,
        m,
        stateless: false,
        control: false,
        grammar: false,
        park: false,
        interleaved: false,
        speculate_agree: Vec::new(),
        prefill: 0,
        out: None,
        cache: root.join("cache"),
        defines: mk::exec::gpu::Defines::default(),
    };
    let e = mk::verify::agent::run(&args("t01", 1)).unwrap_err().to_string();
    assert!(e.contains("--m 1"), "{e}");
    let e = mk::verify::agent::run(&args("t99", 8)).unwrap_err().to_string();
    assert!(e.contains("no trajectory t99"), "{e}");
    let e = mk::verify::agent::run(&args("t01", 8)).unwrap_err().to_string();
    assert!(e.contains("no-such-checkpoint"), "{e}");
    let e =
        mk::verify::agent::run(&mk::verify::agent::Args { max_steps: 0, ..args("t01", 8) }).unwrap_err().to_string();
    assert!(e.contains("nothing to replay"), "{e}");
    let e = mk::verify::agent::run(&mk::verify::agent::Args { speculate_agree: vec![8], ..args("t01", 8) })
        .unwrap_err()
        .to_string();
    assert!(e.contains("--speculate-agree 8"), "{e}");
}
