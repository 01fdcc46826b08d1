//! The AVX-512 and AVX2 bodies of [`super::attend`]: one generic body over a vector type,
//! compiled once per instruction set, with `M` queries × `W` vectors of accumulators per tile.

use std::arch::x86_64::*;

use super::{finish_sum, prescale, Cells, Scratch, KB, QB};

/// The few vector operations the body needs (no closures inside it: they would not inherit
/// the caller's target features).
trait Vector {
    type R: Copy;
    /// Floats per vector.
    const L: usize;
    unsafe fn zero() -> Self::R;
    unsafe fn splat(x: f32) -> Self::R;
    unsafe fn load(p: *const f32) -> Self::R;
    unsafe fn store(p: *mut f32, v: Self::R);
    /// a · b + c, fused.
    unsafe fn fma(a: Self::R, b: Self::R, c: Self::R) -> Self::R;
    /// a · b - c, fused.
    unsafe fn fms(a: Self::R, b: Self::R, c: Self::R) -> Self::R;
    unsafe fn mul(a: Self::R, b: Self::R) -> Self::R;
    unsafe fn add(a: Self::R, b: Self::R) -> Self::R;
    unsafe fn max(a: Self::R, b: Self::R) -> Self::R;
    unsafe fn exp(x: Self::R) -> Self::R;
    unsafe fn hmax(v: Self::R) -> f32;
    unsafe fn hsum(v: Self::R) -> f32;
}

struct Zmm;

impl Vector for Zmm {
    type R = __m512;
    const L: usize = 16;
    #[inline(always)]
    unsafe fn zero() -> __m512 {
        _mm512_setzero_ps()
    }
    #[inline(always)]
    unsafe fn splat(x: f32) -> __m512 {
        _mm512_set1_ps(x)
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> __m512 {
        _mm512_loadu_ps(p)
    }
    #[inline(always)]
    unsafe fn store(p: *mut f32, v: __m512) {
        _mm512_storeu_ps(p, v)
    }
    #[inline(always)]
    unsafe fn fma(a: __m512, b: __m512, c: __m512) -> __m512 {
        _mm512_fmadd_ps(a, b, c)
    }
    #[inline(always)]
    unsafe fn fms(a: __m512, b: __m512, c: __m512) -> __m512 {
        _mm512_fmsub_ps(a, b, c)
    }
    #[inline(always)]
    unsafe fn mul(a: __m512, b: __m512) -> __m512 {
        _mm512_mul_ps(a, b)
    }
    #[inline(always)]
    unsafe fn add(a: __m512, b: __m512) -> __m512 {
        _mm512_add_ps(a, b)
    }
    #[inline(always)]
    unsafe fn max(a: __m512, b: __m512) -> __m512 {
        _mm512_max_ps(a, b)
    }
    /// `ggml_v_expf` (AVX-512): 2^n · p(b), n = round(x / ln 2), the scaling by `scalef`. The
    /// input is first raised to -104, below which the result rounds to zero anyway: that keeps
    /// -inf from turning into NaN (max keeps a NaN input, its second operand).
    #[inline(always)]
    unsafe fn exp(x: __m512) -> __m512 {
        let x = _mm512_max_ps(_mm512_set1_ps(-104.0), x);
        let r = c(0x4b40_0000);
        let z = _mm512_fmadd_ps(x, c(0x3fb8_aa3b), r);
        let n = _mm512_sub_ps(z, r);
        let b = _mm512_fnmadd_ps(n, c(0x35bf_be8e), _mm512_fnmadd_ps(n, c(0x3f31_7200), x));
        let u = _mm512_mul_ps(b, b);
        let j = _mm512_fmadd_ps(
            _mm512_fmadd_ps(
                _mm512_fmadd_ps(c(0x3c07_2010), b, c(0x3d2b_9f17)),
                u,
                _mm512_fmadd_ps(c(0x3e2a_af33), b, c(0x3eff_fedb)),
            ),
            u,
            _mm512_fmadd_ps(c(0x3f7f_fff6), b, _mm512_set1_ps(1.0)),
        );
        _mm512_scalef_ps(j, n)
    }
    #[inline(always)]
    unsafe fn hmax(v: __m512) -> f32 {
        _mm512_reduce_max_ps(v)
    }
    #[inline(always)]
    unsafe fn hsum(v: __m512) -> f32 {
        _mm512_reduce_add_ps(v)
    }
}

struct Ymm;

impl Vector for Ymm {
    type R = __m256;
    const L: usize = 8;
    #[inline(always)]
    unsafe fn zero() -> __m256 {
        _mm256_setzero_ps()
    }
    #[inline(always)]
    unsafe fn splat(x: f32) -> __m256 {
        _mm256_set1_ps(x)
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> __m256 {
        _mm256_loadu_ps(p)
    }
    #[inline(always)]
    unsafe fn store(p: *mut f32, v: __m256) {
        _mm256_storeu_ps(p, v)
    }
    #[inline(always)]
    unsafe fn fma(a: __m256, b: __m256, c: __m256) -> __m256 {
        _mm256_fmadd_ps(a, b, c)
    }
    #[inline(always)]
    unsafe fn fms(a: __m256, b: __m256, c: __m256) -> __m256 {
        _mm256_fmsub_ps(a, b, c)
    }
    #[inline(always)]
    unsafe fn mul(a: __m256, b: __m256) -> __m256 {
        _mm256_mul_ps(a, b)
    }
    #[inline(always)]
    unsafe fn add(a: __m256, b: __m256) -> __m256 {
        _mm256_add_ps(a, b)
    }
    #[inline(always)]
    unsafe fn max(a: __m256, b: __m256) -> __m256 {
        _mm256_max_ps(a, b)
    }
    #[inline(always)]
    unsafe fn exp(x: __m256) -> __m256 {
        crate::backend::cpu::ggml_order::x86::expf8(x)
    }
    #[inline(always)]
    unsafe fn hmax(v: __m256) -> f32 {
        let m = _mm_max_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
        let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)))
    }
    #[inline(always)]
    unsafe fn hsum(v: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
    }
}

/// A constant given by its bits, in every lane.
#[inline(always)]
unsafe fn c(bits: u32) -> __m512 {
    _mm512_set1_ps(f32::from_bits(bits))
}

/// [`super::attend`] with AVX-512F: eight queries × 32 cells (scores) or 32 of the head dim
/// (P·V) per tile.
#[target_feature(enable = "avx2,fma,f16c,avx512f")]
pub unsafe fn attend_avx512(c: &Cells, rows: usize, s: &mut Scratch) {
    body::<Zmm, 8, 2>(c, rows, s)
}

/// [`super::attend`] with AVX2 and FMA: four queries × 16 cells or 16 of the head dim.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn attend_avx2(c: &Cells, rows: usize, s: &mut Scratch) {
    body::<Ymm, 4, 2>(c, rows, s)
}

/// Scores of the block's query groups that hold rows, softmax of its `rows` rows, then P·V
/// in `M`-query groups, `W` vectors of the head dim at a time (then single vectors).
#[inline(always)]
unsafe fn body<V: Vector, const M: usize, const W: usize>(c: &Cells, rows: usize, s: &mut Scratch) {
    const { assert!(QB.is_multiple_of(M)) };
    let (n, hd, hdv) = (c.n, c.hd, c.hdv);
    let npad = n.div_ceil(KB) * KB;
    let (q, sc, kt) = (s.q.as_ptr(), s.scores.as_mut_ptr(), c.keys_t.as_ptr());
    for m0 in (0..rows).step_by(M) {
        kq::<V, M, W>(q.add(m0 * hd), hd, kt, npad, sc.add(m0 * npad));
    }
    let mut inv = [0f32; QB];
    for (m, iv) in inv.iter_mut().enumerate().take(rows) {
        *iv = softmax::<V>(std::slice::from_raw_parts_mut(sc.add(m * npad), npad), c);
    }
    let (v, o) = (c.vals.as_ptr(), s.out.as_mut_ptr());
    for m0 in (0..rows).step_by(M) {
        let (p, o, inv) = (sc.add(m0 * npad), o.add(m0 * hdv), &inv[m0..m0 + M]);
        let mut d0 = 0;
        while d0 + W * V::L <= hdv {
            pv::<V, M, W>((p, npad, n), (v.add(d0), c.vstride), o.add(d0), hdv, inv);
            d0 += W * V::L;
        }
        while d0 < hdv {
            pv::<V, M, 1>((p, npad, n), (v.add(d0), c.vstride), o.add(d0), hdv, inv);
            d0 += V::L;
        }
    }
}

/// Raw scores of `M` query rows (`hd` apart from `q`) against the packed keys `kt`, `npad`
/// cells, into `M` rows `npad` apart from `s`; `W` vectors of cells per step.
#[inline(always)]
unsafe fn kq<V: Vector, const M: usize, const W: usize>(
    q: *const f32,
    hd: usize,
    kt: *const f32,
    npad: usize,
    s: *mut f32,
) {
    let step = W * V::L;
    debug_assert!(KB.is_multiple_of(step));
    for c0 in (0..npad).step_by(step) {
        let k = kt.add((c0 / KB) * hd * KB + c0 % KB);
        let mut acc = [[V::zero(); W]; M];
        for d in 0..hd {
            let mut kv = [V::zero(); W];
            for (w, kw) in kv.iter_mut().enumerate() {
                *kw = V::load(k.add(d * KB + w * V::L));
            }
            for (m, am) in acc.iter_mut().enumerate() {
                let qm = V::splat(*q.add(m * hd + d));
                for w in 0..W {
                    am[w] = V::fma(kv[w], qm, am[w]);
                }
            }
        }
        for (m, am) in acc.iter().enumerate() {
            for (w, &a) in am.iter().enumerate() {
                V::store(s.add(m * npad + c0 + w * V::L), a);
            }
        }
    }
}

/// One score row (its first `c.n` cells, room to a whole vector past them): `exp(s · scale -
/// max)` in place; returns 1 / the sum (the sink's term included).
#[inline(always)]
unsafe fn softmax<V: Vector>(row: &mut [f32], c: &Cells) -> f32 {
    let n = c.n;
    let scale = prescale(&mut row[..n], c);
    let p = row.as_mut_ptr();
    let full = n / V::L * V::L;
    let mut mv = V::splat(f32::NEG_INFINITY);
    for j in (0..full).step_by(V::L) {
        mv = V::max(mv, V::load(p.add(j)));
    }
    let mut max = V::hmax(mv);
    for &x in &row[full..n] {
        max = max.max(x);
    }
    max *= scale;
    if let Some(sk) = c.sink {
        max = max.max(sk);
    }
    let (sv, mx) = (V::splat(scale), V::splat(max));
    let mut sum = V::zero();
    for j in (0..full).step_by(V::L) {
        let e = V::exp(V::fms(V::load(p.add(j)), sv, mx));
        V::store(p.add(j), e);
        sum = V::add(sum, e);
    }
    let mut total = V::hsum(sum);
    if full < n {
        // The tail as a whole vector in the row's padding, only its cells summed.
        debug_assert!(row.len() >= full + V::L);
        V::store(p.add(full), V::exp(V::fms(V::load(p.add(full)), sv, mx)));
        for &e in &row[full..n] {
            total += e;
        }
    }
    finish_sum(total, max, c)
}

/// P·V of `M` probability rows (`npad` apart from `p`, `n` cells) against the value rows
/// (`vstride` apart from `v`): `W` vectors of the head dim, each query's sum times its `inv`,
/// into `M` output rows `hdv` apart from `o`.
#[inline(always)]
unsafe fn pv<V: Vector, const M: usize, const W: usize>(
    (p, npad, n): (*const f32, usize, usize),
    (v, vstride): (*const f32, usize),
    o: *mut f32,
    hdv: usize,
    inv: &[f32],
) {
    let mut acc = [[V::zero(); W]; M];
    for j in 0..n {
        let mut vv = [V::zero(); W];
        for (w, x) in vv.iter_mut().enumerate() {
            *x = V::load(v.add(j * vstride + w * V::L));
        }
        for (m, am) in acc.iter_mut().enumerate() {
            let pm = V::splat(*p.add(m * npad + j));
            for w in 0..W {
                am[w] = V::fma(vv[w], pm, am[w]);
            }
        }
    }
    for (m, am) in acc.iter().enumerate() {
        let s = V::splat(inv[m]);
        for (w, &a) in am.iter().enumerate() {
            V::store(o.add(m * hdv + w * V::L), V::mul(a, s));
        }
    }
}
