//! The checks of `mk gpu` that need a GPU and a checkpoint: the op check (every op against the CPU
//! interpreter), soaks (synchronised against pipelined steps, memory allocated during a run), the
//! sampler against the CPU sampler, and multi-step megakernel launches against the graph. Each says
//! "verdict: ok" or fails with the first difference.

use std::path::Path;

use crate::error::Result;
use crate::exec::gpu::{Defines, Gpu, GpuExec};
use crate::isa::Program;
use crate::model::checkpoint::Checkpoint;
use crate::model::upload::Upload;

/// The checkpoint's decode program for `max_context` positions (rounded up to the attention
/// partition) on the GPU, uploaded and compiled.
pub fn open(dir: &Path, max_context: usize, cache: &Path, defines: &Defines) -> Result<(Checkpoint, Program, GpuExec)> {
    open_units(dir, max_context, cache, defines, crate::isa::UnitPolicy::default())
}

/// `open` with the GEMV unit policy (`--units`).
pub fn open_units(
    dir: &Path,
    max_context: usize,
    cache: &Path,
    defines: &Defines,
    units: crate::isa::UnitPolicy,
) -> Result<(Checkpoint, Program, GpuExec)> {
    let ck = Checkpoint::open(dir)?;
    let mut t = crate::compiler::h200(1);
    t.units = units;
    t.max_context = max_context.max(1).div_ceil(256) as u32 * 256;
    let prog = crate::compiler::compile(&ck.config, "checkpoint", &t)?;
    let d = GpuExec::new(Gpu::open()?, &prog, &Upload::new(&ck)?, cache, defines)?;
    Ok((ck, prog, d))
}

/// `mk gpu ops`: every op of `steps` + 1 steps against the CPU interpreter, within opcheck's tolerance;
/// with `drafter`, of the MTP drafter's program (`compile_drafter`, its hidden half handed the target
/// program's residual stream after one step on the interpreter).
pub fn ops(
    dir: &Path,
    steps: u32,
    cache: &Path,
    defines: &Defines,
    units: crate::isa::UnitPolicy,
    drafter: bool,
    pruned: Option<usize>,
) -> Result<()> {
    let (ck, prog, mut d) = if drafter {
        let ck = Checkpoint::open(dir)?;
        let mut t = crate::compiler::h200(1);
        t.units = units;
        t.max_context = 1024;
        let input = crate::compiler::DraftInput::Target;
        let p = match pruned {
            Some(cap) => crate::compiler::compile_drafter_pruned(&ck.config, "checkpoint-mtp", &t, input, cap)?,
            None => crate::compiler::compile_drafter(&ck.config, "checkpoint-mtp", &t, input)?,
        };
        let d = GpuExec::new(Gpu::open()?, &p, &Upload::new(&ck)?, cache, defines)?;
        (ck, p, d)
    } else {
        open_units(dir, 1024, cache, defines, units)?
    };
    let mut it = crate::exec::interp::Interp::new(&prog, &ck)?;
    if let Some(cap) = pruned {
        // every third id, about 60 % of the capacity: the last units score part of their rows or none
        let n = (cap * 3 / 5).max(1);
        let ids: Vec<u32> = (0..n as u32).map(|i| 3 * i + 1).collect();
        it.set_head_rows(&ids)?;
        d.set_head_rows(&ids)?;
    }
    if drafter {
        let target = crate::compiler::compile(&ck.config, "checkpoint", &prog.target)?;
        let mut ti = crate::exec::interp::Interp::new(&target, &ck)?;
        ti.step(9419, crate::exec::interp::Order::Program)?;
        let h = ti.buffer("h").unwrap_or_default().to_vec();
        let Some(at) = prog.buffer_id("h_in") else { crate::bail!("gpu ops: the drafter's program has no h_in") };
        it.bufs[at] = h;
    }
    let tokens: Vec<u32> = std::iter::once(9419).chain(1..=steps).collect();
    let stats = super::opcheck::check(&prog, &mut it, &mut d, &tokens)?;
    print!("{}", super::opcheck::print(&stats));
    match super::opcheck::verdict(&stats) {
        Ok(()) => {
            println!("verdict: ok (every element within {} of its buffer's largest magnitude)", super::opcheck::MAX_REL)
        }
        Err(bad) => crate::bail!("op check FAILED beyond max rel {}: {bad}", super::opcheck::MAX_REL),
    }
    Ok(())
}

/// `mk gpu soak`: `steps` graph steps synchronised, then pipelined; the tokens must agree and no
/// device memory may be allocated meanwhile.
pub fn soak(dir: &Path, steps: u32, cache: &Path, defines: &Defines) -> Result<()> {
    let (_, _, mut d) = open(dir, steps as usize + 1, cache, defines)?;
    d.reset()?;
    let mut tok = d.step(9419, false, |_, _| Ok(()))?;
    let mut synced = vec![tok];
    d.sync()?;
    let (free0, total) = d.mem_info()?;
    let t0 = std::time::Instant::now();
    for _ in 1..steps {
        tok = d.step(tok, false, |_, _| Ok(()))?;
        synced.push(tok);
    }
    d.sync()?;
    let ms_synced = t0.elapsed().as_secs_f64() * 1e3 / (steps.max(2) - 1) as f64;
    // The same sequence with one replay in flight ahead (tokens through pinned memory).
    d.reset()?;
    let t1 = std::time::Instant::now();
    let piped = d.generate(9419, steps as usize)?;
    let ms_piped = t1.elapsed().as_secs_f64() * 1e3 / steps.max(1) as f64;
    d.sync()?;
    let (free1, _) = d.mem_info()?;
    println!(
        "{} steps: {:.3} ms/token synchronised per step, {:.3} pipelined (one replay in flight ahead): \
         tokens {}; device memory free {} -> {} bytes of {} ({} allocated during the runs)",
        steps,
        ms_synced,
        ms_piped,
        if piped == synced {
            "identical".to_string()
        } else {
            format!("DIFFER from step {}", piped.iter().zip(&synced).position(|(a, b)| a != b).unwrap_or(0))
        },
        free0,
        free1,
        total,
        free0 as i64 - free1 as i64
    );
    if piped != synced {
        crate::bail!("gpu soak: the pipelined tokens differ from the synchronised ones");
    }
    Ok(())
}

/// `mk gpu sample`: the GPU sampler's tokens and kept-set sizes against the CPU sampler over five
/// settings (negative control: the CPU drawing with seed + 1), then its cost a token.
pub fn sample(dir: &Path, steps: u32, cache: &Path, defines: &Defines) -> Result<()> {
    use crate::model::sample::{candidates, sample, uniform_at, SamplingParams};
    let (_, _, mut d) = open(dir, steps as usize + 2, cache, defines)?;
    let settings = [(0.7, 20, 0.8), (1.0, 50, 1.0), (0.6, 2048, 0.95), (1.5, 1, 0.5), (2.0, 200, 0.3)];
    let (seed, mut bad, mut control_diff, mut total) = (7u64, 0u32, 0u32, 0u32);
    for (temperature, top_k, top_p) in settings {
        let p = SamplingParams { temperature, top_k, top_p };
        d.reset()?;
        d.set_sampling(&p, seed)?;
        let (mut tok, mut same, mut kept_same) = (9419u32, 0u32, 0u32);
        let top_k_only = SamplingParams { top_p: 1.0, ..p };
        // A setting that fails (the sampler's capacity) is reported and counted; the others run.
        let run = (|| -> Result<()> {
            for pos in 0..steps as u64 {
                let next = d.step(tok, false, |_, _| Ok(()))?;
                let logits = d.logits()?;
                let want = sample(&logits, &p, uniform_at(seed, pos))?;
                let other = sample(&logits, &p, uniform_at(seed + 1, pos))?;
                same += (next == want) as u32;
                // the kept set's size (top-k's threshold with its ties) against the CPU's
                kept_same += (d.sampler_kept()? as usize == candidates(&logits, &top_k_only).len()) as u32;
                control_diff += (other != next) as u32;
                total += 1;
                tok = next;
            }
            Ok(())
        })();
        bad += 2 * steps - same - kept_same;
        match run {
            Ok(()) => println!(
                "T {temperature} top-k {top_k} top-p {top_p}: {same} of {steps} GPU tokens equal the CPU's, \
                 the kept set's size in {kept_same}"
            ),
            Err(e) => {
                println!("T {temperature} top-k {top_k} top-p {top_p}: FAILED after {same} equal tokens: {e}")
            }
        }
    }
    d.set_sampling(&SamplingParams::greedy(), 0)?;
    println!("negative control (the CPU drawing with seed + 1): {control_diff} of {total} tokens differ");
    // What the sampler costs a token (the lm_head's top-k counting included):
    // pipelined generation, greedy (the sampler kernel returns at once) against sampled, one
    // warm-up run each, then the two timed runs alternated three times (medians).
    let mut timed = |p: &SamplingParams| -> Result<f64> {
        d.reset()?;
        d.set_sampling(p, seed)?;
        d.sync()?;
        let t = std::time::Instant::now();
        d.generate(9419, steps as usize)?;
        d.sync()?;
        Ok(t.elapsed().as_secs_f64() * 1e3 / steps as f64)
    };
    let sampled = SamplingParams { temperature: 0.7, top_k: 50, top_p: 0.95 };
    let (mut g, mut s) = (Vec::new(), Vec::new());
    timed(&SamplingParams::greedy())?;
    timed(&sampled)?;
    for _ in 0..3 {
        g.push(timed(&SamplingParams::greedy())?);
        s.push(timed(&sampled)?);
    }
    d.set_sampling(&SamplingParams::greedy(), 0)?;
    let median = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    };
    let (g, s) = (median(&mut g), median(&mut s));
    println!(
        "timing ({steps} pipelined steps, median of 3): greedy {g:.3} ms/token, sampled (T 0.7, top-k 50, top-p 0.95) \
         {s:.3} ms/token: the sampler costs {:.1} us a token ({:.2} % of the greedy step)",
        (s - g) * 1e3,
        (s - g) / g * 100.0
    );
    if bad > 0 || control_diff == 0 {
        crate::bail!(
            "gpu sample: {bad} tokens or kept-set sizes differ from the CPU sampler (negative control differed {control_diff} times)"
        );
    }
    println!("verdict: ok");
    Ok(())
}

/// `mk gpu multistep`: the megakernel one step a launch and `per_launch` steps a launch against the
/// graph (tokens and every non-weight buffer, bit for bit), and the device-side stop on both paths.
pub fn multistep(dir: &Path, steps: usize, per_launch: usize, cache: &Path, defines: &Defines) -> Result<()> {
    use crate::isa::BufKind;
    if steps < 2 || per_launch == 0 {
        crate::bail!("gpu multistep: --steps must be at least 2 (the stop is checked before the last) and --per-launch at least 1");
    }
    let (_, prog, mut d) = open(dir, steps + 2, cache, defines)?;
    let state = |d: &GpuExec| -> Result<Vec<(usize, Vec<u32>)>> {
        let mut v = Vec::new();
        for (i, b) in prog.buffers.iter().enumerate() {
            if b.kind != BufKind::Weight {
                v.push((i, d.read(i, b.elems() as usize)?.iter().map(|x| x.to_bits()).collect()));
            }
        }
        Ok(v)
    };
    // The graph, one replay per step.
    d.reset()?;
    let (mut tok, mut graph) = (9419u32, Vec::with_capacity(steps));
    d.sync()?;
    let t0 = std::time::Instant::now();
    for _ in 0..steps {
        tok = d.step(tok, false, |_, _| Ok(()))?;
        graph.push(tok);
    }
    d.sync()?;
    let ms_graph = t0.elapsed().as_secs_f64() * 1e3 / steps as f64;
    let want = state(&d)?;
    // A digest of the graph's tokens and final state: runs of the same binary must print the same one.
    let digest = {
        let words: Vec<u8> = graph
            .iter()
            .copied()
            .chain(want.iter().flat_map(|(_, v)| v.iter().copied()))
            .flat_map(|x| x.to_le_bytes())
            .collect();
        crate::isa::fnv_hex(&[&words])
    };
    println!("state digest after {steps} graph steps: {digest}");
    // The megakernel, one step per launch and `per_launch` steps per launch: both timed and compared.
    d.reset()?;
    let t1 = std::time::Instant::now();
    let (mut tok, mut one) = (9419u32, Vec::with_capacity(steps));
    for _ in 0..steps {
        tok = d.step_mega(tok)?;
        one.push(tok);
    }
    let ms_one = t1.elapsed().as_secs_f64() * 1e3 / steps as f64;
    let one_state = state(&d)?;
    let one_ok = one == graph && one_state == want;
    println!(
        "one step per launch: tokens {}, state {}",
        if one == graph { "equal" } else { "DIFFER" },
        if one_state == want { "identical" } else { "DIFFERS" }
    );
    d.reset()?;
    let t2 = std::time::Instant::now();
    let (mut tok, mut mega) = (9419u32, Vec::with_capacity(steps));
    while mega.len() < steps {
        let got = d.step_mega_n(tok, per_launch.min(steps - mega.len()))?;
        tok = *got.last().unwrap_or(&tok);
        mega.extend(got);
    }
    let ms_multi = t2.elapsed().as_secs_f64() * 1e3 / steps as f64;
    let got = state(&d)?;
    let same_tokens = graph.iter().zip(&mega).filter(|(a, b)| a == b).count();
    println!(
        "tokens: {same_tokens} of {steps} equal (graph one replay per step, megakernel {per_launch} steps per launch)"
    );
    let mut differ = 0usize;
    for ((i, a), (_, b)) in want.iter().zip(&got) {
        if let Some(e) = a.iter().zip(b).position(|(x, y)| x != y) {
            differ += 1;
            if differ <= 5 {
                println!(
                    "  buffer {} differs first at element {e}: {} vs {}",
                    prog.buffers[*i].name,
                    f32::from_bits(a[e]),
                    f32::from_bits(b[e])
                );
            }
        }
    }
    let elems: usize = want.iter().map(|(_, v)| v.len()).sum();
    println!(
        "state after {steps} steps: {} of {} non-weight buffers differ ({elems} elements compared)",
        differ,
        want.len()
    );
    // The device-side stop at step j: the latest step before the last whose token is new (so that the
    // sequence really ends there; j = 0 always qualifies): the launch must end early and the
    // pipelined graph's queued replay must change nothing.
    let j = (0..steps - 1).rev().find(|&j| !graph[..j].contains(&graph[j])).unwrap_or(0);
    let stop_ok = {
        // The megakernel (one launch of `steps`) and the pipelined graph (replays queued one
        // ahead) both stop after step j; their states must be the same bits.
        d.set_stop(Some(graph[j]))?;
        d.reset()?;
        let ran = d.step_mega_n(9419, steps)?;
        let mega_state = state(&d)?;
        let refused = d.step_mega(*ran.last().unwrap_or(&0)).is_err_and(|e| e.to_string().contains("stopped"));
        d.reset()?;
        let piped = d.generate(9419, steps)?;
        let pos = d.pos()?;
        let same = state(&d)? == mega_state;
        d.reset()?;
        d.set_stop(None)?;
        let ok = ran == graph[..=j] && piped == graph[..=j] && pos == j + 1 && same && refused;
        println!(
            "device-side stop at token {} (step {j}): megakernel ran {} of {steps} steps, pipelined graph {} \
             (device position {pos}), states {}, a step after the stop {} ({})",
            graph[j],
            ran.len(),
            piped.len(),
            if same { "identical" } else { "DIFFER" },
            if refused { "refused" } else { "NOT refused" },
            if ok { "ok" } else { "WRONG" }
        );
        ok
    };
    println!(
        "ms/token: graph {ms_graph:.3} (synchronised per step), megakernel {ms_one:.3} at one step per launch, {ms_multi:.3} at {per_launch} per launch"
    );
    if same_tokens != steps || differ != 0 || !stop_ok || !one_ok {
        crate::bail!("gpu multistep: the megakernel's multi-step launches differ from the graph");
    }
    println!("verdict: ok (bit-identical tokens and state)");
    Ok(())
}
