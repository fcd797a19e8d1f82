//! Grammar-constrained tool calls (issue 30) on the CPU: the matcher against the chat template's own
//! renderings of tool calls (every token of a rendered call allowed, the turn accepted) and against
//! invalid calls (refused at some token); the checker on the same calls; constrained greedy decoding on
//! the tiny preset: the scatter method, the mask in the argmax, the masked head and forced spans give
//! the same tokens (the reference and the interpreter, M = 1 and M = 4), every completed call valid,
//! with two negative controls (the mask ignored: other tokens, and the checker rejects the turn).

mod common;

use mk::compiler::{compile, h200};
use mk::exec::interp::Interp;
use mk::grammar::decode::{generate, generate_steps, Choose, Opts};
use mk::grammar::{parse_tools, Checker, Choice, Format, ToolMatcher};
use mk::isa::Target;
use mk::model::checkpoint::Checkpoint;
use mk::model::config::ModelConfig;
use mk::model::forward::Weights;
use mk::tokenizer::{chat, Tokenizer, IM_END};
use serde_json::{json, Value};

const TOOLS: &str = r#"[
 {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
  "parameters": {"type": "object", "properties": {
    "city": {"type": "string"},
    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    "days": {"type": "integer", "minimum": 1, "maximum": 14}},
   "required": ["city"]}}},
 {"type": "function", "function": {"name": "set_alarm",
  "parameters": {"type": "object", "properties": {
    "at": {"type": "object", "properties": {"hour": {"type": "integer", "minimum": 0, "maximum": 23},
                                            "minute": {"type": "integer", "minimum": 0, "maximum": 59}},
           "required": ["hour", "minute"], "additionalProperties": false},
    "repeat": {"type": "boolean"},
    "tags": {"type": "array", "items": {"type": "string"}},
    "volume": {"type": "number"},
    "note": {"type": ["string", "null"]}},
   "required": ["at", "repeat"]}}}
]"#;

/// The turn the template renders for an assistant message with `calls` (name, arguments) after
/// `content`, thinking off: what the model writes after `<think>\n\n</think>\n\n`, with `<|im_end|>`.
fn rendered_turn(content: &str, calls: &[(&str, Value)]) -> String {
    let tool_calls: Vec<Value> =
        calls.iter().map(|(n, a)| json!({"type": "function", "function": {"name": n, "arguments": a}})).collect();
    let req = json!({"messages": [{"role": "user", "content": "hi"},
                                 {"role": "assistant", "content": content, "tool_calls": tool_calls}],
                     "tools": serde_json::from_str::<Value>(TOOLS).unwrap()});
    let text = chat::render_json(&req.to_string()).unwrap();
    let at = text.rfind("</think>\n\n").unwrap() + "</think>\n\n".len();
    text[at..].strip_suffix('\n').unwrap().to_string()
}

fn fmt(choice: Choice) -> Format {
    Format { choice, thinking: false, parallel: true }
}

/// Feeds `text`'s tokens to a fresh matcher, checking each against the mask first; Err(index) at the
/// first token the grammar refuses.
fn feed(text: &str, f: Format) -> Result<ToolMatcher, usize> {
    feed_tools(&parse_tools(TOOLS).unwrap(), text, f)
}

/// `text`'s tokens through the matcher of `tools`: the matcher after them, or the first token outside
/// the mask.
fn feed_tools(tools: &[mk::grammar::Tool], text: &str, f: Format) -> Result<ToolMatcher, usize> {
    let mut m = ToolMatcher::new(tools, f).unwrap();
    let ids = Tokenizer::qwen35().unwrap().encode(text).unwrap();
    for (i, &t) in ids.iter().enumerate() {
        let mask = m.mask().unwrap();
        if !mask.allows(t) {
            assert!(m.advance(t).is_err(), "token {i} ({t}) outside the mask but advanced");
            return Err(i);
        }
        m.advance(t).unwrap();
    }
    Ok(m)
}

fn valid_calls() -> Vec<(&'static str, Vec<(&'static str, Value)>)> {
    vec![
        ("", vec![("get_weather", json!({"city": "Paris"}))]),
        ("", vec![("get_weather", json!({"city": "New York\n</parameter", "unit": "fahrenheit", "days": 14}))]),
        (
            "Let me set it.",
            vec![(
                "set_alarm",
                json!({"at": {"hour": 7, "minute": 30}, "repeat": true, "tags": ["work", "é"], "volume": 0.5, "note": null}),
            )],
        ),
        (
            "",
            vec![
                ("get_weather", json!({"city": "Oslo", "days": 3})),
                ("set_alarm", json!({"at": {"hour": 23, "minute": 0}, "repeat": false, "volume": 1e-7})),
            ],
        ),
    ]
}

#[test]
fn the_template_renderings_of_valid_calls_are_admitted_and_checked_valid() {
    let tools = parse_tools(TOOLS).unwrap();
    let checker = Checker::new(&tools).unwrap();
    for (content, calls) in valid_calls() {
        let turn = rendered_turn(content, &calls);
        let choice = if content.is_empty() { Choice::Required } else { Choice::Auto };
        for f in [fmt(choice), fmt(Choice::Auto)] {
            let m = feed(&turn, f).unwrap_or_else(|i| panic!("{turn:?}: token {i} refused ({f:?})"));
            assert!(m.is_stopped(), "{turn:?}: the turn did not end at <|im_end|>");
        }
        let v = checker.check_turn(&turn, false);
        assert!(v.ok(), "{turn:?}: {v:?}");
        assert_eq!(v.calls.len(), calls.len());
        for (got, (name, args)) in v.calls.iter().zip(&calls) {
            assert_eq!((got.name.as_str(), got.arguments.as_ref().unwrap()), (*name, args));
        }
    }
}

#[test]
fn invalid_calls_are_refused_by_the_grammar_and_by_the_checker() {
    let tools = parse_tools(TOOLS).unwrap();
    let checker = Checker::new(&tools).unwrap();
    let call = |name: &str, params: &[(&str, &str)]| {
        let mut s = format!("<tool_call>\n<function={name}>\n");
        for (k, v) in params {
            s += &format!("<parameter={k}>\n{v}\n</parameter>\n");
        }
        s + "</function>\n</tool_call><|im_end|>"
    };
    let at = r#"{"hour": 7, "minute": 30}"#;
    for (turn, why) in [
        (call("get_weather", &[("unit", "celsius")]), "required city missing"),
        (call("get_weather", &[("city", "Rome"), ("unit", "kelvin")]), "enum"),
        (call("get_weather", &[("city", "Rome"), ("days", "15")]), "maximum"),
        (call("get_weather", &[("city", "Rome"), ("days", "two")]), "integer"),
        (call("get_time", &[]), "unknown tool"),
        (call("set_alarm", &[("at", at), ("repeat", "yes")]), "boolean"),
        (call("set_alarm", &[("at", r#"{"hour": 7}"#), ("repeat", "True")]), "nested required"),
        (call("set_alarm", &[("at", r#"{"hour": 7, "minute": 1, "x": 1}"#), ("repeat", "True")]), "extra key"),
        (call("set_alarm", &[("at", at), ("repeat", "True"), ("tags", "[1]")]), "item type"),
    ] {
        assert!(feed(&turn, fmt(Choice::Required)).is_err(), "{why}: the grammar admitted {turn:?}");
        let v = checker.check_turn(&turn, false);
        assert!(!v.ok(), "{why}: the checker passed {turn:?}: {v:?}");
    }
    // parameters out of the schema's order are valid JSON-schema-wise but outside the grammar (a
    // documented restriction): the checker passes them
    let swapped = call("get_weather", &[("unit", "celsius"), ("city", "Rome")]);
    assert!(feed(&swapped, fmt(Choice::Required)).is_err());
    assert!(checker.check_turn(&swapped, false).ok());
    // an unparseable turn
    let v = checker.check_turn("<tool_call>\n<function=get_weather>\n<parameter=city>\nRome", false);
    assert!(!v.ok() && v.parse_error.is_some(), "{v:?}");
}

#[test]
fn thinking_and_free_content_come_before_the_calls() {
    let turn = rendered_turn("", &[("get_weather", json!({"city": "Lima"}))]);
    let think = format!("Some reasoning.\n</think>\n\n{turn}");
    let f = Format { choice: Choice::Required, thinking: true, parallel: false };
    assert!(feed(&think, f).is_ok());
    // content is not admitted where calls are required; the text `<tool_call>` never as content
    assert!(feed(&format!("Sure.\n\n{turn}"), fmt(Choice::Required)).is_err());
    let t = Tokenizer::qwen35().unwrap();
    let mut m = ToolMatcher::new(&parse_tools(TOOLS).unwrap(), fmt(Choice::Auto)).unwrap();
    for id in t.encode_ordinary("a <tool_call").unwrap() {
        m.advance(id).unwrap();
    }
    assert!(!m.mask().unwrap().allows(t.encode_ordinary(">").unwrap()[0]));
    // one call only without parallel: after </tool_call> only <|im_end|>
    let two = rendered_turn("", &[("get_weather", json!({"city": "A"})), ("get_weather", json!({"city": "B"}))]);
    assert!(feed(&two, Format { parallel: false, ..fmt(Choice::Required) }).is_err());
}

/// Tools whose every value is bounded (enums, booleans, bounded integers), so that a random model
/// under the grammar completes a call in a few dozen tokens.
const BOUNDED: &str = r#"[{"name": "pick", "parameters": {"type": "object", "properties": {
  "colour": {"enum": ["red", "green", "blue"]},
  "count": {"type": "integer", "minimum": 0, "maximum": 99},
  "ok": {"type": "boolean"}}, "required": ["colour", "count", "ok"]}}]"#;

#[test]
fn constrained_decoding_on_the_tiny_model_completes_valid_calls_by_every_method() {
    let ck = Checkpoint::open(common::tiny()).unwrap();
    let w = Weights::from_checkpoint(&ck);
    let tools = parse_tools(BOUNDED).unwrap();
    let f = Format { choice: Choice::Required, thinking: false, parallel: false };
    let checker = Checker::new(&tools).unwrap();
    let tok = Tokenizer::qwen35().unwrap();
    let prompt =
        tok.encode("<|im_start|>user\nPick one.<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n").unwrap();
    let run = |o: Opts| generate(&w, &prompt, &mut ToolMatcher::new(&tools, f).unwrap(), &o).unwrap();
    let base = Opts { choose: Choose::Scatter, masked_head_max: 0, forced_spans: false, max_tokens: 60 };
    let scatter = run(base);
    assert!(scatter.ended, "no <|im_end|> in {} tokens", scatter.tokens.len());
    // a turn where calls are required is valid when it parsed, has a call, and every call validates
    let valid = |t: &str| {
        let v = checker.check_turn(t, false);
        v.ok() && !v.calls.is_empty()
    };
    let text = tok.decode(&scatter.tokens).unwrap();
    assert!(valid(&text), "{text:?}: {:?}", checker.check_turn(&text, false));
    assert!(scatter.single_steps > 0, "the grammar forced nothing: {scatter:?}");
    // the mask in the argmax, the masked head, forced spans: the same tokens
    let in_argmax = run(Opts { choose: Choose::InArgmax, ..base });
    assert_eq!(in_argmax.tokens, scatter.tokens);
    let masked = run(Opts { choose: Choose::InArgmax, masked_head_max: 400, ..base });
    assert_eq!(masked.tokens, scatter.tokens);
    assert!(masked.masked_head_steps > 0);
    let spans = run(Opts { choose: Choose::InArgmax, masked_head_max: 400, forced_spans: true, ..base });
    assert_eq!(spans.tokens, scatter.tokens);
    assert!(spans.forced > 0 && spans.passes + spans.forced == scatter.passes, "{spans:?} vs {scatter:?}");
    // negative control: the mask ignored gives other tokens, and the checker rejects the turn
    let free = run(Opts { choose: Choose::Ignore, ..base });
    assert_ne!(free.tokens, scatter.tokens);
    let free_text = tok.decode(&free.tokens).unwrap();
    assert!(!valid(&free_text), "the unconstrained turn passed: {free_text:?}");

    // the interpreter: the head's own mask, M = 1 step by step and M = 4 with forced spans
    let cfg = ModelConfig::preset("tiny").unwrap();
    for (m, spans_on) in [(1u32, false), (4, true)] {
        let p = compile(&cfg, "tiny", &Target { head_mask: true, ..h200(m) }).unwrap();
        let mut it = Interp::new(&p, &ck).unwrap();
        let o = Opts { forced_spans: spans_on, ..base };
        let got = generate_steps(&mut it, &prompt, &mut ToolMatcher::new(&tools, f).unwrap(), &o).unwrap();
        assert_eq!(got.tokens, scatter.tokens, "interpreter M = {m}");
        assert_eq!(got.forced > 0, spans_on);
        if m == 1 {
            // the interpreter's negative control: every id allowed gives the unconstrained tokens
            let o = Opts { choose: Choose::Ignore, ..base };
            let free_it = generate_steps(
                &mut Interp::new(&p, &ck).unwrap(),
                &prompt,
                &mut ToolMatcher::new(&tools, f).unwrap(),
                &o,
            )
            .unwrap();
            assert_eq!(free_it.tokens, free.tokens);
            // masks it refuses
            let words = 248_320 / 32;
            for (bad, says) in [
                (vec![None, None], "2 masks for an M = 1"),
                (vec![Some(vec![0u32; words])], "allows no id"),
                (vec![Some(vec![1u32; words - 1])], "words"),
            ] {
                let e = it.set_head_masks(bad).unwrap_err().to_string();
                assert!(e.contains(says), "{e}");
            }
        }
    }
    assert_eq!(scatter.tokens.last(), Some(&IM_END));
}

/// Issue 30 item 5 on the replay workload (issue 29's trajectories, their tools list): every step's
/// generation, reasoning and tool call included, is admitted by the grammar token by token and its call
/// validates; a call of a tool that does not exist is refused by both (negative control; a parameter
/// the schema does not name is refused by the grammar only: JSON Schema admits extra properties unless
/// `additionalProperties` is false, and these tools do not say so).
#[test]
fn the_agent_workloads_tool_calls_are_admitted_by_the_grammar_and_validate() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("experiments/agent/trajectories.json");
    let v: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let tools = parse_tools(&v["tools"].to_string()).unwrap();
    let checker = Checker::new(&tools).unwrap();
    let (mut turns, mut calls, mut refused) = (0, 0, 0);
    for t in v["trajectories"].as_array().unwrap() {
        let thinking = t["effort"] != "off";
        let f = Format { choice: Choice::Auto, thinking, parallel: false };
        for g in t["generations"].as_array().unwrap() {
            let g = g.as_str().unwrap();
            let name = t["name"].as_str().unwrap();
            assert!(feed_tools(&tools, g, f).is_ok(), "{name}: the grammar refuses {g:?}");
            let verdict = checker.check_turn(g, thinking);
            assert!(verdict.ok(), "{name}: {g:?}: {verdict:?}");
            turns += 1;
            calls += verdict.calls.len();
            if g.contains("<function=") {
                // negative control: the tool renamed
                let bad = g.replacen("<function=", "<function=x", 1);
                assert!(feed_tools(&tools, &bad, f).is_err(), "{name}: the grammar admits {bad:?}");
                assert!(!checker.check_turn(&bad, thinking).ok(), "{name}: the checker passes {bad:?}");
                refused += 1;
            }
        }
    }
    // the seed's workload: 82 steps, a tool call in every step but each trajectory's last
    assert_eq!((turns, calls, refused), (82, 69, 69));
}
