//! What every GPU backend shares: the kernel table (`table`), each kernel's parameter struct
//! (`params`), the variants and the shared gate (`kernels`), and the schedule that turns a
//! graph into kernel launches (`schedule`). wgpu and CUDA each turn one schedule into their own
//! dispatches; neither holds graph logic of its own.

#[cfg(test)]
mod abi;
pub mod cost;
pub mod kernels;
pub mod params;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub mod profile;
pub mod roofline;
pub mod schedule;
pub mod shape;
pub mod table;

use std::collections::HashMap;
use std::sync::Arc;

use crate::backend::Progress;
use crate::model::Model;
use crate::quant::QType;
use crate::tensor::Tensor;
use schedule::{PackSlot, WeightParts};

/// Bytes after each weight's data on the CUDA backend, zeroed: kernels may read a word past a
/// block's end (16: one vector load).
pub const CUDA_PAD: u64 = 16;

/// The same on wgpu: `w_u32` at the last block reads one word further.
pub const WGPU_PAD: u64 = 4;

/// Alignment of each member of a pack in its buffer: a binding's offset must be a multiple of
/// the device's `min_storage_buffer_offset_alignment`, which is at most 256.
pub const PACK_ALIGN: u64 = 256;

/// The runs of weights a GPU backend uploads side by side into one buffer (a pack, each member
/// at a multiple of [`PACK_ALIGN`]), so that one launch reads them all (`matmul_vec_pack`),
/// in the order its rows are computed: per layer the Q, K and V projections (the longest run
/// from Q of one qtype and row length) and gate and up; then, for a weight pack, its members'
/// biases where each has an f32 one. Every member stays its own weight too, bound as a view.
pub fn packs(model: &Model) -> Vec<Vec<&Tensor>> {
    let mut out = Vec::new();
    for l in 0..model.hparams.n_layer {
        for names in [&["attn_q", "attn_k", "attn_v"][..], &["ffn_gate", "ffn_up"]] {
            let get = |n: &str, s: &str| model.weights.get(&format!("blk.{l}.{n}.{s}"));
            let mut run: Vec<&Tensor> = Vec::new();
            for n in names {
                match get(n, "weight") {
                    Some(t)
                        if t.shape.len() == 2
                            && run
                                .first()
                                .is_none_or(|f| f.qtype == t.qtype && f.row_len() == t.row_len()) =>
                    {
                        run.push(t)
                    }
                    _ => break,
                }
            }
            if run.len() < 2 {
                continue;
            }
            let biases: Option<Vec<&Tensor>> = names[..run.len()]
                .iter()
                .map(|n| get(n, "bias").filter(|b| b.qtype == QType::F32 && b.shape.len() == 1))
                .collect();
            out.push(run);
            out.extend(biases);
        }
    }
    out
}

/// The upload loop both GPU backends run once per model: every weight in name order (so logs
/// and failures are reproducible), each checked to be whole rows, then handed to `put` — alone,
/// or with the other members of its pack (`packs`) where it is a pack's first in name order;
/// progress reported as `(bytes done, bytes total)`. Stops at the first error, naming the weight.
pub fn upload_each(
    model: &Model,
    progress: Option<&Progress>,
    mut put: impl FnMut(&[&Tensor]) -> Result<(), String>,
) -> Result<(), String> {
    let mut tensors: Vec<&Tensor> = model.weights.values().collect();
    tensors.sort_unstable_by(|a, b| a.name.cmp(&b.name));
    let packs = packs(model);
    let pack_of: HashMap<&str, usize> = packs
        .iter()
        .enumerate()
        .flat_map(|(i, p)| p.iter().map(move |t| (t.name.as_str(), i)))
        .collect();
    let total: u64 = tensors.iter().map(|t| t.data.len() as u64).sum();
    let mut done = 0u64;
    if let Some(p) = progress {
        p.report(0, total);
    }
    let mut put_done = vec![false; packs.len()];
    for t in tensors {
        let (rb, rows, len) = (t.row_bytes(), t.n_rows(), t.bytes().len());
        if rb.checked_mul(rows) != Some(len) {
            return Err(format!("{}: {len} bytes for {rows} rows of {rb}", t.name));
        }
        match pack_of.get(t.name.as_str()) {
            Some(&i) if !put_done[i] => {
                put_done[i] = true;
                put(&packs[i])?;
            }
            Some(_) => {}
            None => put(&[t])?,
        }
        done += len as u64;
        if let Some(p) = progress {
            p.report(done, total);
        }
    }
    Ok(())
}

/// Where each member of a pack of `sizes` bytes lies in its buffer, and the buffer's size:
/// members [`PACK_ALIGN`]-aligned, each followed by `pad` bytes of zeros that belong to it.
pub fn pack_offsets(sizes: &[u64], pad: u64) -> (Vec<u64>, u64) {
    let mut offsets = Vec::with_capacity(sizes.len());
    let mut end = 0u64;
    for &s in sizes {
        let o = end.div_ceil(PACK_ALIGN) * PACK_ALIGN;
        offsets.push(o);
        end = o + s.div_ceil(4) * 4 + pad;
    }
    (offsets, end)
}

/// Row ranges `(row0, rows)` of the parts of a `n_rows × row_bytes` tensor when one binding
/// holds at most `max_binding` bytes (data, rounded up to 4, plus `pad`).
pub fn split_rows(row_bytes: u64, n_rows: u64, max_binding: u64, pad: u64) -> Result<Vec<(usize, usize)>, String> {
    let room = max_binding.saturating_sub(pad + 3);
    if row_bytes == 0 || row_bytes > room {
        return Err(format!(
            "a row of {row_bytes} bytes does not fit a {max_binding}-byte binding"
        ));
    }
    let per = (room / row_bytes).max(1);
    let mut out = Vec::new();
    let mut r = 0;
    while r < n_rows {
        let n = per.min(n_rows - r);
        out.push((r as usize, n as usize));
        r += n;
    }
    if out.is_empty() {
        out.push((0, 0));
    }
    Ok(out)
}

/// Every weight's layout as a GPU backend uploads it (`upload_each`): whole where `max_binding`
/// is `None` (CUDA), else split by rows into bindings of at most that many bytes (wgpu); the
/// members of a pack side by side (`pack_offsets` with `pad` bytes after each), where the pack
/// fits one binding, else each alone. What `plan` schedules with, without a device.
pub fn layouts(model: &Model, max_binding: Option<u64>, pad: u64) -> Result<HashMap<String, Arc<WeightParts>>, String> {
    let mut out = HashMap::new();
    upload_each(model, None, |ts| {
        let alone = |t: &Tensor| -> Result<WeightParts, String> {
            let parts = match max_binding {
                Some(max) => split_rows(t.row_bytes() as u64, t.n_rows() as u64, max, pad)
                    .map_err(|e| format!("{}: {e}", t.name))?,
                None => vec![(0, t.n_rows())],
            };
            Ok(WeightParts {
                name: t.name.as_str().into(),
                qtype: t.qtype,
                row_len: t.row_len(),
                parts,
                pack: None,
            })
        };
        let sizes: Vec<u64> = ts.iter().map(|t| t.bytes().len() as u64).collect();
        let (offsets, total) = pack_offsets(&sizes, pad);
        let packed = ts.len() > 1 && max_binding.is_none_or(|m| total <= m);
        for (index, t) in ts.iter().enumerate() {
            let mut w = alone(t)?;
            if packed {
                w.parts = vec![(0, t.n_rows())];
                w.pack = Some(PackSlot {
                    first: ts[0].name.as_str().into(),
                    index,
                    offset: offsets[index],
                });
            }
            out.insert(t.name.clone(), Arc::new(w));
        }
        Ok(())
    })?;
    Ok(out)
}
