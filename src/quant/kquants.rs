//! The K-quants: 256-element super-blocks q2_K, q3_K, q4_K, q5_K, q6_K, and the q8_K
//! activation format.
//!
//! Ports of ggml's `dequantize_row_q*_K` and `quantize_row_q*_K_ref` (`ggml-quants.c`), which
//! `ggml_quantize_chunk` (and so `llama-quantize`) uses when there is no imatrix. The scale
//! searches are float-heavy; every expression keeps ggml's operand order and association
//! (`w*x*l` is `(w*x)*l`, no fused multiply-add) so the encodings are bit-identical.

// Index loops are kept where ggml has them, so the port reads side by side with the C.
#![allow(clippy::needless_range_loop)]

use super::blocks::*;

/// ggml: `GROUP_MAX_EPS`.
const GROUP_MAX_EPS: f32 = 1e-15;

/// Round to nearest (ties to even) through the float mantissa. ggml: `nearest_int`, valid for
/// |x| <= 2^22 (ggml only asserts that in debug builds; neither do we).
#[inline]
fn nearest_int(fval: f32) -> i32 {
    let val = fval + 12582912.0;
    (val.to_bits() as i32 & 0x007f_ffff) - 0x0040_0000
}

/// Symmetric scale search for `nmax`-level signed quants; `l_out[i]` in `0..2*nmax` (offset).
/// ggml: `make_qx_quants` (`rmse_type` 0..4, negative = return early; weights `qw` optional).
fn make_qx_quants(nmax: i32, x: &[f32], l_out: &mut [i8], rmse_type: i32, qw: Option<&[f32]>) -> f32 {
    let n = x.len();
    let (mut max, mut amax) = (0.0f32, 0.0f32);
    for &v in x {
        let ax = v.abs();
        if ax > amax {
            amax = ax;
            max = v;
        }
    }
    if amax < GROUP_MAX_EPS {
        l_out[..n].fill(0);
        return 0.0;
    }
    let clamp = |l: i32| l.clamp(-nmax, nmax - 1);
    let mut iscale = -nmax as f32 / max;
    if rmse_type == 0 {
        for i in 0..n {
            l_out[i] = (nmax + clamp(nearest_int(iscale * x[i]))) as i8;
        }
        return 1.0 / iscale;
    }
    let (rmse_type, return_early) = if rmse_type < 0 {
        (-rmse_type, true)
    } else {
        (rmse_type, false)
    };
    let weight = |i: usize| match qw {
        Some(qw) => qw[i],
        None => match rmse_type {
            1 => x[i] * x[i],
            2 => 1.0,
            3 => x[i].abs(),
            _ => x[i].abs().sqrt(),
        },
    };
    let (mut sumlx, mut suml2) = (0.0f32, 0.0f32);
    for i in 0..n {
        let l = clamp(nearest_int(iscale * x[i]));
        l_out[i] = (l + nmax) as i8;
        let w = weight(i);
        sumlx += w * x[i] * l as f32;
        suml2 += w * l as f32 * l as f32;
    }
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    if return_early {
        return if suml2 > 0.0 {
            0.5 * (scale + 1.0 / iscale)
        } else {
            1.0 / iscale
        };
    }
    let mut best = scale * sumlx;
    for is in -9..=9 {
        if is == 0 {
            continue;
        }
        iscale = -(nmax as f32 + 0.1 * is as f32) / max;
        sumlx = 0.0;
        suml2 = 0.0;
        for i in 0..n {
            let l = clamp(nearest_int(iscale * x[i]));
            let w = weight(i);
            sumlx += w * x[i] * l as f32;
            suml2 += w * l as f32 * l as f32;
        }
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            for i in 0..n {
                l_out[i] = (nmax + clamp(nearest_int(iscale * x[i]))) as i8;
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// q3_K's scale search with x² weights and coordinate-wise refinement; `l_out[i]` in
/// `0..2*nmax`. ggml: `make_q3_quants`.
fn make_q3_quants(nmax: i32, x: &[f32], l_out: &mut [i8], do_rmse: bool) -> f32 {
    let n = x.len();
    let (mut max, mut amax) = (0.0f32, 0.0f32);
    for &v in x {
        let ax = v.abs();
        if ax > amax {
            amax = ax;
            max = v;
        }
    }
    if amax < GROUP_MAX_EPS {
        l_out[..n].fill(0);
        return 0.0;
    }
    let clamp = |l: i32| l.clamp(-nmax, nmax - 1);
    let iscale = -nmax as f32 / max;
    if do_rmse {
        let (mut sumlx, mut suml2) = (0.0f32, 0.0f32);
        for i in 0..n {
            let l = clamp(nearest_int(iscale * x[i]));
            l_out[i] = l as i8;
            let w = x[i] * x[i];
            sumlx += w * x[i] * l as f32;
            suml2 += w * l as f32 * l as f32;
        }
        for _itry in 0..5 {
            let mut n_changed = 0;
            for i in 0..n {
                let w = x[i] * x[i];
                let li = l_out[i] as f32;
                let mut slx = sumlx - w * x[i] * li;
                if slx > 0.0 {
                    let mut sl2 = suml2 - w * li * li;
                    let new_l = clamp(nearest_int(x[i] * sl2 / slx));
                    if new_l != l_out[i] as i32 {
                        slx += w * x[i] * new_l as f32;
                        sl2 += w * new_l as f32 * new_l as f32;
                        if sl2 > 0.0 && slx * slx * suml2 > sumlx * sumlx * sl2 {
                            l_out[i] = new_l as i8;
                            sumlx = slx;
                            suml2 = sl2;
                            n_changed += 1;
                        }
                    }
                }
            }
            if n_changed == 0 {
                break;
            }
        }
        for l in &mut l_out[..n] {
            *l += nmax as i8;
        }
        return if suml2 > 0.0 { sumlx / suml2 } else { 0.0 };
    }
    for i in 0..n {
        l_out[i] = (clamp(nearest_int(iscale * x[i])) + nmax) as i8;
    }
    1.0 / iscale
}

/// Asymmetric (scale, min) search for `0..=nmax` quants minimising the weighted error;
/// returns `(scale, -min)`. ggml: `make_qkx2_quants`.
#[allow(clippy::too_many_arguments)]
fn make_qkx2_quants(
    nmax: i32,
    x: &[f32],
    weights: &[f32],
    l_out: &mut [u8],
    laux: &mut [u8],
    rmin: f32,
    rdelta: f32,
    nstep: i32,
    use_mad: bool,
) -> (f32, f32) {
    let n = x.len();
    let (mut min, mut max) = (x[0], x[0]);
    let mut sum_w = weights[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..n {
        if x[i] < min {
            min = x[i];
        }
        if x[i] > max {
            max = x[i];
        }
        let w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        l_out[..n].fill(0);
        return (0.0, -min);
    }
    let err = |d: f32| if use_mad { d.abs() } else { d * d };
    let mut iscale = nmax as f32 / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best_error = 0.0f32;
    for i in 0..n {
        let l = nearest_int(iscale * (x[i] - min));
        l_out[i] = l.clamp(0, nmax) as u8;
        let diff = scale * l_out[i] as f32 + min - x[i];
        best_error += weights[i] * err(diff);
    }
    if nstep < 1 {
        return (scale, -min);
    }
    for is in 0..=nstep {
        iscale = (rmin + rdelta * is as f32 + nmax as f32) / (max - min);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0.0f32, 0.0f32, 0.0f32);
        for i in 0..n {
            let l = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
            laux[i] = l as u8;
            let (w, l) = (weights[i], l as f32);
            sum_l += w * l;
            sum_l2 += w * l * l;
            sum_xl += w * l * x[i];
        }
        let d = sum_w * sum_l2 - sum_l * sum_l;
        if d > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / d;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / d;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut cur_error = 0.0f32;
            for i in 0..n {
                let diff = this_scale * laux[i] as f32 + this_min - x[i];
                cur_error += weights[i] * err(diff);
            }
            if cur_error < best_error {
                l_out[..n].copy_from_slice(&laux[..n]);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

/// Packs 2-bit quants: byte `j/4 + l` of each 128-element half holds elements l, l+32, l+64,
/// l+96 (low bits first), as q2_K and q3_K store them.
fn pack_2bit(l: &[u8; QK_K], qs: &mut [u8; QK_K / 4]) {
    for j in (0..QK_K).step_by(128) {
        for i in 0..32 {
            qs[j / 4 + i] = l[j + i] | (l[j + i + 32] << 2) | (l[j + i + 64] << 4) | (l[j + i + 96] << 6);
        }
    }
}

// ---- q2_K ------------------------------------------------------------------------------------

/// ggml: `dequantize_row_q2_K`.
pub fn dequant_q2_k(src: &[u8], dst: &mut [f32]) {
    for (b, y) in as_blocks::<BlockQ2K>(src).iter().zip(dst.chunks_exact_mut(QK_K)) {
        let (d, min) = (b.d(), b.dmin());
        let mut is = 0;
        let mut out = 0;
        for n in (0..QK_K).step_by(128) {
            let q = &b.qs[n / 4..n / 4 + 32];
            for shift in (0..8).step_by(2) {
                for half in 0..2 {
                    let sc = b.scales[is];
                    is += 1;
                    let dl = d * (sc & 0xf) as f32;
                    let ml = min * (sc >> 4) as f32;
                    for &q in &q[16 * half..16 * half + 16] {
                        y[out] = dl * ((q >> shift) & 3) as f32 - ml;
                        out += 1;
                    }
                }
            }
        }
    }
}

/// ggml: `quantize_row_q2_K_ref`.
pub fn quant_q2_k(src: &[f32], dst: &mut [u8]) {
    const Q4SCALE: f32 = 15.0;
    let mut l = [0u8; QK_K];
    let mut laux = [0u8; 16];
    let mut weights = [0.0f32; 16];
    let mut mins = [0.0f32; QK_K / 16];
    let mut scales = [0.0f32; QK_K / 16];
    for (x, b) in src.chunks_exact(QK_K).zip(as_blocks_mut::<BlockQ2K>(dst)) {
        let (mut max_scale, mut max_min) = (0.0f32, 0.0f32);
        for j in 0..QK_K / 16 {
            let xg = &x[16 * j..16 * j + 16];
            for (w, v) in weights.iter_mut().zip(xg) {
                *w = v.abs();
            }
            let (s, m) = make_qkx2_quants(3, xg, &weights, &mut l[16 * j..], &mut laux, -0.5, 0.1, 15, true);
            scales[j] = s;
            mins[j] = m;
            if s > max_scale {
                max_scale = s;
            }
            if m > max_min {
                max_min = m;
            }
        }
        if max_scale > 0.0 {
            let iscale = Q4SCALE / max_scale;
            for j in 0..QK_K / 16 {
                b.scales[j] = nearest_int(iscale * scales[j]) as u8;
            }
            b.set_d(max_scale / Q4SCALE);
        } else {
            b.scales = [0; QK_K / 16];
            b.set_d(0.0);
        }
        if max_min > 0.0 {
            let iscale = Q4SCALE / max_min;
            for j in 0..QK_K / 16 {
                b.scales[j] |= (nearest_int(iscale * mins[j]) << 4) as u8;
            }
            b.set_dmin(max_min / Q4SCALE);
        } else {
            b.set_dmin(0.0);
        }
        for j in 0..QK_K / 16 {
            let d = b.d() * (b.scales[j] & 0xf) as f32;
            if d == 0.0 {
                continue;
            }
            let dm = b.dmin() * (b.scales[j] >> 4) as f32;
            for ii in 0..16 {
                l[16 * j + ii] = nearest_int((x[16 * j + ii] + dm) / d).clamp(0, 3) as u8;
            }
        }
        pack_2bit(&l, &mut b.qs);
    }
}

// ---- q3_K ------------------------------------------------------------------------------------

/// ggml: `dequantize_row_q3_K`.
pub fn dequant_q3_k(src: &[u8], dst: &mut [f32]) {
    for (b, y) in as_blocks::<BlockQ3K>(src).iter().zip(dst.chunks_exact_mut(QK_K)) {
        let d_all = b.d();
        let scales = unpack_q3k_scales(&b.scales);
        let mut m = 1u8;
        let mut is = 0;
        let mut out = 0;
        for n in (0..QK_K).step_by(128) {
            let q = &b.qs[n / 4..n / 4 + 32];
            for shift in (0..8).step_by(2) {
                for half in 0..2 {
                    let dl = d_all * (scales[is] as i32 - 32) as f32;
                    is += 1;
                    for l in 16 * half..16 * half + 16 {
                        let low = ((q[l] >> shift) & 3) as i32;
                        let high = if b.hmask[l] & m != 0 { 0 } else { 4 };
                        y[out] = dl * (low - high) as f32;
                        out += 1;
                    }
                }
                m <<= 1;
            }
        }
    }
}

/// ggml: `quantize_row_q3_K_ref`.
pub fn quant_q3_k(src: &[f32], dst: &mut [u8]) {
    let mut l = [0i8; QK_K];
    let mut scales = [0.0f32; QK_K / 16];
    for (x, b) in src.chunks_exact(QK_K).zip(as_blocks_mut::<BlockQ3K>(dst)) {
        let (mut max_scale, mut amax) = (0.0f32, 0.0f32);
        for j in 0..QK_K / 16 {
            scales[j] = make_q3_quants(4, &x[16 * j..16 * j + 16], &mut l[16 * j..], true);
            let scale = scales[j].abs();
            if scale > amax {
                amax = scale;
                max_scale = scales[j];
            }
        }

        b.scales = [0; 12];
        if max_scale != 0.0 {
            let iscale = -32.0 / max_scale;
            for j in 0..QK_K / 16 {
                // int8_t l = nearest_int(...): truncated to 8 bits, then clamped.
                let lj = ((nearest_int(iscale * scales[j]) as i8).clamp(-32, 31) + 32) as u8;
                if j < 8 {
                    b.scales[j] = lj & 0xf;
                } else {
                    b.scales[j - 8] |= (lj & 0xf) << 4;
                }
                b.scales[j % 4 + 8] |= (lj >> 4) << (2 * (j / 4));
            }
            b.set_d(1.0 / iscale);
        } else {
            b.set_d(0.0);
        }

        for j in 0..QK_K / 16 {
            let sc = if j < 8 { b.scales[j] & 0xf } else { b.scales[j - 8] >> 4 };
            let sc = (sc | (((b.scales[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) as i32 - 32;
            let d = b.d() * sc as f32;
            if d == 0.0 {
                continue;
            }
            for ii in 0..16 {
                l[16 * j + ii] = (nearest_int(x[16 * j + ii] / d).clamp(-4, 3) + 4) as i8;
            }
        }

        // High bit of element j goes to bit j/32 of hmask[j%32].
        b.hmask = [0; QK_K / 8];
        let mut low = [0u8; QK_K];
        for j in 0..QK_K {
            let mut v = l[j] as u8;
            if v > 3 {
                b.hmask[j % 32] |= 1 << (j / 32);
                v -= 4;
            }
            low[j] = v;
        }
        pack_2bit(&low, &mut b.qs);
    }
}

// ---- q4_K / q5_K -----------------------------------------------------------------------------

/// The 6-bit (scale, min) pair of group j written the way `get_scale_min_k4` reads it back.
fn pack_scale_min_k4(scales: &mut [u8; K_SCALE_SIZE], j: usize, ls: u8, lm: u8) {
    if j < 4 {
        scales[j] = ls;
        scales[j + 4] = lm;
    } else {
        scales[j + 4] = (ls & 0xf) | ((lm & 0xf) << 4);
        scales[j - 4] |= (ls >> 4) << 6;
        scales[j] |= (lm >> 4) << 6;
    }
}

/// The shared first half of `quantize_row_q4_K_ref` / `quantize_row_q5_K_ref`: per-group
/// (scale, min) search, the 6-bit packing, `d`/`dmin`, and the final quants `l` in `0..=nmax`.
/// Returns the f16 bits of `(d, dmin)`.
fn quant_k_scale_min(
    x: &[f32],
    nmax: i32,
    rmin: f32,
    nstep: i32,
    packed: &mut [u8; K_SCALE_SIZE],
    l: &mut [u8; QK_K],
) -> ([u8; 2], [u8; 2]) {
    let mut laux = [0u8; 32];
    let mut weights = [0.0f32; 32];
    let mut mins = [0.0f32; QK_K / 32];
    let mut scales = [0.0f32; QK_K / 32];
    let (mut max_scale, mut max_min) = (0.0f32, 0.0f32);
    for j in 0..QK_K / 32 {
        let xg = &x[32 * j..32 * j + 32];
        let mut sum_x2 = 0.0f32;
        for v in xg {
            sum_x2 += v * v;
        }
        let av_x = (sum_x2 / 32.0).sqrt();
        for (w, v) in weights.iter_mut().zip(xg) {
            *w = av_x + v.abs();
        }
        let (s, m) = make_qkx2_quants(nmax, xg, &weights, &mut l[32 * j..], &mut laux, rmin, 0.1, nstep, false);
        scales[j] = s;
        mins[j] = m;
        if s > max_scale {
            max_scale = s;
        }
        if m > max_min {
            max_min = m;
        }
    }

    let inv_scale = if max_scale > 0.0 { 63.0 / max_scale } else { 0.0 };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    for j in 0..QK_K / 32 {
        // uint8_t ls = nearest_int(...): truncated to 8 bits, then MIN(63, ..).
        let ls = (nearest_int(inv_scale * scales[j]) as u8).min(63);
        let lm = (nearest_int(inv_min * mins[j]) as u8).min(63);
        pack_scale_min_k4(packed, j, ls, lm);
    }
    let d = f32_to_fp16(max_scale / 63.0);
    let dmin = f32_to_fp16(max_min / 63.0);
    let (df, dminf) = (fp16_to_f32(d), fp16_to_f32(dmin));

    for j in 0..QK_K / 32 {
        let (sc, m) = get_scale_min_k4(j, packed);
        let d = df * sc as f32;
        if d == 0.0 {
            continue;
        }
        let dm = dminf * m as f32;
        for ii in 0..32 {
            l[32 * j + ii] = nearest_int((x[32 * j + ii] + dm) / d).clamp(0, nmax) as u8;
        }
    }
    (d.to_le_bytes(), dmin.to_le_bytes())
}

/// ggml: `dequantize_row_q4_K`.
pub fn dequant_q4_k(src: &[u8], dst: &mut [f32]) {
    for (b, y) in as_blocks::<BlockQ4K>(src).iter().zip(dst.chunks_exact_mut(QK_K)) {
        let (d, min) = (b.d(), b.dmin());
        for (g, y) in y.chunks_exact_mut(64).enumerate() {
            let q = &b.qs[32 * g..32 * g + 32];
            let (sc, m) = get_scale_min_k4(2 * g, &b.scales);
            let (d1, m1) = (d * sc as f32, min * m as f32);
            let (sc, m) = get_scale_min_k4(2 * g + 1, &b.scales);
            let (d2, m2) = (d * sc as f32, min * m as f32);
            for l in 0..32 {
                y[l] = d1 * (q[l] & 0xf) as f32 - m1;
                y[l + 32] = d2 * (q[l] >> 4) as f32 - m2;
            }
        }
    }
}

/// ggml: `quantize_row_q4_K_ref`.
pub fn quant_q4_k(src: &[f32], dst: &mut [u8]) {
    let mut l = [0u8; QK_K];
    for (x, b) in src.chunks_exact(QK_K).zip(as_blocks_mut::<BlockQ4K>(dst)) {
        (b.d, b.dmin) = quant_k_scale_min(x, 15, -1.0, 20, &mut b.scales, &mut l);
        for (g, q) in b.qs.chunks_exact_mut(32).enumerate() {
            for i in 0..32 {
                q[i] = l[64 * g + i] | (l[64 * g + i + 32] << 4);
            }
        }
    }
}

/// ggml: `dequantize_row_q5_K`.
pub fn dequant_q5_k(src: &[u8], dst: &mut [f32]) {
    for (b, y) in as_blocks::<BlockQ5K>(src).iter().zip(dst.chunks_exact_mut(QK_K)) {
        let (d, min) = (b.d(), b.dmin());
        for (g, y) in y.chunks_exact_mut(64).enumerate() {
            let ql = &b.qs[32 * g..32 * g + 32];
            let (u1, u2) = (1u8 << (2 * g), 2u8 << (2 * g));
            let (sc, m) = get_scale_min_k4(2 * g, &b.scales);
            let (d1, m1) = (d * sc as f32, min * m as f32);
            let (sc, m) = get_scale_min_k4(2 * g + 1, &b.scales);
            let (d2, m2) = (d * sc as f32, min * m as f32);
            for l in 0..32 {
                let h1 = if b.qh[l] & u1 != 0 { 16 } else { 0 };
                let h2 = if b.qh[l] & u2 != 0 { 16 } else { 0 };
                y[l] = d1 * ((ql[l] & 0xf) + h1) as f32 - m1;
                y[l + 32] = d2 * ((ql[l] >> 4) + h2) as f32 - m2;
            }
        }
    }
}

/// ggml: `quantize_row_q5_K_ref`.
pub fn quant_q5_k(src: &[f32], dst: &mut [u8]) {
    let mut l = [0u8; QK_K];
    for (x, b) in src.chunks_exact(QK_K).zip(as_blocks_mut::<BlockQ5K>(dst)) {
        (b.d, b.dmin) = quant_k_scale_min(x, 31, -0.5, 15, &mut b.scales, &mut l);
        b.qh = [0; QK_K / 8];
        for (g, ql) in b.qs.chunks_exact_mut(32).enumerate() {
            let (m1, m2) = (1u8 << (2 * g), 2u8 << (2 * g));
            for j in 0..32 {
                let mut l1 = l[64 * g + j];
                if l1 > 15 {
                    l1 -= 16;
                    b.qh[j] |= m1;
                }
                let mut l2 = l[64 * g + j + 32];
                if l2 > 15 {
                    l2 -= 16;
                    b.qh[j] |= m2;
                }
                ql[j] = l1 | (l2 << 4);
            }
        }
    }
}

// ---- q6_K ------------------------------------------------------------------------------------

/// ggml: `dequantize_row_q6_K`.
pub fn dequant_q6_k(src: &[u8], dst: &mut [f32]) {
    for (b, y) in as_blocks::<BlockQ6K>(src).iter().zip(dst.chunks_exact_mut(QK_K)) {
        let d = b.d();
        for (h, y) in y.chunks_exact_mut(128).enumerate() {
            let ql = &b.ql[64 * h..64 * h + 64];
            let qh = &b.qh[32 * h..32 * h + 32];
            let sc = &b.scales[8 * h..8 * h + 8];
            for l in 0..32 {
                let is = l / 16;
                let q1 = ((ql[l] & 0xf) | ((qh[l] & 3) << 4)) as i32 - 32;
                let q2 = ((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
                let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
                let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
                y[l] = d * sc[is] as f32 * q1 as f32;
                y[l + 32] = d * sc[is + 2] as f32 * q2 as f32;
                y[l + 64] = d * sc[is + 4] as f32 * q3 as f32;
                y[l + 96] = d * sc[is + 6] as f32 * q4 as f32;
            }
        }
    }
}

/// ggml: `quantize_row_q6_K_ref`.
pub fn quant_q6_k(src: &[f32], dst: &mut [u8]) {
    let mut l = [0i8; QK_K];
    let mut scales = [0.0f32; QK_K / 16];
    for (x, b) in src.chunks_exact(QK_K).zip(as_blocks_mut::<BlockQ6K>(dst)) {
        let (mut max_scale, mut max_abs_scale) = (0.0f32, 0.0f32);
        for ib in 0..QK_K / 16 {
            let scale = make_qx_quants(32, &x[16 * ib..16 * ib + 16], &mut l[16 * ib..], 1, None);
            scales[ib] = scale;
            if scale.abs() > max_abs_scale {
                max_abs_scale = scale.abs();
                max_scale = scale;
            }
        }
        if max_abs_scale < GROUP_MAX_EPS {
            *b = bytemuck::Zeroable::zeroed();
            b.set_d(0.0);
            continue;
        }

        let iscale = -128.0 / max_scale;
        b.set_d(1.0 / iscale);
        for ib in 0..QK_K / 16 {
            b.scales[ib] = nearest_int(iscale * scales[ib]).min(127) as i8;
        }
        for j in 0..QK_K / 16 {
            let d = b.d() * b.scales[j] as f32;
            if d == 0.0 {
                continue;
            }
            for ii in 0..16 {
                l[16 * j + ii] = (nearest_int(x[16 * j + ii] / d).clamp(-32, 31) + 32) as i8;
            }
        }

        for h in 0..2 {
            let lh = &l[128 * h..128 * h + 128];
            let ql = &mut b.ql[64 * h..64 * h + 64];
            for i in 0..32 {
                let q = |k: usize| lh[i + 32 * k] as u8;
                ql[i] = (q(0) & 0xf) | ((q(2) & 0xf) << 4);
                ql[i + 32] = (q(1) & 0xf) | ((q(3) & 0xf) << 4);
                b.qh[32 * h + i] = (q(0) >> 4) | ((q(1) >> 4) << 2) | ((q(2) >> 4) << 4) | ((q(3) >> 4) << 6);
            }
        }
    }
}

// ---- q8_K ------------------------------------------------------------------------------------

/// ggml: `dequantize_row_q8_K`.
pub fn dequant_q8_k(src: &[u8], dst: &mut [f32]) {
    for (b, y) in as_blocks::<BlockQ8K>(src).iter().zip(dst.chunks_exact_mut(QK_K)) {
        let d = b.d();
        for (y, &q) in y.iter_mut().zip(&b.qs) {
            *y = d * q as f32;
        }
    }
}

/// ggml: `quantize_row_q8_K_ref`. For an all-zero block ggml writes `d` and `qs` and leaves
/// `bsums` as they were; here they are zeroed, which is their value.
pub fn quant_q8_k(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK_K).zip(as_blocks_mut::<BlockQ8K>(dst)) {
        let (mut max, mut amax) = (0.0f32, 0.0f32);
        for &v in x {
            if v.abs() > amax {
                amax = v.abs();
                max = v;
            }
        }
        if amax == 0.0 {
            *b = bytemuck::Zeroable::zeroed();
            continue;
        }
        // -127, not -128: ggml keeps q8_K symmetric for the IQ2_XXS AVX dot product.
        let iscale = -127.0 / max;
        for (q, &v) in b.qs.iter_mut().zip(x) {
            *q = nearest_int(iscale * v).min(127) as i8;
        }
        for g in 0..QK_K / 16 {
            let sum: i32 = b.qs[16 * g..16 * g + 16].iter().map(|&q| q as i32).sum();
            b.set_bsum(g, sum as i16);
        }
        b.set_d(1.0 / iscale);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_int_rounds_half_to_even() {
        assert_eq!(nearest_int(2.5), 2);
        assert_eq!(nearest_int(3.5), 4);
        assert_eq!(nearest_int(-2.5), -2);
        assert_eq!(nearest_int(-0.4), 0);
        assert_eq!(nearest_int(-7.6), -8);
    }

    #[test]
    fn q3k_scale_packing_round_trips() {
        let mut b = BlockQ3K::zeroed_for_test();
        // What quant_q3_k writes for offsets 0..63, read back by the dequant's shuffle.
        let want: [u8; 16] = [0, 1, 31, 32, 33, 63, 5, 17, 48, 2, 60, 9, 40, 21, 62, 11];
        for (j, &lj) in want.iter().enumerate() {
            if j < 8 {
                b.scales[j] = lj & 0xf;
            } else {
                b.scales[j - 8] |= (lj & 0xf) << 4;
            }
            b.scales[j % 4 + 8] |= (lj >> 4) << (2 * (j / 4));
        }
        let got = unpack_q3k_scales(&b.scales);
        assert_eq!(got.map(|v| v as u8), want);
    }

    impl BlockQ3K {
        fn zeroed_for_test() -> Self {
            bytemuck::Zeroable::zeroed()
        }
    }

    #[test]
    fn k_scale_min_packing_round_trips() {
        let mut s = [0u8; K_SCALE_SIZE];
        let pairs = [
            (0, 63),
            (1, 62),
            (33, 17),
            (63, 0),
            (40, 41),
            (7, 56),
            (63, 63),
            (32, 31),
        ];
        for (j, &(ls, lm)) in pairs.iter().enumerate() {
            pack_scale_min_k4(&mut s, j, ls, lm);
        }
        for (j, &p) in pairs.iter().enumerate() {
            assert_eq!(get_scale_min_k4(j, &s), p, "group {j}");
        }
    }
}
