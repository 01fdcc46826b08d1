//! Qwen3-MoE: the Qwen3 attention (per-head Q/K RMSNorm, NeoX RoPE) with every FFN a mixture
//! of experts: softmax routing, the chosen weights renormalised (llama.cpp renormalises
//! whatever `norm_topk_prob` says). llama.cpp: `src/models/qwen3moe.cpp`.

use crate::error::Result;
use crate::model::graph::{AttnOpts, Builder, Gating, Graph, MoeAct, MoeOpts};
use crate::model::hparams::{check_shape, read_common, read_moe, HParams, Keys, RopeMode, Weights};

pub fn hparams(keys: &Keys, tensors: &Weights) -> Result<HParams> {
    let mut hp = read_common(keys, tensors, RopeMode::Neox)?;
    if let Some(t) = tensors.get("blk.0.attn_q_norm.weight") {
        check_shape(t, &[hp.head_dim])?;
    }
    read_moe(keys, tensors, &mut hp)?;
    Ok(hp)
}

pub fn build(b: Builder) -> Graph {
    let attn = AttnOpts {
        qkv_bias: false,
        qk_norm: true,
        scale_q: false,
        ..Default::default()
    };
    let moe = MoeOpts {
        gating: Gating::Softmax,
        norm: true,
        act: MoeAct::Silu,
        biases: false,
    };
    b.pre_norm_decoder_with(attn, |b, il, h| b.moe_ffn(il, h, moe))
}
