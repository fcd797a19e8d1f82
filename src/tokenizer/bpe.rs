//! Rank-ordered byte-pair merging inside one pre-tokenizer chunk.
//!
//! Owns: turning one chunk's bytes into token ids exactly as tiktoken's `byte_pair_encode` does:
//! a chunk that is itself a token is one id; otherwise start from single bytes and repeatedly merge
//! the adjacent pair whose concatenation has the lowest rank, the leftmost such pair on ties, until
//! no adjacent pair is a token.
//! Refuses: chunking (the pre-tokenizer's job) and anything about text.
//! Two implementations with one contract: a linear scan (tiktoken's, fastest on short chunks) and a
//! heap with lazy deletion for long chunks (whitespace runs, long symbol runs) where the scan is
//! quadratic. Both break ties towards the leftmost pair, so they give the same ids (tested).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::vocab::Vocab;

const NONE: u32 = u32::MAX;

/// Chunks at least this long use the heap: below it the scan's O(n^2) is cheaper than heap upkeep.
pub const HEAP_FROM: usize = 64;

/// Appends the ids of one chunk to `out`.
pub fn encode_piece(v: &Vocab, piece: &[u8], out: &mut Vec<u32>) {
    if let Some(r) = v.rank(piece) {
        out.push(r);
    } else if piece.len() < HEAP_FROM {
        merge_scan(v, piece, out);
    } else {
        merge_heap(v, piece, out);
    }
}

/// tiktoken's algorithm: `parts[i] = (start of part i, rank of merging part i with part i+1)`.
pub fn merge_scan(v: &Vocab, piece: &[u8], out: &mut Vec<u32>) {
    if piece.len() == 1 {
        out.extend(v.rank(piece));
        return;
    }
    let mut parts: Vec<(usize, u32)> = Vec::with_capacity(piece.len() + 1);
    let mut min = (NONE, usize::MAX);
    for i in 0..piece.len() - 1 {
        let r = v.rank(&piece[i..i + 2]).unwrap_or(NONE);
        if r < min.0 {
            min = (r, i);
        }
        parts.push((i, r));
    }
    parts.push((piece.len() - 1, NONE));
    parts.push((piece.len(), NONE));
    let rank_at = |parts: &Vec<(usize, u32)>, i: usize| {
        if i + 3 < parts.len() {
            v.rank(&piece[parts[i].0..parts[i + 3].0]).unwrap_or(NONE)
        } else {
            NONE
        }
    };
    while min.0 != NONE {
        let i = min.1;
        if i > 0 {
            parts[i - 1].1 = rank_at(&parts, i - 1);
        }
        parts[i].1 = rank_at(&parts, i);
        parts.remove(i + 1);
        min = (NONE, usize::MAX);
        for (j, &(_, r)) in parts[..parts.len() - 1].iter().enumerate() {
            if r < min.0 {
                min = (r, j);
            }
        }
    }
    for w in parts.windows(2) {
        out.extend(v.rank(&piece[w[0].0..w[1].0]));
    }
}

/// Same merges with a linked list of parts and a min-heap of (rank, start) candidates. A candidate is
/// stale when either of its parts has changed since it was pushed; parts are identified by their
/// start byte, and a pair is still current when both ends are unchanged (checked on pop).
pub fn merge_heap(v: &Vocab, piece: &[u8], out: &mut Vec<u32>) {
    let n = piece.len();
    // Part starting at byte s ends at next[s]; prev[s] is the start of the part before; alive[s].
    let mut next: Vec<usize> = (1..=n).collect();
    let mut prev: Vec<usize> = (0..n).map(|i| i.wrapping_sub(1)).collect();
    let mut alive = vec![true; n];
    let mut heap: BinaryHeap<Reverse<(u32, usize, usize)>> = BinaryHeap::with_capacity(n);
    for i in 0..n - 1 {
        if let Some(r) = v.rank(&piece[i..i + 2]) {
            heap.push(Reverse((r, i, i + 2)));
        }
    }
    while let Some(Reverse((r, s, end))) = heap.pop() {
        // Current iff the part at s is alive and the pair still spans exactly [s, end).
        if !alive[s] || next[s] >= n || next[next[s]] != end {
            continue;
        }
        let mid = next[s];
        alive[mid] = false;
        next[s] = end;
        if end < n {
            prev[end] = s;
        }
        let _ = r;
        if s > 0 {
            let p = prev[s];
            if let Some(r) = v.rank(&piece[p..end]) {
                heap.push(Reverse((r, p, end)));
            }
        }
        if end < n {
            let e2 = next[end];
            if let Some(r) = v.rank(&piece[s..e2]) {
                heap.push(Reverse((r, s, e2)));
            }
        }
    }
    let mut s = 0;
    while s < n {
        out.extend(v.rank(&piece[s..next[s]]));
        s = next[s];
    }
}
