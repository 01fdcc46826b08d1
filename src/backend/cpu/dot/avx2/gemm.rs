//! The prefill GEMM bodies of the AVX2 / AVX-512 VNNI tiers: packed 8-row panels × tokens
//! (see [`Gemm`](super::super::Gemm)). Instantiated with the dot bodies by `instantiate!`.

use std::arch::x86_64::*;

use super::*;

/// Transposes 8 rows of 8 dwords: out[j] holds dword j of every row, row r at dword r.
#[inline(always)]
unsafe fn transpose8x32(r: [__m256i; 8]) -> [__m256i; 8] {
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
    // (a fn, not a closure: closures do not inherit the caller's target features)
    #[inline(always)]
    unsafe fn blk<const V: bool, B: Signed>(x: *const u8, y: *const u8, b: usize) -> (f32, __m256i) {
        let yb = y.add(34 * b);
        let (dx, qx) = B::decode(x.add(B::BYTES * b));
        let p = dot_us8::<V>(_mm256_sign_epi8(qx, qx), _mm256_sign_epi8(ld256(yb.add(2)), qx));
        (dx * f16(yb), p)
    }
    let mut acc = 0f32;
    let mut b = 0;
    // Four blocks' horizontal sums at once; the fma chain stays one block at a time.
    while b + 4 <= nb {
        let [(d0, p0), (d1, p1), (d2, p2), (d3, p3)] = [
            blk::<V, B>(x, y, b),
            blk::<V, B>(x, y, b + 1),
            blk::<V, B>(x, y, b + 2),
            blk::<V, B>(x, y, b + 3),
        ];
        let h = _mm256_hadd_epi32(_mm256_hadd_epi32(p0, p1), _mm256_hadd_epi32(p2, p3));
        let s = _mm_cvtepi32_ps(_mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1)));
        let mut si = [0f32; 4];
        _mm_storeu_ps(si.as_mut_ptr(), s);
        for (si, d) in si.into_iter().zip([d0, d1, d2, d3]) {
            acc = si.mul_add(d, acc);
        }
        b += 4;
    }
    for b in b..nb {
        let (d, p) = blk::<V, B>(x, y, b);
        acc = (hsum_i32(p) as f32).mul_add(d, acc);
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
