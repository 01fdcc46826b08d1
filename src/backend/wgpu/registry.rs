//! Weights on the device: each uploaded once, raw (the GGUF blocks as they are in the file),
//! under its canonical name. A tensor larger than one storage binding is split by rows into
//! parts; every kernel that reads a matrix is dispatched once per part with the part's first
//! row, so no kernel ever sees more than one binding.

use std::collections::HashMap;
use std::sync::Arc;

use super::device::Gpu;
use crate::backend::gpu::schedule::WeightParts;
use crate::model::Model;
use crate::quant::QType;
use crate::tensor::Tensor;

/// Bytes after the data of each buffer: `w_u32` at the last block reads one word further.
pub const PAD: u64 = 4;

/// Queue writes are flushed (and their staging memory freed) every this many bytes.
const FLUSH_BYTES: u64 = 256 << 20;

pub struct Part {
    pub buffer: wgpu::Buffer,
    pub row0: usize,
    pub rows: usize,
}

pub struct GpuWeight {
    /// The rows and parts as the schedule sees them.
    pub layout: Arc<WeightParts>,
    pub qtype: QType,
    pub row_len: usize,
    pub n_rows: usize,
    pub parts: Vec<Part>,
}

/// Row ranges `(row0, rows)` of the parts of a `n_rows × row_bytes` tensor when one binding
/// holds at most `max_binding` bytes (data, rounded up to 4, plus [`PAD`]).
pub fn split_rows(row_bytes: u64, n_rows: u64, max_binding: u64) -> Result<Vec<(usize, usize)>, String> {
    let room = max_binding.saturating_sub(PAD + 3);
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

pub struct Registry {
    weights: HashMap<String, Arc<GpuWeight>>,
    pub resident: u64,
}

impl Registry {
    /// Uploads every weight of the model, once each (in name order), reporting the bytes done.
    pub fn upload(
        gpu: &Gpu,
        model: &Model,
        max_binding: u64,
        progress: Option<&crate::backend::Progress>,
    ) -> Result<Registry, String> {
        let mut reg = Registry {
            weights: HashMap::new(),
            resident: 0,
        };
        let mut since_flush = 0u64;
        crate::backend::gpu::upload_each(model, progress, |t| {
            if reg.weights.contains_key(&t.name) {
                return Ok(()); // re-registration of a name is a no-op
            }
            let w = gpu.scoped(&t.name, || upload_one(gpu, t, max_binding))??;
            let n = t.data.len() as u64;
            reg.resident += n;
            since_flush += n;
            reg.weights.insert(t.name.clone(), Arc::new(w));
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
    let (row_len, n_rows) = (t.row_len(), t.n_rows());
    let rb = t.row_bytes() as u64;
    let bytes = t.bytes();
    if rb * n_rows as u64 != bytes.len() as u64 {
        return Err(format!("{}: {} bytes for {n_rows} rows of {rb}", t.name, bytes.len()));
    }
    let mut parts = Vec::new();
    for (row0, rows) in split_rows(rb, n_rows as u64, max_binding).map_err(|e| format!("{}: {e}", t.name))? {
        let data = &bytes[row0 * rb as usize..(row0 + rows) * rb as usize];
        let size = (data.len() as u64).div_ceil(4) * 4 + PAD;
        let buffer = gpu.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(&t.name),
            size,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let head = data.len() / 4 * 4;
        if head > 0 {
            gpu.queue.write_buffer(&buffer, 0, &data[..head]);
        }
        // The unaligned tail and the padding word, zero-filled.
        let mut tail = [0u8; 8];
        tail[..data.len() - head].copy_from_slice(&data[head..]);
        let tail_len = (size - head as u64) as usize;
        gpu.queue.write_buffer(&buffer, head as u64, &tail[..tail_len]);
        parts.push(Part { buffer, row0, rows });
    }
    Ok(GpuWeight {
        layout: Arc::new(WeightParts {
            name: t.name.as_str().into(),
            qtype: t.qtype,
            row_len,
            parts: parts.iter().map(|p| (p.row0, p.rows)).collect(),
        }),
        qtype: t.qtype,
        row_len,
        n_rows,
        parts,
    })
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
