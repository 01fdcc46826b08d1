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
    act_type, block_sums, DotFn, DotX4Fn, Isa, BLOCK_SUM_BYTES, PANEL_BLOCK_BYTES, PANEL_ROWS, TILED_MIN_TOKENS,
};
use super::pool::{Pool, SyncPtr};
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
const MIN_GEMM_TOKENS: usize = 4;
/// Tokens per `Gemm::tile` call (its output buffer is on the stack).
const TILE_TOKENS: usize = 64;

thread_local! {
    /// Each thread's panel scratch.
    static PANEL: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// x: (n, k) f32; y: (n, m) f32 with m = w.n_rows(); `act` is scratch for quantized x.
pub fn matmul(pool: &Pool, kernels: &Isa, w: &Tensor, x: &[f32], n: usize, y: &mut [f32], act: &mut Vec<u8>) {
    let (k, m) = (w.row_len(), w.n_rows());
    debug_assert_eq!(x.len(), n * k);
    debug_assert_eq!(y.len(), n * m);
    let at = act_type(w.qtype);
    let arb = k / at.block_elems() * at.block_bytes();
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
    let wb = w.bytes();
    let wrb = w.row_bytes();
    // With a Gemm, the rows outside panels (all of them below MIN_GEMM_TOKENS) take `Gemm::row`,
    // which matches the panels bit for bit.
    let (dot, dot4) = match (gemm, kernels.tiled(w.qtype)) {
        (Some(g), _) => (g.row, None),
        (None, Some((dot, dot4))) if n >= TILED_MIN_TOKENS => (dot, Some(dot4)),
        (None, _) => (kernels.dot(w.qtype), kernels.dot_x4(w.qtype)),
    };
    let yp = SyncPtr::new(y);
    // A multiple of the panel height, so that only the matrix's last rows miss a panel.
    let rows_per_task = (m / (pool.n_threads() * TASKS_PER_THREAD))
        .max(MIN_ROWS_PER_TASK)
        .next_multiple_of(PANEL_ROWS);
    pool.for_chunks(m, rows_per_task, |_, rows| {
        let mut rows = rows;
        if let Some(g) = packed {
            let r0 = rows.start;
            rows.start += rows.len() / PANEL_ROWS * PANEL_ROWS;
            PANEL.with_borrow_mut(|panel| {
                panel.resize(k / 32 * PANEL_BLOCK_BYTES, 0);
                for r in (r0..rows.start).step_by(PANEL_ROWS) {
                    (g.pack)(k, &wb[r * wrb..], wrb, panel);
                    for t0 in (0..n).step_by(TILE_TOKENS) {
                        let nt = TILE_TOKENS.min(n - t0);
                        let mut out = [[0f32; PANEL_ROWS]; TILE_TOKENS];
                        (g.tile)(k, panel, &act[t0 * arb..], arb, &sums[t0 * srb..], &mut out[..nt]);
                        for (t, o) in (t0..).zip(&out[..nt]) {
                            // SAFETY: rows are disjoint between tasks, so are these outputs.
                            unsafe { yp.slice(t * m + r, PANEL_ROWS) }.copy_from_slice(o);
                        }
                    }
                }
            });
        }
        by_row(dot, dot4, k, n, m, wb, wrb, act, arb, rows, &yp);
    });
}

/// `rows` of y = x · Wᵀ one weight row at a time: four tokens per call where `dot4` exists.
#[allow(clippy::too_many_arguments)]
fn by_row(
    dot: DotFn,
    dot4: Option<DotX4Fn>,
    k: usize,
    n: usize,
    m: usize,
    wb: &[u8],
    wrb: usize,
    act: &[u8],
    arb: usize,
    rows: Range<usize>,
    yp: &SyncPtr<f32>,
) {
    let mut t = 0;
    if let Some(dot4) = dot4 {
        // Four tokens at a time: each weight block is decoded once for all four.
        while t + 4 <= n {
            let a = [0, 1, 2, 3].map(|i| &act[(t + i) * arb..(t + i + 1) * arb]);
            for r in rows.clone() {
                let s = dot4(k, &wb[r * wrb..(r + 1) * wrb], a);
                for (i, v) in s.into_iter().enumerate() {
                    // SAFETY: rows are disjoint between tasks, so are these outputs.
                    unsafe { *yp.0.add((t + i) * m + r) = v };
                }
            }
            t += 4;
        }
    }
    for t in t..n {
        let a = &act[t * arb..(t + 1) * arb];
        // SAFETY: rows are disjoint between tasks, so are these output ranges.
        let yrow = unsafe { yp.slice(t * m + rows.start, rows.len()) };
        for (yi, r) in yrow.iter_mut().zip(rows.clone()) {
            *yi = dot(k, &wb[r * wrb..(r + 1) * wrb], a);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::QType;
    use crate::tensor::Bytes;

    /// Every path (panels and their leftover rows, 4-token and single dots, tiles longer than
    /// `TILE_TOKENS`) against the scalar dot of each (token, row), on every ISA.
    #[test]
    fn matmul_matches_the_scalar_dot_for_awkward_shapes() {
        let pool = Pool::new(2);
        let scalar = Isa::for_isa("scalar").unwrap();
        let val = |i: usize, s: usize| ((i * s + 7) % 1013) as f32 / 506.0 - 1.0;
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
                let data = qtype.quantize_to_vec(&(0..k * m).map(|i| val(i, 2654435761)).collect::<Vec<_>>());
                let w = Tensor {
                    name: "w".into(),
                    qtype,
                    shape: vec![k as u64, m as u64],
                    data: Bytes::from_vec(data.unwrap()),
                    part: 0,
                    file_offset: 0,
                };
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
                        matmul(&pool, kernels, &w, &x, n, &mut y, &mut Vec::new());
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
}
