//! Hugging Face tensor names → the canonical (GGUF) names the graph uses, in one table.
//!
//! A name first loses the wrapper prefix a multimodal checkpoint puts around its text model
//! (tried in order, the first that yields a known name wins), then maps through `LAYER` /
//! `GLOBAL`. Towers that are not the text model are skipped; any other unknown name is an
//! error, so a checkpoint that does not match its `model_type` is not run half-loaded.

use crate::model::Arch;

/// Wrappers around the text model's `layers.* / embed_tokens / norm`, in the order tried.
pub const BODY_PREFIXES: [&str; 5] = [
    "model.",
    "language_model.model.",
    "model.language_model.",
    "model.text_model.",
    "",
];

/// Where the LM head can sit.
pub const HEAD_NAMES: [&str; 3] = [
    "lm_head.weight",
    "language_model.lm_head.weight",
    "model.lm_head.weight",
];

/// Tensors of other modalities in multimodal checkpoints, and buffers some exports keep.
const SKIP_PREFIXES: [&str; 8] = [
    "vision_tower.",
    "model.vision_tower.",
    "multi_modal_projector.",
    "model.multi_modal_projector.",
    "visual.",
    "model.visual.",
    "audio_tower.",
    "model.audio_tower.",
];
const SKIP_SUFFIXES: [&str; 1] = ["rotary_emb.inv_freq"];

/// Per-layer names after `layers.N.`: (HF, canonical after `blk.N.`).
const LAYER: [(&str, &str); 15] = [
    ("input_layernorm.weight", "attn_norm.weight"),
    ("self_attn.q_proj.weight", "attn_q.weight"),
    ("self_attn.k_proj.weight", "attn_k.weight"),
    ("self_attn.v_proj.weight", "attn_v.weight"),
    ("self_attn.q_proj.bias", "attn_q.bias"),
    ("self_attn.k_proj.bias", "attn_k.bias"),
    ("self_attn.v_proj.bias", "attn_v.bias"),
    ("self_attn.o_proj.weight", "attn_output.weight"),
    ("self_attn.q_norm.weight", "attn_q_norm.weight"),
    ("self_attn.k_norm.weight", "attn_k_norm.weight"),
    ("mlp.gate_proj.weight", "ffn_gate.weight"),
    ("mlp.up_proj.weight", "ffn_up.weight"),
    ("mlp.down_proj.weight", "ffn_down.weight"),
    ("pre_feedforward_layernorm.weight", "ffn_norm.weight"),
    ("post_feedforward_layernorm.weight", "post_ffw_norm.weight"),
];

const GLOBAL: [(&str, &str); 2] = [
    ("embed_tokens.weight", "token_embd.weight"),
    ("norm.weight", "output_norm.weight"),
];

/// What to do with one tensor of the checkpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mapped {
    Canonical(String),
    /// Not part of the text model (another modality, or a recomputable buffer).
    Skip,
    Unknown,
}

/// BERT's names (after an optional `bert.`), and the canonical ones: (HF, GGUF).
const BERT_GLOBAL: [(&str, &str); 5] = [
    ("embeddings.word_embeddings.weight", "token_embd.weight"),
    ("embeddings.position_embeddings.weight", "position_embd.weight"),
    ("embeddings.token_type_embeddings.weight", "token_types.weight"),
    ("embeddings.LayerNorm.weight", "token_embd_norm.weight"),
    ("embeddings.LayerNorm.bias", "token_embd_norm.bias"),
];

/// BERT's per-layer names after `encoder.layer.N.`.
const BERT_LAYER: [(&str, &str); 16] = [
    ("attention.self.query.weight", "attn_q.weight"),
    ("attention.self.query.bias", "attn_q.bias"),
    ("attention.self.key.weight", "attn_k.weight"),
    ("attention.self.key.bias", "attn_k.bias"),
    ("attention.self.value.weight", "attn_v.weight"),
    ("attention.self.value.bias", "attn_v.bias"),
    ("attention.output.dense.weight", "attn_output.weight"),
    ("attention.output.dense.bias", "attn_output.bias"),
    ("attention.output.LayerNorm.weight", "attn_output_norm.weight"),
    ("attention.output.LayerNorm.bias", "attn_output_norm.bias"),
    ("intermediate.dense.weight", "ffn_up.weight"),
    ("intermediate.dense.bias", "ffn_up.bias"),
    ("output.dense.weight", "ffn_down.weight"),
    ("output.dense.bias", "ffn_down.bias"),
    ("output.LayerNorm.weight", "layer_output_norm.weight"),
    ("output.LayerNorm.bias", "layer_output_norm.bias"),
];

fn bert(name: &str) -> Mapped {
    let rest = name.strip_prefix("bert.").unwrap_or(name);
    // The pooler (a dense layer over [CLS] for next-sentence prediction) and the position ids
    // buffer are not part of the embedding.
    if rest.starts_with("pooler.") || rest == "embeddings.position_ids" {
        return Mapped::Skip;
    }
    if let Some(&(_, c)) = BERT_GLOBAL.iter().find(|(h, _)| *h == rest) {
        return Mapped::Canonical(c.into());
    }
    let Some((n, tail)) = rest.strip_prefix("encoder.layer.").and_then(|a| a.split_once('.')) else {
        return Mapped::Unknown;
    };
    if n.is_empty() || n.len() > 6 || !n.bytes().all(|b| b.is_ascii_digit()) || (n.len() > 1 && n.starts_with('0')) {
        return Mapped::Unknown;
    }
    match BERT_LAYER.iter().find(|(h, _)| *h == tail) {
        Some((_, c)) => Mapped::Canonical(format!("blk.{n}.{c}")),
        None => Mapped::Unknown,
    }
}

/// Maps one HF tensor name for `arch`.
pub fn canonical(arch: Arch, name: &str) -> Mapped {
    if arch == Arch::Bert {
        return bert(name);
    }
    if HEAD_NAMES.contains(&name) {
        return Mapped::Canonical("output.weight".into());
    }
    if SKIP_PREFIXES.iter().any(|p| name.starts_with(p)) || SKIP_SUFFIXES.iter().any(|s| name.ends_with(s)) {
        return Mapped::Skip;
    }
    for prefix in BODY_PREFIXES {
        if let Some(rest) = name.strip_prefix(prefix) {
            if let Some(c) = body(arch, rest) {
                return Mapped::Canonical(c);
            }
        }
    }
    Mapped::Unknown
}

fn body(arch: Arch, rest: &str) -> Option<String> {
    if let Some(&(_, c)) = GLOBAL.iter().find(|(h, _)| *h == rest) {
        return Some(c.to_string());
    }
    let after = rest.strip_prefix("layers.")?;
    let (n, tail) = after.split_once('.')?;
    if n.is_empty() || n.len() > 6 || !n.bytes().all(|b| b.is_ascii_digit()) || (n.len() > 1 && n.starts_with('0')) {
        return None;
    }
    // Gemma puts a norm after attention and another before the FFN; the others have one
    // norm between them, which HF calls post-attention and GGUF the FFN norm.
    let c = match (arch, tail) {
        (Arch::Gemma3 | Arch::Olmo2 | Arch::GptOss, "post_attention_layernorm.weight") => "post_attention_norm.weight",
        // Mixture-of-experts routers, Qwen2-MoE's shared expert, gpt-oss's sinks and o bias
        // (the experts themselves: `hf::experts`).
        (Arch::Qwen3Moe | Arch::Qwen2Moe, "mlp.gate.weight") => "ffn_gate_inp.weight",
        (Arch::Llama, "block_sparse_moe.gate.weight" | "mlp.gate.weight") => "ffn_gate_inp.weight",
        (Arch::Qwen2Moe, "mlp.shared_expert.gate_proj.weight") => "ffn_gate_shexp.weight",
        (Arch::Qwen2Moe, "mlp.shared_expert.up_proj.weight") => "ffn_up_shexp.weight",
        (Arch::Qwen2Moe, "mlp.shared_expert.down_proj.weight") => "ffn_down_shexp.weight",
        (Arch::Qwen2Moe, "mlp.shared_expert_gate.weight") => "ffn_gate_inp_shexp.weight",
        (Arch::GptOss, "mlp.router.weight") => "ffn_gate_inp.weight",
        (Arch::GptOss, "mlp.router.bias") => "ffn_gate_inp.bias",
        (Arch::GptOss, "self_attn.sinks") => "attn_sinks.weight",
        (Arch::GptOss, "self_attn.o_proj.bias") => "attn_output.bias",
        // Phi-3's fused projections; split at load like the GGUF's (`model::fused`).
        (Arch::Phi3, "self_attn.qkv_proj.weight") => "attn_qkv.weight",
        (Arch::Phi3 | Arch::Glm4, "mlp.gate_up_proj.weight") => "ffn_up.weight",
        // GLM-4 has four norms: before and after attention, before and after the MLP.
        (Arch::Glm4, "post_self_attn_layernorm.weight") => "post_attention_norm.weight",
        (Arch::Glm4, "post_mlp_layernorm.weight") => "post_ffw_norm.weight",
        (_, "post_attention_layernorm.weight") => "ffn_norm.weight",
        _ => LAYER.iter().find(|(h, _)| *h == tail)?.1,
    };
    Some(format!("blk.{n}.{c}"))
}

/// Gemma's RMSNorm multiplies by `1 + w` and HF stores `w`; the GGUF converter stores `1 + w`.
/// True for the canonical names of those norm weights.
pub fn is_gemma_norm(canonical: &str) -> bool {
    canonical == "output_norm.weight"
        || canonical.strip_prefix("blk.").is_some_and(|r| {
            r.split_once('.').is_some_and(|(_, t)| {
                matches!(
                    t,
                    "attn_norm.weight"
                        | "post_attention_norm.weight"
                        | "ffn_norm.weight"
                        | "post_ffw_norm.weight"
                        | "attn_q_norm.weight"
                        | "attn_k_norm.weight"
                )
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(arch: Arch, n: &str) -> Mapped {
        canonical(arch, n)
    }
    fn canon(s: &str) -> Mapped {
        Mapped::Canonical(s.into())
    }

    #[test]
    fn maps_llama_names() {
        let a = Arch::Llama;
        assert_eq!(c(a, "model.embed_tokens.weight"), canon("token_embd.weight"));
        assert_eq!(c(a, "model.norm.weight"), canon("output_norm.weight"));
        assert_eq!(c(a, "lm_head.weight"), canon("output.weight"));
        assert_eq!(
            c(a, "model.layers.0.self_attn.q_proj.weight"),
            canon("blk.0.attn_q.weight")
        );
        assert_eq!(
            c(a, "model.layers.12.mlp.down_proj.weight"),
            canon("blk.12.ffn_down.weight")
        );
        assert_eq!(
            c(a, "model.layers.3.post_attention_layernorm.weight"),
            canon("blk.3.ffn_norm.weight")
        );
        assert_eq!(c(a, "model.layers.3.self_attn.rotary_emb.inv_freq"), Mapped::Skip);
        assert_eq!(c(a, "model.layers.3.self_attn.q_proj.scales"), Mapped::Unknown);
        assert_eq!(c(a, "model.layers.x.self_attn.q_proj.weight"), Mapped::Unknown);
        assert_eq!(c(a, "model.layers.01.self_attn.q_proj.weight"), Mapped::Unknown);
    }

    #[test]
    fn maps_gemma3_and_wrappers() {
        let g = Arch::Gemma3;
        assert_eq!(
            c(g, "model.layers.1.post_attention_layernorm.weight"),
            canon("blk.1.post_attention_norm.weight")
        );
        assert_eq!(
            c(g, "model.layers.1.pre_feedforward_layernorm.weight"),
            canon("blk.1.ffn_norm.weight")
        );
        assert_eq!(
            c(g, "language_model.model.layers.2.self_attn.k_norm.weight"),
            canon("blk.2.attn_k_norm.weight")
        );
        assert_eq!(
            c(g, "model.language_model.embed_tokens.weight"),
            canon("token_embd.weight")
        );
        assert_eq!(c(g, "language_model.lm_head.weight"), canon("output.weight"));
        assert_eq!(
            c(g, "vision_tower.vision_model.encoder.layers.0.mlp.fc1.weight"),
            Mapped::Skip
        );
        assert_eq!(c(g, "multi_modal_projector.mm_input_projection_weight"), Mapped::Skip);
    }

    #[test]
    fn maps_fused_and_post_norm_names() {
        assert_eq!(
            c(Arch::Phi3, "model.layers.1.self_attn.qkv_proj.weight"),
            canon("blk.1.attn_qkv.weight")
        );
        assert_eq!(
            c(Arch::Phi3, "model.layers.1.mlp.gate_up_proj.weight"),
            canon("blk.1.ffn_up.weight")
        );
        assert_eq!(
            c(Arch::Llama, "model.layers.1.self_attn.qkv_proj.weight"),
            Mapped::Unknown
        );
        let g = Arch::Glm4;
        assert_eq!(
            c(g, "model.layers.0.post_self_attn_layernorm.weight"),
            canon("blk.0.post_attention_norm.weight")
        );
        assert_eq!(
            c(g, "model.layers.0.post_attention_layernorm.weight"),
            canon("blk.0.ffn_norm.weight")
        );
        assert_eq!(
            c(g, "model.layers.0.post_mlp_layernorm.weight"),
            canon("blk.0.post_ffw_norm.weight")
        );
        let o = Arch::Olmo2;
        assert_eq!(
            c(o, "model.layers.0.post_attention_layernorm.weight"),
            canon("blk.0.post_attention_norm.weight")
        );
        assert_eq!(
            c(o, "model.layers.0.post_feedforward_layernorm.weight"),
            canon("blk.0.post_ffw_norm.weight")
        );
    }

    #[test]
    fn maps_moe_routers_and_shared_experts() {
        let l = "model.layers.1.";
        for (arch, hf, want) in [
            (Arch::Qwen3Moe, "mlp.gate.weight", "blk.1.ffn_gate_inp.weight"),
            (Arch::Llama, "block_sparse_moe.gate.weight", "blk.1.ffn_gate_inp.weight"),
            (
                Arch::Qwen2Moe,
                "mlp.shared_expert.down_proj.weight",
                "blk.1.ffn_down_shexp.weight",
            ),
            (
                Arch::Qwen2Moe,
                "mlp.shared_expert_gate.weight",
                "blk.1.ffn_gate_inp_shexp.weight",
            ),
            (Arch::GptOss, "mlp.router.bias", "blk.1.ffn_gate_inp.bias"),
            (Arch::GptOss, "self_attn.sinks", "blk.1.attn_sinks.weight"),
            (
                Arch::GptOss,
                "post_attention_layernorm.weight",
                "blk.1.post_attention_norm.weight",
            ),
        ] {
            assert_eq!(c(arch, &format!("{l}{hf}")), canon(want), "{hf}");
        }
        assert_eq!(
            c(Arch::Qwen2, &format!("{l}mlp.shared_expert_gate.weight")),
            Mapped::Unknown
        );
    }

    #[test]
    fn gemma_norms_are_the_norm_weights() {
        for n in [
            "output_norm.weight",
            "blk.0.attn_norm.weight",
            "blk.7.post_attention_norm.weight",
            "blk.7.ffn_norm.weight",
            "blk.7.post_ffw_norm.weight",
            "blk.7.attn_q_norm.weight",
            "blk.7.attn_k_norm.weight",
        ] {
            assert!(is_gemma_norm(n), "{n}");
        }
        for n in [
            "token_embd.weight",
            "blk.0.attn_q.weight",
            "blk.0.ffn_down.weight",
            "output.weight",
        ] {
            assert!(!is_gemma_norm(n), "{n}");
        }
    }
}
