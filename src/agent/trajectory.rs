//! Synthetic agent trajectories with the seed's workload statistics (issue 29 item 5): 13 trajectories,
//! 82 steps, 11,239 emitted tokens, contexts from about 1,500 to 34,000 tokens, reasoning effort from
//! off to very high (seed 7.1), tool results "typically a few hundred tokens" (seed 5.1) with a few large
//! file reads (what takes a trajectory to 34K). The seed's per-step table did not survive in our copy
//! of the article, so the per-step distribution is ours (below, `PLAN`); only those totals are the
//! seed's. Every conversation is rendered with the model's own chat template and counted with the real
//! tokenizer; a step is: decode `emit` tokens (the assistant's turn up to and including `<|im_end|>`),
//! then append the tool result's turn and the next generation prompt (`append` tokens), as an agent loop
//! does (append-only: the history's ids never change, checked at every step).
//!
//! Deterministic (a fixed seed, no clock): `generate()` is what `experiments/agent/trajectories.json`
//! holds, and a test regenerates it. Owns: the plan, the text generator, the counts. Refuses: a data file
//! whose counts its text does not reproduce.

use minijinja::value::Value;

use crate::error::{Error, Result};
use crate::tokenizer::chat::{self, OrderedMap};
use crate::tokenizer::Tokenizer;

/// The seed's totals (7.1): trajectories, steps, emitted tokens.
pub const TRAJECTORIES: usize = 13;
pub const STEPS: usize = 82;
pub const EMITTED: usize = 11_239;

/// Reasoning effort: off (thinking disabled) to very high (the reasoning's share of a turn).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effort {
    Off,
    Low,
    Medium,
    High,
    VeryHigh,
}

impl Effort {
    pub fn name(self) -> &'static str {
        match self {
            Effort::Off => "off",
            Effort::Low => "low",
            Effort::Medium => "medium",
            Effort::High => "high",
            Effort::VeryHigh => "very high",
        }
    }
    /// The reasoning tokens of a turn before scaling (ours: a step's emitted tokens are this plus its
    /// tool call).
    fn reasoning(self) -> usize {
        match self {
            Effort::Off => 0,
            Effort::Low => 28,
            Effort::Medium => 62,
            Effort::High => 118,
            Effort::VeryHigh => 180,
        }
    }
}

/// Per trajectory (ours): steps, effort, the tokens its tool results reach in total (the context
/// growth: most results a few hundred tokens, the long ones with whole-file reads).
const PLAN: [(usize, Effort, usize); TRAJECTORIES] = [
    (3, Effort::Off, 600),
    (4, Effort::Off, 1_200),
    (4, Effort::Low, 1_500),
    (5, Effort::Low, 2_200),
    (5, Effort::Low, 3_000),
    (6, Effort::Medium, 4_000),
    (6, Effort::Medium, 5_500),
    (6, Effort::Medium, 7_000),
    (7, Effort::Medium, 9_000),
    (7, Effort::High, 12_000),
    (8, Effort::High, 16_000),
    (10, Effort::VeryHigh, 22_000),
    (11, Effort::VeryHigh, 29_770),
];

/// One step's counts: the context when its decode starts, the tokens it emits (reasoning and tool call
/// or answer), the tokens appended after it (0 on a trajectory's last step).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    pub context: usize,
    pub emit: usize,
    pub reasoning: usize,
    pub append: usize,
}

/// A trajectory: the conversation (the rendered request's messages; assistant turns as the model's raw
/// generations) and its counts.
#[derive(Debug, Clone, PartialEq)]
pub struct Trajectory {
    pub name: String,
    pub effort: Effort,
    /// The cold prefill: the rendered prompt's tokens (tool schemas, system, user, generation prompt).
    pub prompt: usize,
    pub steps: Vec<Step>,
    /// system, user, then per step the generation and (but for the last) its tool result.
    pub system: String,
    pub user: String,
    pub generations: Vec<String>,
    pub results: Vec<String>,
}

/// The token ids a replay feeds: the prompt, then per step (tokens to emit, ids to append after them).
pub struct Replay {
    pub prompt: Vec<u32>,
    pub steps: Vec<(usize, Vec<u32>)>,
}

/// The agent's tools (JSON schemas; key order as written: the template renders it).
pub const TOOLS: &str = r#"[
 {"type": "function", "function": {"name": "list_dir", "description": "List the entries of a directory (non-recursive), one per line, directories with a trailing slash.", "parameters": {"type": "object", "properties": {"path": {"type": "string", "description": "Directory path relative to the repository root, e.g. \"src/model\""}, "limit": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 200}}, "required": ["path"]}}},
 {"type": "function", "function": {"name": "read_file", "description": "Read a text file, optionally a range of lines (1-based, inclusive). Returns the lines prefixed with their numbers.", "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "start": {"type": "integer", "minimum": 1}, "end": {"type": "integer", "minimum": 1}}, "required": ["path"]}}},
 {"type": "function", "function": {"name": "grep", "description": "Search files for a regular expression; returns matching lines as path:line:text.", "parameters": {"type": "object", "properties": {"pattern": {"type": "string"}, "path": {"type": "string", "default": "."}, "max_results": {"type": "integer", "default": 50}}, "required": ["pattern"]}}},
 {"type": "function", "function": {"name": "apply_patch", "description": "Apply a unified diff to the working tree. Fails without changes if any hunk does not apply.", "parameters": {"type": "object", "properties": {"patch": {"type": "string", "description": "The diff, with ---/+++ headers and @@ hunks"}}, "required": ["patch"]}}},
 {"type": "function", "function": {"name": "run_tests", "description": "Run the test suite or a filtered subset; returns the summary and the output of failing tests.", "parameters": {"type": "object", "properties": {"filter": {"type": "string", "description": "Substring of the test names to run"}, "timeout_s": {"type": "integer", "default": 600}}, "required": []}}},
 {"type": "function", "function": {"name": "run_shell", "description": "Run a shell command in the repository root without network access; returns exit status, stdout and stderr (truncated to 20,000 characters).", "parameters": {"type": "object", "properties": {"command": {"type": "string"}, "timeout_s": {"type": "integer", "default": 120}}, "required": ["command"]}}},
 {"type": "function", "function": {"name": "search_docs", "description": "Search the project's documentation and API reference; returns the best passages with their sources.", "parameters": {"type": "object", "properties": {"query": {"type": "string"}, "top_k": {"type": "integer", "default": 5}}, "required": ["query"]}}}
]"#;

const SYSTEM: &str = "You are a coding agent working in a Rust repository. Use the tools to inspect the code, make the smallest change that fixes the task, and run the tests before you answer. Prefer reading the relevant files over guessing; quote paths exactly; never invent tool results. When the task is done, answer with a short summary of what changed and why.";

const TASKS: [&str; TRAJECTORIES] = [
    "List the test files of the tokenizer.",
    "Which module owns the chat template, and what does it refuse?",
    "Rename the helper `bf` to `round_bf16` in src/model/numerics.rs and its callers.",
    "The CLI prints a panic on an empty prompt file; make it a short error.",
    "Add a unit test for the chunk layout's inverse map.",
    "Speed up the BPE merge loop for long pieces without changing its output.",
    "The results folder sometimes misses command.txt; find why and fix it.",
    "Add a --json flag to `mk gpu rows` that writes its tables as JSON.",
    "Explain the validator's KV-position tags and add a negative test.",
    "Port the chunked gated delta rule's forward substitution to f64 for a reference check.",
    "Find the cause of the flaky timing test and make it deterministic.",
    "Refactor the experiment runner's passes into one trait with the three implementations.",
    "Implement paged KV for the CPU reference with 256-token pages and a free list.",
];

const WORDS: [&str; 48] = [
    "the", "function", "returns", "buffer", "layer", "state", "token", "check", "first", "then", "read", "file",
    "test", "fails", "because", "value", "index", "row", "column", "shape", "case", "error", "path", "module", "call",
    "loop", "order", "sum", "bits", "output", "input", "cache", "step", "page", "list", "free", "copy", "so", "we",
    "need", "to", "change", "where", "it", "is", "not", "a", "one",
];

const CODE: [&str; 12] = [
    "    let n = rows.len();",
    "    for (i, r) in rows.iter().enumerate() {",
    "        out[i] = r.iter().sum::<f32>();",
    "    }",
    "pub fn check(n: usize, k: usize) -> Result<()> {",
    "    if n % 32 != 0 { bail!(\"rows {n}\"); }",
    "    Ok(())",
    "}",
    "#[test]",
    "fn it_round_trips() {",
    "    assert_eq!(position(k, offset(k, r, c)), (r, c));",
    "// ORDER: k-groups in order",
];

/// xorshift64*: the generator's only randomness.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn map(pairs: Vec<(&str, Value)>) -> Value {
    Value::from_object(OrderedMap(pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect()))
}

fn msg(role: &str, content: &str) -> Value {
    map(vec![("role", Value::from(role)), ("content", Value::from(content))])
}

/// The rendered request (tools, messages, the generation prompt, thinking on unless effort is off).
fn render(tools: &Value, messages: &[Value], thinking: bool) -> Result<String> {
    chat::render(&map(vec![
        ("tools", tools.clone()),
        ("messages", Value::from(messages.to_vec())),
        ("add_generation_prompt", Value::from(true)),
        ("enable_thinking", Value::from(thinking)),
    ]))
}

/// Words (reasoning prose) of about `tokens` tokens.
fn prose(rng: &mut Rng, tokens: usize) -> String {
    let mut s = String::new();
    for i in 0..tokens {
        if i > 0 {
            s.push(if i % 13 == 12 { '.' } else { ' ' });
            if i % 13 == 12 {
                s.push(' ');
            }
        }
        s += WORDS[rng.below(WORDS.len())];
    }
    s
}

/// A tool result of about `tokens` tokens: a listing, test output or a file's numbered lines.
fn tool_result(rng: &mut Rng, tokens: usize) -> String {
    let mut s = String::new();
    let mut line = 1;
    // (about 2.3 bytes a token in these lines, measured with the tokenizer)
    while s.len() < tokens * 23 / 10 {
        s += &format!("{line:>4}  {}\n", CODE[rng.below(CODE.len())]);
        line += 1;
    }
    s.trim_end().to_string()
}

/// A tool call (XML as the model writes it) for step `i`.
fn tool_call(rng: &mut Rng, i: usize) -> String {
    let (name, args): (&str, Vec<(&str, String)>) = match (i + rng.below(3)) % 5 {
        0 => ("list_dir", vec![("path", "src/model".into())]),
        1 => ("read_file", vec![("path", "src/model/forward.rs".into()), ("start", format!("{}", 1 + 40 * i))]),
        2 => ("grep", vec![("pattern", "fn prefill".into()), ("path", "src".into())]),
        3 => ("run_tests", vec![("filter", "tokenizer".into())]),
        _ => (
            "apply_patch",
            vec![(
                "patch",
                "--- a/src/lib.rs\n+++ b/src/lib.rs\n@@ -1,3 +1,3 @@\n-pub mod agent;\n+pub mod agent; // issue 29"
                    .into(),
            )],
        ),
    };
    let mut s = format!("<tool_call>\n<function={name}>\n");
    for (a, v) in args {
        s += &format!("<parameter={a}>\n{v}\n</parameter>\n");
    }
    s + "</function>\n</tool_call>"
}

/// A generation of exactly `target` tokens (its `<|im_end|>` included) when `target` allows: reasoning
/// words are added or removed until the count is met. Returns the text and its reasoning tokens.
fn generation(tok: &Tokenizer, rng: &mut Rng, thinking: bool, target: usize, tail: &str) -> Result<(String, usize)> {
    let tail_ids = tok.encode(&format!("{tail}<|im_end|>"))?.len();
    let build =
        |r: &str| if thinking { format!("{r}\n</think>\n\n{tail}<|im_end|>") } else { format!("{tail}<|im_end|>") };
    if !thinking {
        let g = build("");
        return Ok((g.clone(), 0));
    }
    // reasoning prose, then one-token words (" a") to land on the count
    let mut r = prose(rng, target.saturating_sub(tail_ids + 4).max(1) * 3 / 4);
    for _ in 0..10_000 {
        let n = tok.encode(&build(&r))?.len();
        if n == target {
            break;
        }
        if n < target {
            r += " a";
        } else {
            match r.rfind(' ') {
                Some(p) => r.truncate(p),
                None => break,
            }
        }
    }
    let g = build(&r);
    let reasoning = tok.encode(&g)?.len() - tail_ids;
    Ok((g, reasoning))
}

/// The 13 trajectories (deterministic).
pub fn generate() -> Result<Vec<Trajectory>> {
    let tok = Tokenizer::qwen35()?;
    let tools = chat::parse_json(TOOLS)?;
    let mut rng = Rng(0x5eed_2026_1203);
    // emitted tokens a step (ours): the effort's reasoning times 0.6-1.4, plus the call; the last step
    // of the last trajectory takes what the seed's total leaves
    let mut out = Vec::new();
    let mut emitted = 0usize;
    for (ti, &(steps, effort, results_total)) in PLAN.iter().enumerate() {
        let thinking = effort != Effort::Off;
        let mut messages = vec![msg("system", SYSTEM)];
        // the user turn: the task, then a pasted issue text (the bulk of a cold prompt beside the tools)
        let user = format!("{}\n\n{}", TASKS[ti], prose(&mut rng, 482 + 40 * (ti % 4)));
        messages.push(msg("user", &user));
        let prompt_text = render(&tools, &messages, thinking)?;
        let prompt = tok.encode(&prompt_text)?.len();
        let mut context = prompt;
        let (mut gens, mut results, mut counts) = (Vec::new(), Vec::new(), Vec::new());
        for s in 0..steps {
            let last = s + 1 == steps;
            let tail = if last { format!("Done: {}", prose(&mut rng, 30)) } else { tool_call(&mut rng, s) };
            let scale = 60 + rng.below(81); // percent
            let mut target = effort.reasoning() * scale / 100 + tok.encode(&format!("{tail}<|im_end|>"))?.len() + 4;
            if ti + 1 == TRAJECTORIES && last {
                target = EMITTED
                    .checked_sub(emitted)
                    .ok_or_else(|| Error::new(format!("trajectories: the plan emits {emitted} tokens before its last step (the seed's total: {EMITTED})")))?;
            }
            let prev = render(&tools, &messages, thinking)?;
            let (g, reasoning) = generation(&tok, &mut rng, thinking, target, &tail)?;
            let emit = tok.encode(&g)?.len();
            emitted += emit;
            messages.push(chat::parse_generation(&g, thinking)?);
            let append = if last {
                0
            } else {
                // a few hundred tokens a result (120-600), the rest of the trajectory's total in one or
                // two whole-file reads (a third and two thirds of the way)
                let n_res = steps - 1;
                let big: &[usize] = if n_res >= 4 { &[n_res / 3, 2 * n_res / 3] } else { &[n_res / 2] };
                let regular = (results_total / (2 * n_res)).clamp(120, 600);
                let bigs = (results_total.saturating_sub(regular * (n_res - big.len())) / big.len()).max(regular);
                let r = tool_result(&mut rng, if big.contains(&s) { bigs } else { regular });
                messages.push(msg("tool", &r));
                results.push(r);
                let next = render(&tools, &messages, thinking)?;
                let (pi, ni) = (tok.encode(&prev)?.len() + emit, tok.encode(&next)?.len());
                ni - pi
            };
            counts.push(Step { context, emit, reasoning, append });
            context += emit + append;
            gens.push(g);
        }
        out.push(Trajectory {
            name: format!("t{:02}", ti + 1),
            effort,
            prompt,
            steps: counts,
            system: SYSTEM.to_string(),
            user,
            generations: gens,
            results,
        });
    }
    Ok(out)
}

/// The ids a replay of `t` feeds (rendered and tokenized again); refuses a trajectory whose recorded
/// counts its text does not reproduce, or whose history would not be append-only.
pub fn replay(t: &Trajectory) -> Result<Replay> {
    let tok = Tokenizer::qwen35()?;
    let tools = chat::parse_json(TOOLS)?;
    let thinking = t.effort != Effort::Off;
    let mut messages = vec![msg("system", &t.system), msg("user", &t.user)];
    let prompt = tok.encode(&render(&tools, &messages, thinking)?)?;
    if prompt.len() != t.prompt {
        crate::bail!("trajectory {}: the prompt tokenizes to {} tokens, recorded {}", t.name, prompt.len(), t.prompt);
    }
    let mut history = prompt.clone();
    let mut steps = Vec::new();
    for (s, (st, g)) in t.steps.iter().zip(&t.generations).enumerate() {
        let gen = tok.encode(g)?;
        if gen.len() != st.emit || history.len() != st.context {
            crate::bail!(
                "trajectory {} step {s}: emits {} tokens at context {}, recorded {} at {}",
                t.name,
                gen.len(),
                history.len(),
                st.emit,
                st.context
            );
        }
        history.extend(&gen);
        messages.push(chat::parse_generation(g, thinking)?);
        let mut append = Vec::new();
        if let Some(r) = t.results.get(s) {
            messages.push(msg("tool", r));
            let next = tok.encode(&render(&tools, &messages, thinking)?)?;
            if !next.starts_with(&history) {
                crate::bail!(
                    "trajectory {} step {s}: the next request's ids do not extend the history (not append-only)",
                    t.name
                );
            }
            append = next[history.len()..].to_vec();
            history.extend(&append);
        }
        if append.len() != st.append {
            crate::bail!("trajectory {} step {s}: appends {} tokens, recorded {}", t.name, append.len(), st.append);
        }
        steps.push((st.emit, append));
    }
    Ok(Replay { prompt, steps })
}

/// The trajectories as JSON (one object each; key order fixed).
pub fn to_json(ts: &[Trajectory]) -> String {
    let q = |s: &str| serde_json::to_string(s).unwrap_or_default();
    let mut o = String::from("{\n \"tools\": ");
    o += TOOLS.trim();
    o += ",\n \"trajectories\": [\n";
    for (i, t) in ts.iter().enumerate() {
        o += &format!(
            "  {{\"name\": {}, \"effort\": {}, \"prompt\": {},\n   \"steps\": [",
            q(&t.name),
            q(t.effort.name()),
            t.prompt
        );
        let steps: Vec<String> = t
            .steps
            .iter()
            .map(|s| {
                format!(
                    "{{\"context\": {}, \"emit\": {}, \"reasoning\": {}, \"append\": {}}}",
                    s.context, s.emit, s.reasoning, s.append
                )
            })
            .collect();
        o += &steps.join(", ");
        o += &format!("],\n   \"system\": {},\n   \"user\": {},\n   \"generations\": [", q(&t.system), q(&t.user));
        o += &t.generations.iter().map(|g| q(g)).collect::<Vec<_>>().join(", ");
        o += "],\n   \"results\": [";
        o += &t.results.iter().map(|g| q(g)).collect::<Vec<_>>().join(", ");
        o += &format!("]}}{}\n", if i + 1 < ts.len() { "," } else { "" });
    }
    o + " ]\n}\n"
}

/// Reads `to_json`'s form back (counts and texts; the replay checks them against the text).
pub fn from_json(text: &str) -> Result<Vec<Trajectory>> {
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| Error::new(format!("trajectories: {e}")))?;
    let bad = |what: &str| Error::new(format!("trajectories: {what}"));
    let arr = v.get("trajectories").and_then(|a| a.as_array()).ok_or_else(|| bad("no \"trajectories\" array"))?;
    let s = |x: &serde_json::Value, k: &str| {
        x.get(k).and_then(|v| v.as_str()).map(str::to_string).ok_or_else(|| bad(&format!("\"{k}\" missing")))
    };
    let n = |x: &serde_json::Value, k: &str| {
        x.get(k).and_then(|v| v.as_u64()).map(|v| v as usize).ok_or_else(|| bad(&format!("\"{k}\" missing")))
    };
    let strs = |x: &serde_json::Value, k: &str| -> Result<Vec<String>> {
        x.get(k)
            .and_then(|v| v.as_array())
            .ok_or_else(|| bad(&format!("\"{k}\" missing")))?
            .iter()
            .map(|g| g.as_str().map(str::to_string).ok_or_else(|| bad(&format!("\"{k}\": not a string"))))
            .collect()
    };
    let mut out = Vec::new();
    for t in arr {
        let effort = match s(t, "effort")?.as_str() {
            "off" => Effort::Off,
            "low" => Effort::Low,
            "medium" => Effort::Medium,
            "high" => Effort::High,
            "very high" => Effort::VeryHigh,
            e => return Err(bad(&format!("effort {e}"))),
        };
        let steps = t
            .get("steps")
            .and_then(|v| v.as_array())
            .ok_or_else(|| bad("\"steps\" missing"))?
            .iter()
            .map(|x| {
                Ok(Step {
                    context: n(x, "context")?,
                    emit: n(x, "emit")?,
                    reasoning: n(x, "reasoning")?,
                    append: n(x, "append")?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let tr = Trajectory {
            name: s(t, "name")?,
            effort,
            prompt: n(t, "prompt")?,
            steps,
            system: s(t, "system")?,
            user: s(t, "user")?,
            generations: strs(t, "generations")?,
            results: strs(t, "results")?,
        };
        if tr.generations.len() != tr.steps.len() || tr.results.len() + 1 != tr.steps.len() {
            return Err(bad(&format!(
                "{}: {} steps, {} generations, {} results",
                tr.name,
                tr.steps.len(),
                tr.generations.len(),
                tr.results.len()
            )));
        }
        out.push(tr);
    }
    Ok(out)
}

/// The replays' token ids for a peer engine (issue 29 item 6: scripts/peer_replay.py replays them on
/// transformers + flash-linear-attention): `{"config": the model's config.json, "trajectories": [{"name",
/// "prompt": [ids], "steps": [{"emit": n, "append": [ids]}]}]}`, each trajectory's ids as `replay` makes
/// them (so its checks hold: the counts its text reproduces, the history append-only).
pub fn replays_json(ts: &[Trajectory], config: serde_json::Value) -> Result<String> {
    let mut out = Vec::with_capacity(ts.len());
    for t in ts {
        let r = replay(t)?;
        let steps: Vec<serde_json::Value> =
            r.steps.iter().map(|(emit, append)| serde_json::json!({"emit": emit, "append": append})).collect();
        out.push(serde_json::json!({"name": t.name, "prompt": r.prompt, "steps": steps}));
    }
    serde_json::to_string(&serde_json::json!({"config": config, "trajectories": out}))
        .map_err(|e| Error::new(format!("replays_json: {e}")))
}

/// A table of the trajectories (a line each, then the totals).
pub fn table(ts: &[Trajectory]) -> String {
    let mut o = format!(
        "{:>4} {:>10} {:>6} {:>7} {:>8} {:>9} {:>9} {:>9}\n",
        "name", "effort", "steps", "prompt", "emitted", "appended", "min ctx", "max ctx"
    );
    let (mut steps, mut emitted, mut lo, mut hi) = (0, 0, usize::MAX, 0);
    for t in ts {
        let e: usize = t.steps.iter().map(|s| s.emit).sum();
        let a: usize = t.steps.iter().map(|s| s.append).sum();
        let (mn, mx) = (t.steps.first().map_or(0, |s| s.context), t.steps.last().map_or(0, |s| s.context));
        o += &format!(
            "{:>4} {:>10} {:>6} {:>7} {:>8} {:>9} {:>9} {:>9}\n",
            t.name,
            t.effort.name(),
            t.steps.len(),
            t.prompt,
            e,
            a,
            mn,
            mx
        );
        steps += t.steps.len();
        emitted += e;
        lo = lo.min(mn);
        hi = hi.max(mx);
    }
    o + &format!("{} trajectories, {steps} steps, {emitted} emitted tokens, contexts {lo} to {hi} (seed 7.1: 13, 82, 11,239, 1,500 to 34,000)\n", ts.len())
}
