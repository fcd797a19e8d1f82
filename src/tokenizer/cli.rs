//! The tokenizer's commands: `mk tokenize`, `mk detokenize`, `mk chat-render`.
//!
//! Owns: the line protocols (one JSON string per line in, one JSON array of ids per line out, and the
//! reverse) and reading a chat request file. Errors name the input line.
//! Refuses: tokenizing logic (`Tokenizer`) and template logic (`chat`).

use std::io::{BufRead, Write};
use std::path::Path;

use super::{chat, Tokenizer};
use crate::error::{Context, Error, Result};

/// Each input line is a JSON string; each output line the JSON array of its ids.
pub fn tokenize(input: impl BufRead, mut out: impl Write) -> Result<()> {
    let tok = Tokenizer::qwen35()?;
    for (n, line) in input.lines().enumerate() {
        let line = line.with_context(|| format!("tokenize: read line {}", n + 1))?;
        let text: String = serde_json::from_str(&line)
            .map_err(|e| Error::new(format!("tokenize: line {}: expected a JSON string: {e}", n + 1)))?;
        let ids = tok.encode(&text).with_context(|| format!("tokenize: line {}", n + 1))?;
        let s = serde_json::to_string(&ids).context("tokenize: write")?;
        writeln!(out, "{s}").context("tokenize: write")?;
    }
    out.flush().context("tokenize: write")
}

/// Each input line is a JSON array of ids; each output line the JSON string of their text (bytes that
/// are not UTF-8 become U+FFFD).
pub fn detokenize(input: impl BufRead, mut out: impl Write) -> Result<()> {
    let tok = Tokenizer::qwen35()?;
    for (n, line) in input.lines().enumerate() {
        let line = line.with_context(|| format!("detokenize: read line {}", n + 1))?;
        let ids: Vec<u32> = serde_json::from_str(&line)
            .map_err(|e| Error::new(format!("detokenize: line {}: expected a JSON array of token ids: {e}", n + 1)))?;
        let text = tok.decode(&ids).with_context(|| format!("detokenize: line {}", n + 1))?;
        let s = serde_json::to_string(&text).context("detokenize: write")?;
        writeln!(out, "{s}").context("detokenize: write")?;
    }
    out.flush().context("detokenize: write")
}

/// Renders a chat request file (see `chat::render_json`); prints the text, or its ids with `ids`.
pub fn chat_render(file: &Path, ids: bool, mut out: impl Write) -> Result<()> {
    let json = std::fs::read_to_string(file).with_context(|| format!("chat-render: read {}", file.display()))?;
    let text = chat::render_json(&json).with_context(|| format!("chat-render: {}", file.display()))?;
    if ids {
        let ids = Tokenizer::qwen35()?.encode(&text)?;
        writeln!(out, "{}", serde_json::to_string(&ids).context("chat-render: write")?)
            .context("chat-render: write")?;
    } else {
        write!(out, "{text}").context("chat-render: write")?;
    }
    out.flush().context("chat-render: write")
}

/// `mk tokenize`: stdin to stdout.
pub fn tokenize_stdio() -> Result<()> {
    tokenize(std::io::stdin().lock(), std::io::BufWriter::new(std::io::stdout().lock()))
}

/// `mk detokenize`: stdin to stdout.
pub fn detokenize_stdio() -> Result<()> {
    detokenize(std::io::stdin().lock(), std::io::BufWriter::new(std::io::stdout().lock()))
}

/// `mk chat-render FILE [--ids]`: to stdout.
pub fn chat_render_stdout(file: &Path, ids: bool) -> Result<()> {
    chat_render(file, ids, std::io::BufWriter::new(std::io::stdout().lock()))
}
