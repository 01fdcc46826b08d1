//! A model resident on the device: weights, KV cache, compiled plans. A forward records the
//! dispatches of consecutive nodes into shared compute passes (`PASS_DISPATCHES` each) and
//! submits as it goes: every `SUBMIT_PASSES` passes, so the device starts while the rest is
//! recorded, and before the work since the last submit would pass what the device does in
//! `SUBMIT_SECONDS` (a long prefill is then many bounded submits, not one command buffer a
//! display watchdog could kill). Only the logits rows (or, for greedy, the argmax id) come back.

use std::collections::HashMap;
use std::sync::Arc;

use super::device::Gpu;
use super::plan::{self, Dispatch, Item, Plan, Targets};
use super::profile::Profiler;
use super::weights::WgpuWeights;
use crate::backend::gpu::schedule::{self, rope_table};
use crate::backend::gpu::shape::DeviceShape;
use crate::backend::{Context, KvLayout, KvType, Step, Submitted};
use crate::error::{Error, Result};
use crate::model::{Graph, GraphKey, Model, Node, NodeId, Op};

pub struct WgpuContext {
    pub(super) gpu: Arc<Gpu>,
    pub(super) model: Arc<Model>,
    pub(super) kv: KvType,
    /// Cells of K/V storage per layer (rows of `kc[l]` and `vc[l]`).
    pub(super) n_cells: usize,
    pub(super) weights: WgpuWeights,
    pub(super) kc: Vec<wgpu::Buffer>,
    pub(super) vc: Vec<wgpu::Buffer>,
    pub(super) kv_bytes: usize,
    /// `Step::words()`, written per forward; `step_words` words long. Grown (doubled) when a
    /// step needs more, which drops the plans (their bind groups name this buffer).
    pub(super) step: wgpu::Buffer,
    pub(super) step_words: usize,
    pub(super) plans: HashMap<GraphKey, Plan>,
    /// Graphs of the sub-batches a too-wide forward is split into.
    pub(super) graphs: HashMap<GraphKey, Arc<Graph>>,
    pub(super) subgroups: bool,
    /// Shaders with wgpu's runtime checks (`WgpuOptions::checked`).
    pub(super) checked: bool,
    /// The int8 matmuls (`WgpuOptions::int8_matmul`).
    pub(super) int8: bool,
    /// The prefill matmul on cooperative matrices (`WgpuOptions::coop_matmul`, where the device
    /// has them).
    pub(super) coop: super::shaders::Coop,
    /// Bytes per binding: the adapter's limit, or the smaller one the backend was given.
    pub(super) max_binding: u64,
    pub(super) profiler: Option<Profiler>,
    /// Why a profile was asked for but not taken (`profile_report` says so).
    pub(super) profile_note: Option<String>,
    /// Multiply-adds per second the device has been seen to do at least (`Launch::work` over
    /// a forward's wall time, the best so far): what sizes the submits.
    pub(super) rate: f64,
    /// What the last forward submitted.
    pub(super) submitted: Submitted,
    /// Steps whose context reaches this many positions take the split-KV attention
    /// (`schedule::When::Long`); 0 never.
    pub(super) split_span: u32,
    /// The device as the schedule sees it.
    pub(super) shape: DeviceShape,
}

/// Dispatches per compute pass at most.
const PASS_DISPATCHES: usize = 64;
/// Compute passes per submit at most.
const SUBMIT_PASSES: usize = 4;
/// Device time one submit is sized for, at the rate seen so far.
const SUBMIT_SECONDS: f64 = 0.05;
/// The rate assumed before any forward was timed (multiply-adds per second): a slow
/// integrated GPU's.
pub(super) const FIRST_RATE: f64 = 1e10;

fn err(what: impl Into<String>) -> Error {
    Error::Backend {
        backend: "wgpu",
        what: what.into(),
    }
}

/// What a forward reads back.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Readback {
    Logits,
    Argmax,
}

impl WgpuContext {
    /// Allocates `n_cells` cells of K and V per layer (zeroed).
    pub(super) fn alloc_kv(
        gpu: &Gpu,
        model: &Model,
        n_cells: usize,
        kv: KvType,
    ) -> Result<(Vec<wgpu::Buffer>, Vec<wgpu::Buffer>, usize)> {
        let l = KvLayout::new(model, n_cells, kv)?;
        // Each layer at its own widths (Gemma 4's differ; a KV-shared layer has none).
        let sizes: Vec<(u64, u64)> = (0..l.n_layer)
            .map(|il| {
                let (k, v) = l.layer_bytes(&model.hparams, il);
                (k as u64, v as u64)
            })
            .collect();
        let max = gpu.max_binding();
        let widest = sizes.iter().map(|&(k, v)| k.max(v)).max().unwrap_or(0);
        if widest > max {
            return Err(err(format!(
                "a KV cache layer of {widest} bytes for {n_cells} cells exceeds the {max}-byte binding limit"
            )));
        }
        // COPY_SRC / COPY_DST: `grow_kv` copies the cells into bigger buffers.
        let make = |label: String, size: u64| {
            gpu.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(&label),
                size: size.div_ceil(16).max(1) * 16,
                usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            })
        };
        let (mut kc, mut vc) = (Vec::new(), Vec::new());
        gpu.scoped("kv cache", || {
            for (il, &(kb, vb)) in sizes.iter().enumerate() {
                kc.push(make(format!("k{il}"), kb));
                vc.push(make(format!("v{il}"), vb));
            }
        })
        .map_err(err)?;
        Ok((kc, vc, l.model_bytes(&model.hparams)))
    }

    /// The step buffer, `words` words long (zeroed); storage, written per forward.
    pub(super) fn alloc_step(gpu: &Gpu, words: usize) -> wgpu::Buffer {
        gpu.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("step"),
            size: (words as u64 * 4).div_ceil(16).max(1) * 16,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        })
    }

    /// Makes the step buffer hold `words` words: a bigger buffer (at least double) when it does
    /// not, and no plans, whose bind groups name the old one.
    fn reserve_step(&mut self, words: usize) -> Result<()> {
        if words <= self.step_words {
            return Ok(());
        }
        let want = words.max(2 * self.step_words);
        let max = self.gpu.max_binding();
        if want as u64 * 4 > max {
            return Err(err(format!(
                "a step of {words} words exceeds the {max}-byte binding limit"
            )));
        }
        let gpu = self.gpu.clone();
        self.step = gpu
            .scoped("step buffer", || Self::alloc_step(&gpu, want))
            .map_err(err)?;
        self.step_words = want;
        self.plans.clear();
        Ok(())
    }

    fn check_step(&self, graph: &Graph, step: &Step) -> Result<()> {
        crate::backend::check_forward(graph, step, self.n_cells, self.model.hparams.n_vocab)?;
        let n = step.len();
        let maxg = self.gpu.limits.max_compute_workgroups_per_dimension as usize;
        if n > maxg {
            return Err(err(format!("{n} tokens in one forward (at most {maxg})")));
        }
        if self.split_tokens(graph) < n {
            return Err(err(format!(
                "{n} tokens need splitting (activations past the binding limit)"
            )));
        }
        Ok(())
    }

    /// Tokens per forward such that every activation fits one binding: `graph.key.n_tokens`
    /// unless, say, all-position logits of a 262k vocabulary would not.
    fn split_tokens(&self, graph: &Graph) -> usize {
        let max = self.max_binding;
        // Bytes per row of each node's buffer, and of a matmul's rounded input (quantize_act).
        let row_bytes = |nd: &Node| match nd.op {
            Op::Matmul { x, .. } => (nd.width as u64 * 4).max(schedule::act_bytes(graph.nodes[x].width)),
            _ => nd.width as u64 * 4,
        };
        if graph.nodes.iter().all(|nd| nd.rows as u64 * row_bytes(nd) <= max) {
            return graph.key.n_tokens;
        }
        let per_token = graph.nodes.iter().map(row_bytes).max().unwrap_or(4);
        ((max / per_token) as usize).max(1)
    }

    /// `forward` in sub-batches of `m` tokens, in order (the KV cache carries the context; each
    /// sub-step keeps its tokens' positions, offsets and run lengths and the whole cell list);
    /// logits are kept for the tokens among the graph's last `n_outputs`.
    fn forward_split(&mut self, graph: &Graph, step: &Step, m: usize, out: &mut Vec<f32>) -> Result<()> {
        let n = step.len();
        if n != graph.key.n_tokens {
            return Err(Error::InvalidArgument(format!(
                "{n} tokens for a graph of {}",
                graph.key.n_tokens
            )));
        }
        let first_out = n - graph.key.n_outputs;
        out.clear();
        for start in (0..n).step_by(m) {
            let end = (start + m).min(n);
            let outs = end.saturating_sub(first_out.max(start));
            let key = GraphKey {
                n_tokens: end - start,
                n_outputs: outs.max(1),
                ..graph.key
            };
            let g = self
                .graphs
                .entry(key)
                .or_insert_with(|| Arc::new(sub_graph(graph, key)))
                .clone();
            let sub = Step {
                tokens: step.tokens[start..end].to_vec(),
                pos: step.pos[start..end].to_vec(),
                off: step.off[start..end].to_vec(),
                cells: step.cells.clone(),
                run: step.run[start..end].to_vec(),
            };
            let bytes = self.run(&g, &sub, Readback::Logits)?;
            if outs > 0 {
                out.extend(
                    bytes
                        .chunks_exact(4)
                        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])),
                );
            }
        }
        Ok(())
    }

    fn run(&mut self, graph: &Graph, step: &Step, what: Readback) -> Result<Vec<u8>> {
        self.check_step(graph, step)?;
        let words = step.words(graph.bidirectional());
        self.reserve_step(words.len())?;
        let key = graph.key;
        if !self.plans.contains_key(&key) {
            let t = Targets {
                gpu: &self.gpu,
                weights: &self.weights,
                step: &self.step,
                kc: &self.kc,
                vc: &self.vc,
                kv: self.kv,
                subgroups: self.subgroups,
                checked: self.checked,
                int8: self.int8,
                coop: self.coop,
                shape: &self.shape,
            };
            let p = self
                .gpu
                .scoped("compile", || plan::compile(&t, graph))
                .map_err(err)?
                .map_err(err)?;
            self.gpu.save_pipeline_cache();
            self.plans.insert(key, p);
        }
        let gpu = self.gpu.clone();
        let plan = &self.plans[&key];
        let profiler = &mut self.profiler;
        let (rate, submitted) = (&mut self.rate, &mut self.submitted);
        let step_buf = &self.step;
        let model = &self.model;
        let split_span = self.split_span;
        let bytes = gpu
            .scoped("forward", || -> Result<Vec<u8>> {
                let q = &gpu.queue;
                q.write_buffer(step_buf, 0, bytemuck::cast_slice(&words));
                q.write_buffer(&plan.ids, 0, bytemuck::cast_slice(&step.tokens));
                for (rope, buf) in &plan.ropes {
                    q.write_buffer(buf, 0, bytemuck::cast_slice(&rope_table(model, rope, &step.pos)?));
                }
                // The most positions any token's attention reads.
                let ctx = step.pos.iter().map(|&p| p as u64 + 1).max().unwrap_or(0);
                let t0 = std::time::Instant::now();
                let mut rec = Recorder::new(&gpu, *rate * SUBMIT_SECONDS);
                let long = split_span > 0 && ctx >= split_span as u64;
                encode(&mut rec, plan, profiler.as_mut(), ctx, long);
                let (src, dst, size) = match what {
                    Readback::Logits => (&plan.acts[plan.result], &plan.readback, plan.result_bytes),
                    Readback::Argmax => {
                        rec.pass(&plan.argmax.iter().collect::<Vec<_>>(), "argmax", None);
                        (&plan.argmax_out, &plan.argmax_readback, 4)
                    }
                };
                rec.enc().copy_buffer_to_buffer(src, 0, dst, 0, size);
                if let Some(p) = profiler.as_mut() {
                    p.resolve(rec.enc());
                }
                rec.submit();
                let out = read(&gpu, dst, size)?;
                if let Some(p) = profiler.as_mut() {
                    p.collect(&gpu, step.tokens.len()).map_err(err)?;
                }
                *submitted += rec.counts;
                let secs = t0.elapsed().as_secs_f64();
                if secs > 0.0 {
                    *rate = rate.max(rec.total as f64 / secs);
                }
                Ok(out)
            })
            .map_err(err)??;
        if let Some(e) = self.gpu.take_uncaptured() {
            return Err(err(e));
        }
        Ok(bytes)
    }

    /// The argmax of the last output row, with only 4 bytes read back (greedy decoding).
    pub fn forward_argmax(&mut self, graph: &Graph, step: &Step) -> Result<u32> {
        self.submitted = Submitted::default();
        let m = self.split_tokens(graph);
        if m < step.len() {
            let mut logits = Vec::new();
            self.forward_split(graph, step, m, &mut logits)?;
            let width = graph.nodes[graph.result].width;
            return Ok(crate::logits::argmax(&logits[logits.len() - width..]));
        }
        let b = self.run(graph, step, Readback::Argmax)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
}

/// `g` for `key`'s tokens and output rows (its other options are `g`'s): the nodes from
/// `Output` on (and any node reading one of them) take `n_outputs` rows, the others `n_tokens`.
/// Derived from `g` itself, which need not be the model's own graph (the op tests build theirs).
fn sub_graph(g: &Graph, key: GraphKey) -> Graph {
    let (n, outs) = (key.n_tokens, key.n_outputs);
    let mut post = vec![false; g.nodes.len()];
    let nodes = g
        .nodes
        .iter()
        .enumerate()
        .map(|(i, nd)| {
            post[i] = matches!(nd.op, Op::Output { .. }) || nd.op.inputs().iter().any(|&j| post[j]);
            Node {
                rows: if post[i] { outs } else { n },
                ..nd.clone()
            }
        })
        .collect();
    Graph {
        key,
        nodes,
        result: g.result,
    }
}

/// A forward being recorded: the open command encoder, submitted when `encode` says so.
struct Recorder<'a> {
    gpu: &'a Gpu,
    enc: Option<wgpu::CommandEncoder>,
    /// Multiply-adds recorded since the last submit, and the most one submit takes.
    work: u64,
    budget: u64,
    /// Compute passes since the last submit.
    passes: usize,
    /// Multiply-adds of the whole forward.
    total: u64,
    counts: Submitted,
}

impl<'a> Recorder<'a> {
    fn new(gpu: &'a Gpu, budget: f64) -> Recorder<'a> {
        Recorder {
            gpu,
            enc: None,
            work: 0,
            budget: budget as u64,
            passes: 0,
            total: 0,
            counts: Submitted::default(),
        }
    }

    fn enc(&mut self) -> &mut wgpu::CommandEncoder {
        let gpu = self.gpu;
        self.enc.get_or_insert_with(|| {
            gpu.device
                .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("forward") })
        })
    }

    /// One compute pass of `ds` (timestamped where `ts` is given).
    fn pass(&mut self, ds: &[&Dispatch], label: &str, ts: Option<wgpu::ComputePassTimestampWrites>) {
        if ds.is_empty() {
            return;
        }
        let mut cp = self.enc().begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: Some(label),
            timestamp_writes: ts,
        });
        for d in ds {
            cp.set_pipeline(&d.pipeline.pipeline);
            cp.set_bind_group(0, &d.bind_group, &[]);
            cp.dispatch_workgroups(d.groups[0], d.groups[1], d.groups[2]);
        }
        drop(cp);
        self.counts.dispatches += ds.len() as u64;
        self.counts.passes += 1;
        self.passes += 1;
    }

    /// Submits what was recorded since the last submit.
    fn submit(&mut self) {
        if let Some(enc) = self.enc.take() {
            self.gpu.queue.submit([enc.finish()]);
            self.counts.submits += 1;
            self.work = 0;
            self.passes = 0;
        }
    }

    /// Takes `w` more multiply-adds: true when they would overfill the submit under way.
    fn overfills(&mut self, w: u64) -> bool {
        let over = self.work > 0 && self.work + w > self.budget;
        self.work += w;
        self.total += w;
        over
    }
}

/// Records the plan: the dispatches of consecutive nodes gathered into compute passes of up to
/// PASS_DISPATCHES, a submit after every SUBMIT_PASSES passes and before the work would pass the
/// budget (attention's work counted at `ctx` positions). When profiling, each node is its own
/// timestamped pass.
fn encode(rec: &mut Recorder, plan: &Plan, mut prof: Option<&mut Profiler>, ctx: u64, long: bool) {
    let mut open: Vec<&Dispatch> = Vec::with_capacity(PASS_DISPATCHES);
    let close = |rec: &mut Recorder, open: &mut Vec<&Dispatch>| {
        rec.pass(open, "forward", None);
        open.clear();
        if rec.passes >= SUBMIT_PASSES {
            rec.submit();
        }
    };
    for item in &plan.items {
        match item {
            Item::Compute { kind, dispatches } => {
                for d in dispatches.iter().filter(|d| d.when.runs(long)) {
                    if rec.overfills(d.work.0 + d.work.1 * ctx) {
                        close(rec, &mut open);
                        rec.submit();
                    }
                    open.push(d);
                    if open.len() == PASS_DISPATCHES {
                        close(rec, &mut open);
                    }
                }
                // A fused node launched nothing: no pass, no time.
                if let Some(p) = prof.as_deref_mut().filter(|_| !open.is_empty()) {
                    let ts = p.writes(kind, open.len());
                    rec.pass(&open, kind, ts);
                    open.clear();
                }
            }
            Item::Copy {
                src,
                src_offset,
                dst,
                size,
            } => {
                close(rec, &mut open);
                rec.enc()
                    .copy_buffer_to_buffer(&plan.acts[*src], *src_offset, &plan.acts[*dst], 0, *size);
            }
        }
    }
    close(rec, &mut open);
}

/// Maps `buf`, waits for the submission, copies `size` bytes out and unmaps.
fn read(gpu: &Gpu, buf: &wgpu::Buffer, size: u64) -> Result<Vec<u8>> {
    gpu.read(buf, size).map_err(err)
}

impl Context for WgpuContext {
    fn read_node(&mut self, graph: &Graph, node: NodeId) -> Result<Vec<f32>> {
        let (rows, width) = crate::backend::kept_node(graph, node)?;
        let plan = self.plans.get(&graph.key).ok_or_else(crate::backend::no_forward_yet)?;
        let size = (rows * width * 4) as u64;
        let gpu = &self.gpu;
        let staging = gpu.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("read_node"),
            size: size.max(4),
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let mut enc = gpu.device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
            label: Some("read_node"),
        });
        enc.copy_buffer_to_buffer(&plan.acts[plan.node_buf[node]], 0, &staging, 0, size);
        gpu.queue.submit([enc.finish()]);
        let mut out = Vec::new();
        crate::backend::f32s_into(&read(gpu, &staging, size)?, &mut out);
        Ok(out)
    }

    fn forward(&mut self, graph: &Graph, step: &Step, out: &mut Vec<f32>) -> Result<()> {
        self.submitted = Submitted::default();
        let m = self.split_tokens(graph);
        if m < step.len() {
            return self.forward_split(graph, step, m, out);
        }
        let bytes = self.run(graph, step, Readback::Logits)?;
        crate::backend::f32s_into(&bytes, out);
        Ok(())
    }

    fn forward_argmax(&mut self, graph: &Graph, step: &Step) -> Result<u32> {
        WgpuContext::forward_argmax(self, graph, step)
    }

    fn kv_cells(&self) -> usize {
        self.n_cells
    }

    /// Bigger buffers, the old cells copied in (one submit), then no plans: their bind groups
    /// name the old buffers.
    fn grow_kv(&mut self, n_cells: usize) -> Result<()> {
        if n_cells <= self.n_cells {
            return Ok(());
        }
        let (kc, vc, kv_bytes) = Self::alloc_kv(&self.gpu, &self.model, n_cells, self.kv)?;
        let gpu = self.gpu.clone();
        gpu.scoped("grow kv", || {
            let mut enc = gpu
                .device
                .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("grow kv") });
            for (old, new) in self.kc.iter().zip(&kc).chain(self.vc.iter().zip(&vc)) {
                enc.copy_buffer_to_buffer(old, 0, new, 0, old.size());
            }
            gpu.queue.submit([enc.finish()]);
        })
        .map_err(err)?;
        if let Some(e) = self.gpu.take_uncaptured() {
            return Err(err(e));
        }
        self.plans.clear();
        self.kc = kc;
        self.vc = vc;
        self.kv_bytes = kv_bytes;
        self.n_cells = n_cells;
        Ok(())
    }

    fn kv_bytes(&self) -> usize {
        self.kv_bytes
    }

    fn resident_bytes(&self) -> u64 {
        self.weights.resident
    }

    fn submitted(&self) -> Option<Submitted> {
        Some(self.submitted)
    }

    fn profile_report(&self) -> Option<String> {
        match &self.profiler {
            Some(p) => Some(p.totals.report("wgpu", &self.gpu.describe())),
            None => self.profile_note.clone(),
        }
    }

    fn decode_profile(&self) -> Option<crate::backend::OpProfile> {
        Some(self.profiler.as_ref()?.totals.decode())
    }

    fn batch_profile(&self) -> Option<crate::backend::OpProfile> {
        Some(self.profiler.as_ref()?.totals.batch())
    }

    fn reset_profile(&mut self) {
        if let Some(p) = self.profiler.as_mut() {
            p.totals.reset_steps();
        }
    }
}
