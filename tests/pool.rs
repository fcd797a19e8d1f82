//! The session pool on the CPU reference (issue 29 items 1, 2 and 4): a session's tokens and state are
//! bit for bit those of the same session run alone on its own `Session`, whether it ran interleaved
//! with others, was forked (the parent and the branch both), or was parked and restored while another
//! session took its pages; with a negative control (forks without copy-on-write), and the allocator's
//! refusals leave the pool as it was.

use mk::agent::pool::{page_bytes, sessions_that_fit, state_bytes, Pool, SessionId, PAGE_TOKENS};
use mk::model::forward::Weights;
use mk::model::ops::argmax;
use mk::model::prefill::Session;

mod common;

fn checkpoint() -> mk::model::checkpoint::Checkpoint {
    mk::model::checkpoint::Checkpoint::open(common::tiny()).unwrap()
}

/// Deterministic token ids (a fixed LCG), distinct per `seed`.
fn ids(seed: u32, n: usize) -> Vec<u32> {
    let mut x = seed.wrapping_mul(2_654_435_761).wrapping_add(12_345);
    (0..n)
        .map(|_| {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
            (x >> 8) % 240_000
        })
        .collect()
}

/// One step of a session: append `new` (if any), then `emit` greedy tokens; returns them.
fn step(s: &mut Session, w: &Weights, new: &[u32], emit: usize) -> Vec<u32> {
    let mut l = if new.is_empty() { None } else { Some(s.append(w, new).unwrap()) };
    let mut out = Vec::new();
    for _ in 0..emit {
        let t = match l.take() {
            Some(l) => argmax(&l) as u32,
            None => *out.last().unwrap_or(s.tokens().last().unwrap()),
        };
        out.push(t);
        l = Some(s.step(w, t).unwrap());
    }
    out
}

fn pooled(p: &mut Pool, id: SessionId, w: &Weights, new: &[u32], emit: usize) -> Vec<u32> {
    let upto = p.tokens(id).unwrap().len() + new.len() + emit;
    p.run(id, w, upto, |s, w| Ok(step(s, w, new, emit))).unwrap()
}

const CTX: usize = 640;

/// Two sessions whose steps alternate (each crossing a page boundary) emit what each emits alone and
/// end in its state; a fork's parent and branch both match sessions fed their histories alone, with
/// the shared page copied once; the negative control (no copy-on-write) corrupts the parent.
#[test]
fn interleaved_and_forked_sessions_are_bit_identical_to_sessions_alone() {
    let ck = checkpoint();
    let w = Weights::from_checkpoint(&ck);
    let cfg = &w.cfg;
    let (pa, pb, xa, xb) = (ids(1, 270), ids(2, 250), ids(3, 20), ids(4, 30));
    // alone
    let mut a = Session::new(cfg, CTX);
    let ea = [step(&mut a, &w, &pa, 3), step(&mut a, &w, &xa, 3)];
    let mut b = Session::new(cfg, CTX);
    let eb = [step(&mut b, &w, &pb, 2), step(&mut b, &w, &xb, 4)];
    // interleaved on a pool
    let mut pool = Pool::new(cfg, 8, 4, CTX).unwrap();
    let (ia, ib) = (pool.open().unwrap(), pool.open().unwrap());
    assert_eq!(pooled(&mut pool, ia, &w, &pa, 3), ea[0]);
    assert_eq!(pooled(&mut pool, ib, &w, &pb, 2), eb[0]);
    assert_eq!(pooled(&mut pool, ia, &w, &xa, 3), ea[1]);
    assert_eq!(pooled(&mut pool, ib, &w, &xb, 4), eb[1]);
    let (na, nb) = (a.tokens().len(), b.tokens().len());
    assert_eq!(common::first_difference(&pool.snapshot(ia, &w).unwrap(), &a.state, na), None);
    assert_eq!(common::first_difference(&pool.snapshot(ib, &w).unwrap(), &b.state, nb), None);
    assert_eq!(pool.free_pages(), 8 - 2 * 2, "two sessions of two pages each");
    pool.close(ia).unwrap();
    pool.close(ib).unwrap();
    assert_eq!(pool.free_pages(), 8);

    // a fork after the prompt (270 tokens: its second page shared, partly filled); then the parent
    // appends (its copy of the shared page), the branch re-runs from its checkpoint in that page and
    // appends, and the parent decodes over its own page
    let (y, x) = (ids(5, 20), ids(6, 25));
    let mut par = Session::new(cfg, CTX);
    let e0 = step(&mut par, &w, &pa, 1);
    let e_par = [step(&mut par, &w, &y, 2), step(&mut par, &w, &[], 3)];
    let mut br = Session::new(cfg, CTX);
    let _ = step(&mut br, &w, &pa, 1);
    let e_br = step(&mut br, &w, &x, 3);
    let run = |cow: bool| {
        let mut pool = Pool::new(cfg, 8, 4, CTX).unwrap();
        if !cow {
            pool = pool.without_copy_on_write();
        }
        let p = pool.open().unwrap();
        assert_eq!(pooled(&mut pool, p, &w, &pa, 1), e0);
        let c = pool.fork(p).unwrap();
        assert_eq!(pool.free_pages(), 6, "the fork shares the parent's two pages");
        let got_par0 = pooled(&mut pool, p, &w, &y, 2);
        let got_br = pooled(&mut pool, c, &w, &x, 3);
        let got_par1 = pooled(&mut pool, p, &w, &[], 3);
        let (sp, sc) = (pool.snapshot(p, &w).unwrap(), pool.snapshot(c, &w).unwrap());
        (pool.stats.cow_copies, [got_par0, got_par1], got_br, sp, sc)
    };
    let (copies, got_par, got_br, sp, sc) = run(true);
    assert_eq!(copies, 1, "one shared page written (the parent's second)");
    assert_eq!(got_par, e_par, "the parent after the fork");
    assert_eq!(got_br, e_br, "the branch");
    assert_eq!(common::first_difference(&sp, &par.state, par.tokens().len()), None, "the parent's state");
    assert_eq!(common::first_difference(&sc, &br.state, br.tokens().len()), None, "the branch's state");
    // negative control: the branch's writes land in the parent's page
    let (copies, _, _, sp, _) = run(false);
    assert_eq!(copies, 0);
    let d = common::first_difference(&sp, &par.state, par.tokens().len());
    assert!(d.as_deref().is_some_and(|d| d.contains("position 2")), "the negative control must differ: {d:?}");
}

/// A parked session's pages go to another session (which overwrites them); restored into other pages
/// it continues as the session alone does.
#[test]
fn a_parked_and_restored_session_continues_bit_for_bit() {
    let ck = checkpoint();
    let w = Weights::from_checkpoint(&ck);
    let cfg = &w.cfg;
    let (pa, pb, xa) = (ids(7, 300), ids(8, 400), ids(9, 20));
    let mut a = Session::new(cfg, CTX);
    let ea = [step(&mut a, &w, &pa, 2), step(&mut a, &w, &xa, 3)];
    let mut pool = Pool::new(cfg, 4, 2, CTX).unwrap();
    let ia = pool.open().unwrap();
    assert_eq!(pooled(&mut pool, ia, &w, &pa, 2), ea[0]);
    pool.park(ia).unwrap();
    assert_eq!(pool.free_pages(), 4);
    assert!(pool.run(ia, &w, 400, |_, _| Ok(())).unwrap_err().to_string().contains("parked"));
    let ib = pool.open().unwrap();
    let _ = pooled(&mut pool, ib, &w, &pb, 2);
    assert_eq!(pool.free_pages(), 2);
    pool.restore(ia).unwrap();
    assert_eq!(pooled(&mut pool, ia, &w, &xa, 3), ea[1]);
    assert_eq!(common::first_difference(&pool.snapshot(ia, &w).unwrap(), &a.state, a.tokens().len()), None);
    assert_eq!((pool.stats.parks, pool.stats.restores), (1, 1));
}

/// Refusals: too few pages (the pool unchanged), too many sessions, a run past its reservation (the
/// session as it was), a restore that does not fit (it stays parked), an unknown session.
#[test]
fn the_pool_refuses_what_it_cannot_hold_and_stays_as_it_was() {
    let ck = checkpoint();
    let w = Weights::from_checkpoint(&ck);
    let cfg = &w.cfg;
    let mut pool = Pool::new(cfg, 2, 2, 2048).unwrap();
    let a = pool.open().unwrap();
    let long = ids(10, 3 * PAGE_TOKENS);
    let e = pool.run(a, &w, long.len(), |s, w| s.append(w, &long)).unwrap_err().to_string();
    assert!(e.contains("needs 3 more pages, 2 are free"), "{e}");
    assert_eq!((pool.free_pages(), pool.tokens(a).unwrap().len()), (2, 0));
    let short = ids(11, 10);
    let e = pool.run(a, &w, 5, |s, w| s.append(w, &short)).unwrap_err().to_string();
    assert!(e.contains("past its reservation of 5"), "{e}");
    assert_eq!((pool.free_pages(), pool.tokens(a).unwrap().len()), (2, 0));
    let _ = pool.open().unwrap();
    assert!(pool.open().unwrap_err().to_string().contains("all 2 resident session slots in use"));
    assert!(pool.run(a, &w, 4096, |_, _| Ok(())).unwrap_err().to_string().contains("passes the max context 2048"));
    assert!(pool.close(SessionId(9)).unwrap_err().to_string().contains("no session 9"));
    // a parked session of 2 pages cannot come back while another holds one of the 2
    let mut pool = Pool::new(cfg, 2, 2, 2048).unwrap();
    let a = pool.open().unwrap();
    let _ = pooled(&mut pool, a, &w, &ids(12, 300), 1);
    pool.park(a).unwrap();
    let b = pool.open().unwrap();
    let _ = pooled(&mut pool, b, &w, &ids(13, 5), 1);
    assert!(pool.restore(a).unwrap_err().to_string().contains("needs 2 pages, 1 are free"));
    pool.close(b).unwrap();
    pool.restore(a).unwrap();
    assert!(Pool::new(cfg, 0, 1, 16).is_err());
}

/// The GPU pool's sizes for the 27B (derived, bf16 KV): a page of 256 positions is 16 MiB, a state slot
/// (recurrent states and conv rings, with the checkpoint's copy) about 310 MB.
#[test]
fn the_27b_pool_sizes() {
    let cfg = mk::model::config::ModelConfig::preset("qwen3.5-27b").unwrap();
    assert_eq!(page_bytes(&cfg), 16 * 2 * 256 * 1024 * 2);
    assert_eq!(state_bytes(&cfg), 2 * 48 * (48 * 128 * 128 * 4 + 10_240 * 4 * 2));
    // e.g. 110 GB free after the weights: 110e9 / (16 x 16 MiB + 309,854,208) and / (128 x 16 MiB + ..)
    assert_eq!(sessions_that_fit(&cfg, 110_000_000_000, 4096), 190);
    assert_eq!(sessions_that_fit(&cfg, 110_000_000_000, 32_768), 44);
    assert_eq!(sessions_that_fit(&cfg, 110_000_000_000, 4097), 110_000_000_000 / (17 * 16_777_216 + 309_854_208));
}

/// The agent-step API: a step's tokens are the greedy continuation a plain session emits; a stop token
/// ends the step after it (and it is in the session); the clocks are ordered; empty steps are refused.
#[test]
fn an_agent_step_emits_the_greedy_tokens_and_stops_on_a_stop_token() {
    use mk::agent::step::{agent_step, StepSpec};
    let ck = checkpoint();
    let w = Weights::from_checkpoint(&ck);
    let (p, x) = (ids(14, 90), ids(15, 12));
    let mut alone = Session::new(&w.cfg, CTX);
    let e = [step(&mut alone, &w, &p, 5), step(&mut alone, &w, &x, 3)];
    let mut pool = Pool::new(&w.cfg, 2, 2, CTX).unwrap();
    let id = pool.open().unwrap();
    let out = agent_step(&mut pool, id, &w, &p, &StepSpec { max_tokens: 5, stop: vec![] }).unwrap();
    assert_eq!((out.tokens.as_slice(), out.stopped), (e[0].as_slice(), None));
    assert!(0.0 < out.first_ms && out.first_ms <= out.last_ms);
    let out = agent_step(&mut pool, id, &w, &x, &StepSpec { max_tokens: 10, stop: vec![e[1][1]] }).unwrap();
    assert_eq!((out.tokens.as_slice(), out.stopped), (&e[1][..2], Some(e[1][1])));
    assert_eq!(pool.tokens(id).unwrap().len(), 90 + 5 + 12 + 2);
    assert!(agent_step(&mut pool, id, &w, &[], &StepSpec { max_tokens: 1, stop: vec![] }).is_err());
    assert!(agent_step(&mut pool, id, &w, &x, &StepSpec { max_tokens: 0, stop: vec![] }).is_err());
}
