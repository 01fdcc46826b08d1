//! The prefill GEMM bodies of the AVX2 / AVX-512 VNNI tiers: packed 8-row panels × tokens
//! (see [`Gemm`](super::super::Gemm)). Instantiated with the dot bodies by `instantiate!`.

use std::arch::x86_64::*;

use super::*;

/// Transposes 8 rows of 8 dwords: out[j] holds dword j of every row, row r at dword r.
#[inline(always)]
pub(in crate::backend::cpu::dot) unsafe fn transpose8x32(r: [__m256i; 8]) -> [__m256i; 8] {
    let t = [
        _mm256_unpacklo_epi32(r[0], r[1]),
        _mm256_unpackhi_epi32(r[0], r[1]),
        _mm256_unpacklo_epi32(r[2], r[3]),
        _mm256_unpackhi_epi32(r[2], r[3]),
        _mm256_unpacklo_epi32(r[4], r[5]),
        _mm256_unpackhi_epi32(r[4], r[5]),
        _mm256_unpacklo_epi32(r[6], r[7]),
        _mm256_unpackhi_epi32(r[6], r[7]),
    ];
    // s[c]: dword c (low 128 bits) and c + 4 (high) of rows 0..4, then of rows 4..8.
    let s = [
        _mm256_unpacklo_epi64(t[0], t[2]),
        _mm256_unpackhi_epi64(t[0], t[2]),
        _mm256_unpacklo_epi64(t[1], t[3]),
        _mm256_unpackhi_epi64(t[1], t[3]),
        _mm256_unpacklo_epi64(t[4], t[6]),
        _mm256_unpackhi_epi64(t[4], t[6]),
        _mm256_unpacklo_epi64(t[5], t[7]),
        _mm256_unpackhi_epi64(t[5], t[7]),
    ];
    let lo = |c: usize| _mm256_permute2x128_si256(s[c], s[c + 4], 0x20);
    let hi = |c: usize| _mm256_permute2x128_si256(s[c], s[c + 4], 0x31);
    [lo(0), lo(1), lo(2), lo(3), hi(0), hi(1), hi(2), hi(3)]
}

/// Packs 8 rows of `B` into a panel: per block, the 8 scales as f32, then per group j of 4
/// quants 32 bytes: row r's quants 4j..4j+4, each + `B::OFF`, at byte 4r.
#[inline(always)]
pub(in crate::backend::cpu::dot) unsafe fn pack_signed<B: Signed>(n: usize, w: &[u8], stride: usize, panel: &mut [u8]) {
    let (x, p) = (w.as_ptr(), panel.as_mut_ptr());
    let off = _mm256_set1_epi8(B::OFF as i8);
    for b in 0..n / 32 {
        let pb = p.add(PANEL_BLOCK_BYTES * b);
        let mut d = [0f32; PANEL_ROWS];
        let mut q = [_mm256_setzero_si256(); PANEL_ROWS];
        for r in 0..PANEL_ROWS {
            let (dr, qr) = B::decode(x.add(stride * r + B::BYTES * b));
            d[r] = dr;
            q[r] = _mm256_add_epi8(qr, off);
        }
        std::ptr::write_unaligned(pb as *mut [f32; PANEL_ROWS], d);
        for (j, g) in transpose8x32(q).into_iter().enumerate() {
            _mm256_storeu_si256(pb.add(32 + 32 * j) as *mut __m256i, g);
        }
    }
}

/// `acc` + Σ of 4 adjacent u8·i8 products per i32 lane; without VNNI the i16 pair sums of
/// `maddubs` saturate unless u < 128 (see `gemm_table`).
#[inline(always)]
unsafe fn dpbusd<const V: bool>(acc: __m256i, u: __m256i, s: __m256i) -> __m256i {
    if V {
        _mm256_dpbusd_epi32(acc, u, s)
    } else {
        _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)))
    }
}

/// One panel × `T` tokens: acc[t] (lane r = row r) += dx·dy · (-off·Σy + Σ(q+off)·y) per
/// block, each activation group of 4 broadcast once for the 8 rows.
#[inline(always)]
unsafe fn gemm_tokens<const V: bool, const T: usize>(
    nb: usize,
    p: *const u8,
    a: *const u8,
    arb: usize,
    s: *const u8,
    out: *mut [f32; PANEL_ROWS],
) {
    let mut acc = [_mm256_setzero_ps(); T];
    for b in 0..nb {
        let pb = p.add(PANEL_BLOCK_BYTES * b);
        let sb = |t: usize| s.add(BLOCK_SUM_BYTES * nb * t + 8 * b);
        let mut sumi = [_mm256_setzero_si256(); T];
        for (t, si) in sumi.iter_mut().enumerate() {
            *si = _mm256_set1_epi32(u32u(sb(t).add(4)) as i32);
        }
        for j in 0..8 {
            let wq = ld256(pb.add(32 + 32 * j));
            for (t, si) in sumi.iter_mut().enumerate() {
                let y = _mm256_set1_epi32(u32u(a.add(t * arb + 34 * b + 2 + 4 * j)) as i32);
                *si = dpbusd::<V>(*si, wq, y);
            }
        }
        let dx = _mm256_loadu_ps(pb as *const f32);
        for (t, acc) in acc.iter_mut().enumerate() {
            let d = _mm256_mul_ps(dx, _mm256_set1_ps(f32u(sb(t))));
            *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi[t]), d, *acc);
        }
    }
    for (t, acc) in acc.into_iter().enumerate() {
        _mm256_storeu_ps(out.add(t) as *mut f32, acc);
    }
}

/// `Gemm::row`: one row of `B` × one token, each block's exact Σq·y (sign trick) scaled as
/// in lane r of `gemm_tokens`, so bit-identical to it: the same f32 product and fma per block.
#[inline(always)]
pub(in crate::backend::cpu::dot) unsafe fn gemm_row<const V: bool, B: Signed>(n: usize, w: &[u8], a: &[u8]) -> f32 {
    let (x, y, nb) = (w.as_ptr(), a.as_ptr(), n / 32);
    let mut acc = 0f32;
    let mut b = 0;
    while b + 4 <= nb {
        acc = row_blocks4::<V, B>(x, y, b, acc);
        b += 4;
    }
    for b in b..nb {
        acc = row_block::<V, B>(x, y, b, acc);
    }
    acc
}

/// [`gemm_row`] of two rows against one token, their chains interleaved: each row's bits.
#[inline(always)]
pub(in crate::backend::cpu::dot) unsafe fn gemm_row_r2<const V: bool, B: Signed>(
    n: usize,
    w: [&[u8]; 2],
    a: &[u8],
) -> [f32; 2] {
    let (x0, x1, y, nb) = (w[0].as_ptr(), w[1].as_ptr(), a.as_ptr(), n / 32);
    let (mut acc0, mut acc1) = (0f32, 0f32);
    let mut b = 0;
    while b + 4 <= nb {
        acc0 = row_blocks4::<V, B>(x0, y, b, acc0);
        acc1 = row_blocks4::<V, B>(x1, y, b, acc1);
        b += 4;
    }
    for b in b..nb {
        acc0 = row_block::<V, B>(x0, y, b, acc0);
        acc1 = row_block::<V, B>(x1, y, b, acc1);
    }
    [acc0, acc1]
}

/// Block `b` of row `x` against token `y`: (dx·dy, the 8 lanes of Σq·y).
#[inline(always)]
unsafe fn row_sums<const V: bool, B: Signed>(x: *const u8, y: *const u8, b: usize) -> (f32, __m256i) {
    let yb = y.add(34 * b);
    let (dx, qx) = B::decode(x.add(B::BYTES * b));
    let p = dot_us8::<V>(_mm256_sign_epi8(qx, qx), _mm256_sign_epi8(ld256(yb.add(2)), qx));
    (dx * f16(yb), p)
}

/// [`gemm_row`]'s chain over block `b`: `acc + Σq·y · dx·dy`, one fma.
#[inline(always)]
unsafe fn row_block<const V: bool, B: Signed>(x: *const u8, y: *const u8, b: usize, acc: f32) -> f32 {
    let (d, p) = row_sums::<V, B>(x, y, b);
    (hsum_i32(p) as f32).mul_add(d, acc)
}

/// [`row_block`] over blocks b..b + 4, their horizontal sums taken at once (the fma chain
/// stays one block at a time).
#[inline(always)]
unsafe fn row_blocks4<const V: bool, B: Signed>(x: *const u8, y: *const u8, b: usize, acc: f32) -> f32 {
    let [(d0, p0), (d1, p1), (d2, p2), (d3, p3)] = [
        row_sums::<V, B>(x, y, b),
        row_sums::<V, B>(x, y, b + 1),
        row_sums::<V, B>(x, y, b + 2),
        row_sums::<V, B>(x, y, b + 3),
    ];
    let h = _mm256_hadd_epi32(_mm256_hadd_epi32(p0, p1), _mm256_hadd_epi32(p2, p3));
    let s = _mm_cvtepi32_ps(_mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1)));
    let mut si = [0f32; 4];
    _mm_storeu_ps(si.as_mut_ptr(), s);
    let mut acc = acc;
    for (si, d) in si.into_iter().zip([d0, d1, d2, d3]) {
        acc = si.mul_add(d, acc);
    }
    acc
}

/// One panel × `T` tokens in ggml's lane order (tinyBLAS, `ggml_vec_dot_*_q8_0`; its row
/// kernel is `dot_signed`): each
/// (row, token) keeps 8 f32 lanes, lane j the running Σ over blocks of dx·dy · (the i32 sum of
/// quants 4j..4j+4), reduced by `hsum_float_8` only at the end. Held transposed: acc[t][j]
/// has row r's lane j at lane r, so a panel group advances all 8 rows with one `vpdpbusd`.
#[inline(always)]
unsafe fn lanes_tokens<const V: bool, const T: usize>(
    nb: usize,
    p: *const u8,
    a: *const u8,
    arb: usize,
    s: *const u8,
    out: *mut [f32; PANEL_ROWS],
) {
    let mut acc = [[_mm256_setzero_ps(); 8]; T];
    for b in 0..nb {
        let pb = p.add(PANEL_BLOCK_BYTES * b);
        let dx = _mm256_loadu_ps(pb as *const f32);
        for (t, acc) in acc.iter_mut().enumerate() {
            let st = s.add(BLOCK_SUM_BYTES * nb * t);
            let d = _mm256_mul_ps(dx, _mm256_set1_ps(f32u(st.add(8 * b))));
            let corr = st.add(8 * nb + 32 * b);
            let y = a.add(t * arb + 34 * b + 2);
            for (j, acc) in acc.iter_mut().enumerate() {
                let init = _mm256_set1_epi32(u32u(corr.add(4 * j)) as i32);
                let yj = _mm256_set1_epi32(u32u(y.add(4 * j)) as i32);
                let pj = dpbusd::<V>(init, ld256(pb.add(32 + 32 * j)), yj);
                *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(pj), d, *acc);
            }
        }
    }
    for (t, l) in acc.iter().enumerate() {
        // hsum_float_8: ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)), for 8 rows at once.
        let even = _mm256_add_ps(_mm256_add_ps(l[0], l[4]), _mm256_add_ps(l[2], l[6]));
        let odd = _mm256_add_ps(_mm256_add_ps(l[1], l[5]), _mm256_add_ps(l[3], l[7]));
        _mm256_storeu_ps(out.add(t) as *mut f32, _mm256_add_ps(even, odd));
    }
}

/// `Gemm::tile`: runs of tokens through `gemm_tokens` (block sums: 8 tokens at a time under
/// VNNI, 16 accumulators of the 32 registers, 4 on AVX2) or `lanes_tokens` (ggml's lane
/// order: 2 under VNNI), then one at a time.
#[inline(always)]
pub(in crate::backend::cpu::dot) unsafe fn gemm_tile<const V: bool, const LANES: bool>(
    n: usize,
    panel: &[u8],
    act: &[u8],
    arb: usize,
    sums: &[u8],
    out: &mut [[f32; PANEL_ROWS]],
) {
    let (nb, nt) = (n / 32, out.len());
    let (p, a, s, o) = (panel.as_ptr(), act.as_ptr(), sums.as_ptr(), out.as_mut_ptr());
    let tok = |t: usize| (a.add(arb * t), s.add(BLOCK_SUM_BYTES * nb * t), o.add(t));
    let step = match (LANES, V) {
        (false, true) => 8,
        (false, false) => 4,
        (true, true) => 2,
        (true, false) => 1,
    };
    let mut t = 0;
    while t + step <= nt {
        let (a, s, o) = tok(t);
        match (LANES, V) {
            (false, true) => gemm_tokens::<V, 8>(nb, p, a, arb, s, o),
            (false, false) => gemm_tokens::<V, 4>(nb, p, a, arb, s, o),
            (true, true) => lanes_tokens::<V, 2>(nb, p, a, arb, s, o),
            (true, false) => lanes_tokens::<V, 1>(nb, p, a, arb, s, o),
        }
        t += step;
    }
    while t < nt {
        let (a, s, o) = tok(t);
        if LANES {
            lanes_tokens::<V, 1>(nb, p, a, arb, s, o);
        } else {
            gemm_tokens::<V, 1>(nb, p, a, arb, s, o);
        }
        t += 1;
    }
}

// --- q4_K panels ---------------------------------------------------------------------------

/// Offsets in a q4_K panel block ([`K4_PANEL_BLOCK_BYTES`]): the 8 rows' d and dmin as f32,
/// their 8 sub-block scales as i32 (sub-block-major, row r at dword r), their mins as i16
/// pairs (per 64 quants j: row r's mins of sub-blocks 2j and 2j+1 at dword r), then the
/// quants: per 64 quants j and group g of 4 bytes, row r's bytes qs[32j + 4g..][..4] at byte
/// 4r (low nibbles: sub-block 2j, high: 2j+1).
const K4P_DMIN: usize = 32;
const K4P_SCALES: usize = 64;
const K4P_MINS: usize = K4P_SCALES + 32 * 8;
const K4P_QS: usize = K4P_MINS + 32 * 4;
const _: () = assert!(K4P_QS + 32 * 32 == K4_PANEL_BLOCK_BYTES);

/// Packs 8 q4_K rows (block_q4_K {d @0, dmin @2, scales[12] @4, qs[128] @16}) into a panel.
#[inline(always)]
pub(in crate::backend::cpu::dot) unsafe fn pack_q4_k(n: usize, w: &[u8], stride: usize, panel: &mut [u8]) {
    let (x, p) = (w.as_ptr(), panel.as_mut_ptr());
    for b in 0..n / 256 {
        let pb = p.add(K4_PANEL_BLOCK_BYTES * b);
        let mut d = [[0f32; PANEL_ROWS]; 2];
        let mut sc = [[0i32; PANEL_ROWS]; 8];
        let mut mn = [[0u32; PANEL_ROWS]; 4];
        for r in 0..PANEL_ROWS {
            let xb = x.add(stride * r + 144 * b);
            (d[0][r], d[1][r]) = f16x2(xb);
            let mut packed = [0u8; 12];
            std::ptr::copy_nonoverlapping(xb.add(4), packed.as_mut_ptr(), 12);
            for s in 0..8 {
                let (scale, min) = crate::quant::get_scale_min_k4(s, &packed);
                sc[s][r] = scale as i32;
                if s % 2 == 0 {
                    mn[s / 2][r] = min as u32;
                } else {
                    mn[s / 2][r] |= (min as u32) << 16;
                }
            }
        }
        std::ptr::write_unaligned(pb as *mut [[f32; PANEL_ROWS]; 2], d);
        std::ptr::write_unaligned(pb.add(K4P_SCALES) as *mut [[i32; PANEL_ROWS]; 8], sc);
        std::ptr::write_unaligned(pb.add(K4P_MINS) as *mut [[u32; PANEL_ROWS]; 4], mn);
        for j in 0..4 {
            let rows: [__m256i; PANEL_ROWS] = std::array::from_fn(|r| ld256(x.add(stride * r + 144 * b + 16 + 32 * j)));
            for (g, v) in transpose8x32(rows).into_iter().enumerate() {
                _mm256_storeu_si256(pb.add(K4P_QS + 32 * (8 * j + g)) as *mut __m256i, v);
            }
        }
    }
}

/// One q4_K panel × `T` tokens (q8_K rows at `y[t]`): each (row, token) keeps the two f32
/// chains of `q4_k` (quants, mins) in lane r of a register, fed by the same exact i32 sums,
/// so its bits are those of the row's own kernel. `GEMV`: one fma per block (`q4_k`, ggml's
/// repacked GEMV); else one per 64 quants (`q4_k_x4`, its repacked GEMM).
#[inline(always)]
unsafe fn q4_k_panel_tokens<const V: bool, const T: usize, const GEMV: bool>(
    nb: usize,
    p: *const u8,
    y: [*const u8; T],
) -> [__m256; T] {
    let m4 = _mm256_set1_epi8(0xF);
    let mut acc = [_mm256_setzero_ps(); T];
    let mut acc_m = [_mm256_setzero_ps(); T];
    for b in 0..nb {
        let pb = p.add(K4_PANEL_BLOCK_BYTES * b);
        let yb: [*const u8; T] = std::array::from_fn(|t| y[t].add(292 * b));
        let (dx, dmin) = (
            _mm256_loadu_ps(pb as *const f32),
            _mm256_loadu_ps(pb.add(K4P_DMIN) as *const f32),
        );
        let mut s_blk = [_mm256_setzero_si256(); T];
        let mut m_blk = [_mm256_setzero_si256(); T];
        for j in 0..4 {
            let mut lo = [_mm256_setzero_si256(); T];
            let mut hi = [_mm256_setzero_si256(); T];
            for g in 0..8 {
                let q = ld256(pb.add(K4P_QS + 32 * (8 * j + g)));
                let (ql, qh) = (_mm256_and_si256(q, m4), _mm256_and_si256(_mm256_srli_epi16(q, 4), m4));
                for t in 0..T {
                    let q8 = yb[t].add(4 + 64 * j + 4 * g);
                    lo[t] = dpbusd::<V>(lo[t], ql, _mm256_set1_epi32(u32u(q8) as i32));
                    hi[t] = dpbusd::<V>(hi[t], qh, _mm256_set1_epi32(u32u(q8.add(32)) as i32));
                }
            }
            let (sl, sh) = (
                ld256(pb.add(K4P_SCALES + 64 * j)),
                ld256(pb.add(K4P_SCALES + 64 * j + 32)),
            );
            let mins = ld256(pb.add(K4P_MINS + 32 * j));
            for t in 0..T {
                let s = _mm256_add_epi32(_mm256_mullo_epi32(lo[t], sl), _mm256_mullo_epi32(hi[t], sh));
                // The q8_K sums of sub-blocks 2j and 2j+1 (two i16 bsums each).
                let bs = yb[t].add(260 + 8 * j);
                let rd = |i: usize| std::ptr::read_unaligned(bs.add(2 * i) as *const i16) as i32;
                let (b0, b1) = (rd(0) + rd(1), rd(2) + rd(3));
                let pair = (b0 as u32 & 0xFFFF) | ((b1 as u32) << 16);
                let m = _mm256_madd_epi16(mins, _mm256_set1_epi32(pair as i32));
                if GEMV {
                    s_blk[t] = _mm256_add_epi32(s_blk[t], s);
                    m_blk[t] = _mm256_add_epi32(m_blk[t], m);
                } else {
                    let dy = _mm256_set1_ps(f32u(yb[t]));
                    acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(dx, dy), acc[t]);
                    acc_m[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(m), _mm256_mul_ps(dmin, dy), acc_m[t]);
                }
            }
        }
        if GEMV {
            for t in 0..T {
                let dy = _mm256_set1_ps(f32u(yb[t]));
                acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s_blk[t]), _mm256_mul_ps(dx, dy), acc[t]);
                acc_m[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(m_blk[t]), _mm256_mul_ps(dmin, dy), acc_m[t]);
            }
        }
    }
    std::array::from_fn(|t| _mm256_sub_ps(acc[t], acc_m[t]))
}

/// `KPanel::quads` / `singles`: the listed tokens through `q4_k_panel_tokens`, 4 at a time
/// under VNNI (32 registers), 2 on AVX2, then one at a time.
#[inline(always)]
pub(in crate::backend::cpu::dot) unsafe fn q4_k_panel<const V: bool, const GEMV: bool>(
    n: usize,
    panel: &[u8],
    act: &[u8],
    arb: usize,
    tokens: &[usize],
    out: &mut [[f32; PANEL_ROWS]],
) {
    let (nb, p, a) = (n / 256, panel.as_ptr(), act.as_ptr());
    let step = if V { 4 } else { 2 };
    let mut i = 0;
    while i + step <= tokens.len() {
        let r = if V {
            let y: [*const u8; 4] = std::array::from_fn(|t| a.add(arb * tokens[i + t]));
            let r = q4_k_panel_tokens::<V, 4, GEMV>(nb, p, y);
            for (t, v) in r.into_iter().enumerate() {
                _mm256_storeu_ps(out[i + t].as_mut_ptr(), v);
            }
            4
        } else {
            let y: [*const u8; 2] = std::array::from_fn(|t| a.add(arb * tokens[i + t]));
            let r = q4_k_panel_tokens::<V, 2, GEMV>(nb, p, y);
            for (t, v) in r.into_iter().enumerate() {
                _mm256_storeu_ps(out[i + t].as_mut_ptr(), v);
            }
            2
        };
        i += r;
    }
    for i in i..tokens.len() {
        let [v] = q4_k_panel_tokens::<V, 1, GEMV>(nb, p, [a.add(arb * tokens[i])]);
        _mm256_storeu_ps(out[i].as_mut_ptr(), v);
    }
}
