//! The fp8 GEMV's load-time weight layout (issue 25): a weight of N x K bytes (row-major in the
//! checkpoint) re-laid out ONCE into chunk-major fragment order, so that one bulk copy brings a whole
//! chunk into shared memory and a warp's shared-memory reads are 512 contiguous bytes (H200.md, "GEMV
//! probes": 81-83 % of the read bandwidth this way, 54 % from row-major bytes).
//!
//! A chunk is 32 rows x `kc` k-bytes (kc = 1,024, or the largest of 512 / 256 / 128 dividing K: the
//! small presets' K of 256 and 512), chunks ordered row group by row group, k-range by k-range. Inside a
//! chunk, warp tile w = h * T + t (T = kc / 128 k-tiles; h the 16-row half, t the k-tile), 2 KB each,
//! stored as [load i][lane l][16 B]: lane l = 4 g + c owns rows g and g + 8 of its tile, load i = (row
//! g or g + 8) x (the first or second 64 k-bytes), its 16 bytes two runs of 8, at k = 64 (i & 1) + 8 c
//! and 64 (i & 1) + 32 + 8 c (the reduction axis permuted as the mma's lanes take it; x is permuted the
//! same way, so the dot product is the same). So the 4 lanes c of a row read x for one 8-element run
//! at k = 32 j + 8 c: 64 contiguous bytes, whole sectors (issue 27: an M-row step reads down_proj's x
//! from L2 for every tile; 16-byte pieces 32 bytes apart, the layout before, fetched every sector
//! twice). A 16 x 128 tile lies inside one 128 x 128 block scale.
//!
//! Owns: the byte map (both ways) and the transform. Refuses: shapes that are not multiples of 32 rows
//! and 128 columns.

use crate::error::Result;

/// Rows of a chunk (two 16-row mma tiles; the program's fp8 unit rows come in multiples of it).
pub use crate::isa::access::CHUNK_ROWS;
/// A warp tile's bytes: 16 rows x 128 k-bytes.
pub const TILE_BYTES: usize = 2048;

/// The chunk shape of a weight of `k` columns: the k-bytes of one chunk.
pub fn chunk_k(k: usize) -> usize {
    [1024, 512, 256, 128].into_iter().find(|c| k % c == 0).unwrap_or(128)
}

/// Checks a weight's shape takes the layout.
pub fn check(n: usize, k: usize) -> Result<()> {
    if n == 0 || k == 0 || n % CHUNK_ROWS != 0 || k % 128 != 0 {
        crate::bail!("gemv layout: a {n} x {k} weight (rows must be a multiple of {CHUNK_ROWS}, columns of 128)");
    }
    Ok(())
}

/// The byte offset in the chunk layout of the checkpoint's byte (row, col) of an n x k weight.
pub fn offset(k: usize, row: usize, col: usize) -> usize {
    let kc = chunk_k(k);
    let tiles = kc / 128;
    let chunk = (row / CHUNK_ROWS) * (k / kc) + col / kc;
    let (r, c) = (row % CHUNK_ROWS, col % kc);
    let (h, t) = (r / 16, c / 128);
    let (g, hi) = (r % 8, (r % 16) / 8); // row g or g + 8 of the tile
    let (half, c64) = ((c % 128) / 64, c % 64);
    let (cq, byte) = ((c64 % 32) / 8, 8 * (c64 / 32) + c64 % 8);
    let (i, lane) = (hi * 2 + half, g * 4 + cq);
    chunk * CHUNK_ROWS * kc + (h * tiles + t) * TILE_BYTES + (i * 32 + lane) * 16 + byte
}

/// The checkpoint position (row, col) of chunk-layout byte `p` of a weight of `k` columns (the inverse
/// of `offset`).
pub fn position(k: usize, p: usize) -> (usize, usize) {
    let kc = chunk_k(k);
    let tiles = kc / 128;
    let (chunk, in_chunk) = (p / (CHUNK_ROWS * kc), p % (CHUNK_ROWS * kc));
    let (w, in_tile) = (in_chunk / TILE_BYTES, in_chunk % TILE_BYTES);
    let (h, t) = (w / tiles, w % tiles);
    let (i, lane, byte) = (in_tile / 512, (in_tile / 16) % 32, in_tile % 16);
    let (g, cq) = (lane / 4, lane % 4);
    let row = (chunk / (k / kc)) * CHUNK_ROWS + h * 16 + g + 8 * (i / 2);
    let col = (chunk % (k / kc)) * kc + t * 128 + 64 * (i % 2) + 32 * (byte / 8) + 8 * cq + byte % 8;
    (row, col)
}

/// A row-major n x k weight in the chunk layout (8-byte pieces moved whole: `offset` of a piece's
/// first byte, the rest follow in order). Row groups of 32 are contiguous in both layouts, so the
/// threads of the machine take whole row groups (the 27B's 24 GB of fp8 weights at load).
pub fn to_chunks(src: &[u8], n: usize, k: usize) -> Result<Vec<u8>> {
    check(n, k)?;
    if src.len() != n * k {
        crate::bail!("gemv layout: {} bytes for a {n} x {k} weight", src.len());
    }
    let mut out = vec![0u8; n * k];
    let group = CHUNK_ROWS * k;
    let threads = if n * k >= 1 << 22 { std::thread::available_parallelism().map_or(1, |t| t.get()) } else { 1 };
    let per = (n / CHUNK_ROWS).div_ceil(threads) * group;
    std::thread::scope(|s| {
        for (dst, srcs) in out.chunks_mut(per).zip(src.chunks(per)) {
            s.spawn(move || {
                for (row, line) in srcs.chunks(k).enumerate() {
                    for col in (0..k).step_by(8) {
                        // offsets within this thread's row groups: they start at a row group
                        let at = offset(k, row, col);
                        dst[at..at + 8].copy_from_slice(&line[col..col + 8]);
                    }
                }
            });
        }
    });
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::config::ModelConfig;
    use crate::model::tensors::{expected_tensors, Dt};

    /// Every fp8 weight shape of every preset: the map is a bijection onto 0..n k, 8-byte pieces stay
    /// whole and in order, and the 4 lanes of a row hold one 8-byte run each of 32 contiguous k (the
    /// kernels' x loads: 64 contiguous bytes).
    #[test]
    fn the_layout_maps_back_to_the_checkpoint_for_every_shape() {
        let mut shapes = std::collections::BTreeSet::new();
        for p in ["tiny", "small", "qwen3.5-27b"] {
            let cfg = ModelConfig::preset(p).unwrap();
            for s in expected_tensors(&cfg).iter().filter(|s| s.dtype == Dt::F8E4M3) {
                shapes.insert((s.shape[0], s.shape[1]));
            }
        }
        assert!(shapes.len() >= 8, "{shapes:?}");
        for &(n, k) in &shapes {
            check(n, k).unwrap();
            // every row of the first and last chunk rows, every column (the whole map where it is small)
            let rows: Vec<usize> = if n * k <= 1 << 22 { (0..n).collect() } else { (0..64).chain(n - 32..n).collect() };
            let mut seen = vec![false; if n * k <= 1 << 22 { n * k } else { 0 }];
            for &row in &rows {
                for col in 0..k {
                    let p = offset(k, row, col);
                    assert!(p < n * k, "{n}x{k} ({row}, {col}) -> {p}");
                    assert_eq!(position(k, p), (row, col), "{n}x{k}");
                    if col % 8 != 0 {
                        assert_eq!(p, offset(k, row, col - 1) + 1, "an 8-byte piece stays whole");
                    }
                    // k = 32 j + 8 c + e (e < 8) sits in lane c's piece (same row, load, tile) at
                    // byte 8 (j % 2) + e: the lanes c of a row take 32 contiguous k
                    if col % 32 >= 8 {
                        assert_eq!(p, offset(k, row, col - 8) + 16, "lane c + 1 holds the next 8 k");
                    }
                    if let Some(s) = seen.get_mut(p) {
                        assert!(!*s, "{n}x{k}: byte {p} twice");
                        *s = true;
                    }
                }
            }
            assert!(seen.iter().all(|&s| s), "{n}x{k}: the map covers every byte");
        }
    }

    /// A weight big enough for the threaded transform (the 27B's are): every byte lands where `offset`
    /// says, whichever thread moved it.
    #[test]
    fn the_threaded_transform_moves_every_byte() {
        let (n, k) = (2112, 2048); // 66 row groups over the machine's threads, 4.3 M bytes
        assert!(n * k >= 1 << 22);
        let src: Vec<u8> = (0..n * k).map(|i| (i * 31 + i / 4093) as u8).collect();
        let out = to_chunks(&src, n, k).unwrap();
        for row in 0..n {
            for col in 0..k {
                assert_eq!(out[offset(k, row, col)], src[row * k + col], "({row}, {col})");
            }
        }
    }

    /// The kernels' copy of `chunk_k` (megakernel/gemv.cuh) picks the same widths in the same order.
    #[test]
    fn the_kernels_chunk_width_is_this_one() {
        let src = crate::exec::gpu::device::source();
        assert!(src.contains("return K % 1024 == 0 ? 1024 : K % 512 == 0 ? 512 : K % 256 == 0 ? 256 : 128;"));
        for k in [256, 512, 768, 1280, 5120, 6144, 17408, 384] {
            let want = [1024, 512, 256].into_iter().find(|c| k % c == 0).unwrap_or(128);
            assert_eq!(chunk_k(k), want, "{k}");
        }
    }

    #[test]
    fn the_transform_moves_every_byte_and_refuses_bad_shapes() {
        let (n, k) = (64, 1280); // two row groups, k = 5 x 256
        assert_eq!(chunk_k(k), 256);
        let src: Vec<u8> = (0..n * k).map(|i| (i * 7 + i / 251) as u8).collect();
        let out = to_chunks(&src, n, k).unwrap();
        for (p, &b) in out.iter().enumerate() {
            let (r, c) = position(k, p);
            assert_eq!(b, src[r * k + c]);
        }
        // load 1 of warp tile 0 of chunk 0: rows 0-7, k-bytes 64-127; lane 0's second run at k 32,
        // lane 1's first at k 8
        assert_eq!(position(k, 512), (0, 64));
        assert_eq!(position(k, 8), (0, 32));
        assert_eq!(position(k, 16), (0, 8));
        assert_eq!(position(k, 16 * 4), (1, 0));
        assert!(to_chunks(&src, 48, k).is_err() && to_chunks(&src[1..], n, k).is_err());
        assert!(check(64, 100).unwrap_err().to_string().contains("64 x 100"));
    }
}
