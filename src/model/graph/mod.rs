//! The graph IR: a small closed set of ops over f32 activations `[rows, width]`. Nodes name the
//! weights they read (canonical GGUF names); backends look the names up among the weights they
//! uploaded.
//! Architectures build graphs from the shared blocks (`blocks.rs`: norm, attention, FFN, MoE,
//! the decoders' layer loops) through [`Builder`].

use std::borrow::Cow;

use serde::Serialize;

use super::hparams::{HParams, Rope};

mod blocks;
pub use blocks::{AttnOpts, FfnAct, MoeAct, MoeOpts};

pub type NodeId = usize;

/// ggml's RoPE `freq_factors` (`[n_rot / 2]` f32), read by a [`Rope`] with `freq_factors`.
pub const ROPE_FREQS: &str = "rope_freqs.weight";

#[derive(Clone, Debug, Serialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Op {
    /// Rows of `weight` picked by the step's token ids. → [n_tokens, ne0]
    GetRows {
        weight: String,
    },
    /// y = x · Wᵀ for any qtype W `[ne0 = in, ne1 = out]`.
    Matmul {
        x: NodeId,
        weight: String,
    },
    /// x + b, b a weight vector broadcast over rows (of a `[width, n]` weight, its first row:
    /// BERT's token type 0).
    AddBias {
        x: NodeId,
        bias: String,
    },
    /// RMSNorm over each row, times `weight`.
    RmsNorm {
        x: NodeId,
        weight: String,
        eps: f32,
    },
    /// LayerNorm over each row: (x - mean) / sqrt(var + eps) · `weight` + `bias` (BERT).
    LayerNorm {
        x: NodeId,
        weight: String,
        bias: String,
        eps: f32,
    },
    /// RMSNorm over each head-wide slice of a row, times `weight` (`[head_dim]`).
    HeadNorm {
        x: NodeId,
        weight: String,
        eps: f32,
        head_dim: usize,
    },
    /// RMSNorm over each head-wide slice of a row, with no weight (a bare `ggml_rms_norm`;
    /// Gemma 4's V).
    HeadNormPlain {
        x: NodeId,
        eps: f32,
        head_dim: usize,
    },
    /// x times the single value of `weight` (`[1]` f32; `ggml_mul` broadcasting it; Gemma 4's
    /// `layer_output_scale`).
    ScaleBy {
        x: NodeId,
        weight: String,
    },
    /// Columns `col0 .. col0 + width` of each row of x (a `ggml_view_2d` made contiguous;
    /// one layer's slice of Gemma 4's per-layer inputs).
    Slice {
        x: NodeId,
        col0: usize,
    },
    /// x plus the rows of `weight` picked by the step's positions: learned absolute position
    /// embeddings (BERT's `position_embd`).
    AddPosRows {
        x: NodeId,
        weight: String,
    },
    /// Rotary embedding of `n_heads` heads at the step's positions.
    Rope {
        x: NodeId,
        n_heads: usize,
        head_dim: usize,
        rope: Rope,
    },
    /// Writes K and V into the cache of `layer` at the step's positions, then attends over
    /// positions `[max(0, pos - window + 1), pos]`. → [n_tokens, n_head * head_dim_v]
    Attention {
        q: NodeId,
        k: NodeId,
        v: NodeId,
        #[serde(flatten)]
        attn: Attn,
    },
    Add {
        a: NodeId,
        b: NodeId,
    },
    Mul {
        a: NodeId,
        b: NodeId,
    },
    Scale {
        x: NodeId,
        s: f32,
    },
    /// silu(gate) * up
    Swiglu {
        gate: NodeId,
        up: NodeId,
    },
    /// gelu_tanh(gate) * up
    Geglu {
        gate: NodeId,
        up: NodeId,
    },
    /// gelu(x) = x · Φ(x) with the exact (erf) Φ, as BERT's `hidden_act: "gelu"`.
    Gelu {
        x: NodeId,
    },
    /// cap * tanh(x / cap)
    Softcap {
        x: NodeId,
        cap: f32,
    },
    /// Keeps the last `n_outputs` rows of x.
    Output {
        x: NodeId,
    },
    /// Expert routing (the head of llama.cpp's `build_moe_ffn`): per row of router logits
    /// `[n_expert]`, the `k` chosen experts and their weights. → [n_tokens, 2k]: the k expert
    /// ids (small integers, exact in f32), best first, then their k weights.
    MoeRoute {
        logits: NodeId,
        k: usize,
        gating: Gating,
        /// Weights divided by their sum (clamped below at 2^-14, f16's smallest normal).
        norm: bool,
    },
    /// Expert matmul (ggml's `MUL_MAT_ID`): slot j of row t is `W[e] · x` for the expert
    /// e = route[t][j] of `weight` `[in, out, n_expert]`; x is one row for every slot (width
    /// `in`) or one per slot (width k × in). → [n_tokens, k × out]
    MatmulId {
        x: NodeId,
        route: NodeId,
        weight: String,
    },
    /// Each slot of x plus its expert's row of `bias` `[out, n_expert]` (`ggml_add_id`).
    AddBiasId {
        x: NodeId,
        route: NodeId,
        bias: String,
    },
    /// Σ_j weight_j · x_j over the k slots of each row, in slot order (llama.cpp's chain of
    /// adds over `ffn_moe_weighted`). → [n_tokens, width / k]
    MoeSum {
        x: NodeId,
        route: NodeId,
    },
    /// gpt-oss' clamped SwiGLU (`ggml_swiglu_oai`): g = min(gate, limit), u = clamp(up, ±limit),
    /// g · σ(alpha g) · (u + 1).
    SwigluOai {
        gate: NodeId,
        up: NodeId,
        alpha: f32,
        limit: f32,
    },
    /// x · σ(g) with one g per row (`[n_tokens, 1]`), σ(g) computed as silu(g) / g as
    /// llama.cpp's qwen2moe shared-expert gate does.
    SigmoidGate {
        x: NodeId,
        gate: NodeId,
    },
}

/// How router logits become expert weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Gating {
    /// Softmax over all experts, top-k of the probabilities (Mixtral, Qwen MoE).
    Softmax,
    /// Top-k of the raw logits, softmax over the k chosen (gpt-oss).
    SoftmaxSelected,
}

/// One attention node's heads and numerics, as every backend's attention reads them.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Attn {
    pub layer: usize,
    pub n_head: usize,
    pub n_head_kv: usize,
    pub head_dim: usize,
    pub head_dim_v: usize,
    pub scale: f32,
    pub window: Option<usize>,
    pub softcap: Option<f32>,
    /// llama.cpp's CPU flash-attention numerics (`--flash-attn`): its tiled kernel for
    /// batches of 64 or more, else one pass with an online softmax and the V accumulator
    /// kept in the cache's type.
    pub flash: bool,
    /// One extra logit per head in the softmax denominator, with no value
    /// (`blk.{layer}.attn_sinks.weight`, `[n_head]` f32; gpt-oss): ggml's soft_max sinks.
    pub sinks: bool,
    /// The earlier layer whose K/V cache this one reads, writing none of its own (Gemma 4's
    /// KV-shared layers; its k and v inputs are then unused).
    pub kv_from: Option<usize>,
    /// Each token attends to the positions up to its own; false: to every position of its
    /// sequence in the step (encoders, which take each sequence whole, from position 0).
    pub causal: bool,
}

impl Attn {
    /// Layer `layer`'s plain causal attention: `n_head` query heads over `n_head_kv` KV heads of
    /// `head_dim` (K and V), scale 1/√head_dim, no window, cap, sinks or shared cache.
    pub fn new(layer: usize, n_head: usize, n_head_kv: usize, head_dim: usize) -> Attn {
        Attn {
            layer,
            n_head,
            n_head_kv,
            head_dim,
            head_dim_v: head_dim,
            scale: 1.0 / (head_dim as f32).sqrt(),
            window: None,
            softcap: None,
            flash: false,
            sinks: false,
            kv_from: None,
            causal: true,
        }
    }

    /// The sink weight's name where the layer has sinks.
    pub fn sinks_weight(&self) -> Option<String> {
        self.sinks.then(|| format!("blk.{}.attn_sinks.weight", self.layer))
    }
}

impl Op {
    pub fn kind(&self) -> &'static str {
        match self {
            Op::GetRows { .. } => "get_rows",
            Op::Matmul { .. } => "matmul",
            Op::AddBias { .. } => "add_bias",
            Op::RmsNorm { .. } => "rms_norm",
            Op::LayerNorm { .. } => "layer_norm",
            Op::AddPosRows { .. } => "add_pos_rows",
            Op::Gelu { .. } => "gelu",
            Op::HeadNorm { .. } => "head_norm",
            Op::HeadNormPlain { .. } => "head_norm_plain",
            Op::Slice { .. } => "slice",
            Op::ScaleBy { .. } => "scale_by",
            Op::Rope { .. } => "rope",
            Op::Attention { .. } => "attention",
            Op::Add { .. } => "add",
            Op::Mul { .. } => "mul",
            Op::Scale { .. } => "scale",
            Op::Swiglu { .. } => "swiglu",
            Op::Geglu { .. } => "geglu",
            Op::Softcap { .. } => "softcap",
            Op::Output { .. } => "output",
            Op::MoeRoute { .. } => "moe_route",
            Op::MatmulId { .. } => "matmul_id",
            Op::AddBiasId { .. } => "add_bias_id",
            Op::MoeSum { .. } => "moe_sum",
            Op::SwigluOai { .. } => "swiglu_oai",
            Op::SigmoidGate { .. } => "sigmoid_gate",
        }
    }

    pub fn inputs(&self) -> Vec<NodeId> {
        match *self {
            Op::GetRows { .. } => vec![],
            Op::Matmul { x, .. }
            | Op::AddBias { x, .. }
            | Op::RmsNorm { x, .. }
            | Op::LayerNorm { x, .. }
            | Op::AddPosRows { x, .. }
            | Op::Gelu { x }
            | Op::HeadNorm { x, .. }
            | Op::HeadNormPlain { x, .. }
            | Op::Slice { x, .. }
            | Op::ScaleBy { x, .. }
            | Op::Rope { x, .. }
            | Op::Scale { x, .. }
            | Op::Softcap { x, .. }
            | Op::Output { x } => vec![x],
            Op::MoeRoute { logits, .. } => vec![logits],
            Op::Attention { q, k, v, .. } => vec![q, k, v],
            Op::Add { a, b } | Op::Mul { a, b } => vec![a, b],
            Op::Swiglu { gate, up } | Op::Geglu { gate, up } | Op::SwigluOai { gate, up, .. } => vec![gate, up],
            Op::MatmulId { x, route, .. } | Op::AddBiasId { x, route, .. } | Op::MoeSum { x, route } => {
                vec![x, route]
            }
            Op::SigmoidGate { x, gate } => vec![x, gate],
        }
    }

    /// The weights this op reads (borrowed names, or derived ones such as a layer's sinks).
    pub fn weights(&self) -> Vec<Cow<'_, str>> {
        match self {
            Op::GetRows { weight }
            | Op::Matmul { weight, .. }
            | Op::RmsNorm { weight, .. }
            | Op::HeadNorm { weight, .. }
            | Op::ScaleBy { weight, .. }
            | Op::AddPosRows { weight, .. }
            | Op::MatmulId { weight, .. } => {
                vec![weight.into()]
            }
            Op::LayerNorm { weight, bias, .. } => vec![weight.into(), bias.into()],
            Op::AddBias { bias, .. } | Op::AddBiasId { bias, .. } => vec![bias.into()],
            Op::Rope { rope, .. } if rope.freq_factors => vec![ROPE_FREQS.into()],
            Op::Attention { attn, .. } => attn.sinks_weight().map(Cow::Owned).into_iter().collect(),
            _ => vec![],
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Node {
    /// `blk.3.attn_q`, `result_output`, …: stable across backends, for dumps and traces.
    pub name: String,
    #[serde(flatten)]
    pub op: Op,
    /// Output row width.
    pub width: usize,
    /// Output rows: n_tokens, or n_outputs after the Output node.
    pub rows: usize,
}

/// Everything a graph depends on besides the model: it is built from a key, and every cache of
/// graphs or of their compiled plans (session, CPU, wgpu, CUDA) is keyed by it, so an option
/// that changes a graph can never hit a plan compiled without it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct GraphKey {
    /// Input tokens per forward.
    pub n_tokens: usize,
    /// Logit rows: the last `n_outputs` tokens' (1 ..= n_tokens).
    pub n_outputs: usize,
    /// llama.cpp's CPU flash-attention numerics in every attention node (`--flash-attn`).
    pub flash: bool,
    /// A node whose value outlives the forward, so it can be read back afterwards
    /// (`Context::read_node`, `--trace`); its buffer is never reused within the graph.
    pub keep: Option<NodeId>,
}

impl GraphKey {
    /// `n_tokens` inputs with logits for the last `n_outputs`, plain attention.
    pub fn new(n_tokens: usize, n_outputs: usize) -> GraphKey {
        GraphKey {
            n_tokens,
            n_outputs: n_outputs.clamp(1, n_tokens.max(1)),
            flash: false,
            keep: None,
        }
    }

    pub fn flash(self, on: bool) -> GraphKey {
        GraphKey { flash: on, ..self }
    }

    pub fn keep(self, node: Option<NodeId>) -> GraphKey {
        GraphKey { keep: node, ..self }
    }
}

/// A graph for one key: `key.n_tokens` inputs, logits for the last `key.n_outputs` of them.
#[derive(Clone, Debug, Serialize)]
pub struct Graph {
    pub key: GraphKey,
    pub nodes: Vec<Node>,
    /// The node holding the logits `[n_outputs, n_vocab]`.
    pub result: NodeId,
}

impl Graph {
    /// Whether some attention of the graph is not causal (an encoder's): the GPU step then
    /// carries each token's last attended position (`Step::words`).
    pub fn bidirectional(&self) -> bool {
        self.nodes
            .iter()
            .any(|n| matches!(n.op, Op::Attention { attn, .. } if !attn.causal))
    }

    pub fn to_dot(&self) -> String {
        let mut s = String::from("digraph minfer {\n  node [shape=box, fontname=monospace];\n");
        for (i, n) in self.nodes.iter().enumerate() {
            let w = n.op.weights();
            let extra = if w.is_empty() {
                String::new()
            } else {
                format!("\\n{}", w.join(", "))
            };
            s.push_str(&format!(
                "  n{i} [label=\"{}\\n{} [{}x{}]{}\"];\n",
                n.name,
                n.op.kind(),
                n.rows,
                n.width,
                extra
            ));
            for j in n.op.inputs() {
                s.push_str(&format!("  n{j} -> n{i};\n"));
            }
        }
        s.push_str("}\n");
        s
    }
}

/// Builds a graph node by node; the shared blocks (`blocks.rs`) are what architecture files call.
pub struct Builder<'a> {
    pub hp: &'a HParams,
    nodes: Vec<Node>,
    key: GraphKey,
    rows: usize,
}

impl<'a> Builder<'a> {
    pub fn new(hp: &'a HParams, key: GraphKey) -> Self {
        let key = GraphKey::new(key.n_tokens, key.n_outputs)
            .flash(key.flash)
            .keep(key.keep);
        Builder {
            hp,
            nodes: Vec::new(),
            key,
            rows: key.n_tokens,
        }
    }

    pub fn push(&mut self, name: impl Into<String>, op: Op, width: usize) -> NodeId {
        if let Op::Output { .. } = op {
            self.rows = self.key.n_outputs;
        }
        self.nodes.push(Node {
            name: name.into(),
            op,
            width,
            rows: self.rows,
        });
        self.nodes.len() - 1
    }

    pub fn width(&self, id: NodeId) -> usize {
        self.nodes[id].width
    }

    /// Whether graphs are built with llama.cpp's flash-attention numerics.
    pub fn flash(&self) -> bool {
        self.key.flash
    }

    pub fn finish(self, result: NodeId) -> Graph {
        Graph {
            key: self.key,
            nodes: self.nodes,
            result,
        }
    }
}
