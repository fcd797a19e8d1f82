//! The MTP drafter as a program (issue 27, item 1): the compiler's drafter programs on the interpreter
//! against the CPU reference's `model::mtp::draft_step`, bit for bit (logits, the drafted token and the
//! drafter's KV cache), in program order and in random dependency-respecting orders, with a negative
//! control (the fc's two norm weights exchanged between its halves); the pruned head (item 2) against
//! `model::mtp::pruned_argmax` over the same working vocabulary.

mod common;

use mk::compiler::{compile, compile_drafter, compile_drafter_pruned, h200, DraftInput};
use mk::exec::interp::{Interp, Order};
use mk::isa::{slot, Opcode, Program};
use mk::model::checkpoint::Checkpoint;
use mk::model::config::ModelConfig;
use mk::model::forward::Weights;
use mk::model::mtp::{draft_step, pruned_argmax, MtpState, MtpWeights, WorkingVocab};

fn bits(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

fn token(i: usize, vocab: usize) -> u32 {
    ((i as u64 * 2_654_435_761 + 12_345) % vocab as u64) as u32
}

/// Copies buffer `name` of `from` into `to` (the drafter's programs share their state: one storage).
fn copy_buffer(from: &Interp, to: &mut Interp, prog: &Program, name: &str) {
    let v = from.buffer(name).unwrap().to_vec();
    to.bufs[prog.buffer_id(name).unwrap()] = v;
}

/// `rows` rows fed from the target's hidden states (positions 0..rows: token p + 1, the target's
/// residual at p), then `chain` drafts chained on the drafter's own output; each row's logits, token
/// and the drafter's KV cache against draft_step. Returns the first difference.
fn drafts(rows: usize, chain: usize, order: Order, broken: bool) -> Option<String> {
    let ck = Checkpoint::open(common::tiny()).unwrap();
    let w = Weights::from_checkpoint(&ck);
    let m = MtpWeights::from_checkpoint(&ck).unwrap();
    let cfg = ModelConfig::preset("tiny").unwrap();
    let t = h200(1);
    let target = compile(&cfg, "tiny", &t).unwrap();
    let mut from_target = compile_drafter(&cfg, "tiny-mtp", &t, DraftInput::Target).unwrap();
    let own = compile_drafter(&cfg, "tiny-mtp", &t, DraftInput::Own).unwrap();
    if broken {
        // the negative control: the fc's norm weights exchanged between the halves (the program still
        // validates: both are vectors of the hidden size)
        let fc = from_target.words.iter_mut().find(|x| x.opcode == Opcode::MtpFc).unwrap();
        fc.ops.swap(slot::W1, slot::W2);
    }
    let vocab = cfg.vocab;
    let mut tgt = Interp::new(&target, &ck).unwrap();
    let mut dt = Interp::new(&from_target, &ck).unwrap();
    let mut st = MtpState::new(&cfg, t.max_context as usize);
    let eps = cfg.rms_eps as f32;
    let norm = ck.f32_vec(&format!("{}norm.weight", cfg.prefix));
    let fed: Vec<u32> = (0..=rows).map(|i| token(i, vocab)).collect();
    for p in 0..rows {
        tgt.step(fed[p], Order::Program).unwrap();
        let h = tgt.buffer("h").unwrap().to_vec();
        let mut hidden = vec![0f32; h.len()];
        mk::model::ops::rms_norm_block(&h, &norm, eps, &mut hidden);
        let (want, _) = draft_step(&w, &m, &mut st, fed[p + 1], &hidden, p).unwrap();
        dt.bufs[from_target.buffer_id("h_in").unwrap()] = h;
        let tok = dt.step(fed[p + 1], order).unwrap();
        if !bits(&want, dt.logits()) {
            return Some(format!("row {p} (from the target): the logits differ"));
        }
        if tok != mk::model::ops::argmax(&want) as u32 {
            return Some(format!("row {p}: drafted {tok}"));
        }
    }
    // chained drafts: the drafter's own residual through mtp.norm, its KV cache carried over
    let mut ch = Interp::new(&own, &ck).unwrap();
    for name in ["k_cache.0", "v_cache.0", "ctrl", "h"] {
        copy_buffer(&dt, &mut ch, &own, name);
    }
    let mtp_norm = ck.f32_vec("mtp.norm.weight");
    let (mut tok, mut pos) = (dt.buffer("ctrl").unwrap()[mk::isa::access::CTRL_TOKEN] as u32, rows);
    for j in 0..chain {
        let h = ch.buffer("h").unwrap().to_vec();
        let mut hidden = vec![0f32; h.len()];
        mk::model::ops::rms_norm_block(&h, &mtp_norm, eps, &mut hidden);
        let (want, _) = draft_step(&w, &m, &mut st, tok, &hidden, pos).unwrap();
        ch.bufs[own.buffer_id("h_in").unwrap()] = h;
        let next = ch.step(tok, order).unwrap();
        if !bits(&want, ch.logits()) {
            return Some(format!("chained draft {j} (position {pos}): the logits differ"));
        }
        if next != mk::model::ops::argmax(&want) as u32 {
            return Some(format!("chained draft {j}: drafted {next}"));
        }
        (tok, pos) = (next, pos + 1);
    }
    let kv = pos * cfg.attn_kv_dim();
    if !bits(&ch.buffer("k_cache.0").unwrap()[..kv], &st.k_cache[..kv])
        || !bits(&ch.buffer("v_cache.0").unwrap()[..kv], &st.v_cache[..kv])
    {
        return Some("the drafter's KV cache differs".into());
    }
    None
}

#[test]
fn the_drafter_program_is_draft_step_bit_for_bit() {
    assert_eq!(drafts(6, 4, Order::Program, false), None);
}

#[test]
fn the_drafter_program_in_any_order_is_draft_step_bit_for_bit() {
    assert_eq!(drafts(3, 2, Order::Shuffled(7), false), None);
}

#[test]
fn negative_control_swapped_fc_norms_are_caught() {
    let d = drafts(2, 0, Order::Program, true).expect("the broken drafter must differ");
    assert!(d.contains("row 0"), "{d}");
}

#[test]
fn the_pruned_head_scores_the_working_vocabulary_only() {
    let ck = Checkpoint::open(common::tiny()).unwrap();
    let w = Weights::from_checkpoint(&ck);
    let m = MtpWeights::from_checkpoint(&ck).unwrap();
    let cfg = ModelConfig::preset("tiny").unwrap();
    let t = h200(1);
    let target = compile(&cfg, "tiny", &t).unwrap();
    let pruned = compile_drafter_pruned(&cfg, "tiny-mtp", &t, DraftInput::Target, 150).unwrap();
    mk::isa::validate::validate(&pruned).unwrap();
    let lm = pruned.words.iter().find(|x| x.opcode == Opcode::LmHead).unwrap();
    assert_eq!(lm.rows, 192, "the capacity rounds up to the head's 64-row units");
    let (vocab, eps) = (cfg.vocab, cfg.rms_eps as f32);
    let norm = ck.f32_vec(&format!("{}norm.weight", cfg.prefix));
    let (mut tgt, mut dt) = (Interp::new(&target, &ck).unwrap(), Interp::new(&pruned, &ck).unwrap());
    let mut st = MtpState::new(&cfg, t.max_context as usize);
    // the working vocabulary: a core of 100 ids and the seen ones (some of them the full head's picks)
    let mut wv = WorkingVocab::new(vocab, 100);
    let (mut restricted, mut full_kept) = (0, 0);
    let fed: Vec<u32> = (0..=12).map(|i| token(i, vocab)).collect();
    for p in 0..12 {
        tgt.step(fed[p], Order::Program).unwrap();
        let h = tgt.buffer("h").unwrap().to_vec();
        let mut hidden = vec![0f32; h.len()];
        mk::model::ops::rms_norm_block(&h, &norm, eps, &mut hidden);
        let (full, xn) = draft_step(&w, &m, &mut st, fed[p + 1], &hidden, p).unwrap();
        let best = mk::model::ops::argmax(&full) as u32;
        if p % 3 == 0 {
            wv.add(best).unwrap(); // the session has seen it
        }
        wv.add(fed[p + 1]).unwrap();
        let want = pruned_argmax(&w.lm_head, &xn, &wv).unwrap();
        dt.set_head_rows(wv.ids()).unwrap();
        dt.bufs[pruned.buffer_id("h_in").unwrap()] = h;
        let got = dt.step(fed[p + 1], Order::Program).unwrap();
        assert_eq!(got, want, "row {p}: the pruned head drafted {got}, pruned_argmax {want}");
        // its logits by list position are the full head's at those ids, bit for bit
        for (i, &id) in wv.ids().iter().enumerate() {
            assert_eq!(dt.logits()[i].to_bits(), full[id as usize].to_bits(), "row {p}: position {i} (id {id})");
        }
        if want != best {
            restricted += 1;
        } else {
            full_kept += 1;
        }
    }
    // the list restricts (a head that ignored it would pick the full head's best every time) and keeps
    // the full head's choice when the vocabulary holds it
    assert!(restricted > 0 && full_kept > 0, "restricted {restricted}, full head's choice {full_kept}");
    // refused: lists it cannot take, programs without a pruned head, capacities off the vocabulary
    let e = dt.set_head_rows(&[5, 3]).unwrap_err().to_string();
    assert!(e.contains("ascend"), "{e}");
    let e = dt.set_head_rows(&(0..193).collect::<Vec<u32>>()).unwrap_err().to_string();
    assert!(e.contains("193 ids for a pruned head of 1 ..= 192"), "{e}");
    let e = dt.set_head_rows(&[vocab as u32]).unwrap_err().to_string();
    assert!(e.contains("off the vocabulary"), "{e}");
    let e = tgt.set_head_rows(&[1]).unwrap_err().to_string();
    assert!(e.contains("no pruned head"), "{e}");
    for cap in [0, vocab + 1] {
        let e = compile_drafter_pruned(&cfg, "x", &t, DraftInput::Own, cap).unwrap_err().to_string();
        assert!(e.contains("a pruned head of"), "{e}");
    }
}

#[test]
fn the_drafter_programs_validate_and_refuse_what_they_cannot_run() {
    let cfg = ModelConfig::preset("qwen3.5-27b").unwrap();
    for input in [DraftInput::Target, DraftInput::Own] {
        let p = compile_drafter(&cfg, "qwen3.5-27b-mtp", &h200(1), input).unwrap();
        mk::isa::validate::validate(&p).unwrap();
        let fc = p.words.iter().find(|w| w.opcode == Opcode::MtpFc).unwrap();
        assert_eq!(p.buffers[fc.ops[slot::W0] as usize].cols, 2 * cfg.hidden as u64);
        assert_eq!(p.words.iter().filter(|w| w.opcode == Opcode::LmHead).count(), 1);
    }
    let e = compile_drafter(&cfg, "x", &h200(4), DraftInput::Target).unwrap_err().to_string();
    assert!(e.contains("one row"), "{e}");
    let mut none = cfg.clone();
    none.mtp_layers = 0;
    let e = compile_drafter(&none, "x", &h200(1), DraftInput::Target).unwrap_err().to_string();
    assert!(e.contains("no MTP head"), "{e}");
}

/// The tiny target's M = k + 1 program and the drafter's two programs, 256 positions each.
fn spec_programs(cfg: &ModelConfig, k: usize) -> (Program, Program, Program) {
    let (mut t, mut t1) = (h200(k as u32 + 1), h200(1));
    t.max_context = 256;
    t1.max_context = 256;
    (
        compile(cfg, "tiny", &t).unwrap(),
        compile_drafter(cfg, "tiny-mtp", &t1, DraftInput::Target).unwrap(),
        compile_drafter(cfg, "tiny-mtp", &t1, DraftInput::Own).unwrap(),
    )
}

/// Greedy speculation on programs with the MTP drafter's programs (exec::interp::spec::speculate_mtp):
/// the plain greedy tokens, and the same drafts (every one) and acceptance as the CPU reference's MTP
/// rounds (model::spec_generate), at k = 3 and k = 1; a drafter with its fc's norms exchanged drafts
/// otherwise (the negative control).
#[test]
fn speculation_with_the_drafter_programs_is_the_references() {
    let ck = Checkpoint::open(common::tiny()).unwrap();
    let w = Weights::from_checkpoint(&ck);
    let m = MtpWeights::from_checkpoint(&ck).unwrap();
    let cfg = ModelConfig::preset("tiny").unwrap();
    let prompt: Vec<u32> = (0..5).map(|i| token(i, cfg.vocab)).collect();
    let steps = 24;
    let greedy =
        mk::model::forward::generate(&w, &prompt, steps, &mk::model::sample::SamplingParams::greedy(), 0).unwrap();
    let run = |k: usize, broken: bool| {
        let (target, mut dt, own) = spec_programs(&cfg, k);
        if broken {
            dt.words.iter_mut().find(|x| x.opcode == Opcode::MtpFc).unwrap().ops.swap(slot::W1, slot::W2);
        }
        let (mut it, mut a, mut b) =
            (Interp::new(&target, &ck).unwrap(), Interp::new(&dt, &ck).unwrap(), Interp::new(&own, &ck).unwrap());
        let progs = mk::exec::interp::spec::MtpPrograms { from_target: &mut a, own: &mut b };
        mk::exec::interp::spec::speculate_mtp(&mut it, progs, &prompt, steps, None).unwrap()
    };
    for k in [3usize, 1] {
        let (toks, stats) = run(k, false);
        let drafter = mk::model::spec_generate::Drafter::Mtp(&m);
        let (want, want_stats) =
            mk::model::spec_generate::generate_speculative(&w, &drafter, &prompt, steps, k).unwrap();
        assert_eq!(toks, greedy, "k = {k}: the plain greedy tokens");
        assert_eq!(toks, want, "k = {k}");
        // the same drafts, round by round (none is accepted with synthetic weights: the drafts are what
        // tells a wrong drafter)
        assert_eq!(stats, want_stats, "k = {k}: the reference's rounds, drafts and acceptance");
        assert_eq!(stats.drafts.len(), stats.rounds * k);
        if k == 3 {
            let (bt, bs) = run(k, true);
            assert_eq!(bt, greedy, "a wrong drafter still emits the target's tokens");
            assert_ne!(bs.drafts, want_stats.drafts, "the negative control: a wrong drafter's drafts");
        }
    }
}

/// With every draft forced to the greedy continuation (so every row of a round is kept), the drafter's KV
/// cache after speculation on programs is the one the reference's draft steps build row by row over the
/// emitted sequence (row p: token p + 1, the target's hidden at p): the rebuild over whole rounds.
#[test]
fn the_drafter_cache_rebuilt_over_whole_rounds_is_the_sequential_one() {
    let ck = Checkpoint::open(common::tiny()).unwrap();
    let w = Weights::from_checkpoint(&ck);
    let m = MtpWeights::from_checkpoint(&ck).unwrap();
    let cfg = ModelConfig::preset("tiny").unwrap();
    let prompt: Vec<u32> = (0..3).map(|i| token(i, cfg.vocab)).collect();
    let (steps, k) = (13, 3);
    let greedy =
        mk::model::forward::generate(&w, &prompt, steps + k + 1, &mk::model::sample::SamplingParams::greedy(), 0)
            .unwrap();
    let (target, dt, own) = spec_programs(&cfg, k);
    let (mut it, mut a, mut b) =
        (Interp::new(&target, &ck).unwrap(), Interp::new(&dt, &ck).unwrap(), Interp::new(&own, &ck).unwrap());
    let progs = mk::exec::interp::spec::MtpPrograms { from_target: &mut a, own: &mut b };
    let (toks, stats) = mk::exec::interp::spec::speculate_mtp(&mut it, progs, &prompt, steps, Some(&greedy)).unwrap();
    assert_eq!(toks, greedy[..steps]);
    assert_eq!(stats.accepted, stats.rounds * k, "every forced draft kept");
    // the reference: the target's hidden states over the fed sequence, then the drafter row by row
    let fed: Vec<u32> = prompt.iter().chain(&greedy).copied().take(it.pos() + 1).collect();
    let mut st = mk::model::forward::State::new(&cfg, 256);
    let hidden: Vec<Vec<f32>> =
        fed[..it.pos()].iter().map(|&x| mk::model::forward::step_hidden(&w, &mut st, x, None).unwrap().1).collect();
    let mut ms = MtpState::new(&cfg, 256);
    let rows = it.pos() - 1; // the settled rows (the next round's first draft writes row it.pos() - 1)
    for p in 0..rows {
        draft_step(&w, &m, &mut ms, fed[p + 1], &hidden[p], p).unwrap();
    }
    let kv = rows * cfg.attn_kv_dim();
    assert!(bits(&a.buffer("k_cache.0").unwrap()[..kv], &ms.k_cache[..kv]), "the drafter's keys over {rows} rows");
    assert!(bits(&a.buffer("v_cache.0").unwrap()[..kv], &ms.v_cache[..kv]), "the drafter's values over {rows} rows");
}

/// Speculation switches itself off where it does not pay (`exec::spec::speculate_switched`): after a
/// window of rounds slower than the one-row step, the one-row program takes the target's state and
/// decodes the rest; the tokens stay the plain greedy ones. Never off when the one-row step is slower;
/// the negative control hands over every state but the recurrent ones and must emit other tokens.
#[test]
fn speculation_switches_itself_off_and_keeps_the_greedy_tokens() {
    use mk::exec::spec::{speculate_switched, Plain, Switch};
    let ck = Checkpoint::open(common::tiny()).unwrap();
    let w = Weights::from_checkpoint(&ck);
    let cfg = ModelConfig::preset("tiny").unwrap();
    let prompt: Vec<u32> = (0..5).map(|i| token(i, cfg.vocab)).collect();
    let steps = 20;
    let greedy =
        mk::model::forward::generate(&w, &prompt, steps, &mk::model::sample::SamplingParams::greedy(), 0).unwrap();
    let (target, dt, own) = spec_programs(&cfg, 3);
    let mut t1 = h200(1);
    t1.max_context = 256;
    let one = compile(&cfg, "tiny", &t1).unwrap();
    /// The negative control: the plain program without the target's recurrent states.
    struct Broken<'i, 'a>(&'i mut Interp<'a>);
    impl<'t> Plain<Interp<'t>> for Broken<'_, '_> {
        fn take_over(&mut self, target: &mut Interp<'t>) -> mk::error::Result<()> {
            self.0.take_over(target)?;
            for i in 0..self.0.bufs.len() {
                if self.0.program().buffers[i].name.starts_with("recurrent_state") {
                    self.0.bufs[i].iter_mut().for_each(|x| *x = 0.0);
                }
            }
            Ok(())
        }
        fn step(&mut self, token: u32) -> mk::error::Result<u32> {
            self.0.step(token, Order::Program)
        }
    }
    let run = |plain_ms: f64, broken: bool| {
        let (mut it, mut a, mut b, mut p) = (
            Interp::new(&target, &ck).unwrap(),
            Interp::new(&dt, &ck).unwrap(),
            Interp::new(&own, &ck).unwrap(),
            Interp::new(&one, &ck).unwrap(),
        );
        let mut progs = mk::exec::interp::spec::MtpPrograms { from_target: &mut a, own: &mut b };
        let mut bp = Broken(&mut p);
        let sw = if broken {
            Switch { plain: &mut bp as &mut dyn Plain<_>, plain_ms, window: 2 }
        } else {
            Switch { plain: &mut *bp.0 as &mut dyn Plain<_>, plain_ms, window: 2 }
        };
        speculate_switched(&mut it, &mut progs, &prompt, steps, None, Some(sw)).unwrap()
    };
    let (toks, stats) = run(1e9, false);
    assert_eq!((toks.as_slice(), stats.off_at), (&greedy[..], None), "never off when the one-row step is slower");
    let (toks, stats) = run(0.0, false);
    assert_eq!(toks, greedy, "the one-row program continues the greedy tokens");
    assert_eq!((stats.off_at, stats.rounds), (Some(3), 2), "off after its window of two rounds");
    let (toks, stats) = run(0.0, true);
    assert_eq!(stats.off_at, Some(3));
    assert_ne!(toks, greedy, "the negative control: a hand-over without the recurrent states");
}

/// Sampled speculation on programs (`exec::spec::speculate_sampled`, issue 27 item 4 on the executors:
/// drafts drawn from the drafter's distribution, `accept_sampled`'s exact rule over the target's rows):
/// with greedy warpers, and with top-k 1 at temperature 1 (every distribution on the argmax), it emits
/// the plain greedy tokens; at temperature 1 its draws are a pure function of the seed (the same seed,
/// the same tokens; another seed, others). The rule's distribution is `model::speculate`'s chi-square
/// test (with its negative control).
#[test]
fn sampled_speculation_on_programs_is_greedy_at_top_k_one_and_seeded() {
    use mk::exec::spec::{speculate_sampled, Sampled};
    use mk::model::sample::SamplingParams;
    let ck = Checkpoint::open(common::tiny()).unwrap();
    let w = Weights::from_checkpoint(&ck);
    let cfg = ModelConfig::preset("tiny").unwrap();
    let prompt: Vec<u32> = (0..5).map(|i| token(i, cfg.vocab)).collect();
    let steps = 12;
    let greedy = mk::model::forward::generate(&w, &prompt, steps, &SamplingParams::greedy(), 0).unwrap();
    let (target, dt, own) = spec_programs(&cfg, 3);
    let run = |params: SamplingParams, seed: u64| {
        let (mut it, mut a, mut b) =
            (Interp::new(&target, &ck).unwrap(), Interp::new(&dt, &ck).unwrap(), Interp::new(&own, &ck).unwrap());
        let mut progs = mk::exec::interp::spec::MtpPrograms { from_target: &mut a, own: &mut b };
        let mut s = Sampled::new(params, seed).unwrap();
        speculate_sampled(&mut it, &mut progs, &prompt, steps, &mut s).unwrap()
    };
    let (toks, stats) = run(SamplingParams::greedy(), 0);
    assert_eq!(toks, greedy, "greedy warpers: the greedy tokens");
    assert!(stats.rounds > 0 && stats.drafts.len() == 3 * stats.rounds);
    let top1 = SamplingParams { temperature: 1.0, top_k: 1, top_p: 1.0 };
    assert_eq!(run(top1, 5).0, greedy, "top-k 1: every distribution on the argmax");
    let t1 = SamplingParams { temperature: 1.0, top_k: 0, top_p: 1.0 };
    let (a, b, c) = (run(t1, 5).0, run(t1, 5).0, run(t1, 6).0);
    assert_eq!(a, b, "the same seed, the same draws");
    assert_ne!(a, c, "another seed, other draws");
    assert_ne!(a, greedy, "temperature 1 samples");
    assert_eq!(a.len(), steps);
}
