//! `mk`: the command line. Parses arguments, calls one library function, prints the error once.

use std::process::ExitCode;

use clap::Parser;
use mk::error::Result;
use mk::exec::gpu::Defines;
use mk::model::{checkpoint::Checkpoint, config::ModelConfig, forward, stats, synth};

mod cli;
mod cli_gpu;

use cli::{Cli, Cmd, GpuCmd, ProgramCmd, Shape};

fn run(cli: Cli) -> Result<()> {
    match cli.cmd {
        Cmd::Run { file, results, cache, shape: Shape { units, unit_rows, gdn }, define } => {
            let mut e = mk::experiment::spec::Experiment::load(&file)?;
            e.defines.extend(mk::exec::gpu::Defines::parse(&define)?.map().clone());
            let opts = mk::experiment::RunOptions {
                results_root: results,
                cache_root: cache,
                units,
                unit_rows,
                gdn,
                spec_file: file.display().to_string(),
                command: std::env::args().collect(),
            };
            let dir = mk::experiment::run(&e, &opts)?;
            print!("{}", mk::experiment::summary(&dir)?);
        }
        Cmd::Chart { dir, unfinished } => {
            for f in mk::experiment::chart::render(&dir, unfinished)? {
                println!("wrote {}", f.display());
            }
        }
        Cmd::Compare { a, b, unfinished } => print!("{}", mk::experiment::chart::compare(&a, &b, unfinished)?),
        Cmd::Crossover { dirs, a, b, out, unfinished } => {
            print!("{}", mk::experiment::chart::crossover(&dirs, &a, &b, &out, unfinished)?)
        }
        Cmd::Synth { preset, seed, out, force } => {
            let cfg = ModelConfig::preset(&preset)?;
            synth::check_out(&out, force)?;
            let t = std::time::Instant::now();
            let bytes = synth::write_checkpoint(&cfg, seed, &out)?;
            println!(
                "wrote {} ({:.2} GB, preset {preset}, seed {seed}) in {:.1} s",
                out.display(),
                bytes as f64 / 1e9,
                t.elapsed().as_secs_f64()
            );
        }
        Cmd::Check { dir, quick } => {
            let t = std::time::Instant::now();
            let ck = Checkpoint::open(&dir)?;
            if !quick {
                ck.deep_check()?;
            }
            let c = &ck.config;
            println!(
                "ok: {} ({} shards, {} tensors, {:.2} GB; hidden {}, {} layers ({} GDN + {} attention), vocab {}){} in {:.1} s",
                dir.display(),
                ck.shard_names().len(),
                ck.specs().len(),
                ck.total_bytes() as f64 / 1e9,
                c.hidden,
                c.n_layers,
                c.n_gdn_layers(),
                c.n_attn_layers(),
                c.vocab,
                if quick { "" } else { ", every value finite" },
                t.elapsed().as_secs_f64()
            );
        }
        Cmd::Stats { dir, tokens, seed } => {
            let ck = Checkpoint::open(&dir)?;
            ck.deep_check()?;
            let w = forward::Weights::from_checkpoint(&ck);
            stats::print(&stats::measure(&w, tokens, seed)?);
        }
        Cmd::Golden { dir, goldens, rope_theta, max_prompts, fast } => {
            mk::verify::golden::run(&dir, &goldens, rope_theta, max_prompts.unwrap_or(usize::MAX), fast)?
        }
        Cmd::Trace { dir, trace } => {
            let ck = Checkpoint::open(&dir)?;
            let w = forward::Weights::from_checkpoint(&ck);
            mk::verify::trace::print(&mk::verify::trace::compare(&w, &trace)?);
        }
        Cmd::Compile {
            preset,
            config,
            sms,
            threads,
            rows,
            max_context,
            shape: Shape { units, unit_rows, gdn },
            drafter,
            pruned,
            prefill,
            head_mask,
            out,
        } => {
            let (cfg, name) = match (preset, config) {
                (Some(p), _) => (ModelConfig::preset(&p)?, p),
                (None, Some(c)) => (ModelConfig::from_file(&c)?, "checkpoint".to_string()),
                (None, None) => mk::bail!("compile: give --preset or --config"),
            };
            let target = mk::isa::Target {
                sms,
                threads,
                m_rows: rows,
                max_context,
                units,
                gemv_unit_rows: unit_rows,
                gdn,
                prefill,
                head_mask,
            };
            let prog = match drafter.as_deref() {
                None => mk::compiler::compile(&cfg, &name, &target)?,
                Some(d) => {
                    let input =
                        if d == "own" { mk::compiler::DraftInput::Own } else { mk::compiler::DraftInput::Target };
                    let name = format!("{name}-mtp");
                    match pruned {
                        Some(cap) => mk::compiler::compile_drafter_pruned(&cfg, &name, &target, input, cap)?,
                        None => mk::compiler::compile_drafter(&cfg, &name, &target, input)?,
                    }
                }
            };
            let summary = mk::isa::validate::validate(&prog)?;
            std::fs::write(&out, prog.to_ron()?)
                .map_err(|e| mk::error::Error::new(format!("write {}: {e}", out.display())))?;
            println!(
                "wrote {} ({} words, {} units, {} counters; validated)",
                out.display(),
                summary.words,
                summary.units,
                summary.counters
            );
        }
        Cmd::Gpu { cmd: GpuCmd::Ops { dir, steps, cache, defines, units, drafter, pruned } } => {
            mk::verify::gpu::ops(&dir, steps, &cache, &Defines::parse(&defines)?, units, drafter, pruned)?
        }
        Cmd::Gpu { cmd: GpuCmd::Gemm { preset, t, reps, kernel, cache, defines } } => {
            let kernel = mk::verify::gemm::Kernel::parse(&kernel)?;
            mk::verify::gemm::run(&preset, &t, reps.max(1), &cache, &Defines::parse(&defines)?, kernel).map(|_| ())?
        }
        Cmd::Gpu { cmd: GpuCmd::GdnChunk { preset, t, reps, cache, defines } } => {
            mk::verify::gdn_chunk::run(&preset, &t, reps.max(1), &cache, &Defines::parse(&defines)?).map(|_| ())?
        }
        Cmd::Gpu { cmd: GpuCmd::Gemv { preset, reps, cache } } => {
            mk::verify::gemv::run(&preset, reps.max(1), &cache).map(|_| ())?
        }
        Cmd::Gpu { cmd: GpuCmd::Soak { dir, steps, cache, defines } } => {
            mk::verify::gpu::soak(&dir, steps, &cache, &Defines::parse(&defines)?)?
        }
        Cmd::Gpu { cmd: GpuCmd::Spec { dir, k, tokens, cache, defines } } => {
            mk::verify::spec::run(&dir, &k, tokens as usize, &cache, &Defines::parse(&defines)?)?
        }
        Cmd::Gpu { cmd: GpuCmd::Mask { dir, steps, reps, cache, defines } } => {
            mk::verify::mask::run(&dir, steps as usize, reps as usize, &cache, &Defines::parse(&defines)?)?
        }
        Cmd::Gpu { cmd: GpuCmd::Agent(a) } => mk::verify::agent::run(&a.args()?)?,
        Cmd::Gpu {
            cmd: GpuCmd::Prefill { dir, m, tokens, reps, check, against_decode, profile, fast, cache, defines },
        } => {
            let defines = Defines::parse(&defines)?;
            let args = mk::verify::prefill::Args {
                dir: &dir,
                m,
                tokens: &tokens,
                reps: reps as usize,
                check,
                against_decode,
                profile,
                fast,
                cache: &cache,
                defines: &defines,
            };
            let rows = mk::verify::prefill::run(&args)?;
            let bad = rows.iter().filter_map(|r| r.vs_cpu.as_ref()).any(|d| !d.within(mk::verify::prefill::TOLERANCE));
            if bad {
                mk::bail!("gpu prefill: the GPU prefill is past the envelope of the interpreter's");
            }
        }
        Cmd::Gpu { cmd: GpuCmd::Rows { dir, m, tokens, reps, at, unit_rows, cache, defines } } => {
            mk::verify::rows::run(
                &dir,
                &m,
                tokens as usize,
                reps as usize,
                &at,
                unit_rows,
                &cache,
                &Defines::parse(&defines)?,
            )?
        }
        Cmd::Gpu { cmd: GpuCmd::Multistep { dir, steps, per_launch, cache, defines } } => {
            mk::verify::gpu::multistep(&dir, steps as usize, per_launch as usize, &cache, &Defines::parse(&defines)?)?
        }
        Cmd::Gpu { cmd: GpuCmd::Sample { dir, steps, cache, defines } } => {
            mk::verify::gpu::sample(&dir, steps, &cache, &Defines::parse(&defines)?)?
        }
        Cmd::Gpu { cmd: GpuCmd::Compile { arch, resources, cubin, defines, m, prefill, head_mask, mtp } } => {
            let t = std::time::Instant::now();
            if m > 8 && !prefill {
                mk::bail!("gpu compile: --m {m} (1-8; up to 128 with --prefill)");
            }
            let host: Vec<&str> = [(mtp, "MK_MTP"), (head_mask, "MK_HEAD_MASK"), (prefill, "PREFILL")]
                .iter()
                .filter(|f| f.0)
                .map(|f| f.1)
                .collect();
            let (bin, log) =
                mk::exec::gpu::compile_check(&arch, resources, cubin.is_some(), &Defines::parse(&defines)?, m, &host)?;
            let n = bin.len();
            if let Some(f) = cubin {
                std::fs::write(&f, &bin).map_err(|e| mk::error::Error::new(format!("write {}: {e}", f.display())))?;
            }
            if resources {
                // ptxas's per-kernel report as a table (the raw report is NVRTC's log); non-inlined
                // device functions (the megakernel's ops) have no register count of their own: "-"
                println!(
                    "{:32} {:>9} {:>12} {:>11} {:>11}",
                    "kernel", "registers", "spill stores", "spill loads", "static smem"
                );
                for k in mk::exec::gpu::ptxas_resources(&log) {
                    println!(
                        "{:32} {:>9} {:>12} {:>11} {:>11}",
                        k.name,
                        if k.registers > 0 { k.registers.to_string() } else { "-".into() },
                        k.spill_stores,
                        k.spill_loads,
                        k.static_smem
                    );
                }
            }
            println!("compiled for {arch}: CUBIN {n} bytes in {:.2} s", t.elapsed().as_secs_f64());
        }
        Cmd::Program { cmd } => match cmd {
            ProgramCmd::Header => print!("{}", mk::exec::gpu::abi::header()),
            ProgramCmd::Show { file } => print!("{}", mk::isa::report::show(&mk::isa::Program::load(&file)?)),
            ProgramCmd::Stats { file } => print!("{}", mk::isa::report::stats(&mk::isa::Program::load(&file)?)),
            ProgramCmd::Check { file } => {
                let s = mk::isa::validate::validate(&mk::isa::Program::load(&file)?)?;
                println!("ok: {} words, {} units, {} counters", s.words, s.units, s.counters);
            }
        },
        Cmd::Tokenize => mk::tokenizer::cli::tokenize_stdio()?,
        Cmd::Detokenize => mk::tokenizer::cli::detokenize_stdio()?,
        Cmd::ChatRender { file, ids } => mk::tokenizer::cli::chat_render_stdout(&file, ids)?,
        Cmd::AgentReplay { dir, trajectories, only, stateless, pooled, out } => {
            use mk::agent::{replay, trajectory as tr};
            let text = std::fs::read_to_string(&trajectories)
                .map_err(|e| mk::error::Error::new(format!("{}: {e}", trajectories.display())))?;
            let ts = tr::from_json(&text)?;
            if let Some(bad) = only.iter().find(|n| !ts.iter().any(|t| &t.name == *n)) {
                return Err(mk::error::Error::new(format!(
                    "agent-replay: no trajectory {bad} in {}",
                    trajectories.display()
                )));
            }
            let ck = Checkpoint::open(&dir)?;
            ck.deep_check()?;
            let w = forward::Weights::from_checkpoint(&ck);
            let residency = if stateless { replay::Residency::Stateless } else { replay::Residency::Resident };
            if pooled {
                let chosen: Vec<_> = ts.iter().filter(|t| only.is_empty() || only.contains(&t.name)).collect();
                let rs = chosen.iter().map(|t| tr::replay(t)).collect::<mk::error::Result<Vec<_>>>()?;
                let ctx: Vec<usize> = rs
                    .iter()
                    .map(|r| r.prompt.len() + r.steps.iter().map(|(e, a)| e + a.len()).sum::<usize>())
                    .collect();
                let pages = ctx.iter().map(|c| c.div_ceil(mk::agent::pool::PAGE_TOKENS)).sum::<usize>();
                let max = ctx.iter().max().copied().unwrap_or(1).div_ceil(256) * 256;
                let (runs, pool, _) = replay::replay_pooled(&w, &rs, pages, max)?;
                let mut all = Vec::new();
                for (t, steps) in chosen.iter().zip(runs) {
                    print!("{}", replay::table(&t.name, "resident, pooled", &steps));
                    all.push((t.name.clone(), steps));
                }
                println!(
                    "pool: {} pages of {}, {} free at the end; {:?}",
                    pool.total_pages(),
                    mk::agent::pool::PAGE_TOKENS,
                    pool.free_pages(),
                    pool.stats
                );
                if let Some(out) = out {
                    replay::write_out(&out, &all, "pooled, CPU reference")?;
                }
                return Ok(());
            }
            let mut all = Vec::new();
            for t in ts.iter().filter(|t| only.is_empty() || only.contains(&t.name)) {
                let r = tr::replay(t)?;
                let ctx = r.prompt.len() + r.steps.iter().map(|(e, a)| e + a.len()).sum::<usize>();
                let run = replay::replay(&w, &r, residency, ctx.div_ceil(256) * 256)?;
                print!("{}", replay::table(&t.name, &format!("{residency:?}"), &run.steps));
                all.push((t.name.clone(), run.steps));
            }
            if let Some(out) = out {
                replay::write_out(&out, &all, &format!("{residency:?}, CPU reference").to_lowercase())?;
            }
        }
        Cmd::Agent { dir, file, max_context } => {
            use mk::agent::{pool, step};
            let text = std::fs::read_to_string(&file)
                .map_err(|e| mk::error::Error::new(format!("{}: {e}", file.display())))?;
            let steps = step::parse_script(&text)?;
            let ck = Checkpoint::open(&dir)?;
            ck.deep_check()?;
            let w = forward::Weights::from_checkpoint(&ck);
            let tok = mk::tokenizer::Tokenizer::qwen35()?;
            let mut pool = pool::Pool::new(&w.cfg, max_context.div_ceil(pool::PAGE_TOKENS), 1, max_context)?;
            let id = pool.open()?;
            for (i, s) in steps.iter().enumerate() {
                let ids = match &s.text {
                    Some(t) => tok.encode(t)?,
                    None => s.ids.clone(),
                };
                let out = step::agent_step(
                    &mut pool,
                    id,
                    &w,
                    &ids,
                    &step::StepSpec { max_tokens: s.max_tokens, stop: s.stop.clone() },
                )
                .map_err(|e| mk::error::Error::new(format!("step {i}: {e}")))?;
                println!(
                    "step {i}: appended {}, emitted {} ({}), first token {:.1} ms, last {:.1} ms: {:?}",
                    ids.len(),
                    out.tokens.len(),
                    out.stopped.map_or("count".to_string(), |t| format!("stop {t}")),
                    out.first_ms,
                    out.last_ms,
                    tok.decode(&out.tokens)?
                );
            }
        }
        Cmd::AgentTrajectories { out, check, ids, preset } => {
            use mk::agent::trajectory as tr;
            let ts = match &check {
                Some(f) => {
                    let text = std::fs::read_to_string(f)
                        .map_err(|e| mk::error::Error::new(format!("{}: {e}", f.display())))?;
                    let ts = tr::from_json(&text)?;
                    for t in &ts {
                        tr::replay(t)?;
                    }
                    ts
                }
                None => tr::generate()?,
            };
            if let Some(f) = &out {
                std::fs::write(f, tr::to_json(&ts))
                    .map_err(|e| mk::error::Error::new(format!("{}: {e}", f.display())))?;
            }
            if let Some(f) = &ids {
                let cfg = ModelConfig::preset(&preset)?;
                std::fs::write(f, tr::replays_json(&ts, cfg.to_hf_json())?)
                    .map_err(|e| mk::error::Error::new(format!("{}: {e}", f.display())))?;
            }
            print!("{}", tr::table(&ts));
        }
        Cmd::Generate { dir, prompt, steps, temperature, top_k, top_p, seed, speculate, path, cache } => {
            let params = mk::model::sample::SamplingParams { temperature, top_k, top_p };
            let ck = Checkpoint::open(&dir)?;
            ck.deep_check()?;
            if path != "reference" {
                let g = mk::exec::gpu::generate::Generation {
                    prompt: &prompt,
                    steps,
                    params,
                    seed,
                    speculate,
                    mega: path == "megakernel",
                };
                let (out, stats) = mk::exec::gpu::generate::generate(&ck, &g, &cache, &Defines::default())?;
                if let Some(s) = stats {
                    eprintln!("{s}");
                }
                println!("{}", out.iter().map(|t| t.to_string()).collect::<Vec<_>>().join(","));
                return Ok(());
            }
            let w = forward::Weights::from_checkpoint(&ck);
            let out = match speculate {
                None => forward::generate(&w, &prompt, steps, &params, seed)?,
                Some(k) => {
                    if temperature != 0.0 {
                        return Err(mk::error::Error::new(
                            "generate: --speculate on the reference path is greedy only (--temperature 0; the GPU paths sample)",
                        ));
                    }
                    let m = mk::model::mtp::MtpWeights::from_checkpoint(&ck)?;
                    let d = mk::model::spec_generate::Drafter::Mtp(&m);
                    let (out, stats) = mk::model::spec_generate::generate_speculative(&w, &d, &prompt, steps, k)?;
                    eprintln!("{stats}");
                    out
                }
            };
            println!("{}", out.iter().map(|t| t.to_string()).collect::<Vec<_>>().join(","));
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    /// Every argument of every command says what it is (issue 26), and the parser is consistent.
    #[test]
    fn every_argument_has_a_description() {
        Cli::command().debug_assert();
        fn walk(c: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for a in c.get_arguments() {
                let id = a.get_id().as_str();
                if id != "help" && id != "version" && a.get_help().is_none() && a.get_long_help().is_none() {
                    missing.push(format!("{path} {id}"));
                }
            }
            for s in c.get_subcommands() {
                walk(s, &format!("{path} {}", s.get_name()), missing);
            }
        }
        let mut missing = Vec::new();
        walk(&Cli::command(), "mk", &mut missing);
        assert!(missing.is_empty(), "arguments without a description: {missing:?}");
    }

    #[test]
    fn negative_numbers_parse_and_required_prompts_are_required() {
        let p = Cli::try_parse_from(["mk", "generate", "d", "--prompt", "1,2", "--temperature", "-1"]);
        assert!(p.is_ok(), "a negative temperature is a value, not a flag (the run then refuses it)");
        assert!(Cli::try_parse_from(["mk", "generate", "d"]).is_err(), "--prompt is required");
        let help = Cli::command().find_subcommand_mut("golden").unwrap().render_help().to_string();
        assert!(!help.contains("18446744073709551615"), "{help}");
    }
}
