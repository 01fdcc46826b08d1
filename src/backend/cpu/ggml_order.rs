//! Attention's reductions in the order of llama.cpp's CPU build on AVX-512, the machine the
//! references come from, so that scores, softmax and P·V give its bits, not just its values.
//!
//! The KV cache is padded to a multiple of 256 cells there, so every row length is a multiple
//! of 64 and each sum splits into lanes by cell index (cell = position here):
//! - a batch of 2 or more tokens multiplies through tinyBLAS (`llamafile_sgemm`): 16 lanes of
//!   fused multiply-adds over the whole row, then `_mm512_reduce_add_ps`;
//! - a single token goes through `ggml_vec_dot_f16`: 4 × 16 lanes over steps of 64, folded
//!   pairwise into 16 (`GGML_F32x16_REDUCE`), then `_mm512_reduce_add_ps`, the tail in f64;
//! - softmax (`ggml_vec_soft_max_f32`) takes `ggml_v_expf`, a polynomial, 16 cells at a time,
//!   each chunk reduced in f32 and the chunks summed in f64;
//! - flash attention follows `flash_attn_ext_f16_one_chunk`, or its tiled kernel for batches.
//!
//! Every step is an IEEE operation in a fixed order, so any ISA reproduces it; [`attend`] runs
//! the bodies compiled once more with AVX2 and FMA where the CPU has them.

/// `_mm512_reduce_add_ps` (GCC's expansion): halves, quarters, then pairs.
#[inline(always)]
fn reduce16(a: &[f32; 16]) -> f32 {
    let t: [f32; 8] = std::array::from_fn(|j| a[j + 8] + a[j]);
    let u: [f32; 4] = std::array::from_fn(|j| t[j + 4] + t[j]);
    (u[0] + u[2]) + (u[1] + u[3])
}

/// `ggml_vec_dot_f16` on values already in f16 precision (so every product of two is exact in
/// f32): 4 × 16 lanes over steps of 64, folded, the tail summed in f64.
#[inline(always)]
pub fn dot_vec(x: &[f32], y: &[f32]) -> f32 {
    let (sum, np) = dot_vec_lanes(x, y);
    let mut sumf = sum as f64;
    for k in np..x.len().min(y.len()) {
        sumf += (x[k] * y[k]) as f64;
    }
    sumf as f32
}

/// `ggml_vec_dot_f32`: as [`dot_vec`], but the tail fused into an f32 sum (GCC contracts its
/// `sumf += x*y`).
#[inline(always)]
fn dot_vec_f32(x: &[f32], y: &[f32]) -> f32 {
    let (mut sum, np) = dot_vec_lanes(x, y);
    for k in np..x.len().min(y.len()) {
        sum = x[k].mul_add(y[k], sum);
    }
    sum
}

/// The whole 64s of `ggml_vec_dot_*`: (their folded sum, where the tail starts).
#[inline(always)]
fn dot_vec_lanes(x: &[f32], y: &[f32]) -> (f32, usize) {
    let n = x.len().min(y.len());
    let np = n & !63;
    let mut sum = [[0f32; 16]; 4];
    for i in (0..np).step_by(64) {
        for (j, acc) in sum.iter_mut().enumerate() {
            for (l, a) in acc.iter_mut().enumerate() {
                let k = i + 16 * j + l;
                *a = x[k].mul_add(y[k], *a);
            }
        }
    }
    let [s0, s1, s2, s3] = sum;
    let folded: [f32; 16] = std::array::from_fn(|l| (s0[l] + s2[l]) + (s1[l] + s3[l]));
    (reduce16(&folded), np)
}

/// `ggml_vec_dot_f16` (`f16`) or `ggml_vec_dot_f32` of `x` and `y`, with AVX2/FMA when `X86`
/// says the caller enables them.
#[inline(always)]
fn dot_vec_any<const X86: bool>(f16: bool, x: &[f32], y: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if X86 {
        // SAFETY: the caller runs with AVX2 and FMA (`attend_fma`).
        return unsafe {
            if f16 {
                x86::dot_vec::<true>(x, y)
            } else {
                x86::dot_vec::<false>(x, y)
            }
        };
    }
    if f16 {
        dot_vec(x, y)
    } else {
        dot_vec_f32(x, y)
    }
}

/// tinyBLAS's dot of one A row and one B row: 16 lanes over the whole row. Rows that are not
/// whole 16s are refused by tinyBLAS and go through [`dot_vec`].
#[inline(always)]
fn dot_gemm(x: &[f32], y: &[f32]) -> f32 {
    if !x.len().is_multiple_of(16) {
        return dot_vec(x, y);
    }
    let mut acc = [0f32; 16];
    for (cx, cy) in x.chunks_exact(16).zip(y.chunks_exact(16)) {
        for l in 0..16 {
            acc[l] = cx[l].mul_add(cy[l], acc[l]);
        }
    }
    reduce16(&acc)
}

/// `ggml_v_expf` (AVX-512): exp(x) = 2^n · p(b) with n = round(x / ln 2), to within 1.5 ulp.
#[inline(always)]
pub fn expf(x: f32) -> f32 {
    let r = f32::from_bits(0x4b40_0000); // 0x1.8p23: adding it rounds to an integer
    let z = x.mul_add(f32::from_bits(0x3fb8_aa3b), r); // 1/ln 2
    let n = z - r;
    let b = (-n).mul_add(
        f32::from_bits(0x35bf_be8e),                  // ln 2, low part
        (-n).mul_add(f32::from_bits(0x3f31_7200), x), // ln 2, high part
    );
    if n.abs() > 192.0 {
        return if n <= 0.0 { 0.0 } else { f32::INFINITY };
    }
    let u = b * b;
    let c = |bits: u32| f32::from_bits(bits);
    let j = c(0x3c07_2010)
        .mul_add(b, c(0x3d2b_9f17))
        .mul_add(u, c(0x3e2a_af33).mul_add(b, c(0x3eff_fedb)))
        .mul_add(u, c(0x3f7f_fff6).mul_add(b, 1.0));
    // _mm512_scalef_ps: j · 2^n with one rounding, also into the subnormals (2^n is exact in
    // f64 for |n| ≤ 192).
    (j as f64 * f64::from_bits(((n as i64 + 1023) as u64) << 52)) as f32
}

/// How a batch multiplies: tinyBLAS for 2 or more tokens, `ggml_vec_dot_*` for one.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Order {
    Gemm,
    Vec,
}

impl Order {
    pub fn for_batch(n_tokens: usize) -> Order {
        if n_tokens >= 2 {
            Order::Gemm
        } else {
            Order::Vec
        }
    }

    /// P·V lanes: cell j accumulates into lane j mod `lanes()`.
    fn lanes(self) -> usize {
        match self {
            Order::Gemm => 16,
            Order::Vec => 64,
        }
    }
}

/// One query head over the cells `first..first + n` (one key and one value row each, already in
/// the cache's precision). For [`Kind::Plain`] and [`Kind::FlashChunk`] `q` is rounded like the
/// cache (ggml converts it to the cache's vec-dot type); `f16` says the cache is f16, and
/// `order` how a [`Kind::Plain`] batch multiplies.
pub struct Head<'a> {
    pub order: Order,
    pub f16: bool,
    pub scale: f32,
    pub softcap: Option<f32>,
    /// The head's attention sink: one more logit in the denominator, with no value.
    pub sink: Option<f32>,
    pub first: usize,
    pub q: &'a [f32],
    pub keys: &'a [f32],
    pub vals: &'a [f32],
}

/// Which of ggml's attention kernels a head follows.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Without flash attention: KQ, softmax and P·V as three matmuls ([`Order`]).
    Plain,
    /// Flash attention, `flash_attn_ext_f16_one_chunk`: one pass, online softmax.
    FlashChunk,
    /// Flash attention, `flash_attn_ext_tiled`, for batches of [`FLASH_TILED_MIN_TOKENS`].
    FlashTiled,
}

/// One head through `kind` into `out`; `scores` and `lanes` are scratch.
pub fn attend(kind: Kind, h: &Head, scores: &mut Vec<f32>, lanes: &mut Vec<f32>, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
        // SAFETY: the CPU has the features the function is compiled for.
        return unsafe { attend_fma(kind, h, scores, lanes, out) };
    }
    attend_body::<false>(kind, h, scores, lanes, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn attend_fma(kind: Kind, h: &Head, scores: &mut Vec<f32>, lanes: &mut Vec<f32>, out: &mut [f32]) {
    attend_body::<true>(kind, h, scores, lanes, out)
}

#[inline(always)]
fn attend_body<const X86: bool>(kind: Kind, h: &Head, scores: &mut Vec<f32>, lanes: &mut Vec<f32>, out: &mut [f32]) {
    match kind {
        Kind::Plain => head_body::<X86>(h, scores, lanes, out),
        Kind::FlashChunk => flash_chunk::<X86>(h, out),
        Kind::FlashTiled => flash_tiled(h, out),
    }
}

/// `X86`: the caller enables AVX2 and FMA, so the score dots may use them.
#[inline(always)]
fn head_body<const X86: bool>(h: &Head, scores: &mut Vec<f32>, lanes: &mut Vec<f32>, out: &mut [f32]) {
    let &Head {
        order,
        f16,
        scale,
        softcap,
        sink,
        first,
        q,
        keys,
        vals,
    } = h;
    let (hd, hdv) = (q.len(), out.len());
    scores.clear();
    let mut ks = keys.chunks_exact(hd);
    // With an f32 cache ggml never converts q, so KQ stays with `ggml_vec_dot_f32`.
    let gemm = order == Order::Gemm && f16 && hd.is_multiple_of(16);
    if gemm {
        // Four keys at a time: independent chains, each in tinyBLAS's order.
        while ks.len() >= 4 {
            let k: [&[f32]; 4] = std::array::from_fn(|_| ks.next().unwrap_or(&[]));
            #[cfg(target_arch = "x86_64")]
            if X86 {
                // SAFETY: the caller runs with AVX2 and FMA (`attend_fma`); each key row is as
                // long as q, a whole number of 16s.
                scores.extend(unsafe { x86::dot_gemm4(k, q) });
                continue;
            }
            scores.extend(dot_gemm4(k, q));
        }
    }
    for k in ks {
        scores.push(if gemm {
            dot_gemm(k, q)
        } else {
            dot_vec_any::<X86>(f16, k, q)
        });
    }
    // Scale, then cap (times 1/cap, tanh, times cap). llama.cpp's plain path caps first and
    // scales in its softmax; the models that cap (Gemma 2) scale Q beforehand, and with a scale
    // of 1 both are the same operations.
    for s in scores.iter_mut() {
        *s *= scale;
        if let Some(cap) = softcap {
            *s = (*s * (1.0 / cap)).tanh() * cap;
        }
    }
    // ggml's soft_max with sinks: the sink joins the max, and its `expf` (libm's) the sum.
    let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let max = sink.map_or(max, |s| max.max(s));
    #[cfg(target_arch = "x86_64")]
    if X86 {
        // SAFETY: the caller runs with AVX2 and FMA (`attend_fma`).
        unsafe { x86::exp_minus(scores, max) };
    }
    if !X86 || cfg!(not(target_arch = "x86_64")) {
        for s in scores.iter_mut() {
            *s = expf(*s - max);
        }
    }
    // Chunks of 16 cells, the masked cells around the window zeros: laid out from the first
    // chunk's start in scratch.
    let (n, pad) = (scores.len(), first % 16);
    lanes.clear();
    lanes.resize((pad + n).next_multiple_of(16), 0.0);
    lanes[pad..pad + n].copy_from_slice(scores);
    let mut sum: f64 = lanes
        .chunks_exact(16)
        .map(|c| reduce16(c.try_into().unwrap_or(&[0.0; 16])) as f64)
        .sum();
    if let Some(s) = sink {
        sum += (s - max).exp() as f64;
    }
    let inv = (1.0 / sum) as f32;
    for s in scores.iter_mut() {
        *s *= inv;
        if f16 {
            *s = half::f16::from_f32(*s).to_f32();
        }
    }
    // P·V: lane-major accumulators, each lane's chain in cell order.
    let nl = order.lanes();
    lanes.clear();
    lanes.resize(nl * hdv, 0.0);
    for (jj, (&p, v)) in scores.iter().zip(vals.chunks_exact(hdv)).enumerate() {
        let lane = (first + jj) % nl;
        for (a, &x) in lanes[lane * hdv..(lane + 1) * hdv].iter_mut().zip(v) {
            *a = x.mul_add(p, *a);
        }
    }
    // Fold the lanes row by row (vector-wide over d), in the reductions' order.
    let (rows, rest) = lanes.split_at_mut(16 * hdv);
    if order == Order::Vec {
        let (r16, r32) = rest.split_at(16 * hdv);
        let r48 = &r32[16 * hdv..];
        for (i, a) in rows.iter_mut().enumerate() {
            *a = (*a + r32[i]) + (r16[i] + r48[i]);
        }
    }
    for h in [8, 4] {
        let (lo, hi) = rows.split_at_mut(h * hdv);
        for (a, &b) in lo.iter_mut().zip(&hi[..h * hdv]) {
            *a += b;
        }
    }
    for (d, o) in out.iter_mut().enumerate() {
        let r = |i: usize| rows[i * hdv + d];
        *o = (r(0) + r(2)) + (r(1) + r(3));
    }
}

/// Query rows from which ggml's flash attention runs its tiled kernel.
pub const FLASH_TILED_MIN_TOKENS: usize = 64;

/// One query head through ggml's tiled flash attention (`flash_attn_ext_tiled`, batches of
/// [`FLASH_TILED_MIN_TOKENS`] or more): Q in f32, 64-cell tiles; per tile the scores as fused
/// chains over the head dim, an online max with `expf` rescaling, the tile's softmax sum
/// (`ggml_vec_soft_max_f32`) added in f64, and P·V as fused chains over the tile's cells into
/// an f32 accumulator. `h.f16` and `h.order` play no part here.
#[inline(always)]
fn flash_tiled(h: &Head, out: &mut [f32]) {
    const TILE: usize = 64;
    // ggml folds a softcap into the scale: tanh(s · scale / cap) · cap.
    let scale = h.softcap.map_or(h.scale, |cap| h.scale / cap);
    let (hd, hdv) = (h.q.len(), out.len());
    let n = h.keys.len() / hd;
    let (mut m, mut s) = (f32::NEG_INFINITY, 0f32);
    out.fill(0.0);
    let mut kq = [0f32; TILE];
    let mut t0 = h.first / TILE * TILE;
    while t0 < h.first + n {
        // Cells t0..t0 + TILE; those outside first..first + n are masked.
        let (lo, hi) = (t0.max(h.first), (t0 + TILE).min(h.first + n));
        for c in lo..hi {
            let k = &h.keys[(c - h.first) * hd..(c - h.first + 1) * hd];
            let mut acc = 0f32;
            for (&qd, &kd) in h.q.iter().zip(k) {
                acc = qd.mul_add(kd, acc);
            }
            let v = acc * scale;
            kq[c - t0] = h.softcap.map_or(v, |cap| cap * v.tanh());
        }
        let tile_max = kq[lo - t0..hi - t0].iter().copied().fold(f32::NEG_INFINITY, f32::max);
        if tile_max > f32::NEG_INFINITY {
            let mnew = m.max(tile_max);
            if mnew > m {
                let ms = (m - mnew).exp();
                for o in out.iter_mut() {
                    *o *= ms;
                }
                s *= ms;
            }
            m = mnew;
            let mut e = [0f32; TILE];
            for c in lo..hi {
                e[c - t0] = expf(kq[c - t0] - m);
            }
            let sum: f64 = e
                .chunks_exact(16)
                .map(|c| reduce16(c.try_into().unwrap_or(&[0.0; 16])) as f64)
                .sum();
            s = (s as f64 + sum) as f32;
            for c in lo..hi {
                let v = &h.vals[(c - h.first) * hdv..(c - h.first + 1) * hdv];
                for (o, &vd) in out.iter_mut().zip(v) {
                    *o = e[c - t0].mul_add(vd, *o);
                }
            }
        }
        t0 += TILE;
    }
    apply_sink(h.sink, m, &mut s, out);
    let inv = if s == 0.0 { 0.0 } else { 1.0 / s };
    for o in out.iter_mut() {
        *o *= inv;
    }
}

/// One head through ggml's `flash_attn_ext_f16_one_chunk`: one pass with an online softmax
/// (`expf`), the V accumulator kept in the cache's type, so with an f16 cache every update
/// (`ggml_vec_mad_f16`, `ggml_vec_scale_f16`) rounds to f16.
#[inline(always)]
fn flash_chunk<const X86: bool>(h: &Head, out: &mut [f32]) {
    let (hd, hdv) = (h.q.len(), out.len());
    let f16r = |x: f32| if h.f16 { half::f16::from_f32(x).to_f32() } else { x };
    let scale = h.softcap.map_or(h.scale, |cap| h.scale / cap);
    let (mut m, mut sum) = (f32::NEG_INFINITY, 0f32);
    out.fill(0.0);
    for (k, v) in h.keys.chunks_exact(hd).zip(h.vals.chunks_exact(hdv)) {
        let dot = dot_vec_any::<X86>(h.f16, h.q, k);
        let s = dot * scale;
        let s = h.softcap.map_or(s, |cap| cap * s.tanh());
        let (mut ms, mut vs) = (1f32, 1f32);
        if s > m {
            ms = (m - s).exp();
            m = s;
            for o in out.iter_mut() {
                *o = f16r(*o * ms);
            }
        } else {
            vs = (s - m).exp();
        }
        for (o, &x) in out.iter_mut().zip(v) {
            *o = f16r(x.mul_add(vs, *o));
        }
        sum = sum.mul_add(ms, vs);
    }
    apply_sink(h.sink, m, &mut sum, out);
    let inv = if sum == 0.0 { 0.0 } else { 1.0 / sum };
    for o in out.iter_mut() {
        *o *= inv;
    }
}

/// The flash kernels' sink correction (`ggml_compute_forward_flash_attn_ext_f16_one_chunk`
/// and `_tiled`): the sink as one more online-softmax step with no value, on the f32
/// accumulator, before the division by the sum.
#[inline(always)]
fn apply_sink(sink: Option<f32>, m: f32, sum: &mut f32, out: &mut [f32]) {
    let Some(s) = sink else { return };
    let (mut ms, mut vs) = (1f32, 1f32);
    if s > m {
        ms = (m - s).exp();
        for o in out.iter_mut() {
            *o *= ms;
        }
    } else {
        vs = (s - m).exp();
    }
    *sum = sum.mul_add(ms, vs);
}

/// [`dot_gemm`] of four rows against `y`, interleaved.
#[inline(always)]
fn dot_gemm4(x: [&[f32]; 4], y: &[f32]) -> [f32; 4] {
    let mut acc = [[0f32; 16]; 4];
    for c in (0..y.len()).step_by(16) {
        let yc = &y[c..c + 16];
        for (a, x) in acc.iter_mut().zip(x) {
            let xc = &x[c..c + 16];
            for l in 0..16 {
                a[l] = xc[l].mul_add(yc[l], a[l]);
            }
        }
    }
    acc.map(|a| reduce16(&a))
}

/// The score dots with AVX2 + FMA, for callers that enable them; same operations, same order.
#[cfg(target_arch = "x86_64")]
pub(crate) mod x86 {
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn expf8_gives_the_bits_of_expf() {
        if !(is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")) {
            return;
        }
        let mut xs: Vec<f32> = (-4000..=2000).map(|i| i as f32 * 0.0437).collect();
        xs.extend([
            f32::NEG_INFINITY,
            f32::INFINITY,
            -200.0,
            -87.5,
            -103.9,
            88.7,
            133.0,
            0.0,
            -0.0,
        ]);
        xs.extend((0..64).map(|i| f32::from_bits(0xc2b0_0000 + i * 0x0004_0000)));
        let mut got = xs.clone();
        // SAFETY: AVX2 and FMA were detected above.
        unsafe { x86::exp_minus(&mut got, 0.0) };
        for (&x, g) in xs.iter().zip(got) {
            let want = expf(x - 0.0);
            assert!(g.to_bits() == want.to_bits(), "x={x}: {g} vs {want}");
        }
    }

    #[test]
    fn expf_is_within_two_ulp_of_exp() {
        for i in -2000..=200 {
            let x = i as f32 * 0.0437;
            let (got, want) = (expf(x), (x as f64).exp() as f32);
            let ulp = (got.to_bits() as i64 - want.to_bits() as i64).abs();
            assert!(ulp <= 2, "x={x}: {got} vs {want}");
        }
        assert_eq!(expf(f32::NEG_INFINITY), 0.0);
        assert_eq!(expf(-200.0), 0.0);
    }

    /// Every kind and order against attention in f64, with a window (`first` > 0), a head
    /// dim that is no multiple of 16 or 64, f16 and f32 values, and a softcap.
    #[test]
    fn every_kind_is_attention() {
        let val = |i: usize, s: usize| ((i * s + 3) % 101) as f32 / 50.0 - 1.0;
        for (hd, hdv, n, first) in [(64, 64, 70, 0), (40, 24, 9, 5), (256, 128, 130, 67)] {
            for f16 in [false, true] {
                let round = |x: f32| if f16 { half::f16::from_f32(x).to_f32() } else { x };
                let q: Vec<f32> = (0..hd).map(|i| round(val(i, 7))).collect();
                let keys: Vec<f32> = (0..n * hd).map(|i| round(val(i, 13))).collect();
                let vals: Vec<f32> = (0..n * hdv).map(|i| round(val(i, 29))).collect();
                for softcap in [None, Some(3.0)] {
                    // llama.cpp's flash kernels cap after scaling and its plain path before;
                    // they agree where softcapping models use them, with Q scaled beforehand.
                    let scale = if softcap.is_some() {
                        1.0
                    } else {
                        1.0 / (hd as f32).sqrt()
                    };
                    let s: Vec<f64> = keys
                        .chunks_exact(hd)
                        .map(|k| {
                            let d: f64 = k.iter().zip(&q).map(|(&a, &b)| a as f64 * b as f64).sum();
                            softcap.map_or(d, |c| (d / c as f64).tanh() * c as f64) * scale as f64
                        })
                        .collect();
                    let max = s.iter().copied().fold(f64::MIN, f64::max);
                    let e: Vec<f64> = s.iter().map(|&x| (x - max).exp()).collect();
                    let sum: f64 = e.iter().sum();
                    let want: Vec<f64> = (0..hdv)
                        .map(|d| {
                            e.iter()
                                .enumerate()
                                .map(|(j, &p)| p * vals[j * hdv + d] as f64)
                                .sum::<f64>()
                                / sum
                        })
                        .collect();
                    for kind in [Kind::Plain, Kind::FlashChunk, Kind::FlashTiled] {
                        for order in [Order::Gemm, Order::Vec] {
                            let h = Head {
                                sink: None,
                                order,
                                f16,
                                scale,
                                softcap,
                                first,
                                q: &q,
                                keys: &keys,
                                vals: &vals,
                            };
                            let mut out = vec![f32::NAN; hdv];
                            attend(kind, &h, &mut Vec::new(), &mut Vec::new(), &mut out);
                            // f16 probabilities (plain) and accumulators (flash) bound the error.
                            let tol = if f16 { 4e-3 } else { 1e-5 };
                            for (d, (&g, &w)) in out.iter().zip(&want).enumerate() {
                                assert!(
                                    (g as f64 - w).abs() <= tol,
                                    "hd {hd} n {n} f16 {f16} cap {softcap:?} kind {} order {}: [{d}] {g} vs {w}",
                                    kind as u8,
                                    order as u8
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn dots_are_exact_on_small_integers() {
        let x: Vec<f32> = (0..200).map(|i| (i % 7) as f32 - 3.0).collect();
        let y: Vec<f32> = (0..200).map(|i| (i % 5) as f32 - 2.0).collect();
        let want: f32 = x.iter().zip(&y).map(|(a, b)| a * b).sum();
        assert_eq!(dot_vec(&x, &y), want);
        assert_eq!(
            dot_gemm(&x[..192], &y[..192]),
            x[..192].iter().zip(&y).map(|(a, b)| a * b).sum::<f32>()
        );
    }
}
