//! AVX2 (+FMA, F16C) kernels, ported from ggml's x86 paths (ggml/src/ggml-cpu/arch/x86/quants.c).
//!
//! The bodies are `#[inline(always)]` and generic over `V`: with `V = true` (instantiated in
//! `avx512.rs`, compiled with AVX-512 VNNI) the `maddubs + madd` pairs become `vpdpbusd` /
//! `vpdpwssd`. The `*_x4` bodies decode each weight block once for four activation rows; the
//! `gemm_*` bodies (`gemm.rs`) are the packed-panel prefill kernels of [`Gemm`]; the k-quant
//! bodies live in `kquant.rs`.
//! Callers guarantee the row lengths (see `dot_fn!`); reads go through unaligned loads.

use std::arch::x86_64::*;

use super::{
    dot_fn, dot_r2_fn, dot_x4_fn, gemm_fn, gemm_table, k_panel_fn, scalar, table, tiled_table, DotFn, DotR2Fn, DotX4Fn,
    Gemm, Isa, KPanel, BLOCK_SUM_BYTES, K4_PANEL_BLOCK_BYTES, N_TYPES, PANEL_BLOCK_BYTES, PANEL_ROWS,
};
use crate::quant::{e8m0_to_f32_half, QType, KVALUES_IQ4NL, KVALUES_MXFP4};

mod gemm;
mod kquant;
pub(super) use gemm::{gemm_row, gemm_row_r2, gemm_tile, pack_q4_k, pack_signed, q4_k_panel, transpose8x32};
pub(super) use kquant::*;

pub(super) fn supported() -> bool {
    is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c")
}

pub(super) static KERNELS: Isa = Isa {
    isa: "avx2",
    dot: table(table([None; N_TYPES], &scalar::DOT), DOT),
    dot_x4: table([None; N_TYPES], DOT_X4),
    x4_single: table([None; N_TYPES], X4_SINGLE),
    dot_r2: table([None; N_TYPES], DOT_R2),
    tiled: tiled_table(TILED),
    gemm: gemm_table(GEMM, false),
    q4_k_panel: Some(K4_PANEL),
    row_tile: [None; N_TYPES],
    // SAFETY (these and every kernel in `DOT`): the table is handed out only where `supported()`.
    q8_0: |x, out| unsafe { quantize_q8_0(x, out) },
    q8_1: |x, out| unsafe { quantize_q8_1(x, out) },
    q8_k: |x, out| unsafe { quantize_q8_k(x, out) },
};

/// Compiles every generic body below for one ISA: `instantiate!(features, V)` defines the
/// `#[target_feature]` entry points and the `DOT` / `DOT_X4` override tables. `avx512.rs`
/// reuses it with the VNNI features and `V = true`.
macro_rules! instantiate {
    ($feat:literal, $v:literal) => {
        instantiate!(@one $feat, $v;
            f32_ = dot_float<0>, f16_ = dot_float<1>, bf16_ = dot_float<2>,
            q4_0_ = dot_signed<Q4_0>, q5_0_ = dot_signed<Q5_0>, q8_0_ = dot_signed<Q8_0>,
            iq4_nl_ = dot_signed<IQ4NL>, mxfp4_ = dot_signed<MXFP4>,
            q4_1_ = dot_unsigned<Q4_1>, q5_1_ = dot_unsigned<Q5_1>,
            q2_k_ = q2_k, q3_k_ = q3_k, q4_k_ = q4_k, q5_k_ = q5_k, q6_k_ = q6_k<false>, q8_k_ = q8_k);
        instantiate!(@x4 $feat, $v;
            f32x4 = dot_float_x4<0>, f16x4 = dot_float_x4<1>, bf16x4 = dot_float_x4<2>,
            q4_0x4 = dot_signed_x4<Q4_0>, q5_0x4 = dot_signed_x4<Q5_0>,
            q8_0x4 = dot_signed_x4<Q8_0>, iq4_nlx4 = dot_signed_x4<IQ4NL>,
            q4_1x4 = dot_unsigned_x4<Q4_1>, q5_1x4 = dot_unsigned_x4<Q5_1>,
            q4_kx4 = q4_k_x4, q4_kx4_gemv = q4_k_x4_gemv, q5_kx4 = q5_k_x4, q6_kx4 = q6_k_x4<false>);
        instantiate!(@r2 $feat, $v;
            q5_0r2 = dot_signed_r2<Q5_0>, q8_0r2 = dot_signed_r2<Q8_0>,
            q4_1r2 = dot_unsigned_r2<Q4_1>, q5_1r2 = dot_unsigned_r2<Q5_1>, q4_kr2 = q4_k_r2,
            q4_0g2 = gemm_row_r2<Q4_0>, iq4_nlg2 = gemm_row_r2<IQ4NL>, mxfp4g2 = gemm_row_r2<MXFP4>);
        #[target_feature(enable = $feat)]
        unsafe fn q6_k_tiled(n: usize, w: &[u8], a: &[u8]) -> f32 {
            q6_k::<$v, true>(n, w, a)
        }
        #[target_feature(enable = $feat)]
        unsafe fn q6_kx4_tiled(n: usize, w: &[u8], a: [&[u8]; 4]) -> [f32; 4] {
            q6_k_x4::<$v, true>(n, w, a)
        }
        pub(in crate::backend::cpu::dot) static TILED: &[(QType, DotFn, DotX4Fn)] =
            &[(QType::Q6K, dot_fn!(Q6K, q6_k_tiled).1, dot_x4_fn!(Q6K, q6_kx4_tiled).1)];

        instantiate!(@pack $feat, $v, gemm_row;
            q4_0p = Q4_0, iq4_nlp = IQ4NL, mxfp4p = MXFP4);
        instantiate!(@pack $feat, $v, dot_signed; q5_0l = Q5_0, q8_0l = Q8_0);

        #[target_feature(enable = $feat)]
        unsafe fn q4_k_pack(n: usize, w: &[u8], stride: usize, panel: &mut [u8]) {
            pack_q4_k(n, w, stride, panel)
        }
        #[target_feature(enable = $feat)]
        unsafe fn q4_k_quads(n: usize, panel: &[u8], act: &[u8], arb: usize, tokens: &[usize], out: &mut [[f32; PANEL_ROWS]]) {
            q4_k_panel::<$v, false>(n, panel, act, arb, tokens, out)
        }
        #[target_feature(enable = $feat)]
        unsafe fn q4_k_singles(n: usize, panel: &[u8], act: &[u8], arb: usize, tokens: &[usize], out: &mut [[f32; PANEL_ROWS]]) {
            q4_k_panel::<$v, true>(n, panel, act, arb, tokens, out)
        }
        pub(in crate::backend::cpu::dot) static K4_PANEL: KPanel = k_panel_fn!(q4_k_pack, q4_k_quads, q4_k_singles, None);

        #[target_feature(enable = $feat)]
        unsafe fn tile_(n: usize, panel: &[u8], act: &[u8], arb: usize, sums: &[u8], out: &mut [[f32; PANEL_ROWS]]) {
            gemm_tile::<$v, false>(n, panel, act, arb, sums, out)
        }

        #[target_feature(enable = $feat)]
        unsafe fn lanes_(n: usize, panel: &[u8], act: &[u8], arb: usize, sums: &[u8], out: &mut [[f32; PANEL_ROWS]]) {
            gemm_tile::<$v, true>(n, panel, act, arb, sums, out)
        }

        pub(in crate::backend::cpu::dot) static DOT: &[(QType, DotFn)] = &[
            dot_fn!(F32, f32_),
            dot_fn!(F16, f16_),
            dot_fn!(BF16, bf16_),
            dot_fn!(Q4_0, q4_0_),
            dot_fn!(Q4_1, q4_1_),
            dot_fn!(Q5_0, q5_0_),
            dot_fn!(Q5_1, q5_1_),
            dot_fn!(Q8_0, q8_0_),
            dot_fn!(IQ4NL, iq4_nl_),
            dot_fn!(MXFP4, mxfp4_),
            dot_fn!(Q2K, q2_k_),
            dot_fn!(Q3K, q3_k_),
            dot_fn!(Q4K, q4_k_),
            dot_fn!(Q5K, q5_k_),
            dot_fn!(Q6K, q6_k_),
            dot_fn!(Q8K, q8_k_),
        ];

        pub(in crate::backend::cpu::dot) static DOT_X4: &[(QType, DotX4Fn)] = &[
            dot_x4_fn!(F32, f32x4),
            dot_x4_fn!(F16, f16x4),
            dot_x4_fn!(BF16, bf16x4),
            dot_x4_fn!(Q4_0, q4_0x4),
            dot_x4_fn!(Q4_1, q4_1x4),
            dot_x4_fn!(Q5_0, q5_0x4),
            dot_x4_fn!(Q5_1, q5_1x4),
            dot_x4_fn!(Q8_0, q8_0x4),
            dot_x4_fn!(IQ4NL, iq4_nlx4),
            dot_x4_fn!(Q4K, q4_kx4),
            dot_x4_fn!(Q5K, q5_kx4),
            dot_x4_fn!(Q6K, q6_kx4),
        ];

        // 4-token kernels in the single dot's order where `DOT_X4`'s is another.
        pub(in crate::backend::cpu::dot) static X4_SINGLE: &[(QType, DotX4Fn)] = &[dot_x4_fn!(Q4K, q4_kx4_gemv)];

        // Types whose single-row dot is `dot_signed` / `dot_unsigned` (and so is `Gemm::row`
        // for q5_0 and q8_0).
        pub(in crate::backend::cpu::dot) static DOT_R2: &[(QType, DotR2Fn)] = &[
            dot_r2_fn!(Q4_1, q4_1r2),
            dot_r2_fn!(Q5_0, q5_0r2),
            dot_r2_fn!(Q5_1, q5_1r2),
            dot_r2_fn!(Q8_0, q8_0r2),
            dot_r2_fn!(Q4K, q4_kr2),
        ];

        // q5_0 and q8_0 (which ggml does not repack on x86) sum in ggml's lane order, the
        // others as ggml's repacked GEMMs do: one i32 per block.
        pub(in crate::backend::cpu::dot) static GEMM: &[(QType, Gemm)] = &[
            gemm_fn!(Q4_0, <Q4_0 as Signed>::OFF as i32, q4_0p, tile_, q4_0p::row, q4_0g2),
            gemm_fn!(Q5_0, <Q5_0 as Signed>::OFF as i32, q5_0l, lanes_, q5_0l::row, q5_0r2),
            gemm_fn!(Q8_0, <Q8_0 as Signed>::OFF as i32, q8_0l, lanes_, q8_0l::row, q8_0r2),
            gemm_fn!(IQ4NL, <IQ4NL as Signed>::OFF as i32, iq4_nlp, tile_, iq4_nlp::row, iq4_nlg2),
            gemm_fn!(MXFP4, <MXFP4 as Signed>::OFF as i32, mxfp4p, tile_, mxfp4p::row, mxfp4g2),
        ];
    };
    (@one $feat:literal, $v:literal; $($name:ident = $body:ident $(<$t:tt>)?),* $(,)?) => {
        $(
            #[target_feature(enable = $feat)]
            unsafe fn $name(n: usize, w: &[u8], a: &[u8]) -> f32 {
                $body::<$v $(, $t)?>(n, w, a)
            }
        )*
    };
    (@pack $feat:literal, $v:literal, $row:ident; $($name:ident = $t:ident),* $(,)?) => {
        $(
            #[target_feature(enable = $feat)]
            unsafe fn $name(n: usize, w: &[u8], stride: usize, panel: &mut [u8]) {
                pack_signed::<$t>(n, w, stride, panel)
            }
            mod $name {
                use super::*;
                #[target_feature(enable = $feat)]
                pub(super) unsafe fn row(n: usize, w: &[u8], a: &[u8]) -> f32 {
                    $row::<$v, $t>(n, w, a)
                }
            }
        )*
    };
    (@r2 $feat:literal, $v:literal; $($name:ident = $body:ident $(<$t:tt>)?),* $(,)?) => {
        $(
            #[target_feature(enable = $feat)]
            unsafe fn $name(n: usize, w: [&[u8]; 2], a: &[u8]) -> [f32; 2] {
                $body::<$v $(, $t)?>(n, w, a)
            }
        )*
    };
    (@x4 $feat:literal, $v:literal; $($name:ident = $body:ident $(<$t:tt>)?),* $(,)?) => {
        $(
            #[target_feature(enable = $feat)]
            unsafe fn $name(n: usize, w: &[u8], a: [&[u8]; 4]) -> [f32; 4] {
                $body::<$v $(, $t)?>(n, w, a)
            }
        )*
    };
}
pub(super) use instantiate;

mod inst {
    use super::*;
    instantiate!("avx2,fma,f16c", false);
}
pub(super) use inst::{DOT, DOT_R2, DOT_X4, GEMM, K4_PANEL, TILED, X4_SINGLE};

// --- helpers (ggml's names in comments) -----------------------------------------------------

#[inline(always)]
pub(super) unsafe fn ld128(p: *const u8) -> __m128i {
    _mm_loadu_si128(p as *const __m128i)
}

#[inline(always)]
pub(super) unsafe fn ld256(p: *const u8) -> __m256i {
    _mm256_loadu_si256(p as *const __m256i)
}

/// `vmovd` from a GPR, which writes the whole register. LLVM lowers a loaded 16-bit scale
/// to `vpinsrw` into whatever register is free — often a live accumulator — which chained
/// every block on the previous block's FMA and halved the legacy kernels' speed.
#[inline(always)]
unsafe fn movd(x: u32) -> __m128i {
    let v: __m128i;
    std::arch::asm!("vmovd {v}, {x:e}", x = in(reg) x, v = lateout(xmm_reg) v, options(pure, nomem, nostack, preserves_flags));
    v
}

/// The f16 at `p` → f32 (F16C).
#[inline(always)]
unsafe fn f16(p: *const u8) -> f32 {
    _mm_cvtss_f32(_mm_cvtph_ps(movd(std::ptr::read_unaligned(p as *const u16) as u32)))
}

/// Two adjacent f16 at `p`, converted together.
#[inline(always)]
pub(super) unsafe fn f16x2(p: *const u8) -> (f32, f32) {
    let f = _mm_cvtph_ps(movd(u32u(p)));
    (_mm_cvtss_f32(f), _mm_cvtss_f32(_mm_movehdup_ps(f)))
}

#[inline(always)]
pub(super) unsafe fn f32u(p: *const u8) -> f32 {
    std::ptr::read_unaligned(p as *const f32)
}

#[inline(always)]
unsafe fn u32u(p: *const u8) -> u32 {
    std::ptr::read_unaligned(p as *const u32)
}

/// `hsum_float_8`.
#[inline(always)]
pub(super) unsafe fn hsum_ps(x: __m256) -> f32 {
    let mut r = _mm_add_ps(_mm256_extractf128_ps(x, 1), _mm256_castps256_ps128(x));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    _mm_cvtss_f32(r)
}

#[inline(always)]
pub(super) unsafe fn hsum_ps128(x: __m128) -> f32 {
    let r = _mm_add_ps(x, _mm_movehl_ps(x, x));
    _mm_cvtss_f32(_mm_add_ss(r, _mm_movehdup_ps(r)))
}

/// `hsum_i32_8`.
#[inline(always)]
unsafe fn hsum_i32(a: __m256i) -> i32 {
    let s = _mm_add_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
    let s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32(s, 0b10_11_00_01)))
}

#[inline(always)]
unsafe fn hsum_i32_128(a: __m128i) -> i32 {
    let s = _mm_add_epi32(a, _mm_unpackhi_epi64(a, a));
    _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32(s, 0b10_11_00_01)))
}

/// `bytes_from_nibbles_32`: 16 bytes → 32 nibbles (low nibbles first), each in 0..16.
#[inline(always)]
unsafe fn nibbles(p: *const u8) -> __m256i {
    let t = ld128(p);
    _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(t, 4), t), _mm256_set1_epi8(0xF))
}

/// `bytes_from_bits_32`: bit i of the 32 at `p` → byte i = 0xFF if set, else 0.
#[inline(always)]
unsafe fn bits32(p: *const u8) -> __m256i {
    let shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
    let bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(u32u(p) as i32), shuf);
    let bytes = _mm256_or_si256(bytes, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
    _mm256_cmpeq_epi8(bytes, _mm256_set1_epi64x(-1))
}

/// Σ of 4 adjacent u8·i8 products into 8 i32 lanes (`mul_sum_us8_pairs`).
#[inline(always)]
pub(super) unsafe fn dot_us8<const V: bool>(ax: __m256i, sy: __m256i) -> __m256i {
    if V {
        _mm256_dpbusd_epi32(_mm256_setzero_si256(), ax, sy)
    } else {
        _mm256_madd_epi16(_mm256_maddubs_epi16(ax, sy), _mm256_set1_epi16(1))
    }
}

/// `acc + madd(a, b)`, one `vpdpwssd` under VNNI.
#[inline(always)]
pub(super) unsafe fn madd_acc<const V: bool>(acc: __m256i, a: __m256i, b: __m256i) -> __m256i {
    if V {
        _mm256_dpwssd_epi32(acc, a, b)
    } else {
        _mm256_add_epi32(acc, _mm256_madd_epi16(a, b))
    }
}

// --- float weights × f32 activations ----------------------------------------------------------

/// 8 weights at `p` as f32: `F` = 0 f32, 1 f16, 2 bf16.
#[inline(always)]
pub(super) unsafe fn ld_float<const F: u8>(p: *const u8) -> __m256 {
    match F {
        0 => _mm256_loadu_ps(p as *const f32),
        1 => _mm256_cvtph_ps(ld128(p)),
        _ => _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(ld128(p)), 16)),
    }
}

#[inline(always)]
pub(super) unsafe fn dot_float<const V: bool, const F: u8>(n: usize, w: &[u8], a: &[u8]) -> f32 {
    let wb = if F == 0 { 4 } else { 2 };
    let (x, y) = (w.as_ptr(), a.as_ptr() as *const f32);
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    while i + 32 <= n {
        for (k, acc) in acc.iter_mut().enumerate() {
            let j = i + 8 * k;
            *acc = _mm256_fmadd_ps(ld_float::<F>(x.add(wb * j)), _mm256_loadu_ps(y.add(j)), *acc);
        }
        i += 32;
    }
    while i + 8 <= n {
        acc[0] = _mm256_fmadd_ps(ld_float::<F>(x.add(wb * i)), _mm256_loadu_ps(y.add(i)), acc[0]);
        i += 8;
    }
    let sum = hsum_ps(_mm256_add_ps(
        _mm256_add_ps(acc[0], acc[1]),
        _mm256_add_ps(acc[2], acc[3]),
    ));
    // The scalar tail of no elements is +0.0, added all the same (it turns a -0.0 sum to +0.0).
    let (w, a) = (&w[wb * i..], &a[4 * i..]);
    sum + match F {
        _ if i == n => 0.0,
        0 => scalar::dot_f32(n - i, w, a),
        1 => scalar::dot_f16(n - i, w, a),
        _ => scalar::dot_bf16(n - i, w, a),
    }
}

/// `dot_float` of four activation rows against one weight row: each weight vector is loaded
/// (and for f16 / bf16 widened) once for the four, and each token keeps its own four
/// accumulators in `dot_float`'s order, so its result has `dot_float`'s bits.
#[inline(always)]
#[allow(clippy::needless_range_loop)] // the (token, accumulator) indices mirror `dot_float`'s
pub(super) unsafe fn dot_float_x4<const V: bool, const F: u8>(n: usize, w: &[u8], a: [&[u8]; 4]) -> [f32; 4] {
    let wb = if F == 0 { 4 } else { 2 };
    let x = w.as_ptr();
    let y = a.map(|r| r.as_ptr() as *const f32);
    let mut acc = [[_mm256_setzero_ps(); 4]; 4];
    let mut i = 0;
    while i + 32 <= n {
        for k in 0..4 {
            let j = i + 8 * k;
            let wv = ld_float::<F>(x.add(wb * j));
            for t in 0..4 {
                acc[t][k] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(y[t].add(j)), acc[t][k]);
            }
        }
        i += 32;
    }
    while i + 8 <= n {
        let wv = ld_float::<F>(x.add(wb * i));
        for t in 0..4 {
            acc[t][0] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(y[t].add(i)), acc[t][0]);
        }
        i += 8;
    }
    let tail = &w[wb * i..];
    let mut out = [0f32; 4];
    for t in 0..4 {
        let [a0, a1, a2, a3] = acc[t];
        let sum = hsum_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
        let at = &a[t][4 * i..];
        out[t] = sum
            + match F {
                0 => scalar::dot_f32(n - i, tail, at),
                1 => scalar::dot_f16(n - i, tail, at),
                _ => scalar::dot_bf16(n - i, tail, at),
            };
    }
    out
}

// --- 32-element blocks: signed quants × q8_0, unsigned quants (+ min) × q8_1 ---------------

/// A weight block that decodes to 32 signed quants and a scale (partner: q8_0).
pub(super) trait Signed {
    const BYTES: usize;
    /// Every decoded quant lies in -OFF..OFF (as i8: q + OFF wraps into 0..=255).
    const OFF: u8;
    unsafe fn decode(xb: *const u8) -> (f32, __m256i);
}

/// A weight block that decodes to 32 unsigned quants, a scale and a min (partner: q8_1).
pub(super) trait Unsigned {
    const BYTES: usize;
    unsafe fn decode(xb: *const u8) -> (f32, f32, __m256i);
}

pub(super) struct Q4_0;
pub(super) struct Q5_0;
pub(super) struct Q8_0;
pub(super) struct IQ4NL;
pub(super) struct MXFP4;
pub(super) struct Q4_1;
pub(super) struct Q5_1;

/// 16 packed nibbles looked up in a 16-entry i8 codebook.
#[inline(always)]
unsafe fn lut4(table: &[i8; 16], p: *const u8) -> __m256i {
    let t = ld128(table.as_ptr() as *const u8);
    _mm256_shuffle_epi8(_mm256_set_m128i(t, t), nibbles(p))
}

impl Signed for Q4_0 {
    const BYTES: usize = 18;
    const OFF: u8 = 8;
    #[inline(always)]
    unsafe fn decode(xb: *const u8) -> (f32, __m256i) {
        (f16(xb), _mm256_sub_epi8(nibbles(xb.add(2)), _mm256_set1_epi8(8)))
    }
}

impl Signed for Q5_0 {
    const BYTES: usize = 22;
    const OFF: u8 = 16;
    #[inline(always)]
    unsafe fn decode(xb: *const u8) -> (f32, __m256i) {
        // A clear high bit means q - 16: or-ing 0xF0 into the nibble does it in i8.
        let hi = _mm256_andnot_si256(bits32(xb.add(2)), _mm256_set1_epi8(0xF0u8 as i8));
        (f16(xb), _mm256_or_si256(nibbles(xb.add(6)), hi))
    }
}

impl Signed for Q8_0 {
    const BYTES: usize = 34;
    const OFF: u8 = 128;
    #[inline(always)]
    unsafe fn decode(xb: *const u8) -> (f32, __m256i) {
        (f16(xb), ld256(xb.add(2)))
    }
}

impl Signed for IQ4NL {
    const BYTES: usize = 18;
    const OFF: u8 = 128;
    #[inline(always)]
    unsafe fn decode(xb: *const u8) -> (f32, __m256i) {
        (f16(xb), lut4(&KVALUES_IQ4NL, xb.add(2)))
    }
}

/// `e8m0_to_f32_half` of every byte: one load in place of a branch and shifts per block.
static E8M0_HALF: [f32; 256] = {
    let mut t = [0f32; 256];
    let mut e = 0;
    while e < 256 {
        t[e] = e8m0_to_f32_half(e as u8);
        e += 1;
    }
    t
};

impl Signed for MXFP4 {
    const BYTES: usize = 17;
    const OFF: u8 = 16;
    #[inline(always)]
    unsafe fn decode(xb: *const u8) -> (f32, __m256i) {
        (E8M0_HALF[*xb as usize], lut4(&KVALUES_MXFP4, xb.add(1)))
    }
}

impl Unsigned for Q4_1 {
    const BYTES: usize = 20;
    #[inline(always)]
    unsafe fn decode(xb: *const u8) -> (f32, f32, __m256i) {
        let (d, m) = f16x2(xb);
        (d, m, nibbles(xb.add(4)))
    }
}

impl Unsigned for Q5_1 {
    const BYTES: usize = 24;
    #[inline(always)]
    unsafe fn decode(xb: *const u8) -> (f32, f32, __m256i) {
        let hi = _mm256_and_si256(bits32(xb.add(4)), _mm256_set1_epi8(0x10));
        let (d, m) = f16x2(xb);
        (d, m, _mm256_or_si256(nibbles(xb.add(8)), hi))
    }
}

/// One block of a signed dot: acc += dx·dy · Σ qx·qy (`mul_sum_i8_pairs_float`).
#[inline(always)]
pub(super) unsafe fn signed_step<const V: bool, B: Signed>(
    x: *const u8,
    y: *const u8,
    i: usize,
    acc: __m256,
) -> __m256 {
    let yb = y.add(34 * i);
    let (dx, qx) = B::decode(x.add(B::BYTES * i));
    let p = dot_us8::<V>(_mm256_sign_epi8(qx, qx), _mm256_sign_epi8(ld256(yb.add(2)), qx));
    _mm256_fmadd_ps(_mm256_set1_ps(dx * f16(yb)), _mm256_cvtepi32_ps(p), acc)
}

/// ggml_vec_dot_{q5_0,q8_0}_q8_0 and tinyBLAS per cell: one accumulator, 8 lanes kept apart to
/// the end. (llama.cpp repacks q4_0, iq4_nl and mxfp4 on x86; their matmul takes the panel
/// kernels, and this order only serves tests and odd shapes there.)
#[inline(always)]
pub(super) unsafe fn dot_signed<const V: bool, B: Signed>(n: usize, w: &[u8], a: &[u8]) -> f32 {
    let (x, y) = (w.as_ptr(), a.as_ptr());
    let mut acc = _mm256_setzero_ps();
    for b in 0..n / 32 {
        acc = signed_step::<V, B>(x, y, b, acc);
    }
    hsum_ps(acc)
}

/// Where rows `x0`, `x1` are adjacent in their matrix (the matmul's case), the distance to
/// the next pair's rows, else 0 (no prefetch).
#[inline(always)]
fn next_pair(x0: *const u8, x1: *const u8) -> usize {
    (x1 as usize).saturating_sub(x0 as usize)
}

/// Asks for the next pair's bytes at block offset `off` one 64-byte line at a time: the hardware
/// prefetchers stop at 4 KiB pages, and a decode step streams every weight once.
#[inline(always)]
unsafe fn prefetch_ahead(stride: usize, x1: *const u8, off: usize) {
    if stride != 0 && off % 64 < 34 {
        // A hint: an address past the matrix is never dereferenced.
        let p = x1.wrapping_add(stride + off) as *const i8;
        _mm_prefetch::<_MM_HINT_T0>(p);
        _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(stride));
    }
}

/// `dot_signed` of two weight rows at once, each row's operations those of `dot_signed` in
/// the same order (so the same bits): the activation block is loaded and its scale converted
/// once, and the two accumulator chains hide each other's FMA latency.
#[inline(always)]
pub(super) unsafe fn dot_signed_r2<const V: bool, B: Signed>(n: usize, w: [&[u8]; 2], a: &[u8]) -> [f32; 2] {
    let (x0, x1, y) = (w[0].as_ptr(), w[1].as_ptr(), a.as_ptr());
    let (mut acc0, mut acc1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    let ahead = next_pair(x0, x1);
    for i in 0..n / 32 {
        prefetch_ahead(ahead, x1, B::BYTES * i);
        let yb = y.add(34 * i);
        let (qy, dy) = (ld256(yb.add(2)), f16(yb));
        let (d0, q0) = B::decode(x0.add(B::BYTES * i));
        let (d1, q1) = B::decode(x1.add(B::BYTES * i));
        let p0 = dot_us8::<V>(_mm256_sign_epi8(q0, q0), _mm256_sign_epi8(qy, q0));
        let p1 = dot_us8::<V>(_mm256_sign_epi8(q1, q1), _mm256_sign_epi8(qy, q1));
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(d0 * dy), _mm256_cvtepi32_ps(p0), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_set1_ps(d1 * dy), _mm256_cvtepi32_ps(p1), acc1);
    }
    [hsum_ps(acc0), hsum_ps(acc1)]
}

#[inline(always)]
pub(super) unsafe fn dot_signed_x4<const V: bool, B: Signed>(n: usize, w: &[u8], a: [&[u8]; 4]) -> [f32; 4] {
    let (x, y) = (w.as_ptr(), a.map(|r| r.as_ptr()));
    let mut acc = [_mm256_setzero_ps(); 4];
    for i in 0..n / 32 {
        let (dx, qx) = B::decode(x.add(B::BYTES * i));
        let ax = _mm256_sign_epi8(qx, qx);
        for k in 0..4 {
            let yb = y[k].add(34 * i);
            let p = dot_us8::<V>(ax, _mm256_sign_epi8(ld256(yb.add(2)), qx));
            acc[k] = _mm256_fmadd_ps(_mm256_set1_ps(dx * f16(yb)), _mm256_cvtepi32_ps(p), acc[k]);
        }
    }
    [hsum_ps(acc[0]), hsum_ps(acc[1]), hsum_ps(acc[2]), hsum_ps(acc[3])]
}

/// ggml_vec_dot_{q4_1,q5_1}_q8_1: Σ d·dy·qx·qy + Σ m·s.
#[inline(always)]
pub(super) unsafe fn dot_unsigned<const V: bool, B: Unsigned>(n: usize, w: &[u8], a: &[u8]) -> f32 {
    let (x, y) = (w.as_ptr(), a.as_ptr());
    let mut acc = _mm256_setzero_ps();
    let mut summs = 0f32;
    for i in 0..n / 32 {
        let yb = y.add(36 * i);
        let (d, m, qx) = B::decode(x.add(B::BYTES * i));
        let (dy, sy) = f16x2(yb);
        summs += m * sy;
        let p = dot_us8::<V>(qx, ld256(yb.add(4)));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d * dy), _mm256_cvtepi32_ps(p), acc);
    }
    hsum_ps(acc) + summs
}

/// `dot_unsigned` of two weight rows at once, as [`dot_signed_r2`] is of `dot_signed`.
#[inline(always)]
pub(super) unsafe fn dot_unsigned_r2<const V: bool, B: Unsigned>(n: usize, w: [&[u8]; 2], a: &[u8]) -> [f32; 2] {
    let (x0, x1, y) = (w[0].as_ptr(), w[1].as_ptr(), a.as_ptr());
    let (mut acc0, mut acc1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    let (mut summs0, mut summs1) = (0f32, 0f32);
    let ahead = next_pair(x0, x1);
    for i in 0..n / 32 {
        prefetch_ahead(ahead, x1, B::BYTES * i);
        let yb = y.add(36 * i);
        let (dy, sy) = f16x2(yb);
        let qy = ld256(yb.add(4));
        let (d0, m0, q0) = B::decode(x0.add(B::BYTES * i));
        let (d1, m1, q1) = B::decode(x1.add(B::BYTES * i));
        summs0 += m0 * sy;
        summs1 += m1 * sy;
        let p0 = dot_us8::<V>(q0, qy);
        let p1 = dot_us8::<V>(q1, qy);
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(d0 * dy), _mm256_cvtepi32_ps(p0), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_set1_ps(d1 * dy), _mm256_cvtepi32_ps(p1), acc1);
    }
    [hsum_ps(acc0) + summs0, hsum_ps(acc1) + summs1]
}

#[inline(always)]
pub(super) unsafe fn dot_unsigned_x4<const V: bool, B: Unsigned>(n: usize, w: &[u8], a: [&[u8]; 4]) -> [f32; 4] {
    let (x, y) = (w.as_ptr(), a.map(|r| r.as_ptr()));
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut summs = [0f32; 4];
    for i in 0..n / 32 {
        let (d, m, qx) = B::decode(x.add(B::BYTES * i));
        for k in 0..4 {
            let yb = y[k].add(36 * i);
            let (dy, sy) = f16x2(yb);
            summs[k] += m * sy;
            let p = dot_us8::<V>(qx, ld256(yb.add(4)));
            acc[k] = _mm256_fmadd_ps(_mm256_set1_ps(d * dy), _mm256_cvtepi32_ps(p), acc[k]);
        }
    }
    [
        hsum_ps(acc[0]) + summs[0],
        hsum_ps(acc[1]) + summs[1],
        hsum_ps(acc[2]) + summs[2],
        hsum_ps(acc[3]) + summs[3],
    ]
}

// --- activation quantizers (bit-exact with the scalar encoders) --------------------------------

#[inline(always)]
unsafe fn abs_ps(v: __m256) -> __m256 {
    _mm256_andnot_ps(_mm256_set1_ps(-0.0), v)
}

#[inline(always)]
unsafe fn hmax_ps(v: __m256) -> f32 {
    let m = _mm_max_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
    let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)))
}

/// Round to nearest, ties to even (`_mm256_round_ps(x, _MM_ROUND_NEAREST)` in ggml).
#[inline(always)]
unsafe fn rint_ps(v: __m256) -> __m256 {
    _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
}

/// Four vectors of i32 (32 values, in order) → 32 saturated i8 in order.
#[inline(always)]
unsafe fn pack_i8(i: [__m256i; 4]) -> __m256i {
    let a = _mm256_packs_epi32(i[0], i[1]);
    let b = _mm256_packs_epi32(i[2], i[3]);
    _mm256_permutevar8x32_epi32(_mm256_packs_epi16(a, b), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7))
}

#[inline(always)]
unsafe fn f16_bits(v: f32) -> u16 {
    _mm_extract_epi16(_mm_cvtps_ph(_mm_set_ss(v), _MM_FROUND_TO_NEAREST_INT), 0) as u16
}

/// One 32-element block: (d, qs as i32 vectors) with rint(x · 127/amax), as ggml-cpu's AVX2
/// `quantize_row_q8_0`.
#[inline(always)]
unsafe fn q8_block(x: *const f32) -> (f32, [__m256i; 4]) {
    let v = [
        _mm256_loadu_ps(x),
        _mm256_loadu_ps(x.add(8)),
        _mm256_loadu_ps(x.add(16)),
        _mm256_loadu_ps(x.add(24)),
    ];
    let m = _mm256_max_ps(
        _mm256_max_ps(abs_ps(v[0]), abs_ps(v[1])),
        _mm256_max_ps(abs_ps(v[2]), abs_ps(v[3])),
    );
    let amax = hmax_ps(m);
    let d = amax / 127.0;
    let id = _mm256_set1_ps(if amax != 0.0 { 127.0 / amax } else { 0.0 });
    let q = [
        _mm256_cvtps_epi32(rint_ps(_mm256_mul_ps(v[0], id))),
        _mm256_cvtps_epi32(rint_ps(_mm256_mul_ps(v[1], id))),
        _mm256_cvtps_epi32(rint_ps(_mm256_mul_ps(v[2], id))),
        _mm256_cvtps_epi32(rint_ps(_mm256_mul_ps(v[3], id))),
    ];
    (d, q)
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn quantize_q8_0(x: &[f32], out: &mut [u8]) {
    debug_assert!(out.len() >= x.len() / 32 * 34);
    for i in 0..x.len() / 32 {
        let (d, q) = q8_block(x.as_ptr().add(32 * i));
        let yb = out.as_mut_ptr().add(34 * i);
        std::ptr::write_unaligned(yb as *mut u16, f16_bits(d));
        _mm256_storeu_si256(yb.add(2) as *mut __m256i, pack_i8(q));
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn quantize_q8_1(x: &[f32], out: &mut [u8]) {
    debug_assert!(out.len() >= x.len() / 32 * 36);
    for i in 0..x.len() / 32 {
        let (d, q) = q8_block(x.as_ptr().add(32 * i));
        let sum = hsum_i32(_mm256_add_epi32(
            _mm256_add_epi32(q[0], q[1]),
            _mm256_add_epi32(q[2], q[3]),
        ));
        let yb = out.as_mut_ptr().add(36 * i);
        std::ptr::write_unaligned(yb as *mut u16, f16_bits(d));
        std::ptr::write_unaligned(yb.add(2) as *mut u16, f16_bits(sum as f32 * d));
        _mm256_storeu_si256(yb.add(4) as *mut __m256i, pack_i8(q));
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn quantize_q8_k(x: &[f32], out: &mut [u8]) {
    debug_assert!(out.len() >= x.len() / 256 * 292);
    for i in 0..x.len() / 256 {
        let xb = x.as_ptr().add(256 * i);
        let yb = out.as_mut_ptr().add(292 * i);
        let mut m = _mm256_setzero_ps();
        for k in 0..32 {
            m = _mm256_max_ps(m, abs_ps(_mm256_loadu_ps(xb.add(8 * k))));
        }
        let amax = hmax_ps(m);
        if amax == 0.0 {
            std::ptr::write_bytes(yb, 0, 292);
            continue;
        }
        // The reference keeps the sign of the first element of largest magnitude.
        let target = _mm256_set1_ps(amax);
        let mut max = amax;
        for k in 0..32 {
            let hit = _mm256_movemask_ps(_mm256_cmp_ps(
                abs_ps(_mm256_loadu_ps(xb.add(8 * k))),
                target,
                _CMP_EQ_OQ,
            ));
            if hit != 0 {
                max = *xb.add(8 * k + hit.trailing_zeros() as usize);
                break;
            }
        }
        let iscale = -127.0 / max;
        let mul = _mm256_set1_ps(iscale);
        for g in 0..8 {
            // nearest_int is round-half-even, as cvtps under the default MXCSR.
            // (the clamp is the reference's MIN(127, v); packs would saturate the same way)
            let q8 = |o: usize| {
                let v = _mm256_cvtps_epi32(_mm256_mul_ps(mul, _mm256_loadu_ps(xb.add(32 * g + o))));
                _mm256_min_epi32(v, _mm256_set1_epi32(127))
            };
            let q = [q8(0), q8(8), q8(16), q8(24)];
            _mm256_storeu_si256(yb.add(4 + 32 * g) as *mut __m256i, pack_i8(q));
            let h = _mm256_hadd_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
            let h = _mm256_hadd_epi32(h, h);
            let s = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
            let (s0, s1) = (_mm_cvtsi128_si32(s) as i16, _mm_extract_epi32(s, 1) as i16);
            std::ptr::write_unaligned(yb.add(260 + 4 * g) as *mut [u8; 2], s0.to_le_bytes());
            std::ptr::write_unaligned(yb.add(262 + 4 * g) as *mut [u8; 2], s1.to_le_bytes());
        }
        std::ptr::write_unaligned(yb as *mut f32, 1.0 / iscale);
    }
}
