//! CPU reference ops: the arithmetic of one decode step, op by op, with every rounding point of the
//! oracle (transformers 5.17 `modeling_qwen3_5.py`, bf16 model dtype) reproduced and commented.
//!
//! Owns: the canonical summation orders (each marked `ORDER:`), which the program interpreter reuses
//! so that it matches this reference bit for bit. Ops work on row ranges so an instruction that owns
//! a slice of rows calls the same function on its slice.
//! Refuses: hidden state (every op is a pure function of its arguments).

use std::borrow::Cow;

use super::numerics::{bf, bf16_to_f32, e4m3_group, e4m3_table};

/// ORDER: a group's partial is the sequential sum over its 128-wide tiles of the tile dot products;
/// a row is the sequential sum of its k-group partials (`KGROUP`, part of the program contract).
pub use crate::isa::access::KGROUP;
pub const TILE: usize = 128;

/// A linear layer's weight `[rows, cols]` in checkpoint byte order.
pub enum LinearW<'a> {
    Bf16(Cow<'a, [u16]>),
    /// e4m3 codes and the `[rows/128, cols/128]` dequant multipliers (`weight_scale_inv`) as f32;
    /// the weight is `bf16(e4m3 * scale)`.
    Fp8 {
        w: &'a [u8],
        scales: Vec<f32>,
    },
}

pub struct Linear<'a> {
    pub rows: usize,
    pub cols: usize,
    pub w: LinearW<'a>,
    pub order: SumOrder,
    pub act: Activations,
}

/// What an fp8 linear multiplies its weights with (bf16 linears ignore it: they stay W16A16, as the
/// checkpoint's unquantised modules do in every engine).
/// - `Bf16` (exact mode, the default): the bf16 activations against `bf16(e4m3 * scale)`, the oracle's
///   goldens (the checkpoint dequantised up front, W8A16).
/// - `Fp8Dynamic` (fast mode, issue 28): the checkpoint's `activation_scheme: dynamic`, as HF's
///   `FP8Linear` and the production engines run it (W8A8, spec section 3.8): per token and per 128-wide
///   group of the input, `s = max(max|x|, 1e-10) / 448` (vLLM's epsilon; HF has none, so an all-zero
///   group would give NaN and a zeroed output row there), `x_q = e4m3(x / s)` (round to nearest even,
///   clamped to +-448); a 128-wide tile's fp32 dot of the e4m3 values, times `s`, times the weight's block
///   scale (HF's Triton kernel's `dot * a_s * b_s`, left to right), the tiles and k-groups summed in the
///   canonical order (`SumOrder`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Activations {
    #[default]
    Bf16,
    Fp8Dynamic,
}

/// Fast mode's quantised input: the e4m3 values (as f32, exact) and the scale of each 128-wide tile.
struct QuantX {
    q: Vec<f32>,
    s: Vec<f32>,
}

impl QuantX {
    fn new(x: &[f32]) -> QuantX {
        let mut q = vec![0f32; x.len()];
        let s = x.chunks(TILE).zip(q.chunks_mut(TILE)).map(|(xt, qt)| e4m3_group(xt, qt)).collect();
        QuantX { q, s }
    }
}

/// The order a linear's fp32 dot products are summed in. `Canonical` is the program contract (the
/// interpreter and both GPU paths follow it); `Reversed` is an equally valid order (k-groups and the
/// tiles within a group summed last to first) that exists only to measure how far a legitimate
/// reordering moves the outputs: the noise twin (`reference-reordered`) that calibrates tolerances
/// between paths that do not promise identical bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SumOrder {
    #[default]
    Canonical,
    Reversed,
}

impl SumOrder {
    /// The index of the `i`-th of `n` terms to add.
    #[inline(always)]
    fn nth(self, i: usize, n: usize) -> usize {
        match self {
            SumOrder::Canonical => i,
            SumOrder::Reversed => n - 1 - i,
        }
    }
}

/// ORDER: the dot product of one 128-wide tile: 16 lanes, lane l sums elements l, l+16, ... in
/// order; the lanes are then folded pairwise (l += l+8, l += l+4, l += l+2, l += l+1).
#[inline(always)]
fn tile_dot(w: impl Fn(usize) -> f32, x: &[f32]) -> f32 {
    let mut lanes = [0f32; 16];
    for j in 0..TILE / 16 {
        for (l, lane) in lanes.iter_mut().enumerate() {
            let i = j * 16 + l;
            *lane += w(i) * x[i];
        }
    }
    for step in [8, 4, 2, 1] {
        for l in 0..step {
            lanes[l] += lanes[l + step];
        }
    }
    lanes[0]
}

impl Linear<'_> {
    /// The partial of row `r` over k-group `g` (see `KGROUP`).
    #[inline]
    pub fn group_partial(&self, x: &[f32], r: usize, g: usize) -> f32 {
        match (&self.w, self.act) {
            // fast mode: the group's tiles quantised here (a tile's quantisation is its own: the bits of
            // `gemv`'s, which quantises the input once)
            (LinearW::Fp8 { .. }, Activations::Fp8Dynamic) => {
                let k0 = g * KGROUP;
                let k1 = (k0 + KGROUP).min(self.cols);
                let mut qx = QuantX { q: vec![0f32; self.cols], s: vec![0f32; self.cols.div_ceil(TILE)] };
                for t in (k0..k1).step_by(TILE) {
                    qx.s[t / TILE] = e4m3_group(&x[t..t + TILE], &mut qx.q[t..t + TILE]);
                }
                self.group_partial_q(x, Some(&qx), r, g)
            }
            _ => self.group_partial_q(x, None, r, g),
        }
    }

    /// `group_partial` with fast mode's quantised input given (`qx`: every tile of the group).
    #[inline]
    fn group_partial_q(&self, x: &[f32], qx: Option<&QuantX>, r: usize, g: usize) -> f32 {
        let k0 = g * KGROUP;
        let k1 = (k0 + KGROUP).min(self.cols);
        let n_tiles = (k1 - k0).div_ceil(TILE);
        let tiles = (0..n_tiles).map(|i| k0 + TILE * self.order.nth(i, n_tiles));
        let mut acc = 0f32;
        match &self.w {
            LinearW::Bf16(w) => {
                let row = &w[r * self.cols..(r + 1) * self.cols];
                for t in tiles {
                    acc += tile_dot(|i| bf16_to_f32(row[t + i]), &x[t..t + TILE]);
                }
            }
            LinearW::Fp8 { w, scales } => {
                let lut = e4m3_table();
                let row = &w[r * self.cols..(r + 1) * self.cols];
                let srow = &scales[(r / TILE) * self.cols.div_ceil(TILE)..];
                for t in tiles {
                    let sc = srow[t / TILE];
                    match qx {
                        // W8A8: the e4m3 products' fp32 sum, times the input's then the weight's scale
                        Some(qx) => {
                            acc += tile_dot(|i| lut[row[t + i] as usize], &qx.q[t..t + TILE]) * qx.s[t / TILE] * sc
                        }
                        // The block scale multiplies the fp32 tile sum once (seed 4.3), not each weight.
                        // The oracle's weights: W = bf16(fp8 * scale), one rounding per weight (the
                        // checkpoint dequantised to bf16 up front). On the GPU this is the multiply that
                        // widens e4m3 to bf16 anyway, with the scale folded in.
                        None => acc += tile_dot(|i| bf(lut[row[t + i] as usize] * sc), &x[t..t + TILE]),
                    }
                }
            }
        }
        acc
    }

    pub fn n_groups(&self) -> usize {
        self.cols.div_ceil(KGROUP)
    }

    /// fp32 dot product of row `r` (before the output rounding).
    #[inline]
    pub fn row_dot(&self, x: &[f32], r: usize) -> f32 {
        let qx = self.quantized(x);
        self.row_dot_q(x, qx.as_ref(), r)
    }

    /// Fast mode's quantised input, once for every row (None in exact mode or for a bf16 weight).
    fn quantized(&self, x: &[f32]) -> Option<QuantX> {
        (matches!(self.w, LinearW::Fp8 { .. }) && self.act == Activations::Fp8Dynamic).then(|| QuantX::new(x))
    }

    fn row_dot_q(&self, x: &[f32], qx: Option<&QuantX>, r: usize) -> f32 {
        let mut y = 0f32;
        let n = self.n_groups();
        for i in 0..n {
            y += self.group_partial_q(x, qx, r, self.order.nth(i, n));
        }
        y
    }

    /// `bf(W x)` for rows [r0, r1) into `out` (bf16 Linear: fp32 accumulation, one rounding).
    pub fn gemv_rows(&self, x: &[f32], r0: usize, r1: usize, out: &mut [f32]) {
        let qx = self.quantized(x);
        for (o, r) in out.iter_mut().zip(r0..r1) {
            *o = bf(self.row_dot_q(x, qx.as_ref(), r));
        }
    }

    /// `bf(W x)` for all rows, split over threads when large (rows are independent: same bits).
    pub fn gemv(&self, x: &[f32]) -> Vec<f32> {
        assert_eq!(x.len(), self.cols, "gemv input length");
        let mut out = vec![0f32; self.rows];
        let threads = if self.rows * self.cols >= 1 << 22 {
            std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
        } else {
            1
        };
        let chunk = self.rows.div_ceil(threads);
        std::thread::scope(|s| {
            for (i, o) in out.chunks_mut(chunk).enumerate() {
                s.spawn(move || self.gemv_rows(x, i * chunk, i * chunk + o.len(), o));
            }
        });
        out
    }
}

/// ORDER: sequential sum of squares in index order (the l2norm of q/k heads).
pub fn sum_squares(x: &[f32]) -> f32 {
    let mut s = 0f32;
    for v in x {
        s += v * v;
    }
    s
}

/// ORDER: the sum of squares as a block of `lanes` GPU threads takes it: lane t sums elements
/// t, t + lanes, ... in order; each warp of 32 lanes folds by butterfly (xor 16, 8, 4, 2, 1); the
/// warp totals are added in warp order. `lanes` = 256 for the hidden-state norms (a block), 32 for
/// per-head norms (a warp). The GPU kernels reduce in the same order (by construction; the op check
/// compares them within its tolerance).
pub fn sum_squares_lanes(x: &[f32], lanes: usize) -> f32 {
    let mut part = vec![0f32; lanes];
    for (i, v) in x.iter().enumerate() {
        part[i % lanes] += v * v;
    }
    fold_lanes(&mut part)
}

/// ORDER: the sum of squares as `lanes` GPU threads take it in chunks of `chunk` consecutive elements:
/// lane t sums chunks t, t + lanes, ... (each chunk's elements in order), then the warp butterflies
/// and warps in order as `sum_squares_lanes`. The block norm reads 16-byte chunks (`chunk` 8, 256
/// lanes); the gated norm bf16 pairs (`chunk` 2, 32 lanes). `x.len()` must be a multiple of `chunk`.
pub fn sum_squares_chunks(x: &[f32], lanes: usize, chunk: usize) -> f32 {
    let mut part = vec![0f32; lanes];
    for (c, xs) in x.chunks(chunk).enumerate() {
        for v in xs {
            part[c % lanes] += v * v;
        }
    }
    fold_lanes(&mut part)
}

/// The same block order for plain values: lane t sums values t, t + lanes, ... in order.
pub fn sum_lanes(x: &[f32], lanes: usize) -> f32 {
    let mut part = vec![0f32; lanes];
    for (i, v) in x.iter().enumerate() {
        part[i % lanes] += v;
    }
    fold_lanes(&mut part)
}

/// ORDER: each warp of 32 lane partials folds by butterfly (xor 16, 8, 4, 2, 1), then the warp totals
/// are added in warp order.
fn fold_lanes(part: &mut [f32]) -> f32 {
    let mut total = 0f32;
    for warp in part.chunks_mut(32) {
        total += butterfly(warp);
    }
    total
}

/// A warp's butterfly sum (xor 16, 8, 4, 2, 1) of 32 lane values: lane 0's result.
pub fn butterfly(warp: &mut [f32]) -> f32 {
    for o in [16, 8, 4, 2, 1] {
        let before = warp.to_vec();
        for (l, w) in warp.iter_mut().enumerate() {
            *w = before[l] + before[l ^ o];
        }
    }
    warp[0]
}

/// ORDER: a warp's dot product: lane l sums the products of its contiguous chunk (elements
/// l * n/32 .. (l + 1) * n/32) in order, then the butterfly. `n` must be a multiple of 32.
pub fn dot_warp(a: &[f32], b: &[f32]) -> f32 {
    let chunk = a.len() / 32;
    let mut part = [0f32; 32];
    for (l, p) in part.iter_mut().enumerate() {
        for i in l * chunk..(l + 1) * chunk {
            *p += a[i] * b[i];
        }
    }
    butterfly(&mut part)
}

/// Threads of a block (the GPU kernels' block size).
pub const BLOCK_LANES: usize = 256;

/// `Qwen3_5RMSNorm`: `bf(x * rsqrt(mean(x^2) + eps) * (1 + w))`, all in fp32, one rounding.
/// mean = sum * (1/n) (CUDA's mean multiplies by the reciprocal); rsqrt = 1/sqrt; the sum of squares
/// in block order (`sum_squares_lanes` with 256 lanes): the per-head q/k norms (attention's head_norm).
pub fn rms_norm_offset(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let ss = sum_squares_lanes(x, BLOCK_LANES);
    rms_norm_with(x, w, eps, ss, out);
}

/// `rms_norm_offset` for a hidden state, its sum of squares as the GPU's block_rmsnorm takes it:
/// 16-byte chunks (8 elements) over 256 lanes when the width is a multiple of 8, else element-strided.
pub fn rms_norm_block(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let ss = if x.len() % 8 == 0 { sum_squares_chunks(x, BLOCK_LANES, 8) } else { sum_squares_lanes(x, BLOCK_LANES) };
    rms_norm_with(x, w, eps, ss, out);
}

fn rms_norm_with(x: &[f32], w: &[f32], eps: f32, ss: f32, out: &mut [f32]) {
    let inv_n = 1.0 / x.len() as f32;
    let rstd = 1.0 / (ss * inv_n + eps).sqrt();
    for ((o, xv), wv) in out.iter_mut().zip(x).zip(w) {
        // (x * rstd) is rounded to fp32 first, then multiplied by (1 + w) in fp32.
        *o = bf((xv * rstd) * (1.0 + wv));
    }
}

/// `Qwen3_5RMSNormGated`: norm before gate, weight plain (not 1 + w), two bf16 roundings:
/// `bf( bf(w * bf(x * rstd)) * silu(z) )`; the sum of squares in warp order over bf16 pairs (32
/// lanes, `sum_squares_chunks` with chunk 2: lane l sums 2l, 2l + 1, 64 + 2l, 65 + 2l of a 128-wide head).
pub fn rms_norm_gated(x: &[f32], z: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let inv_n = 1.0 / x.len() as f32;
    let rstd = 1.0 / (sum_squares_chunks(x, 32, 2) * inv_n + eps).sqrt();
    for i in 0..x.len() {
        let normed = bf(x[i] * rstd);
        let weighted = bf(w[i] * normed);
        out[i] = bf(weighted * silu(z[i]));
    }
}

/// SiLU in fp32 as PyTorch computes it: x / (1 + exp(-x)).
#[inline]
pub fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

#[inline]
pub fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// `F.softplus` with beta 1, threshold 20.
#[inline]
pub fn softplus(x: f32) -> f32 {
    if x > 20.0 {
        x
    } else {
        x.exp().ln_1p()
    }
}

/// `x * rsqrt(sum(x*x) + 1e-6)` in fp32 (transformers 5.17 `l2norm`, after the fp32 cast).
pub fn l2norm(x: &mut [f32]) {
    let inv = 1.0 / (sum_squares(x) + 1e-6).sqrt();
    for v in x.iter_mut() {
        *v *= inv;
    }
}

/// RoPE tables for one position: `cos`, `sin` of length `rotary_dim`, rounded to bf16 as HF does
/// (`emb = cat(freqs, freqs)`, `freqs = pos * inv_freq` in fp32, `inv_freq = 1 / theta^(2i/d)`).
pub fn rope_tables(pos: usize, rotary_dim: usize, theta: f64) -> (Vec<f32>, Vec<f32>) {
    let half = rotary_dim / 2;
    let mut cos = vec![0f32; rotary_dim];
    let mut sin = vec![0f32; rotary_dim];
    for i in 0..half {
        let exponent = (2 * i) as f32 / rotary_dim as f32;
        let inv_freq = 1.0f32 / (theta as f32).powf(exponent);
        let f = pos as f32 * inv_freq;
        let (c, s) = (bf((f as f64).cos() as f32), bf((f as f64).sin() as f32));
        cos[i] = c;
        cos[i + half] = c;
        sin[i] = s;
        sin[i + half] = s;
    }
    (cos, sin)
}

/// Partial NeoX RoPE on the first `rotary_dim` dims of one head, in bf16 as HF computes it:
/// `bf( bf(x*cos) + bf(rotate_half(x)*sin) )`, pairs (i, i + rotary_dim/2).
pub fn apply_rope(x: &mut [f32], cos: &[f32], sin: &[f32]) {
    let d = cos.len();
    let half = d / 2;
    let orig: Vec<f32> = x[..d].to_vec();
    for i in 0..d {
        let rot = if i < half { -orig[i + half] } else { orig[i - half] };
        x[i] = bf(bf(orig[i] * cos[i]) + bf(rot * sin[i]));
    }
}

/// Index of the largest value, the lowest index on ties (the reference's greedy rule). NaN never wins.
pub fn argmax(x: &[f32]) -> usize {
    let mut best = 0;
    for (i, v) in x.iter().enumerate() {
        // A total order (NaN below every number, then value, then the lower id), so that the GPU's
        // parallel reduction and this scan agree whatever order they combine in.
        if *v > x[best] || (x[best].is_nan() && !v.is_nan()) {
            best = i;
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::numerics::f32_to_bf16;

    /// Random fp8 codes (finite, moderate), block scales and a bf16 input for a `rows` x `cols` linear.
    fn random_fp8(rows: usize, cols: usize, seed: u64) -> (Vec<u8>, Vec<f32>, Vec<f32>) {
        let mut rng = crate::model::synth::Rng::new(seed);
        let w: Vec<u8> = (0..rows * cols).map(|_| (rng.next_u64() as u8) & 0x7E | 0x30).collect();
        let scales: Vec<f32> = (0..(rows / 128) * (cols / 128)).map(|i| 0.01 * (1 + i % 5) as f32).collect();
        let x: Vec<f32> = (0..cols).map(|_| bf(rng.normal())).collect();
        (w, scales, x)
    }

    #[test]
    fn gemv_fp8_equals_the_bf16_dequantised_dot_within_rounding() {
        let (rows, cols) = (256, 2048);
        let (w, scales, x) = random_fp8(rows, cols, 3);
        let lin = Linear {
            rows,
            cols,
            w: LinearW::Fp8 { w: &w, scales: scales.clone() },
            order: SumOrder::Canonical,
            act: Activations::Bf16,
        };
        let y = lin.gemv(&x);
        let lut = e4m3_table();
        for r in 0..rows {
            let exact: f64 = (0..cols)
                .map(|c| {
                    bf(lut[w[r * cols + c] as usize] * scales[(r / 128) * (cols / 128) + c / 128]) as f64 * x[c] as f64
                })
                .sum();
            assert!((y[r] as f64 - exact).abs() <= exact.abs() / 128.0 + 1e-3, "row {r}: {} vs {exact}", y[r]);
        }
        // Group partials summed in order reproduce the row exactly (the split-K contract).
        let r = 17;
        let parts: Vec<f32> = (0..lin.n_groups()).map(|g| lin.group_partial(&x, r, g)).collect();
        let mut s = 0f32;
        for p in parts {
            s += p;
        }
        assert_eq!(bf(s).to_bits(), y[r].to_bits());
    }

    /// Fast mode (W8A8, `Activations::Fp8Dynamic`) against the same arithmetic in f64: each tile's
    /// input quantised by the rule (scale max|x| / 448, e4m3 round to nearest even), then
    /// sum(w_q x_q) s_x s_w; the fp32 row within fp32 accumulation error of it. Negative control:
    /// exact mode's rows (the bf16 input against bf16(w * s_w)) are rejected by the same bound.
    #[test]
    fn fast_mode_is_the_w8a8_dot_and_exact_mode_is_not() {
        let (rows, cols) = (256, 2048);
        let (w, scales, mut x) = random_fp8(rows, cols, 11);
        // one all-zero input group (HF's kernel has no epsilon there: NaN; ours must stay finite)
        x[128..256].fill(0.0);
        let fp8 = || LinearW::Fp8 { w: &w, scales: scales.clone() };
        let fast = Linear { rows, cols, w: fp8(), order: SumOrder::Canonical, act: Activations::Fp8Dynamic };
        let exact = Linear { rows, cols, w: fp8(), order: SumOrder::Canonical, act: Activations::Bf16 };
        let lut = e4m3_table();
        // the quantised input, tile by tile, from the rule's definition
        let mut xq = vec![0f64; cols];
        let mut xs = vec![0f64; cols / 128];
        for t in 0..cols / 128 {
            let amax = x[t * 128..][..128].iter().fold(0f32, |m, v| m.max(v.abs()));
            let s = amax.max(1e-10) / 448.0;
            xs[t] = s as f64;
            for c in t * 128..(t + 1) * 128 {
                xq[c] = float8::F8E4M3::from_f32((x[c] / s).clamp(-448.0, 448.0)).to_f64();
            }
        }
        let (mut fast_ok, mut exact_off) = (0, 0);
        for r in 0..rows {
            let term = |c: usize| {
                lut[w[r * cols + c] as usize] as f64
                    * xq[c]
                    * xs[c / 128]
                    * scales[(r / 128) * (cols / 128) + c / 128] as f64
            };
            let want: f64 = (0..cols).map(term).sum();
            let bound = 1e-5 * (0..cols).map(|c| term(c).abs()).sum::<f64>();
            let got = fast.row_dot(&x, r);
            assert!(got.is_finite(), "row {r}: not finite");
            fast_ok += ((got as f64 - want).abs() <= bound) as usize;
            exact_off += ((exact.row_dot(&x, r) as f64 - want).abs() > bound) as usize;
        }
        assert_eq!(fast_ok, rows, "fast mode off the W8A8 dot on {} rows", rows - fast_ok);
        assert!(exact_off > rows * 9 / 10, "exact mode passed as W8A8 on {} rows", rows - exact_off);
        // gemv (the input quantised once) and the group partials (each group's tiles quantised on
        // their own) give the same bits
        let y = fast.gemv(&x);
        for r in [0, 17, 255] {
            let mut s = 0f32;
            for g in 0..fast.n_groups() {
                s += fast.group_partial(&x, r, g);
            }
            assert_eq!(bf(s).to_bits(), y[r].to_bits(), "row {r}");
        }
    }

    /// The noise twin's order is a different order (some fp32 sums change) and an equally valid one
    /// (every row stays within a few bf16 ulps of the canonical row).
    #[test]
    fn reversed_sum_order_moves_some_rows_by_rounding_only() {
        let (rows, cols) = (512, 3072);
        let (w, scales, x) = random_fp8(rows, cols, 5);
        let fp8 = || LinearW::Fp8 { w: &w, scales: scales.clone() };
        let (canon, rev) = (
            Linear { rows, cols, w: fp8(), order: SumOrder::Canonical, act: Activations::Bf16 },
            Linear { rows, cols, w: fp8(), order: SumOrder::Reversed, act: Activations::Bf16 },
        );
        // In fp32 most rows move (by a few fp32 ulps: 3 groups of 8 tiles added in another order)...
        let moved = (0..rows).filter(|&r| canon.row_dot(&x, r).to_bits() != rev.row_dot(&x, r).to_bits()).count();
        assert!(moved > rows / 4, "only {moved} of {rows} rows changed: not a different order");
        // ...and after the output rounding to bf16 almost none does, by at most one bf16 ulp.
        let (y, y_rev) = (canon.gemv(&x), rev.gemv(&x));
        for (a, b) in y.iter().zip(&y_rev) {
            assert!((a - b).abs() <= a.abs().max(b.abs()) / 128.0, "{a} vs {b}");
        }
    }

    #[test]
    fn rope_rotates_pairs_i_and_i_plus_32() {
        let (cos, sin) = rope_tables(1, 64, 1e7);
        assert_eq!(cos[0], bf(1f32.cos()));
        assert_eq!(sin[32], sin[0]);
        let mut x = vec![0f32; 256];
        x[0] = 1.0;
        apply_rope(&mut x, &cos, &sin);
        assert_eq!(x[0], cos[0]);
        assert_eq!(x[32], sin[0]); // rotate_half puts x[0] at 32
        assert_eq!(x[100], 0.0);
    }

    #[test]
    fn argmax_takes_the_lowest_id_on_ties() {
        assert_eq!(argmax(&[1.0, 3.0, 3.0, 2.0]), 1);
        assert_eq!(argmax(&[f32::NAN, 1.0]), 1);
        assert_eq!(argmax(&[f32::NAN, f32::NAN]), 0);
    }

    #[test]
    fn chunked_lane_sums_are_their_own_order() {
        // chunk 1 is the strided order; chunks of 8 (the block norm) and 2 (the gated norm) are other
        // fixed orders: the same value up to rounding, and not always the same bits (else the CPU
        // could not tell which order the GPU kernels use).
        let mut rng = 12345u64;
        let mut differ = 0;
        for _ in 0..50 {
            let x: Vec<f32> = (0..5120)
                .map(|_| {
                    rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    ((rng >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 4.0
                })
                .collect();
            let strided = sum_squares_lanes(&x, 256);
            assert_eq!(sum_squares_chunks(&x, 256, 1).to_bits(), strided.to_bits());
            let chunked = sum_squares_chunks(&x, 256, 8);
            assert!((chunked - strided).abs() <= 1e-4 * strided);
            differ += (chunked.to_bits() != strided.to_bits()) as u32;
            let head = &x[..128];
            let pairs = sum_squares_chunks(head, 32, 2);
            assert!((pairs - sum_squares_lanes(head, 32)).abs() <= 1e-4 * pairs);
        }
        assert!(differ > 0, "the chunked order never differed from the strided one");
    }

    #[test]
    fn rms_norm_rounds_once() {
        let x: Vec<f32> = (0..256).map(|i| bf16_to_f32(f32_to_bf16((i as f32 - 128.0) / 7.0))).collect();
        let w = vec![0.0; 256];
        let mut o = vec![0.0; 256];
        rms_norm_offset(&x, &w, 1e-6, &mut o);
        let ms: f64 = x.iter().map(|v| (*v as f64).powi(2)).sum::<f64>() / 256.0;
        for i in 0..256 {
            let exact = x[i] as f64 / (ms + 1e-6).sqrt();
            assert!((o[i] as f64 - exact).abs() <= exact.abs() / 128.0 + 1e-6);
            assert_eq!(o[i], bf(o[i]));
        }
    }
}
