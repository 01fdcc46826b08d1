//! Ollama's API (docs/api.md of ollama/ollama), for the desktop apps that speak only that:
//! `GET|HEAD /`, `GET /api/version`, `GET /api/tags`, `POST /api/show`, `GET /api/ps`,
//! `POST /api/chat` and `POST /api/generate` (streamed as NDJSON by default, the last line
//! `"done": true` with its timings in nanoseconds).
//!
//! One model is loaded; a request naming another is served by it and its answer names the
//! loaded one. Errors are Ollama's `{"error": "message"}` with the status the OpenAI side
//! would give (400 naming the field, 413, 401, 429 with `Retry-After`, 503 while loading).

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
use minfer::constrain::ConstraintSpec;
use minfer::engine::{GenerateOptions, StopReason};
use minfer::sampling::SamplerConfig;
use minfer::sched::{Event, Finished, Prompt, Request, Ticket};

use super::params;
use super::telemetry::Clock;
use super::{authorize, body_json, served, App, Place, Reject, Served};

mod facts;
pub(crate) use facts::ModelFacts;
use facts::{now_rfc3339, rfc3339};

/// The Ollama release whose API these endpoints follow; clients gate features on it.
const OLLAMA_VERSION: &str = "0.12.0";

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

/// `format` (`"json"` or a JSON schema) as a constraint on the output, enforced while
/// generating.
fn format_constraint(format: Option<&Value>) -> Result<Option<ConstraintSpec>, Reject> {
    params::ollama_format(format).map_err(bad)
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

/// `think` (a thinking mode, `true` or a level) is refused where asked for: these
/// templates have none; `false` is what every answer does anyway.
fn no_thinking(m: &Map<String, Value>) -> Result<(), Reject> {
    match m.get("think") {
        None | Some(Value::Null) | Some(Value::Bool(false)) => Ok(()),
        Some(v) => Err(bad(format!("think: {v}: this model has no thinking mode"))),
    }
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
        let constraint = format_constraint(m.get("format"))?;
        no_thinking(&m)?;
        let opts = GenerateOptions {
            constraint,
            ..options(&m, s.n_ctx)?
        };
        Ok((out, opts, stream_flag(&m)?))
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
        if text_field(&m, "suffix")?.is_some() {
            return Err(bad("suffix (fill-in-the-middle) is not supported"));
        }
        if raw && system.is_some() {
            return Err(bad("system has no effect with raw: true (no template is applied)"));
        }
        let constraint = format_constraint(m.get("format"))?;
        no_thinking(&m)?;
        let opts = GenerateOptions {
            constraint,
            ..options(&m, s.n_ctx)?
        };
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
        StopReason::MaxTokens | StopReason::ContextFull | StopReason::Callback => "length",
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
        let secs = |s: f64| ns(Duration::try_from_secs_f64(s).unwrap_or_default());
        let load = self
            .started
            .map_or(Duration::ZERO, |s| s.saturating_duration_since(self.t0));
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
    mut opts: GenerateOptions,
    stream: bool,
    kind: Kind,
) -> Response {
    let t0 = Instant::now();
    s.speculative.set(&mut opts);
    let place = match Place::take(app) {
        Ok(p) => p,
        Err(r) => return reshape(r).await,
    };
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Event>();
    let mut clock = Clock::start();
    let ticket = s.runner.submit_sink(Request { prompt, opts }, move |e| {
        clock.observe(&e);
        tx.send(e).is_ok()
    });
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
