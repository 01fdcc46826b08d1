//! The CPU's mixture-of-experts ops: routing, the expert matmul, expert biases and the
//! weighted sum (llama.cpp's `build_moe_ffn` over ggml-cpu's `argsort`, `soft_max`,
//! `mul_mat_id`, `add_id`, `mul` and `add`).
//!
//! A route row is `[id_0 … id_{k-1}, w_0 … w_{k-1}]`: the chosen experts best first, their
//! ids as f32 (exact: ids are below 2^24), then their weights.

use std::ops::Range;

use super::dot::{act_type, block_sums, Gemm, Isa, KPanel, RowTileFn, BLOCK_SUM_BYTES, PANEL_ROWS, WIDE_ROWS};
use super::matmul::{self, Groups};
use super::ops;
use super::pool::{Pool, SyncPtr};
use crate::error::{Error, Result};
use crate::model::Gating;
use crate::quant::QType;
use crate::tensor::Tensor;

/// llama.cpp clamps the sum of the chosen weights to f16's smallest normal (2^-14,
/// 6.103515625e-5) before dividing.
const MIN_WEIGHT_SUM: f32 = 1.0 / 16384.0;

/// Routes every row of `logits` (`[rows, n_expert]`) into `route` (`[rows, 2k]`).
pub fn route(logits: &[f32], n_expert: usize, k: usize, gating: Gating, norm: bool, route: &mut [f32]) {
    let mut probs = vec![0f32; n_expert];
    let mut order: Vec<usize> = Vec::with_capacity(n_expert);
    for (l, r) in logits.chunks_exact(n_expert).zip(route.chunks_exact_mut(2 * k)) {
        probs.copy_from_slice(l);
        if gating == Gating::Softmax {
            ops::softmax(&mut probs);
        }
        // ggml_argsort (descending), then the first k; ties go to the lower id.
        order.clear();
        order.extend(0..n_expert);
        order.sort_by(|&a, &b| probs[b].total_cmp(&probs[a]));
        let (ids, w) = r.split_at_mut(k);
        for ((id, w), &e) in ids.iter_mut().zip(w.iter_mut()).zip(&order) {
            *id = e as f32;
            *w = probs[e];
        }
        if gating == Gating::SoftmaxSelected {
            ops::softmax(w);
        }
        if norm {
            // ggml_sum_rows sums in f64.
            let sum = (w.iter().map(|&v| v as f64).sum::<f64>() as f32).max(MIN_WEIGHT_SUM);
            w.iter_mut().for_each(|v| *v /= sum);
        }
    }
}

/// The expert of slot `j` of a route row, checked against the number of experts (a route
/// is the engine's own output, but a bad one must not index out of the weights).
fn expert_of(route: &[f32], j: usize, n_expert: usize) -> Result<usize> {
    let e = route[j];
    if e >= 0.0 && (e as usize) < n_expert {
        Ok(e as usize)
    } else {
        Err(Error::InvalidArgument(format!("expert id {e} of {n_expert}")))
    }
}

/// The expert matmul: for every row t and slot j, `y[t, j] = experts[e] · x[t, j or 0]` with
/// e the slot's expert. Tokens are grouped by expert, so each expert's rows are read once
/// for all the tokens that chose it and an expert nobody chose is not read at all. Each
/// (token, row) product is the single dot ggml's `mul_mat_id` takes: every token is its own
/// matmul group.
#[allow(clippy::too_many_arguments)]
pub fn matmul_id(
    pool: &Pool,
    kernels: &Isa,
    experts: &[Tensor],
    x: &[f32],
    x_width: usize,
    route: &[f32],
    rows: usize,
    k: usize,
    y: &mut [f32],
    act: &mut Vec<u8>,
) -> Result<()> {
    let Some(first) = experts.first() else {
        return Err(Error::InvalidArgument("matmul_id without experts".into()));
    };
    let (n_in, n_out) = (first.row_len(), first.n_rows());
    let per_slot = x_width != n_in;
    let mut slots: Vec<Vec<(usize, usize)>> = vec![Vec::new(); experts.len()];
    for t in 0..rows {
        let r = &route[t * 2 * k..(t + 1) * 2 * k];
        for j in 0..k {
            slots[expert_of(r, j, experts.len())?].push((t, j));
        }
    }
    let job = || Job {
        experts,
        x,
        per_slot,
        slots: &slots,
        rows,
        k,
    };
    // One pass over every chosen expert where the experts share a type and shape: float rows
    // read in place; one token's single dots; q4_K and the types with a `Gemm` through panels.
    if experts.iter().all(|e| e.qtype == first.qtype && e.shape == first.shape) {
        if let Some(rt) = kernels.row_tile(first.qtype) {
            row_tiles(pool, kernels, rt, &job(), y);
            return Ok(());
        }
        if rows == 1 {
            one_token(pool, kernels, &job(), y, act);
            return Ok(());
        }
        if let Some(kp) = kernels.k_panel(first.qtype) {
            panels(pool, kernels, kp, &job(), y, act);
            return Ok(());
        }
        if let Some(g) = kernels.gemm(first.qtype) {
            panels_gemm(pool, kernels, g, &job(), y, act);
            return Ok(());
        }
    }
    let mut xs: Vec<f32> = Vec::new();
    let mut ys: Vec<f32> = Vec::new();
    for (w, slots) in experts.iter().zip(&slots) {
        if slots.is_empty() {
            continue;
        }
        let n = slots.len();
        xs.clear();
        for &(t, j) in slots {
            let off = t * x_width + if per_slot { j * n_in } else { 0 };
            xs.extend_from_slice(&x[off..off + n_in]);
        }
        ys.resize(n * n_out, 0.0);
        let groups = Groups {
            groups: (0..n).map(|i| vec![i]).collect(),
        };
        matmul::matmul(pool, kernels, w, &xs, n, &mut ys, act, Some(&groups));
        for (&(t, j), yr) in slots.iter().zip(ys.chunks_exact(n_out)) {
            let off = (t * k + j) * n_out;
            y[off..off + n_out].copy_from_slice(yr);
        }
    }
    Ok(())
}

/// `matmul_id` through q4_K panels, in one pass over every chosen expert: the input rows are
/// quantized once (not once per expert), each expert's panels run against the activation rows
/// of the tokens that chose it, and every product lands in its slot's output row directly.
fn panels(pool: &Pool, kernels: &Isa, kp: KPanel, job: &Job, y: &mut [f32], act: &mut Vec<u8>) {
    let (experts, x) = (job.experts, job.x);
    let (n_in, n_out, at, arb, n_x) = job.shape();
    act.resize(n_x * arb, 0);
    quantize_inputs(pool, kernels, at, &x[..n_x * n_in], n_in, None, act);
    let act = &act[..];
    let lists = job.expert_rows();
    let (band_rows, n_panels, n_bands, per_expert) = units(n_out, kp.wide.is_some());
    let yp = SyncPtr::new(y);
    let dot = kernels.dot(experts[0].qtype);
    pool.for_chunks(lists.len() * per_expert, 1, |_, units| {
        for u in units {
            let (e, ins, outs) = &lists[u / per_expert];
            let (w, p) = (&experts[*e], u % per_expert);
            let (wb, wrb) = (w.bytes(), w.row_bytes());
            if p < n_bands {
                let band = p * band_rows..((p + 1) * band_rows).min(n_panels * PANEL_ROWS);
                // SAFETY: each (expert, band) is one unit, and an output row belongs to one
                // slot, which chose one expert.
                unsafe {
                    matmul::k_panel_band(
                        kp,
                        n_in,
                        wb,
                        wrb,
                        band,
                        act,
                        arb,
                        &[(matmul::KOrder::Singles, ins, outs)],
                        &yp,
                        n_out,
                    )
                };
            } else {
                for (&i, &o) in ins.iter().zip(outs) {
                    let a = &act[i * arb..(i + 1) * arb];
                    for r in n_panels * PANEL_ROWS..n_out {
                        // SAFETY: as above.
                        unsafe { *yp.0.add(o * n_out + r) = dot(n_in, &wb[r * wrb..(r + 1) * wrb], a) };
                    }
                }
            }
        }
    });
}

/// `matmul_id` of float experts in one pass: the tiles read each expert's rows in place, 16 at
/// a time, against the input rows of the tokens that chose it (the input itself: the float
/// types take f32 activations), and every product lands in its slot's output row.
fn row_tiles(pool: &Pool, kernels: &Isa, rt: RowTileFn, job: &Job, y: &mut [f32]) {
    let (n_in, n_out, at, arb, n_x) = job.shape();
    debug_assert_eq!(at, QType::F32);
    let act: &[u8] = bytemuck::cast_slice(&job.x[..n_x * n_in]);
    let (dot, yp) = (kernels.dot(job.experts[0].qtype), SyncPtr::new(y));
    each_band(pool, job, n_out, |w, (ins, outs), band| {
        // SAFETY: each (expert, band) is one unit, and an output row belongs to one slot,
        // which chose one expert.
        unsafe {
            matmul::row_tile_band(
                rt,
                dot,
                n_in,
                w.bytes(),
                w.row_bytes(),
                band,
                (act, arb),
                (ins, outs),
                &yp,
                n_out,
            )
        };
    });
}

/// `f(expert, (its tokens' input rows, their slots' output rows), band)` for every chosen
/// expert and 16-row band of its `n_out` rows, each one unit of a single pool dispatch.
fn each_band(pool: &Pool, job: &Job, n_out: usize, f: impl Fn(&Tensor, (&[usize], &[usize]), Range<usize>) + Sync) {
    let lists = job.expert_rows();
    let n_bands = n_out.div_ceil(WIDE_ROWS);
    pool.for_chunks(lists.len() * n_bands, 1, |_, units| {
        for u in units {
            let (e, ins, outs) = &lists[u / n_bands];
            let b = u % n_bands;
            f(
                &job.experts[*e],
                (ins, outs),
                b * WIDE_ROWS..((b + 1) * WIDE_ROWS).min(n_out),
            );
        }
    });
}

/// `matmul_id` of one token (decode) in one pass: its input rows quantized once, each (expert,
/// 16-row band) one unit of a single pool dispatch, every product the single dot the matmul of
/// one token takes (`Gemm::row` for the types with panels; two rows at a time where the type
/// has a two-row kernel of the same bits).
fn one_token(pool: &Pool, kernels: &Isa, job: &Job, y: &mut [f32], act: &mut Vec<u8>) {
    let (n_in, n_out, at, arb, n_x) = job.shape();
    act.resize(n_x * arb, 0);
    quantize_inputs(pool, kernels, at, &job.x[..n_x * n_in], n_in, None, act);
    let act = &act[..];
    let qtype = job.experts[0].qtype;
    let (dot, dot2) = match kernels.gemm(qtype) {
        Some(g) => (g.row, g.row2),
        None => (kernels.dot(qtype), kernels.dot_r2(qtype)),
    };
    let yp = SyncPtr::new(y);
    each_band(pool, job, n_out, |w, (ins, outs), band| {
        for (&i, &o) in ins.iter().zip(outs) {
            // SAFETY: each (expert, band) is one unit, and an output row belongs to one slot,
            // which chose one expert.
            let yr = unsafe { yp.slice(o * n_out + band.start, band.len()) };
            let a = &act[i * arb..(i + 1) * arb];
            matmul::dot_rows((dot, dot2), n_in, (w.bytes(), w.row_bytes()), band.clone(), a, yr);
        }
    });
}

/// One expert matmul for the one-pass paths: the experts, the input (one row per token, or per
/// slot for a per-slot input: the down projection) and each expert's slots `(token, j)`.
struct Job<'a> {
    experts: &'a [Tensor],
    x: &'a [f32],
    per_slot: bool,
    slots: &'a [Vec<(usize, usize)>],
    rows: usize,
    k: usize,
}

impl Job<'_> {
    /// Per chosen expert: (expert, its tokens' input rows, their slots' output rows).
    fn expert_rows(&self) -> Vec<(usize, Vec<usize>, Vec<usize>)> {
        let k = self.k;
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, s)| !s.is_empty())
            .map(|(e, s)| {
                let ins = s
                    .iter()
                    .map(|&(t, j)| if self.per_slot { t * k + j } else { t })
                    .collect();
                (e, ins, s.iter().map(|&(t, j)| t * k + j).collect())
            })
            .collect()
    }

    /// (n_in, n_out, activation type, its row bytes, input rows).
    fn shape(&self) -> (usize, usize, QType, usize, usize) {
        let (n_in, n_out) = (self.experts[0].row_len(), self.experts[0].n_rows());
        let at = act_type(self.experts[0].qtype);
        let n_x = if self.per_slot { self.rows * self.k } else { self.rows };
        (n_in, n_out, at, n_in / at.block_elems() * at.block_bytes(), n_x)
    }
}

/// Quantizes the rows of `x` (`n_in` wide) into `act`'s first rows (`at`), and with `sums` (a
/// [`Gemm`]'s offset) their block sums after them, in parallel.
fn quantize_inputs(pool: &Pool, kernels: &Isa, at: QType, x: &[f32], n_in: usize, sums: Option<i32>, act: &mut [u8]) {
    let n_x = x.len() / n_in;
    let arb = n_in / at.block_elems() * at.block_bytes();
    let srb = if sums.is_some() { n_in / 32 * BLOCK_SUM_BYTES } else { 0 };
    let (a, sm) = act[..n_x * (arb + srb)].split_at_mut(n_x * arb);
    let (ap, sp) = (SyncPtr::new(a), SyncPtr::new(sm));
    pool.for_chunks(n_x, 4, |_, r| {
        for i in r {
            // SAFETY: each row's activation and sums are written by one task.
            let dst = unsafe { ap.slice(i * arb, arb) };
            kernels.quantize_act(at, &x[i * n_in..(i + 1) * n_in], dst);
            if let Some(off) = sums {
                // SAFETY: as above.
                block_sums(dst, off, unsafe { sp.slice(i * srb, srb) });
            }
        }
    });
}

/// An expert's units of work over `n_out` rows: bands of whole panels (16 rows where `wide`),
/// then its last rows (one unit) where there are some: (band rows, whole panels, bands, units).
fn units(n_out: usize, wide: bool) -> (usize, usize, usize, usize) {
    let band_rows = if wide { WIDE_ROWS } else { PANEL_ROWS };
    let n_panels = n_out / PANEL_ROWS;
    let n_bands = n_panels.div_ceil(band_rows / PANEL_ROWS);
    (
        band_rows,
        n_panels,
        n_bands,
        n_bands + usize::from(!n_out.is_multiple_of(PANEL_ROWS)),
    )
}

/// `matmul_id` through a type's [`Gemm`] panels, in one pass as [`panels`]: the input rows
/// quantized once with their block sums, then copied expert by expert into runs of rows (the
/// tiles read consecutive rows), each expert's panels run against its run, and every product
/// lands in its slot's output row.
fn panels_gemm(pool: &Pool, kernels: &Isa, g: Gemm, job: &Job, y: &mut [f32], act: &mut Vec<u8>) {
    let (experts, x, per_slot, slots, k) = (job.experts, job.x, job.per_slot, job.slots, job.k);
    let (n_in, n_out, at, arb, n_x) = job.shape();
    let srb = n_in / 32 * BLOCK_SUM_BYTES;
    // The input rows (act, then sums), then each expert's run of them (act, then sums).
    let n_slots: usize = slots.iter().map(Vec::len).sum();
    act.resize((n_x + n_slots) * (arb + srb), 0);
    let (inp, runs) = act.split_at_mut(n_x * (arb + srb));
    quantize_inputs(pool, kernels, at, &x[..n_x * n_in], n_in, Some(g.off), inp);
    let (in_act, in_sums) = inp.split_at(n_x * arb);
    let (run_act, run_sums) = runs.split_at_mut(n_slots * arb);
    // Per chosen expert: (expert, first row of its run, its slots' output rows).
    let mut lists: Vec<(usize, usize, Vec<usize>)> = Vec::new();
    let mut at_row = 0;
    for (e, s) in slots.iter().enumerate().filter(|(_, s)| !s.is_empty()) {
        for (i, &(t, j)) in s.iter().enumerate() {
            let src = if per_slot { t * k + j } else { t };
            let dst = at_row + i;
            run_act[dst * arb..(dst + 1) * arb].copy_from_slice(&in_act[src * arb..(src + 1) * arb]);
            run_sums[dst * srb..(dst + 1) * srb].copy_from_slice(&in_sums[src * srb..(src + 1) * srb]);
        }
        lists.push((e, at_row, s.iter().map(|&(t, j)| t * k + j).collect()));
        at_row += s.len();
    }
    let (run_act, run_sums) = (&run_act[..], &run_sums[..]);
    let (band_rows, n_panels, n_bands, per_expert) = units(n_out, g.wide.is_some());
    let yp = SyncPtr::new(y);
    pool.for_chunks(lists.len() * per_expert, 1, |_, units| {
        for u in units {
            let (e, r0, outs) = &lists[u / per_expert];
            let (w, p) = (&experts[*e], u % per_expert);
            let (wb, wrb) = (w.bytes(), w.row_bytes());
            let (a, sm) = (&run_act[r0 * arb..], &run_sums[r0 * srb..]);
            if p < n_bands {
                let band = p * band_rows..((p + 1) * band_rows).min(n_panels * PANEL_ROWS);
                // SAFETY: each (expert, band) is one unit, and an output row belongs to one
                // slot, which chose one expert.
                unsafe {
                    matmul::gemm_band(
                        g,
                        n_in,
                        wb,
                        wrb,
                        band,
                        (a, arb, sm, srb),
                        outs.len(),
                        Some(outs),
                        &yp,
                        n_out,
                    )
                };
            } else {
                for (i, &o) in outs.iter().enumerate() {
                    let ai = &a[i * arb..(i + 1) * arb];
                    for r in n_panels * PANEL_ROWS..n_out {
                        // SAFETY: as above.
                        unsafe { *yp.0.add(o * n_out + r) = (g.row)(n_in, &wb[r * wrb..(r + 1) * wrb], ai) };
                    }
                }
            }
        }
    });
}

/// `y[t, j] = x[t, j] + bias[e]` (`bias` `[n_expert][width]`, `x`, `y` `[rows, k, width]`).
pub fn add_bias_id(x: &[f32], route: &[f32], bias: &[f32], width: usize, k: usize, y: &mut [f32]) -> Result<()> {
    let n_expert = bias.len() / width.max(1);
    for (t, (yr, xr)) in y.chunks_exact_mut(k * width).zip(x.chunks_exact(k * width)).enumerate() {
        let r = &route[t * 2 * k..(t + 1) * 2 * k];
        for j in 0..k {
            let e = expert_of(r, j, n_expert)?;
            let b = &bias[e * width..(e + 1) * width];
            let (ys, xs) = (&mut yr[j * width..(j + 1) * width], &xr[j * width..(j + 1) * width]);
            ys.iter_mut().zip(xs).zip(b).for_each(|((y, &x), &b)| *y = x + b);
        }
    }
    Ok(())
}

/// `y[t] = Σ_j w_j · x[t, j]`: each slot scaled by its weight (`ggml_mul`), then added in
/// slot order (llama.cpp's chain of `ggml_add`).
pub fn moe_sum(x: &[f32], route: &[f32], width: usize, k: usize, y: &mut [f32]) {
    for (t, (yr, xr)) in y.chunks_exact_mut(width).zip(x.chunks_exact(k * width)).enumerate() {
        let w = &route[t * 2 * k + k..(t + 1) * 2 * k];
        for (i, v) in yr.iter_mut().enumerate() {
            let mut s = xr[i] * w[0];
            for j in 1..k {
                s += xr[j * width + i] * w[j];
            }
            *v = s;
        }
    }
}

/// `ggml_compute_forward_swiglu_oai_f32`.
pub fn swiglu_oai(gate: &[f32], up: &[f32], alpha: f32, limit: f32, y: &mut [f32]) {
    for ((y, &g), &u) in y.iter_mut().zip(gate).zip(up) {
        let x = g.min(limit);
        let u = u.clamp(-limit, limit);
        let glu = x / (1.0 + (alpha * -x).exp());
        *y = glu * (u + 1.0);
    }
}

/// `x · σ(g)` per row, σ as llama.cpp's qwen2moe computes it: `ggml_silu` then `ggml_div`.
pub fn sigmoid_gate(x: &[f32], gate: &[f32], width: usize, y: &mut [f32]) {
    for ((yr, xr), &g) in y.chunks_exact_mut(width).zip(x.chunks_exact(width)).zip(gate) {
        let s = (g / (1.0 + (-g).exp())) / g;
        yr.iter_mut().zip(xr).for_each(|(y, &x)| *y = x * s);
    }
}

/// The experts of a `[in, out, n_expert]` tensor as `[in, out]` matrices: zero-copy windows.
pub fn expert_views(t: &Tensor) -> Result<Vec<Tensor>> {
    let (n_out, n_expert) = match t.shape[..] {
        [_, o, e] => (o as usize, e as usize),
        _ => {
            return Err(Error::tensor(
                &t.name,
                format!("shape {:?} is not [in, out, n_expert]", t.shape),
            ))
        }
    };
    let bytes = n_out * t.row_bytes();
    (0..n_expert)
        .map(|e| {
            let data = t
                .data
                .slice(e * bytes, bytes)
                .ok_or_else(|| Error::tensor(&t.name, format!("expert {e} lies outside the data")))?;
            Ok(Tensor {
                name: format!("{}[{e}]", t.name),
                shape: vec![t.shape[0], n_out as u64],
                data,
                ..t.clone()
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Softmax routing with renormalisation against a direct computation.
    #[test]
    fn softmax_routing_picks_the_largest_and_renormalises() {
        let logits = [0.5f32, 2.0, -1.0, 1.5];
        let mut r = [0f32; 4];
        route(&logits, 4, 2, Gating::Softmax, true, &mut r);
        assert_eq!(&r[..2], &[1.0, 3.0]);
        let (a, b) = (2.0f32.exp(), 1.5f32.exp());
        assert!(
            (r[2] - a / (a + b)).abs() < 1e-6 && (r[3] - b / (a + b)).abs() < 1e-6,
            "{r:?}"
        );
        // Without renormalisation the weights are the probabilities over all four.
        route(&logits, 4, 2, Gating::Softmax, false, &mut r);
        let z: f32 = logits.iter().map(|v| v.exp()).sum();
        assert!((r[2] - a / z).abs() < 1e-6, "{r:?}");
        // gpt-oss: top-k of the raw logits, softmax over those k.
        route(&logits, 4, 2, Gating::SoftmaxSelected, false, &mut r);
        assert_eq!(&r[..2], &[1.0, 3.0]);
        assert!((r[2] - a / (a + b)).abs() < 1e-6, "{r:?}");
    }

    /// Decode reads only the chosen experts: the others are NaN here, and the result is still
    /// finite and equal to the chosen experts' products.
    #[test]
    fn matmul_id_reads_only_the_chosen_experts() {
        let (n_in, n_out, n_expert, k) = (64, 8, 4, 2);
        let mut w: Vec<f32> = (0..n_in * n_out * n_expert)
            .map(|i| ((i * 37) % 17) as f32 / 17.0 - 0.5)
            .collect();
        for e in [0, 2] {
            w[e * n_in * n_out..(e + 1) * n_in * n_out].fill(f32::NAN);
        }
        let t = Tensor::from_f32("exps", &[n_in as u64, n_out as u64, n_expert as u64], &w);
        let experts = expert_views(&t).unwrap();
        let x: Vec<f32> = (0..2 * n_in).map(|i| (i % 7) as f32 - 3.0).collect();
        let route = [3.0, 1.0, 0.5, 0.5, 1.0, 3.0, 0.5, 0.5];
        let mut y = vec![0f32; 2 * k * n_out];
        let pool = Pool::new(2);
        matmul_id(
            &pool,
            Isa::best(),
            &experts,
            &x,
            n_in,
            &route,
            2,
            k,
            &mut y,
            &mut Vec::new(),
        )
        .unwrap();
        for (slot, &e) in [3usize, 1, 1, 3].iter().enumerate() {
            let t = slot / k;
            for r in 0..n_out {
                let row = &w[(e * n_out + r) * n_in..(e * n_out + r + 1) * n_in];
                let want: f32 = row.iter().zip(&x[t * n_in..(t + 1) * n_in]).map(|(a, b)| a * b).sum();
                let got = y[slot * n_out + r];
                assert!((got - want).abs() <= 1e-4, "slot {slot} row {r}: {got} vs {want}");
            }
        }
    }

    /// The one-pass expert matmuls (q4_K panels, the panels of the types with a `Gemm`, float
    /// rows read in place, one token's single dots; over every chosen expert, and rows past the
    /// last panel or tile) give each slot the bits of the row kernel (the single dot,
    /// `Gemm::row`), for a batch and one token, a shared and a per-slot input.
    #[test]
    fn expert_matmul_panels_are_the_row_kernel_bit_for_bit() {
        // q6_K and q4_1 have no panels: one token only.
        for qtype in [
            QType::Q4K,
            QType::Q8_0,
            QType::Q4_0,
            QType::MXFP4,
            QType::F16,
            QType::Q6K,
            QType::Q4_1,
        ] {
            expert_panels_case(qtype, 512, 28);
        }
        // Float rows read in place, with tails in the rows (100 = 3·32 + 4) and rows outside
        // whole tiles (30).
        for qtype in [QType::F32, QType::BF16] {
            expert_panels_case(qtype, 100, 30);
        }
    }

    fn expert_panels_case(qtype: QType, n_in: usize, n_out: usize) {
        // A batch, and one token (decode).
        for rows in [7, 1] {
            expert_case(qtype, n_in, n_out, rows);
        }
    }

    fn expert_case(qtype: QType, n_in: usize, n_out: usize, rows: usize) {
        let (n_expert, k) = (4, 2);
        let val = |i: usize, s: usize| ((i * s + 7) % 1013) as f32 / 506.0 - 1.0;
        let w: Vec<f32> = (0..n_in * n_out * n_expert).map(|i| val(i, 2654435761)).collect();
        let data = qtype.quantize_to_vec(&w).unwrap();
        let t = Tensor {
            data: crate::tensor::Bytes::from_vec(data),
            qtype,
            ..Tensor::from_f32("exps", &[n_in as u64, n_out as u64, n_expert as u64], &[])
        };
        let experts = expert_views(&t).unwrap();
        // Expert 2 is nobody's choice.
        let route: Vec<f32> = (0..rows)
            .flat_map(|t| {
                let (a, b) = [(0, 1), (3, 0), (1, 3)][t % 3];
                [a as f32, b as f32, 0.5, 0.5]
            })
            .collect();
        let pool = Pool::new(2);
        for isa in ["avx2", "avx512"] {
            let Ok(kernels) = Isa::for_isa(isa) else { continue };
            if isa == "avx512" && matches!(qtype, QType::F32 | QType::F16 | QType::BF16) {
                assert!(kernels.row_tile(qtype).is_some(), "avx512 has {qtype} row tiles");
            }
            let dot = match kernels.gemm(qtype) {
                Some(g) => g.row,
                None if kernels.k_panel(qtype).is_some() || kernels.row_tile(qtype).is_some() => kernels.dot(qtype),
                // Floats without tiles: one matmul per expert, single-token groups; one token:
                // its single dots.
                None if rows == 1 || matches!(qtype, QType::F32 | QType::F16 | QType::BF16) => kernels.dot(qtype),
                None => continue,
            };
            let at = act_type(qtype);
            for per_slot in [false, true] {
                let x_width = if per_slot { k * n_in } else { n_in };
                let x: Vec<f32> = (0..rows * x_width).map(|i| val(i, 40503)).collect();
                let mut y = vec![f32::NAN; rows * k * n_out];
                matmul_id(
                    &pool,
                    kernels,
                    &experts,
                    &x,
                    x_width,
                    &route,
                    rows,
                    k,
                    &mut y,
                    &mut Vec::new(),
                )
                .unwrap();
                let mut a = vec![0u8; n_in / at.block_elems() * at.block_bytes()];
                for slot in 0..rows * k {
                    let (t, j) = (slot / k, slot % k);
                    let off = t * x_width + if per_slot { j * n_in } else { 0 };
                    kernels.quantize_act(at, &x[off..off + n_in], &mut a);
                    let e = experts[route[t * 2 * k + j] as usize].bytes();
                    let rb = e.len() / n_out;
                    for r in 0..n_out {
                        let want = dot(n_in, &e[r * rb..(r + 1) * rb], &a);
                        let got = y[slot * n_out + r];
                        assert_eq!(
                            got.to_bits(),
                            want.to_bits(),
                            "{isa} {qtype} rows={rows} per_slot={per_slot} slot {slot} row {r}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn weighted_sum_and_biases_follow_the_route() {
        // Two rows, k = 2, width 2; experts 3 then 0, and 1 then 2.
        let route = [3.0, 0.0, 0.75, 0.25, 1.0, 2.0, 0.5, 0.5];
        let x = [1.0, 2.0, 10.0, 20.0, 4.0, 4.0, 8.0, 0.0];
        let mut y = [0f32; 4];
        moe_sum(&x, &route, 2, 2, &mut y);
        assert_eq!(y, [3.25, 6.5, 6.0, 2.0]);
        let bias: Vec<f32> = (0..8).map(|i| i as f32 * 100.0).collect();
        let mut yb = [0f32; 8];
        add_bias_id(&x, &route, &bias, 2, 2, &mut yb).unwrap();
        assert_eq!(yb, [601.0, 702.0, 10.0, 120.0, 204.0, 304.0, 408.0, 500.0]);
        let bad = [7.0, 0.0, 0.5, 0.5, 1.0, 2.0, 0.5, 0.5];
        assert!(add_bias_id(&x, &bad, &bias, 2, 2, &mut yb).is_err());
    }
}
