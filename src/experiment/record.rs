//! The results folder: `results/<experiment>/<utc-time>_<gpu-or-cpu>_<git-sha>/` with `record.json`
//! (rewritten whole after every unit of work, so a crash late in a run loses nothing measured),
//! `steps.csv` and `instructions.csv` (one serde row per line, appended and flushed as produced).
//!
//! Owns: the record format and the environment it describes (git sha and dirty flag, GPU, driver).
//! Refuses: charts (`chart.rs` renders them from these files).

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::diff::DiffResult;
use super::spec::Experiment;
use crate::error::{Context, Result};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Timing {
    pub context: u32,
    pub ms_median: f64,
    pub ms_min: f64,
    pub ms_max: f64,
    pub samples: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PathRecord {
    pub name: String,
    /// "ran", or "skipped: <why>".
    pub status: String,
    /// Over all contexts: ms per token median, min, max (None if skipped).
    pub ms_per_token_median: Option<f64>,
    pub ms_per_token_min: Option<f64>,
    pub ms_per_token_max: Option<f64>,
    pub by_context: Vec<Timing>,
    /// Time to first token over the repetitions (records before 2026-12-03 have none; none for a path
    /// that was not timed or timed by seeks).
    #[serde(default)]
    pub ttft: Option<Ttft>,
}

/// Time to first token: submit to the first generated token, the prompt's `prompt_tokens` processed as
/// `how` says; median, min and max over the timed repetitions (`samples`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ttft {
    pub prompt_tokens: u32,
    pub how: String,
    pub ms_median: f64,
    pub ms_min: f64,
    pub ms_max: f64,
    pub samples: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    pub experiment: Experiment,
    pub spec_file: String,
    pub command: Vec<String>,
    pub started_utc: String,
    pub finished_utc: Option<String>,
    /// running, finished, failed or interrupted (Ctrl-C). Records before 2026-12-02 have none: their
    /// finished_utc says whether they finished.
    #[serde(default)]
    pub status: Option<String>,
    pub git_sha: String,
    pub git_dirty: bool,
    pub machine: String,
    pub gpu: Option<String>,
    pub driver: Option<String>,
    pub nvrtc_options: Vec<String>,
    pub checkpoint: String,
    pub model: String,
    pub program_hash: Option<String>,
    pub cuda_sources_hash: Option<String>,
    pub weight_bytes_per_step: u64,
    /// The GPU's streaming-read bandwidth (GB/s) measured at the start of the run (cached per GPU and
    /// driver), the denominator of every bandwidth figure; 0 when no GPU path ran.
    pub ceiling_gbps: f64,
    pub paths: Vec<PathRecord>,
    pub diffs: Vec<DiffResult>,
    /// Per path and instruction kind: time per step, weight bytes streamed, bandwidth (the launch
    /// inventory of the GPU path is a note: kernel nodes per step).
    #[serde(default)]
    pub kernels: Vec<KernelStat>,
    /// Per GEMV weight shape (experiments with `shapes: true`): the graph's word-by-word time beside a
    /// streaming read of the same bytes.
    #[serde(default)]
    pub shapes: Vec<ShapeStat>,
    /// Greedy speculation on the M-row program (the experiment's `speculation`): the interpreter, and the
    /// GPU paths the run has.
    #[serde(default)]
    pub speculation: Vec<SpecRun>,
    /// The agent replay (the experiment's `agent`): one entry per path and residency.
    #[serde(default)]
    pub agent: Vec<AgentRun>,
    pub notes: Vec<String>,
}

/// One path's replay of the agent trajectories at one residency: the sums over its steps (wall time of
/// the process, ms); the steps themselves are in `agent/<path>_<residency>/steps.csv`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentRun {
    pub path: String,
    pub residency: String,
    pub trajectories: usize,
    pub steps: usize,
    /// Tokens prefilled (the appended ones and any re-run) and emitted.
    pub prefill_tokens: usize,
    pub emitted: usize,
    /// Summed time to first token (prefill) and decode.
    pub prefill_ms: f64,
    pub decode_ms: f64,
    /// The steps whose emitted tokens differ from those of the run they are checked against (`against`;
    /// none for the first run of the pass).
    pub against: Option<String>,
    pub differing_steps: usize,
    /// The trajectories whose final state bits (digests of every state buffer) differ from that run's:
    /// between two GPU runs only (0 otherwise; records before session 32's last commits have none).
    #[serde(default)]
    pub differing_states: usize,
    /// Whether those must be identical (bit-exact paths and residencies) or are reported (other summation
    /// orders: the CPU reference against a GPU path).
    pub must_match: bool,
}

/// One acceptance count of the speculation pass.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpecRun {
    pub k: u32,
    pub agree: u32,
    pub rounds: usize,
    pub drafted: usize,
    pub accepted: usize,
    pub tokens: usize,
    /// The emitted tokens equal the run's greedy tokens.
    pub identical: bool,
    /// The first emitted token that differs, if any.
    pub first_difference: Option<usize>,
    /// Wall time per emitted token on the path (ms; each round synchronised: the interpreter's is the
    /// mechanism's, not a GPU figure).
    #[serde(alias = "cpu_ms_per_token")]
    pub ms_per_token: f64,
    /// Where it ran: the interpreter, or a GPU path (graph, megakernel).
    #[serde(default = "interpreter")]
    pub path: String,
}

fn interpreter() -> String {
    "interpreter".into()
}

/// One GEMV weight shape: its words' summed ms per step (launched one by one, launch cost included)
/// and the same weight bytes read by the streaming-read kernel, launched the same way.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShapeStat {
    /// Opcode, then each weight matrix as rows x cols and its type, e.g. "GemvGateUp 2 x 17408x5120 fp8".
    pub shape: String,
    pub words: usize,
    /// Weight bytes of those words per step (matrices only; fp8 block scales are 1/16,384 of it).
    pub bytes: u64,
    pub gemv_ms: f64,
    pub read_ms: f64,
    pub gemv_gb_per_s: f64,
    pub read_gb_per_s: f64,
    /// The GEMV's bandwidth as a fraction of the read's (read_ms / gemv_ms).
    pub gemv_of_read: f64,
    pub gemv_of_ceiling: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KernelStat {
    pub path: String,
    pub opcode: String,
    pub words: usize,
    pub ms_per_step: f64,
    /// Bytes streamed per step: weights, plus the KV rows and recurrent/conv state the words read and
    /// write (`isa::report::streamed_bytes`). Records written before that count weights only (their
    /// field was named `weight_bytes`).
    #[serde(alias = "weight_bytes")]
    pub bytes: u64,
    pub gb_per_s: f64,
    pub fraction_of_ceiling: f64,
}

impl Record {
    pub fn load(dir: &Path) -> Result<Record> {
        let p = dir.join("record.json");
        let text = std::fs::read_to_string(&p).with_context(|| format!("read {}", p.display()))?;
        serde_json::from_str(&text).with_context(|| format!("{}: not a record", p.display()))
    }

    /// Whether the run finished (not running, failed or interrupted).
    pub fn finished(&self) -> bool {
        match &self.status {
            Some(s) => s == "finished",
            None => self.finished_utc.is_some(),
        }
    }

    /// The record of `dir`, refused unless its run finished (or `unfinished` is asked for): the
    /// figures of an interrupted or failed run are partial and must not pass for a result.
    pub fn load_finished(dir: &Path, unfinished: bool) -> Result<Record> {
        let r = Record::load(dir)?;
        if !r.finished() && !unfinished {
            crate::bail!(
                "{}: the run did not finish (status {}): its figures are partial (--unfinished to use them anyway)",
                dir.display(),
                r.status.as_deref().unwrap_or("unknown")
            );
        }
        Ok(r)
    }
}

pub use crate::isa::fnv_hex;

/// UTC time as `YYYYMMDDTHHMMSSZ` (civil-from-days, no time-zone library needed).
pub fn utc_stamp(t: std::time::SystemTime) -> String {
    let s = t.duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0) as i64;
    let (days, sod) = (s.div_euclid(86_400), s.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + (m <= 2) as i64;
    format!("{y:04}{m:02}{d:02}T{:02}{:02}{:02}Z", sod / 3600, sod % 3600 / 60, sod % 60)
}

/// (short sha, dirty) of the sources the running binary was built from.
pub fn git_state() -> (String, bool) {
    // The state the binary was built from (build.rs): what ran is the binary, and a copied working
    // tree (the GPU machine's) may carry a stale .git of its own. Dirty when its sources differed
    // from that commit at build time.
    (env!("MK_BUILD_SHA").to_string(), env!("MK_BUILD_DIRTY") == "true")
}

/// An open results folder.
pub struct Results {
    pub dir: PathBuf,
    steps: std::fs::File,
    instr: std::fs::File,
}

/// One row of steps.csv.
pub struct StepRow<'a> {
    pub path: &'a str,
    pub context: u32,
    pub repetition: u32,
    pub step: u32,
    pub ms: f64,
}

/// One row of instructions.csv.
pub struct InstrRow<'a> {
    pub path: &'a str,
    pub context: u32,
    pub word: usize,
    pub opcode: &'a str,
    pub layer: u16,
    pub ms_per_step: f64,
}

impl StepRow<'_> {
    fn csv(&self) -> String {
        format!("{},{},{},{},{}", self.path, self.context, self.repetition, self.step, self.ms)
    }
}

impl InstrRow<'_> {
    fn csv(&self) -> String {
        format!("{},{},{},{},{},{}", self.path, self.context, self.word, self.opcode, self.layer, self.ms_per_step)
    }
}

impl Results {
    /// A new folder `<root>/<experiment>/<started>_<device>_<sha>`, created exclusively: a run in the
    /// same second (or at once, from another process) gets `-2`, `-3`, .. appended, never another run's.
    pub fn create(root: &Path, experiment: &str, device: &str, sha: &str, started: &str) -> Result<Results> {
        let parent = root.join(experiment);
        std::fs::create_dir_all(&parent).with_context(|| format!("create {}", parent.display()))?;
        let base = format!("{started}_{device}_{sha}");
        let mut dir = parent.join(&base);
        for n in 2.. {
            match std::fs::create_dir(&dir) {
                Ok(()) => break,
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && n < 10_000 => {
                    dir = parent.join(format!("{base}-{n}"));
                }
                Err(e) => crate::bail!("create {}: {e}", dir.display()),
            }
        }
        let open = |name: &str, header: &str| -> Result<std::fs::File> {
            let mut f = std::fs::File::create(dir.join(name)).with_context(|| format!("create {name}"))?;
            writeln!(f, "{header}").with_context(|| format!("write {name}"))?;
            Ok(f)
        };
        Ok(Results {
            steps: open("steps.csv", "path,context,repetition,step,ms")?,
            instr: open("instructions.csv", "path,context,word,opcode,layer,ms_per_step")?,
            dir,
        })
    }

    pub fn step_row(&mut self, row: &StepRow) -> Result<()> {
        writeln!(self.steps, "{}", row.csv()).context("write steps.csv")?;
        self.steps.flush().context("write steps.csv")
    }

    pub fn instr_row(&mut self, row: &InstrRow) -> Result<()> {
        writeln!(self.instr, "{}", row.csv()).context("write instructions.csv")?;
        self.instr.flush().context("write instructions.csv")
    }

    /// Rewrites record.json (atomically: a temporary file renamed over it).
    pub fn save(&self, r: &Record) -> Result<()> {
        let text = serde_json::to_string_pretty(r).context("serialise record")?;
        let tmp = self.dir.join("record.json.tmp");
        std::fs::write(&tmp, text + "\n").context("write record.json")?;
        std::fs::rename(&tmp, self.dir.join("record.json")).context("write record.json")
    }
}

/// Reads steps.csv back: (path, context, ms).
pub fn read_steps(dir: &Path) -> Result<Vec<(String, u32, f64)>> {
    let text =
        std::fs::read_to_string(dir.join("steps.csv")).with_context(|| format!("read {}/steps.csv", dir.display()))?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        let bad =
            || crate::error::Error::new(format!("steps.csv line {}: expected path,context,repetition,step,ms", i + 1));
        if f.len() != 5 {
            return Err(bad());
        }
        out.push((f[0].to_string(), f[1].parse().map_err(|_| bad())?, f[4].parse().map_err(|_| bad())?));
    }
    Ok(out)
}

/// Reads instructions.csv back: (path, opcode, ms_per_step).
pub fn read_instructions(dir: &Path) -> Result<Vec<(String, String, f64)>> {
    let text = std::fs::read_to_string(dir.join("instructions.csv"))
        .with_context(|| format!("read {}/instructions.csv", dir.display()))?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        let bad = || {
            crate::error::Error::new(format!(
                "instructions.csv line {}: expected path,context,word,opcode,layer,ms_per_step",
                i + 1
            ))
        };
        if f.len() != 6 {
            return Err(bad());
        }
        out.push((f[0].to_string(), f[3].to_string(), f[5].parse().map_err(|_| bad())?));
    }
    Ok(out)
}

/// Median, min, max of samples (None when empty).
pub fn summarise(v: &[f64]) -> Option<(f64, f64, f64)> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let med = if s.len() % 2 == 1 { s[s.len() / 2] } else { (s[s.len() / 2 - 1] + s[s.len() / 2]) / 2.0 };
    Some((med, s[0], s[s.len() - 1]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_stamps_and_summaries() {
        assert_eq!(utc_stamp(std::time::UNIX_EPOCH), "19700101T000000Z");
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_796_036_400); // 2026-11-30 11:00:00
        assert_eq!(utc_stamp(t), "20261130T110000Z");
        assert_eq!(summarise(&[3.0, 1.0, 2.0]), Some((2.0, 1.0, 3.0)));
        assert_eq!(summarise(&[4.0, 1.0]), Some((2.5, 1.0, 4.0)));
        assert_eq!(
            StepRow { path: "graph", context: 4096, repetition: 1, step: 2, ms: 6.5 }.csv(),
            "graph,4096,1,2,6.5"
        );
    }
}
