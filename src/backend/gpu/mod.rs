//! What every GPU backend shares: the kernel table (`table`), each kernel's parameter struct
//! (`params`), the variants and the shared gate (`kernels`), and the schedule that turns a
//! graph into kernel launches (`schedule`). wgpu and CUDA each turn one schedule into their own
//! dispatches; neither holds graph logic of its own.

#[cfg(test)]
mod abi;
pub mod kernels;
pub mod params;
pub mod schedule;
pub mod table;

use crate::backend::Progress;
use crate::model::Model;
use crate::tensor::Tensor;

/// The upload loop both GPU backends run once per model: every weight in name order (so logs
/// and failures are reproducible), each checked to be whole rows, then handed to `put`;
/// progress reported as `(bytes done, bytes total)`. Stops at the first error, naming the weight.
pub fn upload_each(
    model: &Model,
    progress: Option<&Progress>,
    mut put: impl FnMut(&Tensor) -> Result<(), String>,
) -> Result<(), String> {
    let mut tensors: Vec<&Tensor> = model.weights.values().collect();
    tensors.sort_unstable_by(|a, b| a.name.cmp(&b.name));
    let total: u64 = tensors.iter().map(|t| t.data.len() as u64).sum();
    let mut done = 0u64;
    if let Some(p) = progress {
        p.report(0, total);
    }
    for t in tensors {
        let (rb, rows, len) = (t.row_bytes(), t.n_rows(), t.bytes().len());
        if rb.checked_mul(rows) != Some(len) {
            return Err(format!("{}: {len} bytes for {rows} rows of {rb}", t.name));
        }
        put(t)?;
        done += len as u64;
        if let Some(p) = progress {
            p.report(done, total);
        }
    }
    Ok(())
}
