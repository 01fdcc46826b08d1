//! Qwen3: per-head RMSNorm on Q and K before RoPE, no projection biases, NeoX RoPE, and a
//! head_dim (`attention.key_length`) that need not be n_embd / n_head.
//! llama.cpp: `src/models/qwen3.cpp`.

use crate::error::Result;
use crate::model::graph::{AttnOpts, Builder, FfnAct, Graph};
use crate::model::hparams::{check_shape, read_common, HParams, Keys, RopeMode, Weights};

pub fn hparams(keys: &Keys, tensors: &Weights) -> Result<HParams> {
    let hp = read_common(keys, tensors, RopeMode::Neox)?;
    if let Some(t) = tensors.get("blk.0.attn_q_norm.weight") {
        check_shape(t, &[hp.head_dim])?;
    }
    Ok(hp)
}

pub fn build(b: Builder) -> Graph {
    b.pre_norm_decoder(
        AttnOpts {
            qkv_bias: false,
            qk_norm: true,
            scale_q: false,
            qk_norm_full: false,
        },
        FfnAct::Silu,
    )
}
