//! Qwen2-MoE (Qwen1.5-MoE): the Qwen2 attention (Q/K/V biases, NeoX RoPE) with every FFN a
//! mixture of experts — softmax routing, weights not renormalised — plus a shared expert
//! gated by σ(`ffn_gate_inp_shexp` · x). llama.cpp: `src/models/qwen2moe.cpp`.

use crate::error::{Error, Result};
use crate::model::graph::{AttnOpts, Builder, Gating, Graph, MoeAct, MoeOpts};
use crate::model::hparams::{read_common, read_moe, HParams, Keys, RopeMode, Weights};

pub fn hparams(keys: &Keys, tensors: &Weights) -> Result<HParams> {
    let mut hp = read_common(keys, tensors, RopeMode::Neox)?;
    read_moe(keys, tensors, &mut hp)?;
    if hp.n_ff_shexp == 0 {
        // llama.cpp falls back to the dense width.
        hp.n_ff_shexp = hp.n_ff;
    }
    if hp.n_ff_shexp == 0 {
        return Err(Error::metadata(
            format!("{}.expert_shared_feed_forward_length", keys.arch),
            "missing, and so is feed_forward_length",
        ));
    }
    Ok(hp)
}

pub fn build(b: Builder) -> Graph {
    let attn = AttnOpts {
        qkv_bias: true,
        qk_norm: false,
        scale_q: false,
        ..Default::default()
    };
    let moe = MoeOpts {
        gating: Gating::Softmax,
        norm: false,
        act: MoeAct::Silu,
        biases: false,
    };
    b.pre_norm_decoder_with(attn, |b, il, h| {
        let routed = b.moe_ffn(il, h, moe);
        let shared = b.shared_expert(il, h);
        b.add(routed, shared, &format!("blk.{il}.ffn_moe_shexp"))
    })
}
