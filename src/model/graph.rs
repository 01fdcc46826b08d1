//! The graph IR: a small closed set of ops over f32 activations `[rows, width]`. Nodes name the
//! weights they read (canonical GGUF names); backends look the names up among the weights they
//! uploaded.
//! Architectures build graphs from the shared blocks at the bottom of this file.

use std::borrow::Cow;

use serde::Serialize;

use super::hparams::{HParams, Rope};

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

/// Builds a graph node by node; the shared blocks below are what architecture files call.
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

    // --- shared blocks (llama.cpp's build_norm / build_attn / build_ffn) ---------------------

    pub fn embed(&mut self) -> NodeId {
        let e = self.push(
            "inp_embd",
            Op::GetRows {
                weight: "token_embd.weight".into(),
            },
            self.hp.n_embd,
        );
        match self.hp.embd_scale {
            Some(s) => self.push("inp_scaled", Op::Scale { x: e, s }, self.hp.n_embd),
            None => e,
        }
    }

    pub fn norm(&mut self, x: NodeId, weight: &str, name: &str) -> NodeId {
        let w = self.width(x);
        self.push(
            name,
            Op::RmsNorm {
                x,
                weight: weight.into(),
                eps: self.hp.rms_eps,
            },
            w,
        )
    }

    pub fn matmul(&mut self, x: NodeId, weight: &str, out: usize, name: &str) -> NodeId {
        self.push(
            name,
            Op::Matmul {
                x,
                weight: weight.into(),
            },
            out,
        )
    }

    pub fn add(&mut self, a: NodeId, b: NodeId, name: &str) -> NodeId {
        let w = self.width(a);
        self.push(name, Op::Add { a, b }, w)
    }

    /// Q/K/V projections (+ optional biases and per-head norms), RoPE, attention, output proj.
    pub fn attention(&mut self, il: usize, x: NodeId, opts: AttnOpts) -> NodeId {
        let hp = self.hp;
        let p = format!("blk.{il}");
        let mut q = self.matmul(x, &format!("{p}.attn_q.weight"), hp.n_embd_q(), &format!("{p}.attn_q"));
        let mut k = self.matmul(x, &format!("{p}.attn_k.weight"), hp.n_embd_k(), &format!("{p}.attn_k"));
        let mut v = self.matmul(x, &format!("{p}.attn_v.weight"), hp.n_embd_v(), &format!("{p}.attn_v"));
        if opts.qkv_bias {
            q = self.push(
                format!("{p}.attn_q_b"),
                Op::AddBias {
                    x: q,
                    bias: format!("{p}.attn_q.bias"),
                },
                hp.n_embd_q(),
            );
            k = self.push(
                format!("{p}.attn_k_b"),
                Op::AddBias {
                    x: k,
                    bias: format!("{p}.attn_k.bias"),
                },
                hp.n_embd_k(),
            );
            v = self.push(
                format!("{p}.attn_v_b"),
                Op::AddBias {
                    x: v,
                    bias: format!("{p}.attn_v.bias"),
                },
                hp.n_embd_v(),
            );
        }
        if opts.qk_norm_full {
            // OLMo 2: one RMSNorm over the whole projection (all heads), before the head split.
            q = self.norm(q, &format!("{p}.attn_q_norm.weight"), &format!("{p}.attn_q_norm"));
            k = self.norm(k, &format!("{p}.attn_k_norm.weight"), &format!("{p}.attn_k_norm"));
        }
        if opts.qk_norm {
            let (eps, head_dim) = (hp.rms_eps, hp.head_dim);
            q = self.push(
                format!("{p}.attn_q_norm"),
                Op::HeadNorm {
                    x: q,
                    weight: format!("{p}.attn_q_norm.weight"),
                    eps,
                    head_dim,
                },
                hp.n_embd_q(),
            );
            k = self.push(
                format!("{p}.attn_k_norm"),
                Op::HeadNorm {
                    x: k,
                    weight: format!("{p}.attn_k_norm.weight"),
                    eps,
                    head_dim,
                },
                hp.n_embd_k(),
            );
        }
        let swa = hp.is_swa(il);
        let rope = if swa { hp.rope_swa } else { hp.rope };
        if !hp.is_nope(il) {
            q = self.push(
                format!("{p}.attn_q_rope"),
                Op::Rope {
                    x: q,
                    n_heads: hp.n_head,
                    head_dim: hp.head_dim,
                    rope,
                },
                hp.n_embd_q(),
            );
            // The temperature (Mistral 3) scales Q only.
            k = self.push(
                format!("{p}.attn_k_rope"),
                Op::Rope {
                    x: k,
                    n_heads: hp.n_head_kv,
                    head_dim: hp.head_dim,
                    rope: Rope { temp: None, ..rope },
                },
                hp.n_embd_k(),
            );
        }
        let mut scale = hp.attn_scale;
        if opts.scale_q {
            q = self.push(
                format!("{p}.attn_q_scaled"),
                Op::Scale { x: q, s: scale },
                hp.n_embd_q(),
            );
            scale = 1.0;
        }
        let attn = Op::Attention {
            q,
            k,
            v,
            attn: Attn {
                layer: il,
                n_head: hp.n_head,
                n_head_kv: hp.n_head_kv,
                head_dim: hp.head_dim,
                head_dim_v: hp.head_dim_v,
                scale,
                window: if swa { hp.sliding_window } else { None },
                softcap: hp.attn_softcap,
                flash: self.key.flash,
                sinks: opts.sinks,
                kv_from: None,
                causal: true,
            },
        };
        let a = self.push(format!("{p}.attn"), attn, hp.n_head * hp.head_dim_v);
        let out = self.matmul(
            a,
            &format!("{p}.attn_output.weight"),
            hp.n_embd,
            &format!("{p}.attn_out"),
        );
        if !opts.out_bias {
            return out;
        }
        self.push(
            format!("{p}.attn_out_b"),
            Op::AddBias {
                x: out,
                bias: format!("{p}.attn_output.bias"),
            },
            hp.n_embd,
        )
    }

    /// Gated FFN: down(act(gate(x)) * up(x)).
    pub fn ffn(&mut self, il: usize, x: NodeId, act: FfnAct) -> NodeId {
        let hp = self.hp;
        let p = format!("blk.{il}");
        let gate = self.matmul(x, &format!("{p}.ffn_gate.weight"), hp.n_ff, &format!("{p}.ffn_gate"));
        let up = self.matmul(x, &format!("{p}.ffn_up.weight"), hp.n_ff, &format!("{p}.ffn_up"));
        let h = match act {
            FfnAct::Silu => self.push(format!("{p}.ffn_swiglu"), Op::Swiglu { gate, up }, hp.n_ff),
            FfnAct::GeluTanh => self.push(format!("{p}.ffn_geglu"), Op::Geglu { gate, up }, hp.n_ff),
        };
        self.matmul(h, &format!("{p}.ffn_down.weight"), hp.n_embd, &format!("{p}.ffn_out"))
    }

    /// The pre-norm decoder of the Llama family: per layer x + attn(norm(x)), then
    /// x + ffn(norm(x)); then the head.
    pub fn pre_norm_decoder(self, opts: AttnOpts, act: FfnAct) -> Graph {
        self.pre_norm_decoder_with(opts, |b, il, h| b.ffn(il, h, act))
    }

    /// The pre-norm decoder with the feed-forward block `ffn(builder, layer, normed x)`
    /// (a mixture of experts, a dense FFN plus a shared expert, …).
    pub fn pre_norm_decoder_with(
        mut self,
        opts: AttnOpts,
        mut ffn: impl FnMut(&mut Builder<'a>, usize, NodeId) -> NodeId,
    ) -> Graph {
        let mut x = self.embed();
        for il in 0..self.hp.n_layer {
            let h = self.norm(x, &format!("blk.{il}.attn_norm.weight"), &format!("blk.{il}.attn_norm"));
            let a = self.attention(il, h, opts);
            let a = self.residual_scaled(a, &format!("blk.{il}.attn_scaled"));
            x = self.add(x, a, &format!("blk.{il}.attn_res"));
            x = self.with_ffn(x, |b, x| {
                let h = b.norm(x, &format!("blk.{il}.ffn_norm.weight"), &format!("blk.{il}.ffn_norm"));
                let f = ffn(b, il, h);
                let f = b.residual_scaled(f, &format!("blk.{il}.ffn_scaled"));
                b.add(x, f, &format!("blk.{il}.ffn_res"))
            });
        }
        self.head(x)
    }

    /// A layer's feed-forward residual block `block(builder, x) → x'`, or x itself when the
    /// model's FFNs are dropped (`HParams::drop_ffn`): every architecture builds its FFN
    /// blocks through this, so an attention-only graph names no FFN weight.
    pub fn with_ffn(&mut self, x: NodeId, block: impl FnOnce(&mut Self, NodeId) -> NodeId) -> NodeId {
        if self.hp.drop_ffn {
            x
        } else {
            block(self, x)
        }
    }

    /// A mixture of experts (llama.cpp's `build_moe_ffn`): router logits (+ bias), top-k
    /// routing, the chosen experts' gated FFNs (+ expert biases) and their weighted sum.
    pub fn moe_ffn(&mut self, il: usize, x: NodeId, opts: MoeOpts) -> NodeId {
        let hp = self.hp;
        let p = format!("blk.{il}");
        let (k, n_ff) = (hp.n_expert_used, hp.n_ff_exp);
        let mut logits = self.matmul(
            x,
            &format!("{p}.ffn_gate_inp.weight"),
            hp.n_expert,
            &format!("{p}.ffn_moe_logits"),
        );
        if opts.biases {
            logits = self.push(
                format!("{p}.ffn_moe_logits_b"),
                Op::AddBias {
                    x: logits,
                    bias: format!("{p}.ffn_gate_inp.bias"),
                },
                hp.n_expert,
            );
        }
        let route = self.push(
            format!("{p}.ffn_moe_route"),
            Op::MoeRoute {
                logits,
                k,
                gating: opts.gating,
                norm: opts.norm,
            },
            2 * k,
        );
        let expert = |b: &mut Self, x: NodeId, name: &str, out: usize| {
            let y = b.push(
                format!("{p}.ffn_moe_{name}"),
                Op::MatmulId {
                    x,
                    route,
                    weight: format!("{p}.ffn_{name}_exps.weight"),
                },
                k * out,
            );
            if !opts.biases {
                return y;
            }
            b.push(
                format!("{p}.ffn_moe_{name}_b"),
                Op::AddBiasId {
                    x: y,
                    route,
                    bias: format!("{p}.ffn_{name}_exps.bias"),
                },
                k * out,
            )
        };
        let up = expert(self, x, "up", n_ff);
        let gate = expert(self, x, "gate", n_ff);
        let h = match opts.act {
            MoeAct::Silu => self.push(format!("{p}.ffn_moe_swiglu"), Op::Swiglu { gate, up }, k * n_ff),
            MoeAct::SwigluOai { alpha, limit } => self.push(
                format!("{p}.ffn_moe_swiglu_oai"),
                Op::SwigluOai { gate, up, alpha, limit },
                k * n_ff,
            ),
        };
        let down = expert(self, h, "down", hp.n_embd);
        self.push(format!("{p}.ffn_moe_out"), Op::MoeSum { x: down, route }, hp.n_embd)
    }

    /// The shared expert of Qwen MoE models: a dense gated FFN (`ffn_*_shexp`) scaled by
    /// σ(`ffn_gate_inp_shexp` · x).
    pub fn shared_expert(&mut self, il: usize, x: NodeId) -> NodeId {
        let hp = self.hp;
        let p = format!("blk.{il}");
        let n_ff = hp.n_ff_shexp;
        let g = self.matmul(
            x,
            &format!("{p}.ffn_gate_inp_shexp.weight"),
            1,
            &format!("{p}.ffn_shexp_gate_inp"),
        );
        let gate = self.matmul(
            x,
            &format!("{p}.ffn_gate_shexp.weight"),
            n_ff,
            &format!("{p}.ffn_shexp_gate"),
        );
        let up = self.matmul(
            x,
            &format!("{p}.ffn_up_shexp.weight"),
            n_ff,
            &format!("{p}.ffn_shexp_up"),
        );
        let h = self.push(format!("{p}.ffn_shexp_swiglu"), Op::Swiglu { gate, up }, n_ff);
        let f = self.matmul(
            h,
            &format!("{p}.ffn_down_shexp.weight"),
            hp.n_embd,
            &format!("{p}.ffn_shexp"),
        );
        self.push(
            format!("{p}.ffn_shexp_out"),
            Op::SigmoidGate { x: f, gate: g },
            hp.n_embd,
        )
    }

    /// A branch output times `residual_scale` where the model has one (Granite), else itself.
    pub fn residual_scaled(&mut self, x: NodeId, name: &str) -> NodeId {
        match self.hp.residual_scale {
            Some(s) => {
                let w = self.width(x);
                self.push(name, Op::Scale { x, s }, w)
            }
            None => x,
        }
    }

    /// The decoder with norms after each branch (GLM-4, OLMo 2): per layer
    /// x + post_attention_norm(attn(pre(x))), then x + post_ffw_norm(ffn(ffn_norm(x))), where
    /// `pre` is `attn_norm` / `ffn_norm` with `pre_norms`, the identity without (OLMo 2).
    pub fn post_norm_decoder(mut self, opts: AttnOpts, act: FfnAct, pre_norms: bool) -> Graph {
        let mut x = self.embed();
        for il in 0..self.hp.n_layer {
            let p = format!("blk.{il}");
            let h = if pre_norms {
                self.norm(x, &format!("{p}.attn_norm.weight"), &format!("{p}.attn_norm"))
            } else {
                x
            };
            let a = self.attention(il, h, opts);
            let a = self.norm(
                a,
                &format!("{p}.post_attention_norm.weight"),
                &format!("{p}.attn_post_norm"),
            );
            x = self.add(x, a, &format!("{p}.attn_res"));
            x = self.with_ffn(x, |b, x| {
                let h = if pre_norms {
                    b.norm(x, &format!("{p}.ffn_norm.weight"), &format!("{p}.ffn_norm"))
                } else {
                    x
                };
                let f = b.ffn(il, h, act);
                let f = b.norm(f, &format!("{p}.post_ffw_norm.weight"), &format!("{p}.ffn_post_norm"));
                b.add(x, f, &format!("{p}.ffn_res"))
            });
        }
        self.head(x)
    }

    /// Keeps the output rows, final norm, LM head (tied to the embedding when there is no
    /// `output.weight`), optional final soft-capping. An embedding model (`HParams::pooling`:
    /// Qwen3-Embedding's last-token pooling) ends at the final norm, every token's hidden state.
    pub fn head(mut self, x: NodeId) -> Graph {
        let hp = self.hp;
        let x = self.push("out_rows", Op::Output { x }, hp.n_embd);
        let x = self.norm(x, "output_norm.weight", "result_norm");
        if hp.pooling.is_some() {
            return self.finish(x);
        }
        let w = if hp.tied_output {
            "token_embd.weight"
        } else {
            "output.weight"
        };
        let mut y = self.matmul(x, w, hp.n_vocab, "result_output");
        if let Some(d) = hp.logit_scale {
            // llama.cpp's granite graph: ggml_scale(logits, 1 / logit_scale).
            y = self.push("result_scaled", Op::Scale { x: y, s: 1.0 / d }, hp.n_vocab);
        }
        if let Some(cap) = hp.final_softcap {
            y = self.push("result_softcap", Op::Softcap { x: y, cap }, hp.n_vocab);
        }
        self.finish(y)
    }
}

#[derive(Clone, Copy, Default)]
pub struct AttnOpts {
    pub qkv_bias: bool,
    pub qk_norm: bool,
    /// Scale Q before attention (attention scale 1), as llama.cpp's Gemma 3 graph does: the
    /// same product, but it is Q·scale that rounds to an f16 query, tiny values included.
    pub scale_q: bool,
    /// Per-head attention sinks (`blk.N.attn_sinks.weight`, gpt-oss).
    pub sinks: bool,
    /// A bias on the output projection (`attn_output.bias`, gpt-oss).
    pub out_bias: bool,
    /// RMSNorm over the whole Q and K projections (`attn_q_norm` `[n_head · head_dim]`),
    /// not per head (OLMo 2).
    pub qk_norm_full: bool,
}

/// A mixture-of-experts block's routing and activation, which llama.cpp fixes per
/// architecture rather than reading from the file.
#[derive(Clone, Copy)]
pub struct MoeOpts {
    pub gating: Gating,
    pub norm: bool,
    pub act: MoeAct,
    /// Router and expert biases (`ffn_gate_inp.bias`, `ffn_{gate,up,down}_exps.bias`).
    pub biases: bool,
}

#[derive(Clone, Copy)]
pub enum MoeAct {
    Silu,
    SwigluOai { alpha: f32, limit: f32 },
}

#[derive(Clone, Copy)]
pub enum FfnAct {
    Silu,
    GeluTanh,
}
