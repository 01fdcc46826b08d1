//! GLM-4 (dense): Q/K/V biases, partial NORM RoPE (adjacent pairs, the first
//! `rope.dimension_count` dims of each head; HF GLM rotates interleaved pairs, so nothing is
//! permuted), a fused gate/up `ffn_up` (split at load, [`crate::model::fused`]) and a norm
//! after each branch as well as before it. llama.cpp: `src/models/glm4.cpp`.

use crate::error::Result;
use crate::model::fused;
use crate::model::graph::{AttnOpts, Builder, FfnAct, Graph};
use crate::model::hparams::{read_common, HParams, Keys, RopeMode, Weights};

pub fn prepare_weights(keys: &Keys, weights: &mut Weights) -> Result<()> {
    fused::split_gate_up(keys, weights)
}

pub fn hparams(keys: &Keys, tensors: &Weights) -> Result<HParams> {
    read_common(keys, tensors, RopeMode::Norm)
}

pub fn build(b: Builder) -> Graph {
    b.post_norm_decoder(
        AttnOpts {
            qkv_bias: true,
            ..AttnOpts::default()
        },
        FfnAct::Silu,
        true,
    )
}
