//! Llama (and the many models that reuse its graph: SmolLM, Mistral, TinyLlama …).
//! llama.cpp: `src/models/llama.cpp`. RoPE pairs adjacent dims (the converter permuted Q/K).

use crate::error::Result;
use crate::model::graph::{AttnOpts, Builder, FfnAct, Graph};
use crate::model::hparams::{read_common, HParams, Keys, RopeMode, Weights};

pub fn hparams(keys: &Keys, tensors: &Weights) -> Result<HParams> {
    read_common(keys, tensors, RopeMode::Norm)
}

pub fn build(mut b: Builder) -> Graph {
    let mut x = b.embed();
    for il in 0..b.hp.n_layer {
        let h = b.norm(x, &format!("blk.{il}.attn_norm.weight"), &format!("blk.{il}.attn_norm"));
        let a = b.attention(il, h, AttnOpts::default());
        x = b.add(x, a, &format!("blk.{il}.attn_res"));
        let h = b.norm(x, &format!("blk.{il}.ffn_norm.weight"), &format!("blk.{il}.ffn_norm"));
        let f = b.ffn(il, h, FfnAct::Silu);
        x = b.add(x, f, &format!("blk.{il}.ffn_res"));
    }
    b.head(x)
}
