//! `mk`'s arguments: every command and option (clap), with what each is; main.rs runs them.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

pub use crate::cli_gpu::GpuCmd;

#[derive(Parser)]
#[command(
    name = "mk",
    version,
    about = "Qwen3.5-27B research inference engine: megakernel, CUDA-graph path, experiment runner"
)]
pub struct Cli {
    #[command(subcommand)]
    pub cmd: Cmd,
}

#[derive(Subcommand)]
pub enum Cmd {
    /// Run an experiment (RON spec): diffs and timings of the paths, a results folder with charts.
    Run {
        /// The experiment file (RON; experiments/README.md lists them).
        file: PathBuf,
        /// Where results go (results/<experiment>/<utc>_<gpu-or-cpu>_<sha>/).
        #[arg(long, default_value = "results")]
        results: PathBuf,
        /// Where synthetic checkpoints of presets are generated on first use.
        /// Where compiled kernels (cubin/) and generated checkpoints are kept.
        #[arg(long, default_value = "cache")]
        cache: PathBuf,
        #[command(flatten)]
        shape: Shape,
        /// A CUDA tunable NAME=VALUE added to (or replacing one of) the experiment's `defines`, e.g.
        /// ATTN_UNROLL=8 (repeatable; recorded with the run).
        #[arg(long = "define", value_name = "NAME=VALUE")]
        define: Vec<String>,
    },
    /// Re-render the charts of a results folder from its files.
    Chart {
        /// A results folder (results/<experiment>/<utc>_<gpu-or-cpu>_<sha>).
        dir: PathBuf,
        /// Use a record whose run did not finish (interrupted or failed): its figures are partial.
        #[arg(long)]
        unfinished: bool,
    },
    /// A/B report of two results folders (table, and a chart in the second).
    Compare {
        /// The A results folder.
        a: PathBuf,
        /// The B results folder (the chart is written here).
        b: PathBuf,
        /// Use records whose runs did not finish.
        #[arg(long)]
        unfinished: bool,
    },
    /// The crossover: path B's speed-up over path A against A's ms/token, across results folders
    /// (e.g. tiny, small and 27B runs of both GPU paths); table and OUT/crossover.png.
    Crossover {
        /// Results folders (each with both paths timed).
        dirs: Vec<PathBuf>,
        /// The reference path.
        #[arg(long, default_value = "graph")]
        a: String,
        /// The path whose speed-up is drawn.
        #[arg(long, default_value = "megakernel")]
        b: String,
        /// Where crossover.png goes.
        #[arg(long, default_value = "results")]
        out: PathBuf,
        /// Use records whose runs did not finish.
        #[arg(long)]
        unfinished: bool,
    },
    /// Write a synthetic checkpoint in the real release format (config.json, shards, index).
    Synth {
        /// tiny, small or qwen3.5-27b.
        #[arg(long)]
        preset: String,
        /// Seed of the weights (the same bytes on every machine for a seed).
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// The checkpoint folder to write (refused when it holds files, unless --force).
        #[arg(long)]
        out: PathBuf,
        /// Write into a folder that already holds files (its checkpoint files are replaced).
        #[arg(long)]
        force: bool,
    },
    /// Validate a checkpoint folder: every tensor's name, dtype and shape, scales, and every value.
    Check {
        /// The checkpoint folder.
        dir: PathBuf,
        /// Skip the scan of every weight byte for NaN/Inf (fast: headers and scales only).
        #[arg(long)]
        quick: bool,
    },
    /// Activation and logit statistics of a checkpoint under the CPU reference (random token ids).
    Stats {
        /// The checkpoint folder.
        dir: PathBuf,
        /// Random token ids fed (1 to the model's 262,144 positions).
        #[arg(long, default_value_t = 32)]
        tokens: usize,
        /// Seed of the token ids.
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
        /// Compare only the first N prompts (default: all).
        #[arg(long)]
        max_prompts: Option<usize>,
        /// The reference in fast mode (fp8 activations, W8A8 dynamic; issue 28): its distance from the
        /// goldens reported, not judged.
        #[arg(long)]
        fast: bool,
    },
    /// Compare the CPU reference op by op against an oracle trace (scripts/oracle_trace.py).
    Trace {
        /// The checkpoint folder the trace was recorded on.
        dir: PathBuf,
        /// The trace (.safetensors).
        trace: PathBuf,
    },
    /// Lower a model into the instruction program of one decode step (RON).
    Compile {
        /// A preset (tiny, small, qwen3.5-27b) ...
        #[arg(long, conflicts_with = "config")]
        preset: Option<String>,
        /// ... or a real config.json.
        #[arg(long)]
        config: Option<PathBuf>,
        /// SMs of the target GPU (the H200 has 132).
        #[arg(long, default_value_t = 132)]
        sms: u32,
        /// Threads a block (the kernels run 256).
        #[arg(long, default_value_t = 256)]
        threads: u32,
        /// Activation rows per step (1-8; >1 verifies speculative drafts; a prefill step's 1-128).
        #[arg(long, default_value_t = 1)]
        rows: u32,
        /// KV cache positions (a multiple of 256).
        #[arg(long, default_value_t = 32768)]
        max_context: u32,
        #[command(flatten)]
        shape: Shape,
        /// Lower the MTP drafter's step instead (issue 27): its fc's hidden half from the target's
        /// residual stream (`target`) or from the drafter's own (`own`).
        #[arg(long, value_parser = ["target", "own"])]
        drafter: Option<String>,
        /// With --drafter: the pruned head (issue 27) of this many rows, the working vocabulary the host
        /// lists before each step.
        #[arg(long, requires = "drafter")]
        pruned: Option<usize>,
        /// Lower a prefill step instead (issue 28): --rows prompt rows at once (up to 128), every row
        /// kept, the GDN recurrence by chunks of 64, the head on the last row only.
        #[arg(long, conflicts_with = "drafter")]
        prefill: bool,
        /// The head honours a per-row mask of allowed ids (issue 30: grammar-constrained decoding; the
        /// host sets it before a step).
        #[arg(long, conflicts_with_all = ["drafter", "prefill"])]
        head_mask: bool,
        /// The program file to write (RON).
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
    /// Generation on the CPU reference forward or a GPU path (greedy, or sampled; speculation with the
    /// MTP head); prints the token ids.
    Generate {
        /// The checkpoint folder.
        dir: PathBuf,
        /// Prompt token ids, comma-separated (at least one).
        #[arg(long, value_delimiter = ',', required = true, num_args = 1..)]
        prompt: Vec<u32>,
        /// Tokens to generate.
        #[arg(long, default_value_t = 16)]
        steps: usize,
        /// 0: greedy (argmax, lowest id on ties).
        #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
        temperature: f32,
        /// Keep the k most likely ids (0: all).
        #[arg(long, default_value_t = 0)]
        top_k: usize,
        /// Keep the smallest set of ids whose probability reaches p (1: all).
        #[arg(long, default_value_t = 1.0, allow_negative_numbers = true)]
        top_p: f32,
        /// Seed of the sampling draws.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Speculative decoding with the MTP head: K drafts a round (1-7; prints the rounds' acceptance
        /// on stderr). Greedy on the reference; on the GPU paths greedy, or sampled with the exact rule
        /// (drafts drawn from the drafter, kept with probability min(1, p / q)). Off when absent.
        #[arg(long, value_name = "K")]
        speculate: Option<usize>,
        /// Where it runs: reference (the CPU), graph or megakernel (a GPU; plain sampling on the graph only,
        /// sampled speculation on both).
        #[arg(long, default_value = "reference", value_parser = ["reference", "graph", "megakernel"])]
        path: String,
        /// Where compiled kernels (cubin/) are kept (GPU paths).
        #[arg(long, default_value = "cache")]
        cache: PathBuf,
    },
    /// Text to token ids: one JSON string per stdin line, one JSON array of ids per stdout line.
    Tokenize,
    /// Token ids to text: one JSON array of ids per stdin line, one JSON string per stdout line.
    Detokenize,
    /// Render a chat request (JSON: messages, tools, add_generation_prompt, enable_thinking) with the chat template.
    ChatRender {
        /// The request (JSON).
        file: PathBuf,
        /// Print the token ids (a JSON array) instead of the text.
        #[arg(long)]
        ids: bool,
    },
    /// The fixed-count replay of agent trajectories on the CPU reference (issue 29): each step appends its
    /// tokens, prefills them, decodes greedily the recorded count; a table per trajectory (prefill
    /// tokens, TTFT, decode ms a token).
    AgentReplay {
        /// The checkpoint folder.
        dir: PathBuf,
        /// The trajectories (`mk agent-trajectories --out`).
        #[arg(long, default_value = "experiments/agent/trajectories.json")]
        trajectories: PathBuf,
        /// Only these trajectories (names, comma separated; all when absent).
        #[arg(long, value_delimiter = ',')]
        only: Vec<String>,
        /// Re-prefill the whole history every step instead of keeping the session resident.
        #[arg(long)]
        stateless: bool,
        /// The trajectories as sessions of one session pool (KV in 256-token pages), their steps
        /// interleaved round-robin.
        #[arg(long, conflicts_with = "stateless")]
        pooled: bool,
        /// Write the steps (steps.csv) and a chart of where each trajectory's time went (time.png:
        /// prefill, re-prefill, decode) into this folder.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Agent steps on one pooled session on the CPU reference (issue 29's agent-step API): FILE is a JSON
    /// array of steps {"ids": [..] or "text": "..", "max_tokens": N, "stop": [ids]}; prints each step's
    /// tokens and clocks.
    Agent {
        /// The checkpoint folder.
        dir: PathBuf,
        /// The steps (JSON).
        file: PathBuf,
        /// The session's context.
        #[arg(long, default_value_t = 4096)]
        max_context: usize,
    },
    /// The agent workload's synthetic trajectories (issue 29: the seed's 13 trajectories, 82 steps,
    /// 11,239 emitted tokens): generate them (to --out), or check a file against its own text (--check);
    /// prints a table either way.
    AgentTrajectories {
        /// Write the generated trajectories here (JSON).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Read this file instead and check every recorded count against its text.
        #[arg(long, conflicts_with = "out")]
        check: Option<PathBuf>,
        /// Also write every replay's token ids (the prompt, per step the count to emit and the ids
        /// appended after) with the model's config.json here, for a peer engine (scripts/peer_replay.py).
        #[arg(long)]
        ids: Option<PathBuf>,
        /// The model whose config.json goes with --ids (tiny, small or qwen3.5-27b).
        #[arg(long, default_value = "qwen3.5-27b", requires = "ids")]
        preset: String,
    },
}

/// How the compiler cuts the program's work (the same bits whichever: the tests use them to exercise
/// split-K and the split GDN lowering on small presets; M > 1 programs lower GDN split themselves).
#[derive(clap::Args)]
pub struct Shape {
    /// GEMV unit shapes: balanced (makespan-chosen split-K parts) or fixed (the first policy).
    #[arg(long, default_value = "balanced")]
    pub units: mk::isa::UnitPolicy,
    /// Output rows per GEMV unit (a multiple of 8, 8-256).
    #[arg(long, default_value_t = mk::isa::DEFAULT_GEMV_UNIT_ROWS)]
    pub unit_rows: u32,
    /// GDN lowering: fused (one GdnStep word a layer) or split (GdnConv, GdnRecur, gated norm in out_proj).
    #[arg(long, default_value = "fused")]
    pub gdn: mk::isa::GdnLowering,
}

#[derive(Subcommand)]
pub enum ProgramCmd {
    /// Print the CUDA header generated from the instruction set (megakernel/abi.cuh).
    Header,
    /// List the words: index, opcode, layer, rows, units, bytes streamed, wait and signal.
    Show {
        /// The program file (RON).
        file: PathBuf,
    },
    /// Counts: a line `instructions: N`, counts per opcode, bytes per step.
    Stats {
        /// The program file (RON).
        file: PathBuf,
    },
    /// Run the static validator.
    Check {
        /// The program file (RON).
        file: PathBuf,
    },
}
