//! The k-quant dot bodies of the AVX2 / AVX-512 VNNI tiers (q2_K to q8_K against q8_K
//! activations, block {d: f32 @0, qs[256] @4, bsums: i16[16] @260}). Instantiated with the
//! other dot bodies by `instantiate!`.

use std::arch::x86_64::*;

use super::*;

/// Byte shuffles broadcasting i16 scales (ggml `get_scale_shuffle_q3k`, `_k4`, and the i8
/// `get_scale_shuffle` of q6_K).
const fn shuffles_q3k() -> [[u8; 32]; 4] {
    let mut t = [[0u8; 32]; 4];
    let mut i = 0;
    while i < 4 {
        let mut b = 0;
        while b < 32 {
            t[i][b] = (4 * i + 2 * (b / 16) + b % 2) as u8;
            b += 1;
        }
        i += 1;
    }
    t
}

const fn shuffles_k4() -> [[u8; 32]; 8] {
    let mut t = [[0u8; 32]; 8];
    let mut i = 0;
    while i < 8 {
        let mut b = 0;
        while b < 32 {
            t[i][b] = (2 * i + b % 2) as u8;
            b += 1;
        }
        i += 1;
    }
    t
}

const fn shuffles_q6k() -> [[u8; 16]; 8] {
    let mut t = [[0u8; 16]; 8];
    let mut i = 0;
    while i < 8 {
        let mut b = 0;
        while b < 16 {
            t[i][b] = (2 * i + b / 8) as u8;
            b += 1;
        }
        i += 1;
    }
    t
}

static SHUF_Q3K: [[u8; 32]; 4] = shuffles_q3k();
static SHUF_K4: [[u8; 32]; 8] = shuffles_k4();
static SHUF_Q6K: [[u8; 16]; 8] = shuffles_q6k();

#[inline(always)]
unsafe fn shuf_q3k(i: usize) -> __m256i {
    ld256(SHUF_Q3K[i].as_ptr())
}

#[inline(always)]
pub(in crate::backend::cpu::dot) unsafe fn shuf_k4(i: usize) -> __m256i {
    ld256(SHUF_K4[i].as_ptr())
}

/// The 16 scales of a q2_K/q3_K block as i16, duplicated per 128-bit lane: one vector per
/// 128-element half.
#[inline(always)]
unsafe fn lane_scales(scales8: __m128i) -> [__m256i; 2] {
    let all = _mm256_cvtepi8_epi16(scales8);
    let (l, h) = (_mm256_castsi256_si128(all), _mm256_extracti128_si256(all, 1));
    [_mm256_set_m128i(l, l), _mm256_set_m128i(h, h)]
}

/// ggml_vec_dot_q2_K_q8_K. block_q2_K {scales[16] @0, qs[64] @16, d @80, dmin @82}.
#[inline(always)]
pub(in crate::backend::cpu::dot) unsafe fn q2_k<const V: bool>(n: usize, w: &[u8], a: &[u8]) -> f32 {
    let (x, y) = (w.as_ptr(), a.as_ptr());
    let m3 = _mm256_set1_epi8(3);
    let m4 = _mm_set1_epi8(0xF);
    let mut acc = _mm256_setzero_ps();
    for i in 0..n / 256 {
        let (xb, yb) = (x.add(84 * i), y.add(292 * i));
        let dy = f32u(yb);
        let (xd, xdmin) = f16x2(xb.add(80));
        let (d, dmin) = (dy * xd, -dy * xdmin);
        let mins_and_scales = ld128(xb);
        let mins8 = _mm_and_si128(_mm_srli_epi16(mins_and_scales, 4), m4);
        let prod = _mm256_madd_epi16(_mm256_cvtepi8_epi16(mins8), ld256(yb.add(260)));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(prod), acc);
        let scales = lane_scales(_mm_and_si128(mins_and_scales, m4));
        let mut sumi = _mm256_setzero_si256();
        for (j, sc) in scales.iter().enumerate() {
            let q2 = ld256(xb.add(16 + 32 * j));
            let q8 = yb.add(4 + 128 * j);
            let q2s = [
                _mm256_and_si256(q2, m3),
                _mm256_and_si256(_mm256_srli_epi16(q2, 2), m3),
                _mm256_and_si256(_mm256_srli_epi16(q2, 4), m3),
                _mm256_and_si256(_mm256_srli_epi16(q2, 6), m3),
            ];
            for (k, q2k) in q2s.into_iter().enumerate() {
                let p = _mm256_maddubs_epi16(q2k, ld256(q8.add(32 * k)));
                sumi = madd_acc::<V>(sumi, _mm256_shuffle_epi8(*sc, shuf_q3k(k)), p);
            }
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    hsum_ps(acc)
}

/// ggml_vec_dot_q3_K_q8_K. block_q3_K {hmask[32] @0, qs[64] @32, scales[12] @96, d @108}.
#[inline(always)]
pub(in crate::backend::cpu::dot) unsafe fn q3_k<const V: bool>(n: usize, w: &[u8], a: &[u8]) -> f32 {
    const KMASK1: u32 = 0x03030303;
    const KMASK2: u32 = 0x0f0f0f0f;
    let (x, y) = (w.as_ptr(), a.as_ptr());
    let m3 = _mm256_set1_epi8(3);
    let four = _mm256_set1_epi8(4);
    let mut acc = _mm256_setzero_ps();
    for i in 0..n / 256 {
        let (xb, yb) = (x.add(110 * i), y.add(292 * i));
        let d = f32u(yb) * f16(xb.add(108));
        let (a0, a1, a2) = (u32u(xb.add(96)), u32u(xb.add(100)), u32u(xb.add(104)));
        let scales128 = _mm_set_epi32(
            (((a1 >> 4) & KMASK2) | (((a2 >> 6) & KMASK1) << 4)) as i32,
            (((a0 >> 4) & KMASK2) | (((a2 >> 4) & KMASK1) << 4)) as i32,
            ((a1 & KMASK2) | (((a2 >> 2) & KMASK1) << 4)) as i32,
            ((a0 & KMASK2) | ((a2 & KMASK1) << 4)) as i32,
        );
        let scales = lane_scales(_mm_sub_epi8(scales128, _mm_set1_epi8(32)));
        let hbits = ld256(xb);
        let mut sumi = _mm256_setzero_si256();
        for (j, sc) in scales.iter().enumerate() {
            let q3 = ld256(xb.add(32 + 32 * j));
            let q8 = yb.add(4 + 128 * j);
            let q3s = [
                _mm256_and_si256(q3, m3),
                _mm256_and_si256(_mm256_srli_epi16(q3, 2), m3),
                _mm256_and_si256(_mm256_srli_epi16(q3, 4), m3),
                _mm256_and_si256(_mm256_srli_epi16(q3, 6), m3),
            ];
            for (k, q3l) in q3s.into_iter().enumerate() {
                // 4 where the high bit is clear: q = low - 4·(1 - hbit).
                let bit = _mm256_set1_epi8((1u8 << (4 * j + k)) as i8);
                let q3h = _mm256_and_si256(
                    _mm256_cmpeq_epi8(_mm256_and_si256(hbits, bit), _mm256_setzero_si256()),
                    four,
                );
                let q8k = ld256(q8.add(32 * k));
                let p = _mm256_sub_epi16(_mm256_maddubs_epi16(q3l, q8k), _mm256_maddubs_epi16(q3h, q8k));
                sumi = madd_acc::<V>(sumi, _mm256_shuffle_epi8(*sc, shuf_q3k(k)), p);
            }
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    hsum_ps(acc)
}

/// q4_K/q5_K scales and mins as i16: (scales duplicated per lane, mins).
#[inline(always)]
pub(in crate::backend::cpu::dot) unsafe fn k4_scales(p: *const u8) -> (__m256i, __m128i) {
    const KMASK1: u32 = 0x3f3f3f3f;
    const KMASK2: u32 = 0x0f0f0f0f;
    const KMASK3: u32 = 0x03030303;
    let (u0, u1, u2) = (u32u(p), u32u(p.add(4)), u32u(p.add(8)));
    let u3 = ((u2 >> 4) & KMASK2) | (((u1 >> 6) & KMASK3) << 4);
    let m = u1 & KMASK1;
    let s1 = (u2 & KMASK2) | (((u0 >> 6) & KMASK3) << 4);
    let s0 = u0 & KMASK1;
    let ms = _mm256_cvtepu8_epi16(_mm_set_epi32(u3 as i32, m as i32, s1 as i32, s0 as i32));
    let sc = _mm256_castsi256_si128(ms);
    (_mm256_set_m128i(sc, sc), _mm256_extracti128_si256(ms, 1))
}

/// Σ mins·(sub-block sums of q8) from the q8_K bsums: 4 i32 lanes.
#[inline(always)]
pub(in crate::backend::cpu::dot) unsafe fn k4_mins(mins: __m128i, yb: *const u8) -> __m128i {
    let bs = ld256(yb.add(260));
    let q8s = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
    _mm_madd_epi16(mins, q8s)
}

/// The 8 pairs of 32-element q4_K/q5_K groups of one block: (low, high) quants per 64.
#[inline(always)]
unsafe fn k4_quants<const FIVE: bool>(xb: *const u8, j: usize) -> (__m256i, __m256i) {
    let m4 = _mm256_set1_epi8(0xF);
    let q = ld256(xb.add(if FIVE { 48 } else { 16 } + 32 * j));
    let (lo, hi) = (_mm256_and_si256(q, m4), _mm256_and_si256(_mm256_srli_epi16(q, 4), m4));
    if !FIVE {
        return (lo, hi);
    }
    let hbits = ld256(xb.add(16));
    (
        _mm256_add_epi8(lo, hbit16(hbits, 2 * j)),
        _mm256_add_epi8(hi, hbit16(hbits, 2 * j + 1)),
    )
}

/// 16 where bit `b` of each byte is set, else 0.
#[inline(always)]
unsafe fn hbit16(hbits: __m256i, b: usize) -> __m256i {
    let m = _mm256_set1_epi8((1u8 << b) as i8);
    _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hbits, m), m), _mm256_set1_epi8(16))
}

/// ggml_vec_dot_q5_K_q8_K, and for q4_K the order of ggml's repacked `gemm/gemv_q4_K_8x8_q8_K`
/// (which llama.cpp runs q4_K through on x86): per block the exact i32 sums of quants and of
/// mins, each scaled into its own f32 chain, the mins' chain subtracted at the end.
/// block_q4_K {d @0, dmin @2, scales[12] @4, qs[128] @16};
/// block_q5_K {d, dmin, scales[12], qh[32] @16, qs[128] @48}.
/// The exact i32 sums of q4_K (q5_K with `FIVE`) block `xb`, its `scales` unpacked, against
/// the q8_K block `yb`: Σ scale·q·y over the block in 8 lanes.
#[inline(always)]
unsafe fn k4_block_sums<const V: bool, const FIVE: bool>(xb: *const u8, yb: *const u8, scales: __m256i) -> __m256i {
    let mut sumi = _mm256_setzero_si256();
    for j in 0..4 {
        let (lo, hi) = k4_quants::<FIVE>(xb, j);
        let q8 = yb.add(4 + 64 * j);
        let pl = _mm256_maddubs_epi16(lo, ld256(q8));
        let ph = _mm256_maddubs_epi16(hi, ld256(q8.add(32)));
        sumi = madd_acc::<V>(sumi, _mm256_shuffle_epi8(scales, shuf_k4(2 * j)), pl);
        sumi = madd_acc::<V>(sumi, _mm256_shuffle_epi8(scales, shuf_k4(2 * j + 1)), ph);
    }
    sumi
}

#[inline(always)]
unsafe fn q45_k<const V: bool, const FIVE: bool>(n: usize, w: &[u8], a: &[u8]) -> f32 {
    let (x, y, bb) = (w.as_ptr(), a.as_ptr(), if FIVE { 176 } else { 144 });
    let mut acc = _mm256_setzero_ps();
    let mut acc_m = _mm_setzero_ps();
    let (mut sum, mut sum_m) = (0f32, 0f32);
    for i in 0..n / 256 {
        let (xb, yb) = (x.add(bb * i), y.add(292 * i));
        let dy = f32u(yb);
        let (xd, xdmin) = f16x2(xb);
        let (scales, mins) = k4_scales(xb.add(4));
        let sumi = k4_block_sums::<V, FIVE>(xb, yb, scales);
        let m = k4_mins(mins, yb);
        if FIVE {
            acc_m = _mm_fmadd_ps(_mm_set1_ps(-dy * xdmin), _mm_cvtepi32_ps(m), acc_m);
            acc = _mm256_fmadd_ps(_mm256_set1_ps(dy * xd), _mm256_cvtepi32_ps(sumi), acc);
        } else {
            sum = (hsum_i32(sumi) as f32).mul_add(xd * dy, sum);
            sum_m = (hsum_i32_128(m) as f32).mul_add(xdmin * dy, sum_m);
        }
    }
    if FIVE {
        hsum_ps(acc) + hsum_ps128(acc_m)
    } else {
        sum - sum_m
    }
}

#[inline(always)]
unsafe fn q45_k_x4<const V: bool, const FIVE: bool>(n: usize, w: &[u8], a: [&[u8]; 4]) -> [f32; 4] {
    let (x, y, bb) = (w.as_ptr(), a.map(|r| r.as_ptr()), if FIVE { 176 } else { 144 });
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut acc_m = [_mm_setzero_ps(); 4];
    let (mut sum, mut sum_m) = ([0f32; 4], [0f32; 4]);
    for i in 0..n / 256 {
        let xb = x.add(bb * i);
        let (dx, dminx) = f16x2(xb);
        let (scales, mins) = k4_scales(xb.add(4));
        let mut sumi = [_mm256_setzero_si256(); 4];
        // q4_K: Σ mins·bsums of each 64 quants, per token.
        let mut min_sums = [[0i32; 4]; 4];
        if !FIVE {
            for (k, ms) in min_sums.iter_mut().enumerate() {
                _mm_storeu_si128(ms.as_mut_ptr() as *mut __m128i, k4_mins(mins, y[k].add(292 * i)));
            }
        }
        #[allow(clippy::needless_range_loop)] // j also picks the quants and scales
        for j in 0..4 {
            let (lo, hi) = k4_quants::<FIVE>(xb, j);
            let (sl, sh) = (
                _mm256_shuffle_epi8(scales, shuf_k4(2 * j)),
                _mm256_shuffle_epi8(scales, shuf_k4(2 * j + 1)),
            );
            for k in 0..4 {
                let q8 = y[k].add(292 * i + 4 + 64 * j);
                // q4_K: ggml's repacked GEMM scales each 64 quants' sum on its own.
                let s = if FIVE { sumi[k] } else { _mm256_setzero_si256() };
                let s = madd_acc::<V>(s, sl, _mm256_maddubs_epi16(lo, ld256(q8)));
                sumi[k] = madd_acc::<V>(s, sh, _mm256_maddubs_epi16(hi, ld256(q8.add(32))));
                if !FIVE {
                    let dy = f32u(y[k].add(292 * i));
                    sum[k] = (hsum_i32(sumi[k]) as f32).mul_add(dx * dy, sum[k]);
                    sum_m[k] = (min_sums[k][j] as f32).mul_add(dminx * dy, sum_m[k]);
                }
            }
        }
        for k in 0..4 {
            if FIVE {
                let yb = y[k].add(292 * i);
                let dy = f32u(yb);
                let m = k4_mins(mins, yb);
                acc_m[k] = _mm_fmadd_ps(_mm_set1_ps(-dy * dminx), _mm_cvtepi32_ps(m), acc_m[k]);
                acc[k] = _mm256_fmadd_ps(_mm256_set1_ps(dy * dx), _mm256_cvtepi32_ps(sumi[k]), acc[k]);
            }
        }
    }
    if !FIVE {
        return std::array::from_fn(|k| sum[k] - sum_m[k]);
    }
    [
        hsum_ps(acc[0]) + hsum_ps128(acc_m[0]),
        hsum_ps(acc[1]) + hsum_ps128(acc_m[1]),
        hsum_ps(acc[2]) + hsum_ps128(acc_m[2]),
        hsum_ps(acc[3]) + hsum_ps128(acc_m[3]),
    ]
}

/// `q4_k` for four tokens: each weight block is decoded once (scales, quants, their shuffles)
/// and each token keeps `q4_k`'s own chain (the exact i32 sums of a block, then the two f32
/// fmas, here one lane per token), so every token gets the bits of its single dot and any
/// four tokens may share it.
#[inline(always)]
pub(in crate::backend::cpu::dot) unsafe fn q4_k_x4_gemv<const V: bool>(n: usize, w: &[u8], a: [&[u8]; 4]) -> [f32; 4] {
    let (x, y) = (w.as_ptr(), [a[0].as_ptr(), a[1].as_ptr(), a[2].as_ptr(), a[3].as_ptr()]);
    let (mut sum, mut sum_m) = (_mm_setzero_ps(), _mm_setzero_ps());
    for i in 0..n / 256 {
        let xb = x.add(144 * i);
        let (xd, xdmin) = f16x2(xb);
        let (scales, mins) = k4_scales(xb.add(4));
        let mut sumi = [_mm256_setzero_si256(); 4];
        for j in 0..4 {
            let (lo, hi) = k4_quants::<false>(xb, j);
            let (sl, sh) = (
                _mm256_shuffle_epi8(scales, shuf_k4(2 * j)),
                _mm256_shuffle_epi8(scales, shuf_k4(2 * j + 1)),
            );
            for (k, s) in sumi.iter_mut().enumerate() {
                let q8 = y[k].add(292 * i + 4 + 64 * j);
                *s = madd_acc::<V>(*s, sl, _mm256_maddubs_epi16(lo, ld256(q8)));
                *s = madd_acc::<V>(*s, sh, _mm256_maddubs_epi16(hi, ld256(q8.add(32))));
            }
        }
        let s = [fold128(sumi[0]), fold128(sumi[1]), fold128(sumi[2]), fold128(sumi[3])];
        q4_k_x4_block_end(s, mins, y, i, (xd, xdmin), &mut sum, &mut sum_m);
    }
    let mut out = [0f32; 4];
    _mm_storeu_ps(out.as_mut_ptr(), _mm_sub_ps(sum, sum_m));
    out
}

/// `q4_k` of two rows against one token: the token's loads shared, each row's two chains in
/// its own lane (the exact i32 sums of a block, then `fma(Σ, d·dy, sum)`), so each row gets
/// the bits of its single dot.
#[inline(always)]
pub(in crate::backend::cpu::dot) unsafe fn q4_k_r2<const V: bool>(n: usize, w: [&[u8]; 2], a: &[u8]) -> [f32; 2] {
    let (x, y) = ([w[0].as_ptr(), w[1].as_ptr()], a.as_ptr());
    let (mut sum, mut sum_m) = (_mm_setzero_ps(), _mm_setzero_ps());
    for i in 0..n / 256 {
        let yb = y.add(292 * i);
        let (mut s, mut m) = ([_mm_setzero_si128(); 4], [_mm_setzero_si128(); 4]);
        let (mut d, mut dmin) = ([0f32; 4], [0f32; 4]);
        for r in 0..2 {
            let xb = x[r].add(144 * i);
            (d[r], dmin[r]) = f16x2(xb);
            let (scales, mins) = k4_scales(xb.add(4));
            s[r] = fold128(k4_block_sums::<V, false>(xb, yb, scales));
            m[r] = k4_mins(mins, yb);
        }
        let dy = _mm_set1_ps(f32u(yb));
        let (s2, m2) = (hsum4_i32(s), hsum4_i32(m));
        sum = _mm_fmadd_ps(_mm_cvtepi32_ps(s2), _mm_mul_ps(_mm_loadu_ps(d.as_ptr()), dy), sum);
        sum_m = _mm_fmadd_ps(_mm_cvtepi32_ps(m2), _mm_mul_ps(_mm_loadu_ps(dmin.as_ptr()), dy), sum_m);
    }
    let mut out = [0f32; 4];
    _mm_storeu_ps(out.as_mut_ptr(), _mm_sub_ps(sum, sum_m));
    [out[0], out[1]]
}

/// The end of q4_K block `i` for four tokens: `s[k]`, token k's quant sums in four lanes, and
/// its mins' sums (i32, exact in any order) scaled into lane k of the two f32 chains as
/// `q4_k` scales them (`fma(Σ, d·dy, sum)`).
#[inline(always)]
pub(in crate::backend::cpu::dot) unsafe fn q4_k_x4_block_end(
    s: [__m128i; 4],
    mins: __m128i,
    y: [*const u8; 4],
    i: usize,
    (xd, xdmin): (f32, f32),
    sum: &mut __m128,
    sum_m: &mut __m128,
) {
    let yb = [
        y[0].add(292 * i),
        y[1].add(292 * i),
        y[2].add(292 * i),
        y[3].add(292 * i),
    ];
    let s4 = hsum4_i32(s);
    let m4 = hsum4_i32([
        k4_mins(mins, yb[0]),
        k4_mins(mins, yb[1]),
        k4_mins(mins, yb[2]),
        k4_mins(mins, yb[3]),
    ]);
    let dy = _mm_set_ps(f32u(yb[3]), f32u(yb[2]), f32u(yb[1]), f32u(yb[0]));
    *sum = _mm_fmadd_ps(_mm_cvtepi32_ps(s4), _mm_mul_ps(_mm_set1_ps(xd), dy), *sum);
    *sum_m = _mm_fmadd_ps(_mm_cvtepi32_ps(m4), _mm_mul_ps(_mm_set1_ps(xdmin), dy), *sum_m);
}

/// The two 128-bit halves of `a` added.
#[inline(always)]
pub(in crate::backend::cpu::dot) unsafe fn fold128(a: __m256i) -> __m128i {
    _mm_add_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1))
}

/// Lane k: the sum of `a[k]`'s four lanes.
#[inline(always)]
pub(in crate::backend::cpu::dot) unsafe fn hsum4_i32(a: [__m128i; 4]) -> __m128i {
    _mm_hadd_epi32(_mm_hadd_epi32(a[0], a[1]), _mm_hadd_epi32(a[2], a[3]))
}

#[inline(always)]
pub(in crate::backend::cpu::dot) unsafe fn q4_k<const V: bool>(n: usize, w: &[u8], a: &[u8]) -> f32 {
    q45_k::<V, false>(n, w, a)
}

#[inline(always)]
pub(in crate::backend::cpu::dot) unsafe fn q5_k<const V: bool>(n: usize, w: &[u8], a: &[u8]) -> f32 {
    q45_k::<V, true>(n, w, a)
}

#[inline(always)]
pub(in crate::backend::cpu::dot) unsafe fn q4_k_x4<const V: bool>(n: usize, w: &[u8], a: [&[u8]; 4]) -> [f32; 4] {
    q45_k_x4::<V, false>(n, w, a)
}

#[inline(always)]
pub(in crate::backend::cpu::dot) unsafe fn q5_k_x4<const V: bool>(n: usize, w: &[u8], a: [&[u8]; 4]) -> [f32; 4] {
    q45_k_x4::<V, true>(n, w, a)
}

/// The 4 groups of 32 unsigned 6-bit quants (0..64) of 128-element half `j` of a q6_K block.
/// block_q6_K {ql[128] @0, qh[64] @128, scales: i8[16] @192, d @208}.
#[inline(always)]
unsafe fn q6_quants(xb: *const u8, j: usize) -> [__m256i; 4] {
    let (m4, m30) = (_mm256_set1_epi8(0xF), _mm256_set1_epi8(0x30));
    let (b1, b2, h) = (
        ld256(xb.add(64 * j)),
        ld256(xb.add(64 * j + 32)),
        ld256(xb.add(128 + 32 * j)),
    );
    [
        _mm256_or_si256(_mm256_and_si256(b1, m4), _mm256_and_si256(_mm256_slli_epi16(h, 4), m30)),
        _mm256_or_si256(_mm256_and_si256(b2, m4), _mm256_and_si256(_mm256_slli_epi16(h, 2), m30)),
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b1, 4), m4), _mm256_and_si256(h, m30)),
        _mm256_or_si256(
            _mm256_and_si256(_mm256_srli_epi16(b2, 4), m4),
            _mm256_and_si256(_mm256_srli_epi16(h, 2), m30),
        ),
    ]
}

/// i16 scales for group `g` (0..8, 32 elements, two 16-element scales) of a q6_K block.
#[inline(always)]
unsafe fn q6_scale(scales: __m128i, g: usize) -> __m256i {
    _mm256_cvtepi8_epi16(_mm_shuffle_epi8(scales, ld128(SHUF_Q6K[g].as_ptr())))
}

/// 32·Σ scale·bsum: the -32 offset of q6_K quants, taken out once per block (8 i32 lanes).
#[inline(always)]
pub(in crate::backend::cpu::dot) unsafe fn q6_offset(scales: __m128i, yb: *const u8) -> __m256i {
    _mm256_slli_epi32(_mm256_madd_epi16(_mm256_cvtepi8_epi16(scales), ld256(yb.add(260))), 5)
}

/// ggml_vec_dot_q6_K_q8_K, with the -32 offset applied through the bsums; with `TILED` the
/// order of llama.cpp's tiled GEMM instead: per block `(Σ as f32 · d)`, times dy fused into
/// the sum (GCC contracts the kernel's separate multiply and add).
#[inline(always)]
pub(in crate::backend::cpu::dot) unsafe fn q6_k<const V: bool, const TILED: bool>(n: usize, w: &[u8], a: &[u8]) -> f32 {
    let (x, y) = (w.as_ptr(), a.as_ptr());
    let mut acc = _mm256_setzero_ps();
    let mut sum = 0f32;
    for i in 0..n / 256 {
        let (xb, yb) = (x.add(210 * i), y.add(292 * i));
        let dx = f16(xb.add(208));
        let scales = ld128(xb.add(192));
        let mut sumi = _mm256_setzero_si256();
        for j in 0..2 {
            let q = q6_quants(xb, j);
            for (k, qk) in q.into_iter().enumerate() {
                let p = _mm256_maddubs_epi16(qk, ld256(yb.add(4 + 128 * j + 32 * k)));
                sumi = madd_acc::<V>(sumi, q6_scale(scales, 4 * j + k), p);
            }
        }
        sumi = _mm256_sub_epi32(sumi, q6_offset(scales, yb));
        if TILED {
            sum = (hsum_i32(sumi) as f32 * dx).mul_add(f32u(yb), sum);
        } else {
            acc = _mm256_fmadd_ps(_mm256_set1_ps(f32u(yb) * dx), _mm256_cvtepi32_ps(sumi), acc);
        }
    }
    if TILED {
        sum
    } else {
        hsum_ps(acc)
    }
}

#[inline(always)]
pub(in crate::backend::cpu::dot) unsafe fn q6_k_x4<const V: bool, const TILED: bool>(
    n: usize,
    w: &[u8],
    a: [&[u8]; 4],
) -> [f32; 4] {
    let (x, y) = (w.as_ptr(), a.map(|r| r.as_ptr()));
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut sum = [0f32; 4];
    for i in 0..n / 256 {
        let xb = x.add(210 * i);
        let dx = f16(xb.add(208));
        let scales = ld128(xb.add(192));
        let mut sumi = [_mm256_setzero_si256(); 4];
        for j in 0..2 {
            let q = q6_quants(xb, j);
            for (g, qg) in q.into_iter().enumerate() {
                let sc = q6_scale(scales, 4 * j + g);
                for k in 0..4 {
                    let p = _mm256_maddubs_epi16(qg, ld256(y[k].add(292 * i + 4 + 128 * j + 32 * g)));
                    sumi[k] = madd_acc::<V>(sumi[k], sc, p);
                }
            }
        }
        for k in 0..4 {
            let yb = y[k].add(292 * i);
            let s = _mm256_sub_epi32(sumi[k], q6_offset(scales, yb));
            if TILED {
                sum[k] = (hsum_i32(s) as f32 * dx).mul_add(f32u(yb), sum[k]);
            } else {
                acc[k] = _mm256_fmadd_ps(_mm256_set1_ps(f32u(yb) * dx), _mm256_cvtepi32_ps(s), acc[k]);
            }
        }
    }
    if TILED {
        return sum;
    }
    [hsum_ps(acc[0]), hsum_ps(acc[1]), hsum_ps(acc[2]), hsum_ps(acc[3])]
}

/// q8_K weights · q8_K: exact integer sums per block.
#[inline(always)]
pub(in crate::backend::cpu::dot) unsafe fn q8_k<const V: bool>(n: usize, w: &[u8], a: &[u8]) -> f32 {
    let (x, y) = (w.as_ptr(), a.as_ptr());
    let mut acc = _mm256_setzero_ps();
    for i in 0..n / 256 {
        let (xb, yb) = (x.add(292 * i), y.add(292 * i));
        let mut sumi = _mm256_setzero_si256();
        for k in 0..8 {
            let (qx, qy) = (ld256(xb.add(4 + 32 * k)), ld256(yb.add(4 + 32 * k)));
            let p = dot_us8::<V>(_mm256_sign_epi8(qx, qx), _mm256_sign_epi8(qy, qx));
            sumi = _mm256_add_epi32(sumi, p);
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(f32u(xb) * f32u(yb)), _mm256_cvtepi32_ps(sumi), acc);
    }
    hsum_ps(acc)
}
