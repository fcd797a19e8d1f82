//! `mk gpu`'s arguments: the GPU checks, probes and replays (clap), with what each is; main.rs runs
//! them.

use std::path::PathBuf;

use clap::Subcommand;

#[derive(Subcommand)]
pub enum GpuCmd {
    /// Compile the CUDA sources with NVRTC only (no GPU needed).
    Compile {
        /// The GPU architecture to compile for (the H200's is sm_90).
        #[arg(long, default_value = "sm_90")]
        arch: String,
        /// Print ptxas's resource usage per kernel (registers, spills, shared memory).
        #[arg(long)]
        resources: bool,
        /// Also write the CUBIN to this file, with line info (for cuobjdump -sass / nvdisasm -g).
        #[arg(long)]
        cubin: Option<std::path::PathBuf>,
        /// CUDA tunables NAME=VALUE (src/exec/gpu/defines.rs lists them; repeatable).
        #[arg(long = "define")]
        defines: Vec<String>,
        /// Compile as an M-row program (verification steps of M rows, 1-8; with --prefill 1-128) compiles.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=128))]
        m: u32,
        /// Compile as a prefill program of M rows compiles (PREFILL; issue 28).
        #[arg(long)]
        prefill: bool,
        /// Compile as a program with a head mask compiles (MK_HEAD_MASK; issue 30).
        #[arg(long)]
        head_mask: bool,
        /// Compile as an MTP drafter's program compiles (MK_MTP; issue 27).
        #[arg(long)]
        mtp: bool,
    },
    /// The GPU sampler against the CPU's: for several (temperature, top-k, top-p) settings, every
    /// GPU-sampled token must equal `model::sample` on the step's logits with the same draw; a negative
    /// control (the CPU with another seed) must disagree.
    Sample {
        /// The checkpoint folder.
        dir: PathBuf,
        /// Sampled steps per setting.
        #[arg(long, default_value_t = 32)]
        steps: u32,
        /// Where compiled kernels (cubin/) and generated checkpoints are kept.
        #[arg(long, default_value = "cache")]
        cache: PathBuf,
        /// CUDA tunables NAME=VALUE (src/exec/gpu/defines.rs lists them; repeatable).
        #[arg(long = "define")]
        defines: Vec<String>,
    },
    /// Runs `steps` greedy tokens through the graph path, synchronised per step and then pipelined (one
    /// replay in flight ahead): device memory before and after (nothing may allocate after startup),
    /// the time per token of each, and that both produce the same tokens.
    Soak {
        /// The checkpoint folder.
        dir: PathBuf,
        /// Greedy steps.
        #[arg(long, default_value_t = 1000)]
        steps: u32,
        /// Where compiled kernels (cubin/) and generated checkpoints are kept.
        #[arg(long, default_value = "cache")]
        cache: PathBuf,
        /// CUDA tunables NAME=VALUE (src/exec/gpu/defines.rs lists them; repeatable).
        #[arg(long = "define")]
        defines: Vec<String>,
    },
    /// The megakernel's in-kernel token loop: `steps` greedy tokens through the graph (one replay per
    /// step), then through the megakernel with `per_launch` steps per cooperative launch; tokens and
    /// every non-weight buffer must be the same bits. Then the device-side stop (the launch must end
    /// at the step that produced the stop token) and ms/token of the graph, the megakernel at one step
    /// per launch and at `per_launch`.
    Multistep {
        /// The checkpoint folder.
        dir: PathBuf,
        /// Greedy steps (at least 2).
        #[arg(long, default_value_t = 64)]
        steps: u32,
        /// Steps per cooperative launch of the megakernel.
        #[arg(long, default_value_t = 16)]
        per_launch: u32,
        /// Where compiled kernels (cubin/) and generated checkpoints are kept.
        #[arg(long, default_value = "cache")]
        cache: PathBuf,
        /// CUDA tunables NAME=VALUE (src/exec/gpu/defines.rs lists them; repeatable).
        #[arg(long = "define")]
        defines: Vec<String>,
    },
    /// Greedy speculation with the MTP drafter on both GPU paths (issue 27) against plain greedy
    /// decoding: the same tokens, with its drafts and with every draft forced to agree; ms per token.
    Spec {
        /// The checkpoint folder.
        dir: PathBuf,
        /// Drafts a round (1-7), comma separated: the target's M = k + 1 program each.
        #[arg(long, value_delimiter = ',', default_value = "3")]
        k: Vec<u32>,
        /// Tokens generated after the prompt.
        #[arg(long, default_value_t = 1000)]
        tokens: u32,
        /// Where compiled kernels (cubin/) and generated checkpoints are kept.
        #[arg(long, default_value = "cache")]
        cache: PathBuf,
        /// CUDA tunables NAME=VALUE (src/exec/gpu/defines.rs lists them; repeatable).
        #[arg(long = "define")]
        defines: Vec<String>,
    },
    /// The head's mask (issue 30) on both GPU paths: masked steps against the scatter method over the
    /// plain program's logits, bit for bit, at allowed counts from 1 to all; a constrained tool call on
    /// the one-row and the M = 4 program (forced spans as rows); with --reps, ms per step at each allowed
    /// count against the plain program. Negative control: --define MK_BREAK_MASK must fail.
    Mask {
        /// The checkpoint folder.
        dir: PathBuf,
        /// Masked steps checked per path.
        #[arg(long, default_value_t = 40)]
        steps: u32,
        /// Timed steps per path and allowed count (0: no timings).
        #[arg(long, default_value_t = 0)]
        reps: u32,
        /// Where compiled kernels (cubin/) and generated checkpoints are kept.
        #[arg(long, default_value = "cache")]
        cache: PathBuf,
        /// CUDA tunables NAME=VALUE (src/exec/gpu/defines.rs lists them; repeatable).
        #[arg(long = "define")]
        defines: Vec<String>,
    },
    /// The fixed-count replay of the agent trajectories on both GPU paths (issue 29): one resident
    /// session, appends as M-row passes, decoding as one-row steps; the megakernel's tokens must be the
    /// graph's (and with --stateless a session re-run from empty every step must emit the resident one's;
    /// with --control a hand-off that forgets the state must not); a table per trajectory and the totals.
    Agent(AgentCmd),
    /// M-row verification steps (M tokens at positions pos .. pos + M in one graph replay or one
    /// megakernel launch) against one-row steps, bit for bit: every row's logits and token and the
    /// final states, on both paths, with a negative control (two tokens swapped); then ms per step.
    Rows {
        /// The checkpoint folder.
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
        /// Also time the steps at these positions, comma separated (reached by a jump: the KV cache
        /// below is left zero; the verification step's cost against context).
        #[arg(long, value_delimiter = ',')]
        at: Vec<u32>,
        /// The M-row programs' GEMV unit rows (a multiple of 8 from 8 to 256; default: the compiler's).
        #[arg(long)]
        unit_rows: Option<u32>,
        /// Where compiled kernels (cubin/) and generated checkpoints are kept.
        #[arg(long, default_value = "cache")]
        cache: PathBuf,
        /// CUDA tunables NAME=VALUE (src/exec/gpu/defines.rs lists them; repeatable).
        #[arg(long = "define")]
        defines: Vec<String>,
    },
    /// A prompt through a prefill program on the graph path (issue 28: M rows a step, the fp8 GEMVs as
    /// the tensor-core GEMM, the chunked GDN): checked against the interpreter (--check) and the decode
    /// path (--against-decode) within the envelope, timed in tokens per second.
    Prefill {
        /// The checkpoint folder.
        dir: PathBuf,
        /// Rows a step (1-128; 64 and 128 keep the GDN chunks anchored at the prompt's start).
        #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=128))]
        m: u32,
        /// Prompt lengths T, comma separated, each a multiple of M.
        #[arg(long, value_delimiter = ',', default_value = "128")]
        tokens: Vec<u32>,
        /// Timed prefills per T (the median is reported).
        #[arg(long, default_value_t = 3)]
        reps: u32,
        /// Check against the interpreter's prefill (tiny or small: the CPU runs the whole program).
        #[arg(long)]
        check: bool,
        /// Also feed the prompt through the one-row program a token a step and compare.
        #[arg(long)]
        against_decode: bool,
        /// Also one prefill of each T word by word with events: the time by kind of word (the GEMM per
        /// opcode, the chunked GDN, the attention, every other word by its opcode).
        #[arg(long)]
        profile: bool,
        /// Fast mode (W8A8): the GEMMs on the activations quantised to e4m3 per token and 128-group (the
        /// checkpoint's activation_scheme: dynamic); --check then compares with the interpreter in fast mode.
        #[arg(long)]
        fast: bool,
        /// Where compiled kernels (cubin/) and generated checkpoints are kept.
        #[arg(long, default_value = "cache")]
        cache: PathBuf,
        /// CUDA tunables NAME=VALUE (src/exec/gpu/defines.rs lists them; repeatable).
        #[arg(long = "define")]
        defines: Vec<String>,
    },
    /// Prefill's GEMM (exact mode: megakernel/gemm.cuh; fast mode: gemm_fast.cuh) on every fp8 shape of a preset at each
    /// prompt length T: checked against the CPU in f64, then timed (TFLOP/s, weight GB/s).
    Gemm {
        /// tiny, small or qwen3.5-27b.
        #[arg(long, default_value = "qwen3.5-27b")]
        preset: String,
        /// Prompt lengths T (rows of activations), comma separated.
        #[arg(long, value_delimiter = ',', default_value = "59,512,4096")]
        t: Vec<usize>,
        /// Timed rotations per shape and T (medians).
        #[arg(long, default_value_t = 5)]
        reps: usize,
        /// mma (exact mode, mma.sync, 64 tokens a block), wg (exact mode, wgmma, sm_90a, 128 tokens a block) or
        /// fast (fast mode, W8A8: the activations in e4m3 per token and 128-group, mma.sync e4m3).
        #[arg(long, default_value = "mma")]
        kernel: String,
        /// Where compiled kernels (cubin/) and generated checkpoints are kept.
        #[arg(long, default_value = "cache")]
        cache: PathBuf,
        /// CUDA tunables NAME=VALUE (MK_BREAK_GEMV: the negative control the check must reject).
        #[arg(long = "define")]
        defines: Vec<String>,
    },
    /// Prefill's chunked gated delta rule (megakernel/gdn_chunk.cuh, issue 28) for one GDN layer of a
    /// preset at each prompt length T: checked against the CPU's chunked form, then timed (ms a layer).
    GdnChunk {
        /// tiny, small or qwen3.5-27b (its GDN heads).
        #[arg(long, default_value = "qwen3.5-27b")]
        preset: String,
        /// Prompt lengths T, comma separated.
        #[arg(long, value_delimiter = ',', default_value = "130,512,4096")]
        t: Vec<usize>,
        /// Timed rounds per T (medians).
        #[arg(long, default_value_t = 10)]
        reps: usize,
        /// Where compiled kernels (cubin/) are kept.
        #[arg(long, default_value = "cache")]
        cache: PathBuf,
        /// CUDA tunables NAME=VALUE (GDNC_DV; MK_BREAK_GDN: the negative control the check must reject).
        #[arg(long = "define")]
        defines: Vec<String>,
    },
    /// Decode step v2's fp8 GEMV (megakernel/ring.cuh) on every fp8 shape of a preset: checked against
    /// the CPU in f64, then its bandwidth beside the same kernel with the arithmetic off (loads only).
    Gemv {
        /// tiny, small or qwen3.5-27b.
        #[arg(long, default_value = "qwen3.5-27b")]
        preset: String,
        /// Timed rotations per shape and kernel (medians).
        #[arg(long, default_value_t = 5)]
        reps: usize,
        /// Where compiled kernels (cubin/) and generated checkpoints are kept.
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
        /// Where compiled kernels (cubin/) and generated checkpoints are kept.
        #[arg(long, default_value = "cache")]
        cache: PathBuf,
        /// CUDA tunables NAME=VALUE (src/exec/gpu/defines.rs lists them; repeatable).
        #[arg(long = "define")]
        defines: Vec<String>,
        /// GEMV unit shapes of the checked program (balanced or fixed).
        #[arg(long, default_value = "balanced")]
        units: mk::isa::UnitPolicy,
        /// Check the MTP drafter's program instead (issue 27).
        #[arg(long)]
        drafter: bool,
        /// With --drafter: its pruned head of this capacity (rows; a working vocabulary of about 60 %
        /// of it, every third id, so that a unit past the list's end is checked too).
        #[arg(long, requires = "drafter")]
        pruned: Option<usize>,
    },
}

/// `mk gpu agent`'s arguments (the replay on both GPU paths, issue 29; `verify::agent`).
#[derive(clap::Args)]
pub struct AgentCmd {
    /// The checkpoint folder.
    pub dir: PathBuf,
    /// The trajectories (`mk agent-trajectories --out`).
    #[arg(long, default_value = "experiments/agent/trajectories.json")]
    pub trajectories: PathBuf,
    /// Only these trajectories (names, comma separated; all when absent).
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// At most this many steps of each trajectory.
    #[arg(long, default_value_t = usize::MAX)]
    pub max_steps: usize,
    /// Rows of an append pass (the M-row program's M).
    #[arg(long, default_value_t = 8)]
    pub m: u32,
    /// Also the stateless replay on the graph (the whole history re-run every step).
    #[arg(long)]
    pub stateless: bool,
    /// Also the negative controls (the first trajectory with hand-offs that forget the state; with
    /// --park, with restores that leave out the GDN states).
    #[arg(long)]
    pub control: bool,
    /// Also the composed replay (issue 30): each step's tool call generated under the grammar, in
    /// five variants (each mechanism off once, the grammar off as the negative control); the
    /// programs get a head mask.
    #[arg(long)]
    pub grammar: bool,
    /// Also a resident replay parked in host memory and restored between steps (same tokens
    /// required; park and restore timed against re-prefilling the history).
    #[arg(long)]
    pub park: bool,
    /// Also the trajectories interleaved round-robin as sessions taking turns on the GPU, each parked
    /// in host memory between its steps (each must emit what it emits alone).
    #[arg(long)]
    pub interleaved: bool,
    /// Also the resident graph replay with greedy speculation at these acceptance counts (comma
    /// separated, each below M: of a round's M - 1 drafts, the first so many the plain continuation).
    #[arg(long, value_delimiter = ',')]
    pub speculate_agree: Vec<usize>,
    /// Appends' whole multiples of this many rows through a prefill program (issue 28: the GEMM and
    /// the chunked GDN on the graph path; 0: appends by M-row passes only), anchored at the session's
    /// last multiple of it (the stateless run's tokens and states must equal the resident run's).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=128))]
    pub prefill: u32,
    /// Write each run's steps.csv and time chart into this folder.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Where compiled kernels (cubin/) and generated checkpoints are kept.
    #[arg(long, default_value = "cache")]
    pub cache: PathBuf,
    /// CUDA tunables NAME=VALUE (src/exec/gpu/defines.rs lists them; repeatable).
    #[arg(long = "define")]
    pub defines: Vec<String>,
}

impl AgentCmd {
    pub fn args(self) -> mk::error::Result<mk::verify::agent::Args> {
        Ok(mk::verify::agent::Args {
            dir: self.dir,
            trajectories: self.trajectories,
            only: self.only,
            max_steps: self.max_steps,
            m: self.m,
            stateless: self.stateless,
            control: self.control,
            grammar: self.grammar,
            park: self.park,
            interleaved: self.interleaved,
            speculate_agree: self.speculate_agree,
            prefill: self.prefill,
            out: self.out,
            cache: self.cache,
            defines: mk::exec::gpu::Defines::parse(&self.defines)?,
        })
    }
}
