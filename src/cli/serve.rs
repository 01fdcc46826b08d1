//! `minfer-wgpu serve`: an OpenAI-compatible HTTP server on the library's scheduler.
//!
//! The model runs on the scheduler's own thread (continuous batching over `--parallel`
//! sequences that share one KV pool, so any sequence may use the whole context); HTTP runs on
//! a small tokio runtime. Each request holds a ticket whose drop — the client gone, for a
//! streaming or a plain request — cancels it at the next step. Bad input gets OpenAI's error
//! shape (`{"error":{"message","type","param","code"}}`) with its status, never a 500.
//!
//! Endpoints: `POST /v1/chat/completions`, `POST /v1/completions` (both streaming as SSE),
//! `GET /v1/models`, `GET /health` (503 while loading), `GET /metrics` (Prometheus text),
//! `POST /tokenize`, `POST /detokenize`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, Result};
use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde::Deserialize;
use serde_json::{json, Value};

use minfer::chat::ChatMessage;
use minfer::engine::{Engine, GenerateOptions, StopReason};
use minfer::sampling::SamplerConfig;
use minfer::sched::{Event, Finished, Prompt, Request, Runner, Scheduler, SchedulerOptions, Stats};
use minfer::tokenizer::Tokenizer;
use minfer::SessionOptions;

pub struct ServeArgs {
    pub model: PathBuf,
    pub host: String,
    pub port: u16,
    pub parallel: usize,
    pub api_key: Option<String>,
    pub cors: Vec<String>,
    pub max_queue: usize,
    pub session: SessionOptions,
    pub flash_attn: bool,
}

/// Request bodies beyond this are refused with 413.
const MAX_BODY: usize = 8 << 20;

/// What the handlers share. `served` is set once the model is loaded.
struct App {
    served: OnceLock<Served>,
    api_key: Option<String>,
    model_id: String,
    /// Requests admitted and not finished (running or queued), against `capacity`.
    in_flight: AtomicUsize,
    capacity: usize,
    next_id: AtomicUsize,
}

struct Served {
    runner: Runner,
    stats: Arc<Stats>,
    tokenizer: Arc<Tokenizer>,
    n_ctx: usize,
}

pub fn run(a: ServeArgs) -> Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the HTTP runtime")?;
    rt.block_on(serve(a))
}

async fn serve(a: ServeArgs) -> Result<()> {
    let addr: SocketAddr = format!("{}:{}", a.host, a.port)
        .parse()
        .with_context(|| format!("--host {} --port {}: not an address", a.host, a.port))?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding {addr}"))?;
    let model_id = a
        .model
        .file_stem()
        .map(|s| s.to_string_lossy().to_string())
        .unwrap_or_else(|| "model".into());
    let app = Arc::new(App {
        served: OnceLock::new(),
        api_key: a.api_key.clone(),
        model_id,
        in_flight: AtomicUsize::new(0),
        capacity: a.parallel + a.max_queue,
        next_id: AtomicUsize::new(1),
    });
    // Listening first, so that /health says 503 while the model loads.
    eprintln!("listening on http://{}", listener.local_addr()?);
    {
        let app = app.clone();
        tokio::task::spawn_blocking(move || {
            if let Err(e) = load(&app, a.model, &a.session, a.flash_attn, a.parallel) {
                eprintln!("error: {e:#}");
                std::process::exit(1);
            }
        });
    }
    let mut router = Router::new()
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .route("/v1/models", get(models))
        .route("/v1/chat/completions", post(chat))
        .route("/v1/completions", post(completions))
        .route("/v1/embeddings", post(embeddings))
        .route("/tokenize", post(tokenize))
        .route("/detokenize", post(detokenize))
        .fallback(not_found)
        .with_state(app.clone());
    if !a.cors.is_empty() {
        let origins: Vec<HeaderValue> = a
            .cors
            .iter()
            .map(|o| HeaderValue::from_str(o).with_context(|| format!("--cors {o}: not a header value")))
            .collect::<Result<_>>()?;
        router = router.layer(
            tower_http::cors::CorsLayer::new()
                .allow_origin(origins)
                .allow_methods([Method::GET, Method::POST])
                .allow_headers([header::CONTENT_TYPE, header::AUTHORIZATION]),
        );
    }
    axum::serve(listener, router)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
        .context("serving")
}

/// Loads the model and starts its scheduler; from then on the handlers serve.
fn load(app: &App, model: PathBuf, session: &SessionOptions, flash_attn: bool, parallel: usize) -> Result<()> {
    let mut engine = Engine::load(&model, session).with_context(|| format!("loading {}", model.display()))?;
    engine.session.set_flash_attn(flash_attn);
    for line in &engine.session.log {
        eprintln!("{line}");
    }
    let n_ctx = engine.session.n_ctx();
    let sched = Scheduler::from_engine(
        engine,
        SchedulerOptions {
            max_seqs: parallel,
            step_tokens: 0,
            keep_finished: parallel,
        },
    )?;
    let tokenizer = sched.tokenizer().clone();
    let stats = sched.stats();
    let runner = sched.spawn();
    let _ = app.served.set(Served {
        runner,
        stats,
        tokenizer,
        n_ctx,
    });
    eprintln!("ready: {parallel} sequences, context {n_ctx}");
    Ok(())
}

/// An error in OpenAI's shape.
fn error(status: StatusCode, message: impl Into<String>, param: Option<&str>) -> Response {
    let kind = match status {
        StatusCode::UNAUTHORIZED => "authentication_error",
        StatusCode::NOT_FOUND => "not_found_error",
        StatusCode::PAYLOAD_TOO_LARGE | StatusCode::BAD_REQUEST => "invalid_request_error",
        StatusCode::TOO_MANY_REQUESTS => "rate_limit_error",
        StatusCode::SERVICE_UNAVAILABLE => "unavailable_error",
        StatusCode::NOT_IMPLEMENTED => "not_implemented_error",
        _ => "server_error",
    };
    let body = json!({"error": {"message": message.into(), "type": kind, "param": param, "code": status.as_u16()}});
    (status, axum::Json(body)).into_response()
}

/// A refusal on its way out of a helper (boxed: a response is large).
type Reject = Box<Response>;

fn reject(message: impl Into<String>, param: &str) -> Reject {
    Box::new(bad(message, param))
}

fn bad(message: impl Into<String>, param: &str) -> Response {
    error(StatusCode::BAD_REQUEST, message, Some(param))
}

async fn not_found(uri: axum::http::Uri) -> Response {
    error(StatusCode::NOT_FOUND, format!("no route {}", uri.path()), None)
}

/// The loaded model, or 503.
fn served(app: &App) -> Result<&Served, Reject> {
    app.served
        .get()
        .ok_or_else(|| Box::new(error(StatusCode::SERVICE_UNAVAILABLE, "the model is loading", None)))
}

/// Checks `Authorization: Bearer KEY` where the server has a key.
fn authorize(app: &App, headers: &HeaderMap) -> Result<(), Reject> {
    let Some(key) = &app.api_key else { return Ok(()) };
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    match given {
        Some(g) if g == key => Ok(()),
        Some(_) => Err(Box::new(error(StatusCode::UNAUTHORIZED, "invalid API key", None))),
        None => Err(Box::new(error(
            StatusCode::UNAUTHORIZED,
            "missing API key (Authorization: Bearer …)",
            None,
        ))),
    }
}

/// The body as `T`: 413 beyond `MAX_BODY` (announced by its length, or found reading it),
/// 400 naming what does not parse.
async fn body_json<T: serde::de::DeserializeOwned>(headers: &HeaderMap, body: Body) -> Result<T, Reject> {
    let too_large = || {
        error(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("request body over {MAX_BODY} bytes"),
            None,
        )
    };
    let announced = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if announced.is_some_and(|n| n > MAX_BODY as u64) {
        return Err(Box::new(too_large()));
    }
    let bytes = axum::body::to_bytes(body, MAX_BODY)
        .await
        .map_err(|_| Box::new(too_large()))?;
    serde_json::from_slice(&bytes).map_err(|e| Box::new(bad(format!("invalid JSON body: {e}"), "body")))
}

async fn health(State(app): State<Arc<App>>) -> Response {
    match app.served.get() {
        Some(_) => axum::Json(json!({"status": "ok"})).into_response(),
        None => (
            StatusCode::SERVICE_UNAVAILABLE,
            axum::Json(json!({"status": "loading"})),
        )
            .into_response(),
    }
}

async fn metrics(State(app): State<Arc<App>>) -> Response {
    let mut rows: Vec<(&str, &str, &str, u64)> = vec![(
        "requests_in_flight",
        "gauge",
        "Requests running or queued.",
        app.in_flight.load(Ordering::Relaxed) as u64,
    )];
    if let Some(s) = app.served.get() {
        let st = &s.stats;
        let g = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        rows.extend([
            ("requests_total", "counter", "Requests submitted.", g(&st.requests)),
            (
                "requests_cancelled_total",
                "counter",
                "Requests cancelled while running.",
                g(&st.cancelled),
            ),
            ("sequences_running", "gauge", "Sequences decoding.", g(&st.running)),
            (
                "requests_waiting",
                "gauge",
                "Requests waiting for a sequence.",
                g(&st.waiting),
            ),
            (
                "kv_cells_used",
                "gauge",
                "KV cells held by sequences (running and kept).",
                g(&st.kv_cells_used),
            ),
            (
                "kv_cells_max",
                "gauge",
                "KV cells the pool may hold.",
                g(&st.kv_cells_max),
            ),
            (
                "prompt_tokens_total",
                "counter",
                "Prompt tokens evaluated.",
                g(&st.prompt_tokens),
            ),
            (
                "prompt_tokens_cached_total",
                "counter",
                "Prompt tokens reused from cached cells.",
                g(&st.cached_tokens),
            ),
            (
                "generated_tokens_total",
                "counter",
                "Tokens generated.",
                g(&st.generated_tokens),
            ),
            ("steps_total", "counter", "Scheduler steps (forwards).", g(&st.steps)),
        ]);
    }
    let out: String = rows
        .iter()
        .map(|(name, kind, help, v)| {
            format!("# HELP minfer_{name} {help}\n# TYPE minfer_{name} {kind}\nminfer_{name} {v}\n")
        })
        .collect();
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out).into_response()
}

async fn models(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    if let Err(r) = authorize(&app, &headers) {
        return *r;
    }
    axum::Json(json!({
        "object": "list",
        "data": [{"id": app.model_id, "object": "model", "created": 0, "owned_by": "minfer"}],
    }))
    .into_response()
}

async fn embeddings(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    if let Err(r) = authorize(&app, &headers) {
        return *r;
    }
    error(
        StatusCode::NOT_IMPLEMENTED,
        format!("{} is a text generation model, not an embedding model", app.model_id),
        None,
    )
}

#[derive(Deserialize)]
struct TokenizeReq {
    content: String,
    #[serde(default = "yes")]
    add_special: bool,
}

fn yes() -> bool {
    true
}

async fn tokenize(State(app): State<Arc<App>>, headers: HeaderMap, body: Body) -> Response {
    let (s, r) = match prelude::<TokenizeReq>(&app, &headers, body).await {
        Ok(v) => v,
        Err(r) => return *r,
    };
    match s.tokenizer.encode(&r.content, r.add_special, true) {
        Ok(t) => axum::Json(json!({"tokens": t})).into_response(),
        Err(e) => bad(e.to_string(), "content"),
    }
}

#[derive(Deserialize)]
struct DetokenizeReq {
    tokens: Vec<u32>,
}

async fn detokenize(State(app): State<Arc<App>>, headers: HeaderMap, body: Body) -> Response {
    let (s, r) = match prelude::<DetokenizeReq>(&app, &headers, body).await {
        Ok(v) => v,
        Err(r) => return *r,
    };
    if let Some(&t) = r.tokens.iter().find(|&&t| t as usize >= s.tokenizer.n_vocab()) {
        return bad(
            format!("token id {t} is outside the vocabulary of {}", s.tokenizer.n_vocab()),
            "tokens",
        );
    }
    match s.tokenizer.decode(&r.tokens, false) {
        Ok(t) => axum::Json(json!({"content": t})).into_response(),
        Err(e) => bad(e.to_string(), "tokens"),
    }
}

/// Authorization, the loaded model and the parsed body, or the response that says why not.
async fn prelude<'a, T: serde::de::DeserializeOwned>(
    app: &'a App,
    headers: &HeaderMap,
    body: Body,
) -> Result<(&'a Served, T), Reject> {
    authorize(app, headers)?;
    let s = served(app)?;
    Ok((s, body_json(headers, body).await?))
}

/// A string or a list of strings (`stop`).
#[derive(Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

/// A message's content: a string, or parts of which only text is taken.
#[derive(Deserialize)]
#[serde(untagged)]
enum Content {
    Text(String),
    Parts(Vec<Part>),
}

#[derive(Deserialize)]
struct Part {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    text: Option<String>,
}

#[derive(Deserialize)]
struct Message {
    role: String,
    #[serde(default)]
    content: Option<Content>,
}

#[derive(Deserialize, Default)]
struct StreamOptions {
    #[serde(default)]
    include_usage: bool,
}

/// The generation parameters both endpoints take (unknown fields are ignored).
#[derive(Deserialize, Default)]
struct Params {
    #[serde(default)]
    stream: bool,
    #[serde(default)]
    stream_options: Option<StreamOptions>,
    max_tokens: Option<u64>,
    max_completion_tokens: Option<u64>,
    temperature: Option<f32>,
    top_p: Option<f32>,
    top_k: Option<i64>,
    min_p: Option<f32>,
    presence_penalty: Option<f32>,
    frequency_penalty: Option<f32>,
    repeat_penalty: Option<f32>,
    seed: Option<u64>,
    stop: Option<OneOrMany>,
    n: Option<u64>,
    #[serde(default)]
    ignore_eos: bool,
    response_format: Option<Value>,
    tools: Option<Vec<Value>>,
    logprobs: Option<bool>,
    logit_bias: Option<serde_json::Map<String, Value>>,
}

#[derive(Deserialize)]
struct ChatReq {
    messages: Vec<Message>,
    #[serde(flatten)]
    p: Params,
}

#[derive(Deserialize)]
struct CompletionReq {
    prompt: OneOrMany,
    #[serde(flatten)]
    p: Params,
}

impl Params {
    /// Our generation options, or a 400 naming the field this server does not take.
    fn options(&self, n_ctx: usize) -> Result<GenerateOptions, Reject> {
        if self.n.is_some_and(|n| n != 1) {
            return Err(reject("n other than 1 is not supported", "n"));
        }
        if let Some(f) = &self.response_format {
            if f.get("type").and_then(Value::as_str) != Some("text") {
                return Err(reject(
                    "response_format other than text is not supported by this server yet",
                    "response_format",
                ));
            }
        }
        if self.tools.as_ref().is_some_and(|t| !t.is_empty()) {
            return Err(reject("tools are not supported by this server yet", "tools"));
        }
        if self.logprobs == Some(true) {
            return Err(reject("logprobs are not supported by this server yet", "logprobs"));
        }
        if self.logit_bias.as_ref().is_some_and(|m| !m.is_empty()) {
            return Err(reject("logit_bias is not supported by this server yet", "logit_bias"));
        }
        let d = SamplerConfig::default();
        let top_k = match self.top_k {
            Some(k) if k < 0 => 0,
            Some(k) => k as usize,
            None => d.top_k,
        };
        let sampler = SamplerConfig {
            temperature: self.temperature.unwrap_or(d.temperature),
            top_k,
            top_p: self.top_p.unwrap_or(d.top_p),
            min_p: self.min_p.unwrap_or(d.min_p),
            repeat_penalty: self.repeat_penalty.unwrap_or(d.repeat_penalty),
            presence_penalty: self.presence_penalty.unwrap_or(d.presence_penalty),
            frequency_penalty: self.frequency_penalty.unwrap_or(d.frequency_penalty),
            seed: self.seed,
            ..d
        };
        if let Err(e) = sampler.validate() {
            return Err(reject(e.to_string(), "temperature"));
        }
        let max = self.max_completion_tokens.or(self.max_tokens);
        let max_tokens = match max {
            Some(0) => return Err(reject("max_tokens must be at least 1", "max_tokens")),
            Some(m) => (m as usize).min(n_ctx),
            None => n_ctx,
        };
        let stop = match &self.stop {
            None => Vec::new(),
            Some(OneOrMany::One(s)) => vec![s.clone()],
            Some(OneOrMany::Many(v)) => v.clone(),
        };
        Ok(GenerateOptions {
            max_tokens,
            sampler,
            stop,
            ignore_eos: self.ignore_eos,
            ..GenerateOptions::default()
        })
    }
}

fn messages(ms: &[Message]) -> Result<Vec<ChatMessage>, Reject> {
    if ms.is_empty() {
        return Err(reject("messages is empty", "messages"));
    }
    ms.iter()
        .enumerate()
        .map(|(i, m)| {
            let content = match &m.content {
                None => String::new(),
                Some(Content::Text(t)) => t.clone(),
                Some(Content::Parts(ps)) => {
                    let mut s = String::new();
                    for p in ps {
                        match (p.kind.as_str(), &p.text) {
                            ("text", Some(t)) => s.push_str(t),
                            (k, _) => {
                                return Err(reject(
                                    format!("messages[{i}]: content part of type '{k}' is not supported (text only)"),
                                    "messages",
                                ))
                            }
                        }
                    }
                    s
                }
            };
            Ok(ChatMessage::new(m.role.as_str(), content))
        })
        .collect()
}

/// Holds a place among the server's requests; the place is given back on drop.
struct Place(Arc<App>);

impl Place {
    fn take(app: &Arc<App>) -> Result<Place, Reject> {
        let n = app.in_flight.fetch_add(1, Ordering::SeqCst);
        if n >= app.capacity {
            app.in_flight.fetch_sub(1, Ordering::SeqCst);
            let mut r = error(
                StatusCode::TOO_MANY_REQUESTS,
                format!("{} requests are running or queued; try again shortly", app.capacity),
                None,
            );
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            return Err(Box::new(r));
        }
        Ok(Place(app.clone()))
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Chat,
    Completion,
}

fn finish_reason(r: StopReason) -> &'static str {
    match r {
        StopReason::MaxTokens | StopReason::ContextFull => "length",
        _ => "stop",
    }
}

fn usage(f: &Finished) -> Value {
    let u = &f.usage;
    json!({
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.prompt_tokens + u.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": u.cached_tokens},
    })
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

async fn chat(State(app): State<Arc<App>>, headers: HeaderMap, body: Body) -> Response {
    let (s, r) = match prelude::<ChatReq>(&app, &headers, body).await {
        Ok(v) => v,
        Err(r) => return *r,
    };
    let msgs = match messages(&r.messages) {
        Ok(m) => m,
        Err(r) => return *r,
    };
    generate(&app, s, Prompt::Messages(msgs), &r.p, Kind::Chat).await
}

async fn completions(State(app): State<Arc<App>>, headers: HeaderMap, body: Body) -> Response {
    let (s, r) = match prelude::<CompletionReq>(&app, &headers, body).await {
        Ok(v) => v,
        Err(r) => return *r,
    };
    let prompt = match r.prompt {
        OneOrMany::One(p) => p,
        OneOrMany::Many(mut v) if v.len() == 1 => v.remove(0),
        OneOrMany::Many(_) => return bad("prompt as a list of more than one string is not supported", "prompt"),
    };
    generate(&app, s, Prompt::Text(prompt), &r.p, Kind::Completion).await
}

/// Submits the request and answers it, streamed or whole.
async fn generate(app: &Arc<App>, s: &Served, prompt: Prompt, p: &Params, kind: Kind) -> Response {
    let opts = match p.options(s.n_ctx) {
        Ok(o) => o,
        Err(r) => return *r,
    };
    let place = match Place::take(app) {
        Ok(p) => p,
        Err(r) => return *r,
    };
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Event>();
    let ticket = s
        .runner
        .submit_sink(Request { prompt, opts }, move |e| tx.send(e).is_ok());
    let n = app.next_id.fetch_add(1, Ordering::Relaxed);
    let id = match kind {
        Kind::Chat => format!("chatcmpl-{n}"),
        Kind::Completion => format!("cmpl-{n}"),
    };
    let model = app.model_id.clone();
    let created = now();
    // The first event decides the status: an error before any token is the request's fault.
    let first = match rx.recv().await {
        Some(Event::Error(e)) => return bad(e, "messages"),
        Some(e) => e,
        None => return error(StatusCode::SERVICE_UNAVAILABLE, "the scheduler stopped", None),
    };
    if !p.stream {
        let mut text = String::new();
        let mut ev = Some(first);
        loop {
            let e = match ev.take() {
                Some(e) => e,
                None => match rx.recv().await {
                    Some(e) => e,
                    None => return error(StatusCode::SERVICE_UNAVAILABLE, "the scheduler stopped", None),
                },
            };
            match e {
                Event::Started { .. } => {}
                Event::Token { text: t, .. } => text.push_str(&t),
                Event::Error(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, e, None),
                Event::Done(f) => {
                    text.push_str(&f.rest);
                    drop((ticket, place));
                    let choice = match kind {
                        Kind::Chat => json!({
                            "index": 0,
                            "message": {"role": "assistant", "content": text},
                            "finish_reason": finish_reason(f.reason),
                        }),
                        Kind::Completion => json!({
                            "index": 0,
                            "text": text,
                            "logprobs": null,
                            "finish_reason": finish_reason(f.reason),
                        }),
                    };
                    let object = if kind == Kind::Chat {
                        "chat.completion"
                    } else {
                        "text_completion"
                    };
                    return axum::Json(json!({
                        "id": id,
                        "object": object,
                        "created": created,
                        "model": model,
                        "choices": [choice],
                        "usage": usage(&f),
                    }))
                    .into_response();
                }
            }
        }
    }
    let include_usage = p.stream_options.as_ref().is_some_and(|o| o.include_usage);
    let chunk = move |delta: Value, finish: Option<&str>| -> SseEvent {
        let choice = match kind {
            Kind::Chat => json!({"index": 0, "delta": delta, "finish_reason": finish}),
            Kind::Completion => json!({
                "index": 0,
                "text": delta.get("content").cloned().unwrap_or(json!("")),
                "logprobs": null,
                "finish_reason": finish,
            }),
        };
        let object = if kind == Kind::Chat {
            "chat.completion.chunk"
        } else {
            "text_completion"
        };
        SseEvent::default().data(
            json!({"id": id, "object": object, "created": created, "model": model, "choices": [choice]}).to_string(),
        )
    };
    // The stream owns the ticket and the place: when the client goes, both go.
    struct St {
        rx: tokio::sync::mpsc::UnboundedReceiver<Event>,
        pending: Vec<SseEvent>,
        first: Option<Event>,
        done: bool,
        _hold: (minfer::sched::Ticket, Place),
    }
    let st = St {
        rx,
        pending: Vec::new(),
        first: Some(first),
        done: false,
        _hold: (ticket, place),
    };
    let usage_chunk = |f: &Finished| SseEvent::default().data(json!({"choices": [], "usage": usage(f)}).to_string());
    let stream = futures_util::stream::unfold(st, move |mut st| {
        let chunk = chunk.clone();
        async move {
            loop {
                if let Some(e) = st.pending.pop() {
                    return Some((Ok::<_, std::convert::Infallible>(e), st));
                }
                if st.done {
                    return None;
                }
                let e = match st.first.take() {
                    Some(e) => e,
                    None => match st.rx.recv().await {
                        Some(e) => e,
                        None => {
                            st.done = true;
                            let err = json!({"error": {"message": "the scheduler stopped", "type": "server_error"}});
                            st.pending.push(SseEvent::default().data(err.to_string()));
                            continue;
                        }
                    },
                };
                // `pending` is a stack: push in reverse order of sending.
                match e {
                    Event::Started { .. } => {
                        if kind == Kind::Chat {
                            st.pending
                                .push(chunk(json!({"role": "assistant", "content": ""}), None));
                        }
                    }
                    Event::Token { text, .. } => {
                        if !text.is_empty() {
                            st.pending.push(chunk(json!({"content": text}), None));
                        }
                    }
                    Event::Error(e) => {
                        st.done = true;
                        st.pending.push(SseEvent::default().data("[DONE]"));
                        let err = json!({"error": {"message": e, "type": "server_error"}});
                        st.pending.push(SseEvent::default().data(err.to_string()));
                    }
                    Event::Done(f) => {
                        st.done = true;
                        st.pending.push(SseEvent::default().data("[DONE]"));
                        if include_usage {
                            st.pending.push(usage_chunk(&f));
                        }
                        st.pending.push(chunk(json!({}), Some(finish_reason(f.reason))));
                        if !f.rest.is_empty() {
                            st.pending.push(chunk(json!({"content": f.rest}), None));
                        }
                    }
                }
            }
        }
    });
    Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(10)))
        .into_response()
}
