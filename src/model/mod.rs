//! A model: the architecture (dispatched once on its name), checked hyperparameters and the
//! weights by canonical name, still raw bytes in the mapped file.

pub(crate) mod arch;
pub(crate) mod fused;
pub(crate) mod graph;
pub(crate) mod hparams;

use std::collections::HashMap;

pub use arch::Arch;
pub use graph::{Attn, Gating, Graph, GraphKey, Node, NodeId, Op};
pub use hparams::{AttnTemp, HParams, Pooling, Rope, RopeMode, Yarn};

use crate::error::{Error, Result};
use crate::gguf::{GgufFile, Metadata};
use crate::tensor::Tensor;

pub struct Model {
    pub arch: Arch,
    pub hparams: HParams,
    pub metadata: Metadata,
    /// Weights by canonical (GGUF) name.
    pub weights: HashMap<String, Tensor>,
    /// Where it came from, for logs (`info`, the startup line).
    pub source: String,
    pub file_bytes: u64,
}

impl Model {
    /// The model of a GGUF file. Opening a MODEL argument of any kind (file, split parts, HF
    /// directory or cache name) is the `load` module's.
    pub fn from_gguf(file: GgufFile, source: String) -> Result<Model> {
        let name = file.architecture()?.to_string();
        let arch = Arch::from_name(&name)?;
        let file_bytes = file.file_bytes();
        let GgufFile { metadata, tensors, .. } = file;
        let mut weights: HashMap<String, Tensor> = tensors.into_iter().map(|t| (t.name.clone(), t)).collect();
        let keys = hparams::Keys {
            md: &metadata,
            arch: &name,
        };
        arch.prepare_weights(&keys, &mut weights)?;
        let hparams = arch.hparams(&keys, &weights)?;
        Model::from_parts(arch, hparams, metadata, weights, source, file_bytes)
    }

    /// A model from any loader: the architecture, its hyperparameters and the weights by
    /// canonical name, checked against the graph as the GGUF path checks them.
    pub fn from_parts(
        arch: Arch,
        hparams: HParams,
        metadata: Metadata,
        weights: HashMap<String, Tensor>,
        source: String,
        file_bytes: u64,
    ) -> Result<Model> {
        let model = Model {
            arch,
            hparams,
            metadata,
            weights,
            source,
            file_bytes,
        };
        model.check_weights(&model.graph(GraphKey::new(1, 1)))?;
        Ok(model)
    }

    /// The graph for `key`: `n_tokens` inputs with logits for the last `n_outputs`, and the
    /// key's options built in (nothing patches a graph after this).
    pub fn graph(&self, key: GraphKey) -> Graph {
        self.arch.build(graph::Builder::new(&self.hparams, key))
    }

    /// This model with its feed-forward blocks (dense FFNs, experts, shared experts, their
    /// norms) left out: attention-only graphs, and only the weights they read, so no backend
    /// registers or uploads the rest. For attention analysis on machines that cannot hold the
    /// FFN weights; the logits are not the model's. Also returns what was left out.
    pub fn without_ffn(&self) -> Result<(Model, Dropped)> {
        let mut hparams = self.hparams.clone();
        hparams.drop_ffn = true;
        let graph = self.arch.build(graph::Builder::new(&hparams, GraphKey::new(1, 1)));
        let used: std::collections::HashSet<String> = graph
            .nodes
            .iter()
            .flat_map(|n| n.op.weights())
            .map(|w| w.into_owned())
            .collect();
        let mut dropped = Dropped::default();
        let mut weights = HashMap::with_capacity(used.len());
        for (name, t) in &self.weights {
            if used.contains(name) {
                weights.insert(name.clone(), t.clone());
            } else {
                dropped.tensors += 1;
                dropped.bytes += t.data.len() as u64;
            }
        }
        let model = Model::from_parts(
            self.arch,
            hparams,
            self.metadata.clone(),
            weights,
            self.source.clone(),
            self.file_bytes,
        )?;
        Ok((model, dropped))
    }

    pub fn weight(&self, name: &str) -> Result<&Tensor> {
        self.weights
            .get(name)
            .ok_or_else(|| Error::MissingTensor(name.to_string()))
    }

    /// Every weight the graph names exists and has the shape its op needs.
    pub fn check_weights(&self, g: &Graph) -> Result<()> {
        for node in &g.nodes {
            let in_width = |id: NodeId| g.nodes[id].width;
            match &node.op {
                Op::GetRows { weight } => {
                    hparams::check_shape(self.weight(weight)?, &[node.width, self.hparams.n_vocab])?
                }
                Op::Matmul { x, weight } => hparams::check_shape(self.weight(weight)?, &[in_width(*x), node.width])?,
                Op::RmsNorm { weight: w, .. } => {
                    let t = self.weight(w)?;
                    hparams::check_shape(t, &[node.width])?;
                    check_float(t)?;
                }
                // A bias row, or rows of which the first is added (BERT's token types).
                Op::AddBias { bias: w, .. } => {
                    let t = self.weight(w)?;
                    if t.shape.len() > 2 || t.row_len() != node.width {
                        return Err(Error::tensor(
                            w,
                            format!("shape {:?} is not [{}] or [{}, n]", t.shape, node.width, node.width),
                        ));
                    }
                    check_float(t)?;
                }
                Op::LayerNorm { weight, bias, .. } => {
                    for w in [weight, bias] {
                        let t = self.weight(w)?;
                        hparams::check_shape(t, &[node.width])?;
                        check_float(t)?;
                    }
                }
                Op::AddPosRows { weight, .. } => {
                    let t = self.weight(weight)?;
                    if t.shape.len() != 2 || t.row_len() != node.width {
                        return Err(Error::tensor(
                            weight,
                            format!("shape {:?} is not [{}, n_positions]", t.shape, node.width),
                        ));
                    }
                }
                Op::MatmulId { x, route, weight } => {
                    let t = self.weight(weight)?;
                    let k = in_width(*route) / 2;
                    let n_in = t.row_len();
                    let n_out = t.shape.get(1).copied().unwrap_or(0) as usize;
                    let per_slot = in_width(*x) == k * n_in && k > 1;
                    if t.shape.len() != 3 || n_out * k != node.width || !(in_width(*x) == n_in || per_slot) {
                        return Err(Error::tensor(
                            weight,
                            format!(
                                "shape {:?} is not [{}, {}, n_expert] experts for {k} slots",
                                t.shape,
                                in_width(*x),
                                node.width / k.max(1)
                            ),
                        ));
                    }
                }
                Op::AddBiasId { route, bias, .. } => {
                    let t = self.weight(bias)?;
                    let k = in_width(*route) / 2;
                    if t.shape.len() != 2 || t.row_len() * k != node.width {
                        return Err(Error::tensor(
                            bias,
                            format!("shape {:?} is not [{}, n_expert]", t.shape, node.width / k.max(1)),
                        ));
                    }
                    check_float(t)?;
                }
                Op::HeadNorm { weight, head_dim, .. } => {
                    let t = self.weight(weight)?;
                    hparams::check_shape(t, &[*head_dim])?;
                    check_float(t)?;
                }
                Op::ScaleBy { weight, .. } => {
                    let t = self.weight(weight)?;
                    hparams::check_shape(t, &[1])?;
                    check_float(t)?;
                }
                // Frequency factors and sinks are read as f32 vectors (ggml requires F32).
                Op::Rope { rope, .. } if rope.freq_factors => {
                    let t = self.weight(graph::ROPE_FREQS)?;
                    hparams::check_shape(t, &[rope.n_rot / 2])?;
                    check_f32(t)?;
                }
                Op::Attention { attn, .. } => {
                    if let Some(w) = attn.sinks_weight() {
                        let t = self.weight(&w)?;
                        hparams::check_shape(t, &[attn.n_head])?;
                        check_f32(t)?;
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Bytes of all weights (what a backend has to host).
    pub fn weight_bytes(&self) -> u64 {
        self.weights.values().map(|t| t.data.len() as u64).sum()
    }

    /// Reads one byte of every page of every weight, so the mapped file is in memory before
    /// the first token instead of being faulted in during it. `progress(done, total)` is
    /// called every few MB (the CLI draws a progress bar with it for large files).
    pub fn prefault(&self, mut progress: impl FnMut(u64, u64)) {
        const PAGE: usize = 4096;
        const REPORT: u64 = 8 << 20;
        let total = self.weight_bytes();
        let (mut done, mut last) = (0u64, 0u64);
        let mut sink = 0u8;
        for t in self.weights.values() {
            let b = t.bytes();
            for i in (0..b.len()).step_by(PAGE) {
                // SAFETY: `i` is in bounds; the volatile read keeps the touch from being elided.
                sink ^= unsafe { std::ptr::read_volatile(b.as_ptr().add(i)) };
            }
            done += b.len() as u64;
            if done - last >= REPORT {
                progress(done, total);
                last = done;
            }
        }
        progress(total, total);
        std::hint::black_box(sink);
    }
}

/// What `Model::without_ffn` left out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Dropped {
    pub tensors: usize,
    pub bytes: u64,
}

/// Norm weights and biases are read as plain floats by every backend.
fn check_float(t: &Tensor) -> Result<()> {
    use crate::quant::QType;
    match t.qtype {
        QType::F32 | QType::F16 | QType::BF16 => Ok(()),
        q => Err(Error::tensor(
            &t.name,
            format!("vector weights must be f32/f16/bf16, found {q}"),
        )),
    }
}

fn check_f32(t: &Tensor) -> Result<()> {
    match t.qtype {
        crate::quant::QType::F32 => Ok(()),
        q => Err(Error::tensor(
            &t.name,
            format!("must be f32 (as ggml reads it), found {q}"),
        )),
    }
}
