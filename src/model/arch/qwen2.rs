//! Qwen2: the Llama graph with biases on the Q/K/V projections and NeoX RoPE.
//! llama.cpp: `src/models/qwen2.cpp`.

use crate::error::Result;
use crate::model::graph::{AttnOpts, Builder, FfnAct, Graph};
use crate::model::hparams::{read_common, HParams, Keys, RopeMode, Weights};

pub fn hparams(keys: &Keys, tensors: &Weights) -> Result<HParams> {
    read_common(keys, tensors, RopeMode::Neox)
}

pub fn build(b: Builder) -> Graph {
    b.pre_norm_decoder(
        AttnOpts {
            qkv_bias: true,
            qk_norm: false,
            scale_q: false,
            qk_norm_full: false,
        },
        FfnAct::Silu,
    )
}
