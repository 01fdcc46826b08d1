//! The x86 bodies of the attention kernels, for callers that enable AVX2, FMA and F16C (and
//! AVX-512F for the `_z` ones): the same operations in the same order as the portable code.

use std::arch::x86_64::*;

/// [`reduce16`](super::reduce16) of lanes 0..8 (`lo`) and 8..16 (`hi`).
#[inline(always)]
unsafe fn reduce(lo: __m256, hi: __m256) -> f32 {
    let t = _mm256_add_ps(hi, lo);
    let u = _mm_add_ps(_mm256_extractf128_ps(t, 1), _mm256_castps256_ps128(t));
    let v = _mm_add_ps(u, _mm_movehl_ps(u, u));
    _mm_cvtss_f32(_mm_add_ss(v, _mm_movehdup_ps(v)))
}

/// [`dot_gemm4`](super::dot_gemm4); every row at least `y.len()` long, a multiple of 16.
#[inline(always)]
pub unsafe fn dot_gemm4(x: [&[f32]; 4], y: &[f32]) -> [f32; 4] {
    let (mut lo, mut hi) = ([_mm256_setzero_ps(); 4], [_mm256_setzero_ps(); 4]);
    let x = [x[0].as_ptr(), x[1].as_ptr(), x[2].as_ptr(), x[3].as_ptr()];
    for c in (0..y.len() / 16 * 16).step_by(16) {
        let (ylo, yhi) = (
            _mm256_loadu_ps(y.as_ptr().add(c)),
            _mm256_loadu_ps(y.as_ptr().add(c + 8)),
        );
        for k in 0..4 {
            let p = x[k].add(c);
            lo[k] = _mm256_fmadd_ps(_mm256_loadu_ps(p), ylo, lo[k]);
            hi[k] = _mm256_fmadd_ps(_mm256_loadu_ps(p.add(8)), yhi, hi[k]);
        }
    }
    // (no closures: they would not inherit the caller's target features)
    [
        reduce(lo[0], hi[0]),
        reduce(lo[1], hi[1]),
        reduce(lo[2], hi[2]),
        reduce(lo[3], hi[3]),
    ]
}

/// [`expf`](super::expf) of 8 lanes, each lane through the same operations (so the same
/// bits); the scaling by 2^n in f64 as the scalar one does.
#[inline(always)]
pub unsafe fn expf8(x: __m256) -> __m256 {
    let c = |bits: u32| _mm256_set1_ps(f32::from_bits(bits));
    let r = c(0x4b40_0000);
    let z = _mm256_fmadd_ps(x, c(0x3fb8_aa3b), r);
    let n = _mm256_sub_ps(z, r);
    let b = _mm256_fnmadd_ps(n, c(0x35bf_be8e), _mm256_fnmadd_ps(n, c(0x3f31_7200), x));
    let u = _mm256_mul_ps(b, b);
    let j = _mm256_fmadd_ps(
        _mm256_fmadd_ps(
            _mm256_fmadd_ps(c(0x3c07_2010), b, c(0x3d2b_9f17)),
            u,
            _mm256_fmadd_ps(c(0x3e2a_af33), b, c(0x3eff_fedb)),
        ),
        u,
        _mm256_fmadd_ps(c(0x3f7f_fff6), b, _mm256_set1_ps(1.0)),
    );
    // j · 2^n in f64, one rounding back to f32.
    let ni = _mm256_cvttps_epi32(n);
    let scaled = |j4: __m128, n4: __m128i| {
        let e = _mm256_slli_epi64(
            _mm256_add_epi64(_mm256_cvtepi32_epi64(n4), _mm256_set1_epi64x(1023)),
            52,
        );
        _mm256_cvtpd_ps(_mm256_mul_pd(_mm256_cvtps_pd(j4), _mm256_castsi256_pd(e)))
    };
    let lo = scaled(_mm256_castps256_ps128(j), _mm256_castsi256_si128(ni));
    let hi = scaled(_mm256_extractf128_ps(j, 1), _mm256_extracti128_si256(ni, 1));
    let y = _mm256_set_m128(hi, lo);
    // |n| > 192: 0 below, infinity above.
    let abs = _mm256_andnot_ps(_mm256_set1_ps(-0.0), n);
    let out = _mm256_cmp_ps(abs, _mm256_set1_ps(192.0), _CMP_GT_OQ);
    let edge = _mm256_blendv_ps(
        _mm256_set1_ps(f32::INFINITY),
        _mm256_setzero_ps(),
        _mm256_cmp_ps(n, _mm256_setzero_ps(), _CMP_LE_OQ),
    );
    _mm256_blendv_ps(y, edge, out)
}

/// P·V into `NL` lanes (`lanes[l * hdv..][..hdv]`, every lane written; NL a multiple of 8):
/// cell `jj` (at position `first + jj`) weights its V row into lane `(first + jj) % NL`, each lane's
/// chain `a = fma(v, p, a)` in cell order from 0. The accumulators stay in registers: 8
/// lanes × 8 of the head dim at a time. `hdv` a multiple of 8, `vals` `scores.len()` rows.
#[inline(always)]
pub unsafe fn pv_lanes<const NL: usize>(scores: &[f32], vals: &[f32], first: usize, hdv: usize, lanes: &mut [f32]) {
    let (n, pad) = (scores.len() as isize, (first % NL) as isize);
    let (p, v, out) = (scores.as_ptr(), vals.as_ptr(), lanes.as_mut_ptr());
    for dc in (0..hdv).step_by(8) {
        for half in (0..NL as isize).step_by(8) {
            let mut acc = [_mm256_setzero_ps(); 8];
            // Cell of lane `half + i` in the run of NL starting at `base`: base + half + i.
            let mut base = -pad;
            while base < n {
                let c0 = base + half;
                if c0 >= 0 && c0 + 8 <= n {
                    for (i, a) in acc.iter_mut().enumerate() {
                        let c = (c0 as usize) + i;
                        *a = _mm256_fmadd_ps(_mm256_loadu_ps(v.add(c * hdv + dc)), _mm256_set1_ps(*p.add(c)), *a);
                    }
                } else {
                    for (i, a) in acc.iter_mut().enumerate() {
                        let c = c0 + i as isize;
                        if c >= 0 && c < n {
                            let c = c as usize;
                            *a = _mm256_fmadd_ps(_mm256_loadu_ps(v.add(c * hdv + dc)), _mm256_set1_ps(*p.add(c)), *a);
                        }
                    }
                }
                base += NL as isize;
            }
            for (i, a) in acc.into_iter().enumerate() {
                _mm256_storeu_ps(out.add((half as usize + i) * hdv + dc), a);
            }
        }
    }
}

/// One query against a tile of transposed keys (`kt[d * 64 + c]`): `out[c]` = the fused
/// chain `acc = fma(q[d], k_c[d], acc)` over d from 0, 64 cells at once.
#[inline(always)]
pub unsafe fn kq_tile(q: &[f32], kt: &[f32], out: &mut [f32; 64]) {
    let mut acc = [_mm256_setzero_ps(); 8];
    let k = kt.as_ptr();
    for (d, &qd) in q.iter().enumerate().take(kt.len() / 64) {
        let qd = _mm256_set1_ps(qd);
        for (i, a) in acc.iter_mut().enumerate() {
            *a = _mm256_fmadd_ps(qd, _mm256_loadu_ps(k.add(64 * d + 8 * i)), *a);
        }
    }
    for (i, a) in acc.into_iter().enumerate() {
        _mm256_storeu_ps(out.as_mut_ptr().add(8 * i), a);
    }
}

/// [`kq_tile_z`] of four queries (`hd` each) against one tile `kt` (`hd` rows of 64): each
/// key vector loaded once for the four.
#[inline(always)]
#[allow(clippy::needless_range_loop)] // (query, register) indices, as in the one-query kernel
pub unsafe fn kq_tile_z4(q: [*const f32; 4], hd: usize, kt: &[f32], out: &mut [[f32; 64]; 4]) {
    let mut acc = [[_mm512_setzero_ps(); 4]; 4];
    let k = kt.as_ptr();
    for d in 0..hd.min(kt.len() / 64) {
        let kv = [
            _mm512_loadu_ps(k.add(64 * d)),
            _mm512_loadu_ps(k.add(64 * d + 16)),
            _mm512_loadu_ps(k.add(64 * d + 32)),
            _mm512_loadu_ps(k.add(64 * d + 48)),
        ];
        for j in 0..4 {
            let qd = _mm512_set1_ps(*q[j].add(d));
            for i in 0..4 {
                acc[j][i] = _mm512_fmadd_ps(qd, kv[i], acc[j][i]);
            }
        }
    }
    for j in 0..4 {
        for i in 0..4 {
            _mm512_storeu_ps(out[j].as_mut_ptr().add(16 * i), acc[j][i]);
        }
    }
}

/// [`pv_rows_z`] of four queries over the same `n` cells (`e[j]`: query j's weights,
/// `vals`: n rows of `hdv`, a multiple of 16; `out[j]`: hdv each): each V vector loaded once
/// for the four, 64 of each output in registers at a time.
#[inline(always)]
pub unsafe fn pv_rows_z4(e: [*const f32; 4], n: usize, vals: *const f32, hdv: usize, out: [*mut f32; 4]) {
    for d0 in (0..hdv).step_by(64) {
        match (hdv - d0).min(64) / 16 {
            1 => pv_rows_z4w::<1>(e, n, vals.add(d0), hdv, out.map(|o| o.add(d0))),
            2 => pv_rows_z4w::<2>(e, n, vals.add(d0), hdv, out.map(|o| o.add(d0))),
            3 => pv_rows_z4w::<3>(e, n, vals.add(d0), hdv, out.map(|o| o.add(d0))),
            _ => pv_rows_z4w::<4>(e, n, vals.add(d0), hdv, out.map(|o| o.add(d0))),
        }
    }
}

#[inline(always)]
#[allow(clippy::needless_range_loop)] // (query, register) indices
unsafe fn pv_rows_z4w<const W: usize>(e: [*const f32; 4], n: usize, v: *const f32, hdv: usize, o: [*mut f32; 4]) {
    let mut acc = [[_mm512_setzero_ps(); W]; 4];
    for j in 0..4 {
        for i in 0..W {
            acc[j][i] = _mm512_loadu_ps(o[j].add(16 * i));
        }
    }
    for c in 0..n {
        let row = v.add(c * hdv);
        let mut vv = [_mm512_setzero_ps(); W];
        for i in 0..W {
            vv[i] = _mm512_loadu_ps(row.add(16 * i));
        }
        for j in 0..4 {
            let ec = _mm512_set1_ps(*e[j].add(c));
            for i in 0..W {
                acc[j][i] = _mm512_fmadd_ps(ec, vv[i], acc[j][i]);
            }
        }
    }
    for j in 0..4 {
        for i in 0..W {
            _mm512_storeu_ps(o[j].add(16 * i), acc[j][i]);
        }
    }
}

/// `out[d] = fma(e[c], v_c[d], out[d])` for every cell c in order (`vals`: `e.len()` rows of
/// `out.len()`, a multiple of 8), 64 of `out` held in registers at a time.
#[inline(always)]
pub unsafe fn pv_rows(e: &[f32], vals: &[f32], out: &mut [f32]) {
    let hdv = out.len();
    let (v, o) = (vals.as_ptr(), out.as_mut_ptr());
    let n = e.len().min(vals.len() / hdv.max(1));
    for d0 in (0..hdv).step_by(64) {
        let w = (hdv - d0).min(64) / 8;
        let mut acc = [_mm256_setzero_ps(); 8];
        for (i, a) in acc.iter_mut().enumerate().take(w) {
            *a = _mm256_loadu_ps(o.add(d0 + 8 * i));
        }
        for (c, &ec) in e.iter().enumerate().take(n) {
            let ec = _mm256_set1_ps(ec);
            let row = v.add(c * hdv + d0);
            for (i, a) in acc.iter_mut().enumerate().take(w) {
                *a = _mm256_fmadd_ps(ec, _mm256_loadu_ps(row.add(8 * i)), *a);
            }
        }
        for (i, a) in acc.into_iter().enumerate().take(w) {
            _mm256_storeu_ps(o.add(d0 + 8 * i), a);
        }
    }
}

/// [`dot_gemm4`] with one 512-bit register per row (lanes 0..8 and 8..16 as its `lo` and
/// `hi`), reduced in the same order.
#[inline]
#[target_feature(enable = "avx2,fma,avx512f")]
pub unsafe fn dot_gemm4_z(x: [&[f32]; 4], y: &[f32]) -> [f32; 4] {
    let mut acc = [_mm512_setzero_ps(); 4];
    let x = [x[0].as_ptr(), x[1].as_ptr(), x[2].as_ptr(), x[3].as_ptr()];
    for c in (0..y.len() / 16 * 16).step_by(16) {
        let yc = _mm512_loadu_ps(y.as_ptr().add(c));
        for k in 0..4 {
            acc[k] = _mm512_fmadd_ps(_mm512_loadu_ps(x[k].add(c)), yc, acc[k]);
        }
    }
    let r = |a: __m512| {
        let lo = _mm512_castps512_ps256(a);
        let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1));
        reduce(lo, hi)
    };
    [r(acc[0]), r(acc[1]), r(acc[2]), r(acc[3])]
}

/// [`dot_vec`] of four rows `x` against `y` (`y.len()` a multiple of 64, so no tail), one
/// 512-bit register per 16-lane accumulator, folded and reduced in the same order.
#[inline]
#[target_feature(enable = "avx2,fma,avx512f")]
pub unsafe fn dot_vec4_z(x: [&[f32]; 4], y: &[f32]) -> [f32; 4] {
    let mut acc = [[_mm512_setzero_ps(); 4]; 4];
    let x = [x[0].as_ptr(), x[1].as_ptr(), x[2].as_ptr(), x[3].as_ptr()];
    for i in (0..y.len() / 64 * 64).step_by(64) {
        for j in 0..4 {
            let yj = _mm512_loadu_ps(y.as_ptr().add(i + 16 * j));
            for (xk, a) in x.iter().zip(acc.iter_mut()) {
                a[j] = _mm512_fmadd_ps(_mm512_loadu_ps(xk.add(i + 16 * j)), yj, a[j]);
            }
        }
    }
    let r = |a: [__m512; 4]| {
        let f = _mm512_add_ps(_mm512_add_ps(a[0], a[2]), _mm512_add_ps(a[1], a[3]));
        let lo = _mm512_castps512_ps256(f);
        let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(f), 1));
        reduce(lo, hi)
    };
    [r(acc[0]), r(acc[1]), r(acc[2]), r(acc[3])]
}

/// [`pv_lanes`] with 512-bit registers: 8 lanes × 32 of the head dim at a time (`hdv` a
/// multiple of 32).
#[inline]
#[target_feature(enable = "avx2,fma,avx512f")]
pub unsafe fn pv_lanes_z<const NL: usize>(scores: &[f32], vals: &[f32], first: usize, hdv: usize, lanes: &mut [f32]) {
    let (n, pad) = (scores.len() as isize, (first % NL) as isize);
    let (p, v, out) = (scores.as_ptr(), vals.as_ptr(), lanes.as_mut_ptr());
    for dc in (0..hdv).step_by(32) {
        for half in (0..NL as isize).step_by(8) {
            let mut acc = [[_mm512_setzero_ps(); 2]; 8];
            let mut base = -pad;
            while base < n {
                let c0 = base + half;
                if c0 >= 0 && c0 + 8 <= n {
                    for (i, a) in acc.iter_mut().enumerate() {
                        let c = c0 as usize + i;
                        let (pc, row) = (_mm512_set1_ps(*p.add(c)), v.add(c * hdv + dc));
                        a[0] = _mm512_fmadd_ps(_mm512_loadu_ps(row), pc, a[0]);
                        a[1] = _mm512_fmadd_ps(_mm512_loadu_ps(row.add(16)), pc, a[1]);
                    }
                } else {
                    for (i, a) in acc.iter_mut().enumerate() {
                        let c = c0 + i as isize;
                        if c >= 0 && c < n {
                            let (pc, row) = (_mm512_set1_ps(*p.add(c as usize)), v.add(c as usize * hdv + dc));
                            a[0] = _mm512_fmadd_ps(_mm512_loadu_ps(row), pc, a[0]);
                            a[1] = _mm512_fmadd_ps(_mm512_loadu_ps(row.add(16)), pc, a[1]);
                        }
                    }
                }
                base += NL as isize;
            }
            for (i, a) in acc.into_iter().enumerate() {
                let o = out.add((half as usize + i) * hdv + dc);
                _mm512_storeu_ps(o, a[0]);
                _mm512_storeu_ps(o.add(16), a[1]);
            }
        }
    }
}

/// [`kq_tile`] with 512-bit registers.
#[inline]
#[target_feature(enable = "avx2,fma,avx512f")]
pub unsafe fn kq_tile_z(q: &[f32], kt: &[f32], out: &mut [f32; 64]) {
    let mut acc = [_mm512_setzero_ps(); 4];
    let k = kt.as_ptr();
    for (d, &qd) in q.iter().enumerate().take(kt.len() / 64) {
        let qd = _mm512_set1_ps(qd);
        for (i, a) in acc.iter_mut().enumerate() {
            *a = _mm512_fmadd_ps(qd, _mm512_loadu_ps(k.add(64 * d + 16 * i)), *a);
        }
    }
    for (i, a) in acc.into_iter().enumerate() {
        _mm512_storeu_ps(out.as_mut_ptr().add(16 * i), a);
    }
}

/// [`pv_rows`] with 512-bit registers (`out.len()` a multiple of 16), up to 128 of `out`
/// in registers per pass over the cells.
#[inline]
#[target_feature(enable = "avx2,fma,avx512f")]
pub unsafe fn pv_rows_z(e: &[f32], vals: &[f32], out: &mut [f32]) {
    let hdv = out.len();
    let n = e.len().min(vals.len() / hdv.max(1));
    for d0 in (0..hdv).step_by(128) {
        let args = (&e[..n], vals.as_ptr().add(d0), hdv, out.as_mut_ptr().add(d0));
        match (hdv - d0).min(128) / 16 {
            1 => pv_rows_zw::<1>(args),
            2 => pv_rows_zw::<2>(args),
            3 => pv_rows_zw::<3>(args),
            4 => pv_rows_zw::<4>(args),
            5 => pv_rows_zw::<5>(args),
            6 => pv_rows_zw::<6>(args),
            7 => pv_rows_zw::<7>(args),
            _ => pv_rows_zw::<8>(args),
        }
    }
}

/// `W` registers of `out` (at `o`) through every cell: rows of `vals` (at `v`) `hdv` apart.
#[inline]
#[target_feature(enable = "avx2,fma,avx512f")]
unsafe fn pv_rows_zw<const W: usize>((e, v, hdv, o): (&[f32], *const f32, usize, *mut f32)) {
    let mut acc: [__m512; W] = std::array::from_fn(|i| _mm512_loadu_ps(o.add(16 * i)));
    for (c, &ec) in e.iter().enumerate() {
        let ec = _mm512_set1_ps(ec);
        let row = v.add(c * hdv);
        for (i, a) in acc.iter_mut().enumerate() {
            *a = _mm512_fmadd_ps(ec, _mm512_loadu_ps(row.add(16 * i)), *a);
        }
    }
    for (i, a) in acc.into_iter().enumerate() {
        _mm512_storeu_ps(o.add(16 * i), a);
    }
}

/// `v[i] *= inv`, then (`f16`) rounded to f16 precision (`vcvtps2ph`, to nearest even).
#[inline(always)]
pub unsafe fn scale_round(v: &mut [f32], inv: f32, f16: bool) {
    let mut chunks = v.chunks_exact_mut(8);
    for c in &mut chunks {
        let x = _mm256_mul_ps(_mm256_loadu_ps(c.as_ptr()), _mm256_set1_ps(inv));
        let x = if f16 {
            _mm256_cvtph_ps(_mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(x))
        } else {
            x
        };
        _mm256_storeu_ps(c.as_mut_ptr(), x);
    }
    for s in chunks.into_remainder() {
        *s *= inv;
        if f16 {
            *s = half::f16::from_f32(*s).to_f32();
        }
    }
}

/// [`mad_acc`](super::mad_acc): `out[i] = r(fma(v[i], s, out[i]))`, 8 at a time.
#[inline(always)]
pub unsafe fn mad_round(out: &mut [f32], v: &[f32], s: f32, f16: bool) {
    let (n8, v) = (out.len() / 8 * 8, &v[..out.len()]);
    let (o, x) = (out.as_mut_ptr(), v.as_ptr());
    for i in (0..n8).step_by(8) {
        let y = _mm256_fmadd_ps(_mm256_loadu_ps(x.add(i)), _mm256_set1_ps(s), _mm256_loadu_ps(o.add(i)));
        let y = if f16 {
            _mm256_cvtph_ps(_mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(y))
        } else {
            y
        };
        _mm256_storeu_ps(o.add(i), y);
    }
    for (o, &x) in out[n8..].iter_mut().zip(&v[n8..]) {
        *o = x.mul_add(s, *o);
        if f16 {
            *o = half::f16::from_f32(*o).to_f32();
        }
    }
}

/// `v[i] = expf(v[i] - max)` for every element, 8 at a time.
#[inline(always)]
pub unsafe fn exp_minus(v: &mut [f32], max: f32) {
    let mut chunks = v.chunks_exact_mut(8);
    for c in &mut chunks {
        let x = _mm256_sub_ps(_mm256_loadu_ps(c.as_ptr()), _mm256_set1_ps(max));
        _mm256_storeu_ps(c.as_mut_ptr(), expf8(x));
    }
    for s in chunks.into_remainder() {
        *s = super::expf(*s - max);
    }
}

/// [`dot_vec`](super::dot_vec) (`F64_TAIL`) or [`dot_vec_f32`](super::dot_vec_f32).
#[inline(always)]
pub unsafe fn dot_vec<const F64_TAIL: bool>(x: &[f32], y: &[f32]) -> f32 {
    let n = y.len().min(x.len());
    let np = n & !63;
    let (mut lo, mut hi) = ([_mm256_setzero_ps(); 4], [_mm256_setzero_ps(); 4]);
    let (xp, yp) = (x.as_ptr(), y.as_ptr());
    for i in (0..np).step_by(64) {
        for j in 0..4 {
            let k = i + 16 * j;
            lo[j] = _mm256_fmadd_ps(_mm256_loadu_ps(xp.add(k)), _mm256_loadu_ps(yp.add(k)), lo[j]);
            hi[j] = _mm256_fmadd_ps(_mm256_loadu_ps(xp.add(k + 8)), _mm256_loadu_ps(yp.add(k + 8)), hi[j]);
        }
    }
    let (flo, fhi) = (
        _mm256_add_ps(_mm256_add_ps(lo[0], lo[2]), _mm256_add_ps(lo[1], lo[3])),
        _mm256_add_ps(_mm256_add_ps(hi[0], hi[2]), _mm256_add_ps(hi[1], hi[3])),
    );
    let sum = reduce(flo, fhi);
    if F64_TAIL {
        let mut sumf = sum as f64;
        for k in np..n {
            sumf += (x[k] * y[k]) as f64;
        }
        sumf as f32
    } else {
        let mut sumf = sum;
        for k in np..n {
            sumf = x[k].mul_add(y[k], sumf);
        }
        sumf
    }
}
