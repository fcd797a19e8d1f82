//! Streaming decode: ids arrive one at a time, text leaves only as complete UTF-8 characters.
//!
//! Owns: holding back the bytes of a character that is split across tokens (a 3-byte CJK character
//! can be two tokens), and replacing bytes that can never become UTF-8 with U+FFFD as soon as that is
//! certain.
//! Refuses: padding and out-of-range ids (the `Tokenizer` rejects them, naming the id).
//! Contract (tested): the concatenation of everything `push` and `finish` return equals the lossy
//! decode of all the bytes at once (the same maximal-subpart replacement as Python's "replace").

use super::Tokenizer;
use crate::error::Result;

pub struct StreamDecoder<'a> {
    tok: &'a Tokenizer,
    pending: Vec<u8>,
}

impl<'a> StreamDecoder<'a> {
    pub fn new(tok: &'a Tokenizer) -> Self {
        StreamDecoder { tok, pending: Vec::new() }
    }

    /// Adds one id; returns the text that is now complete (possibly empty).
    pub fn push(&mut self, id: u32) -> Result<String> {
        self.pending.extend_from_slice(self.tok.token_bytes(id)?);
        Ok(self.drain(false))
    }

    /// End of stream: an unfinished character at the end becomes U+FFFD.
    pub fn finish(&mut self) -> String {
        self.drain(true)
    }

    fn drain(&mut self, at_end: bool) -> String {
        let mut out = String::new();
        let mut start = 0;
        loop {
            match std::str::from_utf8(&self.pending[start..]) {
                Ok(s) => {
                    out.push_str(s);
                    start = self.pending.len();
                    break;
                }
                Err(e) => {
                    let good = start + e.valid_up_to();
                    // Valid by construction: from_utf8 vouched for these bytes.
                    out.push_str(&String::from_utf8_lossy(&self.pending[start..good]));
                    match e.error_len() {
                        Some(n) => {
                            out.push('\u{FFFD}');
                            start = good + n;
                        }
                        // An incomplete character at the end: wait for more bytes unless there are none.
                        None if at_end => {
                            out.push('\u{FFFD}');
                            start = self.pending.len();
                            break;
                        }
                        None => {
                            start = good;
                            break;
                        }
                    }
                }
            }
        }
        self.pending.drain(..start);
        out
    }
}
