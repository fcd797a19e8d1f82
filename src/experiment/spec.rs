//! Experiment files: a RON spec that asks one question (which paths, which model, which workload, what
//! to diff). Unknown fields and unknown path names are errors, named in one line.
//!
//! Owns: the spec types, their parsing and their validation. Refuses: running anything.

use serde::{Deserialize, Serialize};

use crate::bail;
use crate::error::{Context, Result};

/// An execution path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum PathName {
    /// The direct CPU reference forward.
    Reference,
    /// The CPU reference with every linear summed in another valid order (`SumOrder::Reversed`): the
    /// noise twin. Diffed against `Reference`, it measures how far rounding alone moves the outputs,
    /// which is what a tolerance between paths with different summation orders must cover.
    ReferenceReordered,
    /// The CPU reference in fast mode (issue 28): the fp8 linears with fp8 activations, quantised per
    /// token and 128-wide group as the checkpoint's `activation_scheme: dynamic` says (W8A8,
    /// `Activations::Fp8Dynamic`); a different function from `Reference` (W8A16) by design.
    ReferenceFast,
    /// The CPU interpreter of the compiled program.
    Interpreter,
    /// The discrete-kernel CUDA graph (GPU).
    Graph,
    /// The graph path with its prompt prefilled in fast mode (issue 28 item 1: the prefill's GEMMs on
    /// activations quantised to e4m3 per token and 128-group, W8A8); its decode steps are the graph
    /// path's (exact mode: there is no fast GEMV). Needs workload.prefill: the A/B of the two modes'
    /// time to first token in one run.
    GraphFast,
    /// The persistent megakernel (GPU).
    Megakernel,
}

impl PathName {
    pub fn is_gpu(self) -> bool {
        matches!(self, PathName::Graph | PathName::GraphFast | PathName::Megakernel)
    }
    pub fn label(self) -> &'static str {
        match self {
            PathName::Reference => "reference",
            PathName::ReferenceReordered => "reference-reordered",
            PathName::ReferenceFast => "reference-fast",
            PathName::Interpreter => "interpreter",
            PathName::Graph => "graph",
            PathName::GraphFast => "graph-fast",
            PathName::Megakernel => "megakernel",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub enum ModelSpec {
    /// A preset's synthetic checkpoint, generated into `cache/<preset>-seed<seed>` the first time.
    Preset { name: String, seed: u64 },
    /// A checkpoint folder (real or synthetic).
    Checkpoint { path: String },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub enum Prompt {
    /// These token ids.
    Ids(Vec<u32>),
    /// `length` random ids below 248,044 (real text tokens), from `seed`.
    Random { length: u32, seed: u64 },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Workload {
    pub prompt: Prompt,
    /// Decode steps timed at each context length.
    pub decode_steps: u32,
    /// Context lengths to measure at (the prompt, then greedy tokens, fill the context up to each);
    /// empty: the prompt's length.
    #[serde(default)]
    pub contexts: Vec<u32>,
    /// Activation rows per step: 1 (M-row verification steps run under `mk gpu rows`, not `mk run`).
    #[serde(default = "one")]
    pub rows: u32,
    /// Timing only, for long contexts: each context is reached by a jump of the position (the KV
    /// cache below it is left zero), not by computing it; GPU paths only, no diffs.
    #[serde(default)]
    pub seek: bool,
    /// Time to first token by one prefill of the prompt on the paths that prefill (issue 28: the CPU
    /// reference, the interpreter's prefill programs, the graph path's prefill program of 64 rows a
    /// step), each repetition from the empty state; the others (the megakernel; and false) take the
    /// prompt as decode steps.
    #[serde(default)]
    pub prefill: bool,
}

/// The speculation setting: k drafts a round (1-7: a verification step has at most 8 rows) and the
/// acceptance counts to run (each 0..=k; empty: every one).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Speculation {
    pub k: u32,
    #[serde(default)]
    pub agree: Vec<u32>,
}

impl Speculation {
    /// The acceptance counts to run.
    pub fn agree_counts(&self) -> Vec<u32> {
        if self.agree.is_empty() {
            (0..=self.k).collect()
        } else {
            self.agree.clone()
        }
    }
}

/// How an agent replay's session lives between steps (`agent::replay::Residency`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum AgentResidency {
    /// One session kept between steps: a step appends only its new tokens.
    Resident,
    /// Every step re-prefills the whole history from an empty state.
    Stateless,
}

/// The agent workload (issue 29 item 7): the fixed-count replay of agent trajectories on the run's paths
/// that replay (the CPU reference; the graph and the megakernel through one GPU session), a table per
/// trajectory (per step: tokens prefilled, TTFT, decode ms a token, total) and a chart of where each
/// trajectory's time went (prefill, re-prefill, decode).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentWorkload {
    /// The trajectories (`mk agent-trajectories --out`), relative to the working directory.
    #[serde(default = "trajectories")]
    pub trajectories: String,
    /// Only these trajectories (empty: all).
    #[serde(default)]
    pub only: Vec<String>,
    /// At most this many steps of each trajectory.
    pub max_steps: u32,
    /// The residencies to replay (empty: both, resident first).
    #[serde(default)]
    pub residency: Vec<AgentResidency>,
    /// The GPU session's M-row program (appends by passes of M rows; 2-8).
    #[serde(default = "eight")]
    pub rows: u32,
    /// The GPU session's prefill program's rows (appends' whole multiples of it; 0: none, 64 or 128).
    #[serde(default)]
    pub prefill_rows: u32,
}

impl AgentWorkload {
    /// The residencies to replay.
    pub fn residencies(&self) -> Vec<AgentResidency> {
        if self.residency.is_empty() {
            vec![AgentResidency::Resident, AgentResidency::Stateless]
        } else {
            self.residency.clone()
        }
    }
}

fn trajectories() -> String {
    "experiments/agent/trajectories.json".into()
}
fn eight() -> u32 {
    8
}

/// A comparison of two paths. Without a tolerance the comparison is of bits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DiffSpec {
    pub a: PathName,
    pub b: PathName,
    /// For paths not meant to be identical (a GPU path against the CPU reference): |a - b| <=
    /// abs + rel * max(|a|, |b|) on every compared element.
    #[serde(default)]
    pub tolerance: Option<Tolerance>,
    /// For paths whose arithmetic legitimately differs (other summation orders, other libm): judged
    /// against a calibration diff of the same run instead of a fixed tolerance (see `Envelope`).
    #[serde(default)]
    pub envelope: Option<Envelope>,
}

/// The diff passes when its logits' largest and mean absolute difference are at most `factor` times
/// those of the calibration diff `a` vs `b` (listed in `diffs` too; typically the CPU reference
/// against its noise twin `ReferenceReordered`: two valid orders, nothing else different), and its
/// chosen-token mismatches at most `factor` times the calibration's (rounded up). Other buffers are
/// reported, not judged (`DiffResult::judge`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Envelope {
    pub a: PathName,
    pub b: PathName,
    pub factor: f32,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tolerance {
    pub abs: f32,
    pub rel: f32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Experiment {
    pub name: String,
    #[serde(default)]
    pub description: String,
    pub model: ModelSpec,
    /// The model to use instead when a GPU is present (the GPU paths want a bigger one).
    #[serde(default)]
    pub model_with_gpu: Option<ModelSpec>,
    pub paths: Vec<PathName>,
    pub workload: Workload,
    #[serde(default = "one")]
    pub warmup: u32,
    /// Timed repetitions of the whole sequence; 0 is a correctness run (the diff pass only).
    #[serde(default = "three")]
    pub repetitions: u32,
    #[serde(default)]
    pub diffs: Vec<DiffSpec>,
    /// Keep every instruction's output for the diffs of program paths (memory: one copy per word).
    #[serde(default)]
    pub debug: bool,
    /// The graph path's GEMV words grouped by weight shape, each beside a streaming read of the same
    /// weight bytes, launched the same way (shapes.csv, the record's `shapes`; issue 25's per-shape
    /// benchmark).
    #[serde(default)]
    pub shapes: bool,
    /// Greedy speculation on the interpreter's M-row program (M = k + 1) after the diff pass: for each
    /// `agree` count, k forced drafts a round, the first `agree` of them the run's own greedy
    /// continuation; the emitted tokens must be the run's greedy tokens (issue 27, items 6-7).
    #[serde(default)]
    pub speculation: Option<Speculation>,
    /// The agent workload, replayed after the diff and timing passes (issue 29 item 7).
    #[serde(default)]
    pub agent: Option<AgentWorkload>,
    /// For the interpreter: run units in a random dependency-respecting order with this seed.
    #[serde(default)]
    pub shuffle_seed: Option<u64>,
    /// Negative control for the megakernel: its copy of the program loses this word's wait, forced
    /// past the validator; the diff against the graph (or the watchdog) must catch the race.
    #[serde(default)]
    pub drop_wait: Option<u32>,
    /// CUDA tunables of the GPU paths, by name (`src/exec/gpu/defines.rs` lists the known ones and
    /// their ranges; anything else is refused before compiling). Recorded with the experiment.
    #[serde(default)]
    pub defines: std::collections::BTreeMap<String, u32>,
}

fn one() -> u32 {
    1
}
fn three() -> u32 {
    3
}

impl Experiment {
    pub fn parse(text: &str) -> Result<Experiment> {
        let e: Experiment = ron::from_str(text).map_err(|e| crate::error::Error::new(format!("experiment: {e}")))?;
        crate::exec::gpu::Defines::new(e.defines.clone())?;
        e.check()?;
        Ok(e)
    }

    pub fn load(path: &std::path::Path) -> Result<Experiment> {
        let text = std::fs::read_to_string(path).with_context(|| format!("read experiment {}", path.display()))?;
        Experiment::parse(&text).with_context(|| path.display().to_string())
    }

    fn check(&self) -> Result<()> {
        if self.name.is_empty() || !self.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
            bail!("experiment: name '{}' must be letters, digits, '_' or '-' (it names the results folder)", self.name);
        }
        if self.paths.is_empty() {
            bail!("experiment: no paths to run");
        }
        if self.workload.decode_steps == 0 {
            bail!("experiment: workload.decode_steps is 0: nothing would be decoded, compared or timed");
        }
        let mut seen = self.paths.clone();
        seen.sort();
        seen.dedup();
        if seen.len() != self.paths.len() {
            bail!("experiment: a path is listed twice in paths");
        }
        for d in &self.diffs {
            for p in [d.a, d.b] {
                if !self.paths.contains(&p) {
                    bail!("experiment: diff {:?} vs {:?} names a path that is not in paths", d.a, d.b);
                }
            }
            if d.a == d.b {
                bail!("experiment: diff of {:?} with itself", d.a);
            }
            if let Some(env) = &d.envelope {
                if d.tolerance.is_some() {
                    bail!("experiment: diff {:?} vs {:?} has both a tolerance and an envelope", d.a, d.b);
                }
                if !(env.factor.is_finite() && env.factor >= 1.0) {
                    bail!("experiment: envelope factor {} must be a number >= 1", env.factor);
                }
                let cal = self.diffs.iter().find(|c| (c.a, c.b) == (env.a, env.b));
                match cal {
                    None => bail!(
                        "experiment: the envelope of {:?} vs {:?} names the diff {:?} vs {:?}, which is not in diffs",
                        d.a,
                        d.b,
                        env.a,
                        env.b
                    ),
                    Some(c) if c.envelope.is_some() => {
                        bail!("experiment: the calibration diff {:?} vs {:?} has an envelope itself", env.a, env.b)
                    }
                    Some(_) => {}
                }
            }
        }
        if self.workload.rows != 1 {
            bail!(
                "experiment: workload.rows = {} (`mk run` steps one row; M-row verification steps are checked and timed by `mk gpu rows`)",
                self.workload.rows
            );
        }
        if self.paths.contains(&PathName::GraphFast) && (!self.workload.prefill || self.workload.seek) {
            bail!("experiment: path GraphFast is the graph path with a fast-mode prefill: it needs workload.prefill (and no seek)");
        }
        if self.drop_wait.is_some() && !self.paths.contains(&PathName::Megakernel) {
            bail!("experiment: drop_wait is a negative control for the megakernel: paths must include Megakernel");
        }
        if self.workload.seek {
            if !self.diffs.is_empty() {
                bail!("experiment: workload.seek skips the context's computation: it takes no diffs");
            }
            if let Some(p) = self.paths.iter().find(|p| !p.is_gpu()) {
                bail!("experiment: workload.seek is for the GPU paths ({:?} cannot seek)", p);
            }
        }
        if self.repetitions == 0 && (self.workload.seek || self.diffs.is_empty()) {
            bail!("experiment: repetitions 0 (a correctness run: diffs only, no timing) needs diffs and no seek");
        }
        let plen = match &self.workload.prompt {
            Prompt::Ids(v) => v.len() as u32,
            Prompt::Random { length, .. } => *length,
        };
        if plen == 0 {
            bail!("experiment: the prompt is empty");
        }
        if let Prompt::Ids(ids) = &self.workload.prompt {
            if let Some(t) = ids.iter().find(|t| **t >= 248_320) {
                bail!("experiment: prompt token id {t} is out of range (vocabulary 248320)");
            }
        }
        if let Some(c) = self.workload.contexts.iter().find(|c| **c < plen) {
            bail!("experiment: context {c} is shorter than the prompt ({plen} tokens)");
        }
        if let Some(s) = &self.speculation {
            if !(1..=7).contains(&s.k) {
                bail!("experiment: speculation.k = {} (1-7 drafts: a verification step has at most 8 rows)", s.k);
            }
            if let Some(a) = s.agree.iter().find(|a| **a > s.k) {
                bail!("experiment: speculation.agree {a} is more than k = {} drafts", s.k);
            }
            if self.workload.seek {
                bail!("experiment: speculation needs the run's greedy tokens: no workload.seek");
            }
        }
        if let Some(a) = &self.agent {
            if a.max_steps == 0 {
                bail!("experiment: agent.max_steps is 0: nothing would be replayed");
            }
            if !(2..=8).contains(&a.rows) {
                bail!("experiment: agent.rows = {} (the GPU session's M-row program has 2-8 rows)", a.rows);
            }
            if ![0, 64, 128].contains(&a.prefill_rows) {
                bail!(
                    "experiment: agent.prefill_rows = {} (0: none, or a prefill program of 64 or 128 rows)",
                    a.prefill_rows
                );
            }
            let mut r = a.residency.iter().map(|r| *r as u8).collect::<Vec<_>>();
            r.sort();
            r.dedup();
            if r.len() != a.residency.len() {
                bail!("experiment: agent.residency lists a residency twice");
            }
            if self.workload.seek {
                bail!("experiment: the agent replay computes every context: no workload.seek");
            }
        }
        Ok(())
    }

    /// The contexts to measure at.
    pub fn contexts(&self) -> Vec<u32> {
        if self.workload.contexts.is_empty() {
            vec![match &self.workload.prompt {
                Prompt::Ids(v) => v.len() as u32,
                Prompt::Random { length, .. } => *length,
            }]
        } else {
            self.workload.contexts.clone()
        }
    }

    /// The prompt's token ids.
    pub fn prompt_ids(&self) -> Vec<u32> {
        match &self.workload.prompt {
            Prompt::Ids(v) => v.clone(),
            Prompt::Random { length, seed } => {
                let mut r = crate::model::synth::Rng::new(*seed);
                (0..*length).map(|_| (r.next_u64() % 248_044) as u32).collect()
            }
        }
    }
}
