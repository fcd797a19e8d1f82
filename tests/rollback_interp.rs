//! Rollback on the interpreter (issue 27, item 5): on the tiny preset, rounds of an M = 4 verification
//! step (the last token and three drafts) each keep n = 1 ..= 4 rows (every accept count 0 ..= 3), over
//! 270 positions (across the first attention partition boundary, 256), and of M = 3 (a step of M moves
//! the positions by M, which the conv ring of 4 slots would not tell apart from a commit at M = 4).
//! The GDN updates are deferred (the next step commits the kept rows: `exec::interp` rollback.rs), so
//! each round's kept rows' logits are compared with the direct reference stepping only the kept
//! tokens (a wrong commit of the last round shows in them), and the committed state after a flush:
//! every conv ring and recurrent state, the KV caches below the position, and the position, bit for
//! bit. Flushed after every round (the state compared each round) and only at the end (the commit
//! carried by the next real step). The negative control keeps the rejected rows' GDN updates.

mod common;
use mk::compiler::{compile, h200};
use mk::exec::interp::{Interp, Order};
use mk::model::checkpoint::Checkpoint;
use mk::model::config::ModelConfig;
use mk::model::forward::{step, State, Weights};

const M: usize = 4;

/// The token fed at position i, and a draft that differs from it (a fixed pseudo-random walk).
fn token(i: usize, salt: u64, vocab: usize) -> u32 {
    ((i as u64 * 2_654_435_761 + 9419 + salt * 40_503) % vocab as u64) as u32
}

/// Runs rounds of M = `m` rows until position `until`; round s keeps `keep(s)` rows; `flush_each`:
/// flush and compare the state after every round (else at the end). Returns the first difference.
fn rounds(m: usize, until: usize, keep: impl Fn(usize) -> usize, flush_each: bool, negative: bool) -> Option<String> {
    let ck = Checkpoint::open(common::tiny()).unwrap();
    let w = Weights::from_checkpoint(&ck);
    let cfg = ModelConfig::preset("tiny").unwrap();
    let p = compile(&cfg, "tiny", &h200(m as u32)).unwrap();
    let vocab = w.cfg.vocab;
    let mut st = State::new(&w.cfg, p.target.max_context as usize);
    let mut it = Interp::new(&p, &ck).unwrap();
    let bits = |a: &[f32], b: &[f32]| a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits());
    let mut s = 0;
    while it.pos() < until {
        let pos = it.pos();
        let toks: Vec<u32> = (0..m).map(|r| token(pos + r, r as u64, vocab)).collect();
        it.step_rows(&toks, Order::Program).unwrap();
        let got = it.logits_rows();
        let n = keep(s);
        let commit = if negative { Interp::commit_rows_keeping_all } else { Interp::commit_rows };
        commit(&mut it, n).unwrap();
        for (r, &t) in toks[..n].iter().enumerate() {
            let want = step(&w, &mut st, t, None).unwrap();
            if !bits(&want, &got[r * vocab..(r + 1) * vocab]) {
                return Some(format!("round {s} (position {pos}, keeping {n}): row {r}'s logits differ"));
            }
        }
        if it.pos() != pos + n {
            return Some(format!("round {s}: position {} after keeping {n} rows from {pos}", it.pos()));
        }
        if flush_each || it.pos() >= until {
            it.flush_rows().unwrap();
            if let Some(d) = common::state_difference(&it, &st, cfg.attn_kv_dim(), Some(pos + n)) {
                return Some(format!("round {s} (position {pos}, keeping {n}): {d}"));
            }
        }
        s += 1;
    }
    None
}

#[test]
fn every_accept_count_rolls_back_to_the_sequential_state_bit_for_bit() {
    // n = 1, 2, 3, 4, 1, 2, .., with a run of full rounds (positions 150-190); the boundary at 256 is
    // crossed by the round at 253
    assert_eq!(rounds(M, 270, |s| if (60..70).contains(&s) { M } else { 1 + s % M }, true, false), None);
    assert_eq!(rounds(M, 270, |s| 1 + (s * 7) % M, false, false), None);
    assert_eq!(rounds(3, 40, |s| 1 + s % 3, true, false), None);
}

#[test]
fn negative_control_keeping_the_rejected_rows_gdn_updates_is_caught() {
    let e = rounds(M, 12, |s| 1 + s % M, true, true).expect("the rejected rows' updates must show");
    assert!(e.starts_with("round 0") && e.contains("state"), "{e}");
    let e = rounds(M, 12, |s| 1 + s % M, false, true).expect("and in the next round's logits");
    assert!(e.starts_with("round 1") && e.contains("logits"), "{e}");
}

#[test]
fn commits_outside_a_step_and_one_row_programs_are_refused() {
    let ck = Checkpoint::open(common::tiny()).unwrap();
    let cfg = ModelConfig::preset("tiny").unwrap();
    let p = compile(&cfg, "tiny", &h200(M as u32)).unwrap();
    let mut it = Interp::new(&p, &ck).unwrap();
    let e = it.commit_rows(1).unwrap_err().to_string();
    assert!(e.contains("no verification step"), "{e}");
    for n in [0, M + 1] {
        it.step_rows(&[1, 2, 3, 4], Order::Program).unwrap();
        let e = it.commit_rows(n).unwrap_err().to_string();
        assert!(e.contains(&format!("commit of {n} rows of a 4-row verification step")), "{e}");
    }
    // one commit a step: a second would rewind twice
    it.step_rows(&[1, 2, 3, 4], Order::Program).unwrap();
    it.commit_rows(2).unwrap();
    let e = it.commit_rows(1).unwrap_err().to_string();
    assert!(e.contains("one commit a step"), "{e}");
    let one = compile(&cfg, "tiny", &h200(1)).unwrap();
    let mut it = Interp::new(&one, &ck).unwrap();
    let e = it.commit_rows(1).err().unwrap().to_string();
    assert!(e.contains("M = 1"), "{e}");
}

#[test]
fn speculation_on_the_program_emits_the_plain_greedy_tokens() {
    let ck = Checkpoint::open(common::tiny()).unwrap();
    let w = Weights::from_checkpoint(&ck);
    let cfg = ModelConfig::preset("tiny").unwrap();
    let p = compile(&cfg, "tiny", &h200(M as u32)).unwrap();
    let prompt = [5u32, 99, 1234, 7, 300, 42];
    let steps = 40;
    let greedy = mk::model::sample::SamplingParams { temperature: 0.0, top_k: 0, top_p: 1.0 };
    let truth = mk::model::forward::generate(&w, &prompt, steps + M, &greedy, 0).unwrap();
    // k = 3 drafts a round, the first `agree` of them the target's own continuation; the prompt fed 4
    // rows a step (its last chunk padded, the padding rolled back)
    for agree in [0, 1, M - 1] {
        let mut it = Interp::new(&p, &ck).unwrap();
        let (toks, stats) = mk::exec::interp::spec::speculate_forced(&mut it, &prompt, &truth, steps, agree).unwrap();
        assert_eq!(toks, truth[..steps], "agree = {agree}");
        assert_eq!(stats.accepted, stats.rounds * agree, "every round accepts its agreeing drafts, no more");
    }
    // refused: agree > k, M = 1, a context overflow
    let mut it = Interp::new(&p, &ck).unwrap();
    let e = mk::exec::interp::spec::speculate_forced(&mut it, &prompt, &truth, steps, M).unwrap_err().to_string();
    assert!(e.contains("agreeing drafts"), "{e}");
    let e = mk::exec::interp::spec::speculate_forced(&mut it, &prompt, &truth, 1 << 20, 0).unwrap_err().to_string();
    assert!(e.contains("context"), "{e}");
    let one = compile(&cfg, "tiny", &h200(1)).unwrap();
    let mut it = Interp::new(&one, &ck).unwrap();
    let e = mk::exec::interp::spec::speculate_forced(&mut it, &prompt, &truth, steps, 0).unwrap_err().to_string();
    assert!(e.contains("M = 1"), "{e}");
}

/// After speculation the program holds the prompt and every returned token but the last, whatever the
/// last round accepted (it keeps only the rows through the second-last returned token: the GPU agent
/// replay feeds the last one itself): after a flush, every state buffer equals, bit for bit, that of the
/// same tokens fed as plain M-row steps. Negative control: the state one token further differs.
#[test]
fn speculation_leaves_the_state_of_the_tokens_it_returns() {
    let ck = Checkpoint::open(common::tiny()).unwrap();
    let w = Weights::from_checkpoint(&ck);
    let cfg = ModelConfig::preset("tiny").unwrap();
    let p = compile(&cfg, "tiny", &h200(M as u32)).unwrap();
    let prompt = [5u32, 99, 1234, 7, 300, 42];
    let greedy = mk::model::sample::SamplingParams { temperature: 0.0, top_k: 0, top_p: 1.0 };
    let truth = mk::model::forward::generate(&w, &prompt, 40, &greedy, 0).unwrap();
    let states = |it: &Interp| -> Vec<(String, Vec<u32>)> {
        let pos = it.pos();
        p.buffers
            .iter()
            .filter(|b| b.kind == mk::isa::BufKind::State && !b.name.starts_with("gdn_kept_"))
            .map(|b| {
                let v = it.buffer_full(&b.name).unwrap();
                let kv = b.name.starts_with("k_cache.") || b.name.starts_with("v_cache.");
                let n = if kv { pos * b.cols as usize } else { v.len() };
                (b.name.clone(), v[..n].iter().map(|x| x.to_bits()).collect())
            })
            .collect()
    };
    let fed = |tokens: &[u32]| {
        let mut it = Interp::new(&p, &ck).unwrap();
        for chunk in tokens.chunks(M) {
            let mut rows = chunk.to_vec();
            rows.resize(M, 0);
            it.step_rows(&rows, Order::Program).unwrap();
            it.commit_rows(chunk.len()).unwrap();
        }
        it.flush_rows().unwrap();
        (it.pos(), states(&it))
    };
    // steps chosen so that the last round overshoots at full acceptance (k = M - 1 drafts a round)
    for (steps, agree) in [(10, M - 1), (9, 1), (7, 0)] {
        let mut it = Interp::new(&p, &ck).unwrap();
        let (toks, _) = mk::exec::interp::spec::speculate_forced(&mut it, &prompt, &truth, steps, agree).unwrap();
        assert_eq!(toks, truth[..steps]);
        it.flush_rows().unwrap();
        let mut history = prompt.to_vec();
        history.extend_from_slice(&toks[..steps - 1]);
        let (pos, want) = fed(&history);
        assert_eq!(it.pos(), pos, "steps {steps}, agree {agree}: position");
        assert!(states(&it) == want, "steps {steps}, agree {agree}: the state differs from its tokens'");
        // negative control: one token more fed
        history.push(toks[steps - 1]);
        assert!(fed(&history).1 != want, "the control: one token more must change the state");
    }
}
