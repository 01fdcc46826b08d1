//! Weights on the device: each uploaded once, raw (the GGUF blocks as they are in the file),
//! under its canonical name. A tensor larger than one storage binding is split by rows into
//! parts; every kernel that reads a matrix is dispatched once per part with the part's first
//! row, so no kernel ever sees more than one binding. The members of a pack (`gpu::packs`:
//! a layer's Q/K/V, gate/up) share one buffer, each at an aligned offset, so one launch can
//! bind them all; each is still bound alone as a view of its own bytes.

use std::collections::HashMap;
use std::sync::Arc;

use super::device::Gpu;
use crate::backend::gpu::schedule::{PackSlot, WeightParts};
use crate::model::Model;
use crate::tensor::Tensor;

/// Bytes after the data of each buffer: `w_u32` at the last block reads one word further.
pub const PAD: u64 = crate::backend::gpu::WGPU_PAD;

/// Queue writes are flushed (and their staging memory freed) every this many bytes.
const FLUSH_BYTES: u64 = 256 << 20;

pub struct Part {
    pub buffer: wgpu::Buffer,
    /// The part's bytes in `buffer` (its data, rounded up to 4, then [`PAD`]).
    pub offset: u64,
    pub size: u64,
    pub row0: usize,
    pub rows: usize,
}

impl Part {
    /// The part as a binding.
    pub fn binding(&self) -> wgpu::BindingResource<'_> {
        wgpu::BindingResource::Buffer(wgpu::BufferBinding {
            buffer: &self.buffer,
            offset: self.offset,
            size: wgpu::BufferSize::new(self.size),
        })
    }
}

pub struct GpuWeight {
    /// The rows and parts as the schedule sees them.
    pub layout: Arc<WeightParts>,
    pub parts: Vec<Part>,
}

/// Row ranges `(row0, rows)` of the parts of a `n_rows × row_bytes` tensor when one binding
/// holds at most `max_binding` bytes (data, rounded up to 4, plus [`PAD`]).
pub fn split_rows(row_bytes: u64, n_rows: u64, max_binding: u64) -> Result<Vec<(usize, usize)>, String> {
    crate::backend::gpu::split_rows(row_bytes, n_rows, max_binding, PAD)
}

pub struct WgpuWeights {
    weights: HashMap<String, Arc<GpuWeight>>,
    pub resident: u64,
}

impl WgpuWeights {
    /// Uploads every weight of the model, once each (in name order), reporting the bytes done.
    pub fn upload(
        gpu: &Gpu,
        model: &Model,
        max_binding: u64,
        progress: Option<&crate::backend::Progress>,
    ) -> Result<WgpuWeights, String> {
        let mut reg = WgpuWeights {
            weights: HashMap::new(),
            resident: 0,
        };
        let mut since_flush = 0u64;
        crate::backend::gpu::upload_each(model, progress, |ts| {
            if ts.iter().any(|t| reg.weights.contains_key(&t.name)) {
                return Ok(()); // re-registration of a name is a no-op
            }
            let ws = match ts {
                [t] => vec![gpu.scoped(&t.name, || upload_one(gpu, t, max_binding))??],
                _ => match upload_pack(gpu, ts, max_binding) {
                    Some(ws) => ws?,
                    // Too large for one binding: each on its own.
                    None => ts
                        .iter()
                        .map(|t| gpu.scoped(&t.name, || upload_one(gpu, t, max_binding))?)
                        .collect::<Result<_, _>>()?,
                },
            };
            for (t, w) in ts.iter().zip(ws) {
                let n = t.data.len() as u64;
                reg.resident += n;
                since_flush += n;
                reg.weights.insert(t.name.clone(), Arc::new(w));
            }
            if since_flush >= FLUSH_BYTES {
                gpu.queue.submit([]);
                let _ = gpu.device.poll(wgpu::PollType::wait_indefinitely());
                since_flush = 0;
            }
            Ok(())
        })?;
        Ok(reg)
    }

    pub fn get(&self, name: &str) -> Option<&Arc<GpuWeight>> {
        self.weights.get(name)
    }
}

fn upload_one(gpu: &Gpu, t: &Tensor, max_binding: u64) -> Result<GpuWeight, String> {
    let rb = t.row_bytes() as u64;
    let bytes = t.bytes();
    if rb * t.n_rows() as u64 != bytes.len() as u64 {
        return Err(format!(
            "{}: {} bytes for {} rows of {rb}",
            t.name,
            bytes.len(),
            t.n_rows()
        ));
    }
    let mut parts = Vec::new();
    for (row0, rows) in split_rows(rb, t.n_rows() as u64, max_binding).map_err(|e| format!("{}: {e}", t.name))? {
        let data = &bytes[row0 * rb as usize..(row0 + rows) * rb as usize];
        let size = (data.len() as u64).div_ceil(4) * 4 + PAD;
        let buffer = weight_buffer(gpu, &t.name, size);
        write_padded(gpu, &buffer, 0, data);
        parts.push(Part {
            buffer,
            offset: 0,
            size,
            row0,
            rows,
        });
    }
    Ok(weight(t, parts, None))
}

/// The members of a pack in one buffer (`gpu::pack_offsets`), or `None` where they do not fit
/// one binding together.
fn upload_pack(gpu: &Gpu, ts: &[&Tensor], max_binding: u64) -> Option<Result<Vec<GpuWeight>, String>> {
    let sizes: Vec<u64> = ts.iter().map(|t| t.bytes().len() as u64).collect();
    let (offsets, total) = crate::backend::gpu::pack_offsets(&sizes, PAD);
    if total > max_binding {
        return None;
    }
    let label = format!("{} (pack)", ts[0].name);
    Some(gpu.scoped(&label, || {
        let buffer = weight_buffer(gpu, &label, total);
        ts.iter()
            .zip(&offsets)
            .enumerate()
            .map(|(index, (t, &offset))| {
                write_padded(gpu, &buffer, offset, t.bytes());
                let part = Part {
                    buffer: buffer.clone(),
                    offset,
                    size: (t.bytes().len() as u64).div_ceil(4) * 4 + PAD,
                    row0: 0,
                    rows: t.n_rows(),
                };
                let slot = PackSlot {
                    first: ts[0].name.as_str().into(),
                    index,
                    offset,
                };
                weight(t, vec![part], Some(slot))
            })
            .collect()
    }))
}

fn weight_buffer(gpu: &Gpu, label: &str, size: u64) -> wgpu::Buffer {
    gpu.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some(label),
        size,
        usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    })
}

/// `data` at `offset`, its unaligned tail and the padding word zero-filled.
fn write_padded(gpu: &Gpu, buffer: &wgpu::Buffer, offset: u64, data: &[u8]) {
    let head = data.len() / 4 * 4;
    if head > 0 {
        gpu.queue.write_buffer(buffer, offset, &data[..head]);
    }
    let mut tail = [0u8; 8];
    tail[..data.len() - head].copy_from_slice(&data[head..]);
    let tail_len = ((data.len() as u64).div_ceil(4) * 4 + PAD - head as u64) as usize;
    gpu.queue.write_buffer(buffer, offset + head as u64, &tail[..tail_len]);
}

fn weight(t: &Tensor, parts: Vec<Part>, pack: Option<PackSlot>) -> GpuWeight {
    GpuWeight {
        layout: Arc::new(WeightParts {
            name: t.name.as_str().into(),
            qtype: t.qtype,
            row_len: t.row_len(),
            parts: parts.iter().map(|p| (p.row0, p.rows)).collect(),
            pack,
        }),
        parts,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_rows_covers_every_row_once_within_the_limit() {
        // gemma-3-270m's token_embd at q8_0: 262144 rows of 680 bytes, 128 MiB bindings.
        let parts = split_rows(680, 262_144, 128 << 20).unwrap();
        assert_eq!(parts.len(), 2);
        let mut next = 0;
        for &(r0, n) in &parts {
            assert_eq!(r0, next);
            assert!((n as u64 * 680).div_ceil(4) * 4 + PAD <= 128 << 20);
            next = r0 + n;
        }
        assert_eq!(next, 262_144);
        assert!(split_rows(1000, 4, 1000).is_err());
        assert_eq!(split_rows(18, 5, 1 << 20).unwrap(), vec![(0, 5)]);
    }
}
