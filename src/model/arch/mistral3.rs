//! Mistral 3 / Ministral 3 (GGUF `mistral3`): the Llama graph (NORM RoPE on permuted Q/K rows)
//! with YaRN RoPE and Llama 4's attention temperature, Q *= 1 + beta·ln(1 + floor(pos / n)),
//! n = `rope.scaling.original_context_length`, applied after Q's rotation.
//! llama.cpp: `src/models/mistral3.cpp`.

use crate::error::Result;
use crate::model::graph::{AttnOpts, Builder, FfnAct, Graph};
use crate::model::hparams::{read_attn_temp, read_common, HParams, Keys, RopeMode, Weights};

pub fn hparams(keys: &Keys, tensors: &Weights) -> Result<HParams> {
    let mut hp = read_common(keys, tensors, RopeMode::Norm)?;
    hp.rope.temp = read_attn_temp(keys, &hp)?;
    hp.rope_swa = hp.rope;
    Ok(hp)
}

pub fn build(b: Builder) -> Graph {
    b.pre_norm_decoder(AttnOpts::default(), FfnAct::Silu)
}
