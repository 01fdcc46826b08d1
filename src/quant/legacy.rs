//! The 32-element formats: q4_0, q4_1, q5_0, q5_1, q8_0, q8_1.
//!
//! Ports of ggml's `dequantize_row_*` and `quantize_row_*_ref` (`ggml-quants.c`). The float
//! expressions keep ggml's operation order (`x0*d + m`, not a fused multiply-add) so the results
//! are bit-identical.

use super::blocks::*;

/// ggml: `dequantize_row_q4_0`.
pub fn dequant_q4_0(src: &[u8], dst: &mut [f32]) {
    for (b, y) in as_blocks::<BlockQ4_0>(src).iter().zip(dst.chunks_exact_mut(QK4_0)) {
        let d = b.d();
        for j in 0..QK4_0 / 2 {
            let x0 = (b.qs[j] & 0x0f) as i32 - 8;
            let x1 = (b.qs[j] >> 4) as i32 - 8;
            y[j] = x0 as f32 * d;
            y[j + QK4_0 / 2] = x1 as f32 * d;
        }
    }
}

/// ggml: `quantize_row_q4_0_ref`.
pub fn quant_q4_0(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK4_0).zip(as_blocks_mut::<BlockQ4_0>(dst)) {
        let (_, max) = abs_max(x);
        let d = max / -8.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        b.set_d(d);
        for j in 0..QK4_0 / 2 {
            let x0 = x[j] * id;
            let x1 = x[QK4_0 / 2 + j] * id;
            // (int8_t)(x0 + 8.5f): truncation toward zero.
            let xi0 = ((x0 + 8.5) as i8).min(15) as u8;
            let xi1 = ((x1 + 8.5) as i8).min(15) as u8;
            b.qs[j] = xi0 | (xi1 << 4);
        }
    }
}

/// ggml: `dequantize_row_q4_1`.
pub fn dequant_q4_1(src: &[u8], dst: &mut [f32]) {
    for (b, y) in as_blocks::<BlockQ4_1>(src).iter().zip(dst.chunks_exact_mut(QK4_1)) {
        let (d, m) = (b.d(), b.m());
        for j in 0..QK4_1 / 2 {
            let x0 = (b.qs[j] & 0x0f) as f32;
            let x1 = (b.qs[j] >> 4) as f32;
            y[j] = x0 * d + m;
            y[j + QK4_1 / 2] = x1 * d + m;
        }
    }
}

/// ggml: `quantize_row_q4_1_ref`.
pub fn quant_q4_1(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK4_1).zip(as_blocks_mut::<BlockQ4_1>(dst)) {
        let (min, max) = min_max(x);
        let d = (max - min) / 15.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        b.set_d(d);
        b.set_m(min);
        for j in 0..QK4_1 / 2 {
            let x0 = (x[j] - min) * id;
            let x1 = (x[QK4_1 / 2 + j] - min) * id;
            let xi0 = ((x0 + 0.5) as i8).min(15) as u8;
            let xi1 = ((x1 + 0.5) as i8).min(15) as u8;
            b.qs[j] = xi0 | (xi1 << 4);
        }
    }
}

/// ggml: `dequantize_row_q5_0`.
pub fn dequant_q5_0(src: &[u8], dst: &mut [f32]) {
    for (b, y) in as_blocks::<BlockQ5_0>(src).iter().zip(dst.chunks_exact_mut(QK5_0)) {
        let d = b.d();
        let qh = u32::from_le_bytes(b.qh);
        for j in 0..QK5_0 / 2 {
            let xh_0 = (((qh >> j) << 4) & 0x10) as u8;
            let xh_1 = ((qh >> (j + 12)) & 0x10) as u8;
            let x0 = ((b.qs[j] & 0x0f) | xh_0) as i32 - 16;
            let x1 = ((b.qs[j] >> 4) | xh_1) as i32 - 16;
            y[j] = x0 as f32 * d;
            y[j + QK5_0 / 2] = x1 as f32 * d;
        }
    }
}

/// ggml: `quantize_row_q5_0_ref`.
pub fn quant_q5_0(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK5_0).zip(as_blocks_mut::<BlockQ5_0>(dst)) {
        let (_, max) = abs_max(x);
        let d = max / -16.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        b.set_d(d);
        let mut qh = 0u32;
        for j in 0..QK5_0 / 2 {
            let x0 = x[j] * id;
            let x1 = x[QK5_0 / 2 + j] * id;
            let xi0 = ((x0 + 16.5) as i8).min(31) as u8;
            let xi1 = ((x1 + 16.5) as i8).min(31) as u8;
            b.qs[j] = (xi0 & 0x0f) | ((xi1 & 0x0f) << 4);
            qh |= (((xi0 & 0x10) >> 4) as u32) << j;
            qh |= (((xi1 & 0x10) >> 4) as u32) << (j + QK5_0 / 2);
        }
        b.qh = qh.to_le_bytes();
    }
}

/// ggml: `dequantize_row_q5_1`.
pub fn dequant_q5_1(src: &[u8], dst: &mut [f32]) {
    for (b, y) in as_blocks::<BlockQ5_1>(src).iter().zip(dst.chunks_exact_mut(QK5_1)) {
        let (d, m) = (b.d(), b.m());
        let qh = u32::from_le_bytes(b.qh);
        for j in 0..QK5_1 / 2 {
            let xh_0 = (((qh >> j) << 4) & 0x10) as u8;
            let xh_1 = ((qh >> (j + 12)) & 0x10) as u8;
            let x0 = ((b.qs[j] & 0x0f) | xh_0) as f32;
            let x1 = ((b.qs[j] >> 4) | xh_1) as f32;
            y[j] = x0 * d + m;
            y[j + QK5_1 / 2] = x1 * d + m;
        }
    }
}

/// ggml: `quantize_row_q5_1_ref`.
pub fn quant_q5_1(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK5_1).zip(as_blocks_mut::<BlockQ5_1>(dst)) {
        let (min, max) = min_max(x);
        let d = (max - min) / 31.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        b.set_d(d);
        b.set_m(min);
        let mut qh = 0u32;
        for j in 0..QK5_1 / 2 {
            let x0 = (x[j] - min) * id;
            let x1 = (x[QK5_1 / 2 + j] - min) * id;
            // (uint8_t)(x0 + 0.5f), no clamp: a 32 from rounding wraps to 0 as in ggml.
            let xi0 = (x0 + 0.5) as u8;
            let xi1 = (x1 + 0.5) as u8;
            b.qs[j] = (xi0 & 0x0f) | ((xi1 & 0x0f) << 4);
            qh |= (((xi0 & 0x10) >> 4) as u32) << j;
            qh |= (((xi1 & 0x10) >> 4) as u32) << (j + QK5_1 / 2);
        }
        b.qh = qh.to_le_bytes();
    }
}

/// ggml: `dequantize_row_q8_0`.
pub fn dequant_q8_0(src: &[u8], dst: &mut [f32]) {
    for (b, y) in as_blocks::<BlockQ8_0>(src).iter().zip(dst.chunks_exact_mut(QK8_0)) {
        let d = b.d();
        for (y, &q) in y.iter_mut().zip(&b.qs) {
            *y = q as f32 * d;
        }
    }
}

/// ggml: `quantize_row_q8_0_ref`.
pub fn quant_q8_0(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK8_0).zip(as_blocks_mut::<BlockQ8_0>(dst)) {
        let amax = x.iter().fold(0.0f32, |a, v| c_max(a, v.abs()));
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        b.set_d(d);
        for (q, &v) in b.qs.iter_mut().zip(x) {
            *q = (v * id).round() as i8;
        }
    }
}

/// q8_1 has no ggml `to_float`; this is q8_0's rule, `x = d * q` (`s` is redundant).
pub fn dequant_q8_1(src: &[u8], dst: &mut [f32]) {
    for (b, y) in as_blocks::<BlockQ8_1>(src).iter().zip(dst.chunks_exact_mut(QK8_1)) {
        let d = b.d();
        for (y, &q) in y.iter_mut().zip(&b.qs) {
            *y = q as f32 * d;
        }
    }
}

/// ggml: `quantize_row_q8_1_ref`; `s = fp16(sum(q) * d)` with d before its f16 rounding.
pub fn quant_q8_1(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK8_1).zip(as_blocks_mut::<BlockQ8_1>(dst)) {
        let amax = x.iter().fold(0.0f32, |a, v| c_max(a, v.abs()));
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        b.set_d(d);
        let mut sum = 0i32;
        for (q, &v) in b.qs.iter_mut().zip(x) {
            *q = (v * id).round() as i8;
            sum += *q as i32;
        }
        b.set_s(sum as f32 * d);
    }
}

/// C's `MAX(a, b)`: `a > b ? a : b` (a NaN `b` wins, unlike `f32::max`).
fn c_max(a: f32, b: f32) -> f32 {
    if a > b {
        a
    } else {
        b
    }
}

/// `(amax, max)`: the largest magnitude and the signed value that has it (first one wins).
fn abs_max(x: &[f32]) -> (f32, f32) {
    let (mut amax, mut max) = (0.0f32, 0.0f32);
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    (amax, max)
}

/// `(min, max)` starting from `(FLT_MAX, -FLT_MAX)`, as ggml's q4_1 / q5_1.
fn min_max(x: &[f32]) -> (f32, f32) {
    let (mut min, mut max) = (f32::MAX, -f32::MAX);
    for &v in x {
        if v < min {
            min = v;
        }
        if v > max {
            max = v;
        }
    }
    (min, max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn q4_0_extremes_map_to_code_0_and_max_to_minus_8() {
        let mut x = [0.0f32; 32];
        x[3] = -4.0; // the signed max: d = -4 / -8 = 0.5, x = -4 -> q = 0
        x[5] = 3.5;
        let mut q = [0u8; 18];
        quant_q4_0(&x, &mut q);
        let mut y = [0.0f32; 32];
        dequant_q4_0(&q, &mut y);
        assert_eq!(y[3], -4.0);
        assert_eq!(y[5], 3.5);
        assert_eq!(y[0], 0.0);
    }

    #[test]
    fn q8_1_sum_is_d_times_sum_of_quants() {
        let x: Vec<f32> = (0..32).map(|i| (i as f32 - 10.0) * 0.37).collect();
        let mut q = [0u8; 36];
        quant_q8_1(&x, &mut q);
        let b: &[BlockQ8_1] = as_blocks(&q);
        let sum: i32 = b[0].qs.iter().map(|&q| q as i32).sum();
        assert_eq!(b[0].s, f32_to_fp16(sum as f32 * (x[31] / 127.0)).to_le_bytes());
    }
}
