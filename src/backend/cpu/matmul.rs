//! y = x · Wᵀ on the CPU for any weight qtype, reading the raw GGUF rows.
//!
//! Activations are first quantized to the weight type's vec-dot partner (Q8_0 / Q8_1 / Q8_K,
//! as ggml does), then each thread takes a band of weight rows and runs it against every
//! token, so a band stays in cache while the tokens stream past. For a batch, types with a
//! [`Gemm`](super::dot::Gemm) decode the band 8 rows at a time into a panel and run each
//! panel against every token, 8 rows × several tokens per pass.

use std::cell::RefCell;
use std::ops::Range;

use super::dot::{
    act_type, block_sums, DotFn, DotR2Fn, DotX4Fn, Gemm, Isa, KPanel, RowTileFn, BLOCK_SUM_BYTES, K4_PANEL_BLOCK_BYTES,
    PANEL_BLOCK_BYTES, PANEL_ROWS, ROW_TILE, TILED_MIN_TOKENS, WIDE_ROWS,
};
use super::pool::{Pool, SyncPtr};
use crate::quant::QType;
use crate::tensor::Tensor;

/// Weight rows per task, at least. 16 rows of a 576-wide Q4_1 matrix are 6 KB: they stay in
/// L1 while the tokens of a prefill batch stream past.
const MIN_ROWS_PER_TASK: usize = 16;
/// Tasks per thread for a big matrix: enough for a late or descheduled thread to be covered
/// by the others, few enough that handing out tasks costs nothing (gemma-3's 262 144-row
/// output matrix used to be 16 384 tasks a token).
const TASKS_PER_THREAD: usize = 16;
/// Tokens from which a batch goes through the `Gemm` panels: decoding 8 rows into a panel
/// costs about as much as running it against a few tokens.
const MIN_GEMM_TOKENS: usize = 2;
/// Tokens per `Gemm::tile` call (its output buffer is on the stack).
const TILE_TOKENS: usize = 64;
/// Tokens per [`RowTileFn`] call: 32 f32 activation rows of 256 and a 16-row band of weights
/// fit in L1 together.
const ROW_TILE_TOKENS: usize = 32;

thread_local! {
    /// Each thread's panel scratch.
    static PANEL: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// The tokens of a matmul grouped by sequence. A kernel whose sums depend on how many tokens
/// share it (the K-quants' tiled dots, llama.cpp's prefill order, from TILED_MIN_TOKENS; q4_K's
/// 4-token dot) takes a group's rows only, so a token's bits depend on its own sequence's tokens
/// alone; the kernels that give every token the bits of its single dot take rows of any groups.
#[derive(Clone, Debug, Default)]
pub struct Groups {
    /// Each group's token rows, in order.
    pub groups: Vec<Vec<usize>>,
}

impl Groups {
    /// All `n` rows as one group: a one-sequence batch.
    pub fn one(n: usize) -> Groups {
        Groups {
            groups: vec![(0..n).collect()],
        }
    }

    /// Rows grouped by `key` (equal keys, one group), in first-seen order.
    pub fn by_key(keys: impl Iterator<Item = u64>) -> Groups {
        let mut seen: Vec<(u64, usize)> = Vec::new();
        let mut groups: Vec<Vec<usize>> = Vec::new();
        for (t, k) in keys.enumerate() {
            match seen.iter().find(|e| e.0 == k) {
                Some(&(_, g)) => groups[g].push(t),
                None => {
                    seen.push((k, groups.len()));
                    groups.push(vec![t]);
                }
            }
        }
        Groups { groups }
    }
}

/// x: (n, k) f32; y: (n, m) f32 with m = w.n_rows(); `act` is scratch for quantized x.
/// `groups` (None: one group of all n) says which rows belong together.
#[allow(clippy::too_many_arguments)]
pub fn matmul(
    pool: &Pool,
    kernels: &Isa,
    w: &Tensor,
    x: &[f32],
    n: usize,
    y: &mut [f32],
    act: &mut Vec<u8>,
    groups: Option<&Groups>,
) {
    let (k, m) = (w.row_len(), w.n_rows());
    debug_assert_eq!(x.len(), n * k);
    debug_assert_eq!(y.len(), n * m);
    let at = act_type(w.qtype);
    let arb = k / at.block_elems() * at.block_bytes();
    let wb = w.bytes();
    let wrb = w.row_bytes();
    if let Some(rt) = kernels.row_tile(w.qtype) {
        // The float types take f32 activations: the tiles read x itself (and share each
        // activation load between four rows, for a single token too).
        debug_assert_eq!(at, QType::F32);
        let (act, tokens) = (bytemuck::cast_slice(x), (0..n).collect::<Vec<_>>());
        let (dot, yp) = (kernels.dot(w.qtype), SyncPtr::new(y));
        pool.for_chunks(m, rows_per_task(pool, m, WIDE_ROWS), |_, rows| {
            // SAFETY: rows are disjoint between tasks, so are the outputs.
            unsafe { row_tile_band(rt, dot, k, wb, wrb, rows, (act, arb), (&tokens, &tokens), &yp, m) };
        });
        return;
    }
    let gemm = kernels.gemm(w.qtype);
    let packed = gemm.filter(|_| n >= MIN_GEMM_TOKENS);
    // With panels, the activation rows are followed by their block sums.
    let srb = if packed.is_some() { k / 32 * BLOCK_SUM_BYTES } else { 0 };
    act.resize(n * (arb + srb), 0);
    let (act, sums) = act.split_at_mut(n * arb);
    let quantize = |t: usize, dst: &mut [u8], sdst: &mut [u8]| {
        kernels.quantize_act(at, &x[t * k..(t + 1) * k], dst);
        if let Some(g) = packed {
            block_sums(dst, g.off, sdst);
        }
    };
    if n >= 8 {
        let (ap, sp) = (SyncPtr::new(act), SyncPtr::new(sums));
        pool.for_chunks(n, 4, |_, r| {
            for t in r {
                // SAFETY: each token's activation and sum rows are written by one task.
                quantize(t, unsafe { ap.slice(t * arb, arb) }, unsafe { sp.slice(t * srb, srb) });
            }
        });
    } else {
        for t in 0..n {
            quantize(t, &mut act[t * arb..(t + 1) * arb], &mut sums[t * srb..(t + 1) * srb]);
        }
    }
    let (act, sums) = (&act[..], &sums[..]);
    // With a Gemm, the rows outside panels (all of them below MIN_GEMM_TOKENS) take `Gemm::row`,
    // which matches the panels bit for bit, whatever the batch. Otherwise each group of rows
    // takes its kernels by its own size: 4-token dots for its whole fours, the tiled order
    // from TILED_MIN_TOKENS on, single dots for the rest.
    let one;
    let groups = match groups {
        Some(g) => g,
        None => {
            one = Groups::one(n);
            &one
        }
    };
    let mut work: Vec<Work> = Vec::new();
    // With q4_K panels, the tokens of the 4-token order and of the single order, for the
    // rows in whole panels (`work` still covers the rest).
    let k_panel = kernels
        .k_panel(w.qtype)
        .filter(|_| gemm.is_none() && n >= MIN_GEMM_TOKENS);
    let (mut panel_quads, mut panel_singles) = (Vec::new(), Vec::new());
    match gemm {
        Some(g) => work.extend((0..n).map(|t| Work::One(g.row, g.row2, t))),
        None => {
            // Rows whose kernels are the same bits in any company (single dots, and 4-token
            // dots in their order), gathered across groups.
            let mut shared: Vec<usize> = Vec::new();
            let exact = kernels.x4_is_exact(w.qtype);
            for rows in &groups.groups {
                match kernels.tiled(w.qtype) {
                    Some((dot, dot4)) if rows.len() >= TILED_MIN_TOKENS => {
                        quads_then_singles(&mut work, rows, dot, None, Some(dot4));
                    }
                    _ if exact => shared.extend_from_slice(rows),
                    _ => {
                        // The group's whole fours in the 4-token order its size calls for;
                        // the rest take single dots, which any company may share.
                        let quads = match kernels.dot_x4(w.qtype) {
                            Some(dot4) => {
                                let q = rows.len() / 4 * 4;
                                quads_then_singles(&mut work, &rows[..q], kernels.dot(w.qtype), None, Some(dot4));
                                if k_panel.is_some() {
                                    panel_quads.extend_from_slice(&rows[..q]);
                                }
                                q
                            }
                            None => 0,
                        };
                        shared.extend_from_slice(&rows[quads..]);
                    }
                }
            }
            shared.sort_unstable();
            if k_panel.is_some() {
                panel_singles.clone_from(&shared);
            }
            quads_then_singles(
                &mut work,
                &shared,
                kernels.dot(w.qtype),
                kernels.dot_r2(w.qtype),
                kernels.dot_x4_exact(w.qtype),
            );
        }
    }
    let yp = SyncPtr::new(y);
    let band = if k_panel.is_some_and(|kp| kp.wide.is_some()) || packed.is_some_and(|g| g.wide.is_some()) {
        WIDE_ROWS
    } else {
        PANEL_ROWS
    };
    pool.for_chunks(m, rows_per_task(pool, m, band), |_, rows| {
        let mut rows = rows;
        if let Some(g) = packed {
            let r0 = rows.start;
            rows.start += rows.len() / PANEL_ROWS * PANEL_ROWS;
            // SAFETY: rows are disjoint between tasks, so are these outputs.
            unsafe { gemm_band(g, k, wb, wrb, r0..rows.start, (act, arb, sums, srb), n, None, &yp, m) };
        }
        if let Some(kp) = k_panel {
            let r0 = rows.start;
            rows.start += rows.len() / PANEL_ROWS * PANEL_ROWS;
            let lists = [
                (KOrder::Quads, &panel_quads[..], &panel_quads[..]),
                (KOrder::Singles, &panel_singles[..], &panel_singles[..]),
            ];
            // SAFETY: rows are disjoint between tasks, so are the outputs.
            unsafe { k_panel_band(kp, k, wb, wrb, r0..rows.start, act, arb, &lists, &yp, m) };
        }
        by_row(&work, k, m, wb, wrb, act, arb, rows, &yp);
    });
}

/// Weight rows per task for an `m`-row matrix: a multiple of `band` (the panel height), so
/// that only the matrix's last rows miss a panel.
fn rows_per_task(pool: &Pool, m: usize, band: usize) -> usize {
    (m / (pool.n_threads() * TASKS_PER_THREAD))
        .max(MIN_ROWS_PER_TASK)
        .next_multiple_of(band)
}

/// Rows `rows` of y = x·Wᵀ through a float type's [`RowTileFn`], [`ROW_TILE`] rows at a time
/// (the last rows through `dot`, whose bits the tile has): activation row `tokens[i]` into
/// output row `outs[i]` (`m` wide).
///
/// # Safety
/// No other thread writes these rows of those outputs meanwhile.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn row_tile_band(
    rt: RowTileFn,
    dot: DotFn,
    k: usize,
    wb: &[u8],
    wrb: usize,
    rows: Range<usize>,
    (act, arb): (&[u8], usize),
    (tokens, outs): (&[usize], &[usize]),
    yp: &SyncPtr<f32>,
    m: usize,
) {
    let whole = rows.start + rows.len() / ROW_TILE * ROW_TILE;
    let mut out = [[0f32; ROW_TILE]; ROW_TILE_TOKENS];
    for (chunk, outs) in tokens.chunks(ROW_TILE_TOKENS).zip(outs.chunks(ROW_TILE_TOKENS)) {
        for r in (rows.start..whole).step_by(ROW_TILE) {
            rt(k, &wb[r * wrb..], wrb, act, arb, chunk, &mut out[..chunk.len()]);
            for (&o, v) in outs.iter().zip(&out) {
                // SAFETY: the caller's.
                unsafe { yp.slice(o * m + r, ROW_TILE) }.copy_from_slice(v);
            }
        }
        for r in whole..rows.end {
            for (&t, &o) in chunk.iter().zip(outs) {
                let v = dot(k, &wb[r * wrb..(r + 1) * wrb], &act[t * arb..(t + 1) * arb]);
                // SAFETY: the caller's.
                unsafe { *yp.0.add(o * m + r) = v };
            }
        }
    }
}

/// Which of a [`KPanel`]'s orders a list of tokens takes.
#[derive(Clone, Copy)]
pub(super) enum KOrder {
    /// `dot_x4`'s (the tokens of a group's whole fours).
    Quads,
    /// `dot`'s.
    Singles,
}

/// Rows `rows` (whole panels) of y = x·Wᵀ through q4_K panels (16 rows at a time where the
/// ISA has wide ones): for each list (order, tokens, outs), the activation row of `tokens[i]`
/// into output row `outs[i]` (`m` wide).
///
/// # Safety
/// No other thread writes these rows of those outputs meanwhile.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn k_panel_band(
    kp: KPanel,
    k: usize,
    wb: &[u8],
    wrb: usize,
    rows: Range<usize>,
    act: &[u8],
    arb: usize,
    lists: &[(KOrder, &[usize], &[usize])],
    yp: &SyncPtr<f32>,
    m: usize,
) {
    let mut rows = rows;
    if let Some(wide) = kp.wide {
        PANEL.with_borrow_mut(|panel| {
            let panel = panel_of(panel, k / 256 * 2 * K4_PANEL_BLOCK_BYTES);
            let mut out = [[0f32; WIDE_ROWS]; TILE_TOKENS];
            while rows.len() >= WIDE_ROWS {
                let r = rows.start;
                (wide.pack)(k, &wb[r * wrb..], wrb, panel);
                for &(order, tokens, outs) in lists {
                    let wtile = match order {
                        KOrder::Quads => wide.quads,
                        KOrder::Singles => wide.singles,
                    };
                    for (chunk, outs) in tokens.chunks(TILE_TOKENS).zip(outs.chunks(TILE_TOKENS)) {
                        wtile(k, panel, act, arb, chunk, &mut out[..chunk.len()]);
                        for (&o, v) in outs.iter().zip(&out) {
                            // SAFETY: the caller's.
                            unsafe { yp.slice(o * m + r, WIDE_ROWS) }.copy_from_slice(v);
                        }
                    }
                }
                rows.start += WIDE_ROWS;
            }
        });
    }
    PANEL.with_borrow_mut(|panel| {
        let panel = panel_of(panel, k / 256 * K4_PANEL_BLOCK_BYTES);
        let mut out = [[0f32; PANEL_ROWS]; TILE_TOKENS];
        for r in rows.step_by(PANEL_ROWS) {
            (kp.pack)(k, &wb[r * wrb..], wrb, panel);
            for &(order, tokens, outs) in lists {
                let tile = match order {
                    KOrder::Quads => kp.quads,
                    KOrder::Singles => kp.singles,
                };
                for (chunk, outs) in tokens.chunks(TILE_TOKENS).zip(outs.chunks(TILE_TOKENS)) {
                    tile(k, panel, act, arb, chunk, &mut out[..chunk.len()]);
                    for (&o, v) in outs.iter().zip(&out) {
                        // SAFETY: the caller's.
                        unsafe { yp.slice(o * m + r, PANEL_ROWS) }.copy_from_slice(v);
                    }
                }
            }
        }
    });
}

/// Rows `rows` (whole panels; 16 at a time where the [`Gemm`] has a wide tile) of y = x·Wᵀ
/// through a [`Gemm`]: `n` consecutive activation rows (and their block sums) from `act` /
/// `sums`, row t into output row `outs[t]` (or t).
///
/// # Safety
/// No other thread writes these rows of those outputs meanwhile.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn gemm_band(
    g: Gemm,
    k: usize,
    wb: &[u8],
    wrb: usize,
    rows: Range<usize>,
    (act, arb, sums, srb): (&[u8], usize, &[u8], usize),
    n: usize,
    outs: Option<&[usize]>,
    yp: &SyncPtr<f32>,
    m: usize,
) {
    let pb = k / 32 * PANEL_BLOCK_BYTES;
    let out_row = |t: usize| outs.map_or(t, |o| o[t]);
    let mut rows = rows;
    if let Some(wide) = g.wide {
        PANEL.with_borrow_mut(|panel| {
            let panel = panel_of(panel, 2 * pb);
            let mut out = [[0f32; WIDE_ROWS]; TILE_TOKENS];
            while rows.len() >= WIDE_ROWS {
                let r = rows.start;
                let (pa, pz) = panel.split_at_mut(pb);
                (g.pack)(k, &wb[r * wrb..], wrb, pa);
                (g.pack)(k, &wb[(r + PANEL_ROWS) * wrb..], wrb, pz);
                for t0 in (0..n).step_by(TILE_TOKENS) {
                    let nt = TILE_TOKENS.min(n - t0);
                    wide(k, panel, &act[t0 * arb..], arb, &sums[t0 * srb..], &mut out[..nt]);
                    for (t, v) in (t0..).zip(&out[..nt]) {
                        // SAFETY: the caller's.
                        unsafe { yp.slice(out_row(t) * m + r, WIDE_ROWS) }.copy_from_slice(v);
                    }
                }
                rows.start += WIDE_ROWS;
            }
        });
    }
    PANEL.with_borrow_mut(|panel| {
        let panel = panel_of(panel, pb);
        let mut out = [[0f32; PANEL_ROWS]; TILE_TOKENS];
        for r in rows.step_by(PANEL_ROWS) {
            (g.pack)(k, &wb[r * wrb..], wrb, panel);
            for t0 in (0..n).step_by(TILE_TOKENS) {
                let nt = TILE_TOKENS.min(n - t0);
                (g.tile)(k, panel, &act[t0 * arb..], arb, &sums[t0 * srb..], &mut out[..nt]);
                for (t, v) in (t0..).zip(&out[..nt]) {
                    // SAFETY: the caller's.
                    unsafe { yp.slice(out_row(t) * m + r, PANEL_ROWS) }.copy_from_slice(v);
                }
            }
        }
    });
}

/// The first `len` bytes of a thread's panel scratch, grown (never shrunk) to hold them: a
/// thread packing panels of two sizes in turn does not zero it again each time.
fn panel_of(panel: &mut Vec<u8>, len: usize) -> &mut [u8] {
    if panel.len() < len {
        panel.resize(len, 0);
    }
    &mut panel[..len]
}

/// `rows` as work: their whole fours through `dot4` (where there is one), the rest one by one
/// (two weight rows at a time through `dot2`, where there is one).
fn quads_then_singles(work: &mut Vec<Work>, rows: &[usize], dot: DotFn, dot2: Option<DotR2Fn>, dot4: Option<DotX4Fn>) {
    let quads = if dot4.is_some() { rows.len() / 4 * 4 } else { 0 };
    if let Some(dot4) = dot4 {
        for q in rows[..quads].chunks_exact(4) {
            work.push(Work::Four(dot4, [q[0], q[1], q[2], q[3]]));
        }
    }
    work.extend(rows[quads..].iter().map(|&t| Work::One(dot, dot2, t)));
}

/// One unit of `by_row`: a token with its dot (and the same dot of two weight rows at once,
/// where there is one), or four with their 4-token dot.
#[derive(Clone, Copy)]
enum Work {
    One(DotFn, Option<DotR2Fn>, usize),
    Four(DotX4Fn, [usize; 4]),
}

/// `rows` of y = x · Wᵀ one weight row at a time, for each unit of `work`.
#[allow(clippy::too_many_arguments)]
fn by_row(
    work: &[Work],
    k: usize,
    m: usize,
    wb: &[u8],
    wrb: usize,
    act: &[u8],
    arb: usize,
    rows: Range<usize>,
    yp: &SyncPtr<f32>,
) {
    for w in work {
        match *w {
            Work::Four(dot4, ts) => {
                // Each weight block is decoded once for all four.
                let a = ts.map(|t| &act[t * arb..(t + 1) * arb]);
                for r in rows.clone() {
                    let s = dot4(k, &wb[r * wrb..(r + 1) * wrb], a);
                    for (&t, v) in ts.iter().zip(s) {
                        // SAFETY: rows are disjoint between tasks, so are these outputs.
                        unsafe { *yp.0.add(t * m + r) = v };
                    }
                }
            }
            Work::One(dot, dot2, t) => {
                // SAFETY: rows are disjoint between tasks, so are these output ranges.
                let yrow = unsafe { yp.slice(t * m + rows.start, rows.len()) };
                dot_rows(
                    (dot, dot2),
                    k,
                    (wb, wrb),
                    rows.clone(),
                    &act[t * arb..(t + 1) * arb],
                    yrow,
                );
            }
        }
    }
}

/// One token's products with weight rows `rows` into `y` (one per row): two rows at a time
/// through `dot2` where there is one, the rest through `dot`.
pub(super) fn dot_rows(
    (dot, dot2): (DotFn, Option<DotR2Fn>),
    k: usize,
    (wb, wrb): (&[u8], usize),
    rows: Range<usize>,
    a: &[u8],
    y: &mut [f32],
) {
    let w_row = |r: usize| &wb[r * wrb..(r + 1) * wrb];
    let mut done = 0;
    if let Some(dot2) = dot2 {
        for (y2, r) in y.chunks_exact_mut(2).zip(rows.clone().step_by(2)) {
            y2.copy_from_slice(&dot2(k, [w_row(r), w_row(r + 1)], a));
            done += 2;
        }
    }
    for (yi, r) in y[done..].iter_mut().zip(rows.start + done..rows.end) {
        *yi = dot(k, w_row(r), a);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::Bytes;

    /// Deterministic values in -1..1.
    fn val(i: usize, s: usize) -> f32 {
        ((i * s + 7) % 1013) as f32 / 506.0 - 1.0
    }

    /// A `[k, m]` weight of `qtype` quantized from `val`.
    fn weight(qtype: QType, k: usize, m: usize) -> Tensor {
        let data = qtype.quantize_to_vec(&(0..k * m).map(|i| val(i, 2654435761)).collect::<Vec<_>>());
        Tensor {
            name: "w".into(),
            qtype,
            shape: vec![k as u64, m as u64],
            data: Bytes::from_vec(data.unwrap()),
            part: 0,
            file_offset: 0,
        }
    }

    /// Every path (panels and their leftover rows, 4-token and single dots, tiles longer than
    /// `TILE_TOKENS`) against the scalar dot of each (token, row), on every ISA.
    #[test]
    fn matmul_matches_the_scalar_dot_for_awkward_shapes() {
        let pool = Pool::new(2);
        let scalar = Isa::for_isa("scalar").unwrap();
        for qtype in [
            QType::Q4_0,
            QType::Q5_0,
            QType::Q8_0,
            QType::IQ4NL,
            QType::Q4_1,
            QType::Q4K,
        ] {
            let k = if qtype.block_elems() == 256 { 512 } else { 96 };
            for m in [8, 21, 45] {
                let w = weight(qtype, k, m);
                for n in [1, 3, 5, 11, 70] {
                    let x: Vec<f32> = (0..n * k).map(|i| val(i, 40503)).collect();
                    let at = act_type(qtype);
                    let arb = k / at.block_elems() * at.block_bytes();
                    let mut a = vec![0u8; n * arb];
                    for t in 0..n {
                        scalar.quantize_act(at, &x[t * k..(t + 1) * k], &mut a[t * arb..(t + 1) * arb]);
                    }
                    for isa in ["scalar", "avx2", "avx512", "neon"] {
                        let Ok(kernels) = Isa::for_isa(isa) else { continue };
                        let mut y = vec![f32::NAN; n * m];
                        matmul(&pool, kernels, &w, &x, n, &mut y, &mut Vec::new(), None);
                        for t in 0..n {
                            for r in 0..m {
                                let wr = &w.bytes()[r * w.row_bytes()..(r + 1) * w.row_bytes()];
                                let want = scalar.dot(qtype)(k, wr, &a[t * arb..(t + 1) * arb]);
                                let got = y[t * m + r];
                                assert!(
                                    (got - want).abs() <= 1e-4 * want.abs().max(1.0),
                                    "{isa} {qtype} m={m} n={n} y[{t}][{r}] = {got}, scalar {want}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    /// q4_K's panels give each token the bits of the row kernel its place calls for: the
    /// 4-token kernel for a group's whole fours, the single dot for the rest (and for every
    /// token of one-token groups, as the expert matmul runs them).
    #[test]
    fn q4_k_panels_keep_the_row_kernels_bits() {
        let pool = Pool::new(2);
        let k = 512;
        for isa in ["avx2", "avx512"] {
            let Ok(kernels) = Isa::for_isa(isa) else { continue };
            assert!(kernels.k_panel(QType::Q4K).is_some(), "{isa} has q4_K panels");
            let (dot, dot4) = (kernels.dot(QType::Q4K), kernels.dot_x4(QType::Q4K).unwrap());
            for m in [8, 21, 45] {
                let w = weight(QType::Q4K, k, m);
                for n in [2, 3, 5, 11, 70] {
                    let x: Vec<f32> = (0..n * k).map(|i| val(i, 40503)).collect();
                    let arb = k / 256 * 292;
                    let mut a = vec![0u8; n * arb];
                    for t in 0..n {
                        kernels.quantize_act(QType::Q8K, &x[t * k..(t + 1) * k], &mut a[t * arb..(t + 1) * arb]);
                    }
                    let singletons = Groups {
                        groups: (0..n).map(|t| vec![t]).collect(),
                    };
                    for (groups, quads) in [(None, n / 4 * 4), (Some(&singletons), 0)] {
                        let mut y = vec![f32::NAN; n * m];
                        matmul(&pool, kernels, &w, &x, n, &mut y, &mut Vec::new(), groups);
                        for t in 0..n {
                            let at = &a[t * arb..(t + 1) * arb];
                            for r in 0..m {
                                let wr = &w.bytes()[r * w.row_bytes()..(r + 1) * w.row_bytes()];
                                let want = if t < quads {
                                    dot4(k, wr, [at; 4])[0]
                                } else {
                                    dot(k, wr, at)
                                };
                                let got = y[t * m + r];
                                assert_eq!(
                                    got.to_bits(),
                                    want.to_bits(),
                                    "{isa} m={m} n={n} quads={quads} y[{t}][{r}] = {got}, row kernel {want}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    /// The float types give every token, alone or in a batch of any size, the bits of their
    /// single dot on every ISA: through the row tiles where the ISA has them (whole tiles, rows
    /// outside them, one to three tokens a call, rows with 8-element and scalar tails),
    /// otherwise through the 4-token dots.
    #[test]
    fn float_matmuls_keep_the_dot_bits() {
        let pool = Pool::new(2);
        for isa in ["scalar", "avx2", "avx512", "neon"] {
            let Ok(kernels) = Isa::for_isa(isa) else { continue };
            for qtype in [QType::F32, QType::F16, QType::BF16] {
                if isa == "avx512" {
                    assert!(kernels.row_tile(qtype).is_some(), "avx512 has {qtype} row tiles");
                }
                let dot = kernels.dot(qtype);
                for (k, m) in [(256, 21), (100, 4), (360, 7), (45, 16)] {
                    let w = weight(qtype, k, m);
                    for n in [1, 2, 3, 5, 70] {
                        let x: Vec<f32> = (0..n * k).map(|i| val(i, 40503)).collect();
                        let mut y = vec![f32::NAN; n * m];
                        matmul(&pool, kernels, &w, &x, n, &mut y, &mut Vec::new(), None);
                        for t in 0..n {
                            let a: &[u8] = bytemuck::cast_slice(&x[t * k..(t + 1) * k]);
                            for r in 0..m {
                                let wr = &w.bytes()[r * w.row_bytes()..(r + 1) * w.row_bytes()];
                                assert_eq!(
                                    y[t * m + r].to_bits(),
                                    dot(k, wr, a).to_bits(),
                                    "{isa} {qtype} k={k} m={m} n={n} y[{t}][{r}]"
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    /// The types with panels give every token, in a batch of any size, the bits of
    /// `Gemm::row` (narrow and wide tiles, and the rows outside whole panels).
    #[test]
    fn gemm_panels_keep_the_row_bits() {
        let pool = Pool::new(2);
        let k = 256;
        for isa in ["avx2", "avx512"] {
            let Ok(kernels) = Isa::for_isa(isa) else { continue };
            for qtype in [QType::Q4_0, QType::Q5_0, QType::Q8_0, QType::IQ4NL, QType::MXFP4] {
                let Some(g) = kernels.gemm(qtype) else { continue };
                for m in [16, 24, 45] {
                    let w = weight(qtype, k, m);
                    for n in [2, 9, 70] {
                        let x: Vec<f32> = (0..n * k).map(|i| val(i, 40503)).collect();
                        let at = act_type(qtype);
                        let arb = k / at.block_elems() * at.block_bytes();
                        let mut y = vec![f32::NAN; n * m];
                        matmul(&pool, kernels, &w, &x, n, &mut y, &mut Vec::new(), None);
                        let mut a = vec![0u8; arb];
                        for t in 0..n {
                            kernels.quantize_act(at, &x[t * k..(t + 1) * k], &mut a);
                            for r in 0..m {
                                let wr = &w.bytes()[r * w.row_bytes()..(r + 1) * w.row_bytes()];
                                let want = (g.row)(k, wr, &a);
                                assert_eq!(
                                    y[t * m + r].to_bits(),
                                    want.to_bits(),
                                    "{isa} {qtype} m={m} n={n} y[{t}][{r}]"
                                );
                            }
                        }
                    }
                }
            }
        }
    }
}
