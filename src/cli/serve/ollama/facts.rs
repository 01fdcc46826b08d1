//! What the Ollama endpoints say about the loaded model (`/api/tags`, `/api/show`, `/api/ps`),
//! gathered once at load, and the formats Ollama writes it in (Go's RFC 3339 times, its
//! `HumanNumber`, sha256-wide digests).

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{json, Map, Value};

use minfer::engine::Engine;

/// What `/api/tags`, `/api/show` and `/api/ps` say about the loaded model, gathered once at
/// load (the file's metadata; no pass over its bytes).
pub(crate) struct ModelFacts {
    /// Ollama's `name:tag`: the file stem, tag `latest`.
    pub(super) name: String,
    pub(super) path: String,
    pub(super) file_bytes: u64,
    /// The file's mtime, seconds since the epoch (0 where there is no one file).
    pub(super) modified: u64,
    pub(super) digest: String,
    pub(super) details: Value,
    pub(super) model_info: Value,
    pub(super) template: Option<String>,
    pub(super) license: Option<String>,
    pub(super) capabilities: Vec<&'static str>,
    pub(super) n_ctx: usize,
    /// Weights plus KV cache, and how much of it is on a GPU.
    pub(super) resident_bytes: u64,
    pub(super) vram_bytes: u64,
}

impl ModelFacts {
    pub(crate) fn of(engine: &Engine, path: &Path, model_id: &str) -> ModelFacts {
        let model = engine.model();
        let md = &model.metadata;
        let h = &model.hparams;
        let arch = model.arch.name();
        let n_params: u64 = model.weights.values().map(|t| t.n_elements()).sum();
        let file_type = md.get_u64("general.file_type").ok().flatten();
        let quantization = file_type
            .and_then(ftype_name)
            .map(str::to_string)
            .unwrap_or_else(|| dominant_qtype(engine));
        let format = if path.extension().is_some_and(|e| e == "gguf") {
            "gguf"
        } else {
            "safetensors"
        };
        let details = json!({
            "parent_model": "",
            "format": format,
            "family": arch,
            "families": [arch],
            "parameter_size": human_number(n_params),
            "quantization_level": quantization,
        });
        let mut info = Map::new();
        let mut put = |k: String, v: Value| {
            info.insert(k, v);
        };
        put("general.architecture".into(), json!(arch));
        put("general.parameter_count".into(), json!(n_params));
        if let Some(t) = file_type {
            put("general.file_type".into(), json!(t));
        }
        for k in [
            "general.name",
            "general.basename",
            "general.size_label",
            "tokenizer.ggml.model",
        ] {
            if let Ok(Some(s)) = md.get_str(k) {
                put(k.into(), json!(s));
            }
        }
        // The checked hyperparameters under GGUF's key names (what Ollama reads from the file).
        let a = |k: &str| format!("{arch}.{k}");
        put(a("context_length"), json!(h.n_ctx_train));
        put(a("embedding_length"), json!(h.n_embd));
        put(a("block_count"), json!(h.n_layer));
        put(a("feed_forward_length"), json!(h.n_ff));
        put(a("attention.head_count"), json!(h.n_head));
        put(a("attention.head_count_kv"), json!(h.n_head_kv));
        put(a("attention.key_length"), json!(h.head_dim));
        put(a("attention.value_length"), json!(h.head_dim_v));
        put(a("attention.layer_norm_rms_epsilon"), json!(h.rms_eps));
        put(a("rope.freq_base"), json!(h.rope.base));
        put(a("rope.dimension_count"), json!(h.rope.n_rot));
        put(a("vocab_size"), json!(h.n_vocab));
        if let Some(w) = h.sliding_window {
            put(a("attention.sliding_window"), json!(w));
        }
        let template = md.get_str("tokenizer.chat_template").ok().flatten().map(str::to_string);
        let mut capabilities = vec!["completion"];
        if template.as_deref().is_some_and(|t| t.contains("tools")) {
            capabilities.push("tools");
        }
        let modified = std::fs::metadata(path)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_secs());
        let path_s = path.display().to_string();
        // Not the file's sha256 (a pass over gigabytes): a stable digest of where it is, its
        // size and its mtime, which changes when the file does.
        let digest = cheap_digest(&[
            path_s.as_bytes(),
            &model.file_bytes.to_le_bytes(),
            &modified.to_le_bytes(),
        ]);
        let s = engine.session();
        let resident_bytes = model.weight_bytes() + s.kv_bytes() as u64;
        ModelFacts {
            name: format!("{model_id}:latest"),
            path: path_s,
            file_bytes: model.file_bytes,
            modified,
            digest,
            details,
            model_info: Value::Object(info),
            template,
            license: md.get_str("general.license").ok().flatten().map(str::to_string),
            capabilities,
            n_ctx: s.n_ctx(),
            resident_bytes,
            vram_bytes: if s.backend_name == "cpu" { 0 } else { resident_bytes },
        }
    }
}

/// llama.cpp's `llama_ftype` names (`general.file_type`), as Ollama prints them.
fn ftype_name(t: u64) -> Option<&'static str> {
    Some(match t {
        0 => "F32",
        1 => "F16",
        2 => "Q4_0",
        3 => "Q4_1",
        7 => "Q8_0",
        8 => "Q5_0",
        9 => "Q5_1",
        10 => "Q2_K",
        11 => "Q3_K_S",
        12 => "Q3_K_M",
        13 => "Q3_K_L",
        14 => "Q4_K_S",
        15 => "Q4_K_M",
        16 => "Q5_K_S",
        17 => "Q5_K_M",
        18 => "Q6_K",
        19 => "IQ2_XXS",
        20 => "IQ2_XS",
        21 => "Q2_K_S",
        22 => "IQ3_XS",
        23 => "IQ3_XXS",
        24 => "IQ1_S",
        25 => "IQ4_NL",
        26 => "IQ3_S",
        27 => "IQ3_M",
        28 => "IQ2_S",
        29 => "IQ2_M",
        30 => "IQ4_XS",
        31 => "IQ1_M",
        32 => "BF16",
        36 => "TQ1_0",
        37 => "TQ2_0",
        38 => "MXFP4_MOE",
        _ => return None,
    })
}

/// The qtype holding the most weight bytes (no `general.file_type`: safetensors, old GGUFs).
fn dominant_qtype(engine: &Engine) -> String {
    let mut by: Vec<(&'static str, u64)> = Vec::new();
    for t in engine.model().weights.values() {
        let n = t.data.len() as u64;
        match by.iter_mut().find(|(q, _)| *q == t.qtype.name()) {
            Some((_, b)) => *b += n,
            None => by.push((t.qtype.name(), n)),
        }
    }
    by.iter()
        .max_by_key(|(_, b)| *b)
        .map_or_else(|| "unknown".into(), |(q, _)| q.to_ascii_uppercase())
}

/// Ollama's `format.HumanNumber`: 134515008 → "135M", 494032768 → "494M", 1.5e9 → "1.50B".
fn human_number(n: u64) -> String {
    let place = |x: f64| match x {
        x if x >= 100.0 => format!("{x:.0}"),
        x if x >= 10.0 => format!("{x:.1}"),
        x => format!("{x:.2}"),
    };
    let n = n as f64;
    match n {
        n if n >= 1e12 => format!("{}T", place(n / 1e12)),
        n if n >= 1e9 => format!("{}B", place(n / 1e9)),
        n if n >= 1e6 => format!("{}M", place(n / 1e6)),
        n if n >= 1e3 => format!("{}K", place(n / 1e3)),
        n => format!("{n}"),
    }
}

/// 64 hex digits (the width of Ollama's sha256 digests): FNV-1a 64 over the parts, four
/// times with the lane number first.
fn cheap_digest(parts: &[&[u8]]) -> String {
    (0u8..4)
        .map(|lane| {
            let mut h: u64 = 0xcbf2_9ce4_8422_2325;
            for b in std::iter::once(&lane).chain(parts.iter().flat_map(|p| p.iter())) {
                h ^= u64::from(*b);
                h = h.wrapping_mul(0x0000_0100_0000_01b3);
            }
            format!("{h:016x}")
        })
        .collect()
}

/// RFC 3339 in UTC with nanoseconds, as Go's `time.Time` marshals (days to civil date:
/// Howard Hinnant's `civil_from_days`).
pub(super) fn rfc3339(secs: u64, nanos: u32) -> String {
    let days = (secs / 86_400) as i64;
    let sod = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{nanos:09}Z",
        sod / 3600,
        sod % 3600 / 60,
        sod % 60
    )
}

pub(super) fn now_rfc3339() -> String {
    let d = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    rfc3339(d.as_secs(), d.subsec_nanos())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_matches_the_calendar() {
        assert_eq!(rfc3339(0, 0), "1970-01-01T00:00:00.000000000Z");
        assert_eq!(rfc3339(951_782_400, 5), "2000-02-29T00:00:00.000000005Z");
        assert_eq!(rfc3339(1_764_610_271, 0), "2025-12-01T17:31:11.000000000Z");
    }

    #[test]
    fn human_number_is_ollamas() {
        assert_eq!(human_number(134_515_008), "135M");
        assert_eq!(human_number(494_032_768), "494M");
        assert_eq!(human_number(1_543_714_304), "1.54B");
        assert_eq!(human_number(26_800_000_000), "26.8B");
        assert_eq!(human_number(999), "999");
    }

    #[test]
    fn cheap_digest_is_stable_and_wide() {
        let a = cheap_digest(&[b"/m.gguf", &7u64.to_le_bytes()]);
        assert_eq!(a.len(), 64);
        assert_eq!(a, cheap_digest(&[b"/m.gguf", &7u64.to_le_bytes()]));
        assert_ne!(a, cheap_digest(&[b"/m.gguf", &8u64.to_le_bytes()]));
    }
}
