//! OLMo 2: no pre-norms; each branch's output is RMS-normed (`post_attention_norm`,
//! `post_ffw_norm`) before its residual add; Q and K are RMS-normed over the whole projection
//! (all heads together) before the head split; NeoX RoPE; untied head.
//! llama.cpp: `src/models/olmo2.cpp`.

use crate::error::Result;
use crate::model::graph::{AttnOpts, Builder, FfnAct, Graph};
use crate::model::hparams::{check_shape, read_common, HParams, Keys, RopeMode, Weights};

pub fn hparams(keys: &Keys, tensors: &Weights) -> Result<HParams> {
    let hp = read_common(keys, tensors, RopeMode::Neox)?;
    if let Some(t) = tensors.get("blk.0.attn_q_norm.weight") {
        check_shape(t, &[hp.n_embd_q()])?;
    }
    Ok(hp)
}

pub fn build(b: Builder) -> Graph {
    b.post_norm_decoder(
        AttnOpts {
            qk_norm_full: true,
            ..AttnOpts::default()
        },
        FfnAct::Silu,
        false,
    )
}
