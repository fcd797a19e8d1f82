//! `mk`: the command line. Parses arguments, calls one library function, prints the error once.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use mk::error::Result;
use mk::model::{checkpoint::Checkpoint, config::ModelConfig, forward, stats, synth};

#[derive(Parser)]
#[command(
    name = "mk",
    version,
    about = "Qwen3.5-27B research inference engine: megakernel, CUDA-graph path, experiment runner"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run an experiment (RON spec): diffs and timings of the paths, a results folder with charts.
    Run {
        file: PathBuf,
        /// Where results go (results/<experiment>/<utc>_<gpu-or-cpu>_<sha>/).
        #[arg(long, default_value = "results")]
        results: PathBuf,
        /// Where synthetic checkpoints of presets are generated on first use.
        #[arg(long, default_value = "cache")]
        cache: PathBuf,
        /// GEMV unit shapes of the compiled program: balanced or fixed (an A/B knob; bits are the same).
        #[arg(long, default_value = "balanced")]
        units: mk::isa::UnitPolicy,
        /// Output rows per GEMV unit of the compiled program (a multiple of 8, 8-256; bits are the same).
        #[arg(long, default_value_t = mk::isa::DEFAULT_GEMV_UNIT_ROWS)]
        unit_rows: u32,
        /// GDN lowering of the compiled program: fused (one GdnStep word) or split (conv, recurrence, gated
        /// norm in out_proj; an A/B knob; bits are the same).
        #[arg(long, default_value = "fused")]
        gdn: mk::isa::GdnLowering,
    },
    /// Re-render the charts of a results folder from its files.
    Chart { dir: PathBuf },
    /// A/B report of two results folders (table, and a chart in the second).
    Compare { a: PathBuf, b: PathBuf },
    /// The crossover: path B's speed-up over path A against A's ms/token, across results folders
    /// (e.g. tiny, small and 27B runs of both GPU paths); table and OUT/crossover.png.
    Crossover {
        dirs: Vec<PathBuf>,
        #[arg(long, default_value = "graph")]
        a: String,
        #[arg(long, default_value = "megakernel")]
        b: String,
        #[arg(long, default_value = "results")]
        out: PathBuf,
    },
    /// Write a synthetic checkpoint in the real release format (config.json, shards, index).
    Synth {
        #[arg(long)]
        preset: String,
        #[arg(long, default_value_t = 0)]
        seed: u64,
        #[arg(long)]
        out: PathBuf,
    },
    /// Validate a checkpoint folder: every tensor's name, dtype and shape, scales, and every value.
    Check {
        dir: PathBuf,
        /// Skip the scan of every weight byte for NaN/Inf (fast: headers and scales only).
        #[arg(long)]
        quick: bool,
    },
    /// Activation and logit statistics of a checkpoint under the CPU reference (random token ids).
    Stats {
        dir: PathBuf,
        #[arg(long, default_value_t = 32)]
        tokens: usize,
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// Compare the CPU reference against oracle goldens (teacher-forced), with the calibrated envelope.
    Golden {
        /// Checkpoint folder the goldens were recorded on.
        dir: PathBuf,
        /// Folder of golden .safetensors files (scripts/oracle_goldens.py).
        goldens: PathBuf,
        /// Override RoPE theta (a negative control: a wrong theta must fail).
        #[arg(long)]
        rope_theta: Option<f64>,
        #[arg(long, default_value_t = usize::MAX)]
        max_prompts: usize,
    },
    /// Compare the CPU reference op by op against an oracle trace (scripts/oracle_trace.py).
    Trace { dir: PathBuf, trace: PathBuf },
    /// Lower a model into the instruction program of one decode step (RON).
    Compile {
        /// A preset (tiny, small, qwen3.5-27b) ...
        #[arg(long, conflicts_with = "config")]
        preset: Option<String>,
        /// ... or a real config.json.
        #[arg(long)]
        config: Option<PathBuf>,
        #[arg(long, default_value_t = 132)]
        sms: u32,
        #[arg(long, default_value_t = 256)]
        threads: u32,
        /// Activation rows per step (1-8; >1 verifies speculative drafts).
        #[arg(long, default_value_t = 1)]
        rows: u32,
        #[arg(long, default_value_t = 32768)]
        max_context: u32,
        /// GEMV unit shapes: balanced (makespan-chosen split-K parts) or fixed (the first).
        #[arg(long, default_value = "balanced")]
        units: mk::isa::UnitPolicy,
        /// Output rows per GEMV unit (a multiple of 8, 8-256).
        #[arg(long, default_value_t = mk::isa::DEFAULT_GEMV_UNIT_ROWS)]
        unit_rows: u32,
        /// GDN lowering: fused (one GdnStep word a layer) or split (GdnConv, GdnRecur, gated norm in out_proj).
        #[arg(long, default_value = "fused")]
        gdn: mk::isa::GdnLowering,
        #[arg(long)]
        out: PathBuf,
    },
    /// GPU utilities.
    Gpu {
        #[command(subcommand)]
        cmd: GpuCmd,
    },
    /// Inspect a compiled program.
    Program {
        #[command(subcommand)]
        cmd: ProgramCmd,
    },
    /// Generation with the CPU reference forward (greedy, or sampled); prints the token ids.
    Generate {
        dir: PathBuf,
        /// Prompt token ids, comma-separated.
        #[arg(long, value_delimiter = ',')]
        prompt: Vec<u32>,
        #[arg(long, default_value_t = 16)]
        steps: usize,
        /// 0: greedy (argmax, lowest id on ties).
        #[arg(long, default_value_t = 0.0)]
        temperature: f32,
        #[arg(long, default_value_t = 0)]
        top_k: usize,
        #[arg(long, default_value_t = 1.0)]
        top_p: f32,
        /// Seed of the sampling draws.
        #[arg(long, default_value_t = 0)]
        seed: u64,
    },
    /// Text to token ids: one JSON string per stdin line, one JSON array of ids per stdout line.
    Tokenize,
    /// Token ids to text: one JSON array of ids per stdin line, one JSON string per stdout line.
    Detokenize,
    /// Render a chat request (JSON: messages, tools, add_generation_prompt, enable_thinking) with the chat template.
    ChatRender {
        file: PathBuf,
        /// Print the token ids (a JSON array) instead of the text.
        #[arg(long)]
        ids: bool,
    },
}

#[derive(Subcommand)]
enum GpuCmd {
    /// Compile the CUDA sources with NVRTC only (no GPU needed).
    Compile {
        #[arg(long, default_value = "sm_90")]
        arch: String,
        /// Print ptxas's resource usage per kernel (registers, spills, shared memory).
        #[arg(long)]
        resources: bool,
        /// Also write the CUBIN to this file, with line info (for cuobjdump -sass / nvdisasm -g).
        #[arg(long)]
        cubin: Option<std::path::PathBuf>,
    },
    /// The GPU sampler against the CPU's: for several (temperature, top-k, top-p) settings, every
    /// GPU-sampled token must equal `model::sample` on the step's logits with the same draw; a negative
    /// control (the CPU with another seed) must disagree.
    Sample {
        dir: PathBuf,
        #[arg(long, default_value_t = 32)]
        steps: u32,
        #[arg(long, default_value = "cache")]
        cache: PathBuf,
    },
    /// Runs `steps` greedy tokens through the graph path, synchronised per step and then pipelined (one
    /// replay in flight ahead): device memory before and after (nothing may allocate after startup),
    /// the time per token of each, and that both produce the same tokens.
    Soak {
        dir: PathBuf,
        #[arg(long, default_value_t = 1000)]
        steps: u32,
        #[arg(long, default_value = "cache")]
        cache: PathBuf,
    },
    /// The megakernel's in-kernel token loop: `steps` greedy tokens through the graph (one replay per
    /// step), then through the megakernel with `per_launch` steps per cooperative launch; tokens and
    /// every non-weight buffer must be the same bits. Then the device-side stop (the launch must end
    /// at the step that produced the stop token) and ms/token of the graph, the megakernel at one step
    /// per launch and at `per_launch`.
    Multistep {
        dir: PathBuf,
        #[arg(long, default_value_t = 64)]
        steps: u32,
        #[arg(long, default_value_t = 16)]
        per_launch: u32,
        #[arg(long, default_value = "cache")]
        cache: PathBuf,
    },
    /// M-row verification steps (M tokens at positions pos .. pos + M in one graph replay or one
    /// megakernel launch) against one-row steps, bit for bit: every row's logits and token and the
    /// final states, on both paths, with a negative control (two tokens swapped); then ms per step.
    Rows {
        dir: PathBuf,
        /// The Ms to check (2-8), comma separated; each divides --tokens.
        #[arg(long, value_delimiter = ',', default_value = "2,3,4,8")]
        m: Vec<u32>,
        /// Tokens fed from position 0 (264 crosses position 256, the second attention partition).
        #[arg(long, default_value_t = 264)]
        tokens: u32,
        /// Timed steps per path and M.
        #[arg(long, default_value_t = 20)]
        reps: u32,
        #[arg(long, default_value = "cache")]
        cache: PathBuf,
    },
    /// Every op on the GPU against the CPU op on the same inputs (the CPU interpreter), per opcode.
    Ops {
        /// Checkpoint folder.
        dir: PathBuf,
        /// Decode steps (token ids 1..=steps after the prompt id 9419).
        #[arg(long, default_value_t = 3)]
        steps: u32,
        #[arg(long, default_value = "cache")]
        cache: PathBuf,
    },
}

#[derive(Subcommand)]
enum ProgramCmd {
    /// Print the CUDA header generated from the instruction set (megakernel/abi.cuh).
    Header,
    /// List the words: index, opcode, layer, rows, units, bytes streamed, wait and signal.
    Show { file: PathBuf },
    /// Counts: a line `instructions: N`, counts per opcode, bytes per step.
    Stats { file: PathBuf },
    /// Run the static validator.
    Check { file: PathBuf },
}

fn run(cli: Cli) -> Result<()> {
    match cli.cmd {
        Cmd::Run { file, results, cache, units, unit_rows, gdn } => {
            let e = mk::experiment::spec::Experiment::load(&file)?;
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
        Cmd::Chart { dir } => {
            for f in mk::experiment::chart::render(&dir)? {
                println!("wrote {}", f.display());
            }
        }
        Cmd::Compare { a, b } => print!("{}", mk::experiment::chart::compare(&a, &b)?),
        Cmd::Crossover { dirs, a, b, out } => print!("{}", mk::experiment::chart::crossover(&dirs, &a, &b, &out)?),
        Cmd::Synth { preset, seed, out } => {
            let cfg = ModelConfig::preset(&preset)?;
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
            let w = forward::Weights::from_checkpoint(&ck);
            stats::print(&stats::measure(&w, tokens, seed)?);
        }
        Cmd::Golden { dir, goldens, rope_theta, max_prompts } => {
            let ck = Checkpoint::open(&dir)?;
            let mut w = forward::Weights::from_checkpoint(&ck);
            if let Some(t) = rope_theta {
                w.cfg.rope_theta = t;
            }
            let g = mk::golden::load_dir(&goldens)?;
            let env = mk::golden::envelope(&g)?;
            let c = mk::golden::compare(&w, &g, max_prompts)?;
            println!("envelope (oracle prompt path vs decode path): {env:?}");
            println!("cpu reference vs oracle decode path: {c:?}");
            let why = mk::golden::verdict(&c, &env, mk::golden::MEAN_FACTOR);
            if !why.is_empty() {
                mk::bail!("golden check failed: {}", why.join("; "));
            }
            println!("golden check passed");
        }
        Cmd::Trace { dir, trace } => {
            let ck = Checkpoint::open(&dir)?;
            let w = forward::Weights::from_checkpoint(&ck);
            mk::trace::print(&mk::trace::compare(&w, &trace)?);
        }
        Cmd::Compile { preset, config, sms, threads, rows, max_context, units, unit_rows, gdn, out } => {
            let (cfg, name) = match (preset, config) {
                (Some(p), _) => (ModelConfig::preset(&p)?, p),
                (None, Some(c)) => (ModelConfig::from_file(&c)?, "checkpoint".to_string()),
                (None, None) => mk::bail!("compile: give --preset or --config"),
            };
            let target =
                mk::isa::Target { sms, threads, m_rows: rows, max_context, units, gemv_unit_rows: unit_rows, gdn };
            let prog = mk::compiler::compile(&cfg, &name, &target)?;
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
        Cmd::Gpu { cmd: GpuCmd::Ops { dir, steps, cache } } => {
            let ck = Checkpoint::open(&dir)?;
            let mut t = mk::compiler::h200(1);
            t.max_context = 1024;
            let prog = mk::compiler::compile(&ck.config, "checkpoint", &t)?;
            let mut it = mk::exec::interp::Interp::new(&prog, &ck)?;
            let mut d = mk::cuda::discrete::Discrete::new(mk::cuda::Gpu::open()?, &prog, &ck, &cache)?;
            let tokens: Vec<u32> = std::iter::once(9419).chain(1..=steps).collect();
            let stats = mk::cuda::opcheck::check(&prog, &mut it, &mut d, &tokens)?;
            print!("{}", mk::cuda::opcheck::print(&stats));
            match mk::cuda::opcheck::verdict(&stats) {
                Ok(()) => println!(
                    "verdict: ok (every element within {} of its buffer's largest magnitude)",
                    mk::cuda::opcheck::MAX_REL
                ),
                Err(bad) => mk::bail!("op check FAILED beyond max rel {}: {bad}", mk::cuda::opcheck::MAX_REL),
            }
        }
        Cmd::Gpu { cmd: GpuCmd::Soak { dir, steps, cache } } => {
            let ck = Checkpoint::open(&dir)?;
            let mut t = mk::compiler::h200(1);
            t.max_context = (steps as usize + 1).div_ceil(256) as u32 * 256;
            let prog = mk::compiler::compile(&ck.config, "checkpoint", &t)?;
            let mut d = mk::cuda::discrete::Discrete::new(mk::cuda::Gpu::open()?, &prog, &ck, &cache)?;
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
                mk::bail!("gpu soak: the pipelined tokens differ from the synchronised ones");
            }
        }
        Cmd::Gpu { cmd: GpuCmd::Rows { dir, m, tokens, reps, cache } } => {
            mk::cuda::rows::run(&dir, &m, tokens as usize, reps as usize, &cache)?
        }
        Cmd::Gpu { cmd: GpuCmd::Multistep { dir, steps, per_launch, cache } } => {
            multistep(&dir, steps as usize, per_launch as usize, &cache)?
        }
        Cmd::Gpu { cmd: GpuCmd::Sample { dir, steps, cache } } => {
            use mk::model::sample::{candidates, sample, uniform_at, SamplingParams};
            let ck = Checkpoint::open(&dir)?;
            let mut t = mk::compiler::h200(1);
            t.max_context = (steps as usize + 2).div_ceil(256) as u32 * 256;
            let prog = mk::compiler::compile(&ck.config, "checkpoint", &t)?;
            let mut d = mk::cuda::discrete::Discrete::new(mk::cuda::Gpu::open()?, &prog, &ck, &cache)?;
            let settings = [(0.7, 20, 0.8), (1.0, 50, 1.0), (0.6, 2048, 0.95), (1.5, 1, 0.5), (2.0, 200, 0.3)];
            let (seed, mut bad, mut control_diff, mut total) = (7u64, 0u32, 0u32, 0u32);
            for (temperature, top_k, top_p) in settings {
                let p = SamplingParams { temperature, top_k, top_p };
                d.reset()?;
                d.set_sampling(&p, seed)?;
                let (mut tok, mut same, mut kept_same) = (9419u32, 0u32, 0u32);
                let top_k_only = SamplingParams { top_p: 1.0, ..p };
                // A setting that fails (the sampler's capacity) is reported and counted; the others run.
                let run = (|| -> mk::error::Result<()> {
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
            // What the sampler costs a token (with TOPK_FUSED the lm_head's counting included):
            // pipelined generation, greedy (the sampler kernel returns at once) against sampled, one
            // warm-up run each, then the two timed runs alternated three times (medians).
            let mut timed = |p: &SamplingParams| -> mk::error::Result<f64> {
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
                mk::bail!(
                    "gpu sample: {bad} tokens or kept-set sizes differ from the CPU sampler (negative control differed {control_diff} times)"
                );
            }
            println!("verdict: ok");
        }
        Cmd::Gpu { cmd: GpuCmd::Compile { arch, resources, cubin } } => {
            let t = std::time::Instant::now();
            let (bin, log) = mk::cuda::compile_check(&arch, resources, cubin.is_some())?;
            let n = bin.len();
            if let Some(f) = cubin {
                std::fs::write(&f, &bin).map_err(|e| mk::error::Error::new(format!("write {}: {e}", f.display())))?;
            }
            if resources {
                // ptxas's per-kernel report as a table (the raw report is NVRTC's log)
                println!(
                    "{:32} {:>9} {:>12} {:>11} {:>11}",
                    "kernel", "registers", "spill stores", "spill loads", "static smem"
                );
                for k in mk::cuda::ptxas_resources(&log) {
                    println!(
                        "{:32} {:>9} {:>12} {:>11} {:>11}",
                        k.name, k.registers, k.spill_stores, k.spill_loads, k.static_smem
                    );
                }
            }
            println!("compiled for {arch}: CUBIN {n} bytes in {:.2} s", t.elapsed().as_secs_f64());
        }
        Cmd::Program { cmd } => match cmd {
            ProgramCmd::Header => print!("{}", mk::isa::cuda_header()),
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
        Cmd::Generate { dir, prompt, steps, temperature, top_k, top_p, seed } => {
            let params = mk::model::sample::SamplingParams { temperature, top_k, top_p };
            params.check()?;
            let ck = Checkpoint::open(&dir)?;
            let w = forward::Weights::from_checkpoint(&ck);
            if prompt.is_empty() {
                mk::bail!("generate: --prompt needs at least one token id");
            }
            let mut state = forward::State::new(&w.cfg, prompt.len() + steps);
            let mut logits = Vec::new();
            for &t in &prompt {
                logits = forward::step(&w, &mut state, t, None)?;
            }
            let mut out = Vec::new();
            for i in 0..steps {
                // The draw of the step at position p (the one whose logits are sampled) is
                // uniform_at(seed, p), as the GPU's sampler takes it.
                let pos = (prompt.len() - 1 + i) as u64;
                let next = mk::model::sample::sample(&logits, &params, mk::model::sample::uniform_at(seed, pos))?;
                out.push(next);
                logits = forward::step(&w, &mut state, next, None)?;
            }
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

/// `mk gpu multistep`: see the command's help.
fn multistep(dir: &std::path::Path, steps: usize, per_launch: usize, cache: &std::path::Path) -> mk::error::Result<()> {
    use mk::isa::BufKind;
    if steps < 2 || per_launch == 0 {
        mk::bail!("gpu multistep: --steps must be at least 2 (the stop is checked before the last) and --per-launch at least 1");
    }
    let ck = Checkpoint::open(dir)?;
    let mut t = mk::compiler::h200(1);
    t.max_context = (steps + 2).div_ceil(256) as u32 * 256;
    let prog = mk::compiler::compile(&ck.config, "checkpoint", &t)?;
    let mut d = mk::cuda::discrete::Discrete::new(mk::cuda::Gpu::open()?, &prog, &ck, cache)?;
    let state = |d: &mk::cuda::discrete::Discrete| -> mk::error::Result<Vec<(usize, Vec<u32>)>> {
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
        mk::bail!("gpu multistep: the megakernel's multi-step launches differ from the graph");
    }
    println!("verdict: ok (bit-identical tokens and state)");
    Ok(())
}
