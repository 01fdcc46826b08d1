//! NEON kernels (aarch64), after ggml's ARM paths (ggml/src/ggml-cpu/arch/arm/quants.c).
//!
//! Two tables: with FEAT_DotProd (Apple M1+, Graviton 2+, Cortex-A76+) the integer sums use
//! `sdot` — through `asm!`, as `vdotq_s32` is not stable Rust — and without it `smull` plus
//! pairwise adds. Covered here: f32, f16, bf16, q4_0, q4_1, q8_0, iq4_nl, q4_K, q5_K, q6_K;
//! the other types and the activation quantizers use the scalar kernels.
//!
//! On x86-64 the bodies compile against `model`, a scalar model of the intrinsics they use, so
//! that `cargo test` runs them against the scalar oracle on any machine (the `asm!` helpers
//! and the tables exist on aarch64 only).

#[cfg(target_arch = "aarch64")]
use std::arch::aarch64::*;

#[cfg(not(target_arch = "aarch64"))]
use model::*;

use super::{f16_at, f32_at, scalar::k4_scales_mins};
use crate::quant::KVALUES_IQ4NL;

#[cfg(target_arch = "aarch64")]
pub(super) use tables::{kernels, supported};

#[cfg(target_arch = "aarch64")]
mod tables {
    use super::super::{dot_fn, dot_x4_fn, scalar, table, DotFn, DotX4Fn, Isa, N_TYPES};
    use super::*;
    use crate::quant::QType;

    pub fn supported() -> bool {
        std::arch::is_aarch64_feature_detected!("neon")
    }

    pub fn kernels() -> &'static Isa {
        if std::arch::is_aarch64_feature_detected!("dotprod") {
            &DOTPROD
        } else {
            &BASE
        }
    }

    macro_rules! instantiate {
        ($m:ident, $feat:literal, $d:literal) => {
            mod $m {
                use super::*;
                instantiate!(@one $feat, $d;
                    f32_ = dot_float<0>, f16_ = dot_float<1>, bf16_ = dot_float<2>,
                    q4_0_ = dot_signed<Q4_0>, q8_0_ = dot_signed<Q8_0>, iq4_nl_ = dot_signed<IQ4NL>,
                    q4_1_ = q4_1, q4_k_ = q45_k<false>, q5_k_ = q45_k<true>, q6_k_ = q6_k);
                pub static DOT: &[(QType, DotFn)] = &[
                    dot_fn!(F32, f32_),
                    dot_fn!(F16, f16_),
                    dot_fn!(BF16, bf16_),
                    dot_fn!(Q4_0, q4_0_),
                    dot_fn!(Q4_1, q4_1_),
                    dot_fn!(Q8_0, q8_0_),
                    dot_fn!(IQ4NL, iq4_nl_),
                    dot_fn!(Q4K, q4_k_),
                    dot_fn!(Q5K, q5_k_),
                    dot_fn!(Q6K, q6_k_),
                ];
                #[target_feature(enable = $feat)]
                unsafe fn q4_0x4(n: usize, w: &[u8], a: [&[u8]; 4]) -> [f32; 4] {
                    dot_signed_x4::<$d, Q4_0>(n, w, a)
                }
                #[target_feature(enable = $feat)]
                unsafe fn q8_0x4(n: usize, w: &[u8], a: [&[u8]; 4]) -> [f32; 4] {
                    dot_signed_x4::<$d, Q8_0>(n, w, a)
                }
                pub static DOT_X4: &[(QType, DotX4Fn)] = &[dot_x4_fn!(Q4_0, q4_0x4), dot_x4_fn!(Q8_0, q8_0x4)];
            }
        };
        (@one $feat:literal, $d:literal; $($name:ident = $body:ident $(<$t:tt>)?),* $(,)?) => {
            $(
                #[target_feature(enable = $feat)]
                unsafe fn $name(n: usize, w: &[u8], a: &[u8]) -> f32 {
                    $body::<$d $(, $t)?>(n, w, a)
                }
            )*
        };
    }

    instantiate!(dotprod, "neon,dotprod", true);
    instantiate!(base, "neon", false);

    static DOTPROD: Isa = Isa {
        isa: "neon",
        dot: table(table([None; N_TYPES], &scalar::DOT), dotprod::DOT),
        dot_x4: table([None; N_TYPES], dotprod::DOT_X4),
        x4_single: [None; N_TYPES],
        dot_r2: [None; N_TYPES],
        tiled: [None; N_TYPES],
        q4_k_panel: None,
        row_tile: [None; N_TYPES],
        gemm: [None; N_TYPES],
        q8_0: scalar::quantize_q8_0,
        q8_1: scalar::quantize_q8_1,
        q8_k: scalar::quantize_q8_k,
    };

    static BASE: Isa = Isa {
        isa: "neon",
        dot: table(table([None; N_TYPES], &scalar::DOT), base::DOT),
        dot_x4: table([None; N_TYPES], base::DOT_X4),
        x4_single: [None; N_TYPES],
        dot_r2: [None; N_TYPES],
        tiled: [None; N_TYPES],
        q4_k_panel: None,
        row_tile: [None; N_TYPES],
        gemm: [None; N_TYPES],
        q8_0: scalar::quantize_q8_0,
        q8_1: scalar::quantize_q8_1,
        q8_k: scalar::quantize_q8_k,
    };
}

// --- helpers ----------------------------------------------------------------------------------

#[inline(always)]
unsafe fn ld_s8(p: *const u8) -> int8x16_t {
    vreinterpretq_s8_u8(vld1q_u8(p))
}

#[inline(always)]
unsafe fn ld_s16(p: *const u8) -> int16x8_t {
    vreinterpretq_s16_u8(vld1q_u8(p))
}

#[inline(always)]
unsafe fn ld_f32(p: *const u8) -> float32x4_t {
    vreinterpretq_f32_u8(vld1q_u8(p))
}

/// `sdot`: 4 i32 lanes += Σ of 4 adjacent i8·i8 products.
#[cfg(target_arch = "aarch64")]
#[inline(always)]
unsafe fn sdot(mut acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
    std::arch::asm!(
        "sdot {acc:v}.4s, {a:v}.16b, {b:v}.16b",
        acc = inout(vreg) acc,
        a = in(vreg) a,
        b = in(vreg) b,
        options(pure, nomem, nostack, preserves_flags)
    );
    acc
}

/// 4 f16 at `p` → f32 (`fcvtl`; base ARMv8, no FEAT_FP16 needed).
#[cfg(target_arch = "aarch64")]
#[inline(always)]
unsafe fn ld_f16x4(p: *const u8) -> float32x4_t {
    let h = vld1_u8(p);
    let f: float32x4_t;
    std::arch::asm!(
        "fcvtl {f:v}.4s, {h:v}.4h",
        f = lateout(vreg) f,
        h = in(vreg) h,
        options(pure, nomem, nostack, preserves_flags)
    );
    f
}

/// Σ of i8·i8 products into 4 i32 lanes: `sdot` with `D`, else `smull` + pairwise adds (the
/// lanes group the products differently; callers only sum lanes under one scale).
#[inline(always)]
unsafe fn dot_s8<const D: bool>(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
    if D {
        sdot(acc, a, b)
    } else {
        let lo = vmull_s8(vget_low_s8(a), vget_low_s8(b));
        let hi = vmull_high_s8(a, b);
        vaddq_s32(acc, vpaddq_s32(vpaddlq_s16(lo), vpaddlq_s16(hi)))
    }
}

/// Σ over 32 elements: (lo · y[0..16]) + (hi · y[16..32]).
#[inline(always)]
unsafe fn dot32<const D: bool>(lo: int8x16_t, hi: int8x16_t, y: *const u8) -> int32x4_t {
    dot_s8::<D>(dot_s8::<D>(vdupq_n_s32(0), lo, ld_s8(y)), hi, ld_s8(y.add(16)))
}

// --- float weights × f32 activations ----------------------------------------------------------

/// 4 weights at `p` as f32: `F` = 0 f32, 1 f16, 2 bf16.
#[inline(always)]
unsafe fn ld_w<const F: u8>(p: *const u8) -> float32x4_t {
    match F {
        0 => ld_f32(p),
        1 => ld_f16x4(p),
        _ => vreinterpretq_f32_u32(vshll_n_u16::<16>(vreinterpret_u16_u8(vld1_u8(p)))),
    }
}

#[inline(always)]
unsafe fn dot_float<const D: bool, const F: u8>(n: usize, w: &[u8], a: &[u8]) -> f32 {
    let wb = if F == 0 { 4 } else { 2 };
    let (x, y) = (w.as_ptr(), a.as_ptr());
    let mut acc = [vdupq_n_f32(0.0); 4];
    let mut i = 0;
    while i + 16 <= n {
        for (k, acc) in acc.iter_mut().enumerate() {
            let j = i + 4 * k;
            *acc = vfmaq_f32(*acc, ld_w::<F>(x.add(wb * j)), ld_f32(y.add(4 * j)));
        }
        i += 16;
    }
    let sum = vaddvq_f32(vaddq_f32(vaddq_f32(acc[0], acc[1]), vaddq_f32(acc[2], acc[3])));
    let (w, a) = (&w[wb * i..], &a[4 * i..]);
    sum + match F {
        0 => super::scalar::dot_f32(n - i, w, a),
        1 => super::scalar::dot_f16(n - i, w, a),
        _ => super::scalar::dot_bf16(n - i, w, a),
    }
}

// --- 32-element blocks × q8_0 {d: f16, qs[32]} ------------------------------------------------

/// A weight block decoded to 32 signed quants (two halves) and its scale.
trait Signed {
    const BYTES: usize;
    unsafe fn decode(w: &[u8], off: usize) -> (f32, int8x16_t, int8x16_t);
}

struct Q4_0;
struct Q8_0;
struct IQ4NL;

impl Signed for Q4_0 {
    const BYTES: usize = 18;
    #[inline(always)]
    unsafe fn decode(w: &[u8], off: usize) -> (f32, int8x16_t, int8x16_t) {
        let q = vld1q_u8(w.as_ptr().add(off + 2));
        let s8 = vdupq_n_s8(8);
        let lo = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(q, vdupq_n_u8(0xF))), s8);
        let hi = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8::<4>(q)), s8);
        (f16_at(w, off), lo, hi)
    }
}

impl Signed for Q8_0 {
    const BYTES: usize = 34;
    #[inline(always)]
    unsafe fn decode(w: &[u8], off: usize) -> (f32, int8x16_t, int8x16_t) {
        let p = w.as_ptr().add(off + 2);
        (f16_at(w, off), ld_s8(p), ld_s8(p.add(16)))
    }
}

impl Signed for IQ4NL {
    const BYTES: usize = 18;
    #[inline(always)]
    unsafe fn decode(w: &[u8], off: usize) -> (f32, int8x16_t, int8x16_t) {
        let table = ld_s8(KVALUES_IQ4NL.as_ptr() as *const u8);
        let q = vld1q_u8(w.as_ptr().add(off + 2));
        let lo = vqtbl1q_s8(table, vandq_u8(q, vdupq_n_u8(0xF)));
        let hi = vqtbl1q_s8(table, vshrq_n_u8::<4>(q));
        (f16_at(w, off), lo, hi)
    }
}

/// ggml_vec_dot_{q4_0,q8_0,iq4_nl}_q8_0.
#[inline(always)]
unsafe fn dot_signed<const D: bool, B: Signed>(n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut acc = [vdupq_n_f32(0.0); 2];
    for i in 0..n / 32 {
        let (dx, lo, hi) = B::decode(w, B::BYTES * i);
        let p = dot32::<D>(lo, hi, a.as_ptr().add(34 * i + 2));
        let acc = &mut acc[i % 2];
        *acc = vfmaq_f32(*acc, vcvtq_f32_s32(p), vdupq_n_f32(dx * f16_at(a, 34 * i)));
    }
    vaddvq_f32(vaddq_f32(acc[0], acc[1]))
}

#[inline(always)]
unsafe fn dot_signed_x4<const D: bool, B: Signed>(n: usize, w: &[u8], a: [&[u8]; 4]) -> [f32; 4] {
    let mut acc = [vdupq_n_f32(0.0); 4];
    for i in 0..n / 32 {
        let (dx, lo, hi) = B::decode(w, B::BYTES * i);
        for (acc, a) in acc.iter_mut().zip(a) {
            let p = dot32::<D>(lo, hi, a.as_ptr().add(34 * i + 2));
            *acc = vfmaq_f32(*acc, vcvtq_f32_s32(p), vdupq_n_f32(dx * f16_at(a, 34 * i)));
        }
    }
    [
        vaddvq_f32(acc[0]),
        vaddvq_f32(acc[1]),
        vaddvq_f32(acc[2]),
        vaddvq_f32(acc[3]),
    ]
}

/// ggml_vec_dot_q4_1_q8_1: block_q4_1 {d, m: f16, qs[16]} · block_q8_1 {d, s: f16, qs[32]}.
#[inline(always)]
unsafe fn q4_1<const D: bool>(n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut acc = vdupq_n_f32(0.0);
    let mut summs = 0f32;
    for i in 0..n / 32 {
        let (xo, yo) = (20 * i, 36 * i);
        let q = vld1q_u8(w.as_ptr().add(xo + 4));
        let lo = vreinterpretq_s8_u8(vandq_u8(q, vdupq_n_u8(0xF)));
        let hi = vreinterpretq_s8_u8(vshrq_n_u8::<4>(q));
        let p = dot32::<D>(lo, hi, a.as_ptr().add(yo + 4));
        summs += f16_at(w, xo + 2) * f16_at(a, yo + 2);
        acc = vfmaq_f32(acc, vcvtq_f32_s32(p), vdupq_n_f32(f16_at(w, xo) * f16_at(a, yo)));
    }
    vaddvq_f32(acc) + summs
}

// --- k-quants × q8_K {d: f32 @0, qs[256] @4, bsums: i16[16] @260} -----------------------------

/// 16 where bit `b` of each byte of `h` is set, else 0.
#[inline(always)]
unsafe fn hbit16(h: uint8x16_t, b: usize) -> uint8x16_t {
    vandq_u8(vtstq_u8(h, vdupq_n_u8(1 << b)), vdupq_n_u8(16))
}

/// ggml_vec_dot_q{4,5}_K_q8_K. block_q4_K {d @0, dmin @2, scales[12] @4, qs[128] @16};
/// block_q5_K {d, dmin, scales[12], qh[32] @16, qs[128] @48}.
#[inline(always)]
unsafe fn q45_k<const D: bool, const FIVE: bool>(n: usize, w: &[u8], a: &[u8]) -> f32 {
    let (bb, qs) = if FIVE { (176, 48) } else { (144, 16) };
    let m4 = vdupq_n_u8(0xF);
    let mut sumf = 0f32;
    for i in 0..n / 256 {
        let (xo, yo) = (bb * i, 292 * i);
        let (xb, yb) = (w.as_ptr().add(xo), a.as_ptr().add(yo));
        let dy = f32_at(a, yo);
        let (d, dmin) = (dy * f16_at(w, xo), dy * f16_at(w, xo + 2));
        let (scales, mins) = k4_scales_mins(&w[xo + 4..xo + 16]);
        let q8sums = vpaddq_s16(ld_s16(yb.add(260)), ld_s16(yb.add(276)));
        let mins16 = vreinterpretq_s16_u16(vmovl_u8(vld1_u8(mins.as_ptr())));
        let prod = vaddq_s32(
            vmull_s16(vget_low_s16(q8sums), vget_low_s16(mins16)),
            vmull_high_s16(q8sums, mins16),
        );
        sumf -= dmin * vaddvq_s32(prod) as f32;
        let hb = if FIVE {
            [vld1q_u8(xb.add(16)), vld1q_u8(xb.add(32))]
        } else {
            [vdupq_n_u8(0); 2]
        };
        let mut sumi = 0i32;
        for j in 0..4 {
            let (q0, q1) = (vld1q_u8(xb.add(qs + 32 * j)), vld1q_u8(xb.add(qs + 32 * j + 16)));
            let (mut l0, mut l1) = (vandq_u8(q0, m4), vandq_u8(q1, m4));
            let (mut h0, mut h1) = (vshrq_n_u8::<4>(q0), vshrq_n_u8::<4>(q1));
            if FIVE {
                l0 = vorrq_u8(l0, hbit16(hb[0], 2 * j));
                l1 = vorrq_u8(l1, hbit16(hb[1], 2 * j));
                h0 = vorrq_u8(h0, hbit16(hb[0], 2 * j + 1));
                h1 = vorrq_u8(h1, hbit16(hb[1], 2 * j + 1));
            }
            let q8 = yb.add(4 + 64 * j);
            let pl = dot32::<D>(vreinterpretq_s8_u8(l0), vreinterpretq_s8_u8(l1), q8);
            let ph = dot32::<D>(vreinterpretq_s8_u8(h0), vreinterpretq_s8_u8(h1), q8.add(32));
            sumi += vaddvq_s32(pl) * scales[2 * j] as i32 + vaddvq_s32(ph) * scales[2 * j + 1] as i32;
        }
        sumf += d * sumi as f32;
    }
    sumf
}

/// ggml_vec_dot_q6_K_q8_K; the -32 offset comes out through the bsums.
/// block_q6_K {ql[128] @0, qh[64] @128, scales: i8[16] @192, d @208}.
#[inline(always)]
unsafe fn q6_k<const D: bool>(n: usize, w: &[u8], a: &[u8]) -> f32 {
    let (m4, m3) = (vdupq_n_u8(0xF), vdupq_n_u8(3));
    let mut sum = 0f32;
    for i in 0..n / 256 {
        let (xo, yo) = (210 * i, 292 * i);
        let (xb, yb) = (w.as_ptr().add(xo), a.as_ptr().add(yo));
        let sc = &w[xo + 192..xo + 208];
        let sc16 = {
            let s = ld_s8(sc.as_ptr());
            [vmovl_s8(vget_low_s8(s)), vmovl_high_s8(s)]
        };
        let (bs0, bs1) = (ld_s16(yb.add(260)), ld_s16(yb.add(276)));
        let mins = vaddq_s32(
            vaddq_s32(
                vmull_s16(vget_low_s16(bs0), vget_low_s16(sc16[0])),
                vmull_high_s16(bs0, sc16[0]),
            ),
            vaddq_s32(
                vmull_s16(vget_low_s16(bs1), vget_low_s16(sc16[1])),
                vmull_high_s16(bs1, sc16[1]),
            ),
        );
        let mut isum = 0i32;
        for j in 0..2 {
            let (qh0, qh1) = (vld1q_u8(xb.add(128 + 32 * j)), vld1q_u8(xb.add(144 + 32 * j)));
            let ql = [0, 16, 32, 48].map(|o| vld1q_u8(xb.add(64 * j + o)));
            let q8 = yb.add(4 + 128 * j);
            let hs = [
                qh0,
                qh1,
                vshrq_n_u8::<2>(qh0),
                vshrq_n_u8::<2>(qh1),
                vshrq_n_u8::<4>(qh0),
                vshrq_n_u8::<4>(qh1),
                vshrq_n_u8::<6>(qh0),
                vshrq_n_u8::<6>(qh1),
            ];
            for g in 0..8 {
                let low = if g < 4 {
                    vandq_u8(ql[g], m4)
                } else {
                    vshrq_n_u8::<4>(ql[g - 4])
                };
                let q = vorrq_u8(low, vshlq_n_u8::<4>(vandq_u8(hs[g], m3)));
                let p = dot_s8::<D>(vdupq_n_s32(0), vreinterpretq_s8_u8(q), ld_s8(q8.add(16 * g)));
                isum += vaddvq_s32(p) * sc[8 * j + g] as i8 as i32;
            }
        }
        sum += f16_at(w, xo + 208) * f32_at(a, yo) * (isum - 32 * vaddvq_s32(mins)) as f32;
    }
    sum
}

/// A scalar model of the NEON intrinsics above (same names and signatures) so the bodies
/// build and run in `cargo test` off aarch64. Only what the kernels use; lane semantics as
/// in Arm's documentation.
#[cfg(not(target_arch = "aarch64"))]
#[allow(non_camel_case_types, clippy::needless_range_loop)]
mod model {
    macro_rules! vty {
        ($($name:ident: [$t:ty; $n:literal]),*) => {
            $(#[derive(Clone, Copy, Debug)] pub struct $name(pub [$t; $n]);)*
        };
    }
    vty!(uint8x16_t: [u8; 16], int8x16_t: [i8; 16], uint8x8_t: [u8; 8], int8x8_t: [i8; 8],
         int16x8_t: [i16; 8], int16x4_t: [i16; 4], uint16x8_t: [u16; 8], uint16x4_t: [u16; 4],
         int32x4_t: [i32; 4], uint32x4_t: [u32; 4], float32x4_t: [f32; 4]);

    fn map<A: Copy, B: Copy + Default, const N: usize>(a: [A; N], f: impl Fn(A) -> B) -> [B; N] {
        let mut r = [B::default(); N];
        for i in 0..N {
            r[i] = f(a[i]);
        }
        r
    }
    fn zip<A: Copy, B: Copy, C: Copy + Default, const N: usize>(a: [A; N], b: [B; N], f: impl Fn(A, B) -> C) -> [C; N] {
        let mut r = [C::default(); N];
        for i in 0..N {
            r[i] = f(a[i], b[i]);
        }
        r
    }
    fn bytes<const N: usize>(p: *const u8) -> [u8; N] {
        // SAFETY: the kernels' callers bound every read (see `dot_fn!`).
        unsafe { std::ptr::read_unaligned(p as *const [u8; N]) }
    }

    pub unsafe fn vld1q_u8(p: *const u8) -> uint8x16_t {
        uint8x16_t(bytes(p))
    }
    pub unsafe fn vld1_u8(p: *const u8) -> uint8x8_t {
        uint8x8_t(bytes(p))
    }
    pub fn vreinterpretq_s8_u8(a: uint8x16_t) -> int8x16_t {
        int8x16_t(map(a.0, |x| x as i8))
    }
    pub fn vreinterpretq_s16_u8(a: uint8x16_t) -> int16x8_t {
        let mut r = [0i16; 8];
        for i in 0..8 {
            r[i] = i16::from_le_bytes([a.0[2 * i], a.0[2 * i + 1]]);
        }
        int16x8_t(r)
    }
    pub fn vreinterpretq_f32_u8(a: uint8x16_t) -> float32x4_t {
        let mut r = [0f32; 4];
        for i in 0..4 {
            r[i] = f32::from_le_bytes([a.0[4 * i], a.0[4 * i + 1], a.0[4 * i + 2], a.0[4 * i + 3]]);
        }
        float32x4_t(r)
    }
    pub fn vreinterpret_u16_u8(a: uint8x8_t) -> uint16x4_t {
        let mut r = [0u16; 4];
        for i in 0..4 {
            r[i] = u16::from_le_bytes([a.0[2 * i], a.0[2 * i + 1]]);
        }
        uint16x4_t(r)
    }
    pub fn vreinterpretq_f32_u32(a: uint32x4_t) -> float32x4_t {
        float32x4_t(map(a.0, f32::from_bits))
    }
    pub fn vreinterpretq_s16_u16(a: uint16x8_t) -> int16x8_t {
        int16x8_t(map(a.0, |x| x as i16))
    }
    pub fn vshll_n_u16<const N: i32>(a: uint16x4_t) -> uint32x4_t {
        uint32x4_t(map(a.0, |x| (x as u32) << N))
    }
    pub fn vdupq_n_u8(x: u8) -> uint8x16_t {
        uint8x16_t([x; 16])
    }
    pub fn vdupq_n_s8(x: i8) -> int8x16_t {
        int8x16_t([x; 16])
    }
    pub fn vdupq_n_s32(x: i32) -> int32x4_t {
        int32x4_t([x; 4])
    }
    pub fn vdupq_n_f32(x: f32) -> float32x4_t {
        float32x4_t([x; 4])
    }
    pub fn vandq_u8(a: uint8x16_t, b: uint8x16_t) -> uint8x16_t {
        uint8x16_t(zip(a.0, b.0, |x, y| x & y))
    }
    pub fn vorrq_u8(a: uint8x16_t, b: uint8x16_t) -> uint8x16_t {
        uint8x16_t(zip(a.0, b.0, |x, y| x | y))
    }
    pub fn vtstq_u8(a: uint8x16_t, b: uint8x16_t) -> uint8x16_t {
        uint8x16_t(zip(a.0, b.0, |x, y| if x & y != 0 { 0xFF } else { 0 }))
    }
    pub fn vshrq_n_u8<const N: i32>(a: uint8x16_t) -> uint8x16_t {
        uint8x16_t(map(a.0, |x| x >> N))
    }
    pub fn vshlq_n_u8<const N: i32>(a: uint8x16_t) -> uint8x16_t {
        uint8x16_t(map(a.0, |x| x << N))
    }
    pub fn vsubq_s8(a: int8x16_t, b: int8x16_t) -> int8x16_t {
        int8x16_t(zip(a.0, b.0, i8::wrapping_sub))
    }
    pub fn vqtbl1q_s8(t: int8x16_t, idx: uint8x16_t) -> int8x16_t {
        int8x16_t(map(idx.0, |i| if i < 16 { t.0[i as usize] } else { 0 }))
    }
    pub fn vget_low_s8(a: int8x16_t) -> int8x8_t {
        int8x8_t(a.0[..8].try_into().unwrap())
    }
    pub fn vget_low_s16(a: int16x8_t) -> int16x4_t {
        int16x4_t(a.0[..4].try_into().unwrap())
    }
    pub fn vmull_s8(a: int8x8_t, b: int8x8_t) -> int16x8_t {
        int16x8_t(zip(a.0, b.0, |x, y| x as i16 * y as i16))
    }
    pub fn vmull_high_s8(a: int8x16_t, b: int8x16_t) -> int16x8_t {
        let hi = |v: int8x16_t| int8x8_t(v.0[8..].try_into().unwrap());
        vmull_s8(hi(a), hi(b))
    }
    pub fn vmull_s16(a: int16x4_t, b: int16x4_t) -> int32x4_t {
        int32x4_t(zip(a.0, b.0, |x, y| x as i32 * y as i32))
    }
    pub fn vmull_high_s16(a: int16x8_t, b: int16x8_t) -> int32x4_t {
        let hi = |v: int16x8_t| int16x4_t(v.0[4..].try_into().unwrap());
        vmull_s16(hi(a), hi(b))
    }
    pub fn vmovl_u8(a: uint8x8_t) -> uint16x8_t {
        uint16x8_t(map(a.0, |x| x as u16))
    }
    pub fn vmovl_s8(a: int8x8_t) -> int16x8_t {
        int16x8_t(map(a.0, |x| x as i16))
    }
    pub fn vmovl_high_s8(a: int8x16_t) -> int16x8_t {
        vmovl_s8(int8x8_t(a.0[8..].try_into().unwrap()))
    }
    pub fn vpaddlq_s16(a: int16x8_t) -> int32x4_t {
        let mut r = [0i32; 4];
        for i in 0..4 {
            r[i] = a.0[2 * i] as i32 + a.0[2 * i + 1] as i32;
        }
        int32x4_t(r)
    }
    pub fn vpaddq_s16(a: int16x8_t, b: int16x8_t) -> int16x8_t {
        let mut r = [0i16; 8];
        for i in 0..4 {
            r[i] = a.0[2 * i].wrapping_add(a.0[2 * i + 1]);
            r[i + 4] = b.0[2 * i].wrapping_add(b.0[2 * i + 1]);
        }
        int16x8_t(r)
    }
    pub fn vpaddq_s32(a: int32x4_t, b: int32x4_t) -> int32x4_t {
        int32x4_t([a.0[0] + a.0[1], a.0[2] + a.0[3], b.0[0] + b.0[1], b.0[2] + b.0[3]])
    }
    pub fn vaddq_s32(a: int32x4_t, b: int32x4_t) -> int32x4_t {
        int32x4_t(zip(a.0, b.0, |x, y| x + y))
    }
    pub fn vaddq_f32(a: float32x4_t, b: float32x4_t) -> float32x4_t {
        float32x4_t(zip(a.0, b.0, |x, y| x + y))
    }
    pub fn vfmaq_f32(a: float32x4_t, b: float32x4_t, c: float32x4_t) -> float32x4_t {
        float32x4_t([0, 1, 2, 3].map(|i| b.0[i].mul_add(c.0[i], a.0[i])))
    }
    pub fn vcvtq_f32_s32(a: int32x4_t) -> float32x4_t {
        float32x4_t(map(a.0, |x| x as f32))
    }
    pub fn vaddvq_s32(a: int32x4_t) -> i32 {
        a.0.iter().sum()
    }
    pub fn vaddvq_f32(a: float32x4_t) -> f32 {
        (a.0[0] + a.0[1]) + (a.0[2] + a.0[3])
    }

    /// `sdot`.
    pub fn sdot(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
        let mut r = acc.0;
        for i in 0..16 {
            r[i / 4] += a.0[i] as i32 * b.0[i] as i32;
        }
        int32x4_t(r)
    }
    /// `fcvtl` of 4 f16 at `p`.
    pub unsafe fn ld_f16x4(p: *const u8) -> float32x4_t {
        float32x4_t(map(vreinterpret_u16_u8(vld1_u8(p)).0, |h| {
            half::f16::from_bits(h).to_f32()
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::super::{act_type, quantize_act, Isa};
    use super::*;
    use crate::quant::QType;

    type Body = unsafe fn(usize, &[u8], &[u8]) -> f32;

    /// The NEON bodies, both variants, against the scalar oracle (through the model of the
    /// intrinsics off aarch64).
    #[test]
    fn bodies_match_the_scalar_oracle() {
        let bodies: [(QType, Body, Body); 10] = [
            (QType::F32, dot_float::<true, 0>, dot_float::<false, 0>),
            (QType::F16, dot_float::<true, 1>, dot_float::<false, 1>),
            (QType::BF16, dot_float::<true, 2>, dot_float::<false, 2>),
            (QType::Q4_0, dot_signed::<true, Q4_0>, dot_signed::<false, Q4_0>),
            (QType::Q8_0, dot_signed::<true, Q8_0>, dot_signed::<false, Q8_0>),
            (QType::IQ4NL, dot_signed::<true, IQ4NL>, dot_signed::<false, IQ4NL>),
            (QType::Q4_1, q4_1::<true>, q4_1::<false>),
            (QType::Q4K, q45_k::<true, false>, q45_k::<false, false>),
            (QType::Q5K, q45_k::<true, true>, q45_k::<false, true>),
            (QType::Q6K, q6_k::<true>, q6_k::<false>),
        ];
        let scalar = Isa::for_isa("scalar").unwrap();
        let mut seed = 0x2545F4914F6CDD1Du64;
        let mut row = |n: usize, s: f32| -> Vec<f32> {
            (0..n)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    ((seed >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * s
                })
                .collect()
        };
        for (w, dot, base) in bodies {
            let aq = act_type(w);
            for n in [256, 512, 1536, 2048] {
                let wb = w.quantize_to_vec(&row(n, 0.1)).unwrap();
                let mut ab = vec![0u8; n / aq.block_elems() * aq.block_bytes()];
                quantize_act(aq, &row(n, 2.0), &mut ab);
                let (wf, af) = (w.dequantize_to_vec(&wb).unwrap(), aq.dequantize_to_vec(&ab).unwrap());
                let sabs: f64 = wf.iter().zip(&af).map(|(&x, &y)| (x as f64 * y as f64).abs()).sum();
                let want = scalar.dot(w)(n, &wb, &ab);
                for (name, f) in [("sdot", dot), ("base", base)] {
                    // SAFETY: the rows have exactly n elements.
                    let got = unsafe { f(n, &wb, &ab) };
                    assert!(
                        (got - want).abs() as f64 <= 1e-5 * sabs + 1e-30,
                        "{w} {name} n={n}: {got} vs {want}"
                    );
                }
                if matches!(w, QType::Q4_0 | QType::Q8_0) {
                    let a4 = [&ab[..], &ab, &ab, &ab];
                    // SAFETY: as above.
                    let got = unsafe {
                        if w == QType::Q4_0 {
                            dot_signed_x4::<true, Q4_0>(n, &wb, a4)
                        } else {
                            dot_signed_x4::<false, Q8_0>(n, &wb, a4)
                        }
                    };
                    assert!(
                        got.iter().all(|g| (g - want).abs() as f64 <= 1e-5 * sabs + 1e-30),
                        "{w} x4"
                    );
                }
            }
        }
    }
}
