//! Chat template verification (issue 7): renders against the reference, and the append-only property.
//!
//! Owns: comparing `chat::render_json` with what Jinja2 under Hugging Face's settings rendered for the
//! requests in goldens/tokenizer/chat (scripts/tokenizer_chat_expected.py), text and ids and error
//! messages; checking over multi-step agent conversations that each render is the previous render
//! plus the model's generation plus the new tool turn (text and ids); negative controls for both.
//! Refuses: the tokenizer's own verification (tests/tokenizer.rs).

use minijinja::value::Value;
use mk::tokenizer::chat::{self, OrderedMap};
use mk::tokenizer::Tokenizer;

fn chat_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("goldens/tokenizer/chat")
}

#[test]
fn renders_match_reference_jinja2() {
    let tok = Tokenizer::qwen35().unwrap();
    let exp: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(chat_dir().join("expected.json")).unwrap()).unwrap();
    let exp = exp.as_object().unwrap();
    assert!(exp.len() >= 10);
    for (name, want) in exp {
        let req = std::fs::read_to_string(chat_dir().join(format!("{name}.json"))).unwrap();
        let got = chat::render_json(&req);
        match (want.get("text"), want.get("error")) {
            (Some(text), _) => {
                let got = got.unwrap_or_else(|e| panic!("{name}: {e}"));
                assert_eq!(got, text.as_str().unwrap(), "{name}: rendered text differs");
                let ids: Vec<u32> = serde_json::from_value(want["ids"].clone()).unwrap();
                assert_eq!(tok.encode(&got).unwrap(), ids, "{name}: ids differ");
            }
            (None, Some(err)) => {
                let e = got.expect_err(name).to_string();
                assert!(e.contains(err.as_str().unwrap()), "{name}: error {e:?} lacks {err}");
            }
            _ => panic!("{name}: expected.json has neither text nor error"),
        }
    }
}

#[test]
fn negative_control_key_order_and_python_str_matter() {
    // The same tool schema with its keys sorted (what a BTreeMap would do) must render differently.
    let req = std::fs::read_to_string(chat_dir().join("tools_agent.json")).unwrap();
    // (sorted explicitly: serde_json's map keeps insertion order once any crate of the build enables
    // its preserve_order feature, as llguidance does)
    fn sort_keys(v: serde_json::Value) -> serde_json::Value {
        match v {
            serde_json::Value::Object(m) => {
                let sorted: std::collections::BTreeMap<String, serde_json::Value> =
                    m.into_iter().map(|(k, v)| (k, sort_keys(v))).collect();
                serde_json::Value::Object(sorted.into_iter().collect())
            }
            serde_json::Value::Array(a) => serde_json::Value::Array(a.into_iter().map(sort_keys).collect()),
            v => v,
        }
    }
    let sorted = sort_keys(serde_json::from_str(&req).unwrap());
    let sorted = chat::render_json(&serde_json::to_string(&sorted).unwrap()).unwrap();
    assert_ne!(sorted, chat::render_json(&req).unwrap());
    assert_eq!(chat::py_float_repr(1e16), "1e+16");
    assert_eq!(chat::py_float_repr(1e-7), "1e-07");
    assert_eq!(chat::py_float_repr(2.0), "2.0");
    assert_eq!(chat::py_float_repr(0.1), "0.1");
}

fn map(pairs: Vec<(&str, Value)>) -> Value {
    Value::from_object(OrderedMap(pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect()))
}

fn msg(role: &str, content: &str) -> Value {
    map(vec![("role", Value::from(role)), ("content", Value::from(content))])
}

fn ctx(tools: &Value, messages: &[Value], thinking: bool) -> Value {
    map(vec![
        ("tools", tools.clone()),
        ("messages", Value::from(messages.to_vec())),
        ("add_generation_prompt", Value::from(true)),
        ("enable_thinking", Value::from(thinking)),
    ])
}

/// One agent episode: the model's raw generations, each followed by tool results (none = final).
struct Episode {
    thinking: bool,
    steps: Vec<(&'static str, Vec<&'static str>)>,
}

/// Runs the agent loop; returns the boundaries where render(next) is not render(prev) + generation
/// + tool turn, as text or as ids.
fn append_only_failures(ep: &Episode) -> Vec<String> {
    let tok = Tokenizer::qwen35().unwrap();
    let req = std::fs::read_to_string(chat_dir().join("tools_agent.json")).unwrap();
    let tools = chat::parse_json(&req).unwrap().get_attr("tools").unwrap();
    let mut messages = vec![msg("system", "You are a coding agent."), msg("user", "Fix the failing test in src/.")];
    let mut bad = Vec::new();
    for (k, (gen, results)) in ep.steps.iter().enumerate() {
        let prev = chat::render(&ctx(&tools, &messages, ep.thinking)).unwrap();
        messages.push(chat::parse_generation(gen, ep.thinking).unwrap());
        if results.is_empty() {
            break;
        }
        messages.extend(results.iter().map(|r| msg("tool", r)));
        let next = chat::render(&ctx(&tools, &messages, ep.thinking)).unwrap();
        let want_prefix = format!("{prev}{gen}\n<|im_start|>user\n<tool_response>\n");
        if !next.starts_with(&want_prefix) {
            bad.push(format!("step {k}: text"));
            continue;
        }
        let mut ids = tok.encode(&prev).unwrap();
        ids.extend(tok.encode(gen).unwrap());
        if !tok.encode(&next).unwrap().starts_with(&ids) {
            bad.push(format!("step {k}: ids"));
        }
    }
    bad
}

const STEP1: &str = "The test is in src/lib.rs; list the directory first.\n</think>\n\n<tool_call>\n<function=list_dir>\n<parameter=path>\nsrc\n</parameter>\n</function>\n</tool_call><|im_end|>";
const STEP2: &str = "Two files. Read one, write the other.\n</think>\n\nI will fix it now.\n\n<tool_call>\n<function=list_dir>\n<parameter=path>\nsrc/lib.rs\n</parameter>\n<parameter=limit>\n5\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=write_file>\n<parameter=zeta_first>\nz\n</parameter>\n<parameter=content>\nfn main() {\n    println!(\"fixed\");\n}\n</parameter>\n</function>\n</tool_call><|im_end|>";
const STEP3: &str = "Written. Check the result with the JSON view.\n</think>\n\n<tool_call>\n<function=list_dir>\n<parameter=path>\n{\"dir\": \"src\", \"depth\": [1, 2]}\n</parameter>\n</function>\n</tool_call><|im_end|>";
const FINAL: &str = "All good.\n</think>\n\nThe test passes now: `println!` was missing.<|im_end|>";

#[test]
fn append_only_over_multi_step_agent_conversations() {
    let with_thinking = Episode {
        thinking: true,
        steps: vec![
            (STEP1, vec!["lib.rs main.rs"]),
            (STEP2, vec!["fn lib() {}", "ok: 3 lines written"]),
            (STEP3, vec!["lib.rs main.rs\n"]),
            (FINAL, vec![]),
        ],
    };
    assert_eq!(append_only_failures(&with_thinking), Vec::<String>::new());
    let no_thinking = Episode {
        thinking: false,
        steps: vec![
            ("<tool_call>\n<function=list_dir>\n<parameter=path>\n.\n</parameter>\n</function>\n</tool_call><|im_end|>", vec!["a b"]),
            ("Now write.\n\n<tool_call>\n<function=write_file>\n<parameter=zeta_first>\n1\n</parameter>\n<parameter=content>\nx\n</parameter>\n</function>\n</tool_call><|im_end|>", vec!["ok"]),
            ("Done.<|im_end|>", vec![]),
        ],
    };
    assert_eq!(append_only_failures(&no_thinking), Vec::<String>::new());
}

#[test]
fn negative_control_append_only_breaks_when_trimming_bites() {
    // Reasoning that ends with two newlines before </think>: the template trims it on re-render.
    let two_newlines = Episode {
        thinking: true,
        steps: vec![(
            "List it.\n\n</think>\n\n<tool_call>\n<function=list_dir>\n<parameter=path>\n.\n</parameter>\n</function>\n</tool_call><|im_end|>",
            vec!["x"],
        )],
    };
    assert_eq!(append_only_failures(&two_newlines), vec!["step 0: text".to_string()]);
    // Reasoning that starts with a newline: the template trims that newline away on re-render.
    let leading_newline = Episode {
        thinking: true,
        steps: vec![(
            "\nList it.\n</think>\n\n<tool_call>\n<function=list_dir>\n<parameter=path>\n.\n</parameter>\n</function>\n</tool_call><|im_end|>",
            vec!["x"],
        )],
    };
    assert_eq!(append_only_failures(&leading_newline), vec!["step 0: text".to_string()]);
}

#[test]
fn parse_generation_reads_the_xml_tool_call_format() {
    let m = chat::parse_generation(STEP2, true).unwrap();
    assert_eq!(m.get_attr("reasoning_content").unwrap().as_str(), Some("Two files. Read one, write the other."));
    assert_eq!(m.get_attr("content").unwrap().as_str(), Some("I will fix it now."));
    let calls = m.get_attr("tool_calls").unwrap();
    assert_eq!(calls.len(), Some(2));
    let f = calls.get_item_by_index(1).unwrap().get_attr("function").unwrap();
    assert_eq!(f.get_attr("name").unwrap().as_str(), Some("write_file"));
    let content = f.get_attr("arguments").unwrap().get_attr("content").unwrap();
    assert_eq!(content.as_str(), Some("fn main() {\n    println!(\"fixed\");\n}"));
    assert!(chat::parse_generation("<tool_call>\n<function=f>\n<parameter=a>\nx</tool_call>", false).is_err());
}
