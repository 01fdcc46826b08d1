//! Phi-3: the Llama pre-norm graph with a fused `attn_qkv` and a fused gate/up `ffn_up`
//! (split at load into views, [`crate::model::fused`]), NeoX RoPE, and Q scaled by
//! 1/sqrt(head_dim) before an attention of scale 1. llama.cpp: `src/models/phi3.cpp`.
//! Its sliding window is ignored, as llama.cpp ignores it (`attention.sliding_window`).

use crate::error::{Error, Result};
use crate::model::fused;
use crate::model::graph::{AttnOpts, Builder, FfnAct, Graph};
use crate::model::hparams::{read_common, HParams, Keys, RopeMode, Weights};

pub fn prepare_weights(keys: &Keys, weights: &mut Weights) -> Result<()> {
    fused::split_qkv(keys, weights)?;
    fused::split_gate_up(keys, weights)
}

pub fn hparams(keys: &Keys, tensors: &Weights) -> Result<HParams> {
    // Phi-3 128k's LongRoPE factors change the frequencies; the graph's RoPE has no factors.
    for name in ["rope_factors_long.weight", "rope_factors_short.weight"] {
        if tensors.contains_key(name) {
            return Err(Error::tensor(name, "LongRoPE frequency factors are not supported"));
        }
    }
    read_common(keys, tensors, RopeMode::Neox)
}

pub fn build(b: Builder) -> Graph {
    b.pre_norm_decoder(
        AttnOpts {
            scale_q: true,
            ..AttnOpts::default()
        },
        FfnAct::Silu,
    )
}
