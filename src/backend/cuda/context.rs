//! A model resident on a CUDA device: weights uploaded once each, the KV cache, and one plan
//! per graph shape — the schedule's launches with every buffer address resolved. A decode
//! step is captured as a CUDA graph on its second run and replayed from then on (unless
//! profiling: then each node's launches are timed between events); per step only
//! the step words, the token ids and the RoPE tables are written, and only the logits rows (or,
//! for greedy, the argmax id) come back.

use std::collections::HashMap;
use std::sync::Arc;

use super::device::{DevBuf, Device, Func, Params, Replay};
use crate::backend::gpu::params::{KernelParams, MatmulParams};
use crate::backend::gpu::profile::OpTotals;
use crate::backend::gpu::schedule::{self, rope_table, PackSlot, Res, Stage, WeightParts};
use crate::backend::gpu::table::Kernel;
use crate::backend::{Context, KvLayout, KvType, Progress, Step, Submitted};
use crate::error::{Error, Result};
use crate::model::{Graph, GraphKey, Model, NodeId, Rope};

fn err(what: impl Into<String>) -> Error {
    Error::Backend {
        backend: "cuda",
        what: what.into(),
    }
}

/// Weights on the device, each uploaded once under its canonical name; the members of a pack
/// (`gpu::packs`) in one allocation, each at an aligned offset.
pub struct CudaWeights {
    /// name → (layout, address)
    weights: HashMap<String, (Arc<WeightParts>, u64)>,
    /// The allocations the addresses point into.
    bufs: Vec<DevBuf>,
    pub resident: u64,
}

/// Bytes after each weight's data, zeroed: kernels may read a word past a block's end.
const PAD: usize = crate::backend::gpu::CUDA_PAD as usize;

impl CudaWeights {
    /// Uploads every weight of the model, once each (in name order), reporting the bytes done.
    pub fn upload(
        dev: &dyn Device,
        model: &Model,
        progress: Option<&Progress>,
    ) -> std::result::Result<CudaWeights, String> {
        let mut reg = CudaWeights {
            weights: HashMap::new(),
            bufs: Vec::new(),
            resident: 0,
        };
        crate::backend::gpu::upload_each(model, progress, |ts| {
            let layout = |t: &crate::tensor::Tensor, pack| WeightParts {
                name: t.name.as_str().into(),
                qtype: t.qtype,
                row_len: t.row_len(),
                parts: vec![(0, t.n_rows())],
                pack,
            };
            if let [t] = ts {
                return reg.register(dev, layout(t, None), t.bytes());
            }
            if ts.iter().any(|t| reg.weights.contains_key(&t.name)) {
                return Ok(());
            }
            let sizes: Vec<u64> = ts.iter().map(|t| t.bytes().len() as u64).collect();
            let (offsets, total) = crate::backend::gpu::pack_offsets(&sizes, PAD as u64);
            let buf = dev.alloc(total as usize)?;
            for (index, (t, &offset)) in ts.iter().zip(&offsets).enumerate() {
                let ptr = buf.ptr + offset;
                dev.write(ptr, t.bytes()).map_err(|e| format!("{}: {e}", t.name))?;
                let slot = PackSlot {
                    first: ts[0].name.as_str().into(),
                    index,
                    offset,
                };
                reg.resident += t.bytes().len() as u64;
                reg.weights
                    .insert(t.name.clone(), (Arc::new(layout(t, Some(slot))), ptr));
            }
            reg.bufs.push(buf);
            Ok(())
        })?;
        Ok(reg)
    }

    /// Uploads one weight. Registering a name again with the same size is a no-op (the first
    /// upload stays: a captured graph may still read it); with another size, an error.
    pub fn register(&mut self, dev: &dyn Device, layout: WeightParts, bytes: &[u8]) -> std::result::Result<(), String> {
        if let Some((old, _)) = self.weights.get(&*layout.name) {
            let same = old.parts == layout.parts && old.row_len == layout.row_len && old.qtype == layout.qtype;
            if same {
                return Ok(());
            }
            return Err(format!("{} is already resident with another shape", layout.name));
        }
        let buf = dev.alloc(bytes.len() + PAD)?;
        dev.write(buf.ptr, bytes).map_err(|e| format!("{}: {e}", layout.name))?;
        self.resident += bytes.len() as u64;
        self.weights
            .insert(layout.name.to_string(), (Arc::new(layout), buf.ptr));
        self.bufs.push(buf);
        Ok(())
    }

    pub fn layout(&self, name: &str) -> Option<Arc<WeightParts>> {
        self.weights.get(name).map(|w| w.0.clone())
    }

    fn ptr(&self, name: &str) -> Option<u64> {
        self.weights.get(name).map(|w| w.1)
    }
}

enum Item {
    Launch {
        func: Func,
        grid: [u32; 3],
        block: u32,
        params: Params,
    },
    Copy {
        dst: u64,
        src: u64,
        bytes: usize,
    },
}

/// One step's work in order, and each node's launches among it by op kind (the profile's rows).
#[derive(Default)]
struct Seq {
    items: Vec<Item>,
    kinds: Vec<(String, std::ops::Range<usize>)>,
}

/// A schedule made concrete for one graph shape (wgpu's `plan::Plan`): the launches, the
/// buffers they point into and the captured graphs.
struct Plan {
    /// Dropped first: a graph holds the addresses of the buffers below.
    /// The decode step as a graph, `[long][argmax]`: with the short or the split-KV
    /// attention, without and with the argmax (greedy steps read back only its id, so it runs
    /// inside the graph).
    graphs: [[Option<Box<dyn Replay>>; 2]; 2],
    /// The work of a step, `[long]`: the launches of `When::Short` or of `When::Long`
    /// (`schedule::When`), with every other.
    seqs: [Seq; 2],
    argmax: Vec<Item>,
    runs: usize,
    /// Held for the launches (and the graph) that point into them.
    acts: Vec<DevBuf>,
    /// The activation buffer of each node.
    node_buf: Vec<usize>,
    ids: DevBuf,
    ropes: Vec<(Rope, DevBuf)>,
    result: u64,
    result_bytes: usize,
    argmax_out: DevBuf,
    /// `Res::Split`: the split-KV attention's partial results.
    _split: DevBuf,
    /// The tensor-core matmuls' stream-k runs: their partial sums and per-tile counters.
    _mma_partials: DevBuf,
    _mma_counts: DevBuf,
}

pub struct CudaContext {
    /// Dropped before the buffers they point at.
    plans: HashMap<GraphKey, Plan>,
    dev: Arc<dyn Device>,
    model: Arc<Model>,
    kv: KvType,
    /// Cells of K/V storage per layer (rows of `kc[l]` and `vc[l]`).
    n_cells: usize,
    weights: CudaWeights,
    kc: Vec<DevBuf>,
    vc: Vec<DevBuf>,
    kv_bytes: usize,
    /// `Step::words()`, written per forward. Its address is fixed while plans live (a
    /// captured graph reads it); a step that needs more words gets a bigger buffer and drops
    /// the plans.
    step: DevBuf,
    graphs: bool,
    /// What the last forward submitted.
    submitted: Submitted,
    /// Per-op device time, where profiling was asked for (each node's launches timed by
    /// events; no graphs then).
    profile: Option<OpTotals>,
    /// Steps whose context reaches this many positions take the split-KV attention
    /// (`schedule::When::Long`); 0 never.
    split_span: u32,
}

impl CudaContext {
    /// `graphs`: capture decode steps as CUDA graphs (`BackendOptions::cuda_graphs`);
    /// `profile`: time each node's launches instead (`BackendOptions::profile`).
    pub fn new(
        dev: Arc<dyn Device>,
        model: &Arc<Model>,
        n_cells: usize,
        kv: KvType,
        (graphs, profile, split_span): (bool, bool, u32),
        progress: Option<&Progress>,
    ) -> Result<CudaContext> {
        let (kc, vc, kv_bytes) = Self::alloc_kv(dev.as_ref(), model, n_cells, kv)?;
        let weights = CudaWeights::upload(dev.as_ref(), model, progress).map_err(err)?;
        // A one-sequence step of the whole context: the header, (pos, off) per token, the cells.
        let step = dev.alloc((4 + 2 + n_cells) * 4).map_err(err)?;
        Ok(CudaContext {
            plans: HashMap::new(),
            dev,
            model: model.clone(),
            kv,
            n_cells,
            weights,
            kc,
            vc,
            kv_bytes,
            step,
            graphs: graphs && !profile,
            submitted: Submitted::default(),
            profile: profile.then(OpTotals::default),
            split_span,
        })
    }

    /// `n_cells` cells of K and V per layer (zeroed), and their bytes in all.
    fn alloc_kv(
        dev: &dyn Device,
        model: &Model,
        n_cells: usize,
        kv: KvType,
    ) -> Result<(Vec<DevBuf>, Vec<DevBuf>, usize)> {
        let l = KvLayout::new(model, n_cells, kv)?;
        let (mut kc, mut vc) = (Vec::new(), Vec::new());
        // Each layer at its own widths (Gemma 4's differ; a KV-shared layer has none).
        for il in 0..l.n_layer {
            let (kb, vb) = l.layer_bytes(&model.hparams, il);
            kc.push(dev.alloc(kb).map_err(err)?);
            vc.push(dev.alloc(vb).map_err(err)?);
        }
        Ok((kc, vc, l.model_bytes(&model.hparams)))
    }

    /// Makes the step buffer hold `words` words: a bigger one (at least double) when it does
    /// not, after dropping the plans (their launches and graphs hold the old address).
    fn reserve_step(&mut self, words: usize) -> Result<()> {
        let have = self.step.bytes / 4;
        if words <= have {
            return Ok(());
        }
        self.plans.clear();
        self.step = self.dev.alloc(words.max(2 * have) * 4).map_err(err)?;
        Ok(())
    }

    fn plan(&self, g: &Graph) -> std::result::Result<Plan, String> {
        let dev = self.dev.as_ref();
        let shape = dev.shape();
        let sms = shape.sms;
        let s = schedule::schedule(g, &|name| self.weights.layout(name), self.kv, false, &shape)?;
        // The plan's op files compiled side by side before their launches ask for them.
        let kernels: Vec<Kernel> = s
            .stages
            .iter()
            .flat_map(|st| match st {
                Stage::Compute { launches, .. } => launches.iter().map(|l| l.variant.kernel).collect(),
                Stage::Copy { .. } => Vec::new(),
            })
            .chain(s.argmax.iter().map(|l| l.variant.kernel))
            .collect();
        dev.prepare(&kernels)?;
        let n = s.n_tokens;
        let acts = s
            .act_bytes
            .iter()
            .map(|&b| dev.alloc(b as usize))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let ids = dev.alloc(n * 4)?;
        let ropes = s
            .ropes
            .iter()
            .map(|r| Ok((*r, dev.alloc(n * r.n_rot / 2 * 8)?)))
            .collect::<std::result::Result<Vec<_>, String>>()?;
        let argmax_out = dev.alloc(schedule::ARGMAX_OUT_BYTES as usize)?;
        let split = dev.alloc((s.split_bytes as usize).max(4))?;
        // The tensor-core launches, and the scratch the largest split among them needs.
        let mma = |l: &schedule::Launch| {
            dev.takes_mma(&l.variant)
                .then(|| l.variant.mma_launch(&l.params, l.groups, sms))
                .flatten()
        };
        let (mut partial_bytes, mut tiles) = (4usize, 1usize);
        for l in s.stages.iter().flat_map(|st| match st {
            Stage::Compute { launches, .. } => launches.as_slice(),
            Stage::Copy { .. } => &[],
        }) {
            if let Some((m, runs)) = mma(l)
                .filter(|_| l.variant.kernel == Kernel::Matmul)
                .map(|m| (m, m.runs()))
                .filter(|&(_, runs)| runs > 1)
            {
                let p = MatmulParams::from_words(&m.params);
                partial_bytes = partial_bytes.max(runs as usize * p.n as usize * p.rows as usize * 4);
                tiles = tiles.max(m.tiles() as usize);
            }
        }
        let mma_partials = dev.alloc(partial_bytes)?;
        let mma_counts = dev.alloc(tiles * 4)?;
        let addr = |r: &Res| -> std::result::Result<u64, String> {
            Ok(match r {
                Res::Step => self.step.ptr,
                Res::Ids => ids.ptr,
                Res::Act(b) => acts[*b].ptr,
                // One part each; a pack binds from its first member.
                Res::Weight(w, _) | Res::Pack(w) => self
                    .weights
                    .ptr(&w.name)
                    .ok_or_else(|| format!("{} is not resident", w.name))?,
                Res::RopeTable(i) => ropes[*i].1.ptr,
                Res::Kc(l) => self.kc.get(*l).ok_or_else(|| format!("no KV cache for layer {l}"))?.ptr,
                Res::Vc(l) => self.vc.get(*l).ok_or_else(|| format!("no KV cache for layer {l}"))?.ptr,
                Res::Logits => acts[s.result].ptr,
                Res::ArgmaxOut => argmax_out.ptr,
                Res::Unused => 0,
                Res::Split => split.ptr,
            })
        };
        let launch = |l: &schedule::Launch| -> std::result::Result<Item, String> {
            let mut params = Params {
                w: l.params,
                ..Params::default()
            };
            if l.res.len() > params.b.len() {
                return Err(format!("{}: {} bindings", l.variant.name(), l.res.len()));
            }
            for (i, r) in l.res.iter().enumerate() {
                params.b[i] = addr(r)?;
            }
            let (size, grid, block) = match mma(l) {
                Some(m) => {
                    params.w = m.params;
                    if l.variant.kernel == Kernel::Matmul && m.runs() > 1 {
                        // cuda/matmul.cu: bindings 5 and 6 of stream-k's runs.
                        params.b[4] = mma_partials.ptr;
                        params.b[5] = mma_counts.ptr;
                    }
                    (Some(m.size), m.grid, m.threads)
                }
                None => (None, l.groups, l.variant.kernel.threads()),
            };
            Ok(Item::Launch {
                func: dev.function(&l.variant, size)?,
                grid,
                block,
                params,
            })
        };
        let mut seqs = [Seq::default(), Seq::default()];
        for (long, seq) in seqs.iter_mut().enumerate() {
            let items = &mut seq.items;
            for st in &s.stages {
                match st {
                    Stage::Compute { launches, kind } => {
                        let start = items.len();
                        for l in launches.iter().filter(|l| l.when.runs(long == 1)) {
                            items.push(launch(l)?);
                        }
                        if items.len() > start {
                            seq.kinds.push((kind.clone(), start..items.len()));
                        }
                    }
                    Stage::Copy {
                        src,
                        src_offset,
                        dst,
                        size,
                    } => items.push(Item::Copy {
                        dst: acts[*dst].ptr,
                        src: acts[*src].ptr + src_offset,
                        bytes: *size as usize,
                    }),
                }
            }
        }
        let argmax = s
            .argmax
            .iter()
            .map(launch)
            .collect::<std::result::Result<Vec<_>, _>>()?;
        Ok(Plan {
            graphs: Default::default(),
            seqs,
            argmax,
            runs: 0,
            result: acts[s.result].ptr,
            result_bytes: s.result_bytes as usize,
            acts,
            node_buf: s.node_buf.clone(),
            ids,
            ropes,
            argmax_out,
            _split: split,
            _mma_partials: mma_partials,
            _mma_counts: mma_counts,
        })
    }

    fn submit(dev: &dyn Device, items: &[Item]) -> std::result::Result<(), String> {
        for it in items {
            match it {
                Item::Launch {
                    func,
                    grid,
                    block,
                    params,
                } => dev.launch(*func, *grid, *block, params)?,
                Item::Copy { dst, src, bytes } => dev.copy(*dst, *src, *bytes)?,
            }
        }
        Ok(())
    }

    /// `submit`, each node's launches timed on the device (the copies between untimed) and
    /// added to `p` for a forward of `n` tokens.
    fn submit_timed(dev: &dyn Device, seq: &Seq, p: &mut OpTotals, n: usize) -> std::result::Result<(), String> {
        let mut at = 0;
        for (kind, r) in &seq.kinds {
            Self::submit(dev, &seq.items[at..r.start])?;
            let ns = dev.timed(&mut || Self::submit(dev, &seq.items[r.clone()]))?;
            p.add(kind, r.len() as u64, ns, n);
            at = r.end;
        }
        Self::submit(dev, &seq.items[at..])?;
        p.forward(n);
        Ok(())
    }

    /// One forward; returns the logits rows, or the argmax id's 4 bytes when `argmax`.
    fn run(&mut self, graph: &Graph, step: &Step, argmax: bool) -> Result<Vec<u8>> {
        crate::backend::check_forward(graph, step, self.n_cells, self.model.hparams.n_vocab)?;
        let words = step.words(graph.bidirectional());
        self.reserve_step(words.len())?;
        let key = graph.key;
        if !self.plans.contains_key(&key) {
            let p = self.plan(graph).map_err(err)?;
            self.plans.insert(key, p);
        }
        let dev = self.dev.clone();
        let dev = dev.as_ref();
        let n = step.len();
        let step_ptr = self.step.ptr;
        let graphs = self.graphs;
        let model = self.model.clone();
        let plan = self.plans.get_mut(&key).ok_or_else(|| err("no plan"))?;
        // A decode step whose context reaches the split span takes the split-KV attention.
        let ctx = step.pos.iter().map(|&p| p as u64 + 1).max().unwrap_or(0);
        let long = usize::from(self.split_span > 0 && ctx >= self.split_span as u64);
        let launches = plan.seqs[long]
            .items
            .iter()
            .filter(|it| matches!(it, Item::Launch { .. }))
            .count() as u64;
        let submitted = &mut self.submitted;
        let profile = &mut self.profile;
        let mut go = || -> std::result::Result<Vec<u8>, String> {
            dev.write(step_ptr, bytemuck::cast_slice(&words))?;
            dev.write(plan.ids.ptr, bytemuck::cast_slice(&step.tokens))?;
            for (rope, buf) in &plan.ropes {
                let table = rope_table(&model, rope, &step.pos).map_err(|e| e.to_string())?;
                dev.write(buf.ptr, bytemuck::cast_slice(&table))?;
            }
            // Decode shapes repeat every step: from the second run on, one graph launch, the
            // argmax inside it for greedy steps.
            let slot = usize::from(argmax);
            let tail: &[Item] = if argmax { &plan.argmax } else { &[] };
            let whole = launches + tail.len() as u64;
            if graphs && plan.graphs[long][slot].is_none() && plan.runs >= 1 && n == 1 {
                let items = &plan.seqs[long].items;
                plan.graphs[long][slot] = dev.capture(&mut || {
                    Self::submit(dev, items)?;
                    Self::submit(dev, tail)
                })?;
                if plan.graphs[long][slot].is_none() {
                    // Executed directly: the device has no graphs.
                    *submitted = Submitted {
                        dispatches: whole,
                        passes: whole,
                        submits: 1,
                    };
                    plan.runs += 1;
                    return read_out(dev, plan, argmax);
                }
            }
            // One pass per graph replay, else one per launch.
            let passes = match (&plan.graphs[long][slot], profile.as_mut()) {
                (Some(g), _) => {
                    g.replay()?;
                    1
                }
                (None, Some(p)) => {
                    Self::submit_timed(dev, &plan.seqs[long], p, n)?;
                    Self::submit(dev, tail)?;
                    whole
                }
                (None, None) => {
                    Self::submit(dev, &plan.seqs[long].items)?;
                    Self::submit(dev, tail)?;
                    whole
                }
            };
            *submitted = Submitted {
                dispatches: whole,
                passes,
                submits: 1,
            };
            plan.runs += 1;
            read_out(dev, plan, argmax)
        };
        go().map_err(err)
    }
}

/// The readback after a forward's work (its argmax included) has been submitted: the argmax
/// id's 4 bytes, or the logits rows.
fn read_out(dev: &dyn Device, plan: &Plan, argmax: bool) -> std::result::Result<Vec<u8>, String> {
    let (src, bytes) = match argmax {
        true => (plan.argmax_out.ptr, 4),
        false => (plan.result, plan.result_bytes),
    };
    let mut b = vec![0u8; bytes];
    dev.read(src, &mut b)?;
    Ok(b)
}

impl Context for CudaContext {
    fn read_node(&mut self, graph: &Graph, node: NodeId) -> Result<Vec<f32>> {
        let (rows, width) = crate::backend::kept_node(graph, node)?;
        let p = self.plans.get(&graph.key).ok_or_else(crate::backend::no_forward_yet)?;
        let mut bytes = vec![0u8; rows * width * 4];
        self.dev.read(p.acts[p.node_buf[node]].ptr, &mut bytes).map_err(err)?;
        let mut out = Vec::new();
        crate::backend::f32s_into(&bytes, &mut out);
        Ok(out)
    }

    fn forward(&mut self, graph: &Graph, step: &Step, out: &mut Vec<f32>) -> Result<()> {
        let bytes = self.run(graph, step, false)?;
        crate::backend::f32s_into(&bytes, out);
        Ok(())
    }

    fn forward_argmax(&mut self, graph: &Graph, step: &Step) -> Result<u32> {
        let b = self.run(graph, step, true)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn kv_cells(&self) -> usize {
        self.n_cells
    }

    fn submitted(&self) -> Option<Submitted> {
        Some(self.submitted)
    }

    fn profile_report(&self) -> Option<String> {
        Some(self.profile.as_ref()?.report("cuda", &self.dev.describe()))
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

    /// Bigger buffers with the old cells copied in (device to device); the plans go first,
    /// since their launches and graphs hold the old addresses.
    fn grow_kv(&mut self, n_cells: usize) -> Result<()> {
        if n_cells <= self.n_cells {
            return Ok(());
        }
        let (kc, vc, kv_bytes) = Self::alloc_kv(self.dev.as_ref(), &self.model, n_cells, self.kv)?;
        for (old, new) in self.kc.iter().zip(&kc).chain(self.vc.iter().zip(&vc)) {
            self.dev.copy(new.ptr, old.ptr, old.bytes).map_err(err)?;
        }
        // A read waits for the stream: the copies are done before the old buffers are freed.
        if let Some(b) = kc.first() {
            self.dev.read(b.ptr, &mut [0u8; 4]).map_err(err)?;
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
}
