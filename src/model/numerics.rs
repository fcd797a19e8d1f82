//! Number formats: bf16 and fp8 e4m3 conversions, and the rounding helpers every CPU op uses.
//!
//! Owns: the single definition of "round to bf16" (round-to-nearest-even, as PyTorch's `.to(bfloat16)`)
//! and the e4m3 decode table (float8_e4m3fn: no infinities, 0x7F/0xFF are NaN, max 448).
//! Refuses: any other rounding mode.

use std::sync::OnceLock;

#[inline(always)]
pub fn bf16_to_f32(bits: u16) -> f32 {
    f32::from_bits((bits as u32) << 16)
}

/// Round-to-nearest-even to bf16 bits (NaN stays NaN), exactly PyTorch's float->bfloat16 cast.
#[inline(always)]
pub fn f32_to_bf16(x: f32) -> u16 {
    half::bf16::from_f32(x).to_bits()
}

/// `bf()` in the spec: an fp32 value rounded to bf16, returned widened (exact) to fp32.
#[inline(always)]
pub fn bf(x: f32) -> f32 {
    bf16_to_f32(f32_to_bf16(x))
}

/// The 256 e4m3 values as f32 (each exactly representable in bf16 too).
pub fn e4m3_table() -> &'static [f32; 256] {
    static T: OnceLock<[f32; 256]> = OnceLock::new();
    T.get_or_init(|| {
        let mut t = [0f32; 256];
        for (i, v) in t.iter_mut().enumerate() {
            *v = float8::F8E4M3::from_bits(i as u8).to_f32();
        }
        t
    })
}

/// Round an f32 to the nearest e4m3 code (RNE, saturating at +-448), as torch's `.to(float8_e4m3fn)`
/// after a clamp.
pub fn f32_to_e4m3(x: f32) -> u8 {
    float8::F8E4M3::from_f32(x.clamp(-448.0, 448.0)).to_bits()
}

/// One group of activations quantised to e4m3 with one scale (fast mode's rule, `ops::Activations::
/// Fp8Dynamic`: `s = max(max|x|, 1e-10) / 448`, each value `e4m3(x / s)`): the values into `q` (decoded,
/// exact in f32), the scale returned.
pub fn e4m3_group(x: &[f32], q: &mut [f32]) -> f32 {
    let lut = e4m3_table();
    // ORDER: max is exact in any order.
    let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    let s = amax.max(1e-10) / 448.0;
    for (o, v) in q.iter_mut().zip(x) {
        *o = lut[f32_to_e4m3(v / s) as usize];
    }
    s
}

/// Reinterprets little-endian bf16 bytes as u16s when aligned, else copies.
pub fn bytes_to_u16(b: &[u8]) -> std::borrow::Cow<'_, [u16]> {
    match bytemuck::try_cast_slice::<u8, u16>(b) {
        Ok(s) => std::borrow::Cow::Borrowed(s),
        Err(_) => std::borrow::Cow::Owned(b.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bf16_rounds_to_nearest_even() {
        // 1 + 2^-8 is exactly half-way between 1 and 1 + 2^-7: ties go to the even mantissa (1).
        assert_eq!(bf(1.0 + 1.0 / 256.0), 1.0);
        assert_eq!(bf(1.0 + 3.0 / 256.0), 1.0 + 4.0 / 256.0);
        assert!(bf(f32::NAN).is_nan());
    }

    #[test]
    fn e4m3_table_is_float8_e4m3fn() {
        let t = e4m3_table();
        assert_eq!(t[0x7E], 448.0);
        assert_eq!(t[0xFE], -448.0);
        assert!(t[0x7F].is_nan() && t[0xFF].is_nan());
        assert_eq!(t[0x01], 2f32.powi(-9)); // smallest subnormal
        assert_eq!(t[0x38], 1.0);
        for (i, v) in t.iter().enumerate() {
            if v.is_finite() {
                assert_eq!(bf(*v), *v, "e4m3 code {i:#x} must be exact in bf16");
                assert_eq!(f32_to_e4m3(*v) & 0x7F, i as u8 & 0x7F);
            }
        }
        assert_eq!(f32_to_e4m3(1000.0), 0x7E);
        // hand-computed roundings (fast mode's activation quantiser, issue 28): ties to even in the
        // normal range (1 + 1/16 lies between 1 and 1 + 1/8: to 1; 1 + 3/16 between 1 + 1/8 and 1 + 1/4:
        // to 1 + 1/4), the subnormal tie 2^-10 (half the smallest subnormal 2^-9) to 0, saturation at 448
        for (x, want) in [(1.0625f32, 1.0f32), (1.1875, 1.25), (2f32.powi(-10), 0.0), (-500.0, -448.0), (449.0, 448.0)]
        {
            assert_eq!(t[f32_to_e4m3(x) as usize], want, "e4m3({x})");
        }
    }
}
