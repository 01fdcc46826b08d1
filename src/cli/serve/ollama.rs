//! Ollama's API (docs/api.md of ollama/ollama), for the desktop apps that speak only that:
//! `GET|HEAD /`, `GET /api/version`, `GET /api/tags`, `POST /api/show`, `GET /api/ps`,
//! `POST /api/chat` and `POST /api/generate` (streamed as NDJSON by default, the last line
//! `"done": true` with its timings in nanoseconds).
//!
//! One model is loaded; a request naming another is served by it and its answer names the
//! loaded one. Errors are Ollama's `{"error": "message"}` with the status the OpenAI side
//! would give (400 naming the field, 413, 401, 429 with `Retry-After`, 503 while loading).

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use minfer::chat::ChatMessage;
use minfer::engine::{Engine, GenerateOptions, StopReason};
use minfer::sampling::SamplerConfig;
use minfer::sched::{Event, Finished, Prompt, Request, Ticket};

use super::{authorize, body_json, served, App, Place, Reject, Served};

/// The Ollama release whose API these endpoints follow; clients gate features on it.
const OLLAMA_VERSION: &str = "0.12.0";

/// What `/api/tags`, `/api/show` and `/api/ps` say about the loaded model, gathered once at
/// load (the file's metadata; no pass over its bytes).
pub(crate) struct ModelFacts {
    /// Ollama's `name:tag`: the file stem, tag `latest`.
    name: String,
    path: String,
    file_bytes: u64,
    /// The file's mtime, seconds since the epoch (0 where there is no one file).
    modified: u64,
    digest: String,
    details: Value,
    model_info: Value,
    template: Option<String>,
    license: Option<String>,
    capabilities: Vec<&'static str>,
    n_ctx: usize,
    /// Weights plus KV cache, and how much of it is on a GPU.
    resident_bytes: u64,
    vram_bytes: u64,
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
        let s = &engine.session;
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
fn rfc3339(secs: u64, nanos: u32) -> String {
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

fn now_rfc3339() -> String {
    let d = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    rfc3339(d.as_secs(), d.subsec_nanos())
}

/// An error in Ollama's shape.
fn oerr(status: StatusCode, message: impl Into<String>) -> Response {
    (status, axum::Json(json!({"error": message.into()}))).into_response()
}

fn bad(message: impl Into<String>) -> Reject {
    Box::new(oerr(StatusCode::BAD_REQUEST, message))
}

/// A refusal from the shared helpers (OpenAI's shape) in Ollama's: the same status and
/// headers (`Retry-After`), `{"error": message}`.
async fn reshape(r: Reject) -> Response {
    let (parts, body) = r.into_parts();
    let bytes = axum::body::to_bytes(body, 1 << 16).await.unwrap_or_default();
    let message = serde_json::from_slice::<Value>(&bytes)
        .ok()
        .and_then(|v| v["error"]["message"].as_str().map(str::to_string))
        .unwrap_or_else(|| parts.status.to_string());
    let mut out = oerr(parts.status, message);
    for (k, v) in parts
        .headers
        .iter()
        .filter(|(k, _)| *k != header::CONTENT_TYPE && *k != header::CONTENT_LENGTH)
    {
        out.headers_mut().insert(k.clone(), v.clone());
    }
    out
}

/// Authorization, the loaded model and the body as a JSON object, or the answer saying why not.
async fn prelude<'a>(
    app: &'a App,
    headers: &HeaderMap,
    body: Body,
) -> Result<(&'a Served, Map<String, Value>), Reject> {
    if let Err(r) = authorize(app, headers) {
        return Err(Box::new(reshape(r).await));
    }
    let s = match served(app) {
        Ok(s) => s,
        Err(r) => return Err(Box::new(reshape(r).await)),
    };
    match body_json::<Value>(headers, body).await {
        Ok(Value::Object(m)) => Ok((s, m)),
        Ok(v) => Err(bad(format!("the body must be a JSON object, not {v}"))),
        Err(r) => Err(Box::new(reshape(r).await)),
    }
}

/// Field `name` of the body as `T`; absent or null is `None`; a wrong type is a 400 naming it.
fn field<T: DeserializeOwned>(m: &Map<String, Value>, name: &str) -> Result<Option<T>, Reject> {
    match m.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => T::deserialize(v).map(Some).map_err(|e| bad(format!("{name}: {e}"))),
    }
}

/// A string field where Go clients send `""` for "not given".
fn text_field(m: &Map<String, Value>, name: &str) -> Result<Option<String>, Reject> {
    Ok(field::<String>(m, name)?.filter(|s| !s.is_empty()))
}

pub(super) async fn not_found(uri: axum::http::Uri) -> Response {
    oerr(StatusCode::NOT_FOUND, format!("no route {}", uri.path()))
}

pub(super) async fn root() -> &'static str {
    "Ollama is running"
}

pub(super) async fn version() -> Response {
    axum::Json(json!({"version": OLLAMA_VERSION, "minfer": env!("CARGO_PKG_VERSION")})).into_response()
}

fn facts(app: &App) -> Result<&ModelFacts, Reject> {
    app.served
        .get()
        .map(|s| &s.facts)
        .ok_or_else(|| Box::new(oerr(StatusCode::SERVICE_UNAVAILABLE, "the model is loading")))
}

pub(super) async fn tags(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    if let Err(r) = authorize(&app, &headers) {
        return reshape(r).await;
    }
    let f = match facts(&app) {
        Ok(f) => f,
        Err(r) => return *r,
    };
    axum::Json(json!({"models": [{
        "name": f.name,
        "model": f.name,
        "modified_at": rfc3339(f.modified, 0),
        "size": f.file_bytes,
        "digest": f.digest,
        "details": f.details,
    }]}))
    .into_response()
}

pub(super) async fn ps(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    if let Err(r) = authorize(&app, &headers) {
        return reshape(r).await;
    }
    let f = match facts(&app) {
        Ok(f) => f,
        Err(r) => return *r,
    };
    // Loaded for as long as the server runs: `keep_alive` never unloads it.
    let forever = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs()
        + 100 * 365 * 86_400;
    axum::Json(json!({"models": [{
        "name": f.name,
        "model": f.name,
        "size": f.resident_bytes,
        "digest": f.digest,
        "details": f.details,
        "expires_at": rfc3339(forever, 0),
        "size_vram": f.vram_bytes,
        "context_length": f.n_ctx,
    }]}))
    .into_response()
}

pub(super) async fn show(State(app): State<Arc<App>>, headers: HeaderMap, body: Body) -> Response {
    let (s, _m) = match prelude(&app, &headers, body).await {
        Ok(v) => v,
        Err(r) => return *r,
    };
    let f = &s.facts;
    let d = SamplerConfig::default();
    // Our defaults (llama.cpp's), in Modelfile `PARAMETER` lines.
    let parameters = format!(
        "temperature {}\ntop_k {}\ntop_p {}\nmin_p {}\nrepeat_penalty {}\nrepeat_last_n {}",
        d.temperature, d.top_k, d.top_p, d.min_p, d.repeat_penalty, d.penalty_last_n
    );
    axum::Json(json!({
        "license": f.license.clone().unwrap_or_default(),
        "modelfile": format!("FROM {}\n", f.path),
        "parameters": parameters,
        "template": f.template.clone().unwrap_or_default(),
        "details": f.details,
        "model_info": f.model_info,
        "capabilities": f.capabilities,
        "modified_at": rfc3339(f.modified, 0),
    }))
    .into_response()
}

/// `format` (`"json"` or a JSON schema) as a constraint on the output; none yet, so any
/// format asked for is refused rather than ignored.
fn format_constraint(format: Option<&Value>) -> Result<(), Reject> {
    match format {
        None | Some(Value::Null) => Ok(()),
        Some(Value::String(s)) if s.is_empty() => Ok(()),
        Some(_) => Err(bad("format is not supported yet")),
    }
}

/// Ollama's `options` as our generation options. Unknown keys and those without a meaning
/// here (`num_ctx`, `num_gpu`, `mirostat`, …) are ignored, as Ollama ignores unknown ones.
fn options(m: &Map<String, Value>, n_ctx: usize) -> Result<GenerateOptions, Reject> {
    let o = match m.get("options") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(o)) => o.clone(),
        Some(v) => return Err(bad(format!("options must be an object, not {v}"))),
    };
    let num = |k: &str| -> Result<Option<f32>, Reject> {
        match o.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v
                .as_f64()
                .map(|x| Some(x as f32))
                .ok_or_else(|| bad(format!("option \"{k}\" must be a number, not {v}"))),
        }
    };
    // Whole numbers; a fractional one is truncated, as Ollama's `Options.FromMap` does.
    let int = |k: &str| -> Result<Option<i64>, Reject> {
        match o.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v
                .as_i64()
                .or_else(|| v.as_f64().filter(|x| x.is_finite()).map(|x| x as i64))
                .map(Some)
                .ok_or_else(|| bad(format!("option \"{k}\" must be an integer, not {v}"))),
        }
    };
    let d = SamplerConfig::default();
    let sampler = SamplerConfig {
        temperature: num("temperature")?.unwrap_or(d.temperature),
        top_k: int("top_k")?.map_or(d.top_k, |k| k.max(0) as usize),
        top_p: num("top_p")?.unwrap_or(d.top_p),
        min_p: num("min_p")?.unwrap_or(d.min_p),
        repeat_penalty: num("repeat_penalty")?.unwrap_or(d.repeat_penalty),
        presence_penalty: num("presence_penalty")?.unwrap_or(d.presence_penalty),
        frequency_penalty: num("frequency_penalty")?.unwrap_or(d.frequency_penalty),
        // -1: the whole context.
        penalty_last_n: int("repeat_last_n")?.map_or(d.penalty_last_n, |n| if n < 0 { n_ctx } else { n as usize }),
        // A negative seed is Ollama's "random".
        seed: int("seed")?.and_then(|s| u64::try_from(s).ok()),
    };
    if let Err(e) = sampler.validate() {
        return Err(bad(format!("options: {e}")));
    }
    // -1 (unlimited), -2 (fill the context) and 0 (unset) all run to the context's end.
    let max_tokens = match int("num_predict")? {
        Some(n) if n > 0 => (n as usize).min(n_ctx),
        _ => n_ctx,
    };
    let stop = match o.get("stop") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) => vec![s.clone()],
        Some(v) => Vec::<String>::deserialize(v)
            .map_err(|_| bad(format!("option \"stop\" must be an array of strings, not {v}")))?,
    };
    if let Some(k) = m.get("keep_alive") {
        if !(k.is_string() || k.is_number() || k.is_null()) {
            return Err(bad(format!(
                "keep_alive must be a duration (\"5m\") or seconds, not {k}"
            )));
        }
    }
    Ok(GenerateOptions {
        max_tokens,
        sampler,
        stop,
        ..GenerateOptions::default()
    })
}

fn stream_flag(m: &Map<String, Value>) -> Result<bool, Reject> {
    Ok(field::<bool>(m, "stream")?.unwrap_or(true))
}

fn no_images(images: Option<Vec<Value>>, name: &str) -> Result<(), Reject> {
    match images {
        Some(v) if !v.is_empty() => Err(bad(format!("{name}: images are not supported (text models only)"))),
        _ => Ok(()),
    }
}

#[derive(Deserialize)]
struct Message {
    role: String,
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    images: Option<Vec<Value>>,
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Chat,
    Generate,
}

pub(super) async fn chat(State(app): State<Arc<App>>, headers: HeaderMap, body: Body) -> Response {
    let (s, m) = match prelude(&app, &headers, body).await {
        Ok(v) => v,
        Err(r) => return *r,
    };
    let parsed = (|| {
        let msgs = field::<Vec<Message>>(&m, "messages")?.unwrap_or_default();
        let mut out = Vec::with_capacity(msgs.len());
        for (i, msg) in msgs.into_iter().enumerate() {
            no_images(msg.images, &format!("messages[{i}]"))?;
            out.push(ChatMessage::new(msg.role, msg.content.unwrap_or_default()));
        }
        if field::<Vec<Value>>(&m, "tools")?.is_some_and(|t| !t.is_empty()) {
            return Err(bad("tools are not supported on /api/chat yet"));
        }
        format_constraint(m.get("format"))?;
        Ok((out, options(&m, s.n_ctx)?, stream_flag(&m)?))
    })();
    let (msgs, opts, stream) = match parsed {
        Ok(v) => v,
        Err(r) => return *r,
    };
    if msgs.is_empty() {
        return loaded(&s.facts, Kind::Chat);
    }
    answer(&app, s, Prompt::Messages(msgs), opts, stream, Kind::Chat).await
}

pub(super) async fn generate(State(app): State<Arc<App>>, headers: HeaderMap, body: Body) -> Response {
    let (s, m) = match prelude(&app, &headers, body).await {
        Ok(v) => v,
        Err(r) => return *r,
    };
    let parsed = (|| {
        let prompt = field::<String>(&m, "prompt")?.unwrap_or_default();
        let system = text_field(&m, "system")?;
        let raw = field::<bool>(&m, "raw")?.unwrap_or(false);
        no_images(field::<Vec<Value>>(&m, "images")?, "images")?;
        if text_field(&m, "template")?.is_some() {
            return Err(bad("template: a template other than the model's own is not supported"));
        }
        if field::<Vec<Value>>(&m, "context")?.is_some_and(|c| !c.is_empty()) {
            return Err(bad("context is not supported; send the conversation to /api/chat"));
        }
        if raw && system.is_some() {
            return Err(bad("system has no effect with raw: true (no template is applied)"));
        }
        format_constraint(m.get("format"))?;
        let opts = options(&m, s.n_ctx)?;
        let stream = stream_flag(&m)?;
        let p = if prompt.is_empty() {
            None
        } else if raw {
            Some(Prompt::Text(prompt))
        } else {
            let mut msgs: Vec<ChatMessage> = system.into_iter().map(|s| ChatMessage::new("system", s)).collect();
            msgs.push(ChatMessage::new("user", prompt));
            Some(Prompt::Messages(msgs))
        };
        Ok((p, opts, stream))
    })();
    match parsed {
        Err(r) => *r,
        // An empty prompt is the "load the model" call: it is loaded.
        Ok((None, _, _)) => loaded(&s.facts, Kind::Generate),
        Ok((Some(p), opts, stream)) => answer(&app, s, p, opts, stream, Kind::Generate).await,
    }
}

fn loaded(f: &ModelFacts, kind: Kind) -> Response {
    let mut v = json!({"model": f.name, "created_at": now_rfc3339(), "done": true, "done_reason": "load"});
    match kind {
        Kind::Chat => v["message"] = json!({"role": "assistant", "content": ""}),
        Kind::Generate => v["response"] = json!(""),
    }
    axum::Json(v).into_response()
}

fn done_reason(r: StopReason) -> &'static str {
    match r {
        StopReason::MaxTokens | StopReason::ContextFull => "length",
        _ => "stop",
    }
}

/// One answer object: a piece of text (`done: false`) or, with `end`, the last one.
struct Lines {
    model: String,
    kind: Kind,
    t0: Instant,
    /// When the request was admitted (its wait, Ollama's `load_duration`).
    started: Option<Instant>,
}

impl Lines {
    fn piece(&self, text: &str) -> Value {
        let mut v = json!({"model": self.model, "created_at": now_rfc3339(), "done": false});
        match self.kind {
            Kind::Chat => v["message"] = json!({"role": "assistant", "content": text}),
            Kind::Generate => v["response"] = json!(text),
        }
        v
    }

    fn end(&self, text: &str, f: &Finished) -> Value {
        let ns = |d: Duration| d.as_nanos() as u64;
        let secs = |s: f64| ns(Duration::from_secs_f64(s.max(0.0)));
        let load = self.started.map_or(Duration::ZERO, |s| s - self.t0);
        let mut v = self.piece(text);
        let u = &f.usage;
        v["done"] = json!(true);
        v["done_reason"] = json!(done_reason(f.reason));
        v["total_duration"] = json!(ns(self.t0.elapsed()));
        v["load_duration"] = json!(ns(load));
        v["prompt_eval_count"] = json!(u.prompt_tokens);
        v["prompt_eval_duration"] = json!(secs(u.prefill_secs));
        v["eval_count"] = json!(u.completion_tokens);
        v["eval_duration"] = json!(secs(u.decode_secs));
        v
    }
}

/// Submits the request and answers it: NDJSON lines, or one object.
async fn answer(
    app: &Arc<App>,
    s: &Served,
    prompt: Prompt,
    opts: GenerateOptions,
    stream: bool,
    kind: Kind,
) -> Response {
    let t0 = Instant::now();
    let place = match Place::take(app) {
        Ok(p) => p,
        Err(r) => return reshape(r).await,
    };
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Event>();
    let ticket = s
        .runner
        .submit_sink(Request { prompt, opts }, move |e| tx.send(e).is_ok());
    let mut lines = Lines {
        model: s.facts.name.clone(),
        kind,
        t0,
        started: None,
    };
    let stopped = || oerr(StatusCode::SERVICE_UNAVAILABLE, "the scheduler stopped");
    // The first event decides the status: an error before any token is the request's fault.
    let first = match rx.recv().await {
        Some(Event::Error(e)) => return *bad(e),
        Some(e) => e,
        None => return stopped(),
    };
    if !stream {
        let mut text = String::new();
        let mut ev = Some(first);
        loop {
            let e = match ev.take() {
                Some(e) => e,
                None => match rx.recv().await {
                    Some(e) => e,
                    None => return stopped(),
                },
            };
            match e {
                Event::Started { .. } => lines.started = Some(Instant::now()),
                Event::Token { text: t, .. } => text.push_str(&t),
                Event::Error(e) => return oerr(StatusCode::INTERNAL_SERVER_ERROR, e),
                Event::Done(f) => {
                    text.push_str(&f.rest);
                    drop((ticket, place));
                    return axum::Json(lines.end(&text, &f)).into_response();
                }
            }
        }
    }
    // The stream owns the ticket and the place: when the client goes, both go.
    struct St {
        rx: tokio::sync::mpsc::UnboundedReceiver<Event>,
        first: Option<Event>,
        lines: Lines,
        done: bool,
        _hold: (Ticket, Place),
    }
    let st = St {
        rx,
        first: Some(first),
        lines,
        done: false,
        _hold: (ticket, place),
    };
    let line = |v: Value| Ok::<_, std::convert::Infallible>(Bytes::from(format!("{v}\n")));
    let body = futures_util::stream::unfold(st, move |mut st| async move {
        loop {
            if st.done {
                return None;
            }
            let e = match st.first.take() {
                Some(e) => e,
                None => match st.rx.recv().await {
                    Some(e) => e,
                    None => {
                        st.done = true;
                        return Some((line(json!({"error": "the scheduler stopped"})), st));
                    }
                },
            };
            match e {
                Event::Started { .. } => st.lines.started = Some(Instant::now()),
                Event::Token { text, .. } if text.is_empty() => {}
                Event::Token { text, .. } => return Some((line(st.lines.piece(&text)), st)),
                Event::Error(e) => {
                    st.done = true;
                    return Some((line(json!({"error": e})), st));
                }
                Event::Done(f) => {
                    st.done = true;
                    return Some((line(st.lines.end(&f.rest, &f)), st));
                }
            }
        }
    });
    (
        [(header::CONTENT_TYPE, "application/x-ndjson")],
        Body::from_stream(body),
    )
        .into_response()
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

    #[test]
    fn options_map_and_name_bad_types() {
        let m = |v: Value| v.as_object().cloned().unwrap();
        let o = options(
            &m(json!({"options": {"temperature": 0, "top_k": 5, "num_predict": -1, "stop": ["x"], "repeat_last_n": -1, "seed": 3, "num_ctx": 4096, "whatever": true}})),
            512,
        )
        .ok()
        .unwrap();
        assert_eq!(o.sampler.temperature, 0.0);
        assert_eq!(o.sampler.top_k, 5);
        assert_eq!(o.max_tokens, 512);
        assert_eq!(o.stop, vec!["x".to_string()]);
        assert_eq!(o.sampler.penalty_last_n, 512);
        assert_eq!(o.sampler.seed, Some(3));
        let o = options(&m(json!({"options": {"num_predict": 24}})), 512).ok().unwrap();
        assert_eq!(o.max_tokens, 24);
        assert!(options(&m(json!({"options": {"temperature": "hot"}})), 512).is_err());
        assert!(options(&m(json!({"options": {"top_k": "5"}})), 512).is_err());
        assert!(options(&m(json!({"options": [1]})), 512).is_err());
        assert!(options(&m(json!({"options": {"top_p": 2.0}})), 512).is_err());
    }
}
