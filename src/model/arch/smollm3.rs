//! SmolLM3: the Llama graph with NoPE layers — layer il skips RoPE when (il + 1) % 4 == 0,
//! hard-coded in llama.cpp (`n_no_rope_layer_step`, no GGUF key). NORM RoPE (permuted Q/K).
//! llama.cpp: `src/models/smollm3.cpp`.

use crate::error::Result;
use crate::model::graph::{AttnOpts, Builder, FfnAct, Graph};
use crate::model::hparams::{read_common, HParams, Keys, RopeMode, Weights};

/// llama.cpp's `n_no_rope_layer_step` for SmolLM3 (HF `no_rope_layer_interval`).
pub const NO_ROPE_LAYER_STEP: usize = 4;

pub fn hparams(keys: &Keys, tensors: &Weights) -> Result<HParams> {
    let mut hp = read_common(keys, tensors, RopeMode::Norm)?;
    hp.nope_layers = (0..hp.n_layer).map(|il| (il + 1) % NO_ROPE_LAYER_STEP == 0).collect();
    Ok(hp)
}

pub fn build(b: Builder) -> Graph {
    b.pre_norm_decoder(AttnOpts::default(), FfnAct::Silu)
}
