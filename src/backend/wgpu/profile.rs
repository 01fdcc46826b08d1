//! Per-op GPU time from timestamp queries (`BackendOptions::profile`, where the adapter has
//! TIMESTAMP_QUERY): each node's compute pass writes a begin and an end timestamp; the times are
//! summed per op kind (`matmul/q4_1`, `attention`, …) into the table that
//! `Context::profile_report` returns.

use std::collections::BTreeMap;

use super::device::Gpu;

/// Queries per forward; passes beyond MAX_QUERIES / 2 go untimed.
const MAX_QUERIES: u32 = 4096;

pub struct Profiler {
    set: wgpu::QuerySet,
    resolve: wgpu::Buffer,
    readback: wgpu::Buffer,
    /// Kinds of the passes timed in the current forward, in order, and their dispatches.
    kinds: Vec<(String, u64)>,
    /// kind → (dispatches, total ns)
    totals: BTreeMap<String, (u64, f64)>,
    forwards: u64,
    /// The same for the decode steps (one token) since the last `reset_decode`.
    decode: BTreeMap<String, (u64, f64)>,
    decode_forwards: u64,
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
            totals: BTreeMap::new(),
            forwards: 0,
            decode: BTreeMap::new(),
            decode_forwards: 0,
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
        let slice = self.readback.slice(..n * 8);
        let (tx, rx) = std::sync::mpsc::channel();
        slice.map_async(wgpu::MapMode::Read, move |r| {
            let _ = tx.send(r);
        });
        gpu.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| e.to_string())?;
        rx.recv().map_err(|e| e.to_string())?.map_err(|e| e.to_string())?;
        let ts: Vec<u64> = bytemuck::pod_collect_to_vec(&slice.get_mapped_range().map_err(|e| e.to_string())?);
        self.readback.unmap();
        for (i, (kind, dispatches)) in self.kinds.drain(..).enumerate() {
            let ns = ts[2 * i + 1].saturating_sub(ts[2 * i]) as f64 * self.period_ns;
            let maps = [Some(&mut self.totals), (tokens == 1).then_some(&mut self.decode)];
            for m in maps.into_iter().flatten() {
                let e = m.entry(kind.clone()).or_default();
                e.0 += dispatches;
                e.1 += ns;
            }
        }
        self.forwards += 1;
        self.decode_forwards += u64::from(tokens == 1);
        Ok(())
    }

    /// The decode steps' ops as the side-by-side table takes them.
    pub fn decode(&self) -> crate::backend::OpProfile {
        let ops = self.decode.iter().map(|(k, &(n, ns))| (k.clone(), n, ns));
        crate::backend::OpProfile::new(self.decode_forwards, ops)
    }

    pub fn reset_decode(&mut self) {
        self.decode.clear();
        self.decode_forwards = 0;
    }

    /// The table: op kind, passes, total ms, share.
    pub fn report(&self, device: &str) -> String {
        let total: f64 = self.totals.values().map(|v| v.1).sum();
        let mut rows: Vec<_> = self.totals.iter().collect();
        rows.sort_by(|a, b| b.1 .1.total_cmp(&a.1 .1));
        let mut s = format!(
            "wgpu profile ({device}), {} forwards, GPU time per op:\n",
            self.forwards
        );
        s += &format!("  {:<40} {:>10} {:>12} {:>7}\n", "op", "dispatches", "ms", "%");
        for (k, (n, ns)) in rows {
            s += &format!(
                "  {k:<40} {n:>10} {:>12.3} {:>6.1}%\n",
                ns / 1e6,
                100.0 * ns / total.max(1.0)
            );
        }
        s
    }
}
