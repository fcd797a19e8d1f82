//! The chat template: conversations (messages, tool schemas, options) -> the exact prompt text.
//!
//! Owns: rendering the model's own Jinja template (`data/chat_template.jinja`, byte-identical to the
//! Qwen3.5 release's, sha256 a4aee8af…f715) with minijinja set up the way Hugging Face's
//! `apply_chat_template` sets up Jinja2: trim_blocks and lstrip_blocks, `raise_exception`, `tojson`
//! as `json.dumps(x, ensure_ascii=False)`, Python's `str()` and `strip()` for `string` and `trim`,
//! the Python string methods the template calls, and JSON objects that keep their key order.
//! Also parses a generated assistant turn (reasoning, content, XML tool calls) back into a message,
//! which is what an agent loop appends before rendering again (the append-only check).
//! Refuses: images and videos in content beyond what the template itself does.

use std::sync::Arc;

use minijinja::value::{Enumerator, Object, ObjectRepr, Value, ValueKind};
use minijinja::{Environment, ErrorKind, State};
use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

use crate::error::{Error, Result};

pub const TEMPLATE: &str = include_str!("data/chat_template.jinja");

/// Renders a request: a JSON object with `messages` and optionally `tools`, `add_generation_prompt`,
/// `enable_thinking` (every key is passed to the template, as `apply_chat_template` kwargs are), or a
/// bare JSON array of messages.
pub fn render_json(json: &str) -> Result<String> {
    let v = parse_json(json)?;
    let ctx = if v.kind() == ValueKind::Seq { Value::from_object(OrderedMap(vec![("messages".into(), v)])) } else { v };
    if ctx.kind() != ValueKind::Map || ctx.get_attr("messages").map_or(true, |m| m.is_undefined()) {
        crate::bail!("chat request: expected a JSON object with \"messages\" or an array of messages");
    }
    render(&ctx)
}

/// Renders a context value (a map with `messages`, ...) with the bundled template.
pub fn render(ctx: &Value) -> Result<String> {
    let env = environment();
    let tmpl = env.template_from_str(TEMPLATE).map_err(|e| Error::new(format!("chat template: {e}")))?;
    tmpl.render(ctx).map_err(|e| Error::new(format!("chat template: {}", jinja_error(&e))))
}

fn jinja_error(e: &minijinja::Error) -> String {
    match e.detail() {
        Some(d) if e.kind() == ErrorKind::InvalidOperation => d.to_string(),
        _ => e.to_string(),
    }
}

fn environment() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_trim_blocks(true);
    env.set_lstrip_blocks(true);
    env.add_function("raise_exception", |msg: String| -> std::result::Result<Value, minijinja::Error> {
        Err(minijinja::Error::new(ErrorKind::InvalidOperation, msg))
    });
    env.add_filter("tojson", |v: Value| -> std::result::Result<Value, minijinja::Error> {
        let mut s = String::new();
        py_json(&v, &mut s)?;
        Ok(Value::from_safe_string(s))
    });
    env.add_filter("string", |v: Value| -> std::result::Result<String, minijinja::Error> { py_str(&v) });
    env.add_filter("trim", |v: String| -> String { v.trim_matches(py_isspace).to_string() });
    env.set_unknown_method_callback(py_method);
    env
}

/// Python's `str.isspace` set: Unicode White_Space plus the information separators U+001C..U+001F.
fn py_isspace(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// The Python string and dict methods this template calls (`startswith`, `endswith`, `split`,
/// `strip`/`lstrip`/`rstrip`) plus `items`/`get`, with Python's semantics.
fn py_method(_: &State, v: &Value, name: &str, args: &[Value]) -> std::result::Result<Value, minijinja::Error> {
    let bad = |why: &str| minijinja::Error::new(ErrorKind::InvalidOperation, format!("{name}(): {why}"));
    let arg = |i: usize| args.get(i).and_then(|a| a.as_str().map(str::to_string));
    if let Some(s) = v.as_str() {
        let chars = arg(0);
        let strip_set = |c: char| chars.as_deref().map_or(py_isspace(c), |set| set.contains(c));
        return Ok(match name {
            "startswith" => Value::from(s.starts_with(arg(0).ok_or_else(|| bad("needs a string"))?.as_str())),
            "endswith" => Value::from(s.ends_with(arg(0).ok_or_else(|| bad("needs a string"))?.as_str())),
            "strip" => Value::from(s.trim_matches(strip_set)),
            "lstrip" => Value::from(s.trim_start_matches(strip_set)),
            "rstrip" => Value::from(s.trim_end_matches(strip_set)),
            "split" => match arg(0) {
                Some(sep) if sep.is_empty() => return Err(bad("empty separator")),
                Some(sep) => Value::from(s.split(sep.as_str()).map(Value::from).collect::<Vec<_>>()),
                None => Value::from(s.split(py_isspace).filter(|p| !p.is_empty()).map(Value::from).collect::<Vec<_>>()),
            },
            _ => return Err(minijinja::Error::from(ErrorKind::UnknownMethod)),
        });
    }
    if v.kind() == ValueKind::Map {
        match name {
            "items" => {
                let keys: Vec<Value> = v.try_iter()?.collect();
                return Ok(Value::from(
                    keys.into_iter()
                        .map(|k| Ok(Value::from(vec![k.clone(), v.get_item(&k)?])))
                        .collect::<std::result::Result<Vec<_>, minijinja::Error>>()?,
                ));
            }
            "get" => {
                let k = args.first().cloned().unwrap_or_default();
                let got = v.get_item(&k)?;
                return Ok(if got.is_undefined() { args.get(1).cloned().unwrap_or(Value::from(())) } else { got });
            }
            _ => {}
        }
    }
    Err(minijinja::Error::from(ErrorKind::UnknownMethod))
}

/// Python `str(x)` for the scalars the template stringifies (`True`, `None`, `1.5`).
fn py_str(v: &Value) -> std::result::Result<String, minijinja::Error> {
    Ok(match v.kind() {
        ValueKind::Undefined => String::new(),
        ValueKind::None => "None".into(),
        ValueKind::Bool => if v.is_true() { "True" } else { "False" }.into(),
        ValueKind::Number => py_number(v),
        ValueKind::String => v.as_str().unwrap_or_default().to_string(),
        _ => {
            let mut s = String::new();
            py_json(v, &mut s)?;
            s
        }
    })
}

fn py_number(v: &Value) -> String {
    if v.is_integer() {
        return v.to_string();
    }
    match f64::try_from(v.clone()) {
        Ok(f) => py_float_repr(f),
        Err(_) => v.to_string(),
    }
}

/// Python `repr(float)`: shortest round-trip digits, exponent form outside 1e-4 <= |x| < 1e16.
pub fn py_float_repr(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    let a = f.abs();
    if a == 0.0 || (1e-4..1e16).contains(&a) {
        let s = format!("{f:?}");
        return if s.contains('.') || s.contains('e') { s } else { format!("{s}.0") };
    }
    // Rust `{:e}` gives the shortest digits as `1.5e-7`; Python writes `1.5e-07`, `1e+16`.
    let s = format!("{f:e}");
    let (m, e) = s.split_once('e').unwrap_or((&s, "0"));
    let e: i32 = e.parse().unwrap_or(0);
    format!("{m}e{}{:02}", if e < 0 { '-' } else { '+' }, e.abs())
}

/// `json.dumps(v, ensure_ascii=False)`: separators ", " and ": ", keys in their order.
fn py_json(v: &Value, out: &mut String) -> std::result::Result<(), minijinja::Error> {
    match v.kind() {
        ValueKind::None | ValueKind::Undefined => out.push_str("null"),
        ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
        ValueKind::Number => out.push_str(&py_number(v)),
        ValueKind::String => out.push_str(&serde_json::to_string(v.as_str().unwrap_or_default()).unwrap_or_default()),
        ValueKind::Seq | ValueKind::Iterable => {
            out.push('[');
            for (i, item) in v.try_iter()?.enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                py_json(&item, out)?;
            }
            out.push(']');
        }
        ValueKind::Map => {
            out.push('{');
            for (i, k) in v.try_iter()?.enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                py_json(&Value::from(k.to_string()), out)?;
                out.push_str(": ");
                py_json(&v.get_item(&k)?, out)?;
            }
            out.push('}');
        }
        _ => return Err(minijinja::Error::new(ErrorKind::InvalidOperation, format!("tojson: cannot serialise {v}"))),
    }
    Ok(())
}

/// A JSON object that keeps its keys in file order (Python dicts do; the template's `tojson` and
/// `|items` show the order).
#[derive(Debug)]
pub struct OrderedMap(pub Vec<(String, Value)>);

impl Object for OrderedMap {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Map
    }
    fn get_value(self: &Arc<Self>, key: &Value) -> Option<Value> {
        let k = key.as_str()?;
        self.0.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
    }
    fn enumerate(self: &Arc<Self>) -> Enumerator {
        Enumerator::Values(self.0.iter().map(|(k, _)| Value::from(k.as_str())).collect())
    }
}

/// Parses JSON into template values, objects as `OrderedMap` (a repeated key keeps its first
/// position and its last value, as Python's `json.loads` does).
pub fn parse_json(text: &str) -> Result<Value> {
    let mut de = serde_json::Deserializer::from_str(text);
    let v = JsonValue::deserialize(&mut de).map_err(|e| Error::new(format!("JSON: {e}")))?;
    de.end().map_err(|e| Error::new(format!("JSON: {e}")))?;
    Ok(v.0)
}

struct JsonValue(Value);

impl<'de> Deserialize<'de> for JsonValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        d.deserialize_any(JsonVisitor)
    }
}

struct JsonVisitor;

impl<'de> Visitor<'de> for JsonVisitor {
    type Value = JsonValue;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, b: bool) -> std::result::Result<JsonValue, E> {
        Ok(JsonValue(Value::from(b)))
    }
    fn visit_i64<E>(self, n: i64) -> std::result::Result<JsonValue, E> {
        Ok(JsonValue(Value::from(n)))
    }
    fn visit_u64<E>(self, n: u64) -> std::result::Result<JsonValue, E> {
        Ok(JsonValue(Value::from(n)))
    }
    fn visit_f64<E>(self, n: f64) -> std::result::Result<JsonValue, E> {
        Ok(JsonValue(Value::from(n)))
    }
    fn visit_str<E>(self, s: &str) -> std::result::Result<JsonValue, E> {
        Ok(JsonValue(Value::from(s)))
    }
    fn visit_unit<E>(self) -> std::result::Result<JsonValue, E> {
        Ok(JsonValue(Value::from(())))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<JsonValue, A::Error> {
        let mut v = Vec::new();
        while let Some(JsonValue(x)) = seq.next_element()? {
            v.push(x);
        }
        Ok(JsonValue(Value::from(v)))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<JsonValue, A::Error> {
        let mut v: Vec<(String, Value)> = Vec::new();
        while let Some((k, JsonValue(x))) = map.next_entry::<String, JsonValue>()? {
            match v.iter_mut().find(|(n, _)| *n == k) {
                Some(slot) => slot.1 = x,
                None => v.push((k, x)),
            }
        }
        Ok(JsonValue(Value::from_object(OrderedMap(v))))
    }
}

/// A generated assistant turn, as the model writes it after the generation prompt
/// (`<|im_start|>assistant\n<think>\n`): `REASONING\n</think>\n\nCONTENT` then XML tool calls, up to
/// `<|im_end|>`. With thinking off the prompt already holds the empty think block and the text is
/// just content and calls. Returns the message an agent loop appends: role, content,
/// reasoning_content (when thinking), tool_calls (arguments kept as the raw strings).
pub fn parse_generation(text: &str, thinking: bool) -> Result<Value> {
    let text = text.strip_suffix("<|im_end|>").unwrap_or(text);
    let mut fields: Vec<(String, Value)> = vec![("role".into(), Value::from("assistant"))];
    let rest = if thinking {
        let (reasoning, rest) = text.split_once("</think>").ok_or_else(|| Error::new("generation: no </think>"))?;
        fields.push(("reasoning_content".into(), Value::from(reasoning.strip_suffix('\n').unwrap_or(reasoning))));
        rest.strip_prefix("\n\n").unwrap_or(rest)
    } else {
        text
    };
    let (content, calls) = match rest.find("<tool_call>") {
        Some(p) => (rest[..p].strip_suffix("\n\n").unwrap_or(&rest[..p]), &rest[p..]),
        None => (rest, ""),
    };
    fields.insert(1, ("content".into(), Value::from(content)));
    let mut tool_calls = Vec::new();
    for block in calls.split("<tool_call>").skip(1) {
        tool_calls.push(parse_tool_call(block)?);
    }
    if !tool_calls.is_empty() {
        fields.push(("tool_calls".into(), Value::from(tool_calls)));
    }
    Ok(Value::from_object(OrderedMap(fields)))
}

fn parse_tool_call(block: &str) -> Result<Value> {
    let body = block.trim_start_matches('\n');
    let body = body.strip_prefix("<function=").ok_or_else(|| Error::new("tool call: expected <function=NAME>"))?;
    let (name, mut rest) = body.split_once(">\n").ok_or_else(|| Error::new("tool call: unterminated <function="))?;
    let mut args = Vec::new();
    while let Some(p) = rest.strip_prefix("<parameter=") {
        let (arg, after) = p.split_once(">\n").ok_or_else(|| Error::new("tool call: unterminated <parameter="))?;
        let (value, after) = after
            .split_once("\n</parameter>\n")
            .ok_or_else(|| Error::new(format!("tool call: parameter {arg} not closed")))?;
        args.push((arg.to_string(), Value::from(value)));
        rest = after;
    }
    if !rest.starts_with("</function>\n</tool_call>") {
        crate::bail!("tool call {name}: expected </function>\\n</tool_call>");
    }
    let function = OrderedMap(vec![
        ("name".into(), Value::from(name)),
        ("arguments".into(), Value::from_object(OrderedMap(args))),
    ]);
    Ok(Value::from_object(OrderedMap(vec![
        ("type".into(), Value::from("function")),
        ("function".into(), Value::from_object(function)),
    ])))
}
