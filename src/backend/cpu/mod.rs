//! The CPU backend: always available, zero-copy (weights are the mmap pages), and the
//! reference every other backend is tested against.

pub mod attention;
pub mod dot;
mod encoder_attn;
pub mod ggml_order;
pub mod matmul;
pub mod moe;
pub mod ops;
pub mod pool;
mod profile;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use attention::KvCache;
use dot::Isa;
use pool::{Pool, SyncPtr};
use profile::Profile;

use super::{Backend, Context, KvLayout, KvType, Refusal, Step};
use crate::error::{Error, Result};
use crate::model::{Attn, Graph, GraphKey, Model, NodeId, Op, Rope};
use crate::quant::QType;
use crate::tensor::Tensor;

pub struct CpuBackend {
    pool: Arc<Pool>,
    kernels: &'static Isa,
    profile: bool,
}

/// Threads when none are asked for: every core (`-t` overrides).
pub fn default_threads() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}

impl CpuBackend {
    pub fn new(threads: Option<usize>) -> Result<CpuBackend> {
        let n = threads.unwrap_or_else(default_threads);
        if n == 0 || n > 1024 {
            return Err(Error::InvalidArgument(format!("thread count {n} (expected 1..=1024)")));
        }
        Ok(CpuBackend {
            pool: Arc::new(Pool::new(n)),
            kernels: Isa::best(),
            profile: false,
        })
    }

    /// A backend on one ISA's kernels (`scalar`, `avx2`, `avx512`, `neon`); an error if this
    /// CPU lacks it. `new` takes the best this CPU runs.
    pub fn with_isa(threads: Option<usize>, isa: &str) -> Result<CpuBackend> {
        Ok(CpuBackend {
            kernels: Isa::for_isa(isa)?,
            ..CpuBackend::new(threads)?
        })
    }

    pub fn n_threads(&self) -> usize {
        self.pool.n_threads()
    }

    /// Contexts that time every op and count the weight bytes it reads
    /// ([`Context::profile_report`]).
    pub fn with_profile(self, profile: bool) -> CpuBackend {
        CpuBackend { profile, ..self }
    }
}

impl Backend for CpuBackend {
    fn name(&self) -> &'static str {
        "cpu"
    }

    fn describe(&self) -> String {
        format!("cpu ({}, {} threads)", self.kernels.isa(), self.pool.n_threads())
    }

    fn check(&self, model: &Model, graph: &Graph, kv: KvType) -> std::result::Result<(), Refusal> {
        for node in &graph.nodes {
            if let Op::Matmul { weight, .. } = &node.op {
                let t = model
                    .weights
                    .get(weight)
                    .ok_or_else(|| Refusal(format!("{weight} is missing")))?;
                if matches!(t.qtype, QType::Q8_1 | QType::Q8K) {
                    return Err(Refusal(format!("{weight} is {}, an activation-only format", t.qtype)));
                }
            }
            if let Op::Attention {
                attn: Attn {
                    head_dim, head_dim_v, ..
                },
                ..
            } = node.op
            {
                let be = kv.qtype().block_elems();
                if head_dim % be != 0 || head_dim_v % be != 0 {
                    return Err(Refusal(format!(
                        "{}: head_dim {head_dim} is not a multiple of the {} cache block {be}",
                        node.name,
                        kv.name()
                    )));
                }
            }
        }
        Ok(())
    }

    fn new_context(&self, model: &Arc<Model>, n_cells: usize, kv: KvType) -> Result<Box<dyn Context>> {
        Ok(Box::new(CpuContext {
            model: model.clone(),
            pool: self.pool.clone(),
            kernels: self.kernels,
            kv: KvCache::for_model(&KvLayout::new(model, n_cells, kv)?, &model.hparams),
            plans: HashMap::new(),
            act: Vec::new(),
            rope: Vec::new(),
            groups: Vec::new(),
            profile: self.profile.then(Profile::default),
        }))
    }
}

/// A graph resolved against this model: weights looked up once, activations assigned to
/// reusable buffers by liveness.
struct Program {
    steps: Vec<Instr>,
    buffers: Vec<Vec<f32>>,
    result: usize,
}

struct Instr {
    op: Op,
    weight: Option<Tensor>,
    /// Float copy of a vector weight (norms, biases): small, decoded once per plan.
    vector: Vec<f32>,
    /// A LayerNorm's bias, decoded likewise.
    bias: Vec<f32>,
    /// The experts of a `matmul_id` weight, as `[in, out]` windows.
    experts: Vec<Tensor>,
    out: usize,
    inputs: Vec<usize>,
    /// Row widths of the inputs.
    in_widths: Vec<usize>,
    width: usize,
    rows: usize,
    in_rows: usize,
}

struct CpuContext {
    model: Arc<Model>,
    pool: Arc<Pool>,
    kernels: &'static Isa,
    kv: KvCache,
    plans: HashMap<GraphKey, Program>,
    act: Vec<u8>,
    /// cos/sin tables of the current step's positions, per RoPE configuration (without its
    /// temperature, applied after the rotation).
    rope: Vec<(Rope, Vec<(f32, f32)>)>,
    /// The current step's matmul groups, per row count.
    groups: Vec<(usize, matmul::Groups)>,
    profile: Option<Profile>,
}

fn compile(model: &Model, g: &Graph) -> Result<Program> {
    let mut live = crate::backend::alloc::Liveness::new(g);
    let mut steps = Vec::with_capacity(g.nodes.len());
    for (i, n) in g.nodes.iter().enumerate() {
        let inputs: Vec<usize> = n.op.inputs().iter().map(|&j| live.buf_of[j]).collect();
        let out = live.place(g, i, (n.rows * n.width) as u64);
        let weight = n.op.weights().first().map(|w| model.weight(w).cloned()).transpose()?;
        let vector = match (&n.op, &weight) {
            (
                Op::RmsNorm { .. }
                | Op::LayerNorm { .. }
                | Op::HeadNorm { .. }
                | Op::ScaleBy { .. }
                | Op::AddBias { .. }
                | Op::AddBiasId { .. }
                | Op::Rope { .. }
                | Op::Attention { .. },
                Some(t),
            ) => t.to_f32()?,
            _ => Vec::new(),
        };
        let bias = match &n.op {
            Op::LayerNorm { bias, .. } => model.weight(bias)?.to_f32()?,
            _ => Vec::new(),
        };
        let experts = match (&n.op, &weight) {
            (Op::MatmulId { .. }, Some(t)) => moe::expert_views(t)?,
            _ => Vec::new(),
        };
        let in_widths = n.op.inputs().iter().map(|&j| g.nodes[j].width).collect();
        let in_rows = n.op.inputs().first().map_or(n.rows, |&j: &NodeId| g.nodes[j].rows);
        steps.push(Instr {
            op: n.op.clone(),
            weight,
            vector,
            bias,
            experts,
            out,
            inputs,
            in_widths,
            width: n.width,
            rows: n.rows,
            in_rows,
        });
    }
    Ok(Program {
        steps,
        // Sizes in f32 elements.
        buffers: live.sizes.iter().map(|&n| vec![0f32; n as usize]).collect(),
        result: live.buf_of[g.result],
    })
}

impl CpuContext {
    fn rope_table(&mut self, rope: &Rope, factors: &[f32], pos: &[u32]) -> Vec<(f32, f32)> {
        let rope = Rope { temp: None, ..*rope };
        if let Some((_, t)) = self.rope.iter().find(|(r, _)| *r == rope) {
            return t.clone();
        }
        let mut all = Vec::with_capacity(pos.len() * rope.n_rot / 2);
        let mut c = Vec::new();
        for &p in pos {
            ops::rope_cache(p as usize, &rope, rope.freq_factors.then_some(factors), &mut c);
            all.extend_from_slice(&c);
        }
        self.rope.push((rope, all.clone()));
        all
    }

    fn run_plan(&mut self, key: GraphKey, step: &Step) -> Result<()> {
        let mut plan = self
            .plans
            .remove(&key)
            .ok_or_else(|| Error::InvalidArgument("no plan".into()))?;
        let r = self.exec(&mut plan, step);
        self.plans.insert(key, plan);
        r
    }

    fn exec(&mut self, plan: &mut Program, step: &Step) -> Result<()> {
        self.rope.clear();
        self.groups.clear();
        let n = step.tokens.len();
        if let Some(p) = self.profile.as_mut() {
            p.forward(n);
        }
        for s in &plan.steps {
            // The planner never gives a node a live input's buffer; the output leaves the pool
            // for the step, so it and the inputs are distinct borrows.
            debug_assert!(!s.inputs.contains(&s.out));
            let mut y = std::mem::take(&mut plan.buffers[s.out]);
            let t0 = self.profile.is_some().then(Instant::now);
            let r = self.step(s, &plan.buffers, &mut y, step);
            if let (Some(p), Some(t0)) = (self.profile.as_mut(), t0) {
                let ns = t0.elapsed().as_nanos() as u64;
                let route = matches!(s.op, Op::MatmulId { .. }).then(|| &plan.buffers[s.inputs[1]][..]);
                p.record(s, n, ns, profile::weight_bytes(s, route, n));
            }
            plan.buffers[s.out] = y;
            r?;
        }
        Ok(())
    }

    /// Runs one instruction: `bufs` holds its inputs, `y` is its output buffer.
    fn step(&mut self, s: &Instr, bufs: &[Vec<f32>], y: &mut [f32], step: &Step) -> Result<()> {
        let tokens = &step.tokens;
        let pool = self.pool.clone();
        {
            let size = s.rows * s.width;
            match &s.op {
                Op::GetRows { .. } => {
                    let w = s
                        .weight
                        .as_ref()
                        .ok_or_else(|| Error::InvalidArgument("get_rows without weight".into()))?;
                    let out = &mut y[..size];
                    for (t, &id) in tokens.iter().enumerate() {
                        w.dequantize_rows(id as usize, 1, &mut out[t * s.width..(t + 1) * s.width])?;
                    }
                }
                Op::Matmul { .. } => {
                    let w = s
                        .weight
                        .as_ref()
                        .ok_or_else(|| Error::InvalidArgument("matmul without weight".into()))?;
                    let k = w.row_len();
                    let x = &bufs[s.inputs[0]];
                    let mut cache = std::mem::take(&mut self.groups);
                    let groups = groups_of(&mut cache, step, s.rows);
                    matmul::matmul(
                        &pool,
                        self.kernels,
                        w,
                        &x[..s.rows * k],
                        s.rows,
                        &mut y[..size],
                        &mut self.act,
                        Some(groups),
                    );
                    self.groups = cache;
                }
                Op::AddBias { .. } => {
                    let x = &bufs[s.inputs[0]];
                    for (yr, xr) in y[..size].chunks_exact_mut(s.width).zip(x.chunks_exact(s.width)) {
                        for ((y, &x), &b) in yr.iter_mut().zip(xr).zip(&s.vector) {
                            *y = x + b;
                        }
                    }
                }
                Op::RmsNorm { eps, .. } => {
                    let x = &bufs[s.inputs[0]];
                    let (w, yp) = (s.width, SyncPtr::new(&mut y[..size]));
                    pool.for_chunks(s.rows, 8, |_, r| {
                        for t in r {
                            // SAFETY: one row per task.
                            let yr = unsafe { yp.slice(t * w, w) };
                            ops::rms_norm(&x[t * w..(t + 1) * w], &s.vector, *eps, yr);
                        }
                    });
                }
                Op::LayerNorm { eps, .. } => {
                    let x = &bufs[s.inputs[0]];
                    let (w, yp) = (s.width, SyncPtr::new(&mut y[..size]));
                    pool.for_chunks(s.rows, 8, |_, r| {
                        for t in r {
                            // SAFETY: one row per task.
                            let yr = unsafe { yp.slice(t * w, w) };
                            ops::layer_norm(&x[t * w..(t + 1) * w], &s.vector, &s.bias, *eps, yr);
                        }
                    });
                }
                Op::AddPosRows { .. } => {
                    let w = s
                        .weight
                        .as_ref()
                        .ok_or_else(|| Error::InvalidArgument("add_pos_rows without weight".into()))?;
                    let n_pos = w.shape.get(1).copied().unwrap_or(0) as usize;
                    let x = &bufs[s.inputs[0]];
                    for (t, &p) in step.pos.iter().enumerate().take(s.rows) {
                        if p as usize >= n_pos {
                            return Err(Error::ContextOverflow {
                                pos: p as usize,
                                n_ctx: n_pos,
                            });
                        }
                        let yr = &mut y[t * s.width..(t + 1) * s.width];
                        w.dequantize_rows(p as usize, 1, yr)?;
                        yr.iter_mut().zip(&x[t * s.width..]).for_each(|(y, x)| *y += x);
                    }
                }
                Op::Gelu { .. } => {
                    let x = &bufs[s.inputs[0]][..size];
                    let yp = SyncPtr::new(&mut y[..size]);
                    let chunk = 4096.max(size / (4 * pool.n_threads()));
                    pool.for_chunks(size, chunk, |_, r| {
                        // SAFETY: disjoint ranges per task.
                        let y = unsafe { yp.slice(r.start, r.len()) };
                        ops::gelu(&x[r], y);
                    });
                }
                Op::HeadNorm { eps, head_dim, .. } => {
                    let x = &bufs[s.inputs[0]];
                    let (w, yp) = (s.width, SyncPtr::new(&mut y[..size]));
                    pool.for_chunks(s.rows, 8, |_, r| {
                        for t in r {
                            // SAFETY: one row per task.
                            let yr = unsafe { yp.slice(t * w, w) };
                            yr.copy_from_slice(&x[t * w..(t + 1) * w]);
                            ops::head_norm(yr, &s.vector, *eps, *head_dim);
                        }
                    });
                }
                Op::HeadNormPlain { eps, head_dim, .. } => {
                    let x = &bufs[s.inputs[0]];
                    y[..size].copy_from_slice(&x[..size]);
                    ops::head_norm_plain(&mut y[..size], *eps, *head_dim);
                }
                Op::Slice { col0, .. } => {
                    let (x, xw) = (&bufs[s.inputs[0]], s.in_widths[0]);
                    let (c0, w) = (*col0, s.width);
                    if w == 0 || c0 + w > xw {
                        return Err(Error::InvalidArgument(format!(
                            "slice of columns {c0}..{} of a row of {xw}",
                            c0 + w
                        )));
                    }
                    for (yr, xr) in y[..size].chunks_exact_mut(w).zip(x.chunks_exact(xw)) {
                        yr.copy_from_slice(&xr[c0..c0 + w]);
                    }
                }
                Op::Rope { head_dim, rope, .. } => {
                    let table = self.rope_table(rope, &s.vector, &step.pos);
                    let x = &bufs[s.inputs[0]];
                    let half = rope.n_rot / 2;
                    let (w, yp) = (s.width, SyncPtr::new(&mut y[..size]));
                    pool.for_chunks(s.rows, 8, |_, r| {
                        for t in r {
                            // SAFETY: one row per task.
                            let row = unsafe { yp.slice(t * w, w) };
                            row.copy_from_slice(&x[t * w..(t + 1) * w]);
                            ops::rope_row(row, *head_dim, rope, &table[t * half..(t + 1) * half]);
                            // llama.cpp multiplies the rotated Q by the temperature (`ggml_mul`).
                            if let Some(temp) = rope.temp {
                                let f = temp.factor(step.pos[t]);
                                row.iter_mut().for_each(|v| *v *= f);
                            }
                        }
                    });
                }
                Op::Attention { attn, .. } => {
                    let (q, k, v) = (&bufs[s.inputs[0]], &bufs[s.inputs[1]], &bufs[s.inputs[2]]);
                    let sinks = attn.sinks.then_some(s.vector.as_slice());
                    attention::attention(
                        &pool,
                        self.kernels,
                        &mut self.kv,
                        attn,
                        sinks,
                        q,
                        k,
                        v,
                        step,
                        &mut y[..size],
                    )?;
                }
                Op::Add { .. } | Op::Mul { .. } | Op::Swiglu { .. } | Op::Geglu { .. } => {
                    let (a, b) = (&bufs[s.inputs[0]][..size], &bufs[s.inputs[1]][..size]);
                    let yp = SyncPtr::new(&mut y[..size]);
                    let (op, width) = (&s.op, s.width);
                    // Whole rows per task: SwiGLU treats each row's tail apart.
                    let chunk = 4096.max(size / (4 * pool.n_threads())).next_multiple_of(s.width.max(1));
                    pool.for_chunks(size, chunk, |_, r| {
                        // SAFETY: disjoint ranges per task.
                        let y = unsafe { yp.slice(r.start, r.len()) };
                        let (a, b) = (&a[r.clone()], &b[r]);
                        match op {
                            Op::Add { .. } => y.iter_mut().zip(a).zip(b).for_each(|((y, a), b)| *y = a + b),
                            Op::Mul { .. } => y.iter_mut().zip(a).zip(b).for_each(|((y, a), b)| *y = a * b),
                            Op::Swiglu { .. } => ops::swiglu(a, b, y, width),
                            _ => ops::geglu(a, b, y),
                        }
                    });
                }
                Op::Scale { s: f, .. } => {
                    let x = &bufs[s.inputs[0]];
                    y[..size].iter_mut().zip(&x[..size]).for_each(|(y, x)| *y = x * f);
                }
                Op::ScaleBy { weight, .. } => {
                    let f = match s.vector.as_slice() {
                        [f] => *f,
                        v => {
                            return Err(Error::InvalidArgument(format!(
                                "{weight}: {} values for one scale",
                                v.len()
                            )))
                        }
                    };
                    let x = &bufs[s.inputs[0]];
                    y[..size].iter_mut().zip(&x[..size]).for_each(|(y, x)| *y = x * f);
                }
                Op::Softcap { cap, .. } => {
                    let x = &bufs[s.inputs[0]];
                    y[..size].copy_from_slice(&x[..size]);
                    ops::softcap(&mut y[..size], *cap);
                }
                &Op::MoeRoute { k, gating, norm, .. } => {
                    let n_expert = s.in_widths[0];
                    let x = &bufs[s.inputs[0]][..s.rows * n_expert];
                    moe::route(x, n_expert, k, gating, norm, &mut y[..size]);
                }
                Op::MatmulId { .. } => {
                    let (x, route) = (&bufs[s.inputs[0]], &bufs[s.inputs[1]]);
                    let k = s.in_widths[1] / 2;
                    moe::matmul_id(
                        &pool,
                        self.kernels,
                        &s.experts,
                        x,
                        s.in_widths[0],
                        route,
                        s.rows,
                        k,
                        &mut y[..size],
                        &mut self.act,
                    )?;
                }
                Op::AddBiasId { .. } => {
                    let (x, route) = (&bufs[s.inputs[0]], &bufs[s.inputs[1]]);
                    let k = s.in_widths[1] / 2;
                    moe::add_bias_id(&x[..size], route, &s.vector, s.width / k, k, &mut y[..size])?;
                }
                Op::MoeSum { .. } => {
                    let (x, route) = (&bufs[s.inputs[0]], &bufs[s.inputs[1]]);
                    let k = s.in_widths[1] / 2;
                    moe::moe_sum(&x[..size * k], route, s.width, k, &mut y[..size]);
                }
                &Op::SwigluOai { alpha, limit, .. } => {
                    let (a, b) = (&bufs[s.inputs[0]][..size], &bufs[s.inputs[1]][..size]);
                    moe::swiglu_oai(a, b, alpha, limit, &mut y[..size]);
                }
                Op::SigmoidGate { .. } => {
                    let (x, g) = (&bufs[s.inputs[0]][..size], &bufs[s.inputs[1]][..s.rows]);
                    moe::sigmoid_gate(x, g, s.width, &mut y[..size]);
                }
                Op::Output { .. } => {
                    let x = &bufs[s.inputs[0]];
                    let skip = (s.in_rows - s.rows) * s.width;
                    y[..size].copy_from_slice(&x[skip..skip + size]);
                }
            }
        }
        Ok(())
    }
}

/// The matmul groups of the step's last `rows` tokens (all of them, or the rows after
/// `Output`), worked out once per forward into `cache`.
fn groups_of<'a>(cache: &'a mut Vec<(usize, matmul::Groups)>, step: &Step, rows: usize) -> &'a matmul::Groups {
    let i = match cache.iter().position(|(r, _)| *r == rows) {
        Some(i) => i,
        None => {
            let first = step.len() - rows;
            cache.push((
                rows,
                matmul::Groups::by_key((first..step.len()).map(|t| row_key(step, t))),
            ));
            cache.len() - 1
        }
    };
    &cache[i].1
}

/// Which matmul group token `t` of `step` is in: its sequence's (the tokens sharing its cell
/// list), or its own where it takes one-token numerics (`run` 1).
fn row_key(step: &Step, t: usize) -> u64 {
    if step.run[t] == 1 {
        u64::MAX - t as u64
    } else {
        step.off[t] as u64
    }
}

impl Context for CpuContext {
    fn read_node(&mut self, graph: &Graph, node: NodeId) -> Result<Vec<f32>> {
        let (rows, width) = crate::backend::kept_node(graph, node)?;
        let plan = self.plans.get(&graph.key).ok_or_else(crate::backend::no_forward_yet)?;
        // One instruction per node, in order; the kept node's buffer is never reused.
        Ok(plan.buffers[plan.steps[node].out][..rows * width].to_vec())
    }

    fn forward(&mut self, graph: &Graph, step: &Step, out: &mut Vec<f32>) -> Result<()> {
        let n_vocab = self.model.hparams.n_vocab;
        crate::backend::check_forward(graph, step, self.kv.n_cells, n_vocab)?;
        let key = graph.key;
        if !self.plans.contains_key(&key) {
            let plan = compile(&self.model, graph)?;
            self.plans.insert(key, plan);
        }
        self.run_plan(key, step)?;
        let plan = &self.plans[&key];
        // Logits, or an encoder's hidden states (the result's own width).
        let len = graph.key.n_outputs * graph.nodes[graph.result].width;
        out.clear();
        out.extend_from_slice(&plan.buffers[plan.result][..len]);
        Ok(())
    }

    fn profile_report(&self) -> Option<String> {
        let p = self.profile.as_ref()?;
        Some(p.report(self.kernels.isa(), self.pool.n_threads()))
    }

    fn decode_profile(&self) -> Option<crate::backend::OpProfile> {
        Some(self.profile.as_ref()?.decode())
    }

    fn batch_profile(&self) -> Option<crate::backend::OpProfile> {
        Some(self.profile.as_ref()?.batch())
    }

    fn reset_profile(&mut self) {
        if let Some(p) = self.profile.as_mut() {
            p.reset_steps();
        }
    }

    fn kv_cells(&self) -> usize {
        self.kv.n_cells
    }

    fn grow_kv(&mut self, n_cells: usize) -> Result<()> {
        KvLayout::new(&self.model, n_cells, self.kv.kv_type)?;
        self.kv.grow(n_cells);
        Ok(())
    }

    fn kv_bytes(&self) -> usize {
        self.kv.bytes()
    }

    fn resident_bytes(&self) -> u64 {
        0
    }
}
