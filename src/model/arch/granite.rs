//! Granite (3.x dense): the Llama graph with four multipliers — embeddings × `embedding_scale`,
//! attention scale `attention.scale` in place of 1/sqrt(head_dim), each attention and FFN
//! output × `residual_scale` before its residual add, logits ÷ `logit_scale`. NORM RoPE (the
//! converter permuted Q/K as for Llama). llama.cpp: `src/models/granite.cpp`, the embedding
//! scale in `llm_graph_context::build_inp_embd`.

use crate::error::{Error, Result};
use crate::model::graph::{AttnOpts, Builder, FfnAct, Graph};
use crate::model::hparams::{read_common, HParams, Keys, RopeMode, Weights};

pub fn hparams(keys: &Keys, tensors: &Weights) -> Result<HParams> {
    let mut hp = read_common(keys, tensors, RopeMode::Norm)?;
    let finite = |key: &str, v: f32| {
        if v.is_finite() {
            Ok(v)
        } else {
            Err(Error::metadata(
                format!("{}.{key}", keys.arch),
                format!("{v} is not finite"),
            ))
        }
    };
    // llama.cpp treats 0 (absent) as "no multiplier" for all but logit_scale, which it requires.
    let nonzero = |key: &str| -> Result<Option<f32>> {
        match keys.f32_opt(key)? {
            Some(v) if v != 0.0 => Ok(Some(finite(key, v)?)),
            _ => Ok(None),
        }
    };
    hp.embd_scale = nonzero("embedding_scale")?;
    hp.residual_scale = nonzero("residual_scale")?;
    if let Some(s) = nonzero("attention.scale")? {
        hp.attn_scale = s;
    }
    let logit = keys
        .f32_opt("logit_scale")?
        .ok_or_else(|| Error::metadata(format!("{}.logit_scale", keys.arch), "missing"))?;
    if logit == 0.0 || !logit.is_finite() {
        return Err(Error::metadata(
            format!("{}.logit_scale", keys.arch),
            format!("{logit} cannot divide the logits"),
        ));
    }
    hp.logit_scale = Some(logit);
    Ok(hp)
}

pub fn build(b: Builder) -> Graph {
    b.pre_norm_decoder(AttnOpts::default(), FfnAct::Silu)
}
