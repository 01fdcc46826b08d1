//! AVX-512 kernels: the AVX2 bodies recompiled with AVX-512 VNNI (`vpdpbusd` / `vpdpwssd` in
//! place of `maddubs + madd`, as ggml does under `__AVX512VNNI__ && __AVX512VL__`).
//!
//! For q4_0, a 512-bit kernel takes two blocks per register, which halves the per-block scale
//! work.
//!
//! The tier needs AVX-512 F, BW, VL and VNNI (Ice Lake, Sapphire Rapids, Zen 4 and later);
//! a CPU with AVX-512 but no VNNI takes the AVX2 tier.

use std::arch::x86_64::*;

use super::avx2::{hsum_ps, ld128, ld256, ld_float, signed_step};
use super::{
    avx2, dot_fn, dot_x4_fn, gemm_table, gemm_wide_fn, k_panel_wide_fn, row_tile_fn, scalar, table, tiled_table, DotFn,
    Gemm, Isa, KPanel, BLOCK_SUM_BYTES, K4_PANEL_BLOCK_BYTES, N_TYPES, PANEL_BLOCK_BYTES, ROW_TILE, WIDE_ROWS,
};
use crate::quant::QType;

pub(super) fn supported() -> bool {
    avx2::supported()
        && is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("avx512vl")
        && is_x86_feature_detected!("avx512vnni")
}

pub(super) static KERNELS: Isa = Isa {
    isa: "avx512",
    dot: table(table(table([None; N_TYPES], &scalar::DOT), inst::DOT), WIDE),
    dot_x4: table([None; N_TYPES], inst::DOT_X4),
    x4_single: table(
        table([None; N_TYPES], inst::X4_SINGLE),
        &[dot_x4_fn!(Q4K, q4_k_x4_gemv)],
    ),
    dot_r2: table([None; N_TYPES], inst::DOT_R2),
    tiled: tiled_table(inst::TILED),
    gemm: with_wide(gemm_table(inst::GEMM, true)),
    q4_k_panel: Some(KPanel {
        wide: Some(k_panel_wide_fn!(
            pack_q4_k16,
            q4_k_panel16::<false>,
            q4_k_panel16::<true>
        )),
        ..inst::K4_PANEL
    }),
    row_tile: table(
        [None; N_TYPES],
        &[
            row_tile_fn!(F32, float_rows::<0>),
            row_tile_fn!(F16, float_rows::<1>),
            row_tile_fn!(BF16, float_rows::<2>),
        ],
    ),
    // SAFETY (these and every kernel below): the table is handed out only where `supported()`.
    q8_0: |x, out| unsafe { avx2::quantize_q8_0(x, out) },
    q8_1: |x, out| unsafe { avx2::quantize_q8_1(x, out) },
    q8_k: |x, out| unsafe { avx2::quantize_q8_k(x, out) },
};

mod inst {
    use super::super::avx2::*;
    use super::super::{
        dot_fn, dot_r2_fn, dot_x4_fn, gemm_fn, k_panel_fn, DotFn, DotR2Fn, DotX4Fn, Gemm, KPanel, PANEL_ROWS,
    };
    use crate::quant::QType;

    instantiate!("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni", true);
}

// --- 512-bit kernels: two 32-element blocks (or half a super-block) per register -------------

/// Measured on Zen 4 (512-bit ops double-pumped), GB/s of weights vs the VNNI-256 body: 13.6
/// vs 12.3. Only q4_0 (whose matmul runs its panel kernels anyway): every other type keeps the
/// summation order of the dot products llama.cpp runs on x86, so that decode gives its bits.
static WIDE: &[(QType, DotFn)] = &[dot_fn!(Q4_0, q4_0)];

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

/// `avx2::q4_k_x4_gemv` with 512-bit registers: a register holds the low and the high nibbles
/// of one 32-byte run of quants (sub-blocks 2j and 2j+1), their two scales, and the 64
/// contiguous activations they multiply, so each token takes one load, one `maddubs` and one
/// `vpdpwssd` per 64 quants. The i32 sums are exact in any order and each token's f32 chain is
/// `q4_k`'s, so every token gets the bits of its single dot.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn q4_k_x4_gemv(n: usize, w: &[u8], a: [&[u8]; 4]) -> [f32; 4] {
    use avx2::{f16x2, fold128, k4_scales, shuf_k4};
    let (x, y) = (w.as_ptr(), [a[0].as_ptr(), a[1].as_ptr(), a[2].as_ptr(), a[3].as_ptr()]);
    let m4 = _mm512_set1_epi8(0xF);
    let (mut sum, mut sum_m) = (_mm_setzero_ps(), _mm_setzero_ps());
    for i in 0..n / 256 {
        let xb = x.add(144 * i);
        let (xd, xdmin) = f16x2(xb);
        let (scales, mins) = k4_scales(xb.add(4));
        let mut sumi = [_mm512_setzero_si512(); 4];
        for j in 0..4 {
            let q = ld256(xb.add(16 + 32 * j));
            let qq = _mm512_and_si512(
                _mm512_inserti64x4(_mm512_castsi256_si512(q), _mm256_srli_epi16(q, 4), 1),
                m4,
            );
            let sc = _mm512_inserti64x4(
                _mm512_castsi256_si512(_mm256_shuffle_epi8(scales, shuf_k4(2 * j))),
                _mm256_shuffle_epi8(scales, shuf_k4(2 * j + 1)),
                1,
            );
            for (k, s) in sumi.iter_mut().enumerate() {
                let q8 = _mm512_loadu_si512(y[k].add(292 * i + 4 + 64 * j) as *const _);
                *s = _mm512_dpwssd_epi32(*s, sc, _mm512_maddubs_epi16(qq, q8));
            }
        }
        let s = [
            fold128(fold256(sumi[0])),
            fold128(fold256(sumi[1])),
            fold128(fold256(sumi[2])),
            fold128(fold256(sumi[3])),
        ];
        avx2::q4_k_x4_block_end(s, mins, y, i, (xd, xdmin), &mut sum, &mut sum_m);
    }
    let mut out = [0f32; 4];
    _mm_storeu_ps(out.as_mut_ptr(), _mm_sub_ps(sum, sum_m));
    out
}

/// The two 256-bit halves of `v` added.
#[inline(always)]
unsafe fn fold256(v: __m512i) -> __m256i {
    _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1))
}

// --- q4_K panels of 16 rows ------------------------------------------------------------------

/// Offsets in a 16-row q4_K panel block (`2 * K4_PANEL_BLOCK_BYTES`): `avx2::pack_q4_k`'s
/// layout 16 rows wide, so that a 512-bit register holds one group of 4 quants of all 16.
const P16_DMIN: usize = 64;
const P16_SCALES: usize = 128;
const P16_MINS: usize = P16_SCALES + 64 * 8;
const P16_QS: usize = P16_MINS + 64 * 4;
const _: () = assert!(P16_QS + 64 * 32 == 2 * K4_PANEL_BLOCK_BYTES);

/// Packs 16 q4_K rows into a 16-row panel.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn pack_q4_k16(n: usize, w: &[u8], stride: usize, panel: &mut [u8]) {
    let (x, p) = (w.as_ptr(), panel.as_mut_ptr());
    for b in 0..n / 256 {
        let pb = p.add(2 * K4_PANEL_BLOCK_BYTES * b);
        let mut d = [[0f32; WIDE_ROWS]; 2];
        let mut sc = [[0i32; WIDE_ROWS]; 8];
        let mut mn = [[0u32; WIDE_ROWS]; 4];
        for r in 0..WIDE_ROWS {
            let xb = x.add(stride * r + 144 * b);
            (d[0][r], d[1][r]) = avx2::f16x2(xb);
            let mut packed = [0u8; 12];
            std::ptr::copy_nonoverlapping(xb.add(4), packed.as_mut_ptr(), 12);
            for s in 0..8 {
                let (scale, min) = crate::quant::get_scale_min_k4(s, &packed);
                sc[s][r] = scale as i32;
                mn[s / 2][r] |= (min as u32) << (16 * (s % 2));
            }
        }
        std::ptr::write_unaligned(pb as *mut [[f32; WIDE_ROWS]; 2], d);
        std::ptr::write_unaligned(pb.add(P16_SCALES) as *mut [[i32; WIDE_ROWS]; 8], sc);
        std::ptr::write_unaligned(pb.add(P16_MINS) as *mut [[u32; WIDE_ROWS]; 4], mn);
        for j in 0..4 {
            for half in 0..2 {
                let rows: [__m256i; 8] =
                    std::array::from_fn(|r| ld256(x.add(stride * (8 * half + r) + 144 * b + 16 + 32 * j)));
                for (g, v) in avx2::transpose8x32(rows).into_iter().enumerate() {
                    _mm256_storeu_si256(pb.add(P16_QS + 64 * (8 * j + g) + 32 * half) as *mut __m256i, v);
                }
            }
        }
    }
}

/// `avx2::q4_k_panel_tokens` over a 16-row panel: lane r of each register is row r, with the
/// same exact i32 sums and the same f32 chains, so the same bits.
#[inline(always)]
unsafe fn q4_k_panel16_tokens<const T: usize, const GEMV: bool>(
    nb: usize,
    p: *const u8,
    y: [*const u8; T],
) -> [__m512; T] {
    let m4 = _mm512_set1_epi8(0xF);
    let mut acc = [_mm512_setzero_ps(); T];
    let mut acc_m = [_mm512_setzero_ps(); T];
    let rd32 = |q: *const u8| std::ptr::read_unaligned(q as *const u32) as i32;
    for b in 0..nb {
        let pb = p.add(2 * K4_PANEL_BLOCK_BYTES * b);
        let yb: [*const u8; T] = std::array::from_fn(|t| y[t].add(292 * b));
        let (dx, dmin) = (
            _mm512_loadu_ps(pb as *const f32),
            _mm512_loadu_ps(pb.add(P16_DMIN) as *const f32),
        );
        let mut s_blk = [_mm512_setzero_si512(); T];
        let mut m_blk = [_mm512_setzero_si512(); T];
        for j in 0..4 {
            let mut lo = [_mm512_setzero_si512(); T];
            let mut hi = [_mm512_setzero_si512(); T];
            for g in 0..8 {
                let q = _mm512_loadu_si512(pb.add(P16_QS + 64 * (8 * j + g)) as *const _);
                let (ql, qh) = (_mm512_and_si512(q, m4), _mm512_and_si512(_mm512_srli_epi16(q, 4), m4));
                for t in 0..T {
                    let q8 = yb[t].add(4 + 64 * j + 4 * g);
                    lo[t] = _mm512_dpbusd_epi32(lo[t], ql, _mm512_set1_epi32(rd32(q8)));
                    hi[t] = _mm512_dpbusd_epi32(hi[t], qh, _mm512_set1_epi32(rd32(q8.add(32))));
                }
            }
            let sl = _mm512_loadu_si512(pb.add(P16_SCALES + 128 * j) as *const _);
            let sh = _mm512_loadu_si512(pb.add(P16_SCALES + 128 * j + 64) as *const _);
            let mins = _mm512_loadu_si512(pb.add(P16_MINS + 64 * j) as *const _);
            for t in 0..T {
                let s = _mm512_add_epi32(_mm512_mullo_epi32(lo[t], sl), _mm512_mullo_epi32(hi[t], sh));
                let bs = yb[t].add(260 + 8 * j);
                let rd = |i: usize| std::ptr::read_unaligned(bs.add(2 * i) as *const i16) as i32;
                let (b0, b1) = (rd(0) + rd(1), rd(2) + rd(3));
                let pair = (b0 as u32 & 0xFFFF) | ((b1 as u32) << 16);
                let m = _mm512_madd_epi16(mins, _mm512_set1_epi32(pair as i32));
                if GEMV {
                    s_blk[t] = _mm512_add_epi32(s_blk[t], s);
                    m_blk[t] = _mm512_add_epi32(m_blk[t], m);
                } else {
                    let dy = _mm512_set1_ps(std::ptr::read_unaligned(yb[t] as *const f32));
                    acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dx, dy), acc[t]);
                    acc_m[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(m), _mm512_mul_ps(dmin, dy), acc_m[t]);
                }
            }
        }
        if GEMV {
            for t in 0..T {
                let dy = _mm512_set1_ps(std::ptr::read_unaligned(yb[t] as *const f32));
                acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s_blk[t]), _mm512_mul_ps(dx, dy), acc[t]);
                acc_m[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(m_blk[t]), _mm512_mul_ps(dmin, dy), acc_m[t]);
            }
        }
    }
    std::array::from_fn(|t| _mm512_sub_ps(acc[t], acc_m[t]))
}

/// `KPanelWide::quads` / `singles`: the listed tokens 4 at a time, then one at a time.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn q4_k_panel16<const GEMV: bool>(
    n: usize,
    panel: &[u8],
    act: &[u8],
    arb: usize,
    tokens: &[usize],
    out: &mut [[f32; WIDE_ROWS]],
) {
    let (nb, p, a) = (n / 256, panel.as_ptr(), act.as_ptr());
    let mut i = 0;
    while i + 4 <= tokens.len() {
        let y: [*const u8; 4] = std::array::from_fn(|t| a.add(arb * tokens[i + t]));
        for (t, v) in q4_k_panel16_tokens::<4, GEMV>(nb, p, y).into_iter().enumerate() {
            _mm512_storeu_ps(out[i + t].as_mut_ptr(), v);
        }
        i += 4;
    }
    for i in i..tokens.len() {
        let [v] = q4_k_panel16_tokens::<1, GEMV>(nb, p, [a.add(arb * tokens[i])]);
        _mm512_storeu_ps(out[i].as_mut_ptr(), v);
    }
}

// --- 16-row tiles of the signed types' panels ------------------------------------------------

/// Each [`Gemm`] with its wide tile: ggml's lane order for q5_0 and q8_0 (as their `tile`),
/// one i32 per block for the others.
const fn with_wide(mut t: [Option<Gemm>; N_TYPES]) -> [Option<Gemm>; N_TYPES] {
    let mut i = 0;
    while i < N_TYPES {
        if let Some(g) = &mut t[i] {
            g.wide = Some(if i == QType::Q5_0 as usize || i == QType::Q8_0 as usize {
                gemm_wide_fn!(gemm_tile16::<true>)
            } else {
                gemm_wide_fn!(gemm_tile16::<false>)
            });
        }
        i += 1;
    }
    t
}

/// Group `j` of block `b` of two panels (`pa`, `pb`) as one register: rows 0..8, then 8..16.
#[inline(always)]
unsafe fn group16(pa: *const u8, pb: *const u8, off: usize) -> __m512i {
    _mm512_inserti64x4(_mm512_castsi256_si512(ld256(pa.add(off))), ld256(pb.add(off)), 1)
}

/// The 16 rows' scales of block `b`.
#[inline(always)]
unsafe fn scales16(pa: *const u8, pb: *const u8) -> __m512 {
    let lo = _mm256_loadu_ps(pa as *const f32);
    let hi = _mm256_loadu_ps(pb as *const f32);
    _mm512_castpd_ps(_mm512_insertf64x4(
        _mm512_castps_pd(_mm512_castps256_ps512(lo)),
        _mm256_castps_pd(hi),
        1,
    ))
}

/// `avx2::gemm_tokens` over 16 rows: lane r is row r, with the same sums and fmas.
#[inline(always)]
unsafe fn gemm_tokens16<const T: usize>(
    nb: usize,
    pa: *const u8,
    pb: *const u8,
    a: *const u8,
    arb: usize,
    s: *const u8,
) -> [__m512; T] {
    let rd = |p: *const u8| std::ptr::read_unaligned(p as *const u32);
    let mut acc = [_mm512_setzero_ps(); T];
    for b in 0..nb {
        let (ba, bb) = (pa.add(PANEL_BLOCK_BYTES * b), pb.add(PANEL_BLOCK_BYTES * b));
        let sb = |t: usize| s.add(BLOCK_SUM_BYTES * nb * t + 8 * b);
        let mut sumi: [__m512i; T] = std::array::from_fn(|t| _mm512_set1_epi32(rd(sb(t).add(4)) as i32));
        for j in 0..8 {
            let wq = group16(ba, bb, 32 + 32 * j);
            for (t, si) in sumi.iter_mut().enumerate() {
                let y = _mm512_set1_epi32(rd(a.add(t * arb + 34 * b + 2 + 4 * j)) as i32);
                *si = _mm512_dpbusd_epi32(*si, wq, y);
            }
        }
        let dx = scales16(ba, bb);
        for (t, acc) in acc.iter_mut().enumerate() {
            let d = _mm512_mul_ps(dx, _mm512_set1_ps(std::ptr::read_unaligned(sb(t) as *const f32)));
            *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi[t]), d, *acc);
        }
    }
    acc
}

/// `avx2::lanes_tokens` over 16 rows: each (row, token)'s 8 lanes in 8 registers, row r at
/// lane r, folded as `hsum_float_8` at the end.
#[inline(always)]
unsafe fn lanes_tokens16<const T: usize>(
    nb: usize,
    pa: *const u8,
    pb: *const u8,
    a: *const u8,
    arb: usize,
    s: *const u8,
) -> [__m512; T] {
    let rd = |p: *const u8| std::ptr::read_unaligned(p as *const u32);
    let mut acc = [[_mm512_setzero_ps(); 8]; T];
    for b in 0..nb {
        let (ba, bb) = (pa.add(PANEL_BLOCK_BYTES * b), pb.add(PANEL_BLOCK_BYTES * b));
        let dx = scales16(ba, bb);
        let d: [__m512; T] = std::array::from_fn(|t| {
            let st = s.add(BLOCK_SUM_BYTES * nb * t);
            _mm512_mul_ps(
                dx,
                _mm512_set1_ps(std::ptr::read_unaligned(st.add(8 * b) as *const f32)),
            )
        });
        #[allow(clippy::needless_range_loop)] // j also picks the panel group and the sums
        for j in 0..8 {
            let wq = group16(ba, bb, 32 + 32 * j);
            for t in 0..T {
                let st = s.add(BLOCK_SUM_BYTES * nb * t);
                let init = _mm512_set1_epi32(rd(st.add(8 * nb + 32 * b + 4 * j)) as i32);
                let yj = _mm512_set1_epi32(rd(a.add(t * arb + 34 * b + 2 + 4 * j)) as i32);
                let pj = _mm512_dpbusd_epi32(init, wq, yj);
                acc[t][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(pj), d[t], acc[t][j]);
            }
        }
    }
    std::array::from_fn(|t| {
        let l = &acc[t];
        let even = _mm512_add_ps(_mm512_add_ps(l[0], l[4]), _mm512_add_ps(l[2], l[6]));
        let odd = _mm512_add_ps(_mm512_add_ps(l[1], l[5]), _mm512_add_ps(l[3], l[7]));
        _mm512_add_ps(even, odd)
    })
}

/// `Gemm::wide`: two panels back to back × the tokens, 8 (block sums) or 2 (lanes) at a time.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn gemm_tile16<const LANES: bool>(
    n: usize,
    panels: &[u8],
    act: &[u8],
    arb: usize,
    sums: &[u8],
    out: &mut [[f32; WIDE_ROWS]],
) {
    let nb = n / 32;
    let pa = panels.as_ptr();
    let pb = pa.add(nb * PANEL_BLOCK_BYTES);
    let (a, s) = (act.as_ptr(), sums.as_ptr());
    let tok = |t: usize| (a.add(arb * t), s.add(BLOCK_SUM_BYTES * nb * t));
    let mut t = 0;
    let step = if LANES { 2 } else { 8 };
    while t + step <= out.len() {
        let (at, st) = tok(t);
        if LANES {
            for (i, v) in lanes_tokens16::<2>(nb, pa, pb, at, arb, st).into_iter().enumerate() {
                _mm512_storeu_ps(out[t + i].as_mut_ptr(), v);
            }
        } else {
            for (i, v) in gemm_tokens16::<8>(nb, pa, pb, at, arb, st).into_iter().enumerate() {
                _mm512_storeu_ps(out[t + i].as_mut_ptr(), v);
            }
        }
        t += step;
    }
    while t < out.len() {
        let (at, st) = tok(t);
        let [v] = if LANES {
            lanes_tokens16::<1>(nb, pa, pb, at, arb, st)
        } else {
            gemm_tokens16::<1>(nb, pa, pb, at, arb, st)
        };
        _mm512_storeu_ps(out[t].as_mut_ptr(), v);
        t += 1;
    }
}

// --- float rows × tokens, read in place ---------------------------------------------------------

/// 16 weights at `p` as f32: `F` = 0 f32, 1 f16, 2 bf16 (`avx2::ld_float`, twice as wide).
#[inline(always)]
unsafe fn ld_float16<const F: u8>(p: *const u8) -> __m512 {
    match F {
        0 => _mm512_loadu_ps(p as *const f32),
        1 => _mm512_cvtph_ps(ld256(p)),
        _ => _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(ld256(p)), 16)),
    }
}

/// The 256-bit halves of `u` and `v` added, side by side: `[u.lo + u.hi | v.lo + v.hi]`.
#[inline(always)]
unsafe fn fold_halves(u: __m512, v: __m512) -> __m512 {
    _mm512_add_ps(
        _mm512_shuffle_f32x4::<0b01_00_01_00>(u, v),
        _mm512_shuffle_f32x4::<0b11_10_11_10>(u, v),
    )
}

/// `avx2::dot_float`'s last sums, `hsum_ps((a0 + a1) + (a2 + a3))`, of four (row, token)
/// pairs at once, each pair's accumulators held as `[a0|a1]` and `[a2|a3]`: every addition
/// pairs the same lanes as `hsum_ps` does, so each of the four keeps its bits.
#[inline(always)]
unsafe fn hsum4(acc: [[__m512; 2]; ROW_TILE]) -> __m128 {
    // The 8-lane sums (a0 + a1) + (a2 + a3) of pairs 0, 1 and of pairs 2, 3.
    let s01 = _mm512_add_ps(fold_halves(acc[0][0], acc[1][0]), fold_halves(acc[0][1], acc[1][1]));
    let s23 = _mm512_add_ps(fold_halves(acc[2][0], acc[3][0]), fold_halves(acc[2][1], acc[3][1]));
    // hsum_ps: high 128 bits + low, then lanes 2, 3 onto 0, 1, then lane 1 onto 0 (one
    // 128-bit lane per pair from here).
    let lo = _mm512_shuffle_f32x4::<0b10_00_10_00>(s01, s23);
    let hi = _mm512_shuffle_f32x4::<0b11_01_11_01>(s01, s23);
    let r = _mm512_add_ps(hi, lo);
    let r = _mm512_add_ps(r, _mm512_permute_ps::<0b11_10_11_10>(r));
    let r = _mm512_add_ps(r, _mm512_movehdup_ps(r));
    _mm512_castps512_ps128(_mm512_permutexvar_ps(
        _mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0),
        r,
    ))
}

/// `avx2::dot_float` of [`ROW_TILE`] weight rows `x` against `T` activation rows `y`, in its
/// order: its accumulators a0..a3 (8 lanes over elements 32i + 8j.., j = 0..4) held as
/// `[a0|a1]` and `[a2|a3]`, the 8-element steps after the last 32 into a0's lanes, the last
/// sums by [`hsum4`], then the scalar tail. 4 × 3 pairs are 24 accumulators, and each loaded
/// vector serves 3 or 4 of them.
#[inline(always)]
#[allow(clippy::needless_range_loop)] // the (token, row, half) indices mirror `dot_float`'s
unsafe fn float_tokens<const F: u8, const T: usize>(
    n: usize,
    x: [*const u8; ROW_TILE],
    y: [*const f32; T],
    ahead: usize,
) -> [__m128; T] {
    let wb = if F == 0 { 4 } else { 2 };
    let mut acc = [[[_mm512_setzero_ps(); 2]; ROW_TILE]; T];
    let mut i = 0;
    while i + 32 <= n {
        if ahead > 0 {
            // The same elements of the rows `ahead` bytes on (the next four), a step's cache
            // lines each: the four short streams are too short for the hardware prefetcher.
            for r in 0..ROW_TILE {
                for off in (0..32 * wb).step_by(64) {
                    _mm_prefetch::<_MM_HINT_T0>(x[r].wrapping_add(wb * i + ahead + off) as *const i8);
                }
            }
        }
        for h in 0..2 {
            let j = i + 16 * h;
            let mut w = [_mm512_setzero_ps(); ROW_TILE];
            for r in 0..ROW_TILE {
                w[r] = ld_float16::<F>(x[r].add(wb * j));
            }
            for t in 0..T {
                let a = _mm512_loadu_ps(y[t].add(j));
                for r in 0..ROW_TILE {
                    acc[t][r][h] = _mm512_fmadd_ps(w[r], a, acc[t][r][h]);
                }
            }
        }
        i += 32;
    }
    while i + 8 <= n {
        let mut w = [_mm512_setzero_ps(); ROW_TILE];
        for r in 0..ROW_TILE {
            w[r] = _mm512_castps256_ps512(ld_float::<F>(x[r].add(wb * i)));
        }
        for t in 0..T {
            let a = _mm512_castps256_ps512(_mm256_loadu_ps(y[t].add(i)));
            for r in 0..ROW_TILE {
                acc[t][r][0] = _mm512_mask3_fmadd_ps(w[r], a, acc[t][r][0], 0xFF);
            }
        }
        i += 8;
    }
    let mut out = [_mm_setzero_ps(); T];
    for t in 0..T {
        // `dot_float` adds its scalar tail even when it is empty (+0.0).
        let mut tail = [0f32; ROW_TILE];
        if i < n {
            let at = std::slice::from_raw_parts(y[t].add(i) as *const u8, 4 * (n - i));
            for (r, v) in tail.iter_mut().enumerate() {
                let wt = std::slice::from_raw_parts(x[r].add(wb * i), wb * (n - i));
                *v = match F {
                    0 => scalar::dot_f32(n - i, wt, at),
                    1 => scalar::dot_f16(n - i, wt, at),
                    _ => scalar::dot_bf16(n - i, wt, at),
                };
            }
        }
        out[t] = _mm_add_ps(hsum4(acc[t]), _mm_loadu_ps(tail.as_ptr()));
    }
    out
}

/// [`RowTileFn`](super::RowTileFn) of the float types (`F` as in [`ld_float16`]): 3 tokens
/// at a time, then the last one or two.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn float_rows<const F: u8>(
    n: usize,
    w: &[u8],
    stride: usize,
    act: &[u8],
    arb: usize,
    tokens: &[usize],
    out: &mut [[f32; ROW_TILE]],
) {
    let x: [*const u8; ROW_TILE] = std::array::from_fn(|r| w.as_ptr().add(r * stride));
    let y = |i: usize| act.as_ptr().add(tokens[i] * arb) as *const f32;
    // One or two tokens (decode) stream the rows once: fetch the next four ahead.
    let ahead = if tokens.len() < 3 { ROW_TILE * stride } else { 0 };
    let mut i = 0;
    while i + 3 <= tokens.len() {
        let s = float_tokens::<F, 3>(n, x, [y(i), y(i + 1), y(i + 2)], 0);
        for (o, s) in out[i..i + 3].iter_mut().zip(s) {
            _mm_storeu_ps(o.as_mut_ptr(), s);
        }
        i += 3;
    }
    match tokens.len() - i {
        2 => {
            let s = float_tokens::<F, 2>(n, x, [y(i), y(i + 1)], ahead);
            for (o, s) in out[i..i + 2].iter_mut().zip(s) {
                _mm_storeu_ps(o.as_mut_ptr(), s);
            }
        }
        1 => _mm_storeu_ps(out[i].as_mut_ptr(), float_tokens::<F, 1>(n, x, [y(i)], ahead)[0]),
        _ => {}
    }
}
