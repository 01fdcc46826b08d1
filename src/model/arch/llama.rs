//! Llama (and the many models that reuse its graph: SmolLM, Mistral, TinyLlama …), and
//! Mixtral, which is the `llama` architecture with `expert_count` set: every FFN a mixture of
//! experts, softmax routing, the chosen weights renormalised.
//! llama.cpp: `src/models/llama.cpp`. RoPE pairs adjacent dims (the converter permuted Q/K).

use crate::error::Result;
use crate::model::graph::{AttnOpts, Builder, FfnAct, Gating, Graph, MoeAct, MoeOpts};
use crate::model::hparams::{read_common, read_moe, HParams, Keys, RopeMode, Weights};

pub fn hparams(keys: &Keys, tensors: &Weights) -> Result<HParams> {
    let mut hp = read_common(keys, tensors, RopeMode::Norm)?;
    if keys.usize_or("expert_count", 0)? > 0 {
        read_moe(keys, tensors, &mut hp)?;
    }
    Ok(hp)
}

pub fn build(b: Builder) -> Graph {
    if b.hp.n_expert == 0 {
        return b.pre_norm_decoder(AttnOpts::default(), FfnAct::Silu);
    }
    let moe = MoeOpts {
        gating: Gating::Softmax,
        norm: true,
        act: MoeAct::Silu,
        biases: false,
    };
    b.pre_norm_decoder_with(AttnOpts::default(), |b, il, h| b.moe_ffn(il, h, moe))
}
