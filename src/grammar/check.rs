//! The independent checker (issue 30 item 5): a completed assistant turn's tool calls parsed back by the
//! chat module's parser (`tokenizer::chat::parse_generation`, what an agent loop appends) and each call's
//! arguments validated against its tool's `parameters` schema by a JSON Schema validator (boon) that
//! shares no code with llguidance. Nothing here reads the grammar.
//!
//! An argument arrives as the raw text between `<parameter=P>\n` and `\n</parameter>`; it is read back
//! as the template would have rendered a value (`tools::render_value`): `True` / `False` a boolean,
//! `None` null, a JSON number, object or array that JSON text, anything else a string. Where a text
//! reads several ways (`5`: the number or the string), the first reading that the parameter's own schema
//! accepts is taken (number, object or array before string), then the whole arguments object is validated.
//!
//! Owns: `Checker`, `CallVerdict`, `TurnVerdict`. Refuses: schemas boon cannot compile (the tool named),
//! references to documents outside the schema (no loader: nothing is read from disk or a network).

use boon::{Compiler, SchemaIndex, Schemas};
use serde_json::{Map, Value};

use super::tools::Tool;
use crate::error::{Error, Result};
use crate::tokenizer::chat::parse_generation;

/// One call's verdict: its tool name and, if valid, its arguments as JSON; else why not.
#[derive(Debug, Clone)]
pub struct CallVerdict {
    pub name: String,
    pub arguments: std::result::Result<Value, String>,
}

impl CallVerdict {
    pub fn ok(&self) -> bool {
        self.arguments.is_ok()
    }
}

/// A turn's verdict: its calls, or why it did not parse.
#[derive(Debug, Clone)]
pub struct TurnVerdict {
    pub calls: Vec<CallVerdict>,
    pub parse_error: Option<String>,
}

impl TurnVerdict {
    /// The turn parsed and every call in it is valid.
    pub fn ok(&self) -> bool {
        self.parse_error.is_none() && self.calls.iter().all(CallVerdict::ok)
    }
}

struct Compiled {
    whole: SchemaIndex,
    params: Vec<(String, SchemaIndex)>,
}

pub struct Checker {
    names: Vec<String>,
    compiled: Vec<Compiled>,
    schemas: Schemas,
}

impl Checker {
    pub fn new(tools: &[Tool]) -> Result<Checker> {
        let mut c = Compiler::new();
        // no loader: a `$ref` outside the tool's own schema is an error, never a file or network read
        c.use_loader(Box::new(boon::SchemeUrlLoader::new()));
        let mut schemas = Schemas::new();
        let mut compiled = Vec::new();
        for (i, t) in tools.iter().enumerate() {
            let comp = |c: &mut Compiler, schemas: &mut Schemas, loc: String, v: Value| -> Result<SchemaIndex> {
                c.add_resource(&loc, v).map_err(|e| Error::new(format!("checker: tool {}: {e}", t.name)))?;
                c.compile(&loc, schemas).map_err(|e| Error::new(format!("checker: tool {}: {e}", t.name)))
            };
            let whole = comp(&mut c, &mut schemas, format!("mem://mk/tool{i}.json"), t.parameters.clone())?;
            let mut params = Vec::new();
            for (j, p) in t.params.iter().enumerate() {
                let mut sub = p.schema.clone();
                for k in ["$defs", "definitions"] {
                    if let (Some(d), Value::Object(m)) = (t.parameters.get(k), &mut sub) {
                        m.entry(k.to_string()).or_insert_with(|| d.clone());
                    }
                }
                params.push((p.name.clone(), comp(&mut c, &mut schemas, format!("mem://mk/tool{i}/p{j}.json"), sub)?));
            }
            compiled.push(Compiled { whole, params });
        }
        Ok(Checker { names: tools.iter().map(|t| t.name.clone()).collect(), compiled, schemas })
    }

    /// The readings of one raw argument, in the order they are tried.
    fn readings(raw: &str) -> Vec<Value> {
        let mut out = Vec::new();
        match raw {
            "True" => out.push(Value::Bool(true)),
            "False" => out.push(Value::Bool(false)),
            "None" => out.push(Value::Null),
            _ => {}
        }
        if let Ok(v @ (Value::Number(_) | Value::Object(_) | Value::Array(_))) = serde_json::from_str::<Value>(raw) {
            out.push(v);
        }
        out.push(Value::String(raw.to_string()));
        out
    }

    /// One call: tool `name` with raw arguments `args` (in order).
    pub fn check_call(&self, name: &str, args: &[(String, String)]) -> CallVerdict {
        let verdict = |r| CallVerdict { name: name.to_string(), arguments: r };
        let Some(ti) = self.names.iter().position(|n| n == name) else {
            return verdict(Err(format!("unknown tool {name}")));
        };
        let c = &self.compiled[ti];
        let mut obj = Map::new();
        for (k, raw) in args {
            if obj.contains_key(k) {
                return verdict(Err(format!("parameter {k} given twice")));
            }
            let readings = Checker::readings(raw);
            let pick = match c.params.iter().find(|(n, _)| n == k) {
                Some((_, idx)) => readings.iter().find(|v| self.schemas.validate(v, *idx).is_ok()),
                None => None,
            };
            let v = pick.cloned().unwrap_or_else(|| Value::String(raw.clone()));
            obj.insert(k.clone(), v);
        }
        let v = Value::Object(obj);
        match self.schemas.validate(&v, c.whole) {
            Ok(()) => verdict(Ok(v)),
            Err(e) => verdict(Err(format!("{e}").lines().collect::<Vec<_>>().join("; "))),
        }
    }

    /// A completed assistant turn (the text after the generation prompt, `<|im_end|>` optional).
    pub fn check_turn(&self, text: &str, thinking: bool) -> TurnVerdict {
        let msg = match parse_generation(text, thinking) {
            Ok(m) => m,
            Err(e) => return TurnVerdict { calls: Vec::new(), parse_error: Some(e.to_string()) },
        };
        let mut calls = Vec::new();
        if let Ok(list) = msg.get_attr("tool_calls") {
            if let Ok(iter) = list.try_iter() {
                for call in iter {
                    let f = call.get_attr("function").unwrap_or_default();
                    let name = f.get_attr("name").ok().and_then(|n| n.as_str().map(str::to_string)).unwrap_or_default();
                    let mut args = Vec::new();
                    if let Ok(a) = f.get_attr("arguments") {
                        if let Ok(keys) = a.try_iter() {
                            for k in keys {
                                let v = a.get_item(&k).unwrap_or_default();
                                args.push((k.to_string(), v.as_str().unwrap_or_default().to_string()));
                            }
                        }
                    }
                    calls.push(self.check_call(&name, &args));
                }
            }
        }
        TurnVerdict { calls, parse_error: None }
    }
}
