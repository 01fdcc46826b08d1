//! Scalar kernels: the fallback on every CPU and the oracle the SIMD kernels are tested against.
//!
//! Each dot follows ggml's `ggml_vec_dot_*_generic` (ggml/src/ggml-cpu/quants.c): integer sums
//! per block, then the scales, in the same order, so results match llama.cpp's to rounding.
//! The quantizers follow `quantize_row_*_ref` (ggml/src/ggml-quants.c) bit for bit.
//! Weight and activation rows are raw bytes: fields are read with `from_le_bytes`.

use super::{dot_fn, f16_at, f32_at, DotFn};
use crate::quant::unpack_q3k_scales;
use crate::quant::QType;
use crate::quant::{e8m0_to_f32_half, KVALUES_IQ4NL, KVALUES_MXFP4};

/// One kernel per qtype, in table order (checked below at compile time), so that a new table
/// row does not build without its scalar dot.
pub(super) static DOT: [(QType, DotFn); QType::COUNT] = [
    dot_fn!(F32, dot_f32),
    dot_fn!(F16, dot_f16),
    dot_fn!(BF16, dot_bf16),
    dot_fn!(Q4_0, dot_q4_0),
    dot_fn!(Q4_1, dot_q4_1),
    dot_fn!(Q5_0, dot_q5_0),
    dot_fn!(Q5_1, dot_q5_1),
    dot_fn!(Q8_0, dot_q8_0),
    dot_fn!(Q8_1, dot_q8_1),
    dot_fn!(Q2K, dot_q2_k),
    dot_fn!(Q3K, dot_q3_k),
    dot_fn!(Q4K, dot_q4_k),
    dot_fn!(Q5K, dot_q5_k),
    dot_fn!(Q6K, dot_q6_k),
    dot_fn!(Q8K, dot_q8_k),
    dot_fn!(IQ4NL, dot_iq4_nl),
    dot_fn!(MXFP4, dot_mxfp4),
];

const _: () = {
    let mut i = 0;
    while i < QType::COUNT {
        assert!(DOT[i].0 as usize == i, "scalar::DOT is not in table order");
        i += 1;
    }
};

/// `n / be` blocks of `bb` bytes from the start of `b`.
#[inline(always)]
fn blocks(b: &[u8], bb: usize, n: usize) -> impl Iterator<Item = &[u8]> {
    b.chunks_exact(bb).take(n)
}

#[inline(always)]
fn i8s(b: &[u8]) -> &[i8] {
    bytemuck::cast_slice(b)
}

/// `bsums[j]` of a q8_K block.
#[inline(always)]
fn bsum(y: &[u8], j: usize) -> i32 {
    i16::from_le_bytes([y[260 + 2 * j], y[261 + 2 * j]]) as i32
}

// --- float weights × f32 activations (ggml_vec_dot_f32/f16: f32 products, f64 sum) ---------

pub fn dot_f32(n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut sum = 0f64;
    for (x, y) in w.chunks_exact(4).zip(a.chunks_exact(4)).take(n) {
        sum += (f32_at(x, 0) * f32_at(y, 0)) as f64;
    }
    sum as f32
}

pub fn dot_f16(n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut sum = 0f64;
    for (x, y) in w.chunks_exact(2).zip(a.chunks_exact(4)).take(n) {
        sum += (f16_at(x, 0) * f32_at(y, 0)) as f64;
    }
    sum as f32
}

pub fn dot_bf16(n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut sum = 0f64;
    for (x, y) in w.chunks_exact(2).zip(a.chunks_exact(4)).take(n) {
        let xf = f32::from_bits((u16::from_le_bytes([x[0], x[1]]) as u32) << 16);
        sum += (xf * f32_at(y, 0)) as f64;
    }
    sum as f32
}

// --- 32-element blocks × q8_0 / q8_1 --------------------------------------------------------

/// block_q4_0 {d: f16, qs[16]} · block_q8_0 {d: f16, qs[32]}.
pub fn dot_q4_0(n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut sumf = 0f32;
    for (x, y) in blocks(w, 18, n / 32).zip(blocks(a, 34, n / 32)) {
        let (qs, q8) = (&x[2..18], i8s(&y[2..34]));
        let (mut s0, mut s1) = (0i32, 0i32);
        for j in 0..16 {
            s0 += ((qs[j] & 0x0F) as i32 - 8) * q8[j] as i32;
            s1 += ((qs[j] >> 4) as i32 - 8) * q8[j + 16] as i32;
        }
        sumf += (s0 + s1) as f32 * f16_at(x, 0) * f16_at(y, 0);
    }
    sumf
}

/// block_q4_1 {d, m: f16, qs[16]} · block_q8_1 {d, s: f16, qs[32]}.
pub fn dot_q4_1(n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut sumf = 0f32;
    for (x, y) in blocks(w, 20, n / 32).zip(blocks(a, 36, n / 32)) {
        let (qs, q8) = (&x[4..20], i8s(&y[4..36]));
        let (mut s0, mut s1) = (0i32, 0i32);
        for j in 0..16 {
            s0 += (qs[j] & 0x0F) as i32 * q8[j] as i32;
            s1 += (qs[j] >> 4) as i32 * q8[j + 16] as i32;
        }
        sumf += (f16_at(x, 0) * f16_at(y, 0)) * (s0 + s1) as f32 + f16_at(x, 2) * f16_at(y, 2);
    }
    sumf
}

/// block_q5_0 {d: f16, qh[4], qs[16]} · q8_0.
pub fn dot_q5_0(n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut sumf = 0f32;
    for (x, y) in blocks(w, 22, n / 32).zip(blocks(a, 34, n / 32)) {
        let qh = u32::from_le_bytes([x[2], x[3], x[4], x[5]]);
        let (qs, q8) = (&x[6..22], i8s(&y[2..34]));
        let (mut s0, mut s1) = (0i32, 0i32);
        for j in 0..16 {
            let h0 = (((qh >> j) & 1) << 4) as u8;
            let h1 = (((qh >> (j + 16)) & 1) << 4) as u8;
            s0 += (((qs[j] & 0x0F) | h0) as i32 - 16) * q8[j] as i32;
            s1 += (((qs[j] >> 4) | h1) as i32 - 16) * q8[j + 16] as i32;
        }
        sumf += (f16_at(x, 0) * f16_at(y, 0)) * (s0 + s1) as f32;
    }
    sumf
}

/// block_q5_1 {d, m: f16, qh[4], qs[16]} · q8_1.
pub fn dot_q5_1(n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut sumf = 0f32;
    for (x, y) in blocks(w, 24, n / 32).zip(blocks(a, 36, n / 32)) {
        let qh = u32::from_le_bytes([x[4], x[5], x[6], x[7]]);
        let (qs, q8) = (&x[8..24], i8s(&y[4..36]));
        let (mut s0, mut s1) = (0i32, 0i32);
        for j in 0..16 {
            let h0 = (((qh >> j) & 1) << 4) as u8;
            let h1 = (((qh >> (j + 16)) & 1) << 4) as u8;
            s0 += ((qs[j] & 0x0F) | h0) as i32 * q8[j] as i32;
            s1 += ((qs[j] >> 4) | h1) as i32 * q8[j + 16] as i32;
        }
        sumf += (f16_at(x, 0) * f16_at(y, 0)) * (s0 + s1) as f32 + f16_at(x, 2) * f16_at(y, 2);
    }
    sumf
}

/// block_q8_0 · block_q8_0.
pub fn dot_q8_0(n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut sumf = 0f32;
    for (x, y) in blocks(w, 34, n / 32).zip(blocks(a, 34, n / 32)) {
        let sumi: i32 = i8s(&x[2..34])
            .iter()
            .zip(i8s(&y[2..34]))
            .map(|(&p, &q)| p as i32 * q as i32)
            .sum();
        sumf += sumi as f32 * (f16_at(x, 0) * f16_at(y, 0));
    }
    sumf
}

/// block_q8_1 weights (activation-only in ggml) · q8_0: the `s` field is not needed.
pub fn dot_q8_1(n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut sumf = 0f32;
    for (x, y) in blocks(w, 36, n / 32).zip(blocks(a, 34, n / 32)) {
        let sumi: i32 = i8s(&x[4..36])
            .iter()
            .zip(i8s(&y[2..34]))
            .map(|(&p, &q)| p as i32 * q as i32)
            .sum();
        sumf += sumi as f32 * (f16_at(x, 0) * f16_at(y, 0));
    }
    sumf
}

/// A 4-bit codebook block {scale byte(s), qs[16]} · q8_0 (iq4_nl, mxfp4).
#[inline(always)]
fn dot_lut4(n: usize, w: &[u8], a: &[u8], bb: usize, lut: &[i8; 16], scale: impl Fn(&[u8]) -> f32) -> f32 {
    let mut sumf = 0f32;
    for (x, y) in blocks(w, bb, n / 32).zip(blocks(a, 34, n / 32)) {
        let (qs, q8) = (&x[bb - 16..bb], i8s(&y[2..34]));
        let (mut s1, mut s2) = (0i32, 0i32);
        for j in 0..16 {
            s1 += q8[j] as i32 * lut[(qs[j] & 0xF) as usize] as i32;
            s2 += q8[j + 16] as i32 * lut[(qs[j] >> 4) as usize] as i32;
        }
        sumf += f16_at(y, 0) * scale(x) * (s1 + s2) as f32;
    }
    sumf
}

/// block_iq4_nl {d: f16, qs[16]} · q8_0.
pub fn dot_iq4_nl(n: usize, w: &[u8], a: &[u8]) -> f32 {
    dot_lut4(n, w, a, 18, &KVALUES_IQ4NL, |x| f16_at(x, 0))
}

/// block_mxfp4 {e: e8m0, qs[16]} · q8_0.
pub fn dot_mxfp4(n: usize, w: &[u8], a: &[u8]) -> f32 {
    dot_lut4(n, w, a, 17, &KVALUES_MXFP4, |x| e8m0_to_f32_half(x[0]))
}

// --- k-quants (256-element super-blocks) × q8_K {d: f32, qs[256], bsums: i16[16]} ----------

/// block_q2_K {scales[16], qs[64], d, dmin: f16}.
pub fn dot_q2_k(n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut sumf = 0f32;
    for (x, y) in blocks(w, 84, n / 256).zip(blocks(a, 292, n / 256)) {
        let (sc, q2, q8) = (&x[0..16], &x[16..80], i8s(&y[4..260]));
        let summs: i32 = (0..16).map(|j| bsum(y, j) * (sc[j] >> 4) as i32).sum();
        let dall = f32_at(y, 0) * f16_at(x, 80);
        let dmin = f32_at(y, 0) * f16_at(x, 82);
        let mut isum = 0i32;
        let mut is = 0;
        for k in 0..2 {
            let q2 = &q2[32 * k..32 * k + 32];
            for j in 0..4 {
                let q8 = &q8[128 * k + 32 * j..];
                let shift = 2 * j;
                for half in 0..2 {
                    let d = (sc[is] & 0xF) as i32;
                    is += 1;
                    let l0 = 16 * half;
                    let isuml: i32 = (l0..l0 + 16)
                        .map(|l| q8[l] as i32 * ((q2[l] >> shift) & 3) as i32)
                        .sum();
                    isum += d * isuml;
                }
            }
        }
        sumf += dall * isum as f32 - dmin * summs as f32;
    }
    sumf
}

/// The eight-lane integer accumulation of ggml's generic k-quant dots: `aux8` holds the
/// 256 decoded quants, `scale(j)` the scale of the j-th group of `group` elements.
#[inline(always)]
fn k_lanes(aux8: &[i8; 256], q8: &[i8], group: usize, scale: impl Fn(usize) -> i32) -> [i32; 8] {
    let mut aux32 = [0i32; 8];
    for j in 0..256 / group {
        let s = scale(j);
        for l0 in (j * group..(j + 1) * group).step_by(8) {
            for (l, acc) in aux32.iter_mut().enumerate() {
                *acc += s * (q8[l0 + l] as i32 * aux8[l0 + l] as i32);
            }
        }
    }
    aux32
}

/// ggml's 6-bit scale/min unpacking of q4_K/q5_K `scales[12]`: (scales[8], mins[8]).
#[inline(always)]
pub(crate) fn k4_scales_mins(s: &[u8]) -> ([u8; 8], [u8; 8]) {
    const KMASK1: u32 = 0x3f3f3f3f;
    const KMASK2: u32 = 0x0f0f0f0f;
    const KMASK3: u32 = 0x03030303;
    let u = |i: usize| u32::from_le_bytes([s[4 * i], s[4 * i + 1], s[4 * i + 2], s[4 * i + 3]]);
    let mut utmp = [u(0), u(1), u(2), 0];
    utmp[3] = ((utmp[2] >> 4) & KMASK2) | (((utmp[1] >> 6) & KMASK3) << 4);
    let uaux = utmp[1] & KMASK1;
    utmp[1] = (utmp[2] & KMASK2) | (((utmp[0] >> 6) & KMASK3) << 4);
    utmp[2] = uaux;
    utmp[0] &= KMASK1;
    let b = |a: u32, b: u32| {
        let (a, b) = (a.to_le_bytes(), b.to_le_bytes());
        [a[0], a[1], a[2], a[3], b[0], b[1], b[2], b[3]]
    };
    (b(utmp[0], utmp[1]), b(utmp[2], utmp[3]))
}

/// block_q3_K {hmask[32], qs[64], scales[12], d: f16}.
pub fn dot_q3_k(n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut sums = [0f32; 8];
    for (x, y) in blocks(w, 110, n / 256).zip(blocks(a, 292, n / 256)) {
        let (hm, q3, q8) = (&x[0..32], &x[32..96], i8s(&y[4..260]));
        let mut aux8 = [0i8; 256];
        for c in 0..2 {
            for s in 0..4 {
                let m = 1u8 << (4 * c + s);
                for l in 0..32 {
                    let lo = ((q3[32 * c + l] >> (2 * s)) & 3) as i8;
                    aux8[128 * c + 32 * s + l] = lo - if hm[l] & m != 0 { 0 } else { 4 };
                }
            }
        }
        let scales = unpack_q3k_scales(x[96..108].try_into().expect("a q3_K block has 12 scale bytes"));
        let aux32 = k_lanes(&aux8, q8, 16, |j| scales[j] as i32 - 32);
        let d = f16_at(x, 108) * f32_at(y, 0);
        for l in 0..8 {
            sums[l] += d * aux32[l] as f32;
        }
    }
    sums.iter().fold(0.0, |acc, s| acc + s)
}

/// q4_K and q5_K share everything but the high bit: `qh` is `Some` for q5_K.
#[inline(always)]
fn dot_q45_k(n: usize, w: &[u8], a: &[u8], five: bool) -> f32 {
    let (bb, qs_at) = if five { (176, 48) } else { (144, 16) };
    let mut sums = [0f32; 8];
    let mut sumf = 0f32;
    for (x, y) in blocks(w, bb, n / 256).zip(blocks(a, 292, n / 256)) {
        let (q4, q8) = (&x[qs_at..qs_at + 128], i8s(&y[4..260]));
        let mut aux8 = [0i8; 256];
        for j in 0..4 {
            for l in 0..32 {
                aux8[64 * j + l] = (q4[32 * j + l] & 0xF) as i8;
                aux8[64 * j + 32 + l] = (q4[32 * j + l] >> 4) as i8;
                if five {
                    let hm = &x[16..48];
                    let (m0, m1) = (1u8 << (2 * j), 1u8 << (2 * j + 1));
                    aux8[64 * j + l] += if hm[l] & m0 != 0 { 16 } else { 0 };
                    aux8[64 * j + 32 + l] += if hm[l] & m1 != 0 { 16 } else { 0 };
                }
            }
        }
        let (scales, mins) = k4_scales_mins(&x[4..16]);
        let sumi: i32 = (0..16).map(|j| bsum(y, j) * mins[j / 2] as i32).sum();
        let aux32 = k_lanes(&aux8, q8, 32, |j| scales[j] as i32);
        let d = f16_at(x, 0) * f32_at(y, 0);
        for l in 0..8 {
            sums[l] += d * aux32[l] as f32;
        }
        let dmin = f16_at(x, 2) * f32_at(y, 0);
        sumf -= dmin * sumi as f32;
    }
    sums.iter().fold(sumf, |acc, s| acc + s)
}

/// block_q4_K {d, dmin: f16, scales[12], qs[128]}.
pub fn dot_q4_k(n: usize, w: &[u8], a: &[u8]) -> f32 {
    dot_q45_k(n, w, a, false)
}

/// block_q5_K {d, dmin: f16, scales[12], qh[32], qs[128]}.
pub fn dot_q5_k(n: usize, w: &[u8], a: &[u8]) -> f32 {
    dot_q45_k(n, w, a, true)
}

/// block_q6_K {ql[128], qh[64], scales: i8[16], d: f16}.
pub fn dot_q6_k(n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut sums = [0f32; 8];
    for (x, y) in blocks(w, 210, n / 256).zip(blocks(a, 292, n / 256)) {
        let q8 = i8s(&y[4..260]);
        let mut aux8 = [0i8; 256];
        for c in 0..2 {
            let (ql, qh) = (&x[64 * c..64 * c + 64], &x[128 + 32 * c..160 + 32 * c]);
            let a = &mut aux8[128 * c..128 * c + 128];
            for l in 0..32 {
                a[l] = ((ql[l] & 0xF) | ((qh[l] & 3) << 4)) as i8 - 32;
                a[l + 32] = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) as i8 - 32;
                a[l + 64] = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i8 - 32;
                a[l + 96] = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i8 - 32;
            }
        }
        let scales = i8s(&x[192..208]);
        let aux32 = k_lanes(&aux8, q8, 16, |j| scales[j] as i32);
        let d = f16_at(x, 208) * f32_at(y, 0);
        for l in 0..8 {
            sums[l] += d * aux32[l] as f32;
        }
    }
    sums.iter().fold(0.0, |acc, s| acc + s)
}

/// block_q8_K · block_q8_K (q8_K weights have no ggml kernel; this one is exact per block).
pub fn dot_q8_k(n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut sumf = 0f32;
    for (x, y) in blocks(w, 292, n / 256).zip(blocks(a, 292, n / 256)) {
        let sumi: i32 = i8s(&x[4..260])
            .iter()
            .zip(i8s(&y[4..260]))
            .map(|(&p, &q)| p as i32 * q as i32)
            .sum();
        sumf += f32_at(x, 0) * f32_at(y, 0) * sumi as f32;
    }
    sumf
}

// --- activation quantizers ------------------------------------------------------------------

fn amax(x: &[f32]) -> f32 {
    x.iter().fold(0f32, |m, v| if v.abs() > m { v.abs() } else { m })
}

fn f16_bits(v: f32) -> [u8; 2] {
    half::f16::from_f32(v).to_bits().to_le_bytes()
}

/// ggml-cpu's x86 `quantize_row_q8_0`: d = amax/127, qs = rint(x · 127/amax) (ties to even).
/// Differs from the reference codec (`roundf(x / d)`) in rare ties, and llama.cpp runs this one.
pub fn quantize_q8_0(x: &[f32], out: &mut [u8]) {
    for (xb, yb) in x.chunks_exact(32).zip(out.chunks_exact_mut(34)) {
        let m = amax(xb);
        let d = m / 127.0;
        let id = if m != 0.0 { 127.0 / m } else { 0.0 };
        yb[0..2].copy_from_slice(&f16_bits(d));
        for (q, &v) in yb[2..].iter_mut().zip(xb) {
            *q = (v * id).round_ties_even() as i8 as u8;
        }
    }
}

/// ggml-cpu's x86 `quantize_row_q8_1`: as q8_0, plus s = d · Σqs.
pub fn quantize_q8_1(x: &[f32], out: &mut [u8]) {
    for (xb, yb) in x.chunks_exact(32).zip(out.chunks_exact_mut(36)) {
        let m = amax(xb);
        let d = m / 127.0;
        let id = if m != 0.0 { 127.0 / m } else { 0.0 };
        let mut sum = 0i32;
        for (q, &v) in yb[4..].iter_mut().zip(xb) {
            let r = (v * id).round_ties_even() as i8;
            sum += r as i32;
            *q = r as u8;
        }
        yb[0..2].copy_from_slice(&f16_bits(d));
        yb[2..4].copy_from_slice(&f16_bits(sum as f32 * d));
    }
}

/// ggml `quantize_row_q8_K_ref`: scale from the signed value of largest magnitude,
/// qs = nearest_int(-127/max · x), d = 1/iscale, bsums over groups of 16. An all-zero block
/// gets d = 0 and zero sums (ggml leaves its bsums unwritten).
pub fn quantize_q8_k(x: &[f32], out: &mut [u8]) {
    for (xb, yb) in x.chunks_exact(256).zip(out.chunks_exact_mut(292)) {
        let (mut amax, mut max) = (0f32, 0f32);
        for &v in xb {
            if v.abs() > amax {
                amax = v.abs();
                max = v;
            }
        }
        if amax == 0.0 {
            yb.fill(0);
            continue;
        }
        let iscale = -127.0 / max;
        for (q, &v) in yb[4..260].iter_mut().zip(xb) {
            *q = ((iscale * v).round_ties_even() as i32).min(127) as i8 as u8;
        }
        for j in 0..16 {
            let s: i32 = i8s(&yb[4 + 16 * j..20 + 16 * j]).iter().map(|&q| q as i32).sum();
            yb[260 + 2 * j..262 + 2 * j].copy_from_slice(&(s as i16).to_le_bytes());
        }
        yb[0..4].copy_from_slice(&(1.0 / iscale).to_le_bytes());
    }
}
