//! `config.json` → the architecture and the GGUF metadata keys `convert_hf_to_gguf.py` would write,
//! so that the architecture's own `hparams` reading (fallback chains, shape checks) runs unchanged
//! on a Hugging Face model. What GGUF keys cannot say (Gemma 3's per-layer attention types, its
//! local RoPE base, `query_pre_attn_scalar`) is returned in [`Extras`] and applied afterwards.

use serde_json::Value as J;

use crate::error::{Error, Result};
use crate::gguf::{Metadata, Value};
use crate::model::Arch;

/// The `model_type` values we run, and the architecture each maps to.
pub const MODEL_TYPES: [(&str, Arch); 17] = [
    ("llama", Arch::Llama),
    ("mistral", Arch::Llama),
    ("qwen2", Arch::Qwen2),
    ("qwen3", Arch::Qwen3),
    ("gemma3", Arch::Gemma3),
    ("gemma3_text", Arch::Gemma3),
    ("ministral3", Arch::Mistral3),
    ("phi3", Arch::Phi3),
    ("olmo2", Arch::Olmo2),
    ("granite", Arch::Granite),
    ("smollm3", Arch::Smollm3),
    ("glm4", Arch::Glm4),
    ("qwen3_moe", Arch::Qwen3Moe),
    ("qwen2_moe", Arch::Qwen2Moe),
    ("mixtral", Arch::Llama),
    ("gpt_oss", Arch::GptOss),
    ("bert", Arch::Bert),
];

/// Hyperparameters GGUF keys do not carry.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Extras {
    /// `layer_types`: true = sliding-window attention.
    pub swa_layers: Option<Vec<bool>>,
    /// Gemma 3 `rope_local_base_freq`.
    pub rope_local_base: Option<f32>,
    /// Gemma `query_pre_attn_scalar`: attention scale 1/sqrt(this).
    pub query_pre_attn_scalar: Option<f32>,
    /// SmolLM3 `no_rope_layers` (0 = NoPE), as `true` = NoPE.
    pub nope_layers: Option<Vec<bool>>,
    /// A sentence-transformers directory's pooling (`1_Pooling/config.json`) and whether its
    /// pipeline ends in `Normalize` (`modules.json`).
    pub pooling: Option<crate::model::Pooling>,
    pub normalize: Option<bool>,
}

pub struct Config {
    pub arch: Arch,
    pub model_type: String,
    pub metadata: Metadata,
    pub extras: Extras,
    /// `bos_token_id` / `eos_token_id` (a list for some models).
    pub bos: Option<u32>,
    pub eos: Vec<u32>,
}

fn err(key: &str, what: impl Into<String>) -> Error {
    Error::metadata(format!("config.json {key}"), what)
}

/// Reads the text model's config: the top level, or `text_config` of a multimodal wrapper.
pub fn parse(root: &J) -> Result<Config> {
    let top = root.as_object().ok_or_else(|| err("(root)", "is not a JSON object"))?;
    let (cfg, nested) = match top.get("text_config") {
        Some(J::Object(t)) => (t, true),
        Some(J::Null) | None => (top, false),
        Some(other) => return Err(err("text_config", format!("is {other}, not an object"))),
    };
    let model_type = match (cfg.get("model_type"), top.get("model_type")) {
        (Some(J::String(s)), _) => s.clone(),
        // A `text_config` without its own model_type is the wrapper's text model.
        (None, Some(J::String(s))) if nested => format!("{s}_text"),
        (None, Some(J::String(s))) => s.clone(),
        _ => return Err(err("model_type", "missing")),
    };
    let arch = MODEL_TYPES
        .iter()
        .find(|(t, _)| *t == model_type)
        .map(|&(_, a)| a)
        .ok_or_else(|| {
            let known: Vec<&str> = MODEL_TYPES.iter().map(|(t, _)| *t).collect();
            err(
                "model_type",
                format!("'{model_type}' is not supported (supported: {})", known.join(", ")),
            )
        })?;
    let c = Fields(cfg);
    let a = arch.name();
    let mut md = Metadata::new();
    let put_u = |md: &mut Metadata, key: &str, v: u64| md.insert(format!("{a}.{key}"), Value::U64(v));
    md.insert("general.architecture", Value::String(a.into()));
    md.insert("general.source", Value::String("safetensors".into()));
    md.insert("hf.model_type", Value::String(model_type.clone()));

    put_u(&mut md, "embedding_length", c.req_u64("hidden_size")?);
    put_u(&mut md, "block_count", c.req_u64("num_hidden_layers")?);
    put_u(&mut md, "feed_forward_length", c.req_u64("intermediate_size")?);
    let n_head = c.req_u64("num_attention_heads")?;
    put_u(&mut md, "attention.head_count", n_head);
    put_u(
        &mut md,
        "attention.head_count_kv",
        c.u64("num_key_value_heads")?.unwrap_or(n_head),
    );
    if let Some(hd) = c.u64("head_dim")? {
        put_u(&mut md, "attention.key_length", hd);
        put_u(&mut md, "attention.value_length", hd);
    }
    if let Some(n) = c.u64("max_position_embeddings")? {
        put_u(&mut md, "context_length", n);
    }
    let put_f = |md: &mut Metadata, key: &str, v: f64| md.insert(format!("{a}.{key}"), Value::F32(v as f32));
    if let Some(eps) = c.f64("rms_norm_eps")? {
        put_f(&mut md, "attention.layer_norm_rms_epsilon", eps);
    }
    // transformers' default rope_theta is 10 000 for every model_type here. Newer configs
    // keep it (and partial_rotary_factor) in `rope_parameters`.
    let rp = match c.0.get("rope_parameters") {
        Some(J::Object(o)) => Some(Fields(o)),
        _ => None,
    };
    let rope_key = |key: &str| -> Result<Option<f64>> {
        match c.f64(key)? {
            Some(v) => Ok(Some(v)),
            None => rp.as_ref().map_or(Ok(None), |r| r.f64(key)),
        }
    };
    put_f(&mut md, "rope.freq_base", rope_key("rope_theta")?.unwrap_or(10_000.0));
    if let Some(p) = rope_key("partial_rotary_factor")? {
        let hd = match c.u64("head_dim")? {
            Some(hd) => hd,
            None => c.req_u64("hidden_size")? / n_head.max(1),
        };
        put_u(&mut md, "rope.dimension_count", (hd as f64 * p) as u64);
    }
    rope_scaling(&c, &mut md, a)?;
    check_activation(&c, arch)?;
    for key in ["attention_bias", "mlp_bias"] {
        let unbiased = matches!(arch, Arch::Llama | Arch::Granite | Arch::Smollm3 | Arch::Olmo2);
        if unbiased && c.bool(key)? == Some(true) {
            return Err(err(key, format!("is true; the {a} graph has no projection biases")));
        }
    }

    let mut extras = Extras::default();
    match arch {
        Arch::Gemma3 => gemma3(&c, &mut md, &mut extras)?,
        Arch::Granite => {
            for (hf, key) in [
                ("embedding_multiplier", "embedding_scale"),
                ("residual_multiplier", "residual_scale"),
                ("attention_multiplier", "attention.scale"),
                ("logits_scaling", "logit_scale"),
            ] {
                if let Some(v) = c.f64(hf)? {
                    put_f(&mut md, key, v);
                }
            }
        }
        Arch::Smollm3 => extras.nope_layers = smollm3_nope(&c)?,
        Arch::Bert => {
            if let Some(eps) = c.f64("layer_norm_eps")? {
                put_f(&mut md, "attention.layer_norm_epsilon", eps);
            }
            match c.0.get("position_embedding_type") {
                None | Some(J::Null) => {}
                Some(J::String(s)) if s == "absolute" => {}
                Some(other) => {
                    return Err(err(
                        "position_embedding_type",
                        format!("{other} is not supported (BERT's absolute positions only)"),
                    ))
                }
            }
        }
        _ => {}
    }
    if matches!(arch, Arch::Qwen3Moe | Arch::Qwen2Moe | Arch::GptOss) || model_type == "mixtral" {
        moe(&c, &mut md, arch, &mut extras)?;
    } else if c.get("quantization_config").is_some() {
        return Err(err("quantization_config", format!("is not supported for {model_type}")));
    }
    // generation_config.json / tokenizer_config.json may override these; see `hf::tokenizer`.
    let bos = c.u64("bos_token_id")?.and_then(|v| u32::try_from(v).ok());
    let eos = ids(&c, "eos_token_id")?;
    Ok(Config {
        arch,
        model_type,
        metadata: md,
        extras,
        bos,
        eos,
    })
}

fn gemma3(c: &Fields, md: &mut Metadata, x: &mut Extras) -> Result<()> {
    if let Some(w) = c.u64("sliding_window")? {
        md.insert("gemma3.attention.sliding_window", Value::U64(w));
    }
    // Newer configs list every layer's type; older ones give the period of the pattern.
    if let Some(swa) = layer_types(c)? {
        // The GGUF converter writes the period; keep it where the types have one.
        if let Some(p) = swa.iter().position(|s| !s) {
            let period = p + 1;
            if swa.iter().enumerate().all(|(i, &s)| s == (i % period < period - 1)) {
                md.insert("gemma3.attention.sliding_window_pattern", Value::U64(period as u64));
            }
        }
        x.swa_layers = Some(swa);
    } else if let Some(p) = match c.u64("sliding_window_pattern")? {
        Some(p) => Some(p),
        None => c.u64("_sliding_window_pattern")?,
    } {
        md.insert("gemma3.attention.sliding_window_pattern", Value::U64(p));
    }
    if let Some(b) = c.f64("rope_local_base_freq")? {
        md.insert("gemma3.rope.freq_base_swa", Value::F32(b as f32));
        x.rope_local_base = Some(b as f32);
    }
    for key in ["final_logit_softcapping", "attn_logit_softcapping"] {
        if let Some(v) = c.f64(key)? {
            md.insert(format!("gemma3.{key}"), Value::F32(v as f32));
        }
    }
    if let Some(q) = c.f64("query_pre_attn_scalar")? {
        if q <= 0.0 || !q.is_finite() {
            return Err(err("query_pre_attn_scalar", format!("{q} is not positive")));
        }
        x.query_pre_attn_scalar = Some(q as f32);
    }
    Ok(())
}

/// The expert keys `convert_hf_to_gguf.py` writes, and what the graphs hard-code checked:
/// every layer sparse, Qwen3-MoE / Mixtral renormalising the top-k weights and Qwen2-MoE not,
/// gpt-oss's clamped SwiGLU constants and its only quantization, MXFP4.
fn moe(c: &Fields, md: &mut Metadata, arch: Arch, x: &mut Extras) -> Result<()> {
    let a = arch.name();
    let put = |md: &mut Metadata, key: &str, v: u64| md.insert(format!("{a}.{key}"), Value::U64(v));
    let n_expert = match c.u64("num_experts")? {
        Some(n) => n,
        None => c.req_u64("num_local_experts")?,
    };
    put(md, "expert_count", n_expert);
    put(md, "expert_used_count", c.req_u64("num_experts_per_tok")?);
    match arch {
        // Mixtral's experts are `intermediate_size` wide (`feed_forward_length`).
        Arch::Llama => {}
        Arch::GptOss => {
            put(md, "expert_feed_forward_length", c.req_u64("intermediate_size")?);
        }
        _ => {
            put(md, "expert_feed_forward_length", c.req_u64("moe_intermediate_size")?);
        }
    }
    if let Some(n) = c.u64("shared_expert_intermediate_size")? {
        put(md, "expert_shared_feed_forward_length", n);
    }
    if c.u64("decoder_sparse_step")?.is_some_and(|s| s != 1) {
        return Err(err(
            "decoder_sparse_step",
            "other than 1 (dense layers between MoE layers) is not supported",
        ));
    }
    if c.get("mlp_only_layers")
        .and_then(J::as_array)
        .is_some_and(|l| !l.is_empty())
    {
        return Err(err("mlp_only_layers", "dense layers in a MoE model are not supported"));
    }
    let renorm = !matches!(arch, Arch::Qwen2Moe);
    if c.bool("norm_topk_prob")?.is_some_and(|n| n != renorm) {
        return Err(err(
            "norm_topk_prob",
            format!(
                "the {a} graph (as llama.cpp's) {} the top-k weights",
                if renorm { "renormalises" } else { "does not renormalise" }
            ),
        ));
    }
    if c.bool("use_sliding_window")? == Some(true) {
        return Err(err(
            "use_sliding_window",
            format!("is true; the {a} graph has no sliding window"),
        ));
    }
    match c.get("quantization_config") {
        None => {}
        Some(q) if arch == Arch::GptOss && q.get("quant_method").and_then(J::as_str) == Some("mxfp4") => {}
        Some(q) => return Err(err("quantization_config", format!("{q} is not supported for {a}"))),
    }
    if arch == Arch::GptOss {
        // llama.cpp's swiglu_oai constants (`build_moe_ffn`), not read from the GGUF.
        for (key, want) in [("swiglu_alpha", 1.702), ("swiglu_limit", 7.0)] {
            if c.f64(key)?.is_some_and(|v| (v - want).abs() > 1e-6) {
                return Err(err(key, format!("the gpt-oss graph has {want}")));
            }
        }
        if let Some(w) = c.u64("sliding_window")? {
            put(md, "attention.sliding_window", w);
        }
        x.swa_layers = layer_types(c)?;
    }
    Ok(())
}

/// `layer_types`: true = `sliding_attention`.
fn layer_types(c: &Fields) -> Result<Option<Vec<bool>>> {
    let Some(types) = c.get("layer_types") else {
        return Ok(None);
    };
    let arr = types.as_array().ok_or_else(|| err("layer_types", "is not an array"))?;
    arr.iter()
        .map(|t| match t.as_str() {
            Some("sliding_attention") => Ok(true),
            Some("full_attention") => Ok(false),
            _ => Err(err(
                "layer_types",
                format!("entry {t} is not sliding_attention/full_attention"),
            )),
        })
        .collect::<Result<Vec<bool>>>()
        .map(Some)
}

/// `rope_scaling` (transformers 5: `rope_parameters`) as an object, if there is one.
fn rope_params<'a>(c: &Fields<'a>) -> Result<Option<&'a serde_json::Map<String, J>>> {
    let Some((key, rs)) = ["rope_scaling", "rope_parameters"]
        .into_iter()
        .find_map(|k| c.0.get(k).filter(|v| !v.is_null()).map(|v| (k, v)))
    else {
        return Ok(None);
    };
    rs.as_object()
        .map(Some)
        .ok_or_else(|| err(key, format!("{rs} is not an object")))
}

/// SmolLM3's NoPE layers: `no_rope_layers` (1 = RoPE, 0 = NoPE per layer), else every
/// `no_rope_layer_interval`-th layer (transformers' `SmolLM3Config`).
fn smollm3_nope(c: &Fields) -> Result<Option<Vec<bool>>> {
    if let Some(v) = c.get("no_rope_layers") {
        let arr = v
            .as_array()
            .ok_or_else(|| err("no_rope_layers", format!("{v} is not an array")))?;
        let flags = arr
            .iter()
            .map(|x| match x.as_u64() {
                Some(0) => Ok(true),
                Some(1) => Ok(false),
                _ => Err(err("no_rope_layers", format!("entry {x} is not 0 or 1"))),
            })
            .collect::<Result<Vec<bool>>>()?;
        return Ok(Some(flags));
    }
    let Some(step) = c.u64("no_rope_layer_interval")? else {
        return Ok(None);
    };
    if step == 0 {
        return Err(err("no_rope_layer_interval", "is 0"));
    }
    let n = c.req_u64("num_hidden_layers")?.min(1 << 16);
    Ok(Some((0..n).map(|il| (il + 1) % step == 0).collect()))
}

/// `rope_scaling` / `rope_parameters` (`type` or `rope_type`): none/default, linear with a
/// factor, or yarn (as `convert_hf_to_gguf.py` writes it: factor, original context, betas,
/// `mscale_all_dim` as the log multiplier, and Llama 4's `llama_4_scaling_beta` as the attention
/// temperature). YaRN runs as ggml's, with truncated correction dims whatever `truncate` says.
/// The others (llama3, dynamic, longrope) change the frequencies in ways the graph does not do.
fn rope_scaling(c: &Fields, md: &mut Metadata, a: &str) -> Result<()> {
    let Some(obj) = rope_params(c)? else {
        return Ok(());
    };
    let ty = obj
        .get("rope_type")
        .or_else(|| obj.get("type"))
        .and_then(J::as_str)
        .unwrap_or("default");
    match ty {
        "default" => Ok(()),
        "linear" => {
            let f = obj
                .get("factor")
                .and_then(J::as_f64)
                .ok_or_else(|| err("rope_scaling.factor", "missing for linear scaling"))?;
            md.insert(format!("{a}.rope.scaling.type"), Value::String("linear".into()));
            md.insert(format!("{a}.rope.scaling.factor"), Value::F32(f as f32));
            Ok(())
        }
        "yarn" => {
            let num = |k: &str| obj.get(k).and_then(J::as_f64);
            let f = num("factor").ok_or_else(|| err("rope_scaling.factor", "missing for yarn scaling"))?;
            if num("mscale").is_some_and(|m| m != 1.0) {
                // llama.cpp assumes mscale 1 beside mscale_all_dim.
                return Err(err("rope_scaling.mscale", "other than 1 is not supported"));
            }
            md.insert(format!("{a}.rope.scaling.type"), Value::String("yarn".into()));
            md.insert(format!("{a}.rope.scaling.factor"), Value::F32(f as f32));
            if let Some(n) = obj.get("original_max_position_embeddings").and_then(J::as_u64) {
                md.insert(format!("{a}.rope.scaling.original_context_length"), Value::U64(n));
            }
            for (hf, gguf) in [
                ("beta_fast", "rope.scaling.yarn_beta_fast"),
                ("beta_slow", "rope.scaling.yarn_beta_slow"),
                ("mscale_all_dim", "rope.scaling.yarn_log_multiplier"),
                ("llama_4_scaling_beta", "attention.temperature_scale"),
            ] {
                if let Some(v) = num(hf) {
                    md.insert(format!("{a}.{gguf}"), Value::F32(v as f32));
                }
            }
            Ok(())
        }
        other => Err(err(
            "rope_scaling.rope_type",
            format!("'{other}' is not supported (supported: default, linear, yarn)"),
        )),
    }
}

fn check_activation(c: &Fields, arch: Arch) -> Result<()> {
    let (key, ok): (&str, &[&str]) = match arch {
        Arch::Gemma3 => ("hidden_activation", &["gelu_pytorch_tanh", "gelu"]),
        Arch::Bert => ("hidden_act", &["gelu"]),
        _ => ("hidden_act", &["silu"]),
    };
    let v = match c.0.get(key).or_else(|| c.0.get("hidden_act")) {
        Some(J::String(s)) => s.as_str(),
        _ => return Ok(()),
    };
    if ok.contains(&v) {
        Ok(())
    } else {
        Err(err(
            key,
            format!("'{v}' is not supported for {} (supported: {ok:?})", arch.name()),
        ))
    }
}

/// An id or a list of ids (`eos_token_id: [1, 106]`).
pub(crate) fn ids(c: &Fields, key: &str) -> Result<Vec<u32>> {
    let conv = |v: &J| {
        v.as_u64()
            .and_then(|x| u32::try_from(x).ok())
            .ok_or_else(|| err(key, format!("{v} is not a token id")))
    };
    match c.0.get(key) {
        None | Some(J::Null) => Ok(vec![]),
        Some(J::Array(a)) if a.len() <= 1024 => a.iter().map(conv).collect(),
        Some(J::Array(a)) => Err(err(key, format!("{} ids is absurd", a.len()))),
        Some(v) => Ok(vec![conv(v)?]),
    }
}

/// Typed, optional lookups in a config object; `null` counts as absent.
pub(crate) struct Fields<'a>(pub &'a serde_json::Map<String, J>);

impl Fields<'_> {
    fn get(&self, key: &str) -> Option<&J> {
        self.0.get(key).filter(|v| !v.is_null())
    }

    pub fn u64(&self, key: &str) -> Result<Option<u64>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .map(Some)
                .ok_or_else(|| err(key, format!("{v} is not a non-negative integer"))),
        }
    }

    pub fn req_u64(&self, key: &str) -> Result<u64> {
        self.u64(key)?.ok_or_else(|| err(key, "missing"))
    }

    pub fn f64(&self, key: &str) -> Result<Option<f64>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_f64()
                .map(Some)
                .ok_or_else(|| err(key, format!("{v} is not a number"))),
        }
    }

    pub fn bool(&self, key: &str) -> Result<Option<bool>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_bool()
                .map(Some)
                .ok_or_else(|| err(key, format!("{v} is not a bool"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn maps_a_llama_config() {
        let c = parse(&json!({
            "model_type": "mistral", "hidden_size": 256, "num_hidden_layers": 2, "intermediate_size": 512,
            "num_attention_heads": 4, "num_key_value_heads": 2, "rms_norm_eps": 1e-5, "rope_theta": 5e5,
            "max_position_embeddings": 512, "eos_token_id": [2, 7], "bos_token_id": 1, "rope_scaling": null
        }))
        .unwrap();
        assert_eq!(c.arch, Arch::Llama);
        let md = &c.metadata;
        assert_eq!(md.get_u64("llama.embedding_length").unwrap(), Some(256));
        assert_eq!(md.get_u64("llama.attention.head_count_kv").unwrap(), Some(2));
        assert_eq!(md.get_f64("llama.rope.freq_base").unwrap(), Some(5e5));
        assert!(!md.contains("llama.attention.key_length"));
        assert_eq!((c.bos, c.eos), (Some(1), vec![2, 7]));
    }

    #[test]
    fn reads_nested_text_config_and_gemma_fields() {
        let c = parse(&json!({
            "model_type": "gemma3",
            "text_config": {
                "hidden_size": 64, "num_hidden_layers": 6, "intermediate_size": 128, "num_attention_heads": 2,
                "num_key_value_heads": 1, "head_dim": 32, "sliding_window": 8, "rope_local_base_freq": 10000.0,
                "query_pre_attn_scalar": 32, "final_logit_softcapping": null,
                "layer_types": ["sliding_attention", "sliding_attention", "full_attention",
                                "sliding_attention", "sliding_attention", "full_attention"]
            }
        }))
        .unwrap();
        assert_eq!((c.arch, c.model_type.as_str()), (Arch::Gemma3, "gemma3_text"));
        assert_eq!(
            c.metadata.get_u64("gemma3.attention.sliding_window_pattern").unwrap(),
            Some(3)
        );
        assert!(!c.metadata.contains("gemma3.final_logit_softcapping"));
        assert_eq!(c.extras.swa_layers, Some(vec![true, true, false, true, true, false]));
        assert_eq!(c.extras.query_pre_attn_scalar, Some(32.0));
    }

    /// Ministral 3's transformers-5 config: `rope_parameters` carries theta, YaRN and the Llama 4
    /// temperature, mapped to the keys llama.cpp's converter writes.
    #[test]
    fn maps_ministral3_rope_parameters() {
        let c = parse(&json!({
            "model_type": "ministral3", "hidden_size": 256, "num_hidden_layers": 2, "intermediate_size": 256,
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64, "max_position_embeddings": 256,
            "rope_parameters": {
                "beta_fast": 32.0, "beta_slow": 1.0, "factor": 16.0, "llama_4_scaling_beta": 0.1,
                "max_position_embeddings": 256, "mscale": 1.0, "mscale_all_dim": 1.0,
                "original_max_position_embeddings": 16, "rope_theta": 1000000.0, "rope_type": "yarn"
            }
        }))
        .unwrap();
        assert_eq!(c.arch, Arch::Mistral3);
        let md = &c.metadata;
        assert_eq!(md.get_f64("mistral3.rope.freq_base").unwrap(), Some(1e6));
        assert_eq!(md.get_str("mistral3.rope.scaling.type").unwrap(), Some("yarn"));
        assert_eq!(md.get_f64("mistral3.rope.scaling.factor").unwrap(), Some(16.0));
        assert_eq!(
            md.get_u64("mistral3.rope.scaling.original_context_length").unwrap(),
            Some(16)
        );
        assert_eq!(
            md.get_f64("mistral3.rope.scaling.yarn_log_multiplier").unwrap(),
            Some(1.0)
        );
        let t = md.get_f64("mistral3.attention.temperature_scale").unwrap().unwrap();
        assert!((t - 0.1).abs() < 1e-7);
        let mscale = parse(&json!({
            "model_type": "ministral3", "hidden_size": 8, "num_hidden_layers": 1, "intermediate_size": 8,
            "num_attention_heads": 2, "rope_parameters": {"rope_type": "yarn", "factor": 4.0, "mscale": 0.7}
        }));
        assert!(mscale
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
            .contains("mscale"));
    }

    #[test]
    fn maps_granite_multipliers_smollm3_nope_and_rope_parameters() {
        let base = json!({"hidden_size": 256, "num_hidden_layers": 4, "intermediate_size": 256,
            "num_attention_heads": 4, "num_key_value_heads": 2});
        let with = |extra: J| {
            let mut o = base.clone();
            for (k, v) in extra.as_object().unwrap() {
                o[k] = v.clone();
            }
            parse(&o)
        };
        let g = with(
            json!({"model_type": "granite", "embedding_multiplier": 12.0, "residual_multiplier": 0.22,
            "attention_multiplier": 0.015625, "logits_scaling": 8.0,
            "rope_parameters": {"rope_theta": 5e4, "rope_type": "default"}}),
        )
        .unwrap();
        let md = &g.metadata;
        assert_eq!(g.arch, Arch::Granite);
        assert_eq!(md.get_f64("granite.embedding_scale").unwrap(), Some(12.0));
        assert_eq!(md.get_f64("granite.residual_scale").unwrap(), Some(0.22f32 as f64));
        assert_eq!(md.get_f64("granite.attention.scale").unwrap(), Some(0.015625));
        assert_eq!(md.get_f64("granite.logit_scale").unwrap(), Some(8.0));
        assert_eq!(md.get_f64("granite.rope.freq_base").unwrap(), Some(5e4));
        assert!(with(json!({"model_type": "granite", "attention_bias": true})).is_err());

        let s = with(json!({"model_type": "smollm3", "no_rope_layers": [1, 0, 1, 0]})).unwrap();
        assert_eq!(s.extras.nope_layers, Some(vec![false, true, false, true]));
        let s = with(json!({"model_type": "smollm3", "no_rope_layer_interval": 4})).unwrap();
        assert_eq!(s.extras.nope_layers, Some(vec![false, false, false, true]));
        let e = with(json!({"model_type": "smollm3", "no_rope_layers": [1, 2]}))
            .err()
            .unwrap();
        assert!(e.to_string().contains("no_rope_layers"), "{e}");

        let z = with(json!({"model_type": "glm4", "head_dim": 64,
            "rope_parameters": {"partial_rotary_factor": 0.5, "rope_theta": 1e4}}))
        .unwrap();
        assert_eq!(z.metadata.get_u64("glm4.rope.dimension_count").unwrap(), Some(32));
    }

    /// The expert keys convert_hf_to_gguf.py writes per MoE family, and what the graphs
    /// hard-code refused when the config says otherwise.
    #[test]
    fn maps_moe_configs() {
        let base = json!({"hidden_size": 256, "num_hidden_layers": 2, "intermediate_size": 512,
            "num_attention_heads": 4, "num_key_value_heads": 2, "num_experts_per_tok": 2});
        let with = |extra: J| {
            let mut o = base.clone();
            for (k, v) in extra.as_object().unwrap() {
                o[k] = v.clone();
            }
            parse(&o)
        };
        let u = |c: &Config, k: &str| c.metadata.get_u64(k).unwrap();
        let q = with(
            json!({"model_type": "qwen2_moe", "num_experts": 4, "moe_intermediate_size": 256,
            "shared_expert_intermediate_size": 128, "norm_topk_prob": false, "decoder_sparse_step": 1}),
        )
        .unwrap();
        assert_eq!(q.arch, Arch::Qwen2Moe);
        assert_eq!(u(&q, "qwen2moe.expert_count"), Some(4));
        assert_eq!(u(&q, "qwen2moe.expert_used_count"), Some(2));
        assert_eq!(u(&q, "qwen2moe.expert_feed_forward_length"), Some(256));
        assert_eq!(u(&q, "qwen2moe.expert_shared_feed_forward_length"), Some(128));
        let m = with(json!({"model_type": "mixtral", "num_local_experts": 8})).unwrap();
        assert_eq!(m.arch, Arch::Llama);
        assert_eq!(u(&m, "llama.expert_count"), Some(8));
        assert!(!m.metadata.contains("llama.expert_feed_forward_length"));
        let g = with(
            json!({"model_type": "gpt_oss", "num_local_experts": 4, "sliding_window": 16,
            "layer_types": ["sliding_attention", "full_attention"], "swiglu_limit": 7.0,
            "quantization_config": {"quant_method": "mxfp4"}}),
        )
        .unwrap();
        assert_eq!(g.arch, Arch::GptOss);
        assert_eq!(u(&g, "gpt-oss.attention.sliding_window"), Some(16));
        assert_eq!(u(&g, "gpt-oss.expert_feed_forward_length"), Some(512));
        assert_eq!(g.extras.swa_layers, Some(vec![true, false]));

        let e = |extra: J| with(extra).err().map(|e| e.to_string()).unwrap_or_default();
        let q3 = |k: &str, v: J| {
            let mut o = json!({"model_type": "qwen3_moe", "num_experts": 4, "moe_intermediate_size": 256});
            o[k] = v;
            e(o)
        };
        assert!(q3("norm_topk_prob", json!(false)).contains("norm_topk_prob"));
        assert!(q3("mlp_only_layers", json!([0])).contains("mlp_only_layers"));
        assert!(q3("decoder_sparse_step", json!(2)).contains("decoder_sparse_step"));
        assert!(q3("quantization_config", json!({"quant_method": "mxfp4"})).contains("quantization_config"));
        assert!(q3("num_experts", json!(null)).contains("num_local_experts"));
        assert!(
            e(json!({"model_type": "gpt_oss", "num_local_experts": 4, "swiglu_alpha": 2.0})).contains("swiglu_alpha")
        );
        assert!(
            e(json!({"model_type": "qwen3", "quantization_config": {"quant_method": "fp8"}}))
                .contains("quantization_config")
        );
        assert!(
            e(json!({"model_type": "deepseek_v3", "n_routed_experts": 8})).contains("'deepseek_v3' is not supported")
        );
    }

    #[test]
    fn refuses_what_the_graph_cannot_run() {
        let base = json!({"hidden_size": 8, "num_hidden_layers": 1, "intermediate_size": 8, "num_attention_heads": 2});
        let with = |k: &str, v: J| {
            let mut o = base.clone();
            o[k] = v;
            parse(&o).err().map(|e| e.to_string()).unwrap_or_default()
        };
        assert!(with("model_type", json!("phi")).contains("'phi' is not supported"));
        let mut llama = base.clone();
        llama["model_type"] = json!("llama");
        let with_llama = |k: &str, v: J| {
            let mut o = llama.clone();
            o[k] = v;
            parse(&o).err().map(|e| e.to_string()).unwrap_or_default()
        };
        assert!(with_llama("rope_scaling", json!({"rope_type": "llama3", "factor": 8.0})).contains("'llama3'"));
        assert!(with_llama("hidden_act", json!("gelu")).contains("'gelu'"));
        assert!(with_llama("attention_bias", json!(true)).contains("attention_bias"));
        assert!(with_llama("hidden_size", json!(-3)).contains("hidden_size"));
        assert!(parse(&llama).is_ok());
    }
}
