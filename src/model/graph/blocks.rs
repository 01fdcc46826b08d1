//! The shared blocks architectures build their graphs from: llama.cpp's build_norm /
//! build_attn / build_ffn, the MoE FFN, and the pre- and post-norm decoder layer loops.

use super::*;

impl<'a> Builder<'a> {
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
