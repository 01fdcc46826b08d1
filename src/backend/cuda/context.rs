//! A model resident on a CUDA device: weights uploaded once each, the KV cache, and one plan
//! per graph shape — the schedule's launches with every buffer address resolved. A decode
//! step is captured as a CUDA graph on its second run and replayed from then on; per step only
//! the step words, the token ids and the RoPE tables are written, and only the logits rows (or,
//! for greedy, the argmax id) come back.

use std::collections::HashMap;
use std::sync::Arc;

use super::device::{DevBuf, Device, Func, Params, Replay};
use crate::backend::gpu::schedule::{self, rope_table, Res, Stage, WeightParts};
use crate::backend::{Context, KvLayout, KvType, Progress};
use crate::error::{Error, Result};
use crate::model::{Graph, GraphKey, Model, NodeId, Rope};

fn err(what: impl Into<String>) -> Error {
    Error::Backend {
        backend: "cuda",
        what: what.into(),
    }
}

/// Weights on the device, each uploaded once under its canonical name.
pub struct Registry {
    weights: HashMap<String, (Arc<WeightParts>, DevBuf)>,
    pub resident: u64,
}

/// Bytes after each weight's data, zeroed: kernels may read a word past a block's end.
const PAD: usize = 16;

impl Registry {
    /// Uploads every weight of the model, once each (in name order), reporting the bytes done.
    pub fn upload(
        dev: &dyn Device,
        model: &Model,
        progress: Option<&Progress>,
    ) -> std::result::Result<Registry, String> {
        let mut reg = Registry {
            weights: HashMap::new(),
            resident: 0,
        };
        crate::backend::gpu::upload_each(model, progress, |t| {
            let layout = WeightParts {
                name: t.name.as_str().into(),
                qtype: t.qtype,
                row_len: t.row_len(),
                parts: vec![(0, t.n_rows())],
            };
            reg.register(dev, layout, t.bytes())
        })?;
        Ok(reg)
    }

    /// Uploads one weight. Registering a name again with the same size is a no-op (the first
    /// upload stays: a captured graph may still read it); with another size, an error.
    pub fn register(&mut self, dev: &dyn Device, layout: WeightParts, bytes: &[u8]) -> std::result::Result<(), String> {
        if let Some((old, buf)) = self.weights.get(&*layout.name) {
            if buf.bytes >= bytes.len() + PAD && old.row_len == layout.row_len && old.qtype == layout.qtype {
                return Ok(());
            }
            return Err(format!("{} is already resident with another shape", layout.name));
        }
        let buf = dev.alloc(bytes.len() + PAD)?;
        dev.write(buf.ptr, bytes).map_err(|e| format!("{}: {e}", layout.name))?;
        self.resident += bytes.len() as u64;
        self.weights.insert(layout.name.to_string(), (Arc::new(layout), buf));
        Ok(())
    }

    pub fn layout(&self, name: &str) -> Option<Arc<WeightParts>> {
        self.weights.get(name).map(|w| w.0.clone())
    }

    fn ptr(&self, name: &str) -> Option<u64> {
        self.weights.get(name).map(|w| w.1.ptr)
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

struct Prepared {
    /// Dropped first: a graph holds the addresses of the buffers below.
    graph: Option<Box<dyn Replay>>,
    items: Vec<Item>,
    argmax: Item,
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
}

pub struct CudaContext {
    /// Dropped before the buffers they point at.
    plans: HashMap<GraphKey, Prepared>,
    dev: Arc<dyn Device>,
    model: Arc<Model>,
    kv: KvType,
    n_ctx: usize,
    weights: Registry,
    kc: Vec<DevBuf>,
    vc: Vec<DevBuf>,
    kv_bytes: usize,
    step: DevBuf,
    graphs: bool,
}

/// Grid limit per dimension (y and z; x takes more, the schedule folds into x and y).
const MAX_GRID: u32 = 65_535;

impl CudaContext {
    /// `graphs`: capture decode steps as CUDA graphs (`BackendOptions::cuda_graphs`).
    pub fn new(
        dev: Arc<dyn Device>,
        model: &Arc<Model>,
        n_ctx: usize,
        kv: KvType,
        graphs: bool,
        progress: Option<&Progress>,
    ) -> Result<CudaContext> {
        let l = KvLayout::new(model, n_ctx, kv)?;
        let (kb, vb) = (l.k_layer_bytes(), l.v_layer_bytes());
        let (mut kc, mut vc) = (Vec::new(), Vec::new());
        for _ in 0..l.n_layer {
            kc.push(dev.alloc(kb).map_err(err)?);
            vc.push(dev.alloc(vb).map_err(err)?);
        }
        let weights = Registry::upload(dev.as_ref(), model, progress).map_err(err)?;
        let step = dev.alloc(16).map_err(err)?;
        Ok(CudaContext {
            plans: HashMap::new(),
            dev,
            model: model.clone(),
            kv,
            n_ctx,
            weights,
            kc,
            vc,
            kv_bytes: l.bytes(),
            step,
            graphs,
        })
    }

    fn plan(&self, g: &Graph) -> std::result::Result<Prepared, String> {
        let dev = self.dev.as_ref();
        let s = schedule::schedule(g, &|name| self.weights.layout(name), self.kv, false, MAX_GRID)?;
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
        let argmax_out = dev.alloc(4)?;
        let addr = |r: &Res| -> std::result::Result<u64, String> {
            Ok(match r {
                Res::Step => self.step.ptr,
                Res::Ids => ids.ptr,
                Res::Act(b) => acts[*b].ptr,
                Res::Weight(w, _) => self
                    .weights
                    .ptr(&w.name)
                    .ok_or_else(|| format!("{} is not resident", w.name))?,
                Res::RopeTable(i) => ropes[*i].1.ptr,
                Res::Kc(l) => self.kc.get(*l).ok_or_else(|| format!("no KV cache for layer {l}"))?.ptr,
                Res::Vc(l) => self.vc.get(*l).ok_or_else(|| format!("no KV cache for layer {l}"))?.ptr,
                Res::Logits => acts[s.result].ptr,
                Res::ArgmaxOut => argmax_out.ptr,
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
            Ok(Item::Launch {
                func: dev.function(&l.variant)?,
                grid: l.groups,
                block: l.variant.kernel.threads(),
                params,
            })
        };
        let mut items = Vec::new();
        for st in &s.stages {
            match st {
                Stage::Compute { launches, .. } => {
                    for l in launches {
                        items.push(launch(l)?);
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
        let argmax = launch(&s.argmax)?;
        Ok(Prepared {
            graph: None,
            items,
            argmax,
            runs: 0,
            result: acts[s.result].ptr,
            result_bytes: s.result_bytes as usize,
            acts,
            node_buf: s.node_buf.clone(),
            ids,
            ropes,
            argmax_out,
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

    /// One forward; returns the logits rows, or the argmax id's 4 bytes when `argmax`.
    fn run(&mut self, graph: &Graph, tokens: &[u32], pos0: usize, argmax: bool) -> Result<Vec<u8>> {
        crate::backend::check_forward(graph, tokens, pos0, self.n_ctx, self.model.hparams.n_vocab)?;
        let key = graph.key;
        if !self.plans.contains_key(&key) {
            let p = self.plan(graph).map_err(err)?;
            self.plans.insert(key, p);
        }
        let dev = self.dev.clone();
        let dev = dev.as_ref();
        let n = tokens.len();
        let step = self.step.ptr;
        let graphs = self.graphs;
        let plan = self.plans.get_mut(&key).ok_or_else(|| err("no plan"))?;
        let mut go = || -> std::result::Result<Vec<u8>, String> {
            dev.write(step, bytemuck::cast_slice(&[pos0 as u32, n as u32, 0, 0]))?;
            dev.write(plan.ids.ptr, bytemuck::cast_slice(tokens))?;
            for (rope, buf) in &plan.ropes {
                dev.write(buf.ptr, bytemuck::cast_slice(&rope_table(rope, pos0, n)))?;
            }
            // Decode shapes repeat every step: from the second run on, one graph launch.
            if graphs && plan.graph.is_none() && plan.runs >= 1 && n == 1 {
                let items = &plan.items;
                plan.graph = dev.capture(&mut || Self::submit(dev, items))?;
                if plan.graph.is_none() {
                    // Executed directly: the device has no graphs.
                    plan.runs += 1;
                    return finish(dev, plan, argmax);
                }
            }
            match &plan.graph {
                Some(g) => g.replay()?,
                None => Self::submit(dev, &plan.items)?,
            }
            plan.runs += 1;
            finish(dev, plan, argmax)
        };
        go().map_err(err)
    }
}

/// The readback after a forward's work has been submitted.
fn finish(dev: &dyn Device, plan: &Prepared, argmax: bool) -> std::result::Result<Vec<u8>, String> {
    if argmax {
        CudaContext::submit(dev, std::slice::from_ref(&plan.argmax))?;
        let mut b = vec![0u8; 4];
        dev.read(plan.argmax_out.ptr, &mut b)?;
        Ok(b)
    } else {
        let mut b = vec![0u8; plan.result_bytes];
        dev.read(plan.result, &mut b)?;
        Ok(b)
    }
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

    fn forward(&mut self, graph: &Graph, tokens: &[u32], pos0: usize, out: &mut Vec<f32>) -> Result<()> {
        let bytes = self.run(graph, tokens, pos0, false)?;
        crate::backend::f32s_into(&bytes, out);
        Ok(())
    }

    fn forward_argmax(&mut self, graph: &Graph, tokens: &[u32], pos0: usize) -> Result<u32> {
        let b = self.run(graph, tokens, pos0, true)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn n_ctx(&self) -> usize {
        self.n_ctx
    }

    fn kv_bytes(&self) -> usize {
        self.kv_bytes
    }

    fn resident_bytes(&self) -> u64 {
        self.weights.resident
    }
}
