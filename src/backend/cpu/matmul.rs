//! y = x · Wᵀ on the CPU for any weight qtype, reading the raw GGUF rows.
//!
//! Activations are first quantized to the weight type's vec-dot partner (Q8_0 / Q8_1 / Q8_K,
//! as ggml does), then each thread takes a band of weight rows and runs it against every
//! token, so a band stays in cache while the tokens stream past.

use super::dot::{act_type, Kernels};
use super::pool::{Pool, SyncPtr};
use crate::tensor::Tensor;

/// Weight rows per task, at least. 16 rows of a 576-wide Q4_1 matrix are 6 KB: they stay in
/// L1 while the tokens of a prefill batch stream past.
const MIN_ROWS_PER_TASK: usize = 16;
/// Tasks per thread for a big matrix: enough for a late or descheduled thread to be covered
/// by the others, few enough that handing out tasks costs nothing (gemma-3's 262 144-row
/// output matrix used to be 16 384 tasks a token).
const TASKS_PER_THREAD: usize = 16;

/// x: (n, k) f32; y: (n, m) f32 with m = w.n_rows(); `act` is scratch for quantized x.
pub fn matmul(pool: &Pool, kernels: &Kernels, w: &Tensor, x: &[f32], n: usize, y: &mut [f32], act: &mut Vec<u8>) {
    let (k, m) = (w.row_len(), w.n_rows());
    debug_assert_eq!(x.len(), n * k);
    debug_assert_eq!(y.len(), n * m);
    let at = act_type(w.qtype);
    let arb = k / at.block_elems() * at.block_bytes();
    act.resize(n * arb, 0);
    if n >= 8 {
        let ap = SyncPtr::new(act);
        pool.for_chunks(n, 4, |_, r| {
            for t in r {
                // SAFETY: each token's activation row is written by one task.
                let dst = unsafe { ap.slice(t * arb, arb) };
                kernels.quantize_act(at, &x[t * k..(t + 1) * k], dst);
            }
        });
    } else {
        for t in 0..n {
            kernels.quantize_act(at, &x[t * k..(t + 1) * k], &mut act[t * arb..(t + 1) * arb]);
        }
    }
    let act = &act[..];
    let wb = w.bytes();
    let wrb = w.row_bytes();
    let dot = kernels.dot(w.qtype);
    let dot4 = kernels.dot_x4(w.qtype);
    let yp = SyncPtr::new(y);
    let rows_per_task = (m / (pool.n_threads() * TASKS_PER_THREAD)).max(MIN_ROWS_PER_TASK);
    pool.for_chunks(m, rows_per_task, |_, rows| {
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
    });
}
