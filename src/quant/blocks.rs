//! GGUF block layouts (`ggml-common.h`) and the scalar field encodings they use (f16, bf16, e8m0).
//!
//! Every field is a byte array, so every block has align 1 and `bytemuck::cast_slice::<u8, Block>`
//! works on any (unaligned) slice of tensor data. Multi-byte fields are little-endian, as in GGUF.

use bytemuck::{Pod, Zeroable};

use super::{QType, TABLE};

pub const QK4_0: usize = 32;
pub const QK4_1: usize = 32;
pub const QK5_0: usize = 32;
pub const QK5_1: usize = 32;
pub const QK8_0: usize = 32;
pub const QK8_1: usize = 32;
pub const QK4_NL: usize = 32;
pub const QK_MXFP4: usize = 32;
/// Elements per K-quant super-block.
pub const QK_K: usize = 256;
/// Bytes of packed 6-bit scales and mins in q4_K / q5_K.
pub const K_SCALE_SIZE: usize = 12;

/// The 16 levels of iq4_nl (`kvalues_iq4nl`).
pub const KVALUES_IQ4NL: [i8; 16] = [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113];
/// The e2m1 values, doubled (`kvalues_mxfp4`); the e8m0 scale is halved to match.
pub const KVALUES_MXFP4: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

// ---- scalar field encodings ---------------------------------------------------------------

/// IEEE half bits to f32 (exact; NaN payloads kept, quieted). ggml: `ggml_compute_fp16_to_fp32`.
#[inline]
pub fn fp16_to_f32(bits: u16) -> f32 {
    half::f16::from_bits(bits).to_f32()
}

/// f32 to IEEE half bits, round to nearest even, every NaN to `sign | 0x7e00`.
/// ggml: `ggml_compute_fp32_to_fp16` (the FP16 library's bit trick, ported as is).
#[inline]
pub fn f32_to_fp16(f: f32) -> u16 {
    let scale_to_inf = f32::from_bits(0x7780_0000); // 0x1.0p+112
    let scale_to_zero = f32::from_bits(0x0880_0000); // 0x1.0p-110
    let mut base = (f.abs() * scale_to_inf) * scale_to_zero;

    let w = f.to_bits();
    let shl1_w = w.wrapping_add(w);
    let sign = w & 0x8000_0000;
    let bias = (shl1_w & 0xff00_0000).max(0x7100_0000);

    base += f32::from_bits((bias >> 1) + 0x0780_0000);
    let bits = base.to_bits();
    let exp_bits = (bits >> 13) & 0x0000_7c00;
    let mantissa_bits = bits & 0x0000_0fff;
    let nonsign = exp_bits + mantissa_bits;
    ((sign >> 16) | if shl1_w > 0xff00_0000 { 0x7e00 } else { nonsign }) as u16
}

/// bf16 bits to f32 (exact). ggml: `ggml_compute_bf16_to_fp32`.
#[inline]
pub fn bf16_to_f32(bits: u16) -> f32 {
    f32::from_bits((bits as u32) << 16)
}

/// f32 to bf16 bits, round to nearest even, NaN forced quiet. ggml: `ggml_compute_fp32_to_bf16`.
#[inline]
pub fn f32_to_bf16(f: f32) -> u16 {
    let u = f.to_bits();
    if (u & 0x7fff_ffff) > 0x7f80_0000 {
        return ((u >> 16) | 64) as u16;
    }
    (u.wrapping_add(0x7fff + ((u >> 16) & 1)) >> 16) as u16
}

/// Half the value of an e8m0 exponent, `2^(e - 128)` (pairs with the doubled
/// [`KVALUES_MXFP4`]). ggml: `ggml_e8m0_to_fp32_half`; e = 255 is not treated as NaN there either.
#[inline]
pub const fn e8m0_to_f32_half(e: u8) -> f32 {
    let bits = if e < 2 {
        0x0020_0000u32 << e // 2^-128, 2^-127: subnormal
    } else {
        ((e - 1) as u32) << 23
    };
    f32::from_bits(bits)
}

// ---- casting tensor bytes to blocks --------------------------------------------------------

/// The whole blocks at the start of `bytes` (a trailing partial block is left out).
#[inline]
pub fn as_blocks<B: Pod>(bytes: &[u8]) -> &[B] {
    let n = bytes.len() / std::mem::size_of::<B>();
    bytemuck::cast_slice(&bytes[..n * std::mem::size_of::<B>()])
}

/// Mutable [`as_blocks`].
#[inline]
pub fn as_blocks_mut<B: Pod>(bytes: &mut [u8]) -> &mut [B] {
    let n = bytes.len() / std::mem::size_of::<B>();
    bytemuck::cast_slice_mut(&mut bytes[..n * std::mem::size_of::<B>()])
}

// ---- block structs ---------------------------------------------------------------------------

/// An f16 field's reader and, where an encoder writes it through one, its writer.
macro_rules! f16_field {
    ($get:ident) => {
        #[inline]
        pub fn $get(&self) -> f32 {
            fp16_to_f32(u16::from_le_bytes(self.$get))
        }
    };
    ($get:ident, $set:ident) => {
        f16_field!($get);
        #[inline]
        pub fn $set(&mut self, v: f32) {
            self.$get = f32_to_fp16(v).to_le_bytes();
        }
    };
}

/// q4_0: `x = d * (q - 8)`; element j in the low nibble of `qs[j]`, j + 16 in the high one.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ4_0 {
    pub d: [u8; 2],
    pub qs: [u8; QK4_0 / 2],
}

/// q4_1: `x = d * q + m`; nibbles as in q4_0.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ4_1 {
    pub d: [u8; 2],
    pub m: [u8; 2],
    pub qs: [u8; QK4_1 / 2],
}

/// q5_0: `x = d * (q - 16)`; bit 4 of element j is bit j of the little-endian u32 `qh`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ5_0 {
    pub d: [u8; 2],
    pub qh: [u8; 4],
    pub qs: [u8; QK5_0 / 2],
}

/// q5_1: `x = d * q + m`; bits as in q5_0.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ5_1 {
    pub d: [u8; 2],
    pub m: [u8; 2],
    pub qh: [u8; 4],
    pub qs: [u8; QK5_1 / 2],
}

/// q8_0: `x = d * q`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ8_0 {
    pub d: [u8; 2],
    pub qs: [i8; QK8_0],
}

/// q8_1 (activations): `x = d * q`, `s = d * sum(q)`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ8_1 {
    pub d: [u8; 2],
    pub s: [u8; 2],
    pub qs: [i8; QK8_1],
}

/// q2_K: 16 groups of 16; `scales[j]` = scale (low nibble) | min (high nibble);
/// `x = d * sc * q - dmin * m`, q 2-bit.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ2K {
    pub scales: [u8; QK_K / 16],
    pub qs: [u8; QK_K / 4],
    pub d: [u8; 2],
    pub dmin: [u8; 2],
}

/// q3_K: 16 groups of 16; 6-bit signed scales (offset 32) packed in 12 bytes;
/// `x = d * (sc - 32) * (q - 4 * !hbit)`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ3K {
    pub hmask: [u8; QK_K / 8],
    pub qs: [u8; QK_K / 4],
    pub scales: [u8; 12],
    pub d: [u8; 2],
}

/// q4_K: 8 groups of 32; 6-bit scales and mins packed in 12 bytes (`get_scale_min_k4`);
/// `x = d * sc * q - dmin * m`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ4K {
    pub d: [u8; 2],
    pub dmin: [u8; 2],
    pub scales: [u8; K_SCALE_SIZE],
    pub qs: [u8; QK_K / 2],
}

/// q5_K: as q4_K with a fifth bit per element in `qh`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ5K {
    pub d: [u8; 2],
    pub dmin: [u8; 2],
    pub scales: [u8; K_SCALE_SIZE],
    pub qh: [u8; QK_K / 8],
    pub qs: [u8; QK_K / 2],
}

/// q6_K: 16 groups of 16; `x = d * scales[g] * (q - 32)`, q = 4 low bits (`ql`) | 2 high (`qh`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ6K {
    pub ql: [u8; QK_K / 2],
    pub qh: [u8; QK_K / 4],
    pub scales: [i8; QK_K / 16],
    pub d: [u8; 2],
}

/// q8_K (activations for K-quant dot products): f32 `d`, `x = d * q`, `bsums[g]` = sum of
/// the 16 quants of group g (i16).
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ8K {
    pub d: [u8; 4],
    pub qs: [i8; QK_K],
    pub bsums: [u8; 2 * (QK_K / 16)],
}

/// iq4_nl: `x = d * KVALUES_IQ4NL[q]`; nibbles as in q4_0.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockIQ4NL {
    pub d: [u8; 2],
    pub qs: [u8; QK4_NL / 2],
}

/// mxfp4: `x = e8m0_to_f32_half(e) * KVALUES_MXFP4[q]`; nibbles as in q4_0.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockMXFP4 {
    pub e: u8,
    pub qs: [u8; QK_MXFP4 / 2],
}

impl BlockQ4_0 {
    f16_field!(d, set_d);
}
impl BlockQ4_1 {
    f16_field!(d, set_d);
    f16_field!(m, set_m);
}
impl BlockQ5_0 {
    f16_field!(d, set_d);
}
impl BlockQ5_1 {
    f16_field!(d, set_d);
    f16_field!(m, set_m);
}
impl BlockQ8_0 {
    f16_field!(d, set_d);
}
impl BlockQ8_1 {
    f16_field!(d, set_d);
    f16_field!(s, set_s);
}
impl BlockQ2K {
    f16_field!(d, set_d);
    f16_field!(dmin, set_dmin);
}
impl BlockQ3K {
    f16_field!(d, set_d);
}
impl BlockQ4K {
    f16_field!(d);
    f16_field!(dmin);
}
impl BlockQ5K {
    f16_field!(d);
    f16_field!(dmin);
}
impl BlockQ6K {
    f16_field!(d, set_d);
}
impl BlockIQ4NL {
    f16_field!(d, set_d);
}

impl BlockQ8K {
    #[inline]
    pub fn d(&self) -> f32 {
        f32::from_le_bytes(self.d)
    }
    #[inline]
    pub fn set_d(&mut self, v: f32) {
        self.d = v.to_le_bytes();
    }
    #[inline]
    pub fn set_bsum(&mut self, g: usize, v: i16) {
        self.bsums[2 * g..2 * g + 2].copy_from_slice(&v.to_le_bytes());
    }
}

impl BlockMXFP4 {
    #[inline]
    pub fn d(&self) -> f32 {
        e8m0_to_f32_half(self.e)
    }
}

/// The packed 6-bit scale and min of group `j` (0..8) of a q4_K / q5_K block.
/// ggml: `get_scale_min_k4`.
#[inline]
pub fn get_scale_min_k4(j: usize, q: &[u8; K_SCALE_SIZE]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// The 16 signed 6-bit group scales of a q3_K block, still offset by 32 (`scales[g] - 32` is
/// the scale). ggml: the `aux`/`kmask` shuffle in `dequantize_row_q3_K`.
#[inline(always)]
pub fn unpack_q3k_scales(scales: &[u8; 12]) -> [i8; 16] {
    const KMASK1: u32 = 0x0303_0303;
    const KMASK2: u32 = 0x0f0f_0f0f;
    let w = |i: usize| u32::from_le_bytes([scales[4 * i], scales[4 * i + 1], scales[4 * i + 2], scales[4 * i + 3]]);
    let (a0, a1, tmp) = (w(0), w(1), w(2));
    let aux = [
        (a0 & KMASK2) | ((tmp & KMASK1) << 4),
        (a1 & KMASK2) | (((tmp >> 2) & KMASK1) << 4),
        ((a0 >> 4) & KMASK2) | (((tmp >> 4) & KMASK1) << 4),
        ((a1 >> 4) & KMASK2) | (((tmp >> 6) & KMASK1) << 4),
    ];
    let mut out = [0i8; 16];
    for (i, a) in aux.iter().enumerate() {
        for (k, b) in a.to_le_bytes().iter().enumerate() {
            out[4 * i + k] = *b as i8;
        }
    }
    out
}

// ---- layout checks: ggml-common.h sizes, and the table agrees ------------------------------

macro_rules! assert_block {
    ($b:ty, $q:ident, $bytes:expr, $elems:expr) => {
        const _: () = assert!(std::mem::size_of::<$b>() == $bytes);
        const _: () = assert!(std::mem::align_of::<$b>() == 1);
        const _: () = assert!(TABLE[QType::$q as usize].block_bytes == $bytes);
        const _: () = assert!(TABLE[QType::$q as usize].block_elems == $elems);
    };
}

assert_block!(BlockQ4_0, Q4_0, 18, QK4_0);
assert_block!(BlockQ4_1, Q4_1, 20, QK4_1);
assert_block!(BlockQ5_0, Q5_0, 22, QK5_0);
assert_block!(BlockQ5_1, Q5_1, 24, QK5_1);
assert_block!(BlockQ8_0, Q8_0, 34, QK8_0);
assert_block!(BlockQ8_1, Q8_1, 36, QK8_1);
assert_block!(BlockQ2K, Q2K, 84, QK_K);
assert_block!(BlockQ3K, Q3K, 110, QK_K);
assert_block!(BlockQ4K, Q4K, 144, QK_K);
assert_block!(BlockQ5K, Q5K, 176, QK_K);
assert_block!(BlockQ6K, Q6K, 210, QK_K);
assert_block!(BlockQ8K, Q8K, 292, QK_K);
assert_block!(BlockIQ4NL, IQ4NL, 18, QK4_NL);
assert_block!(BlockMXFP4, MXFP4, 17, QK_MXFP4);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fp16_matches_half_except_nan_canonicalisation() {
        // A sweep over the f32 bit space: normals, subnormals, overflow, ties.
        let mut bits = 0u32;
        loop {
            let f = f32::from_bits(bits);
            let ours = f32_to_fp16(f);
            if f.is_nan() {
                assert_eq!(ours & 0x7fff, 0x7e00, "{bits:#x}");
                assert_eq!(ours & 0x8000, ((bits >> 16) & 0x8000) as u16);
            } else {
                assert_eq!(ours, half::f16::from_f32(f).to_bits(), "{bits:#x} ({f:e})");
            }
            match bits.checked_add(4093) {
                Some(b) => bits = b,
                None => break,
            }
        }
        for h in 0..=u16::MAX {
            let f = fp16_to_f32(h);
            if !f.is_nan() {
                assert_eq!(f32_to_fp16(f), h, "round trip {h:#x}");
            }
        }
    }

    #[test]
    fn bf16_rounds_to_nearest_even_and_quiets_nan() {
        assert_eq!(f32_to_bf16(1.0), 0x3f80);
        // Halfway between 0x3f80 and 0x3f81: even wins; just above: up.
        assert_eq!(f32_to_bf16(f32::from_bits(0x3f80_8000)), 0x3f80);
        assert_eq!(f32_to_bf16(f32::from_bits(0x3f81_8000)), 0x3f82);
        assert_eq!(f32_to_bf16(f32::from_bits(0x3f80_8001)), 0x3f81);
        assert_eq!(f32_to_bf16(f32::from_bits(0x7f80_0001)), 0x7fc0); // sNaN -> qNaN
        assert_eq!(f32_to_bf16(f32::INFINITY), 0x7f80);
        assert_eq!(bf16_to_f32(0xc000), -2.0);
    }

    #[test]
    fn e8m0_half_is_a_power_of_two() {
        assert_eq!(e8m0_to_f32_half(127), 0.5);
        assert_eq!(e8m0_to_f32_half(128), 1.0);
        assert_eq!(e8m0_to_f32_half(2), 2f64.powi(-126) as f32);
        assert_eq!(e8m0_to_f32_half(1), 2f64.powi(-127) as f32);
        assert_eq!(e8m0_to_f32_half(0), 2f64.powi(-128) as f32);
    }

    #[test]
    fn blocks_cast_from_unaligned_bytes() {
        let bytes = [0u8; 3 * 18 + 1 + 5];
        let b: &[BlockQ4_0] = as_blocks(&bytes[1..]);
        assert_eq!(b.len(), 3);
    }
}
