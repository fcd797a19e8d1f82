//! The planned tensor-core consumer of the weight ring (`docs/megakernel_ring.md`, "Shared-memory
//! layout of an item"), modelled on the CPU before any kernel uses it: where a 3D tensor-map copy with
//! the 128-byte swizzle lands an item's bytes in shared memory, which bytes `ldmatrix.x4` then gives
//! each lane, and which k each of them is in an m16n8k16 fragment. The tests check that a warp's
//! fragments multiply out to the rows' dot products, that its `ldmatrix` rows are free of bank
//! conflicts, and that the two layouts one could write instead (no swizzle; the box with chunks
//! innermost) are 8-way conflicted.
//!
//! Owns: the layout arithmetic. Refuses: building tensor maps or launching anything (no kernel uses
//! this yet; the GPU must confirm the swizzle formula, taken from the PTX ISA's description of the
//! 128-byte swizzle mode: within 1,024-byte-aligned blocks, address bits 4-6 XOR bits 7-9).

/// Rows of an item (one m16n8k16 tile's M).
pub const ITEM_ROWS: usize = 16;
/// Bytes of one warp's column chunk of a row (one scale block's k extent for fp8).
pub const CHUNK: usize = 128;
/// Chunks of an item (a 1,024-wide k-group): one per consumer warp.
pub const CHUNKS: usize = 8;

/// How a box lands in shared memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Landing {
    /// Box {32 u32, 16 rows, 8 chunks} with the 128-byte swizzle: lines (128 B) ordered row fastest,
    /// so line = row + 16 chunk, and 16-byte unit u of a line lands at u ^ (line % 8).
    RowsThenChunksSwizzled,
    /// Box {32 u32, 8 chunks, 16 rows} with the swizzle: line = chunk + 8 row (the wrong order).
    ChunksThenRowsSwizzled,
    /// A dense [16 rows][1,024 B] tile, no swizzle (one 2D box of 256 u32 x 16 rows).
    Dense,
}

/// The shared-memory byte offset (from the item's 1,024-byte-aligned start) of byte `b` (0..128) of
/// chunk `c` of row `r`.
pub fn offset(l: Landing, r: usize, c: usize, b: usize) -> usize {
    let (unit, within) = (b / 16, b % 16);
    match l {
        Landing::RowsThenChunksSwizzled => {
            let line = r + ITEM_ROWS * c;
            line * CHUNK + ((unit ^ (line % 8)) * 16) + within
        }
        Landing::ChunksThenRowsSwizzled => {
            let line = c + CHUNKS * r;
            line * CHUNK + ((unit ^ (line % 8)) * 16) + within
        }
        Landing::Dense => r * CHUNK * CHUNKS + c * CHUNK + b,
    }
}

/// `ldmatrix.sync.aligned.m8n8.x4.b16` for warp chunk `c` and 16-byte column units `u0`, `u0 + 1`:
/// matrix i (rows 8 (i % 2) .. + 7, unit u0 + i / 2) takes its row addresses from lanes 8 i .. 8 i + 7
/// (lane 8 i + j gives row 8 (i % 2) + j). Returns, per matrix, the eight row addresses.
pub fn ldmatrix_rows(l: Landing, c: usize, u0: usize) -> [[usize; 8]; 4] {
    let mut a = [[0usize; 8]; 4];
    for (i, m) in a.iter_mut().enumerate() {
        for (j, slot) in m.iter_mut().enumerate() {
            *slot = offset(l, 8 * (i % 2) + j, c, 16 * (u0 + i / 2));
        }
    }
    a
}

/// Shared-memory wavefronts one matrix of an `ldmatrix` costs: its eight 16-byte rows are served
/// together when they fall on eight different 16-byte bank groups (address / 16 mod 8), else the
/// largest number of rows sharing one group.
pub fn wavefronts(rows: &[usize; 8]) -> usize {
    let mut per_group = [0usize; 8];
    for &a in rows {
        per_group[(a / 16) % 8] += 1;
    }
    per_group.into_iter().max().unwrap_or(0)
}

/// What lane `lane` holds after the `ldmatrix.x4` (register i from matrix i): the four bytes
/// 4 (lane % 4) .. + 3 of row lane / 4 of each matrix, as (row, byte within the chunk).
pub fn lane_bytes(lane: usize, u0: usize) -> [[(usize, usize); 4]; 4] {
    let (g, t) = (lane / 4, lane % 4);
    let mut v = [[(0, 0); 4]; 4];
    for (i, reg) in v.iter_mut().enumerate() {
        for (e, byte) in reg.iter_mut().enumerate() {
            *byte = (8 * (i % 2) + g, 16 * (u0 + i / 2) + 4 * t + e);
        }
    }
    v
}

/// The k slot (0..16) of the mma a byte of the lane's register fills: bytes 0, 1 widen to the bf16
/// pair (2t, 2t + 1) and bytes 2, 3 to (2t + 8, 2t + 9) (m16n8k16's A fragment: a0 a1 and a4 a5 for
/// row g, a2 a3 and a6 a7 for row g + 8), so that B's pairs are x's bytes in order: lane t's B
/// registers hold x[16 u + 4t .. 16 u + 4t + 3], the unit's consecutive elements.
pub fn k_slot(t: usize, e: usize) -> usize {
    2 * t + (e & 1) + 8 * (e >> 1)
}

/// The parameters of `cuTensorMapEncodeTiled` for one fp8 weight [rows][k] (checkpoint row order) seen
/// as the 3D tensor of `Landing::RowsThenChunksSwizzled`, innermost first: UINT32 elements, dims
/// {32, rows, k / 128}, byte strides of dims 1 and 2 {k, 128}, box {32, 16, 8} (one item: 16 rows x a
/// 1,024-wide k-group), element strides 1, the 128-byte swizzle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WeightBox {
    pub dims: [u64; 3],
    pub strides: [u64; 2],
    pub boxdim: [u32; 3],
}

/// The weight's box, or why it cannot have one: the driver's documented limits (strides multiples of
/// 16 below 2^40, box extents 1..=256, the swizzled inner extent at most 128 bytes, dims at most 2^32)
/// and the item's (rows a multiple of 16; k a multiple of 1,024, so that every item is a whole box:
/// the tiny preset's narrower widths are not).
pub fn weight_box(rows: u64, k: u64) -> crate::error::Result<WeightBox> {
    if rows == 0 || rows % ITEM_ROWS as u64 != 0 {
        crate::bail!("tensor map: {rows} rows are not a positive multiple of {ITEM_ROWS}");
    }
    if k == 0 || k % (CHUNK * CHUNKS) as u64 != 0 {
        crate::bail!("tensor map: width {k} is not a positive multiple of {}", CHUNK * CHUNKS);
    }
    let b = WeightBox {
        dims: [(CHUNK / 4) as u64, rows, k / CHUNK as u64],
        strides: [k, CHUNK as u64],
        boxdim: [(CHUNK / 4) as u32, ITEM_ROWS as u32, CHUNKS as u32],
    };
    if b.strides.iter().any(|&s| s % 16 != 0 || s >= 1 << 40) {
        crate::bail!("tensor map: strides {:?} must be multiples of 16 below 2^40", b.strides);
    }
    if b.dims.iter().any(|&d| d > 1 << 32) {
        crate::bail!("tensor map: dims {:?} above 2^32", b.dims);
    }
    if b.boxdim.iter().zip(&b.dims).any(|(&x, &d)| x == 0 || x > 256 || x as u64 > d) || b.boxdim[0] * 4 > 128 {
        crate::bail!("tensor map: box {:?} outside the limits for dims {:?}", b.boxdim, b.dims);
    }
    Ok(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_27b_fp8_weight_has_a_box_and_bad_shapes_are_refused() {
        // The 27B's fp8 projections: (rows, k).
        for (rows, k) in
            [(10240, 5120), (6144, 5120), (5120, 6144), (17408, 5120), (5120, 17408), (12288, 5120), (1024, 5120)]
        {
            let b = weight_box(rows, k).unwrap();
            assert_eq!(b.boxdim.iter().map(|&x| x as u64).product::<u64>() * 4, 16 * 1024, "16 KB an item");
            assert_eq!(b.dims[1] * b.dims[2] * b.dims[0] * 4, rows * k, "the box tiles cover the weight");
        }
        assert!(weight_box(100, 5120).is_err(), "rows not a multiple of 16");
        assert!(weight_box(64, 768).is_err(), "tiny's width: not whole items");
        assert!(weight_box(0, 1024).is_err());
    }

    /// The warp's mma over chunk c computed from the modelled fragments equals the rows' dot products
    /// over the chunk's 128 k (integers: exact), and every byte of the chunk is used exactly once.
    #[test]
    fn fragments_multiply_out_to_the_rows_dot_products() {
        let w = |r: usize, k: usize| ((r * 131 + k * 29) % 17) as i64 - 8;
        let x = |k: usize| ((k * 7) % 13) as i64 - 6;
        for c in 0..CHUNKS {
            let mut acc = [0i64; ITEM_ROWS];
            let mut used = vec![0u8; ITEM_ROWS * CHUNK];
            for u0 in (0..CHUNK / 16).step_by(2) {
                for m in 0..2 {
                    // mma m (unit u0 + m): A from matrices 2m (rows 0-7) and 2m + 1 (rows 8-15).
                    let u = u0 + m;
                    let mut a = [[0i64; 16]; ITEM_ROWS];
                    for lane in 0..32 {
                        let bytes = lane_bytes(lane, u0);
                        for half in 0..2 {
                            for (e, &(r, b)) in bytes[2 * m + half].iter().enumerate() {
                                used[r * CHUNK + b] += 1;
                                a[r][k_slot(lane % 4, e)] = w(r, c * CHUNK + b);
                            }
                        }
                    }
                    // B: column 0 holds x; lane t's registers x[16 u + 4t ..], slot order as A's.
                    let mut bcol = [0i64; 16];
                    for t in 0..4 {
                        for e in 0..4 {
                            bcol[k_slot(t, e)] = x(c * CHUNK + 16 * u + 4 * t + e);
                        }
                    }
                    for (r, row) in a.iter().enumerate() {
                        acc[r] += row.iter().zip(&bcol).map(|(p, q)| p * q).sum::<i64>();
                    }
                }
            }
            assert!(used.iter().all(|&n| n == 1), "chunk {c}: a byte used other than once");
            for (r, &got) in acc.iter().enumerate() {
                let want: i64 = (c * CHUNK..(c + 1) * CHUNK).map(|k| w(r, k) * x(k)).sum();
                assert_eq!(got, want, "chunk {c} row {r}");
            }
        }
    }

    #[test]
    fn the_swizzled_rows_first_box_is_free_of_bank_conflicts_and_the_others_are_not() {
        let worst = |l: Landing| {
            let mut m = 0;
            for c in 0..CHUNKS {
                for u0 in (0..CHUNK / 16).step_by(2) {
                    for rows in ldmatrix_rows(l, c, u0) {
                        m = m.max(wavefronts(&rows));
                    }
                }
            }
            m
        };
        assert_eq!(worst(Landing::RowsThenChunksSwizzled), 1);
        // Negative controls: the layouts one might write instead.
        assert_eq!(worst(Landing::Dense), 8);
        assert_eq!(worst(Landing::ChunksThenRowsSwizzled), 8);
    }

    #[test]
    fn the_swizzled_landing_is_a_permutation_of_the_item_and_keeps_a_warps_chunk_contiguous() {
        let mut seen = vec![false; ITEM_ROWS * CHUNK * CHUNKS];
        for r in 0..ITEM_ROWS {
            for c in 0..CHUNKS {
                for b in 0..CHUNK {
                    let o = offset(Landing::RowsThenChunksSwizzled, r, c, b);
                    assert!(!seen[o], "offset {o} twice");
                    seen[o] = true;
                    assert_eq!(o / (ITEM_ROWS * CHUNK), c, "chunk {c}'s 2 KB");
                }
            }
        }
        assert!(seen.into_iter().all(|s| s));
    }
}
