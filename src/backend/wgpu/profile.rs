//! Per-op GPU time from timestamp queries (`BackendOptions::profile`, where the adapter has
//! TIMESTAMP_QUERY): each node's compute pass writes a begin and an end timestamp; the times are
//! summed per op kind (`matmul/q4_1`, `attention`, …) into `OpTotals`.

use super::device::Gpu;
use crate::backend::gpu::profile::OpTotals;

/// Queries per forward; passes beyond MAX_QUERIES / 2 go untimed.
const MAX_QUERIES: u32 = 4096;

pub struct Profiler {
    set: wgpu::QuerySet,
    resolve: wgpu::Buffer,
    readback: wgpu::Buffer,
    /// Kinds of the passes timed in the current forward, in order, and their dispatches.
    kinds: Vec<(String, u64)>,
    pub totals: OpTotals,
    period_ns: f64,
}

impl Profiler {
    /// A profiler, or the line saying why there is none (no timestamp queries).
    pub fn new(gpu: &Gpu) -> Result<Profiler, String> {
        if !gpu.has(wgpu::Features::TIMESTAMP_QUERY) {
            return Err(format!(
                "wgpu profile ({}): unavailable, the adapter has no timestamp queries\n",
                gpu.describe()
            ));
        }
        let set = gpu.device.create_query_set(&wgpu::QuerySetDescriptor {
            label: Some("profile"),
            ty: wgpu::QueryType::Timestamp,
            count: MAX_QUERIES,
        });
        let bytes = MAX_QUERIES as u64 * 8;
        let resolve = gpu.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("profile resolve"),
            size: bytes,
            usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        });
        let readback = gpu.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("profile readback"),
            size: bytes,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        Ok(Profiler {
            set,
            resolve,
            readback,
            kinds: Vec::new(),
            totals: OpTotals::default(),
            period_ns: gpu.queue.get_timestamp_period() as f64,
        })
    }

    /// Timestamp writes for the next pass (of `dispatches`), or `None` once the query set is
    /// full.
    pub fn writes(&mut self, kind: &str, dispatches: usize) -> Option<wgpu::ComputePassTimestampWrites<'_>> {
        let i = self.kinds.len() as u32;
        if 2 * i + 2 > MAX_QUERIES {
            return None;
        }
        self.kinds.push((kind.to_string(), dispatches as u64));
        Some(wgpu::ComputePassTimestampWrites {
            query_set: &self.set,
            beginning_of_pass_write_index: Some(2 * i),
            end_of_pass_write_index: Some(2 * i + 1),
        })
    }

    pub fn resolve(&self, enc: &mut wgpu::CommandEncoder) {
        let n = 2 * self.kinds.len() as u32;
        if n > 0 {
            enc.resolve_query_set(&self.set, 0..n, &self.resolve, 0);
            enc.copy_buffer_to_buffer(&self.resolve, 0, &self.readback, 0, n as u64 * 8);
        }
    }

    /// Reads the timestamps of the forward of `tokens` tokens just submitted (after its
    /// readback waited for it).
    pub fn collect(&mut self, gpu: &Gpu, tokens: usize) -> Result<(), String> {
        let n = 2 * self.kinds.len() as u64;
        if n == 0 {
            return Ok(());
        }
        let ts: Vec<u64> = bytemuck::pod_collect_to_vec(&gpu.read(&self.readback, n * 8)?);
        for (i, (kind, dispatches)) in self.kinds.drain(..).enumerate() {
            let ns = ts[2 * i + 1].saturating_sub(ts[2 * i]) as f64 * self.period_ns;
            self.totals.add(&kind, dispatches, ns, tokens);
        }
        self.totals.forward(tokens);
        Ok(())
    }
}
