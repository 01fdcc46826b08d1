//! Quantized dot products: one weight row (raw GGUF blocks) against one activation row
//! quantized to the weight type's ggml `vec_dot_type`, for every qtype, on every ISA.
//!
//! `scalar.rs` is the oracle and the fallback; `avx2/` (its prefill GEMM in `avx2/gemm.rs`),
//! `avx512.rs` and `neon.rs` hold the SIMD kernels. [`Isa`] is a table of function
//! pointers per ISA, chosen once at startup.
//! Every kernel is tested against the scalar one (tests at the bottom of this file).
//! [`Gemm`] holds the prefill kernels over packed 8-row panels (x86: `avx2/gemm.rs`).
//!
//! Adding a qtype: its scalar kernel in `scalar.rs`, one entry in its `DOT` (in table order,
//! checked at compile time); SIMD kernels override the scalar entry where they exist (the x86
//! ISAs are tested to cover every weight type). The activation format comes from the qtype
//! table ([`act_type`]).

mod scalar;

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
// Also built for tests elsewhere, against a scalar model of the intrinsics.
#[cfg(any(target_arch = "aarch64", test))]
mod neon;

use std::sync::OnceLock;

use crate::error::{Error, Result};
use crate::quant::QType;

/// Dot product of one weight row of `n` elements (raw GGUF bytes, any alignment) with one
/// activation row of `n` elements in `act_type(w)` format. Panics if either slice is shorter
/// than `n` elements need or `n` is not a whole number of blocks of either type.
pub type DotFn = fn(n: usize, w: &[u8], a: &[u8]) -> f32;

/// One weight row against four activation rows (the weight is decoded once): the prefill
/// micro-kernel. Same contract as [`DotFn`] for each of the four rows.
pub type DotX4Fn = fn(n: usize, w: &[u8], a: [&[u8]; 4]) -> [f32; 4];

/// Two weight rows against one activation row (the activation block is loaded once and the
/// two rows' accumulator chains interleave): the decode micro-kernel. Each row's result has
/// the bits of the single-row kernel it stands for ([`Isa::dot_r2`], [`Gemm::row2`]).
pub type DotR2Fn = fn(n: usize, w: [&[u8]; 2], a: &[u8]) -> [f32; 2];

/// Weight rows per packed panel of a [`Gemm`].
pub const PANEL_ROWS: usize = 8;

/// Bytes of a panel per 32-element block: the rows' scales as f32, then for each group of 4
/// quants the 8 rows' 4 bytes, row-major ([`Gemm`]).
pub const PANEL_BLOCK_BYTES: usize = 4 * PANEL_ROWS + 32 * PANEL_ROWS;

/// Tokens from which llama.cpp multiplies K-quants through its tiled GEMM.
pub const TILED_MIN_TOKENS: usize = 8;

/// Bytes per q8_0 activation block in a [`block_sums`] row: d as f32 and -off·Σq as i32, then
/// -off·Σq of each group of 4 quants as i32 (in two runs, see [`block_sums`]).
pub const BLOCK_SUM_BYTES: usize = 40;

/// Packs [`PANEL_ROWS`] weight rows of `n` elements, `stride` bytes apart in `w`, into
/// `panel` (`n / 32 * PANEL_BLOCK_BYTES` bytes).
pub type PackFn = fn(n: usize, w: &[u8], stride: usize, panel: &mut [u8]);

/// One panel × `out.len()` tokens: `out[t][r]` = row r · token t. Token t's q8_0 activation
/// row starts at `act[t * arb]`, its [`block_sums`] (with the [`Gemm`]'s `off`) at
/// `sums[t * n / 32 * BLOCK_SUM_BYTES]`.
pub type TileFn = fn(n: usize, panel: &[u8], act: &[u8], arb: usize, sums: &[u8], out: &mut [[f32; PANEL_ROWS]]);

/// The prefill micro-kernels of a 32-element signed weight type against q8_0 activations, in
/// the spirit of ggml's repacked GEMMs: [`PANEL_ROWS`] weight rows are decoded once into a
/// panel of unsigned bytes `q + off` interleaved by groups of 4, so that one u8×i8 4-way dot
/// (`vpdpbusd`) of a panel group with a broadcast activation group advances all 8 rows. The `off`
/// is taken back out exactly through the activation block sums: Σ(q+off)·y - off·Σy = Σq·y.
/// Two summation orders, each that of the llama.cpp kernel for the type on x86: one i32 per
/// block and (8 rows × tokens) accumulators (its repacked GEMMs: q4_0, iq4_nl, mxfp4), or
/// 8 i32 lanes per block kept apart until the end (tinyBLAS and `ggml_vec_dot_*_q8_0`: q5_0,
/// q8_0), with per-group offset sums.
#[derive(Clone, Copy)]
pub struct Gemm {
    /// The offset making every quant of the type a byte 0..=255.
    pub off: i32,
    /// Packs [`PANEL_ROWS`] rows into a panel ([`PackFn`]).
    pub pack: PackFn,
    /// One panel × tokens ([`TileFn`]).
    pub tile: TileFn,
    /// One row against one token without a panel ([`DotFn`]), for batches too small to pay
    /// for packing and for rows outside whole panels. Bit-identical to `tile`, so
    /// that a prompt's logits do not depend on how it is batched.
    pub row: DotFn,
    /// `row` for two weight rows at once, bit-identical to it, where there is one.
    pub row2: Option<DotR2Fn>,
    /// `tile` over two panels packed back to back (16 rows), where the ISA has the registers
    /// for it: the same operations per (row, token).
    pub wide: Option<TileWideFn>,
}

/// Two panels back to back × `out.len()` tokens: `out[t][r]` = row r (of 16) · token t, as
/// [`TileFn`].
pub type TileWideFn = fn(n: usize, panels: &[u8], act: &[u8], arb: usize, sums: &[u8], out: &mut [[f32; WIDE_ROWS]]);

/// The wide tile of a [`Gemm`] from its `unsafe` body, bounds-checked.
macro_rules! gemm_wide_fn {
    ($tile:path) => {{
        fn tile(n: usize, panels: &[u8], act: &[u8], arb: usize, sums: &[u8], out: &mut [[f32; 16]]) {
            use $crate::backend::cpu::dot::PANEL_BLOCK_BYTES;
            assert!(
                panels.len() >= 2 * (n / 32 * PANEL_BLOCK_BYTES),
                "{n}-wide double panel: {} bytes",
                panels.len()
            );
            $crate::backend::cpu::dot::check_acts(n, act, arb, sums, out.len());
            // SAFETY: as in `dot_fn!`.
            unsafe { $tile(n, panels, act, arb, sums, out) }
        }
        tile as $crate::backend::cpu::dot::TileWideFn
    }};
}

/// Bytes of a q4_K panel per 256-element block ([`KPanel`]).
pub const K4_PANEL_BLOCK_BYTES: usize = 1472;

/// One q4_K panel × the listed tokens: `out[i][r]` = row r · token `tokens[i]`, whose q8_K
/// activation row starts at `act[tokens[i] * arb]`.
pub type KTileFn = fn(n: usize, panel: &[u8], act: &[u8], arb: usize, tokens: &[usize], out: &mut [[f32; PANEL_ROWS]]);

/// The prefill micro-kernels of q4_K (ggml's repacked `q4_K_8x8` on x86): [`PANEL_ROWS`]
/// rows decoded once into a panel (scales and mins widened, quants interleaved by groups of 4
/// bytes, nibbles packed), so that one `vpdpbusd` of a panel group with a broadcast activation
/// group advances all 8 rows and no horizontal sum is left. Each (row, token) keeps the f32
/// chains of one of the row kernels, so a token's bits do not depend on the panel:
/// `quads` those of [`Isa::dot_x4`] (the tokens of a group's whole fours, ggml's GEMM order),
/// `singles` those of [`Isa::dot`] (the rest, its GEMV order).
#[derive(Clone, Copy)]
pub struct KPanel {
    pub pack: PackFn,
    pub quads: KTileFn,
    pub singles: KTileFn,
    /// The same over 16 rows at once, where the ISA has the registers for it.
    pub wide: Option<KPanelWide>,
}

/// Rows of a [`KPanelWide`] panel.
pub const WIDE_ROWS: usize = 16;

/// One 16-row q4_K panel × the listed tokens ([`KTileFn`] with 16 rows).
pub type KTileWideFn =
    fn(n: usize, panel: &[u8], act: &[u8], arb: usize, tokens: &[usize], out: &mut [[f32; WIDE_ROWS]]);

/// [`KPanel`]'s kernels over [`WIDE_ROWS`] rows: the same operations per (row, token).
#[derive(Clone, Copy)]
pub struct KPanelWide {
    /// Packs 16 rows (`stride` apart) into `2 * K4_PANEL_BLOCK_BYTES` bytes per block.
    pub pack: PackFn,
    pub quads: KTileWideFn,
    pub singles: KTileWideFn,
}

/// Weight rows per [`RowTileFn`] call.
pub const ROW_TILE: usize = 4;

/// [`ROW_TILE`] weight rows (`stride` bytes apart in `w`, read in place) × the listed
/// activation rows (`act[tokens[i] * arb..]`): `out[i][r]` = row r · token `tokens[i]`, with
/// the bits of [`Isa::dot`]. The prefill kernel of the float types, whose rows need no
/// decoding into a panel: each weight vector and each activation vector is loaded once for
/// several (row, token) pairs.
pub type RowTileFn =
    fn(n: usize, w: &[u8], stride: usize, act: &[u8], arb: usize, tokens: &[usize], out: &mut [[f32; ROW_TILE]]);

/// [`RowTileFn`] entry for `$wq` from its `unsafe` body, bounds-checked.
macro_rules! row_tile_fn {
    ($wq:ident, $k:path) => {{
        fn f(n: usize, w: &[u8], stride: usize, act: &[u8], arb: usize, tokens: &[usize], out: &mut [[f32; 4]]) {
            use $crate::backend::cpu::dot::{check_row_tile, QType};
            check_row_tile(n, w, stride, QType::$wq, (act, arb, tokens), out.len());
            // SAFETY: as in `dot_fn!`.
            unsafe { $k(n, w, stride, act, arb, tokens, out) }
        }
        ($crate::quant::QType::$wq, f as $crate::backend::cpu::dot::RowTileFn)
    }};
}

/// Bounds of a [`RowTileFn`] call: the weight rows, the listed activation rows, the outputs.
#[inline(always)]
fn check_row_tile(
    n: usize,
    w: &[u8],
    stride: usize,
    wq: QType,
    (act, arb, tokens): (&[u8], usize, &[usize]),
    out: usize,
) {
    check_rows_n(n, w, stride, wq, ROW_TILE);
    let ab = row_bytes(act_type(wq), n);
    let last = tokens.iter().copied().max();
    assert!(
        arb >= ab && out >= tokens.len() && last.is_none_or(|t| act.len() >= t * arb + ab),
        "{} row tile of {} tokens × {n}: activations {} bytes {arb} apart, {out} outputs",
        wq.name(),
        tokens.len(),
        act.len()
    );
}

/// Bounds of `rows` rows of `n` elements, `stride` bytes apart in `w`.
#[inline(always)]
fn check_rows_n(n: usize, w: &[u8], stride: usize, wq: QType, rows: usize) {
    let rb = row_bytes(wq, n);
    assert!(
        stride >= rb && w.len() >= (rows - 1) * stride + rb,
        "{} panel of {n}: {} bytes hold no {rows} rows {stride} apart",
        wq.name(),
        w.len()
    );
}

/// Bounds of a q4_K panel tile: the panel, the listed activation rows, the outputs.
#[inline(always)]
fn check_k_tile(n: usize, panel: &[u8], block_bytes: usize, act: &[u8], arb: usize, tokens: &[usize], out: usize) {
    let ab = row_bytes(QType::Q8K, n);
    let last = tokens.iter().copied().max();
    assert!(
        n.is_multiple_of(256)
            && panel.len() >= n / 256 * block_bytes
            && arb >= ab
            && out >= tokens.len()
            && last.is_none_or(|t| act.len() >= t * arb + ab),
        "q4_K tile of {} tokens × {n}: panel {} bytes, activations {} bytes {arb} apart, {out} outputs",
        tokens.len(),
        panel.len(),
        act.len()
    );
}

/// q4_K panel kernels over `$rows` rows from their `unsafe` bodies (CPU-feature precondition),
/// bounds-checked: `(pack, quads, singles)` for [`KPanel`] (8 rows) or [`KPanelWide`] (16).
macro_rules! k_panel_parts {
    ($rows:literal, $pack:path, $quads:path, $singles:path) => {{
        use $crate::backend::cpu::dot::{check_k_tile, check_rows_n, K4_PANEL_BLOCK_BYTES};
        // Panel bytes per 256-element block.
        const BLOCK: usize = $rows / 8 * K4_PANEL_BLOCK_BYTES;
        fn pack(n: usize, w: &[u8], stride: usize, panel: &mut [u8]) {
            check_rows_n(n, w, stride, $crate::quant::QType::Q4K, $rows);
            assert!(n.is_multiple_of(256) && panel.len() >= n / 256 * BLOCK);
            // SAFETY: as in `dot_fn!`.
            unsafe { $pack(n, w, stride, panel) }
        }
        fn quads(n: usize, panel: &[u8], act: &[u8], arb: usize, tokens: &[usize], out: &mut [[f32; $rows]]) {
            check_k_tile(n, panel, BLOCK, act, arb, tokens, out.len());
            // SAFETY: as in `dot_fn!`.
            unsafe { $quads(n, panel, act, arb, tokens, out) }
        }
        fn singles(n: usize, panel: &[u8], act: &[u8], arb: usize, tokens: &[usize], out: &mut [[f32; $rows]]) {
            check_k_tile(n, panel, BLOCK, act, arb, tokens, out.len());
            // SAFETY: as in `dot_fn!`.
            unsafe { $singles(n, panel, act, arb, tokens, out) }
        }
        (pack, quads, singles)
    }};
}

/// The [`KPanelWide`] of q4_K (16 rows).
macro_rules! k_panel_wide_fn {
    ($pack:path, $quads:path, $singles:path) => {{
        let (pack, quads, singles) = $crate::backend::cpu::dot::k_panel_parts!(16, $pack, $quads, $singles);
        $crate::backend::cpu::dot::KPanelWide { pack, quads, singles }
    }};
}

/// The [`KPanel`] of q4_K (8 rows), with its wide kernels where there are some.
macro_rules! k_panel_fn {
    ($pack:path, $quads:path, $singles:path, $wide:expr) => {{
        let (pack, quads, singles) = $crate::backend::cpu::dot::k_panel_parts!(8, $pack, $quads, $singles);
        $crate::backend::cpu::dot::KPanel {
            pack,
            quads,
            singles,
            wide: $wide,
        }
    }};
}

/// Quantizes one f32 row into an activation format (`x.len()` a multiple of its block).
type QuantActFn = fn(x: &[f32], out: &mut [u8]);

const N_TYPES: usize = QType::COUNT;

/// The activation format llama.cpp pairs with each weight type (ggml `vec_dot_type`): the
/// table's [`QTypeInfo::act`](crate::quant::QTypeInfo::act).
pub fn act_type(w: QType) -> QType {
    w.act()
}

/// Quantizes one activation row into `out` (`act`'s bytes for `x.len()` elements) with the
/// fastest quantizer this CPU has. Every ISA produces the same bytes: ggml-cpu's x86 encoding
/// (q8_0/q8_1: scale 127/amax, ties to even; q8_K: the reference codec), which is what the
/// llama.cpp outputs we compare against were computed with.
#[cfg(test)]
pub fn quantize_act(act: QType, x: &[f32], out: &mut [u8]) {
    Isa::best().quantize_act(act, x, out)
}

/// Bytes of a row of `n` elements of `q`, checking that `n` is a whole number of blocks.
#[inline(always)]
fn row_bytes(q: QType, n: usize) -> usize {
    let info = q.info();
    assert!(
        n.is_multiple_of(info.block_elems),
        "{n} elements are not whole {} blocks",
        info.name
    );
    n / info.block_elems * info.block_bytes
}

/// The bounds check every kernel runs before touching memory: the SIMD kernels read through
/// raw pointers and rely on it.
#[inline(always)]
fn check(n: usize, w: &[u8], a: &[u8], wq: QType, aq: QType) {
    let (wb, ab) = (row_bytes(wq, n), row_bytes(aq, n));
    assert!(
        w.len() >= wb && a.len() >= ab,
        "{} dot of {n}: weight row has {} of {wb} bytes, activation row {} of {ab}",
        wq.name(),
        w.len(),
        a.len()
    );
}

#[inline(always)]
fn check4(n: usize, w: &[u8], a: &[&[u8]; 4], wq: QType, aq: QType) {
    for ai in a {
        check(n, w, ai, wq, aq);
    }
}

/// Wraps a kernel `k(n, w, a)` (safe or `unsafe` with a CPU-feature precondition) into a
/// bounds-checked [`DotFn`]. Only used in the ISA tables, which are handed out after feature
/// detection; that is the `unsafe` precondition.
macro_rules! dot_fn {
    ($wq:ident, $k:path) => {{
        fn f(n: usize, w: &[u8], a: &[u8]) -> f32 {
            use $crate::backend::cpu::dot::{act_type, check};
            use $crate::quant::QType;
            check(n, w, a, QType::$wq, act_type(QType::$wq));
            #[allow(unused_unsafe)]
            // SAFETY: `check` bounds the reads; the table holding `f` is only handed out
            // on a CPU with the kernel's features.
            unsafe {
                $k(n, w, a)
            }
        }
        ($crate::quant::QType::$wq, f as $crate::backend::cpu::dot::DotFn)
    }};
}

/// Same as [`dot_fn!`] for two weight rows.
macro_rules! dot_r2_fn {
    ($wq:ident, $k:path) => {{
        fn f(n: usize, w: [&[u8]; 2], a: &[u8]) -> [f32; 2] {
            use $crate::backend::cpu::dot::{act_type, check};
            use $crate::quant::QType;
            check(n, w[0], a, QType::$wq, act_type(QType::$wq));
            check(n, w[1], a, QType::$wq, act_type(QType::$wq));
            #[allow(unused_unsafe)]
            // SAFETY: as in `dot_fn!`.
            unsafe {
                $k(n, w, a)
            }
        }
        ($crate::quant::QType::$wq, f as $crate::backend::cpu::dot::DotR2Fn)
    }};
}

/// Same as [`dot_fn!`] for four activation rows.
macro_rules! dot_x4_fn {
    ($wq:ident, $k:path) => {{
        fn f(n: usize, w: &[u8], a: [&[u8]; 4]) -> [f32; 4] {
            use $crate::backend::cpu::dot::{act_type, check4};
            use $crate::quant::QType;
            check4(n, w, &a, QType::$wq, act_type(QType::$wq));
            #[allow(unused_unsafe)]
            // SAFETY: as in `dot_fn!`.
            unsafe {
                $k(n, w, a)
            }
        }
        ($crate::quant::QType::$wq, f as $crate::backend::cpu::dot::DotX4Fn)
    }};
}
/// [`Gemm`] entry for `$wq` from the unsafe `pack` / `tile` / `row` kernels, offset `$off`.
macro_rules! gemm_fn {
    ($wq:ident, $off:expr, $pack:path, $tile:path, $row:path) => {
        $crate::backend::cpu::dot::gemm_fn!(@ $wq, $off, $pack, $tile, $row, None)
    };
    ($wq:ident, $off:expr, $pack:path, $tile:path, $row:path, $row2:path) => {
        $crate::backend::cpu::dot::gemm_fn!(@ $wq, $off, $pack, $tile, $row,
            Some($crate::backend::cpu::dot::dot_r2_fn!($wq, $row2).1))
    };
    (@ $wq:ident, $off:expr, $pack:path, $tile:path, $row:path, $row2:expr) => {{
        fn pack(n: usize, w: &[u8], stride: usize, panel: &mut [u8]) {
            $crate::backend::cpu::dot::check_rows(n, w, stride, $crate::quant::QType::$wq);
            $crate::backend::cpu::dot::check_panel(n, panel);
            // SAFETY: as in `dot_fn!`.
            unsafe { $pack(n, w, stride, panel) }
        }
        fn tile(
            n: usize,
            panel: &[u8],
            act: &[u8],
            arb: usize,
            sums: &[u8],
            out: &mut [[f32; $crate::backend::cpu::dot::PANEL_ROWS]],
        ) {
            $crate::backend::cpu::dot::check_panel(n, panel);
            $crate::backend::cpu::dot::check_acts(n, act, arb, sums, out.len());
            // SAFETY: as in `dot_fn!`.
            unsafe { $tile(n, panel, act, arb, sums, out) }
        }
        (
            $crate::quant::QType::$wq,
            $crate::backend::cpu::dot::Gemm {
                off: $off,
                pack,
                tile,
                row: $crate::backend::cpu::dot::dot_fn!($wq, $row).1,
                row2: $row2,
                wide: None,
            },
        )
    }};
}
pub(crate) use {
    dot_fn, dot_r2_fn, dot_x4_fn, gemm_fn, gemm_wide_fn, k_panel_fn, k_panel_parts, k_panel_wide_fn, row_tile_fn,
};

/// Bounds of [`PANEL_ROWS`] weight rows `stride` bytes apart.
#[inline(always)]
fn check_rows(n: usize, w: &[u8], stride: usize, wq: QType) {
    check_rows_n(n, w, stride, wq, PANEL_ROWS)
}

/// Bounds of a panel of `n` elements.
#[inline(always)]
fn check_panel(n: usize, panel: &[u8]) {
    assert!(
        panel.len() >= n / 32 * PANEL_BLOCK_BYTES,
        "{n}-wide panel: {} bytes",
        panel.len()
    );
}

/// Bounds of `nt` q8_0 activation rows `arb` bytes apart, with their block sums.
#[inline(always)]
fn check_acts(n: usize, act: &[u8], arb: usize, sums: &[u8], nt: usize) {
    let (nb, ab) = (n / 32, row_bytes(QType::Q8_0, n));
    if nt > 0 {
        assert!(
            arb >= ab && act.len() >= (nt - 1) * arb + ab && sums.len() >= nt * nb * BLOCK_SUM_BYTES,
            "tile of {nt} tokens × {n}: {} activation bytes {arb} apart, {} sum bytes",
            act.len(),
            sums.len()
        );
    }
}

/// The token side of a [`Gemm`] tile for one q8_0 activation row `a` of `nb` blocks,
/// little-endian ([`BLOCK_SUM_BYTES`] a block): first per block its scale d as f32 and
/// -off·Σq as i32 (8 bytes), then per block -off·Σq of each group of 4 quants (8 × i32) for
/// the tiles that keep ggml's per-group lanes.
pub fn block_sums(a: &[u8], off: i32, out: &mut [u8]) {
    let nb = a.len() / 34;
    let (whole, groups) = out[..nb * BLOCK_SUM_BYTES].split_at_mut(8 * nb);
    for ((blk, o), g) in a
        .chunks_exact(34)
        .zip(whole.chunks_exact_mut(8))
        .zip(groups.chunks_exact_mut(32))
    {
        let q = |i: usize| blk[2 + i] as i8 as i32;
        o[..4].copy_from_slice(&f16_at(blk, 0).to_le_bytes());
        o[4..].copy_from_slice(&(-off * (0..32).map(q).sum::<i32>()).to_le_bytes());
        for (j, gj) in g.chunks_exact_mut(4).enumerate() {
            gj.copy_from_slice(&(-off * (4 * j..4 * j + 4).map(q).sum::<i32>()).to_le_bytes());
        }
    }
}

/// Builds a per-qtype table from `base` with `over` entries replacing theirs.
const fn table<T: Copy>(base: [Option<T>; N_TYPES], over: &[(QType, T)]) -> [Option<T>; N_TYPES] {
    let mut t = base;
    let mut i = 0;
    while i < over.len() {
        t[over[i].0 as usize] = Some(over[i].1);
        i += 1;
    }
    t
}

const fn tiled_table(over: &[(QType, DotFn, DotX4Fn)]) -> [Option<(DotFn, DotX4Fn)>; N_TYPES] {
    let mut t = [None; N_TYPES];
    let mut i = 0;
    while i < over.len() {
        t[over[i].0 as usize] = Some((over[i].1, over[i].2));
        i += 1;
    }
    t
}

/// The [`Gemm`] entries of `over`; without VNNI (`maddubs`: u8·i8 pairs summed in saturating
/// i16) only those whose quants lie in -off..off with off ≤ 64, so that q + off < 128 and no
/// pair can saturate.
const fn gemm_table(over: &[(QType, Gemm)], vnni: bool) -> [Option<Gemm>; N_TYPES] {
    let mut t = [None; N_TYPES];
    let mut i = 0;
    while i < over.len() {
        if vnni || over[i].1.off <= 64 {
            t[over[i].0 as usize] = Some(over[i].1);
        }
        i += 1;
    }
    t
}

/// The kernels of one instruction set, resolved once; the matmul calls through these pointers.
pub struct Isa {
    isa: &'static str,
    dot: [Option<DotFn>; N_TYPES],
    dot_x4: [Option<DotX4Fn>; N_TYPES],
    /// 4-token kernels in the single dot's order, for the types whose `dot_x4` sums in another
    /// ([`Isa::dot_x4_exact`]).
    x4_single: [Option<DotX4Fn>; N_TYPES],
    dot_r2: [Option<DotR2Fn>; N_TYPES],
    gemm: [Option<Gemm>; N_TYPES],
    /// Batch kernels summing in the order of llama.cpp's tiled K-quant GEMM, which it runs
    /// from [`TILED_MIN_TOKENS`] tokens on ([`Isa::tiled`]).
    tiled: [Option<(DotFn, DotX4Fn)>; N_TYPES],
    /// q4_K's panel kernels ([`Isa::k_panel`]).
    q4_k_panel: Option<KPanel>,
    row_tile: [Option<RowTileFn>; N_TYPES],
    q8_0: QuantActFn,
    q8_1: QuantActFn,
    q8_k: QuantActFn,
}

static SCALAR: Isa = Isa {
    isa: "scalar",
    dot: table([None; N_TYPES], &scalar::DOT),
    dot_x4: [None; N_TYPES],
    x4_single: [None; N_TYPES],
    dot_r2: [None; N_TYPES],
    gemm: [None; N_TYPES],
    tiled: [None; N_TYPES],
    q4_k_panel: None,
    row_tile: [None; N_TYPES],
    q8_0: scalar::quantize_q8_0,
    q8_1: scalar::quantize_q8_1,
    q8_k: scalar::quantize_q8_k,
};

impl Isa {
    /// The kernels of `isa` (by name, as [`Isa::for_isa`]), or the best this CPU runs when
    /// `None` (`BackendOptions::cpu_isa`, `MINFER_CPU_ISA`).
    pub fn select(isa: Option<&str>) -> Result<&'static Isa> {
        match isa {
            Some(s) => Isa::for_isa(s),
            None => Ok(Isa::best()),
        }
    }

    /// The best kernels this CPU runs: avx512 (F, BW, VL, VNNI) > avx2 (+FMA, F16C) > scalar
    /// on x86-64; neon (+dotprod) > scalar on aarch64.
    pub fn best() -> &'static Isa {
        static K: OnceLock<&'static Isa> = OnceLock::new();
        K.get_or_init(|| {
            for isa in ["avx512", "avx2", "neon"] {
                if let Ok(k) = Isa::for_isa(isa) {
                    return k;
                }
            }
            &SCALAR
        })
    }

    /// The kernels of one ISA by name (`scalar`, `avx2`, `avx512`, `neon`); an error if the
    /// name is unknown or this CPU lacks the instructions.
    pub fn for_isa(name: &str) -> Result<&'static Isa> {
        let unsupported = |what: &str| Error::Backend {
            backend: "cpu",
            what: format!("ISA '{name}': {what}"),
        };
        match name.to_ascii_lowercase().as_str() {
            "scalar" => Ok(&SCALAR),
            #[cfg(target_arch = "x86_64")]
            "avx2" if avx2::supported() => Ok(&avx2::KERNELS),
            #[cfg(target_arch = "x86_64")]
            "avx512" if avx512::supported() => Ok(&avx512::KERNELS),
            #[cfg(target_arch = "aarch64")]
            "neon" if neon::supported() => Ok(neon::kernels()),
            "avx2" | "avx512" | "neon" => Err(unsupported("not supported by this CPU")),
            _ => Err(unsupported("unknown (expected scalar, avx2, avx512 or neon)")),
        }
    }

    pub fn isa(&self) -> &'static str {
        self.isa
    }

    /// The dot kernel for weights of type `w` (activations in `act_type(w)`).
    pub fn dot(&self, w: QType) -> DotFn {
        match self.dot[w as usize] {
            Some(f) => f,
            None => SCALAR.dot[w as usize].expect("every qtype has a scalar kernel"),
        }
    }

    /// The 1-weight-row × 4-activation-row kernel for `w`, where this ISA has one.
    pub fn dot_x4(&self, w: QType) -> Option<DotX4Fn> {
        self.dot_x4[w as usize]
    }

    /// The 2-weight-row × 1-activation-row kernel for `w`, bit-identical to `dot(w)` on each
    /// row, where this ISA has one.
    pub fn dot_r2(&self, w: QType) -> Option<DotR2Fn> {
        self.dot_r2[w as usize]
    }

    /// Whether `dot_x4` gives each token the bits of `dot` (all but q4_K, whose 4-token kernel
    /// sums in the order of ggml's repacked GEMM and its single one in its GEMV's), so that
    /// any four tokens may share it.
    pub fn x4_is_exact(&self, w: QType) -> bool {
        w != QType::Q4K
    }

    /// A 4-token kernel that gives each token the bits of `dot(w)`: `dot_x4` where
    /// [`Isa::x4_is_exact`], else the single dot's order for four tokens, where this ISA has one.
    pub fn dot_x4_exact(&self, w: QType) -> Option<DotX4Fn> {
        if self.x4_is_exact(w) {
            self.dot_x4(w)
        } else {
            self.x4_single[w as usize]
        }
    }

    /// For batches of at least [`TILED_MIN_TOKENS`]: the single and 4-token kernels of `w` in the
    /// summation order llama.cpp's tiled K-quant GEMM has there (for q6_K, per block
    /// `fma(Σ as f32 · d, dy, acc)`), where this ISA has them.
    pub fn tiled(&self, w: QType) -> Option<(DotFn, DotX4Fn)> {
        self.tiled[w as usize]
    }

    /// The K-quant panel kernels for `w` (q4_K), where this ISA has them.
    pub fn k_panel(&self, w: QType) -> Option<KPanel> {
        self.q4_k_panel.filter(|_| w == QType::Q4K)
    }

    /// The in-place prefill kernel of a float weight type ([`RowTileFn`]), where this ISA has
    /// one.
    pub fn row_tile(&self, w: QType) -> Option<RowTileFn> {
        self.row_tile[w as usize]
    }

    /// The packed-panel prefill kernels for `w`, where this ISA has them.
    pub fn gemm(&self, w: QType) -> Option<Gemm> {
        self.gemm[w as usize]
    }

    /// Quantizes one activation row; `act` is F32 (a byte copy), Q8_0, Q8_1 or Q8K.
    pub fn quantize_act(&self, act: QType, x: &[f32], out: &mut [u8]) {
        let nb = row_bytes(act, x.len());
        assert_eq!(out.len(), nb, "{act} row of {} elements is {nb} bytes", x.len());
        match act {
            QType::F32 => out.copy_from_slice(bytemuck::cast_slice(x)),
            QType::Q8_0 => (self.q8_0)(x, out),
            QType::Q8_1 => (self.q8_1)(x, out),
            QType::Q8K => (self.q8_k)(x, out),
            _ => panic!("{act} is not an activation type"),
        }
    }
}

impl std::fmt::Debug for Isa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Isa({})", self.isa)
    }
}

// --- little-endian field readers shared by the kernels ---------------------------------------

#[inline(always)]
pub(crate) fn f16_at(b: &[u8], off: usize) -> f32 {
    half::f16::from_bits(u16::from_le_bytes([b[off], b[off + 1]])).to_f32()
}

#[inline(always)]
pub(crate) fn f32_at(b: &[u8], off: usize) -> f32 {
    f32::from_le_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

#[cfg(test)]
mod tests;
