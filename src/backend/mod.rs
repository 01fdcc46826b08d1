//! Backends behind one narrow trait, and the all-or-nothing gate that picks one.
//! `alloc` assigns activation buffers by liveness for the CPU and GPU plans alike; `gpu` holds
//! what the wgpu and CUDA backends share (kernel table, params structs, schedule).
//!
//! A backend that lacks an op or a qtype says so through `check`, naming the first thing it
//! cannot do, before anything is uploaded.
//!
//! # Adding an op
//!
//! A GPU kernel `foo` for a new graph op, in this order (the CPU op is the oracle):
//!
//! 1. The graph op: a variant of `model::graph::Op` with its `kind`, `inputs` and `weights`.
//! 2. The CPU reference: `cpu/ops.rs`, run from `cpu/mod.rs`'s executor.
//! 3. The kernel row: `Kernel::Foo` and one row in `gpu/table.rs` (bindings, threads, what it
//!    is specialised over, its params struct, its WGSL and CUDA files), and, unless an existing
//!    one fits, its params struct in `gpu/params.rs` (fields named as the shader names them).
//! 4. `shaders/foo.wgsl`: `struct Params` with those fields (a unit test compares them by naga
//!    reflection), bindings in the row's order.
//! 5. `cuda/foo.cu`: the same struct by the Rust name, read with `params<FooParams>(p)`, and
//!    an entry `foo` (or `foo_<type>` per variant).
//! 6. Its launches in the op family's function under `gpu/schedule/`, and, where the GPU
//!    backends cannot take every shape, the refusal in `gpu::kernels::check_graph`.
//! 7. One case in the cross-backend op test (`tests/suite/gpu.rs`), which runs it on the CPU,
//!    on wgpu and on the CUDA emulation and compares them by NMSE.
//!
//! The variant list (`all_variants`), the WGSL assembly, the NVRTC programs, the CUDA
//! emulator build, the naga validation and the params checks all read the table: nothing else
//! lists kernels. A new kernel for an existing op (a fused or faster path) skips steps 1, 2
//! and 7's new case.

pub(crate) mod alloc;
pub(crate) mod cpu;
#[cfg(feature = "cuda")]
pub(crate) mod cuda;
pub(crate) mod gpu;
#[cfg(feature = "wgpu")]
pub(crate) mod wgpu;

mod gate;
pub use gate::{candidates, select, verdicts, BackendChoice, BackendOptions};

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::model::{Graph, Model, NodeId};
use crate::quant::QType;

/// Element type of the KV cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub enum KvType {
    F32,
    F16,
    Q8_0,
}

impl KvType {
    pub fn qtype(self) -> QType {
        match self {
            KvType::F32 => QType::F32,
            KvType::F16 => QType::F16,
            KvType::Q8_0 => QType::Q8_0,
        }
    }

    /// Strict: `f32`, `f16` or `q8_0`; anything else is an error naming it.
    pub fn parse(s: &str) -> Result<KvType> {
        match s.to_ascii_lowercase().as_str() {
            "f32" => Ok(KvType::F32),
            "f16" => Ok(KvType::F16),
            "q8_0" => Ok(KvType::Q8_0),
            _ => Err(Error::InvalidArgument(format!(
                "cache type '{s}' (expected f32, f16 or q8_0)"
            ))),
        }
    }

    pub fn name(self) -> &'static str {
        self.qtype().name()
    }

    /// Bytes of `width` elements (whole blocks for q8_0).
    pub fn row_bytes(self, width: usize) -> usize {
        let q = self.qtype();
        width / q.block_elems() * q.block_bytes()
    }

    /// The policy when nothing is asked: f16 for models whose KV traffic matters
    /// (`n_layer × n_kv_embd ≥ 8192`), f32 for tiny ones. `SessionOptions::kv_type` (the
    /// `--cache-type` flag, `MINFER_CACHE_TYPE`) overrides it.
    pub fn auto(model: &Model) -> KvType {
        let hp = &model.hparams;
        if hp.n_layer * hp.n_embd_k().max(hp.n_embd_v()) >= 8192 {
            KvType::F16
        } else {
            KvType::F32
        }
    }
}

/// The KV storage every backend allocates for a model: per layer, `n_cells` rows of K and
/// `n_cells` rows of V in the cache type's blocks, one row per cell of the session's
/// [`crate::kv::KvPool`]. Sized and checked once, here, for every backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvLayout {
    pub kv: KvType,
    pub n_cells: usize,
    pub n_layer: usize,
    /// Elements per cell: n_kv_heads × head_dim (K) and × head_dim_v (V).
    pub k_width: usize,
    pub v_width: usize,
}

impl KvLayout {
    /// Caches beyond this are a mistake, not a model (1 TiB).
    const MAX_BYTES: u64 = 1 << 40;

    pub fn new(model: &Model, n_cells: usize, kv: KvType) -> Result<KvLayout> {
        let hp = &model.hparams;
        // Layers of different widths (Gemma 4) are checked by the widest; every backend sizes
        // each layer by its own (`HParams::kv_widths`, `layer_bytes`).
        let (k_width, v_width) = hp.max_kv_widths();
        let l = KvLayout {
            kv,
            n_cells,
            n_layer: hp.n_layer,
            k_width,
            v_width,
        };
        let be = kv.qtype().block_elems();
        if !l.k_width.is_multiple_of(be) || !l.v_width.is_multiple_of(be) {
            return Err(Error::InvalidArgument(format!(
                "cache type {} needs KV widths that are multiples of {be} (got {}, {})",
                kv.name(),
                l.k_width,
                l.v_width
            )));
        }
        let total = (l.k_row() as u64 + l.v_row() as u64)
            .checked_mul(n_cells as u64)
            .and_then(|b| b.checked_mul(l.n_layer as u64));
        match total {
            Some(t) if t <= Self::MAX_BYTES => Ok(l),
            _ => Err(Error::InvalidArgument(format!(
                "a {} KV cache of {n_cells} positions × {} layers × {} + {} elements is too large",
                kv.name(),
                l.n_layer,
                l.k_width,
                l.v_width
            ))),
        }
    }

    /// Bytes of one cell's K (V) row.
    pub fn k_row(&self) -> usize {
        self.kv.row_bytes(self.k_width)
    }

    pub fn v_row(&self) -> usize {
        self.kv.row_bytes(self.v_width)
    }

    /// Bytes of one layer's K (V) cache.
    pub fn k_layer_bytes(&self) -> usize {
        self.n_cells * self.k_row()
    }

    pub fn v_layer_bytes(&self) -> usize {
        self.n_cells * self.v_row()
    }

    /// Bytes of layer `il`'s K and V caches at its own widths (`HParams::kv_widths`: none for
    /// a layer that reads another's cache); never more than `k_layer_bytes` / `v_layer_bytes`.
    pub fn layer_bytes(&self, hp: &crate::model::HParams, il: usize) -> (usize, usize) {
        let (kw, vw) = hp.kv_widths(il);
        (
            self.n_cells * self.kv.row_bytes(kw),
            self.n_cells * self.kv.row_bytes(vw),
        )
    }

    /// Bytes of the whole cache, each layer at its own widths.
    pub fn model_bytes(&self, hp: &crate::model::HParams) -> usize {
        (0..self.n_layer)
            .map(|il| {
                let (k, v) = self.layer_bytes(hp, il);
                k + v
            })
            .sum()
    }

    /// Bytes of the whole cache.
    pub fn bytes(&self) -> usize {
        self.n_layer * (self.k_layer_bytes() + self.v_layer_bytes())
    }
}

/// One forward's tokens and where each sits in the KV pool, as the session lays them out.
///
/// Token `t` is at position `pos[t]` of its sequence, whose cells are listed from
/// `cells[off[t]]` on in position order: the token writes its K and V to
/// `cells[off[t] + pos[t]]` and attends `cells[off[t] + lo ..= off[t] + pos[t]]` (`lo` from
/// the layer's window). Every token's K and V are written before any token attends, so a
/// token sees the earlier tokens of its own sequence in the same step; never another
/// sequence's. The last `n_outputs` tokens (the graph's key) are the ones whose logits come
/// back.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Step {
    pub tokens: Vec<u32>,
    pub pos: Vec<u32>,
    pub off: Vec<u32>,
    pub cells: Vec<u32>,
    /// Per token, how many tokens of its own sequence the step carries: the CPU chooses its
    /// attention numerics by it, as llama.cpp chooses them by the size of a one-sequence batch,
    /// so what else shares the step never changes a sequence's numbers.
    pub run: Vec<u32>,
}

impl Step {
    /// One sequence whose position `p` is cell `p`: `tokens` at `pos0..`.
    pub fn contiguous(tokens: &[u32], pos0: usize) -> Step {
        let n = tokens.len();
        Step {
            tokens: tokens.to_vec(),
            pos: (pos0..pos0 + n).map(|p| p as u32).collect(),
            off: vec![0; n],
            cells: (0..(pos0 + n) as u32).collect(),
            run: vec![n as u32; n],
        }
    }

    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// The step as GPU kernels read it: `[n, last, 0, 0]`, then `(pos, 4 + 2n + off)` per token,
    /// then `cells` — so token `t`'s position `j` is cell `words[words[5 + 2t] + j]`. With
    /// `bidir` (a graph whose attention is not causal) `last` is where a table of each token's
    /// last attended position follows the cells, its sequence's last in the step
    /// (`words[last + t]`); else 0.
    pub fn words(&self, bidir: bool) -> Vec<u32> {
        let n = self.len();
        let base = (4 + 2 * n) as u32;
        let mut w = Vec::with_capacity(4 + 2 * n + self.cells.len() + if bidir { n } else { 0 });
        w.extend_from_slice(&[n as u32, 0, 0, 0]);
        for (&p, &o) in self.pos.iter().zip(&self.off) {
            w.push(p);
            w.push(base + o);
        }
        w.extend_from_slice(&self.cells);
        if bidir {
            // A sequence is its cell list's offset: each one's last position, in one pass.
            let mut last: std::collections::HashMap<u32, u32> = std::collections::HashMap::new();
            for (&o, &p) in self.off.iter().zip(&self.pos) {
                let l = last.entry(o).or_insert(p);
                *l = (*l).max(p);
            }
            w[1] = w.len() as u32;
            w.extend(self.off.iter().map(|o| last[o]));
        }
        w
    }
}

/// Why a backend does not take a model.
#[derive(Clone, Debug)]
pub struct Refusal(pub String);

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A compute backend. No wgpu or cudarc type crosses this trait.
pub trait Backend: Send + Sync {
    fn name(&self) -> &'static str;
    /// One line: the device and how it is set up (`cpu (avx512, 2 threads)`).
    fn describe(&self) -> String;
    /// The gate: Ok, or the first weight/op/limit this backend cannot handle.
    fn check(&self, model: &Model, graph: &Graph, kv: KvType) -> std::result::Result<(), Refusal>;
    /// The gate's check of the context a session may grow to (`n_ctx` positions): the GPU
    /// backends refuse caches past their 32-bit indexing.
    fn check_context(&self, _model: &Model, _n_ctx: usize, _kv: KvType) -> std::result::Result<(), Refusal> {
        Ok(())
    }
    /// Registers (uploads) the weights and allocates KV storage of `n_cells` cells.
    fn new_context(&self, model: &Arc<Model>, n_cells: usize, kv: KvType) -> Result<Box<dyn Context>>;
}

/// Per-op time of the decode steps (one token each), or of the batched steps (a prompt's, or
/// several sequences'), a context ran since its profile was last reset: what `bench --profile`
/// sets side by side per backend. GPU backends time each launch on the device; the CPU each op
/// on the calling thread.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OpProfile {
    /// Steps (forwards) timed.
    pub forwards: u64,
    /// Tokens over those steps (a decode step's one each).
    pub tokens: u64,
    /// Per op kind (`matmul_vec/q4_1`, `attention`), busiest first.
    pub ops: Vec<OpTime>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct OpTime {
    pub op: String,
    /// Launches (CPU: calls) over all the steps.
    pub calls: u64,
    pub ns: f64,
}

impl OpProfile {
    /// From (op, calls, ns) totals in any order, over `forwards` steps of `tokens` tokens in all.
    pub fn new(forwards: u64, tokens: u64, ops: impl IntoIterator<Item = (String, u64, f64)>) -> OpProfile {
        let mut ops: Vec<OpTime> = ops
            .into_iter()
            .map(|(op, calls, ns)| OpTime { op, calls, ns })
            .collect();
        ops.sort_by(|a, b| b.ns.total_cmp(&a.ns).then_with(|| a.op.cmp(&b.op)));
        OpProfile { forwards, tokens, ops }
    }

    /// `other`'s steps and times added to these (op by op).
    pub fn merge(&mut self, other: &OpProfile) {
        let mut all: std::collections::BTreeMap<String, (u64, f64)> = std::collections::BTreeMap::new();
        for o in self.ops.iter().chain(&other.ops) {
            let e = all.entry(o.op.clone()).or_default();
            e.0 += o.calls;
            e.1 += o.ns;
        }
        let ops = all.into_iter().map(|(op, (calls, ns))| (op, calls, ns));
        *self = OpProfile::new(self.forwards + other.forwards, self.tokens + other.tokens, ops);
    }

    pub fn total_ns(&self) -> f64 {
        self.ops.iter().map(|o| o.ns).sum()
    }
}

/// What the last forward (or the sub-batches it was split into) handed a GPU: kernel launches,
/// the passes they were recorded in (wgpu compute passes; CUDA: one per graph replay, else
/// one per launch) and queue submits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Submitted {
    pub dispatches: u64,
    pub passes: u64,
    pub submits: u64,
}

impl std::ops::AddAssign for Submitted {
    fn add_assign(&mut self, o: Submitted) {
        self.dispatches += o.dispatches;
        self.passes += o.passes;
        self.submits += o.submits;
    }
}

/// A model resident on a backend, with its KV storage.
pub trait Context: Send {
    /// Runs `graph` on `step`'s tokens; `out` is replaced by the logits of the graph's output
    /// rows (`[n_outputs, n_vocab]`, the step's last tokens).
    fn forward(&mut self, graph: &Graph, step: &Step, out: &mut Vec<f32>) -> Result<()>;
    /// Cells of KV storage allocated now.
    fn kv_cells(&self) -> usize;
    /// Grows the KV storage to `n_cells` cells, keeping every cell's contents.
    fn grow_kv(&mut self, n_cells: usize) -> Result<()>;
    /// Bytes of KV storage allocated now.
    fn kv_bytes(&self) -> usize;
    /// Bytes of weights this backend copied into its own memory (0 for zero-copy).
    fn resident_bytes(&self) -> u64;
    /// `forward`, then the argmax of the last output row (lowest id on ties, as
    /// `logits::argmax`). A GPU backend reads back only the id.
    fn forward_argmax(&mut self, graph: &Graph, step: &Step) -> Result<u32> {
        let mut logits = Vec::new();
        self.forward(graph, step, &mut logits)?;
        let n_vocab = logits.len() / graph.key.n_outputs.max(1);
        Ok(crate::logits::argmax(&logits[logits.len() - n_vocab..]))
    }
    /// The per-op GPU time of the forwards so far, where profiling was asked for
    /// (`BackendOptions::profile`): a table for the caller to print.
    fn profile_report(&self) -> Option<String> {
        None
    }
    /// Per-op time of the decode steps since the last `reset_profile`, where profiling was
    /// asked for and the backend keeps a profile.
    fn decode_profile(&self) -> Option<OpProfile> {
        None
    }
    /// Likewise of the batched steps (more than one token: a prompt's, several sequences').
    fn batch_profile(&self) -> Option<OpProfile> {
        None
    }
    /// Starts the decode and batch profiles afresh (`profile_report`'s totals are kept).
    fn reset_profile(&mut self) {}
    /// What the last forward submitted to the device; None on the CPU.
    fn submitted(&self) -> Option<Submitted> {
        None
    }
    /// The value of node `node` (`[rows, width]`) after the last forward of `graph`, which
    /// must keep it (`GraphKey::keep`): one intermediate, read back to compare backends by name
    /// (`--trace`).
    fn read_node(&mut self, graph: &Graph, node: NodeId) -> Result<Vec<f32>>;
}

/// The shape `[rows, width]` of node `node` of `graph`, which must be the node the graph keeps.
pub fn kept_node(graph: &Graph, node: NodeId) -> Result<(usize, usize)> {
    match graph.nodes.get(node) {
        Some(n) if graph.key.keep == Some(node) => Ok((n.rows, n.width)),
        Some(n) => Err(Error::InvalidArgument(format!(
            "node {} is not kept by this graph (build it with GraphKey::keep)",
            n.name
        ))),
        None => Err(Error::InvalidArgument(format!(
            "node {node} is outside a graph of {} nodes",
            graph.nodes.len()
        ))),
    }
}

pub(crate) fn no_forward_yet() -> Error {
    Error::InvalidArgument("read_node before any forward of this graph".into())
}

/// The checks every backend's forward makes before touching its device: the step fills the
/// graph, every token's cells lie within the `n_cells` allocated, and its tokens are of the
/// vocabulary.
pub fn check_forward(graph: &Graph, step: &Step, n_cells: usize, n_vocab: usize) -> Result<()> {
    let n = step.len();
    if n == 0 || n != graph.key.n_tokens {
        return Err(Error::InvalidArgument(format!(
            "{n} tokens for a graph of {}",
            graph.key.n_tokens
        )));
    }
    if [step.pos.len(), step.off.len(), step.run.len()] != [n; 3] {
        return Err(Error::InvalidArgument(format!(
            "a step of {n} tokens with {} positions, {} offsets and {} run lengths",
            step.pos.len(),
            step.off.len(),
            step.run.len()
        )));
    }
    for t in 0..n {
        let last = step.off[t] as usize + step.pos[t] as usize;
        if last >= step.cells.len() {
            return Err(Error::InvalidArgument(format!(
                "token {t} at position {} reads cell list entry {last} of {}",
                step.pos[t],
                step.cells.len()
            )));
        }
    }
    if let Some(&bad) = step.cells.iter().find(|&&c| c as usize >= n_cells) {
        return Err(Error::ContextOverflow {
            pos: bad as usize,
            n_ctx: n_cells,
        });
    }
    if let Some(&bad) = step.tokens.iter().find(|&&t| t as usize >= n_vocab) {
        return Err(Error::InvalidArgument(format!(
            "token id {bad} is outside the vocabulary of {n_vocab}"
        )));
    }
    Ok(())
}

/// Little-endian f32 bytes read back from a device, into `out` (replacing its contents).
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub(crate) fn f32s_into(bytes: &[u8], out: &mut Vec<f32>) {
    out.clear();
    out.extend(
        bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])),
    );
}

/// Reports weight upload as `(bytes done, bytes total)`: once with 0 before the first weight,
/// then after each one. The library draws nothing; the caller decides what to show.
#[derive(Clone)]
pub struct Progress(Arc<dyn Fn(u64, u64) + Send + Sync>);

impl Progress {
    pub fn new(f: impl Fn(u64, u64) + Send + Sync + 'static) -> Progress {
        Progress(Arc::new(f))
    }

    pub fn report(&self, done: u64, total: u64) {
        (self.0)(done, total)
    }
}

impl std::fmt::Debug for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Progress(..)")
    }
}

/// Where compiled kernels and pipeline caches live: `$XDG_CACHE_HOME/minfer`, else
/// `~/.cache/minfer`.
pub fn cache_dir() -> Option<std::path::PathBuf> {
    Some(crate::env::user_cache_dir()?.join("minfer"))
}
