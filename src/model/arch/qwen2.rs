//! Qwen2: the Llama graph with biases on the Q/K/V projections and NeoX RoPE.
//! llama.cpp: `src/models/qwen2.cpp`.

use crate::error::Result;
use crate::model::graph::{AttnOpts, Builder, FfnAct, Graph};
use crate::model::hparams::{read_common, HParams, Keys, RopeMode, Weights};

pub fn hparams(keys: &Keys, tensors: &Weights) -> Result<HParams> {
    read_common(keys, tensors, RopeMode::Neox)
}

pub fn build(mut b: Builder) -> Graph {
    let opts = AttnOpts {
        qkv_bias: true,
        qk_norm: false,
    };
    let mut x = b.embed();
    for il in 0..b.hp.n_layer {
        let h = b.norm(x, &format!("blk.{il}.attn_norm.weight"), &format!("blk.{il}.attn_norm"));
        let a = b.attention(il, h, opts);
        x = b.add(x, a, &format!("blk.{il}.attn_res"));
        let h = b.norm(x, &format!("blk.{il}.ffn_norm.weight"), &format!("blk.{il}.ffn_norm"));
        let f = b.ffn(il, h, FfnAct::Silu);
        x = b.add(x, f, &format!("blk.{il}.ffn_res"));
    }
    b.head(x)
}
