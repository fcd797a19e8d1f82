//! `mk gpu mask`: the head's mask on the GPU paths (issue 30, items 2, 3 and 5). A program compiled
//! with a head mask (`Target::head_mask`) scores only the allowed ids of a masked row inside its lm_head
//! units (disallowed logits written -inf by the unit, never proposed; weight rows no row allows never
//! read, and a unit no row allows reads nothing): `megakernel/ops/lm_head.cuh`.
//!
//! Three parts, each on the graph and on the megakernel (run in the order 1, 3, 2: two 27B arenas at
//! most at a time):
//! 1. The check, bit for bit: the masked program and the plain program step the same tokens side by
//!    side; at every step a mask of another size (1 id to all of them, and none) that leaves out the
//!    plain step's own choice. The masked step's token must be the scatter method's (-inf into the
//!    plain logits' disallowed ids, then the argmax: the production engines' method, `grammar::mask`),
//!    its logits the plain ones' bits where allowed and -inf elsewhere; the graph's logits and tokens
//!    the megakernel's. The first differing step, path and element are reported.
//!    The same on the M = 4 program, each row its own mask (one of them none), against the one-row
//!    program over the same tokens (an M-row step's rows have a one-row step's bits).
//! 2. A constrained tool call (the grammar of a tool with bounded arguments, `grammar::decode::
//!    generate_steps`) on the one-row program and on the M = 4 program with forced spans as rows: the
//!    same tokens on every path and program, a turn that ends parses and validates (`grammar::Checker`).
//!    On the graph the one-row run twice: the mask computed before each step and while its body runs
//!    (`GpuExec::step_overlapped`), the same tokens. Whether they are the interpreter's tokens is printed (the GPU's sums round differently from the
//!    CPU's, so a near tie may go the other way: information, not a check).
//! 3. Timings (`reps` > 0): ms per synchronised step of the masked program at each allowed count
//!    (random ids, the mask set before every step as a constrained decode sets it: its 62 KB upload
//!    counted), against the plain program's and the masked program's with no mask, in one run.
//!
//! Owns: the check, the tool-call run and the table. Refuses: a checkpoint whose vocabulary is not the
//! tokenizer's (part 2's prompt and grammar are the real vocabulary's).

use std::path::Path;
use std::time::Instant;

use crate::bail;
use crate::error::Result;
use crate::exec::gpu::spec::GpuTarget;
use crate::exec::gpu::{Defines, Gpu, GpuExec};
use crate::grammar::decode::{generate_steps, Choose, Opts};
use crate::grammar::{parse_tools, scatter_argmax, Checker, Choice, Format, Mask, ToolMatcher};
use crate::model::checkpoint::Checkpoint;
use crate::model::synth::Rng;
use crate::model::upload::Upload;

/// The tool of part 2: arguments of bounded values, so a synthetic model completes the call.
const TOOLS: &str = r#"[{"name": "pick", "parameters": {"type": "object", "properties": {
  "colour": {"enum": ["red", "green", "blue"]},
  "count": {"type": "integer", "minimum": 0, "maximum": 99},
  "ok": {"type": "boolean"}}, "required": ["colour", "count", "ok"]}}]"#;
const TURN: &str = "<|im_start|>user\nPick one.<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n";

/// The allowed counts the check cycles through (0: no mask; `usize::MAX`: every id, the flag on).
fn check_counts(vocab: usize) -> Vec<usize> {
    vec![1, 2, 3, 17, 382, 4096, vocab / 2, vocab - 1, usize::MAX, 0]
}

/// `n` distinct random ids (every id for n >= vocab), leaving out `not` when fewer than all.
fn random_mask(rng: &mut Rng, vocab: usize, n: usize, not: u32) -> Result<Mask> {
    if n >= vocab {
        return Ok(Mask::all(vocab));
    }
    let mut ids = std::collections::BTreeSet::new();
    if n > vocab / 2 {
        // the complement: the ids left out (with `not`)
        let mut out = std::collections::BTreeSet::from([not]);
        while out.len() < vocab - n {
            out.insert((rng.next_u64() % vocab as u64) as u32);
        }
        ids.extend((0..vocab as u32).filter(|i| !out.contains(i)));
    } else {
        while ids.len() < n {
            let i = (rng.next_u64() % vocab as u64) as u32;
            if i != not {
                ids.insert(i);
            }
        }
    }
    Mask::from_ids(&ids.into_iter().collect::<Vec<_>>(), vocab)
}

/// One masked row against the plain row it must equal: its token the scatter method's over the plain
/// logits (the plain token where unmasked), its logits the plain ones' bits where allowed and -inf
/// elsewhere. The first difference, or None.
fn check_row(got: u32, lm: &[f32], plain: u32, lp: &[f32], mask: Option<&Mask>) -> Result<Option<String>> {
    let want = match mask {
        Some(m) => scatter_argmax(lp, m)?,
        None => plain,
    };
    if got != want {
        return Ok(Some(format!("token {got}, the scatter method's {want}")));
    }
    let allowed = |id: usize| mask.is_none_or(|m| m.allows(id as u32));
    let expect = |id: usize| if allowed(id) { lp[id] } else { f32::NEG_INFINITY };
    Ok((0..lp.len()).find(|&id| lm[id].to_bits() != expect(id).to_bits()).map(|id| {
        format!("logits differ first at id {id} (allowed: {}): {} against {}", allowed(id), lm[id], expect(id))
    }))
}

fn program(ck: &Checkpoint, m: u32, mask: bool, max_ctx: u32) -> Result<crate::isa::Program> {
    let mut t = crate::compiler::h200(m);
    t.max_context = max_ctx;
    t.head_mask = mask;
    crate::compiler::compile(&ck.config, "checkpoint", &t)
}

fn step(d: &mut GpuExec, mega: bool, t: u32) -> Result<u32> {
    if mega {
        d.step_mega(t)
    } else {
        d.step(t, false, |_, _| Ok(()))
    }
}

pub fn run(dir: &Path, steps: usize, reps: usize, cache: &Path, defines: &Defines) -> Result<()> {
    if steps == 0 {
        bail!("gpu mask: --steps must be at least 1");
    }
    let ck = Checkpoint::open(dir)?;
    let vocab = ck.config.vocab;
    let tok = crate::tokenizer::Tokenizer::qwen35()?;
    if vocab != crate::tokenizer::VOCAB_ROWS as usize {
        bail!(
            "gpu mask: the checkpoint's vocabulary is {vocab}, the tokenizer's head {}",
            crate::tokenizer::VOCAB_ROWS
        );
    }
    // (every part starts from position 0: the longest is the check's 4 steps, the timings' reps + 3, or
    // the tool call's prompt and 60 tokens)
    let max_ctx = ((4 * steps).max(reps + 3).max(256) as u32 + 256).div_ceil(256) * 256;
    let up = Upload::new(&ck)?;
    let (pm, pp) = (program(&ck, 1, true, max_ctx)?, program(&ck, 1, false, max_ctx)?);
    let mut dm = GpuExec::new(Gpu::open()?, &pm, &up, cache, defines)?;
    let mut dp = GpuExec::new(Gpu::open()?, &pp, &up, cache, defines)?;
    let mut bad = Vec::new();

    // 1. the check
    let counts = check_counts(vocab);
    let mut by_path: Vec<(Vec<u32>, Vec<u32>)> = Vec::new();
    for (path, mega) in [("graph", false), ("megakernel", true)] {
        dm.reset()?;
        dp.reset()?;
        let mut rng = Rng::new(0x6d61_736b);
        let (mut t, mut toks, mut bits) = (9419u32, Vec::new(), Vec::new());
        for i in 0..steps {
            let plain = step(&mut dp, mega, t)?;
            let lp = dp.logits()?;
            let n = counts[i % counts.len()];
            let mask = (n > 0).then(|| random_mask(&mut rng, vocab, n, plain)).transpose()?;
            dm.set_head_masks(&[mask.as_ref().map(|m| m.words().to_vec())])?;
            let got = step(&mut dm, mega, t)?;
            let lm = dm.logits()?;
            if let Some(e) = check_row(got, &lm, plain, &lp, mask.as_ref())? {
                bad.push(format!("{path}, step {i} ({n} allowed): {e}"));
            }
            toks.push(got);
            bits.extend(lm.iter().map(|v| v.to_bits()));
            t = got;
        }
        by_path.push((toks, bits));
    }
    if by_path[0].0 != by_path[1].0 {
        bad.push("the megakernel's masked tokens differ from the graph's".into());
    } else if let Some(e) = by_path[0].1.iter().zip(&by_path[1].1).position(|(a, b)| a != b) {
        bad.push(format!(
            "the megakernel's masked logits differ from the graph's: step {}, id {}",
            e / vocab,
            e % vocab
        ));
    }
    println!(
        "check: {steps} masked steps a path (allowed counts {}, cycled; the plain step's own choice left out), {}",
        counts
            .iter()
            .map(|n| if *n == usize::MAX { "all".into() } else { n.to_string() })
            .collect::<Vec<_>>()
            .join(" "),
        if bad.is_empty() {
            "every token the scatter method's, every logit the plain one's bits or -inf, graph = megakernel"
        } else {
            "FAILED"
        }
    );

    verdict(&bad)?; // (a broken mask would also make the tool call's grammar refuse a token)

    // 3. timings
    if reps > 0 {
        let mut rows =
            vec![format!("{:>12} {:>12} {:>12} {:>14}", "allowed", "graph ms", "megakernel", "vs plain (g/m)")];
        let mut rng = Rng::new(7);
        let time = |d: &mut GpuExec, mega: bool, mask: Option<&Mask>| -> Result<f64> {
            d.reset()?;
            let mut ms = Vec::with_capacity(reps);
            let mut t = 9419u32;
            for i in 0..reps + 3 {
                let t0 = Instant::now();
                if let Some(m) = mask {
                    d.set_head_masks(&[Some(m.words().to_vec())])?;
                }
                t = step(d, mega, t)?;
                if i >= 3 {
                    ms.push(t0.elapsed().as_secs_f64() * 1e3);
                }
            }
            ms.sort_by(f64::total_cmp);
            Ok(ms[ms.len() / 2])
        };
        let plain = [time(&mut dp, false, None)?, time(&mut dp, true, None)?];
        rows.push(format!("{:>12} {:>12.3} {:>12.3} {:>14}", "plain prog.", plain[0], plain[1], "1 / 1"));
        let mut sizes: Vec<(String, Option<Mask>)> = vec![("no mask".into(), None)];
        for n in [vocab, vocab / 2, 32768, 4096, 382, 64, 3, 1] {
            let m = random_mask(&mut rng, vocab, n, u32::MAX)?;
            sizes.push((m.count().to_string(), Some(m)));
        }
        for (name, m) in &sizes {
            let g = time(&mut dm, false, m.as_ref())?;
            let k = time(&mut dm, true, m.as_ref())?;
            rows.push(format!(
                "{name:>12} {g:>12.3} {k:>12.3} {:>14}",
                format!("{:.3} / {:.3}", g / plain[0], k / plain[1])
            ));
        }
        // the mask's upload alone (set_head_masks, a synchronous copy)
        let m = sizes.last().and_then(|s| s.1.clone()).unwrap_or_else(|| Mask::all(vocab));
        let mut up_ms = Vec::new();
        for _ in 0..reps.max(5) {
            let t0 = Instant::now();
            dm.set_head_masks(&[Some(m.words().to_vec())])?;
            dm.sync()?;
            up_ms.push(t0.elapsed().as_secs_f64() * 1e3);
        }
        up_ms.sort_by(f64::total_cmp);
        println!(
            "ms per synchronised step, median of {reps}, the mask set before every step (random ids; its upload alone: {:.3} ms):",
            up_ms[up_ms.len() / 2]
        );
        for r in rows {
            println!("  {r}");
        }
    }
    drop(dp); // (two 27B arenas at most on an 80 GB card)

    // 1b. the M = 4 program: each row its own mask (sizes cycled, one row unmasked), every row's logits
    // and token against the one-row program's (the masked program, masks off) over the same tokens
    let p4 = program(&ck, 4, true, max_ctx)?;
    let mut d4 = GpuExec::new(Gpu::open()?, &p4, &up, cache, defines)?;
    let mut rows_by_path: Vec<Vec<u32>> = Vec::new();
    for (path, mega) in [("graph", false), ("megakernel", true)] {
        dm.reset()?;
        d4.reset()?;
        dm.set_head_masks(&[])?;
        let mut rng = Rng::new(0x726f_7773);
        let mut bits = Vec::new();
        for i in 0..steps {
            let toks: Vec<u32> = (0..4).map(|_| (rng.next_u64() % vocab as u64) as u32).collect();
            let mut one = Vec::new();
            for &t in &toks {
                let next = step(&mut dm, mega, t)?;
                one.push((next, dm.logits()?));
            }
            let masks: Vec<Option<Mask>> = (0..4)
                .map(|r| {
                    let n = counts[(4 * i + r) % counts.len()];
                    (n > 0).then(|| random_mask(&mut rng, vocab, n, one[r].0)).transpose()
                })
                .collect::<Result<_>>()?;
            d4.set_head_masks(&masks.iter().map(|m| m.as_ref().map(|m| m.words().to_vec())).collect::<Vec<_>>())?;
            let got = d4.step_rows(&toks, mega)?;
            let l4 = d4.logits()?;
            for r in 0..4 {
                let row = &l4[r * vocab..(r + 1) * vocab];
                if let Some(e) = check_row(got[r], row, one[r].0, &one[r].1, masks[r].as_ref())? {
                    bad.push(format!("M = 4, {path}, step {i} row {r}: {e}"));
                }
            }
            bits.extend(l4.iter().map(|v| v.to_bits()));
        }
        rows_by_path.push(bits);
    }
    if rows_by_path[0] != rows_by_path[1] {
        bad.push("M = 4: the megakernel's masked logits differ from the graph's".into());
    }
    println!(
        "check, M = 4: {steps} steps a path, each row its own mask, {}",
        if bad.is_empty() {
            "every row's token the scatter method's over the one-row logits, every logit their bits or -inf, graph = megakernel"
        } else {
            "FAILED"
        }
    );
    verdict(&bad)?;

    // 2. a constrained tool call on both paths, one-row and M = 4 with forced spans
    let tools = parse_tools(TOOLS)?;
    let fmt = Format { choice: Choice::Required, thinking: false, parallel: false };
    let checker = Checker::new(&tools)?;
    let prompt = tok.encode(TURN)?;
    let base = Opts { choose: Choose::InArgmax, masked_head_max: 0, forced_spans: false, max_tokens: 60 };
    // the interpreter's tokens (on small models only: it takes seconds to minutes a token beyond)
    let cpu = if ck.config.hidden <= 512 {
        let it_prog = program(&ck, 1, true, max_ctx)?;
        let mut it = crate::exec::interp::Interp::new(&it_prog, &ck)?;
        Some(generate_steps(&mut it, &prompt, &mut ToolMatcher::new(&tools, fmt)?, &base)?.tokens)
    } else {
        None
    };
    let mut first: Option<Vec<u32>> = None;
    for (path, mega) in [("graph", false), ("megakernel", true)] {
        // (the graph's one-row steps twice: the mask computed before the step, and while its body runs)
        let runs: &[(u32, bool, bool)] = if mega {
            &[(1, false, false), (4, true, false)]
        } else {
            &[(1, false, false), (1, false, true), (4, true, false)]
        };
        for &(m, spans, overlap) in runs {
            let d = if m == 1 { &mut dm } else { &mut d4 };
            d.reset()?;
            let o = Opts { forced_spans: spans, ..base };
            let out = generate_steps(
                &mut GpuTarget { exec: d, mega, overlap },
                &prompt,
                &mut ToolMatcher::new(&tools, fmt)?,
                &o,
            )?;
            let text = tok.decode(&out.tokens)?;
            let v = checker.check_turn(&text, false);
            let valid = v.ok() && !v.calls.is_empty();
            println!(
                "tool call, {path}, M = {m}{}{}: {} tokens in {:.1} ms after the prompt's pass ({} passes, {} forced; the matcher {:.1} us a token on the CPU), ended {}, valid {valid}; the interpreter's tokens: {}",
                if spans { " (forced spans as rows)" } else { "" },
                if overlap { " (the mask computed while the body runs)" } else { "" },
                out.tokens.len(),
                (out.total_ns - out.prompt_ns) as f64 / 1e6,
                out.passes,
                out.forced,
                out.matcher_ns as f64 / 1e3 / out.tokens.len().max(1) as f64,
                out.ended,
                match &cpu {
                    None => "not run at this size",
                    Some(c) if *c == out.tokens => "same",
                    Some(_) => "DIFFERENT (a near tie?)",
                }
            );
            if out.ended && !valid {
                bad.push(format!("{path}, M = {m}: the completed turn does not validate: {text:?}"));
            }
            match &first {
                None => first = Some(out.tokens),
                Some(f) if *f != out.tokens => bad.push(format!(
                    "{path}, M = {m}, overlap {overlap}: the tool call's tokens differ from the graph's M = 1"
                )),
                _ => {}
            }
        }
    }

    verdict(&bad)?;
    println!("verdict: ok");
    Ok(())
}

/// The failures so far, printed, as the run's error.
fn verdict(bad: &[String]) -> Result<()> {
    if !bad.is_empty() {
        for b in bad {
            println!("  {b}");
        }
        bail!("gpu mask: FAILED: {} checks ({})", bad.len(), bad[0]);
    }
    Ok(())
}
