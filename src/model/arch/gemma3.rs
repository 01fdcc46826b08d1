//! Gemma 3 (text): embeddings × sqrt(n_embd), per-head Q/K RMSNorm, post-attention and post-FFN
//! norms, GELU-tanh GLU, sliding-window layers with their own RoPE base, optional final logit
//! soft-capping. llama.cpp: `src/models/gemma3.cpp`, hparams in `llama-model.cpp`.
//! The GGUF converter stores RMSNorm weights as `1 + w`, so the norms here are plain.

use crate::error::{Error, Result};
use crate::model::graph::{AttnOpts, Builder, FfnAct, Graph};
use crate::model::hparams::{check_shape, read_common, HParams, Keys, RopeMode, Weights};

/// llama.cpp's default when `gemma3.attention.sliding_window_pattern` is absent: every 6th
/// layer is global.
const DEFAULT_SWA_PATTERN: usize = 6;
/// llama.cpp hard-codes the local layers' RoPE base for Gemma 3.
const SWA_ROPE_BASE: f32 = 10_000.0;

pub fn hparams(keys: &Keys, tensors: &Weights) -> Result<HParams> {
    let mut hp = read_common(keys, tensors, RopeMode::Neox)?;
    if let Some(t) = tensors.get("blk.0.attn_q_norm.weight") {
        check_shape(t, &[hp.head_dim])?;
    }
    let window = keys.usize_or("attention.sliding_window", 0)?;
    let pattern = keys.usize_or("attention.sliding_window_pattern", DEFAULT_SWA_PATTERN)?;
    if pattern == 0 {
        return Err(Error::metadata(
            "gemma3.attention.sliding_window_pattern",
            "must be ≥ 1",
        ));
    }
    if window > 0 {
        hp.sliding_window = Some(window);
        // llama_hparams::set_swa_pattern: layer il is sliding unless it is the last of its group.
        hp.swa_layers = (0..hp.n_layer).map(|il| il % pattern < pattern - 1).collect();
    }
    hp.rope_swa.base = SWA_ROPE_BASE;
    hp.rope_swa.freq_scale = 1.0;
    hp.embd_scale = Some((hp.n_embd as f32).sqrt());
    hp.final_softcap = keys.f32_opt("final_logit_softcapping")?.filter(|&c| c > 0.0);
    hp.attn_softcap = keys.f32_opt("attn_logit_softcapping")?.filter(|&c| c > 0.0);
    // llama.cpp scales Q by 1/sqrt(head_dim) for every Gemma 3 size but 27B.
    hp.attn_scale = 1.0 / (hp.head_dim as f32).sqrt();
    Ok(hp)
}

pub fn build(mut b: Builder) -> Graph {
    let opts = AttnOpts {
        qkv_bias: false,
        qk_norm: true,
        scale_q: true,
        qk_norm_full: false,
    };
    let mut x = b.embed();
    for il in 0..b.hp.n_layer {
        let p = format!("blk.{il}");
        let h = b.norm(x, &format!("{p}.attn_norm.weight"), &format!("{p}.attn_norm"));
        let a = b.attention(il, h, opts);
        let a = b.norm(
            a,
            &format!("{p}.post_attention_norm.weight"),
            &format!("{p}.attn_post_norm"),
        );
        x = b.add(x, a, &format!("{p}.attn_res"));
        let h = b.norm(x, &format!("{p}.ffn_norm.weight"), &format!("{p}.ffn_norm"));
        let f = b.ffn(il, h, FfnAct::GeluTanh);
        let f = b.norm(f, &format!("{p}.post_ffw_norm.weight"), &format!("{p}.ffn_post_norm"));
        x = b.add(x, f, &format!("{p}.ffn_res"));
    }
    b.head(x)
}
