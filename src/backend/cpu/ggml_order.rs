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

use std::ops::Range;

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
    /// How far apart (in floats) the rows of `keys` and `vals` start: `[hd, hdv]` for rows
    /// back to back; wider for [`Kind::FlashChunk`] reading a cache in place (the other kinds
    /// take rows back to back).
    pub stride: [usize; 2],
    /// For [`Kind::FlashTiled`], optionally: the keys transposed by tiles (as ggml packs them),
    /// from the tile holding `first` on: `[tile][d][TILE]`, a tile's cells at positions
    /// `first / TILE * TILE + TILE · tile + 0..TILE` (those outside `first..first + n` are not read).
    pub keys_t: Option<&'a [f32]>,
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
    if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c") {
        // SAFETY: the CPU has the features the functions are compiled for.
        return unsafe {
            if is_x86_feature_detected!("avx512f") {
                attend_avx512(kind, h, scores, lanes, out)
            } else {
                attend_fma(kind, h, scores, lanes, out)
            }
        };
    }
    attend_body::<false, false>(kind, h, scores, lanes, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn attend_fma(kind: Kind, h: &Head, scores: &mut Vec<f32>, lanes: &mut Vec<f32>, out: &mut [f32]) {
    attend_body::<true, false>(kind, h, scores, lanes, out)
}

/// `attend_fma` with 512-bit registers for the dots and P·V (the same operations per lane).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c,avx512f")]
unsafe fn attend_avx512(kind: Kind, h: &Head, scores: &mut Vec<f32>, lanes: &mut Vec<f32>, out: &mut [f32]) {
    attend_body::<true, true>(kind, h, scores, lanes, out)
}

#[inline(always)]
fn attend_body<const X86: bool, const Z: bool>(
    kind: Kind,
    h: &Head,
    scores: &mut Vec<f32>,
    lanes: &mut Vec<f32>,
    out: &mut [f32],
) {
    match kind {
        Kind::Plain => head_body::<X86, Z>(h, scores, lanes, out),
        Kind::FlashChunk => flash_chunk::<X86>(h, out),
        Kind::FlashTiled => flash_tiled::<X86, Z>(h, out),
    }
}

/// `X86`: the caller enables AVX2 and FMA, so the score dots may use them; `Z`: and AVX-512F.
#[inline(always)]
fn head_body<const X86: bool, const Z: bool>(h: &Head, scores: &mut Vec<f32>, lanes: &mut Vec<f32>, out: &mut [f32]) {
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
        stride,
        keys_t: _,
    } = h;
    let (hd, hdv) = (q.len(), out.len());
    debug_assert_eq!(stride, [hd, hdv], "the plain kernel takes rows back to back");
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
                scores.extend(unsafe {
                    if Z {
                        x86::dot_gemm4_z(k, q)
                    } else {
                        x86::dot_gemm4(k, q)
                    }
                });
                continue;
            }
            scores.extend(dot_gemm4(k, q));
        }
    }
    #[cfg(target_arch = "x86_64")]
    if Z && !gemm && hd.is_multiple_of(64) {
        // `ggml_vec_dot_*` without a tail, four keys at a time.
        while ks.len() >= 4 {
            let k: [&[f32]; 4] = std::array::from_fn(|_| ks.next().unwrap_or(&[]));
            // SAFETY: the caller runs with AVX-512F (`attend_avx512`); each key row is as long
            // as q, a whole number of 64s.
            scores.extend(unsafe { x86::dot_vec4_z(k, q) });
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
    #[cfg(target_arch = "x86_64")]
    if X86 {
        // SAFETY: the caller runs with AVX2, FMA and F16C (`attend_fma`).
        unsafe { x86::scale_round(scores, inv, f16) };
    }
    if !X86 || cfg!(not(target_arch = "x86_64")) {
        for s in scores.iter_mut() {
            *s *= inv;
            if f16 {
                *s = half::f16::from_f32(*s).to_f32();
            }
        }
    }
    // P·V: lane-major accumulators, each lane's chain in cell order.
    let nl = order.lanes();
    let mut done = false;
    #[cfg(target_arch = "x86_64")]
    if X86 && hdv.is_multiple_of(8) {
        lanes.resize(nl * hdv, 0.0);
        let (v, l) = (&vals[..scores.len() * hdv], &mut lanes[..nl * hdv]);
        // SAFETY: as above (`Z`: and AVX-512F); `vals` holds a row per score, `lanes` nl rows.
        unsafe {
            match (Z && hdv.is_multiple_of(32), nl) {
                (true, 16) => x86::pv_lanes_z::<16>(scores, v, first, hdv, l),
                (true, _) => x86::pv_lanes_z::<64>(scores, v, first, hdv, l),
                (false, 16) => x86::pv_lanes::<16>(scores, v, first, hdv, l),
                (false, _) => x86::pv_lanes::<64>(scores, v, first, hdv, l),
            }
        };
        done = true;
    }
    if !done {
        lanes.clear();
        lanes.resize(nl * hdv, 0.0);
        for (jj, (&p, v)) in scores.iter().zip(vals.chunks_exact(hdv)).enumerate() {
            let lane = (first + jj) % nl;
            for (a, &x) in lanes[lane * hdv..(lane + 1) * hdv].iter_mut().zip(v) {
                *a = x.mul_add(p, *a);
            }
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

/// Cells per KV tile of ggml's tiled flash attention.
pub const FLASH_TILE: usize = 64;

/// Packs `keys` (rows of `hd`, the cells `first..first + n`) transposed by tiles, as
/// [`Head::keys_t`] reads them.
pub fn pack_keys_t(keys: &[f32], hd: usize, first: usize, out: &mut Vec<f32>) {
    let n = keys.len() / hd.max(1);
    let t0 = first / FLASH_TILE * FLASH_TILE;
    let tiles = (first + n - t0).div_ceil(FLASH_TILE);
    out.clear();
    out.resize(tiles * hd * FLASH_TILE, 0.0);
    for (j, k) in keys.chunks_exact(hd).enumerate() {
        let c = first + j - t0;
        let base = (c / FLASH_TILE) * hd * FLASH_TILE + c % FLASH_TILE;
        for (d, &kd) in k.iter().enumerate() {
            out[base + d * FLASH_TILE] = kd;
        }
    }
}

/// One query head through ggml's tiled flash attention (`flash_attn_ext_tiled`, batches of
/// [`FLASH_TILED_MIN_TOKENS`] or more): Q in f32, 64-cell tiles; per tile the scores as fused
/// chains over the head dim, an online max with `expf` rescaling, the tile's softmax sum
/// (`ggml_vec_soft_max_f32`) added in f64, and P·V as fused chains over the tile's cells into
/// an f32 accumulator. `h.f16` and `h.order` play no part here. With `X86` and
/// [`Head::keys_t`], a tile's scores run 64 cells wide and P·V keeps the accumulator in
/// registers: the same operations per cell and per element.
#[inline(always)]
fn flash_tiled<const X86: bool, const Z: bool>(h: &Head, out: &mut [f32]) {
    const TILE: usize = FLASH_TILE;
    let (hd, hdv) = (h.q.len(), out.len());
    debug_assert_eq!(h.stride, [hd, hdv], "the tiled kernel takes rows back to back");
    let n = h.keys.len() / hd;
    let mut st = Online::new(out);
    let mut t0 = h.first / TILE * TILE;
    let wide = X86 && cfg!(target_arch = "x86_64") && hdv.is_multiple_of(8);
    let mut tile = 0;
    while t0 < h.first + n {
        // Cells t0..t0 + TILE; those outside first..first + n are masked.
        let (lo, hi) = (t0.max(h.first), (t0 + TILE).min(h.first + n));
        let mut raw = [0f32; TILE];
        let mut scored = false;
        #[cfg(target_arch = "x86_64")]
        if let (true, Some(kt)) = (X86, h.keys_t) {
            // SAFETY: the caller runs with AVX2 and FMA (`attend_fma`); the tile holds hd rows.
            let kt = &kt[tile * hd * TILE..(tile + 1) * hd * TILE];
            unsafe {
                if Z {
                    x86::kq_tile_z(h.q, kt, &mut raw)
                } else {
                    x86::kq_tile(h.q, kt, &mut raw)
                }
            };
            scored = true;
        }
        if !scored {
            for c in lo..hi {
                let k = &h.keys[(c - h.first) * hd..(c - h.first + 1) * hd];
                let mut acc = 0f32;
                for (&qd, &kd) in h.q.iter().zip(k) {
                    acc = qd.mul_add(kd, acc);
                }
                raw[c - t0] = acc;
            }
        }
        let mut e = [0f32; TILE];
        if st.tile::<X86>((h.scale, h.softcap), &raw, t0, lo..hi, &mut e, out) {
            let vals = &h.vals[(lo - h.first) * hdv..(hi - h.first) * hdv];
            #[cfg(target_arch = "x86_64")]
            if wide {
                // SAFETY: as above; `vals` holds a row per cell of lo..hi, hdv a multiple of 8.
                unsafe {
                    if Z && hdv.is_multiple_of(16) {
                        x86::pv_rows_z(&e[lo - t0..hi - t0], vals, out)
                    } else {
                        x86::pv_rows(&e[lo - t0..hi - t0], vals, out)
                    }
                };
            }
            if !wide {
                for (c, v) in (lo..hi).zip(vals.chunks_exact(hdv)) {
                    for (o, &vd) in out.iter_mut().zip(v) {
                        *o = e[c - t0].mul_add(vd, *o);
                    }
                }
            }
        }
        t0 += TILE;
        tile += 1;
    }
    st.finish(h.sink, out);
}

/// One query of [`flash_tiled_many`]: its row, its cells `first..end`, its sink, its output.
pub struct TiledQuery<'a> {
    pub q: &'a [f32],
    pub first: usize,
    pub end: usize,
    pub sink: Option<f32>,
    pub out: &'a mut [f32],
}

/// The cells `lo..` that the queries of [`flash_tiled_many`] share: their key rows, the same
/// keys packed by [`pack_keys_t`] (from `lo`), their value rows.
pub struct TiledCells<'a> {
    pub scale: f32,
    pub softcap: Option<f32>,
    pub lo: usize,
    pub keys: &'a [f32],
    pub keys_t: &'a [f32],
    pub vals: &'a [f32],
}

impl TiledCells<'_> {
    /// A query alone (its row, cells `first..end`, sink, value width), as [`attend`] takes it.
    fn head<'a>(&'a self, q: &'a [f32], (first, end): (usize, usize), sink: Option<f32>, hdv: usize) -> Head<'a> {
        let hd = q.len();
        let (a, b) = (first - self.lo, end - self.lo);
        let tile = first / FLASH_TILE - self.lo / FLASH_TILE;
        Head {
            order: Order::Gemm,
            f16: false,
            scale: self.scale,
            softcap: self.softcap,
            sink,
            first,
            q,
            keys: &self.keys[a * hd..b * hd],
            vals: &self.vals[a * hdv..b * hdv],
            stride: [hd, hdv],
            keys_t: Some(&self.keys_t[tile * hd * FLASH_TILE..]),
        }
    }
}

/// [`Kind::FlashTiled`] for several queries over the same cells, each with the bits [`attend`]
/// gives it alone. With AVX-512 four queries run together, so that each K and V vector loaded
/// serves four.
pub fn flash_tiled_many(cells: &TiledCells, queries: &mut [TiledQuery]) {
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx2")
        && is_x86_feature_detected!("fma")
        && is_x86_feature_detected!("f16c")
    {
        // SAFETY: the CPU has the features the function is compiled for.
        return unsafe { tiled_many_avx512(cells, queries) };
    }
    for q in queries {
        let h = cells.head(q.q, (q.first, q.end), q.sink, q.out.len());
        attend(Kind::FlashTiled, &h, &mut Vec::new(), &mut Vec::new(), q.out);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c,avx512f")]
unsafe fn tiled_many_avx512(cells: &TiledCells, queries: &mut [TiledQuery]) {
    let mut rest = &mut queries[..];
    if queries_fit(cells, rest) {
        let mut fours = rest.chunks_exact_mut(4);
        for four in &mut fours {
            if let [a, b, c, d] = four {
                tiled4(cells, [a, b, c, d]);
            }
        }
        rest = fours.into_remainder();
    }
    for q in rest {
        let h = cells.head(q.q, (q.first, q.end), q.sink, q.out.len());
        flash_tiled::<true, true>(&h, q.out);
    }
}

/// P·V of one query's `cells` (of the tile at `t0`, weights `e`; value rows from `vals`)
/// into `out` (no closure: it would not inherit the caller's target features).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn pv_cells(cells: Range<usize>, t0: usize, e: &[f32; FLASH_TILE], vals: *const f32, out: &mut [f32]) {
    if !cells.is_empty() {
        let vals = std::slice::from_raw_parts(vals, cells.len() * out.len());
        x86::pv_rows_z(&e[cells.start - t0..cells.end - t0], vals, out);
    }
}

/// Whether [`tiled4`] takes these queries: one head dim and one value width (a multiple of
/// 16) for all.
fn queries_fit(cells: &TiledCells, queries: &[TiledQuery]) -> bool {
    let Some(q0) = queries.first() else { return false };
    let (hd, hdv) = (q0.q.len(), q0.out.len());
    hdv.is_multiple_of(16)
        && queries
            .iter()
            .all(|q| q.q.len() == hd && q.out.len() == hdv && q.first >= cells.lo && q.end > q.first)
        && queries.iter().all(|q| {
            let tiles = (q.end - cells.lo / FLASH_TILE * FLASH_TILE).div_ceil(FLASH_TILE);
            cells.keys_t.len() >= tiles * hd * FLASH_TILE && cells.vals.len() >= (q.end - cells.lo) * hdv
        })
}

/// [`flash_tiled`] (X86, Z) of four queries at once ([`queries_fit`]): per tile the four
/// score rows from one pass over the keys, each query's softmax step alone, then P·V with
/// each query's cells in order: those before the four's common run, the run (four at once),
/// those after.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn tiled4(cells: &TiledCells, mut qs: [&mut TiledQuery; 4]) {
    const TILE: usize = FLASH_TILE;
    let (hd, hdv) = (qs[0].q.len(), qs[0].out.len());
    let mut st: [Online; 4] = [
        Online::new(qs[0].out),
        Online::new(qs[1].out),
        Online::new(qs[2].out),
        Online::new(qs[3].out),
    ];
    let first = qs.iter().map(|q| q.first).min().unwrap_or(0);
    let end = qs.iter().map(|q| q.end).max().unwrap_or(0);
    let base = cells.lo / TILE;
    let q = [qs[0].q.as_ptr(), qs[1].q.as_ptr(), qs[2].q.as_ptr(), qs[3].q.as_ptr()];
    let vrow = |c: usize| cells.vals.as_ptr().add((c - cells.lo) * hdv);
    let mut t0 = first / TILE * TILE;
    while t0 < end {
        let kt = &cells.keys_t[(t0 / TILE - base) * hd * TILE..(t0 / TILE - base + 1) * hd * TILE];
        let mut raw = [[0f32; TILE]; 4];
        x86::kq_tile_z4(q, hd, kt, &mut raw);
        let mut e = [[0f32; TILE]; 4];
        let mut runs: [Option<Range<usize>>; 4] = [None, None, None, None];
        for j in 0..4 {
            let (lo, hi) = (t0.max(qs[j].first), (t0 + TILE).min(qs[j].end));
            if lo < hi && st[j].tile::<true>((cells.scale, cells.softcap), &raw[j], t0, lo..hi, &mut e[j], qs[j].out) {
                runs[j] = Some(lo..hi);
            }
        }
        let common = match &runs {
            [Some(r0), Some(r1), Some(r2), Some(r3)] => {
                let c0 = r0.start.max(r1.start).max(r2.start).max(r3.start);
                let c1 = r0.end.min(r1.end).min(r2.end).min(r3.end);
                (c0 < c1).then_some(c0..c1)
            }
            _ => None,
        };
        match common {
            Some(cr) => {
                for j in 0..4 {
                    let r = runs[j].clone().unwrap_or_default();
                    pv_cells(r.start..cr.start, t0, &e[j], vrow(r.start), qs[j].out);
                }
                let ep = [
                    e[0].as_ptr().add(cr.start - t0),
                    e[1].as_ptr().add(cr.start - t0),
                    e[2].as_ptr().add(cr.start - t0),
                    e[3].as_ptr().add(cr.start - t0),
                ];
                let op = [
                    qs[0].out.as_mut_ptr(),
                    qs[1].out.as_mut_ptr(),
                    qs[2].out.as_mut_ptr(),
                    qs[3].out.as_mut_ptr(),
                ];
                x86::pv_rows_z4(ep, cr.len(), vrow(cr.start), hdv, op);
                for j in 0..4 {
                    let r = runs[j].clone().unwrap_or_default();
                    pv_cells(cr.end..r.end, t0, &e[j], vrow(cr.end), qs[j].out);
                }
            }
            None => {
                for j in 0..4 {
                    if let Some(r) = runs[j].clone() {
                        pv_cells(r.clone(), t0, &e[j], vrow(r.start), qs[j].out);
                    }
                }
            }
        }
        t0 += TILE;
    }
    for (st, q) in st.into_iter().zip(qs.iter_mut()) {
        st.finish(q.sink, q.out);
    }
}

/// One query's online softmax through the tiles of [`flash_tiled`]: the running max and sum.
struct Online {
    m: f32,
    s: f32,
}

impl Online {
    /// Starts a query, zeroing its accumulator.
    fn new(out: &mut [f32]) -> Online {
        out.fill(0.0);
        Online {
            m: f32::NEG_INFINITY,
            s: 0.0,
        }
    }

    /// One tile (cells `t0..t0 + FLASH_TILE`, of which `cells` are the query's) from its raw
    /// scores: scaled (and capped: ggml folds a softcap into the scale, tanh(s · scale / cap) ·
    /// cap), the max moved on with the accumulator and the sum rescaled, `e` set to the cells'
    /// exps (zero elsewhere) and their sum added in f64. False when the tile has nothing to add.
    #[inline(always)]
    fn tile<const X86: bool>(
        &mut self,
        (scale, softcap): (f32, Option<f32>),
        raw: &[f32; FLASH_TILE],
        t0: usize,
        cells: Range<usize>,
        e: &mut [f32; FLASH_TILE],
        out: &mut [f32],
    ) -> bool {
        let (lo, hi) = (cells.start - t0, cells.end - t0);
        let scale = softcap.map_or(scale, |cap| scale / cap);
        let mut kq = [0f32; FLASH_TILE];
        for c in lo..hi {
            let v = raw[c] * scale;
            kq[c] = softcap.map_or(v, |cap| cap * v.tanh());
        }
        let tile_max = kq[lo..hi].iter().copied().fold(f32::NEG_INFINITY, f32::max);
        if tile_max == f32::NEG_INFINITY {
            return false;
        }
        let mnew = self.m.max(tile_max);
        if mnew > self.m {
            let ms = (self.m - mnew).exp();
            for o in out.iter_mut() {
                *o *= ms;
            }
            self.s *= ms;
        }
        self.m = mnew;
        #[cfg(target_arch = "x86_64")]
        if X86 {
            e[lo..hi].copy_from_slice(&kq[lo..hi]);
            // SAFETY: the caller runs with AVX2 and FMA (`attend_fma`).
            unsafe { x86::exp_minus(&mut e[lo..hi], mnew) };
        }
        if !X86 || cfg!(not(target_arch = "x86_64")) {
            for c in lo..hi {
                e[c] = expf(kq[c] - mnew);
            }
        }
        let sum: f64 = e
            .chunks_exact(16)
            .map(|c| reduce16(c.try_into().unwrap_or(&[0.0; 16])) as f64)
            .sum();
        self.s = (self.s as f64 + sum) as f32;
        true
    }

    /// The sink, then the division by the sum.
    fn finish(mut self, sink: Option<f32>, out: &mut [f32]) {
        apply_sink(sink, self.m, &mut self.s, out);
        let inv = if self.s == 0.0 { 0.0 } else { 1.0 / self.s };
        for o in out.iter_mut() {
            *o *= inv;
        }
    }
}

/// One head through ggml's `flash_attn_ext_f16_one_chunk`: one pass with an online softmax
/// (`expf`), the V accumulator kept in the cache's type, so with an f16 cache every update
/// (`ggml_vec_mad_f16`, `ggml_vec_scale_f16`) rounds to f16.
#[inline(always)]
fn flash_chunk<const X86: bool>(h: &Head, out: &mut [f32]) {
    let (hd, hdv) = (h.q.len(), out.len());
    let scale = h.softcap.map_or(h.scale, |cap| h.scale / cap);
    let (mut m, mut sum) = (f32::NEG_INFINITY, 0f32);
    out.fill(0.0);
    let [ks, vs] = h.stride;
    // Rows `ks` / `vs` apart, the last one just long enough.
    let n = (h.keys.len() + ks).saturating_sub(hd) / ks.max(1);
    for j in 0..n {
        let (k, v) = (&h.keys[j * ks..j * ks + hd], &h.vals[j * vs..j * vs + hdv]);
        let dot = dot_vec_any::<X86>(h.f16, h.q, k);
        let s = dot * scale;
        let s = h.softcap.map_or(s, |cap| cap * s.tanh());
        let (mut ms, mut vs) = (1f32, 1f32);
        if s > m {
            ms = (m - s).exp();
            m = s;
            scale_acc::<X86>(out, ms, h.f16);
        } else {
            vs = (s - m).exp();
        }
        mad_acc::<X86>(out, v, vs, h.f16);
        sum = sum.mul_add(ms, vs);
    }
    apply_sink(h.sink, m, &mut sum, out);
    let inv = if sum == 0.0 { 0.0 } else { 1.0 / sum };
    for o in out.iter_mut() {
        *o *= inv;
    }
}

/// `out[i] = r(out[i] · s)`, `r` rounding to f16 with an f16 cache (`ggml_vec_scale_f16`,
/// `_f32`).
#[inline(always)]
fn scale_acc<const X86: bool>(out: &mut [f32], s: f32, f16: bool) {
    #[cfg(target_arch = "x86_64")]
    if X86 {
        // SAFETY: the caller runs with AVX2, FMA and F16C (`attend_fma`).
        return unsafe { x86::scale_round(out, s, f16) };
    }
    for o in out.iter_mut() {
        *o *= s;
    }
    if f16 {
        out.iter_mut().for_each(|o| *o = half::f16::from_f32(*o).to_f32());
    }
}

/// `out[i] = r(v[i] · s + out[i])`, one fused multiply-add, `r` as in [`scale_acc`]
/// (`ggml_vec_mad_f16`, `_f32`).
#[inline(always)]
fn mad_acc<const X86: bool>(out: &mut [f32], v: &[f32], s: f32, f16: bool) {
    #[cfg(target_arch = "x86_64")]
    if X86 {
        // SAFETY: as in `scale_acc`.
        return unsafe { x86::mad_round(out, v, s, f16) };
    }
    for (o, &x) in out.iter_mut().zip(v) {
        *o = x.mul_add(s, *o);
    }
    if f16 {
        out.iter_mut().for_each(|o| *o = half::f16::from_f32(*o).to_f32());
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

#[cfg(target_arch = "x86_64")]
pub(crate) mod x86;

#[cfg(test)]
mod tests;
