//! The matcher: llguidance's parser over our vocabulary, advanced on every emitted token, giving the
//! mask of allowed ids before each step and the forced continuation where there is exactly one.
//!
//! The token trie (toktrie) is built once per process from the tokenizer: ids 0..248,044 their bytes,
//! the 33 added tokens (248,044..248,077) special (the trie's 0xFF marker before their text, so no
//! text regex can match them and the grammar names them `<[id]>`), the padding ids 248,077..248,320
//! without bytes (never allowed), `<|im_end|>` the end-of-sequence token (the turn's end: allowed where
//! the grammar may end). Forced tokens are tokenized by our own BPE (canonical, no NFC: the bytes are
//! kept as the grammar forces them).
//!
//! Owns: the token environment, the parser factory (shared), `ToolMatcher`. Refuses: a grammar that
//! does not compile (llguidance's message, prefixed), a token the grammar does not allow (the matcher is
//! left where it was), masks of another vocabulary size.

use std::sync::{Arc, OnceLock};

use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::{TokEnv, TokRxInfo, TokTrie, TokenId, TokenizerEnv};
use llguidance::{Matcher, ParserFactory};

use super::mask::Mask;
use super::tools::{lark, Format, Tool};
use crate::bail;
use crate::error::{Error, Result};
use crate::tokenizer::{self, Tokenizer, BASE_VOCAB, DEFINED, IM_END, SPECIAL_TOKENS, VOCAB_ROWS};

struct QwenEnv {
    trie: TokTrie,
    tok: Tokenizer,
}

impl TokenizerEnv for QwenEnv {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }
    fn tokenize_bytes(&self, s: &[u8]) -> Vec<TokenId> {
        match std::str::from_utf8(s) {
            Ok(text) => self.tok.encode_ordinary(text).unwrap_or_else(|_| self.trie.greedy_tokenize(s)),
            Err(_) => self.trie.greedy_tokenize(s),
        }
    }
}

/// The byte strings the trie is built from (one per id of the head's 248,320 rows).
pub fn trie_words() -> Result<Vec<Vec<u8>>> {
    let tok = Tokenizer::qwen35()?;
    let mut words = Vec::with_capacity(VOCAB_ROWS as usize);
    for id in 0..BASE_VOCAB {
        words.push(tok.token_bytes(id)?.to_vec());
    }
    for s in SPECIAL_TOKENS {
        let mut w = vec![TokTrie::SPECIAL_TOKEN_MARKER];
        w.extend_from_slice(s.as_bytes());
        words.push(w);
    }
    words.resize(VOCAB_ROWS as usize, Vec::new());
    debug_assert_eq!(words.len(), VOCAB_ROWS as usize);
    debug_assert_eq!(DEFINED as usize, BASE_VOCAB as usize + SPECIAL_TOKENS.len());
    Ok(words)
}

fn build_env() -> Result<TokEnv> {
    let words = trie_words()?;
    let info = TokRxInfo { tok_end_of_turn: Some(IM_END), ..TokRxInfo::new(VOCAB_ROWS, IM_END) };
    let trie = TokTrie::from(&info, &words);
    let tok = Tokenizer::with_options(tokenizer::Options { nfc: false, ..Default::default() })?;
    Ok(Arc::new(QwenEnv { trie, tok }))
}

/// The process's parser factory (the trie and llguidance's slicer, built once: ~1 s for this vocabulary).
pub fn factory() -> Result<&'static ParserFactory> {
    static F: OnceLock<std::result::Result<ParserFactory, String>> = OnceLock::new();
    let f = F.get_or_init(|| {
        let env = build_env().map_err(|e| e.to_string())?;
        let mut f = ParserFactory::new_simple(&env).map_err(|e| format!("grammar: {e}"))?;
        f.quiet();
        Ok(f)
    });
    f.as_ref().map_err(|e| Error::new(e.clone()))
}

/// A matcher of one constrained turn.
pub struct ToolMatcher {
    m: Matcher,
    /// tokens consumed so far
    pub consumed: usize,
    ended: bool,
}

impl ToolMatcher {
    /// The matcher of a turn calling `tools` in format `fmt`.
    pub fn new(tools: &[Tool], fmt: Format) -> Result<ToolMatcher> {
        ToolMatcher::from_lark(&lark(tools, fmt)?)
    }

    /// A matcher of any llguidance Lark grammar.
    pub fn from_lark(grammar: &str) -> Result<ToolMatcher> {
        let f = factory()?;
        let parser = f
            .create_parser(TopLevelGrammar::from_lark(grammar.to_string()))
            .map_err(|e| Error::new(format!("grammar: {e}")))?;
        let m = Matcher::new(Ok(parser));
        if let Some(e) = m.get_error() {
            bail!("grammar: {e}");
        }
        Ok(ToolMatcher { m, consumed: 0, ended: false })
    }

    /// The ids allowed next (the end-of-sequence `<|im_end|>` among them where the turn may end).
    /// (Where the grammar has no continuation left, llguidance stops by itself: the mask is then
    /// `<|im_end|>` alone.)
    pub fn mask(&mut self) -> Result<Mask> {
        if self.ended {
            bail!("grammar: no mask after the turn's end");
        }
        let v = self.m.compute_mask_or_eos().map_err(|e| Error::new(format!("grammar mask: {e}")))?;
        Mask::from_words(&v.as_slice()[..Mask::words_for(VOCAB_ROWS as usize)], VOCAB_ROWS as usize)
    }

    /// Advances over an emitted token; an error (the matcher unchanged) if the grammar does not allow it.
    pub fn advance(&mut self, token: u32) -> Result<()> {
        if self.ended {
            bail!("grammar: token {token} after the turn's end");
        }
        if self.m.is_stopped() {
            // stopped by itself (nothing may follow): only the end-of-sequence token
            if let Some(e) = self.m.get_error() {
                bail!("grammar: {e}");
            }
            if token != IM_END {
                bail!(
                    "grammar: token {token} is not allowed here: the turn can only end (after {} tokens)",
                    self.consumed
                );
            }
            self.ended = true;
            self.consumed += 1;
            return Ok(());
        }
        let n = self.m.try_consume_tokens(&[token]).map_err(|e| Error::new(format!("grammar: {e}")))?;
        if n != 1 {
            bail!("grammar: token {token} is not allowed here (after {} tokens)", self.consumed);
        }
        self.consumed += 1;
        self.ended = token == IM_END;
        Ok(())
    }

    /// The tokens the grammar forces next (exactly one continuation), possibly none. Not consumed.
    pub fn forced(&mut self) -> Vec<u32> {
        if self.ended {
            return Vec::new();
        }
        if self.m.is_stopped() {
            return vec![IM_END];
        }
        self.m.compute_ff_tokens()
    }

    /// Whether the turn may end here.
    pub fn is_accepting(&mut self) -> bool {
        !self.ended && (self.m.is_stopped() && self.m.get_error().is_none() || self.m.is_accepting().unwrap_or(false))
    }

    /// Whether the turn has ended (its end-of-sequence token consumed).
    pub fn is_stopped(&self) -> bool {
        self.ended
    }
}
