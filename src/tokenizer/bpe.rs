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

use super::vocab::{Vocab, NO_RANK as NONE};

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

/// tiktoken's algorithm. `parts[i] = (start of part i, rank of merging part i with part i+1, rank
/// of part i itself)`; the last two entries are sentinels. A merged part's own rank is the rank of
/// the pair that formed it, so the output needs no further lookups.
pub fn merge_scan(v: &Vocab, piece: &[u8], out: &mut Vec<u32>) {
    let n = piece.len();
    if n == 1 {
        out.push(v.byte_rank(piece[0]));
        return;
    }
    let mut parts: Vec<(usize, u32, u32)> = Vec::with_capacity(n + 1);
    let mut min = (NONE, usize::MAX);
    for i in 0..n - 1 {
        let r = v.pair_rank(piece[i], piece[i + 1]);
        if r < min.0 {
            min = (r, i);
        }
        parts.push((i, r, v.byte_rank(piece[i])));
    }
    parts.push((n - 1, NONE, v.byte_rank(piece[n - 1])));
    parts.push((n, NONE, NONE));
    let rank_at = |parts: &Vec<(usize, u32, u32)>, i: usize| {
        if i + 3 < parts.len() {
            v.rank(&piece[parts[i].0..parts[i + 3].0]).unwrap_or(NONE)
        } else {
            NONE
        }
    };
    while min.0 != NONE {
        let i = min.1;
        parts[i].2 = min.0;
        if i > 0 {
            parts[i - 1].1 = rank_at(&parts, i - 1);
        }
        parts[i].1 = rank_at(&parts, i);
        parts.remove(i + 1);
        min = (NONE, usize::MAX);
        for (j, &(_, r, _)) in parts[..parts.len() - 1].iter().enumerate() {
            if r < min.0 {
                min = (r, j);
            }
        }
    }
    out.extend(parts[..parts.len() - 1].iter().map(|p| p.2));
}

/// Same merges with a linked list of parts and a min-heap of (rank, start, end) candidates. A
/// candidate is stale when either of its parts has changed since it was pushed: it is current iff
/// the part at `start` is alive and it and its successor still end exactly at `end` (checked on pop).
pub fn merge_heap(v: &Vocab, piece: &[u8], out: &mut Vec<u32>) {
    let n = piece.len();
    // The part starting at byte s ends at next[s]; prev[s] is the start of the part before it.
    let mut next: Vec<usize> = (1..=n).collect();
    let mut prev: Vec<usize> = (0..n).map(|i| i.saturating_sub(1)).collect();
    let mut own: Vec<u32> = piece.iter().map(|&b| v.byte_rank(b)).collect();
    let mut alive = vec![true; n];
    let mut heap: BinaryHeap<Reverse<(u32, usize, usize)>> = BinaryHeap::with_capacity(n);
    for i in 0..n - 1 {
        let r = v.pair_rank(piece[i], piece[i + 1]);
        if r != NONE {
            heap.push(Reverse((r, i, i + 2)));
        }
    }
    while let Some(Reverse((r, s, end))) = heap.pop() {
        if !alive[s] || next[s] >= n || next[next[s]] != end {
            continue;
        }
        alive[next[s]] = false;
        next[s] = end;
        own[s] = r;
        if end < n {
            prev[end] = s;
        }
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
        out.push(own[s]);
        s = next[s];
    }
}
