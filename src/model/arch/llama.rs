//! Llama (and the many models that reuse its graph: SmolLM, Mistral, TinyLlama …).
//! llama.cpp: `src/models/llama.cpp`. RoPE pairs adjacent dims (the converter permuted Q/K).

use crate::error::Result;
use crate::model::graph::{AttnOpts, Builder, FfnAct, Graph};
use crate::model::hparams::{read_common, HParams, Keys, RopeMode, Weights};

pub fn hparams(keys: &Keys, tensors: &Weights) -> Result<HParams> {
    read_common(keys, tensors, RopeMode::Norm)
}

pub fn build(b: Builder) -> Graph {
    b.pre_norm_decoder(AttnOpts::default(), FfnAct::Silu)
}
