//! Non-linear 4-bit formats: iq4_nl (a fixed 16-level table, f16 scale) and mxfp4 (e2m1
//! values, e8m0 power-of-two scale).
//!
//! Ports of ggml's `dequantize_row_iq4_nl`, `quantize_iq4_nl` (what `ggml_quantize_chunk` and
//! `llama-quantize` run without an imatrix), `dequantize_row_mxfp4` and `quantize_row_mxfp4_ref`.

use super::blocks::*;

/// ggml: `GROUP_MAX_EPS`.
const GROUP_MAX_EPS: f32 = 1e-15;

/// The index of the level of the sorted table `val` nearest to `x` (ties go up).
/// ggml: `best_index_int8` (the bisection version of this commit).
#[inline]
fn best_index_int8(val: &[i8; 16], x: f32) -> usize {
    let n = val.len();
    if x <= val[0] as f32 {
        return 0;
    }
    if x >= val[n - 1] as f32 {
        return n - 1;
    }
    let (mut ml, mut mu) = (0, n - 1);
    while mu - ml > 1 {
        let mav = (ml + mu) / 2;
        if x < val[mav] as f32 {
            mu = mav;
        } else {
            ml = mav;
        }
    }
    if x - (val[mu - 1] as f32) < val[mu] as f32 - x {
        mu - 1
    } else {
        mu
    }
}

/// ggml: `dequantize_row_iq4_nl`.
pub fn dequant_iq4_nl(src: &[u8], dst: &mut [f32]) {
    for (b, y) in as_blocks::<BlockIQ4NL>(src).iter().zip(dst.chunks_exact_mut(QK4_NL)) {
        let d = b.d();
        for j in 0..QK4_NL / 2 {
            y[j] = d * KVALUES_IQ4NL[(b.qs[j] & 0xf) as usize] as f32;
            y[j + QK4_NL / 2] = d * KVALUES_IQ4NL[(b.qs[j] >> 4) as usize] as f32;
        }
    }
}

/// ggml: `quantize_iq4_nl` with no imatrix, i.e. `quantize_row_iq4_nl_impl(QK4_NL, 32, ...,
/// ntry = 7)` per block. (`quantize_row_iq4_nl_ref` passes ntry = -1 and gives other bytes;
/// this is the one `ggml_quantize_chunk` uses.)
pub fn quant_iq4_nl(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK4_NL).zip(as_blocks_mut::<BlockIQ4NL>(dst)) {
        quant_iq4_nl_block(x, b, 7);
    }
}

/// One super-block = one block of `quantize_row_iq4_nl_impl` with `quant_weights == NULL`
/// (weights x², so `sigma2` is unused).
fn quant_iq4_nl_block(x: &[f32], b: &mut BlockIQ4NL, ntry: i32) {
    let values = &KVALUES_IQ4NL;
    let mut weight = [0.0f32; QK4_NL];
    let mut l = [0u8; QK4_NL];
    for (w, v) in weight.iter_mut().zip(x) {
        *w = v * v;
    }
    let (mut amax, mut max) = (0.0f32, 0.0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    let scale = if amax < GROUP_MAX_EPS {
        0.0
    } else {
        let v0 = values[0] as f32;
        let mut d = if ntry > 0 { -max / v0 } else { max / v0 };
        let mut id = 1.0 / d;
        let (mut sumqx, mut sumq2) = (0.0f32, 0.0f32);
        for j in 0..QK4_NL {
            let li = best_index_int8(values, id * x[j]);
            l[j] = li as u8;
            let q = values[li] as f32;
            sumqx += weight[j] * q * x[j];
            sumq2 += weight[j] * q * q;
        }
        d = if sumq2 > 0.0 { sumqx / sumq2 } else { 0.0 };
        let mut best = d * sumqx;
        for itry in -ntry..=ntry {
            id = (itry + values[0] as i32) as f32 / max;
            sumqx = 0.0;
            sumq2 = 0.0;
            for j in 0..QK4_NL {
                let q = values[best_index_int8(values, id * x[j])] as f32;
                sumqx += weight[j] * q * x[j];
                sumq2 += weight[j] * q * q;
            }
            if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
                d = sumqx / sumq2;
                best = d * sumqx;
            }
        }
        d
    };

    // One block per super-block: the scale is stored as is and, with ntry > 0, the quants are
    // redone with the final (unrounded) scale.
    b.set_d(scale);
    if ntry > 0 {
        let id = if scale != 0.0 { 1.0 / scale } else { 0.0 };
        for j in 0..QK4_NL {
            l[j] = best_index_int8(values, id * x[j]) as u8;
        }
    }
    for j in 0..QK4_NL / 2 {
        b.qs[j] = l[j] | (l[QK4_NL / 2 + j] << 4);
    }
}

/// ggml: `dequantize_row_mxfp4`.
pub fn dequant_mxfp4(src: &[u8], dst: &mut [f32]) {
    for (b, y) in as_blocks::<BlockMXFP4>(src).iter().zip(dst.chunks_exact_mut(QK_MXFP4)) {
        let d = b.d();
        for j in 0..QK_MXFP4 / 2 {
            y[j] = KVALUES_MXFP4[(b.qs[j] & 0xf) as usize] as f32 * d;
            y[j + QK_MXFP4 / 2] = KVALUES_MXFP4[(b.qs[j] >> 4) as usize] as f32 * d;
        }
    }
}

/// The nearest e2m1 level to `x` at scale `e` (first wins on ties). ggml: `best_index_mxfp4`.
#[inline]
fn best_index_mxfp4(x: f32, e: f32) -> u8 {
    let mut best_index = 0;
    let mut best_err = (KVALUES_MXFP4[0] as f32 * e - x).abs();
    for (i, &k) in KVALUES_MXFP4.iter().enumerate().skip(1) {
        let err = (k as f32 * e - x).abs();
        if err < best_err {
            best_index = i;
            best_err = err;
        }
    }
    best_index as u8
}

/// ggml: `quantize_row_mxfp4_ref`. The shared exponent is `floor(log2(amax)) - 2` (the
/// largest e2m1 value is 6 = 1.5 * 2^2); `log2f` is libm's, as in ggml.
pub fn quant_mxfp4(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK_MXFP4).zip(as_blocks_mut::<BlockMXFP4>(dst)) {
        let mut amax = 0.0f32;
        for &v in x {
            if amax < v.abs() {
                amax = v.abs();
            }
        }
        // (uint8_t)(float): x86 converts through i32 and keeps the low byte.
        let e = if amax > 0.0 {
            (amax.log2().floor() - 2.0 + 127.0) as i32 as u8
        } else {
            0
        };
        let d = e8m0_to_f32_half(e);
        b.e = e;
        for j in 0..QK_MXFP4 / 2 {
            let x0 = best_index_mxfp4(x[j], d);
            let x1 = best_index_mxfp4(x[QK_MXFP4 / 2 + j], d);
            b.qs[j] = x0 | (x1 << 4);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn best_index_int8_picks_nearest_level_ties_up() {
        let v = &KVALUES_IQ4NL;
        assert_eq!(best_index_int8(v, -200.0), 0);
        assert_eq!(best_index_int8(v, 200.0), 15);
        assert_eq!(best_index_int8(v, 0.0), 8); // -10 vs 1
        assert_eq!(best_index_int8(v, -4.5), 8); // tie between -10 and 1: the upper one
        assert_eq!(best_index_int8(v, -4.6), 7);
        for (i, &k) in v.iter().enumerate() {
            assert_eq!(best_index_int8(v, k as f32), i);
        }
    }

    #[test]
    fn mxfp4_exact_levels_round_trip() {
        // amax 6 -> e = floor(log2 6) - 2 + 127 = 127, d = 0.5: every e2m1 value is exact.
        let levels = [0.0f32, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0];
        let x: Vec<f32> = (0..32)
            .map(|i| levels[i % 8] * if i % 3 == 0 { -1.0 } else { 1.0 })
            .collect();
        let mut q = [0u8; 17];
        quant_mxfp4(&x, &mut q);
        assert_eq!(q[0], 127);
        let mut y = [0.0f32; 32];
        dequant_mxfp4(&q, &mut y);
        assert_eq!(&y[..], &x[..]);
    }
}
