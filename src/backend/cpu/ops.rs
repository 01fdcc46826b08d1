//! The CPU's element-wise, normalisation and RoPE ops. These are also the numerical reference
//! for the GPU kernels; each follows the ggml-cpu function named beside it.

use std::sync::OnceLock;

use half::f16;

use super::ggml_order;
use crate::model::{Rope, RopeMode};

/// `ggml_compute_forward_rms_norm_f32` (squares in f32, summed in f64) followed by `ggml_mul`.
pub fn rms_norm(x: &[f32], w: &[f32], eps: f32, y: &mut [f32]) {
    let sum: f64 = x.iter().map(|&v| (v * v) as f64).sum();
    let mean = (sum / x.len() as f64) as f32;
    let scale = 1.0 / (mean + eps).sqrt();
    for ((y, &x), &w) in y.iter_mut().zip(x).zip(w) {
        *y = (x * scale) * w;
    }
}

/// LayerNorm of one row as `ggml_compute_forward_norm_f32` then `ggml_mul` and `ggml_add`:
/// the mean and the variance summed in f64, then (x - mean) / sqrt(var + eps) · w + b.
pub fn layer_norm(x: &[f32], w: &[f32], b: &[f32], eps: f32, y: &mut [f32]) {
    let n = x.len().max(1) as f64;
    let mean = (x.iter().map(|&v| v as f64).sum::<f64>() / n) as f32;
    let var = (x.iter().map(|&v| ((v - mean) * (v - mean)) as f64).sum::<f64>() / n) as f32;
    let scale = 1.0 / (var + eps).sqrt();
    for (((y, &x), &w), &b) in y.iter_mut().zip(x).zip(w).zip(b) {
        *y = (x - mean) * scale * w + b;
    }
}

/// The exact GELU, x · Φ(x) = x · (1 + erf(x / √2)) / 2 (BERT's `gelu`), erf by Abramowitz
/// and Stegun 7.1.26 (absolute error below 1.5e-7) in f32: the GPU kernels' formula, so the
/// backends agree to the rounding of their arithmetic. Its e^(-z²) is [`exp_neg`], which
/// vectorizes: libm's `expf` per element took 9 % of all-MiniLM-L6-v2's forward.
pub fn gelu(x: &[f32], y: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if avx2_fma() {
        // SAFETY: the CPU has the features the function is compiled for.
        return unsafe { gelu_fma(x, y) };
    }
    gelu_body::<false>(x, y)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn gelu_fma(x: &[f32], y: &mut [f32]) {
    gelu_body::<true>(x, y)
}

/// [`gelu`]; `FMA`: the caller enables fused multiply-adds.
#[inline(always)]
fn gelu_body<const FMA: bool>(x: &[f32], y: &mut [f32]) {
    for (y, &x) in y.iter_mut().zip(x) {
        let z = x.abs() * std::f32::consts::FRAC_1_SQRT_2;
        let t = 1.0 / (1.0 + 0.327_591_1 * z);
        let poly = t * (0.254_829_6 + t * (-0.284_496_74 + t * (1.421_413_8 + t * (-1.453_152 + t * 1.061_405_4))));
        let e = 1.0 - poly * exp_neg::<FMA>(z * z);
        *y = 0.5 * x * (1.0 + if x < 0.0 { -e } else { e });
    }
}

/// e^(-w) for w ≥ 0 without branches (so loops of it vectorize): the polynomial of
/// `ggml_v_expf` ([`super::ggml_order::expf`]), 2^n put straight into the exponent bits. w is
/// first capped at 87, where e^(-w) ≈ 1.6e-38 is still a normal f32 and no smaller than any
/// caller can tell from 0. `FMA`: fused multiply-adds (the caller enables them).
#[inline(always)]
pub fn exp_neg<const FMA: bool>(w: f32) -> f32 {
    let fma = fma_if::<FMA>;
    let x = -w.min(87.0);
    let r = f32::from_bits(0x4b40_0000); // 0x1.8p23: adding it rounds to an integer
    let z = fma(x, f32::from_bits(0x3fb8_aa3b), r); // 1/ln 2
    let n = z - r;
    let b = fma(-n, f32::from_bits(0x35bf_be8e), fma(-n, f32::from_bits(0x3f31_7200), x));
    let u = b * b;
    let c = f32::from_bits;
    let j = fma(
        fma(
            fma(c(0x3c07_2010), b, c(0x3d2b_9f17)),
            u,
            fma(c(0x3e2a_af33), b, c(0x3eff_fedb)),
        ),
        u,
        fma(c(0x3f7f_fff6), b, 1.0),
    );
    // z's low bits hold n (its exponent is that of 0x1.8p23), -126 ≤ n ≤ 0 here.
    let pow2 = f32::from_bits(z.to_bits().wrapping_sub(0x4b40_0000 - 127) << 23);
    j * pow2
}

/// a · b + c, fused when `FMA` (no closure: it would not inherit the caller's features).
#[inline(always)]
fn fma_if<const FMA: bool>(a: f32, b: f32, c: f32) -> f32 {
    if FMA {
        a.mul_add(b, c)
    } else {
        a * b + c
    }
}

/// `ggml_compute_forward_rms_norm_f32` alone (no `ggml_mul`) over consecutive `head_dim`
/// slices, in place: Gemma 4's V.
pub fn head_norm_plain(x: &mut [f32], eps: f32, head_dim: usize) {
    for h in x.chunks_exact_mut(head_dim.max(1)) {
        let sum: f64 = h.iter().map(|&v| (v * v) as f64).sum();
        let mean = (sum / h.len() as f64) as f32;
        let scale = 1.0 / (mean + eps).sqrt();
        h.iter_mut().for_each(|v| *v *= scale);
    }
}

/// Per-head RMSNorm over consecutive `head_dim` slices, in place.
pub fn head_norm(x: &mut [f32], w: &[f32], eps: f32, head_dim: usize) {
    let mut tmp = vec![0f32; head_dim];
    for h in x.chunks_exact_mut(head_dim) {
        tmp.copy_from_slice(h);
        rms_norm(&tmp, w, eps, h);
    }
}

/// `ggml_vec_swiglu_f32`: silu(g) * u, silu(x) = x / (1 + e^-x).
///
/// As ggml's AVX-512 build: `ggml_v_silu` (its polynomial exp) on whole 16s, `expf` on the tail.
/// `width` is the row length: the 16s and the tail are counted per row (the slices hold whole
/// rows).
pub fn swiglu(gate: &[f32], up: &[f32], y: &mut [f32], width: usize) {
    #[cfg(target_arch = "x86_64")]
    if avx2_fma() {
        // SAFETY: the CPU has the features the function is compiled for.
        return unsafe { swiglu_fma(gate, up, y, width) };
    }
    swiglu_body(gate, up, y, width)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn swiglu_fma(gate: &[f32], up: &[f32], y: &mut [f32], width: usize) {
    use std::arch::x86_64::*;
    // Each row's whole 16s through `expf` 8 lanes at a time (the same bits), the rest as
    // `swiglu_body` does.
    let whole = width / 16 * 16;
    if whole == 0 {
        return swiglu_body(gate, up, y, width);
    }
    let one = _mm256_set1_ps(1.0);
    for ((yr, gr), ur) in y.chunks_mut(width).zip(gate.chunks(width)).zip(up.chunks(width)) {
        let n = whole.min(yr.len()).min(gr.len()).min(ur.len()) / 8 * 8;
        for i in (0..n).step_by(8) {
            let g = _mm256_loadu_ps(gr.as_ptr().add(i));
            let e = ggml_order::x86::expf8(_mm256_sub_ps(_mm256_setzero_ps(), g));
            let v = _mm256_mul_ps(
                _mm256_div_ps(g, _mm256_add_ps(one, e)),
                _mm256_loadu_ps(ur.as_ptr().add(i)),
            );
            _mm256_storeu_ps(yr.as_mut_ptr().add(i), v);
        }
        for ((y, &g), &u) in yr[n..].iter_mut().zip(&gr[n..]).zip(&ur[n..]) {
            *y = g / (1.0 + (-g).exp()) * u;
        }
    }
}

#[inline(always)]
fn swiglu_body(gate: &[f32], up: &[f32], y: &mut [f32], width: usize) {
    let whole = width / 16 * 16;
    for (i, ((y, &g), &u)) in y.iter_mut().zip(gate).zip(up).enumerate() {
        let e = if i % width.max(1) < whole {
            ggml_order::expf(0.0 - g)
        } else {
            (-g).exp()
        };
        *y = g / (1.0 + e) * u;
    }
}

const GELU_COEF_A: f32 = 0.044715;
const SQRT_2_OVER_PI: f32 = 0.797_884_6;

/// `ggml_gelu_f32`, the tanh approximation.
pub fn gelu_tanh(x: f32) -> f32 {
    // GCC contracts `1 + a*x*x` into a fused multiply-add.
    0.5 * x * (1.0 + (SQRT_2_OVER_PI * x * (GELU_COEF_A * x).mul_add(x, 1.0)).tanh())
}

/// ggml-cpu evaluates GELU through a table indexed by the f16 bits of x (`GGML_GELU_FP16`),
/// holding f16-rounded results; we keep the same table so logits agree with llama.cpp.
fn gelu_table() -> &'static [f32] {
    static T: OnceLock<Vec<f32>> = OnceLock::new();
    T.get_or_init(|| {
        (0..=u16::MAX)
            .map(|b| f16::from_f32(gelu_tanh(f16::from_bits(b).to_f32())).to_f32())
            .collect()
    })
}

/// `ggml_vec_geglu_f32`: gelu(g) * u.
pub fn geglu(gate: &[f32], up: &[f32], y: &mut [f32]) {
    let t = gelu_table();
    for ((y, &g), &u) in y.iter_mut().zip(gate).zip(up) {
        *y = if g <= -10.0 {
            0.0
        } else if g >= 10.0 {
            g * u
        } else {
            t[f16::from_f32(g).to_bits() as usize] * u
        };
    }
}

pub fn softcap(x: &mut [f32], cap: f32) {
    for v in x {
        *v = (*v / cap).tanh() * cap;
    }
}

/// cos/sin for one position: `ggml_rope_cache_init` with `rope_yarn` (ggml-cpu `ops.cpp`);
/// theta advances multiplicatively in f32 exactly as ggml does. `freq_factors` (`[n_rot / 2]`)
/// divide each pair's theta. The products GCC contracts into fused multiply-adds are fused here.
pub fn rope_cache(pos: usize, rope: &Rope, freq_factors: Option<&[f32]>, cache: &mut Vec<(f32, f32)>) {
    cache.clear();
    let theta_scale = rope.base.powf(-2.0 / rope.n_rot as f32);
    let (corr, ext_factor, mut mscale) = match rope.yarn {
        Some(y) => (
            yarn_corr_dims(rope.n_rot, y.n_ctx_orig, rope.base, y.beta_fast, y.beta_slow),
            y.ext_factor,
            y.attn_factor,
        ),
        None => ([0.0, 0.0], 0.0, 1.0),
    };
    if ext_factor != 0.0 {
        mscale *= 0.1f32.mul_add((1.0 / rope.freq_scale).ln(), 1.0);
    }
    let mut theta = pos as f32;
    for i in 0..rope.n_rot / 2 {
        let ff = freq_factors.and_then(|f| f.get(i).copied()).unwrap_or(1.0);
        let extrap = theta / ff;
        let interp = rope.freq_scale * extrap;
        let t = if ext_factor != 0.0 {
            let mix = yarn_ramp(corr[0], corr[1], 2 * i) * ext_factor;
            interp.mul_add(1.0 - mix, extrap * mix)
        } else {
            interp
        };
        cache.push((t.cos() * mscale, t.sin() * mscale));
        theta *= theta_scale;
    }
}

/// `ggml_rope_yarn_corr_dims`: the dims where YaRN's ramp from extrapolated to interpolated
/// frequencies starts and ends (floored / ceiled, clamped to `[0, n_dims - 1]`).
pub fn yarn_corr_dims(n_dims: usize, n_ctx_orig: u32, base: f32, beta_fast: f32, beta_slow: f32) -> [f32; 2] {
    // ggml_rope_yarn_corr_dim
    let dim = |n_rot: f32| {
        n_dims as f32 * (n_ctx_orig as f32 / (n_rot * 2.0 * std::f32::consts::PI)).ln() / (2.0 * base.ln())
    };
    let start = dim(beta_fast).floor();
    let end = dim(beta_slow).ceil();
    [start.max(0.0), end.min(n_dims as f32 - 1.0)]
}

/// `rope_yarn_ramp`: 1 below `low`, 0 above `high`, linear between (over pair index i0 / 2).
fn yarn_ramp(low: f32, high: f32, i0: usize) -> f32 {
    let y = ((i0 / 2) as f32 - low) / (high - low).max(0.001);
    1.0 - y.clamp(0.0, 1.0)
}

/// Rotates every head of one row in place (`ggml_compute_forward_rope_f32`), with the fused
/// multiply-adds GCC contracts `x0*cos - x1*sin` and `x0*sin + x1*cos` into.
pub fn rope_row(x: &mut [f32], head_dim: usize, rope: &Rope, cache: &[(f32, f32)]) {
    #[cfg(target_arch = "x86_64")]
    if avx2_fma() {
        // SAFETY: the CPU has the features the function is compiled for.
        return unsafe { rope_row_fma(x, head_dim, rope, cache) };
    }
    rope_row_body(x, head_dim, rope, cache)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn rope_row_fma(x: &mut [f32], head_dim: usize, rope: &Rope, cache: &[(f32, f32)]) {
    rope_row_body(x, head_dim, rope, cache)
}

#[inline(always)]
fn rope_row_body(x: &mut [f32], head_dim: usize, rope: &Rope, cache: &[(f32, f32)]) {
    let (stride, offset) = match rope.mode {
        RopeMode::Norm => (2, 1),
        RopeMode::Neox => (1, rope.n_rot / 2),
    };
    for h in x.chunks_exact_mut(head_dim) {
        for (i, &(c, s)) in cache.iter().enumerate() {
            let (x0, x1) = (h[stride * i], h[stride * i + offset]);
            h[stride * i] = x0.mul_add(c, -(x1 * s));
            h[stride * i + offset] = x0.mul_add(s, x1 * c);
        }
    }
}

/// In-place softmax (`ggml_compute_forward_soft_max_f32`: max-subtracted, sum in f64).
pub fn softmax(x: &mut [f32]) {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0f64;
    for v in x.iter_mut() {
        *v = (*v - max).exp();
        sum += *v as f64;
    }
    let inv = (1.0 / sum) as f32;
    for v in x.iter_mut() {
        *v *= inv;
    }
}

/// Whether this x86-64 CPU has AVX2 and FMA (std caches the detection).
#[cfg(target_arch = "x86_64")]
#[inline]
fn avx2_fma() -> bool {
    is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")
}

/// f32 dot product. Attention runs it per (query, key) pair, so it gets an AVX2+FMA build
/// chosen at run time: 16 lanes of fused multiply-adds.
#[inline]
pub fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if avx2_fma() {
        // SAFETY: the CPU has the features the function is compiled for.
        return unsafe { dot_f32_fma(a, b) };
    }
    dot_f32_portable(a, b)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dot_f32_fma(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 16];
    let (ca, cb) = (a.chunks_exact(16), b.chunks_exact(16));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..16 {
            acc[i] = x[i].mul_add(y[i], acc[i]);
        }
    }
    let mut s: f32 = acc.iter().sum();
    for (x, y) in ra.iter().zip(rb) {
        s = x.mul_add(*y, s);
    }
    s
}

/// 8 lanes, which the compiler vectorises for the baseline ISA.
fn dot_f32_portable(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    let mut s: f32 = acc.iter().sum();
    for (x, y) in ra.iter().zip(rb) {
        s += x * y;
    }
    s
}

/// y += a * x
#[inline]
pub fn axpy(y: &mut [f32], a: f32, x: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    if avx2_fma() {
        // SAFETY: the CPU has the features the function is compiled for.
        return unsafe { axpy_fma(y, a, x) };
    }
    axpy_portable(y, a, x)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn axpy_fma(y: &mut [f32], a: f32, x: &[f32]) {
    for (y, &x) in y.iter_mut().zip(x) {
        *y = x.mul_add(a, *y);
    }
}

fn axpy_portable(y: &mut [f32], a: f32, x: &[f32]) {
    for (y, &x) in y.iter_mut().zip(x) {
        *y += a * x;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_neg_tracks_exp() {
        for i in 0..20_000 {
            let w = i as f32 * 0.005;
            let want = (-(w as f64)).exp();
            for got in [exp_neg::<false>(w), exp_neg::<true>(w)] {
                let err = (got as f64 - want).abs() / want.max(f32::MIN_POSITIVE as f64);
                assert!(err < 3e-7 || w > 87.0, "e^-{w}: {got} vs {want}");
            }
        }
        assert_eq!(exp_neg::<true>(0.0), 1.0);
        assert!(exp_neg::<true>(f32::INFINITY) < 1e-37);
    }

    #[test]
    fn gelu_matches_the_exact_erf_form() {
        let x: Vec<f32> = (-4000..4000).map(|i| i as f32 * 0.0025).collect();
        let mut y = vec![0f32; x.len()];
        gelu(&x, &mut y);
        for (&x, &y) in x.iter().zip(&y) {
            // x · Φ(x) with Φ from the complementary error function in f64.
            let want = 0.5 * x as f64 * erfc(-(x as f64) / std::f64::consts::SQRT_2);
            assert!(
                (y as f64 - want).abs() < 4e-7 * (1.0 + x.abs() as f64),
                "gelu({x}) = {y}, want {want}"
            );
        }
    }

    /// erfc by its continued-fraction-free series (W. J. Cody's rational form is overkill for a
    /// test): erf's Taylor series below 3, the asymptotic expansion above.
    fn erfc(x: f64) -> f64 {
        if x < 0.0 {
            return 2.0 - erfc(-x);
        }
        if x < 3.0 {
            let (mut term, mut sum, mut k) = (x, x, 0.0);
            while term.abs() > 1e-17 {
                k += 1.0;
                term *= -x * x / k;
                sum += term / (2.0 * k + 1.0);
            }
            return 1.0 - 2.0 / std::f64::consts::PI.sqrt() * sum;
        }
        let (mut term, mut sum) = (1.0, 1.0);
        for k in 1..8 {
            term *= -(2.0 * k as f64 - 1.0) / (2.0 * x * x);
            sum += term;
        }
        (-x * x).exp() / (x * std::f64::consts::PI.sqrt()) * sum
    }

    #[test]
    fn rms_norm_of_constant_row_is_weight() {
        let x = vec![3.0f32; 64];
        let w: Vec<f32> = (0..64).map(|i| i as f32).collect();
        let mut y = vec![0f32; 64];
        rms_norm(&x, &w, 0.0, &mut y);
        for (a, b) in y.iter().zip(&w) {
            assert!((a - b).abs() < 1e-5);
        }
    }

    #[test]
    fn rope_preserves_norm_and_position_zero_is_identity() {
        let rope = Rope::new(RopeMode::Neox, 8, 10000.0, 1.0);
        let x0: Vec<f32> = (0..16).map(|i| (i as f32 * 0.37).sin()).collect();
        let mut cache = Vec::new();
        rope_cache(0, &rope, None, &mut cache);
        let mut x = x0.clone();
        rope_row(&mut x, 8, &rope, &cache);
        assert_eq!(x, x0);
        rope_cache(17, &rope, None, &mut cache);
        rope_row(&mut x, 8, &rope, &cache);
        let n = |v: &[f32]| v.iter().map(|a| a * a).sum::<f32>();
        assert!((n(&x) - n(&x0)).abs() < 1e-4);
        assert_ne!(x, x0);
    }

    /// YaRN's cos/sin against ggml's formulas evaluated directly in f64 (`ggml_rope_yarn_corr_dims`,
    /// `rope_yarn_ramp`, `rope_yarn`) with gpt-oss's parameters (corr dims 0.65..9.95 → 0..10),
    /// with and without frequency factors, for dims below, inside and above the ramp.
    #[test]
    fn yarn_cache_matches_ggml_formulas() {
        use crate::model::Yarn;
        let (n_rot, base, factor, n_ctx_orig) = (64usize, 1.5e5f32, 32f32, 256u32);
        let mut rope = Rope::new(RopeMode::Neox, n_rot, base, 1.0 / factor);
        let attn_factor = 1.3f32;
        rope.yarn = Some(Yarn {
            ext_factor: 1.0,
            attn_factor,
            beta_fast: 32.0,
            beta_slow: 1.0,
            n_ctx_orig,
        });
        let dim = |beta: f64| {
            n_rot as f64 * (n_ctx_orig as f64 / (beta * 2.0 * std::f64::consts::PI)).ln() / (2.0 * (base as f64).ln())
        };
        assert!((dim(32.0) - 0.65).abs() < 0.01 && (dim(1.0) - 9.95).abs() < 0.01);
        let corr = yarn_corr_dims(n_rot, n_ctx_orig, base, 32.0, 1.0);
        assert_eq!(corr, [0.0, 10.0]);
        let ff: Vec<f32> = (0..n_rot / 2).map(|i| 1.0 + 0.03 * i as f32).collect();
        let mut cache = Vec::new();
        for factors in [None, Some(ff.as_slice())] {
            for pos in [23usize, 200] {
                rope_cache(pos, &rope, factors, &mut cache);
                for i in [0usize, 3, 5, 9, 10, 17, 31] {
                    let f = factors.map_or(1.0, |f| f[i] as f64);
                    let extrap = pos as f64 * (base as f64).powf(-2.0 * i as f64 / n_rot as f64) / f;
                    let interp = extrap / factor as f64;
                    let ramp = 1.0 - ((i as f64 - 0.0) / 10.0).clamp(0.0, 1.0);
                    let theta = interp * (1.0 - ramp) + extrap * ramp;
                    let mscale = attn_factor as f64 * (1.0 + 0.1 * (factor as f64).ln());
                    let (c, s) = cache[i];
                    let want = (theta.cos() * mscale, theta.sin() * mscale);
                    assert!(
                        (c as f64 - want.0).abs() < 1e-4 && (s as f64 - want.1).abs() < 1e-4,
                        "pos {pos} dim {i} factors {}: ({c}, {s}) vs {want:?}",
                        factors.is_some()
                    );
                }
            }
        }
        // Without YaRN: ggml's plain rotation, cos/sin of theta · freq_scale, unscaled.
        let plain = Rope::new(RopeMode::Neox, n_rot, base, 0.5);
        rope_cache(23, &plain, None, &mut cache);
        let theta = 23.0 * (base as f64).powf(-2.0 * 5.0 / n_rot as f64) * 0.5;
        assert!((cache[5].0 as f64 - theta.cos()).abs() < 1e-5);
    }

    #[test]
    fn softmax_sums_to_one() {
        let mut x = vec![1.0, 2.0, 3.0, -1e30];
        softmax(&mut x);
        assert!((x.iter().sum::<f32>() - 1.0).abs() < 1e-6);
        assert_eq!(x[3], 0.0);
    }

    #[test]
    fn geglu_table_tracks_exact_gelu() {
        let g: Vec<f32> = (-50..50).map(|i| i as f32 * 0.1).collect();
        let u = vec![1.0f32; g.len()];
        let mut y = vec![0f32; g.len()];
        geglu(&g, &u, &mut y);
        for (&x, &y) in g.iter().zip(&y) {
            assert!((gelu_tanh(x) - y).abs() < 4e-3 * (1.0 + x.abs()), "x={x}");
        }
    }
}
