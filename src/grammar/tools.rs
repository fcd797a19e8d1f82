//! Tool schemas -> a Lark grammar (llguidance's dialect) of the model's own tool-call format, as the chat
//! template renders a call and `tokenizer::chat::parse_tool_call` reads it back:
//!
//! ```text
//! <tool_call>\n<function=NAME>\n<parameter=P>\nVALUE\n</parameter>\n ... </function>\n</tool_call>
//! ```
//!
//! `<tool_call>` and `</tool_call>` are the special tokens 248058 / 248059 (the template's text for them
//! encodes to those ids), the rest is text. A VALUE is what the template writes for an argument: a string
//! raw (`args_value | string`), a mapping or a list as `tojson` (`json.dumps`, separators ", " and ": "),
//! any other scalar as Python's `str()`: `True` / `False`, `None`, `3`, `2.5`, `1e-07`. So a boolean is
//! `True`, not `true` (what the template renders for a Python bool; a JSON `true` inside an object
//! parameter stays `true`).
//!
//! Parameters come in the schema's property order (the file's order), each optional one may be left
//! out, every required one is present, none other is admitted. A raw string ends at the first
//! `\n</parameter>\n` (the parser's split): it is the lazy terminal `/(?s:.*)\n<\/parameter>\n/`.
//!
//! Owns: reading a tools list (the template's `tools`: `{"type": "function", "function": {...}}` or the
//! bare function object), the grammar text, `render_value` (the template's rendering of one argument).
//! Refuses, with a message naming the tool and parameter: no tools, a tool without a name, repeated
//! names, a name the parser could not split (`>`, a newline), parameters that are not an object schema,
//! a required parameter without a schema, string keywords the raw format cannot express (`pattern`), an
//! enum value that contains the parameter terminator.

use serde_json::Value;

use crate::bail;
use crate::error::{Error, Result};
use crate::tokenizer::chat::py_float_repr;

use crate::tokenizer::{END_TOOL_CALL, TOOL_CALL};

/// What the constrained turn may hold besides tool calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choice {
    /// Free content, then optionally the calls (the content may not contain the text `<tool_call>`).
    Auto,
    /// Calls only: the turn starts with `<tool_call>`.
    Required,
}

/// The shape of the constrained assistant turn (the text after the generation prompt, up to
/// `<|im_end|>`, which the matcher allows as its end-of-sequence token).
#[derive(Debug, Clone, Copy)]
pub struct Format {
    pub choice: Choice,
    /// The prompt ended with `<think>\n`: free reasoning, `</think>`, `\n\n`, then the content.
    pub thinking: bool,
    /// More than one call (separated by `\n`, as the template writes them).
    pub parallel: bool,
}

impl Default for Format {
    fn default() -> Self {
        Format { choice: Choice::Auto, thinking: false, parallel: true }
    }
}

/// One parameter: its name, its JSON schema, whether required.
#[derive(Debug, Clone)]
pub struct Param {
    pub name: String,
    pub schema: Value,
    pub required: bool,
}

/// One tool (a function): its name, its parameters in schema order, and its `parameters` schema whole
/// (what the checker validates the arguments against).
#[derive(Debug, Clone)]
pub struct Tool {
    pub name: String,
    pub params: Vec<Param>,
    pub parameters: Value,
}

/// Parses a tools list (a JSON array, as passed to the chat template).
pub fn parse_tools(json: &str) -> Result<Vec<Tool>> {
    let v: Value = serde_json::from_str(json).map_err(|e| Error::new(format!("tools: {e}")))?;
    tools_from_value(&v)
}

pub fn tools_from_value(v: &Value) -> Result<Vec<Tool>> {
    let Some(list) = v.as_array() else { bail!("tools: expected a JSON array of tools") };
    if list.is_empty() {
        bail!("tools: the list is empty (a grammar needs at least one tool)");
    }
    let mut tools: Vec<Tool> = Vec::new();
    for (i, t) in list.iter().enumerate() {
        let f = t.get("function").unwrap_or(t);
        let Some(name) = f.get("name").and_then(Value::as_str) else { bail!("tools: tool {i} has no name") };
        check_name("tool", name)?;
        if tools.iter().any(|t| t.name == name) {
            bail!("tools: tool {name} appears twice");
        }
        let parameters = f.get("parameters").cloned().unwrap_or_else(|| serde_json::json!({"type": "object"}));
        if !parameters.is_object() || parameters.get("type").is_some_and(|t| t != "object") {
            bail!("tool {name}: parameters must be an object schema");
        }
        let props = match parameters.get("properties") {
            None => serde_json::Map::new(),
            Some(Value::Object(m)) => m.clone(),
            Some(_) => bail!("tool {name}: properties must be an object"),
        };
        let required: Vec<&str> = match parameters.get("required") {
            None => Vec::new(),
            Some(Value::Array(r)) => r
                .iter()
                .map(|x| x.as_str().ok_or_else(|| Error::new(format!("tool {name}: required must list names"))))
                .collect::<Result<_>>()?,
            Some(_) => bail!("tool {name}: required must be an array of names"),
        };
        if let Some(r) = required.iter().find(|r| !props.contains_key(**r)) {
            bail!("tool {name}: required parameter {r} has no schema in properties");
        }
        let mut params = Vec::new();
        for (p, schema) in &props {
            check_name(&format!("tool {name}: parameter"), p)?;
            if !schema.is_object() && !schema.is_boolean() {
                bail!("tool {name} parameter {p}: its schema must be an object");
            }
            params.push(Param { name: p.clone(), schema: schema.clone(), required: required.contains(&p.as_str()) });
        }
        tools.push(Tool { name: name.to_string(), params, parameters });
    }
    Ok(tools)
}

/// A name goes between `=` and `>\n`: the parser splits at the first `>\n`, so neither `>` nor a newline.
fn check_name(what: &str, name: &str) -> Result<()> {
    if name.is_empty() || name.contains('>') || name.contains('\n') || name.contains('<') {
        bail!("{what} name {name:?} cannot be written in the tool-call format (empty, or has <, > or a newline)");
    }
    Ok(())
}

/// The template's rendering of one argument value (see the module).
pub fn render_value(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Object(_) | Value::Array(_) => {
            let mut s = String::new();
            py_json(v, &mut s);
            s
        }
        Value::Bool(b) => if *b { "True" } else { "False" }.into(),
        Value::Null => "None".into(),
        Value::Number(n) => py_number(n),
    }
}

fn py_number(n: &serde_json::Number) -> String {
    if n.is_i64() || n.is_u64() {
        n.to_string()
    } else {
        py_float_repr(n.as_f64().unwrap_or(f64::NAN))
    }
}

/// `json.dumps(v, ensure_ascii=False)`: ", " and ": ", keys in their order.
fn py_json(v: &Value, out: &mut String) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&py_number(n)),
        Value::String(s) => out.push_str(&serde_json::to_string(s).unwrap_or_default()),
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                py_json(x, out);
            }
            out.push(']');
        }
        Value::Object(m) => {
            out.push('{');
            for (i, (k, x)) in m.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                out.push_str(&serde_json::to_string(k).unwrap_or_default());
                out.push_str(": ");
                py_json(x, out);
            }
            out.push('}');
        }
    }
}

/// A Lark string literal for `s` (JSON's escapes, which the Lark lexer reads).
fn lit(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_default()
}

const END_PARAM: &str = "\n</parameter>\n";

/// The grammar of one constrained assistant turn for `tools` (see the module).
pub fn lark(tools: &[Tool], fmt: Format) -> Result<String> {
    if tools.is_empty() {
        bail!("tools: the list is empty (a grammar needs at least one tool)");
    }
    let mut g = String::new();
    g.push_str("%llguidance {}\n");
    let body = match fmt.choice {
        Choice::Auto => "TEXT calls?",
        Choice::Required => "calls",
    };
    if fmt.thinking {
        g.push_str(&format!("start: THINK <[{}]> \"\\n\\n\" {body}\n", crate::tokenizer::END_THINK));
        g.push_str("THINK: /(?s:.*)/\n");
    } else {
        g.push_str(&format!("start: {body}\n"));
    }
    // Content: any text but the text `<tool_call>` (which the parser would take for a call).
    g.push_str("TEXT: /(?s:.*)/ & ~/(?s:.*)<tool_call>(?s:.*)/\n");
    g.push_str(if fmt.parallel { "calls: call (\"\\n\" call)*\n" } else { "calls: call\n" });
    g.push_str(&format!("call: <[{TOOL_CALL}]> \"\\n<function=\" func \"</function>\\n\" <[{END_TOOL_CALL}]>\n"));
    let fns: Vec<String> = (0..tools.len()).map(|i| format!("fn_{i}")).collect();
    g.push_str(&format!("func: {}\n", fns.join(" | ")));
    g.push_str("raw_str[lazy]: /(?s:.*)\\n<\\/parameter>\\n/\n");
    for (i, t) in tools.iter().enumerate() {
        let mut rule = format!("fn_{i}: {}", lit(&format!("{}>\n", t.name)));
        for (j, p) in t.params.iter().enumerate() {
            let pr = format!("p_{i}_{j}");
            rule.push_str(&format!(" {pr}{}", if p.required { "" } else { "?" }));
            let head = lit(&format!("<parameter={}>\n", p.name));
            let value = value_rule(t, p, &format!("v_{i}_{j}"), &mut g)?;
            g.push_str(&format!("{pr}: {head} {value}\n"));
        }
        g.push_str(&rule);
        g.push('\n');
    }
    Ok(g)
}

/// The grammar of one parameter's VALUE plus its terminator: a rule name (rules it needs are appended
/// to `g` under names starting with `name`).
fn value_rule(t: &Tool, p: &Param, name: &str, g: &mut String) -> Result<String> {
    value_rule_at(t, p, name, g, 0)
}

/// `value_rule` `depth` references and unions down (bounded: a reference cycle is an error).
fn value_rule_at(t: &Tool, p: &Param, name: &str, g: &mut String, depth: usize) -> Result<String> {
    if depth > 32 {
        bail!("tool {} parameter {}: references or unions nest deeper than 32 (a cycle?)", t.name, p.name);
    }
    let s = &p.schema;
    let whose = || format!("tool {} parameter {}", t.name, p.name);
    if s == &Value::Bool(false) {
        bail!("{}: the schema false admits no value", whose());
    }
    let obj = s.as_object().cloned().unwrap_or_default();
    // enum / const: each value as the template renders it
    let listed: Option<Vec<Value>> = match (obj.get("enum"), obj.get("const")) {
        (_, Some(c)) => Some(vec![c.clone()]),
        (Some(Value::Array(e)), None) => Some(e.clone()),
        (Some(_), None) => bail!("{}: enum must be an array", whose()),
        (None, None) => None,
    };
    if let Some(vals) = listed {
        if vals.is_empty() {
            bail!("{}: the enum is empty", whose());
        }
        let mut alts = Vec::new();
        for v in &vals {
            let r = render_value(v);
            if r.contains("\n</parameter>") {
                bail!("{}: the value {r:?} contains the parameter terminator", whose());
            }
            alts.push(lit(&format!("{r}{END_PARAM}")));
        }
        g.push_str(&format!("{name}: {}\n", alts.join(" | ")));
        return Ok(name.to_string());
    }
    for k in ["anyOf", "oneOf", "allOf", "not", "if", "$ref"] {
        if obj.contains_key(k) {
            if matches!(k, "anyOf" | "oneOf") {
                // a union at the top of a parameter: the union of the branches' renderings
                let Some(branches) = obj[k].as_array() else { bail!("{}: {k} must be an array", whose()) };
                let mut alts = Vec::new();
                for (b, br) in branches.iter().enumerate() {
                    let mut sub = br.clone();
                    inherit_defs(&mut sub, &t.parameters);
                    let bp = Param { name: p.name.clone(), schema: sub, required: p.required };
                    alts.push(value_rule_at(t, &bp, &format!("{name}_{b}"), g, depth + 1)?);
                }
                g.push_str(&format!("{name}: {}\n", alts.join(" | ")));
                return Ok(name.to_string());
            }
            if k == "$ref" {
                // a local reference: the value is rendered as the referenced schema's value would be
                let r = obj[k].as_str().unwrap_or_default();
                let target = r.strip_prefix('#').and_then(|ptr| t.parameters.pointer(ptr)).cloned();
                let Some(target) = target.filter(|_| r.starts_with("#/")) else {
                    bail!("{}: $ref {r:?} is not a local reference into the tool's parameters", whose());
                };
                let bp = Param { name: p.name.clone(), schema: target, required: p.required };
                return value_rule_at(t, &bp, name, g, depth + 1);
            }
            // allOf / not / if at the top of a parameter: the rendering depends on which type the
            // combination admits (raw for a string, JSON text otherwise), which is not worked out here
            bail!("{}: {k} at the top of a parameter is not supported", whose());
        }
    }
    let types: Vec<String> = match obj.get("type") {
        None => Vec::new(),
        Some(Value::String(t)) => vec![t.clone()],
        Some(Value::Array(a)) => a.iter().filter_map(|x| x.as_str().map(str::to_string)).collect(),
        Some(_) => bail!("{}: type must be a name or a list of names", whose()),
    };
    if types.is_empty() {
        // any value: every rendering is text without the terminator, so a raw string admits them all
        return Ok("raw_str".into());
    }
    let mut alts = Vec::new();
    for (k, ty) in types.iter().enumerate() {
        alts.push(match ty.as_str() {
            "string" => {
                string_rule(&obj, &format!("{name}_s"), g).map_err(|e| Error::new(format!("{}: {e}", whose())))?
            }
            "boolean" => lit(&format!("True{END_PARAM}")) + " | " + &lit(&format!("False{END_PARAM}")),
            "null" => lit(&format!("None{END_PARAM}")),
            "integer" | "number" | "object" | "array" => {
                let mut sub = Value::Object(obj.clone());
                sub["type"] = Value::String(ty.clone());
                let bp = Param { name: p.name.clone(), schema: sub, required: p.required };
                json_rule(t, &bp, &format!("{name}_{k}"), g)?
            }
            other => bail!("{}: unknown type {other}", whose()),
        });
    }
    g.push_str(&format!("{name}: {}\n", alts.join(" | ")));
    Ok(name.to_string())
}

/// A raw string: any text without the terminator, within minLength / maxLength (in characters).
fn string_rule(obj: &serde_json::Map<String, Value>, name: &str, g: &mut String) -> Result<String> {
    if obj.contains_key("pattern") {
        bail!("string keyword pattern is not supported in the raw parameter format");
    }
    let min = obj.get("minLength").and_then(Value::as_u64);
    let max = obj.get("maxLength").and_then(Value::as_u64);
    if min.is_none() && max.is_none() {
        return Ok("raw_str".into());
    }
    let (lo, hi) = (min.unwrap_or(0), max.map(|m| m.to_string()).unwrap_or_default());
    if max.is_some_and(|m| m < lo) {
        bail!("maxLength is below minLength");
    }
    let upper = name.to_uppercase();
    g.push_str(&format!("{upper}: /(?s:.{{{lo},{hi}}})/ & ~/(?s:.*)\\n<\\/parameter>(?s:.*)/\n"));
    g.push_str(&format!("{name}[lazy]: {upper} \"\\n</parameter>\\n\"\n"));
    Ok(name.to_string())
}

/// A value the template writes as JSON text (numbers, objects, arrays): llguidance's JSON grammar of the
/// schema with json.dumps' separators and no other whitespace.
fn json_rule(t: &Tool, p: &Param, name: &str, g: &mut String) -> Result<String> {
    let mut sub = p.schema.clone();
    inherit_defs(&mut sub, &t.parameters);
    if let Value::Object(m) = &mut sub {
        m.insert(
            "x-guidance".into(),
            serde_json::json!({"item_separator": ", ", "key_separator": ": ", "whitespace_flexible": false}),
        );
    }
    let text = serde_json::to_string(&sub).map_err(|e| Error::new(format!("tool {}: {e}", t.name)))?;
    g.push_str(&format!("{name}: {name}_j \"\\n</parameter>\\n\"\n{name}_j: %json {text}\n"));
    Ok(name.to_string())
}

/// A parameter's schema embedded alone keeps the `$defs` / `definitions` of the tool's parameters, so
/// its local references (`#/$defs/X`) still resolve.
fn inherit_defs(sub: &mut Value, parameters: &Value) {
    for k in ["$defs", "definitions"] {
        if let (Some(d), Value::Object(m)) = (parameters.get(k), &mut *sub) {
            m.entry(k.to_string()).or_insert_with(|| d.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_render_as_the_template_renders_them() {
        let v: Value =
            serde_json::from_str(r#"[true, null, 3, 2.5, 1e-7, "a\nb", {"k": [1, "x"], "b": false}]"#).unwrap();
        let got: Vec<String> = v.as_array().unwrap().iter().map(render_value).collect();
        assert_eq!(got, ["True", "None", "3", "2.5", "1e-07", "a\nb", r#"{"k": [1, "x"], "b": false}"#]);
    }

    #[test]
    fn bad_tool_lists_are_named_errors() {
        for (bad, says) in [
            ("{}", "expected a JSON array"),
            ("[]", "empty"),
            (r#"[{"type": "function", "function": {}}]"#, "no name"),
            (r#"[{"name": "a"}, {"name": "a"}]"#, "appears twice"),
            (r#"[{"name": "a>b"}]"#, "cannot be written"),
            (r#"[{"name": "a", "parameters": {"type": "array"}}]"#, "object schema"),
            (r#"[{"name": "a", "parameters": {"type": "object", "required": ["x"]}}]"#, "required parameter x"),
            ("[", "tools:"),
        ] {
            let e = parse_tools(bad).unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
        let t = parse_tools(r#"[{"name": "a", "parameters": {"type": "object", "properties": {"p": {"type": "string", "pattern": "x"}}}}]"#).unwrap();
        let e = lark(&t, Format::default()).unwrap_err().to_string();
        assert!(e.contains("tool a parameter p") && e.contains("pattern"), "{e}");
        for (p, says) in [
            (r##"{"$ref": "#/$defs/loop"}"##, "deeper than 32"),
            (r##"{"$ref": "other.json"}"##, "not a local reference"),
            (r#"{"allOf": [{"type": "string"}]}"#, "allOf at the top"),
        ] {
            let text = format!(
                r##"[{{"name": "a", "parameters": {{"type": "object", "$defs": {{"loop": {{"$ref": "#/$defs/loop"}}}}, "properties": {{"p": {p}}}}}}}]"##
            );
            let e = lark(&parse_tools(&text).unwrap(), Format::default()).unwrap_err().to_string();
            assert!(e.contains(says), "{p}: {e}");
        }
        // a local reference to a string is a raw string, as the template renders it
        let t = parse_tools(
            r##"[{"name": "a", "parameters": {"type": "object", "$defs": {"s": {"type": "string"}}, "properties": {"p": {"$ref": "#/$defs/s"}}}}]"##,
        )
        .unwrap();
        assert!(lark(&t, Format::default()).unwrap().contains("v_0_0: raw_str\n"));
    }
}
