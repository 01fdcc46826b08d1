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
        keys_t: _,
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
unsafe fn tiled4(cells: &TiledCells, qs: [&mut TiledQuery; 4]) {
    const TILE: usize = FLASH_TILE;
    let (hd, hdv) = (qs[0].q.len(), qs[0].out.len());
    let [a, b, c, d] = qs;
    let mut qs = [a, b, c, d];
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
    for (k, v) in h.keys.chunks_exact(hd).zip(h.vals.chunks_exact(hdv)) {
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
                                *a = _mm256_fmadd_ps(
                                    _mm256_loadu_ps(v.add(c * hdv + dc)),
                                    _mm256_set1_ps(*p.add(c)),
                                    *a,
                                );
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
    pub unsafe fn pv_lanes_z<const NL: usize>(
        scores: &[f32],
        vals: &[f32],
        first: usize,
        hdv: usize,
        lanes: &mut [f32],
    ) {
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
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|x| x.to_bits()).collect()
    }

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
    /// Queries run together through the tiled kernel each keep the bits of their own run: ends
    /// inside a tile, at a tile's edge and in the next tile, starts that differ (a window),
    /// sinks, a softcap, value widths the four-query kernel takes (64, 128) and one it leaves
    /// to the single one (24), and groups of four with leftovers.
    #[test]
    fn tiled_queries_together_keep_each_ones_bits() {
        let val = |i: usize, s: usize| ((i * s + 3) % 101) as f32 / 50.0 - 1.0;
        for (hd, hdv, lo, n) in [(64, 64, 0, 200), (64, 128, 5, 150), (40, 24, 0, 90)] {
            let keys: Vec<f32> = (0..n * hd).map(|i| val(i, 13)).collect();
            let vals: Vec<f32> = (0..n * hdv).map(|i| val(i, 29)).collect();
            let mut keys_t = Vec::new();
            pack_keys_t(&keys, hd, lo, &mut keys_t);
            for softcap in [None, Some(3.0)] {
                let cells = TiledCells {
                    scale: 0.125,
                    softcap,
                    lo,
                    keys: &keys,
                    keys_t: &keys_t,
                    vals: &vals,
                };
                // (first, end) per query: consecutive ends, a tile's edge, windows.
                let spans: Vec<(usize, usize)> = [
                    (lo, 64),
                    (lo, 65),
                    (lo, 66),
                    (lo, 67),
                    (lo, lo + n),
                    (lo + 20, lo + n - 1),
                    (lo + 3, 128),
                    (lo + 70, lo + n - 2),
                    (lo, 10),
                ]
                .into_iter()
                .filter(|&(f, e)| f < e && e <= lo + n)
                .collect();
                let rows: Vec<Vec<f32>> = (0..spans.len())
                    .map(|j| (0..hd).map(|i| val(i + 97 * j, 7)).collect())
                    .collect();
                let sink = |j: usize| (j % 3 == 1).then_some(0.5 * j as f32);
                let mut outs = vec![vec![f32::NAN; hdv]; spans.len()];
                let mut queries: Vec<TiledQuery> = outs
                    .iter_mut()
                    .enumerate()
                    .map(|(j, out)| TiledQuery {
                        q: &rows[j],
                        first: spans[j].0,
                        end: spans[j].1,
                        sink: sink(j),
                        out,
                    })
                    .collect();
                flash_tiled_many(&cells, &mut queries);
                for (j, &(first, end)) in spans.iter().enumerate() {
                    let h = cells.head(&rows[j], (first, end), sink(j), hdv);
                    let mut alone = vec![f32::NAN; hdv];
                    attend(Kind::FlashTiled, &h, &mut Vec::new(), &mut Vec::new(), &mut alone);
                    assert_eq!(
                        bits(&outs[j]),
                        bits(&alone),
                        "hd {hd} hdv {hdv} cap {softcap:?} query {j} cells {first}..{end}"
                    );
                }
            }
        }
    }

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
                            let mut keys_t = Vec::new();
                            pack_keys_t(&keys, hd, first, &mut keys_t);
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
                                keys_t: None,
                            };
                            let mut out = vec![f32::NAN; hdv];
                            attend(
                                kind,
                                &Head {
                                    keys_t: Some(&keys_t),
                                    ..h
                                },
                                &mut Vec::new(),
                                &mut Vec::new(),
                                &mut out,
                            );
                            // The portable body is the same operations in the same order.
                            let mut portable = vec![f32::NAN; hdv];
                            attend_body::<false, false>(kind, &h, &mut Vec::new(), &mut Vec::new(), &mut portable);
                            assert_eq!(
                                bits(&out),
                                bits(&portable),
                                "hd {hd} n {n} f16 {f16} kind {} order {}",
                                kind as u8,
                                order as u8
                            );
                            // And the 256-bit bodies, where `attend` took the 512-bit ones.
                            #[cfg(target_arch = "x86_64")]
                            if is_x86_feature_detected!("avx2")
                                && is_x86_feature_detected!("fma")
                                && is_x86_feature_detected!("f16c")
                            {
                                let mut narrow = vec![f32::NAN; hdv];
                                let ht = Head {
                                    keys_t: Some(&keys_t),
                                    ..h
                                };
                                // SAFETY: the features were detected.
                                unsafe { attend_fma(kind, &ht, &mut Vec::new(), &mut Vec::new(), &mut narrow) };
                                assert_eq!(
                                    bits(&narrow),
                                    bits(&portable),
                                    "avx2: hd {hd} n {n} f16 {f16} kind {}",
                                    kind as u8
                                );
                            }
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
