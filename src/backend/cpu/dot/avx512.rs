//! AVX-512 kernels: the AVX2 bodies recompiled with AVX-512 VNNI (`vpdpbusd` / `vpdpwssd` in
//! place of `maddubs + madd`, as ggml does under `__AVX512VNNI__ && __AVX512VL__`).
//!
//! For q4_0, q4_1, q8_0, q4_K and q6_K, 512-bit kernels take two blocks (or half a super-block)
//! per register, which halves the per-block scale work.
//!
//! The tier needs AVX-512 F, BW, VL and VNNI (Ice Lake, Sapphire Rapids, Zen 4 and later);
//! a CPU with AVX-512 but no VNNI takes the AVX2 tier.

use std::arch::x86_64::*;

use super::avx2::{f16x2, f32u, hsum_ps, hsum_ps128, k4_mins, k4_scales, ld128, ld256, q6_offset, signed_step};
use super::{avx2, dot_fn, dot_table, gemm_table, scalar, x4_table, DotFn, Kernels, N_TYPES};
use crate::quant::QType;

pub(super) fn supported() -> bool {
    avx2::supported()
        && is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("avx512vl")
        && is_x86_feature_detected!("avx512vnni")
}

pub(super) static KERNELS: Kernels = Kernels {
    isa: "avx512",
    dot: dot_table(dot_table(dot_table([None; N_TYPES], &scalar::DOT), &inst::DOT), &WIDE),
    dot_x4: x4_table([None; N_TYPES], &inst::DOT_X4),
    gemm: gemm_table(&inst::GEMM, true),
    // SAFETY (these and every kernel below): the table is handed out only where `supported()`.
    q8_0: |x, out| unsafe { avx2::quantize_q8_0(x, out) },
    q8_1: |x, out| unsafe { avx2::quantize_q8_1(x, out) },
    q8_k: |x, out| unsafe { avx2::quantize_q8_k(x, out) },
};

mod inst {
    use super::super::avx2::*;
    use super::super::{dot_fn, dot_x4_fn, gemm_fn, DotFn, DotX4Fn, Gemm, PANEL_ROWS};
    use crate::quant::QType;

    instantiate!("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni", true);
}

// --- 512-bit kernels: two 32-element blocks (or half a super-block) per register -------------

/// Measured on Zen 4 (512-bit ops double-pumped), GB/s of weights vs the VNNI-256 bodies:
/// q4_0 13.6 vs 12.3, q6_K 32 vs 27, q4_1/q8_0/q4_K even; cores with full-width AVX-512
/// should gain more.
static WIDE: [(QType, DotFn); 5] = [
    dot_fn!(Q4_0, q4_0),
    dot_fn!(Q4_1, q4_1),
    dot_fn!(Q8_0, q8_0),
    dot_fn!(Q4K, q4_k),
    dot_fn!(Q6K, q6_k),
];

/// `vmovq` from a GPR (see `avx2::movd` for why not a lane insert).
#[inline(always)]
unsafe fn movq(x: u64) -> __m128i {
    let v: __m128i;
    std::arch::asm!("vmovq {v}, {x}", x = in(reg) x, v = lateout(xmm_reg) v, options(pure, nomem, nostack, preserves_flags));
    v
}

#[inline(always)]
unsafe fn rd16(p: *const u8) -> u64 {
    std::ptr::read_unaligned(p as *const u16) as u64
}

/// f16 products a0·b0 and a1·b1 (lanes 0 and 2), converted together.
#[inline(always)]
unsafe fn f16_prod2(a0: *const u8, b0: *const u8, a1: *const u8, b1: *const u8) -> __m128 {
    let f = _mm_cvtph_ps(movq(rd16(a0) | rd16(b0) << 16 | rd16(a1) << 32 | rd16(b1) << 48));
    _mm_mul_ps(f, _mm_movehdup_ps(f))
}

/// Lanes 0 and 2 of `p` broadcast to the two 256-bit halves.
#[inline(always)]
unsafe fn halves(p: __m128) -> __m512 {
    _mm512_permutexvar_ps(
        _mm512_set_epi32(2, 2, 2, 2, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0),
        _mm512_castps128_ps512(p),
    )
}

/// Two 256-bit loads as one register.
#[inline(always)]
unsafe fn ld2x256(p0: *const u8, p1: *const u8) -> __m512i {
    _mm512_inserti64x4(_mm512_castsi256_si512(ld256(p0)), ld256(p1), 1)
}

/// The 32 nibbles of two 16-byte blocks in element order: [lo0, hi0, lo1, hi1].
#[inline(always)]
unsafe fn nibbles2(p0: *const u8, p1: *const u8) -> __m512i {
    let v = _mm256_set_m128i(ld128(p1), ld128(p0));
    let z = _mm512_inserti64x4(_mm512_castsi256_si512(v), _mm256_srli_epi16(v, 4), 1);
    _mm512_and_si512(_mm512_shuffle_i64x2(z, z, 0b11_01_10_00), _mm512_set1_epi8(0xF))
}

/// ggml_vec_dot_q4_0_q8_0, two blocks per step: Σ(q-8)·y = Σq·y - 8·Σy, both by `vpdpbusd`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn q4_0(n: usize, w: &[u8], a: &[u8]) -> f32 {
    let (x, y, nb) = (w.as_ptr(), a.as_ptr(), n / 32);
    let (zero, eight) = (_mm512_setzero_si512(), _mm512_set1_epi8(8));
    let mut acc = _mm512_setzero_ps();
    let mut i = 0;
    while i + 2 <= nb {
        let (x0, y0) = (x.add(18 * i), y.add(34 * i));
        let (x1, y1) = (x0.add(18), y0.add(34));
        let qx = nibbles2(x0.add(2), x1.add(2));
        let qy = ld2x256(y0.add(2), y1.add(2));
        let p = _mm512_sub_epi32(_mm512_dpbusd_epi32(zero, qx, qy), _mm512_dpbusd_epi32(zero, eight, qy));
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), halves(f16_prod2(x0, y0, x1, y1)), acc);
        i += 2;
    }
    let tail = if i < nb {
        hsum_ps(signed_step::<true, avx2::Q4_0>(x, y, i, _mm256_setzero_ps()))
    } else {
        0.0
    };
    _mm512_reduce_add_ps(acc) + tail
}

/// ggml_vec_dot_q8_0_q8_0, two blocks per step (|x| · ±y, the sign moved by a mask).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn q8_0(n: usize, w: &[u8], a: &[u8]) -> f32 {
    let (x, y, nb) = (w.as_ptr(), a.as_ptr(), n / 32);
    let zero = _mm512_setzero_si512();
    let mut acc = _mm512_setzero_ps();
    let mut i = 0;
    while i + 2 <= nb {
        let (x0, y0) = (x.add(34 * i), y.add(34 * i));
        let (x1, y1) = (x0.add(34), y0.add(34));
        let qx = ld2x256(x0.add(2), x1.add(2));
        let qy = ld2x256(y0.add(2), y1.add(2));
        let sy = _mm512_mask_sub_epi8(qy, _mm512_movepi8_mask(qx), zero, qy);
        let p = _mm512_dpbusd_epi32(zero, _mm512_abs_epi8(qx), sy);
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), halves(f16_prod2(x0, y0, x1, y1)), acc);
        i += 2;
    }
    let tail = if i < nb {
        hsum_ps(signed_step::<true, avx2::Q8_0>(x, y, i, _mm256_setzero_ps()))
    } else {
        0.0
    };
    _mm512_reduce_add_ps(acc) + tail
}

/// ggml_vec_dot_q4_1_q8_1, two blocks per step: Σ d·dy·q·y + Σ m·s.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn q4_1(n: usize, w: &[u8], a: &[u8]) -> f32 {
    let (x, y, nb) = (w.as_ptr(), a.as_ptr(), n / 32);
    let zero = _mm512_setzero_si512();
    let mut acc = _mm512_setzero_ps();
    let mut acc_m = _mm_setzero_ps();
    let mut i = 0;
    while i + 2 <= nb {
        let (x0, y0) = (x.add(20 * i), y.add(36 * i));
        let (x1, y1) = (x0.add(20), y0.add(36));
        let qx = nibbles2(x0.add(4), x1.add(4));
        let p = _mm512_dpbusd_epi32(zero, qx, ld2x256(y0.add(4), y1.add(4)));
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), halves(f16_prod2(x0, y0, x1, y1)), acc);
        acc_m = _mm_add_ps(acc_m, f16_prod2(x0.add(2), y0.add(2), x1.add(2), y1.add(2)));
        i += 2;
    }
    let mut sum = _mm512_reduce_add_ps(acc) + _mm_cvtss_f32(acc_m) + _mm_cvtss_f32(_mm_movehl_ps(acc_m, acc_m));
    if i < nb {
        sum += super::scalar::dot_q4_1(32, &w[20 * i..], &a[36 * i..]);
    }
    sum
}

/// `vpshufb` patterns broadcasting, within 128-bit lanes, i16 scale `lo` to the low 256 bits
/// and `hi` to the high 256 bits.
const fn halves_shuf(lo: u8, hi: u8) -> [u8; 64] {
    let mut t = [0; 64];
    let mut i = 0;
    while i < 64 {
        t[i] = 2 * if i < 32 { lo } else { hi } + (i % 2) as u8;
        i += 1;
    }
    t
}

/// i16 permutation indices: per 256-bit half, 8 lanes each of four 16-element group scales.
const fn quarters_idx(first: i16) -> [i16; 32] {
    let mut t = [0; 32];
    let mut i = 0;
    while i < 32 {
        t[i] = first + (i / 8) as i16;
        i += 1;
    }
    t
}

static SHUF_K4: [[u8; 64]; 4] = [
    halves_shuf(0, 2),
    halves_shuf(1, 3),
    halves_shuf(4, 6),
    halves_shuf(5, 7),
];
static IDX_Q6K: [[i16; 32]; 4] = [quarters_idx(0), quarters_idx(4), quarters_idx(8), quarters_idx(12)];

#[inline(always)]
unsafe fn ld512(p: *const u8) -> __m512i {
    _mm512_loadu_si512(p as *const _)
}

/// ggml_vec_dot_q4_K_q8_K, 64 quants per register: `maddubs`, then `vpdpwssd` by the scales.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn q4_k(n: usize, w: &[u8], a: &[u8]) -> f32 {
    let (x, y) = (w.as_ptr(), a.as_ptr());
    let m4 = _mm512_set1_epi8(0xF);
    let shuf = SHUF_K4.map(|t| ld512(t.as_ptr()));
    let mut acc = _mm512_setzero_ps();
    let mut acc_m = _mm_setzero_ps();
    for i in 0..n / 256 {
        let (xb, yb) = (x.add(144 * i), y.add(292 * i));
        let dy = f32u(yb);
        let (xd, xdmin) = f16x2(xb);
        let (scales, mins) = k4_scales(xb.add(4));
        acc_m = _mm_fmadd_ps(_mm_set1_ps(-dy * xdmin), _mm_cvtepi32_ps(k4_mins(mins, yb)), acc_m);
        let sc = _mm512_broadcast_i32x4(_mm256_castsi256_si128(scales));
        let mut sumi = _mm512_setzero_si512();
        for m in 0..2 {
            // qs[64m..64m+64]: groups 4m (low nibbles of the first 32 bytes), 4m+1 (their high
            // nibbles), 4m+2 and 4m+3 (the next 32 bytes).
            let q = ld512(xb.add(16 + 64 * m));
            let (lo, hi) = (_mm512_and_si512(q, m4), _mm512_and_si512(_mm512_srli_epi16(q, 4), m4));
            let q8 = yb.add(4 + 128 * m);
            let plo = _mm512_maddubs_epi16(lo, ld2x256(q8, q8.add(64)));
            let phi = _mm512_maddubs_epi16(hi, ld2x256(q8.add(32), q8.add(96)));
            sumi = _mm512_dpwssd_epi32(sumi, plo, _mm512_shuffle_epi8(sc, shuf[2 * m]));
            sumi = _mm512_dpwssd_epi32(sumi, phi, _mm512_shuffle_epi8(sc, shuf[2 * m + 1]));
        }
        acc = _mm512_fmadd_ps(_mm512_set1_ps(dy * xd), _mm512_cvtepi32_ps(sumi), acc);
    }
    _mm512_reduce_add_ps(acc) + hsum_ps128(acc_m)
}

/// ggml_vec_dot_q6_K_q8_K, 64 quants per register; the -32 offset through the bsums.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn q6_k(n: usize, w: &[u8], a: &[u8]) -> f32 {
    let (x, y) = (w.as_ptr(), a.as_ptr());
    let (m4, m30) = (_mm512_set1_epi8(0xF), _mm512_set1_epi8(0x30));
    let idx = IDX_Q6K.map(|t| ld512(t.as_ptr() as *const u8));
    let mut acc = _mm512_setzero_ps();
    for i in 0..n / 256 {
        let (xb, yb) = (x.add(210 * i), y.add(292 * i));
        let d = f32u(yb) * f16x2(xb.add(206)).1;
        let scales = ld128(xb.add(192));
        let sc = _mm512_castsi256_si512(_mm256_cvtepi8_epi16(scales));
        let mut sumi = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_zextsi256_si512(q6_offset(scales, yb)));
        for j in 0..2 {
            // ql[64j..64j+64] and qh[32j..32j+32]: groups of 32 in element order
            // [ql&15 | h&3, ql'&15 | h>>2&3] and [ql>>4 | h>>4&3, ql'>>4 | h>>6&3].
            let b = ld512(xb.add(64 * j));
            let h = ld256(xb.add(128 + 32 * j));
            let hh = _mm512_inserti64x4(_mm512_castsi256_si512(h), _mm256_srli_epi16(h, 2), 1);
            let qa = _mm512_or_si512(_mm512_and_si512(b, m4), _mm512_and_si512(_mm512_slli_epi16(hh, 4), m30));
            let qb = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(b, 4), m4), _mm512_and_si512(hh, m30));
            let q8 = yb.add(4 + 128 * j);
            let pa = _mm512_maddubs_epi16(qa, ld512(q8));
            let pb = _mm512_maddubs_epi16(qb, ld512(q8.add(64)));
            sumi = _mm512_dpwssd_epi32(sumi, pa, _mm512_permutexvar_epi16(idx[2 * j], sc));
            sumi = _mm512_dpwssd_epi32(sumi, pb, _mm512_permutexvar_epi16(idx[2 * j + 1], sc));
        }
        acc = _mm512_fmadd_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(sumi), acc);
    }
    _mm512_reduce_add_ps(acc)
}
