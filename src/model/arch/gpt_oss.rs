//! gpt-oss (OpenAI's open-weight MoE): Q/K/V/O biases, per-head attention sinks, layers
//! alternating sliding-window (even) and full attention with one RoPE (NeoX, YaRN), every FFN a
//! mixture of experts — router and expert biases, top-k of the raw router logits with a softmax
//! over the k chosen, the clamped SwiGLU (alpha 1.702, limit 7, hard-coded in llama.cpp as
//! here) — and `post_attention_norm` as the pre-FFN norm. Experts are MXFP4 in the released
//! files. llama.cpp: `src/models/openai-moe.cpp`.

use crate::error::{Error, Result};
use crate::model::graph::{AttnOpts, Builder, Gating, Graph, MoeAct, MoeOpts};
use crate::model::hparams::{read_common, read_moe, HParams, Keys, RopeMode, Weights};

/// `LLM_FFN_SWIGLU_OAI_MOE`'s constants in llama.cpp (the config's are not read).
const SWIGLU_ALPHA: f32 = 1.702;
const SWIGLU_LIMIT: f32 = 7.0;
/// llama.cpp's swa pattern for gpt-oss: every other layer, the even ones, slides.
const SWA_PATTERN: usize = 2;

pub fn hparams(keys: &Keys, tensors: &Weights) -> Result<HParams> {
    let mut hp = read_common(keys, tensors, RopeMode::Neox)?;
    read_moe(keys, tensors, &mut hp)?;
    let window = keys.usize_or("attention.sliding_window", 0)?;
    if window == 0 {
        return Err(Error::metadata(
            format!("{}.attention.sliding_window", keys.arch),
            "missing or 0 (gpt-oss alternates sliding-window and full layers)",
        ));
    }
    hp.sliding_window = Some(window);
    hp.swa_layers = (0..hp.n_layer).map(|il| il % SWA_PATTERN < SWA_PATTERN - 1).collect();
    if let Some(base) = keys.f32_opt("rope.freq_base_swa")? {
        hp.rope_swa.base = base;
    }
    Ok(hp)
}

pub fn build(mut b: Builder) -> Graph {
    let attn = AttnOpts {
        qkv_bias: true,
        sinks: true,
        out_bias: true,
        ..Default::default()
    };
    let moe = MoeOpts {
        gating: Gating::SoftmaxSelected,
        norm: false,
        act: MoeAct::SwigluOai {
            alpha: SWIGLU_ALPHA,
            limit: SWIGLU_LIMIT,
        },
        biases: true,
    };
    let mut x = b.embed();
    for il in 0..b.hp.n_layer {
        let p = format!("blk.{il}");
        let h = b.norm(x, &format!("{p}.attn_norm.weight"), &format!("{p}.attn_norm"));
        let a = b.attention(il, h, attn);
        x = b.add(x, a, &format!("{p}.attn_res"));
        x = b.with_ffn(x, |b, x| {
            let h = b.norm(x, &format!("{p}.post_attention_norm.weight"), &format!("{p}.ffn_norm"));
            let f = b.moe_ffn(il, h, moe);
            b.add(x, f, &format!("{p}.ffn_res"))
        });
    }
    b.head(x)
}
