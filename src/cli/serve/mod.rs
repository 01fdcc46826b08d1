//! `minfer-wgpu serve`: an OpenAI-compatible HTTP server on the library's scheduler.
//!
//! The model runs on the scheduler's own thread (continuous batching over `--parallel`
//! sequences that share one KV pool, so any sequence may use the whole context); HTTP runs on
//! a small tokio runtime. Each request holds a ticket whose drop — the client gone, for a
//! streaming or a plain request — cancels it at the next step. Bad input gets OpenAI's error
//! shape (`{"error":{"message","type","param","code"}}`) with its status, never a 500.
//!
//! Endpoints: `POST /v1/chat/completions`, `POST /v1/completions` (both streaming as SSE),
//! `GET /v1/models` (and `/v1/models/{id}`), `GET /health` (503 while loading), `GET /metrics` (Prometheus text),
//! `POST /tokenize`, `POST /detokenize`, `POST /v1/embeddings`; Ollama's API beside it
//! (`ollama`): `GET|HEAD /`, `GET /api/version`, `/api/tags`, `/api/ps`, `POST /api/show`,
//! `/api/chat`, `/api/generate`, `/api/embed`, `/api/embeddings`. Embeddings (`embed`) come from
//! the served model where it is an embedding model, else from `--embedding-model`.

mod embed;
mod http;
mod ollama;
mod openai;
pub(crate) mod params;
mod telemetry;
mod tools;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use anyhow::{bail, Context as _, Result};
use axum::extract::State;
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use axum::Router;
use clap::Args;
use serde_json::json;

pub(crate) use http::{authorize, bad, body_json, error, now, prelude, reject, served, Place, Reject};

use minfer::chat::ChatTemplate;
use minfer::engine::Engine;
use minfer::sched::{Runner, Scheduler, SchedulerOptions, Stats};
use minfer::tokenizer::Tokenizer;
use minfer::SessionOptions;

use super::flags::{read_chat_template, EngineFlags, SpecFlags};
use super::Base;

#[derive(Args)]
pub struct ServeArgs {
    model: Option<PathBuf>,
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// Sequences decoding together; each may use the whole context
    #[arg(long, default_value_t = 4)]
    parallel: usize,
    /// Requests may carry `Authorization: Bearer KEY`; others are refused with 401
    #[arg(long = "api-key")]
    api_key: Option<String>,
    /// An origin allowed to call the server from a browser (repeatable)
    #[arg(long)]
    cors: Vec<String>,
    /// Requests waiting beyond the running ones before 429
    #[arg(long = "max-queue", default_value_t = 64)]
    max_queue: usize,
    /// Use this Jinja chat template instead of the model's own
    #[arg(long = "chat-template-file")]
    chat_template_file: Option<PathBuf>,
    /// An embedding model (BERT family) served beside MODEL on /v1/embeddings and
    /// /api/embed, chosen by the request's `model`
    #[arg(long = "embedding-model")]
    embedding_model: Option<PathBuf>,
    /// No access log (a line per request on stderr: method, path, status, tokens, time)
    #[arg(long = "log-disable")]
    log_disable: bool,
    /// Seconds live requests may run on after Ctrl-C or SIGTERM before they are ended
    /// where they are (streams with a final chunk, finish_reason "length"); default: until
    /// they finish
    #[arg(long = "shutdown-timeout", value_parser = parse_seconds)]
    shutdown_timeout: Option<std::time::Duration>,
    #[command(flatten)]
    engine: EngineFlags,
    #[command(flatten)]
    spec: SpecFlags,
}

/// `--shutdown-timeout`: seconds, whole or not, 0 or more.
fn parse_seconds(s: &str) -> std::result::Result<std::time::Duration, String> {
    s.trim()
        .parse::<f64>()
        .ok()
        .filter(|v| v.is_finite() && *v >= 0.0 && *v <= 1e9)
        .map(std::time::Duration::from_secs_f64)
        .ok_or_else(|| format!("'{s}' is not a number of seconds (0 or more)"))
}

/// What the server runs with: the flags checked, over the environment.
struct Config {
    model: PathBuf,
    host: String,
    port: u16,
    parallel: usize,
    api_key: Option<String>,
    cors: Vec<String>,
    max_queue: usize,
    /// A Jinja chat template to use instead of the model's own.
    chat_template: Option<String>,
    session: SessionOptions,
    flash_attn: bool,
    /// An embedding model served beside the chat model (`--embedding-model`).
    embedding_model: Option<PathBuf>,
    /// No access log line per request (`--log-disable`).
    log_disable: bool,
    /// After Ctrl-C or SIGTERM, how long live requests may run on before they are ended where
    /// they are (`--shutdown-timeout`); None: until they finish.
    shutdown_timeout: Option<std::time::Duration>,
    /// Speculative decoding for every request (`--spec`, `--draft`, `--draft-max`,
    /// `--draft-min`); a request may set its draft lengths (`params::Speculative`).
    spec: super::generate::Spec,
}

/// What the handlers share. `served` is set once the model is loaded.
pub(crate) struct App {
    pub(crate) served: OnceLock<Served>,
    pub(crate) api_key: Option<String>,
    pub(crate) model_id: String,
    /// Requests admitted and not finished (running or queued), against `capacity`.
    pub(crate) in_flight: AtomicUsize,
    pub(crate) capacity: usize,
    pub(crate) next_id: AtomicUsize,
    pub(crate) telemetry: telemetry::Telemetry,
    /// The embedding model, once loaded: the served model itself when it is one (`served`
    /// then stays empty), else `--embedding-model`.
    pub(crate) embedder: OnceLock<embed::Embedder>,
    /// Whether an `--embedding-model` was asked for (health waits for it).
    pub(crate) wants_embedder: bool,
    /// A line per request on stderr (`telemetry::access_log`); off with `--log-disable`.
    pub(crate) access_log: bool,
}

pub(crate) struct Served {
    pub(crate) runner: Runner,
    pub(crate) stats: Arc<Stats>,
    pub(crate) tokenizer: Arc<Tokenizer>,
    pub(crate) n_ctx: usize,
    /// What the Ollama endpoints report about the model.
    pub(crate) facts: ollama::ModelFacts,
    /// The chat template shows the model a request's tools; else they go in the generic
    /// format (`tools`).
    pub(crate) renders_tools: bool,
    /// The speculation every request takes.
    pub(crate) speculative: params::Speculative,
}

/// MODEL defaults as for `run`; the flags are checked before the server listens.
pub fn run(a: ServeArgs, base: &Base) -> Result<()> {
    if a.parallel == 0 {
        bail!("--parallel must be at least 1");
    }
    let model = match a.model {
        Some(m) => m,
        None => super::generate::default_model(&base.env)?,
    };
    let chat_template = read_chat_template(a.chat_template_file.as_deref())?;
    if let Some(src) = &chat_template {
        // Refused before the server listens, not after.
        ChatTemplate::new(src, "", "").context("--chat-template-file")?;
    }
    let spec = a.spec.spec();
    spec.check()?;
    let c = Config {
        model,
        chat_template,
        host: a.host,
        port: a.port,
        parallel: a.parallel,
        api_key: a.api_key,
        cors: a.cors,
        max_queue: a.max_queue,
        session: a.engine.session(base),
        flash_attn: a.engine.flash_attn,
        embedding_model: a.embedding_model,
        log_disable: a.log_disable,
        shutdown_timeout: a.shutdown_timeout,
        spec,
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the HTTP runtime")?;
    rt.block_on(serve(c))
}

/// `--host` with `--port` as the address to bind: an IP address (IPv6 bare, `::1`, or in
/// brackets) or a host name, resolved to its first IPv4 address where it has one (what most
/// clients try first for `localhost`), else its first.
async fn bind_addr(host: &str, port: u16) -> Result<SocketAddr> {
    let bare = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    if let Ok(ip) = bare.parse::<std::net::IpAddr>() {
        return Ok(SocketAddr::new(ip, port));
    }
    let found: Vec<SocketAddr> = tokio::net::lookup_host((bare, port))
        .await
        .with_context(|| format!("--host {host}: not an IP address nor a host name this machine resolves"))?
        .collect();
    found
        .iter()
        .find(|a| a.is_ipv4())
        .or(found.first())
        .copied()
        .with_context(|| format!("--host {host}: resolves to no address"))
}

async fn serve(a: Config) -> Result<()> {
    // A model that is not there is an error before the server listens, not after.
    for m in std::iter::once(&a.model).chain(&a.embedding_model).chain(&a.spec.draft) {
        let src = minfer::load::resolve(m)?;
        if !src.path().exists() {
            anyhow::bail!("{}: no such file or directory", m.display());
        }
    }
    let addr = bind_addr(&a.host, a.port).await?;
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
        telemetry: telemetry::Telemetry::install()?,
        embedder: OnceLock::new(),
        wants_embedder: a.embedding_model.is_some(),
        access_log: !a.log_disable,
    });
    // Listening first, so that /health says 503 while the model loads.
    eprintln!("listening on http://{}", listener.local_addr()?);
    {
        let app = app.clone();
        tokio::task::spawn_blocking(move || {
            if let Err(e) = load(
                &app,
                &a.model,
                &a.session,
                a.flash_attn,
                a.chat_template.as_deref(),
                a.parallel,
                &a.spec,
            )
            .and_then(|()| match &a.embedding_model {
                Some(m) => {
                    let e = embed::Embedder::load(m, &a.session).context("--embedding-model")?;
                    eprintln!("ready: embeddings from {}", e.model_id);
                    let _ = app.embedder.set(e);
                    Ok(())
                }
                None => Ok(()),
            }) {
                eprintln!("error: {e:#}");
                std::process::exit(1);
            }
        });
    }
    let mut router = Router::new()
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .route("/v1/models", get(openai::models))
        .route("/v1/models/{id}", get(openai::model))
        .route("/v1/chat/completions", post(openai::chat))
        .route("/v1/completions", post(openai::completions))
        .route("/v1/embeddings", post(embed::openai))
        .route("/tokenize", post(openai::tokenize))
        .route("/detokenize", post(openai::detokenize))
        .route("/", get(ollama::root))
        .route("/api/version", get(ollama::version))
        .route("/api/tags", get(ollama::tags))
        .route("/api/ps", get(ollama::ps))
        .route("/api/show", post(ollama::show))
        .route("/api/chat", post(ollama::chat))
        .route("/api/generate", post(ollama::generate))
        .route("/api/embed", post(embed::ollama_embed))
        .route("/api/embeddings", post(embed::ollama_embeddings))
        .route("/api/{*rest}", any(ollama::not_found))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::middleware::from_fn(telemetry::count_responses))
        .layer(axum::middleware::from_fn_with_state(app.clone(), telemetry::access_log))
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
    let (grace, stopping) = (a.shutdown_timeout, app.clone());
    axum::serve(listener, router)
        .with_graceful_shutdown(async move {
            stop_signal().await;
            if let Some(t) = grace {
                // Past the grace period every live request ends where it is, streams with their
                // final chunk (finish_reason "length") and [DONE]: the drain then completes.
                tokio::spawn(async move {
                    tokio::time::sleep(t).await;
                    if let Some(s) = stopping.served.get() {
                        eprintln!("stopping: {:.1} s passed; ending the live requests", t.as_secs_f64());
                        s.runner.finish_all("the server is stopping");
                    }
                });
            }
        })
        .await
        .context("serving")
}

/// Ctrl-C (SIGINT) or SIGTERM, what Kubernetes, systemd and docker stop a process with: either
/// stops the server accepting, and every live request (streams included) finishes (or, past
/// `--shutdown-timeout`, is ended with its final chunk) before the process exits 0.
async fn stop_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            eprintln!("stopping: finishing the live requests");
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
    eprintln!("stopping: finishing the live requests");
}

/// Loads the model and starts its scheduler; from then on the handlers serve.
fn load(
    app: &App,
    model: &Path,
    session: &SessionOptions,
    flash_attn: bool,
    chat_template: Option<&str>,
    parallel: usize,
    spec: &super::generate::Spec,
) -> Result<()> {
    let mut engine = Engine::load(model, session).map_err(|e| named(e, model))?;
    engine.session_mut().set_flash_attn(flash_attn);
    if let Some(src) = chat_template {
        engine.set_chat_template(src).context("--chat-template-file")?;
    }
    for line in &engine.session().log {
        eprintln!("{line}");
    }
    if engine.model().hparams.pooling.is_some() {
        // An embedding model: it serves the embedding endpoints only.
        let e = embed::Embedder::start(engine, app.model_id.clone())?;
        let _ = app.embedder.set(e);
        eprintln!("ready: embeddings from {}", app.model_id);
        return Ok(());
    }
    spec.load_draft(&mut engine, session)?;
    let n_ctx = engine.session().n_ctx();
    let facts = ollama::ModelFacts::of(&engine, model, &app.model_id);
    let renders_tools = engine.template.as_ref().is_some_and(ChatTemplate::renders_tools);
    if engine.template.is_some() && !renders_tools {
        eprintln!(
            "the chat template shows no tools: requests with tools get them in a system message \
             and answer in JSON (the generic tool format; response header x-tool-format: generic)"
        );
    }
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
        facts,
        renders_tools,
        speculative: params::Speculative {
            speculation: spec.speculation,
            draft_max: spec.draft_max,
            draft_min: spec.draft_min,
        },
    });
    eprintln!("ready: {parallel} sequences, context {n_ctx}");
    Ok(())
}

/// A load error that names `model`'s path once: as it is where the error already does.
fn named(e: minfer::Error, model: &Path) -> anyhow::Error {
    let path = model.display().to_string();
    match e.to_string().contains(&path) {
        true => e.into(),
        false => anyhow::Error::from(e).context(format!("loading {path}")),
    }
}

async fn not_found(uri: axum::http::Uri) -> Response {
    error(StatusCode::NOT_FOUND, format!("no route {}", uri.path()), None)
}

/// A known route asked with a method it does not take: 405 with the error's body.
async fn method_not_allowed(method: Method, uri: axum::http::Uri) -> Response {
    error(
        StatusCode::METHOD_NOT_ALLOWED,
        format!("{method} is not allowed on {}", uri.path()),
        None,
    )
}

/// Everything asked for is loaded: the chat model (or the served embedding model) and any
/// `--embedding-model`.
fn ready(app: &App) -> bool {
    let main = app.served.get().is_some() || app.embedder.get().is_some();
    main && (!app.wants_embedder || app.embedder.get().is_some())
}

async fn health(State(app): State<Arc<App>>) -> Response {
    match ready(&app).then_some(()) {
        Some(()) => axum::Json(json!({"status": "ok"})).into_response(),
        None => (
            StatusCode::SERVICE_UNAVAILABLE,
            axum::Json(json!({"status": "loading"})),
        )
            .into_response(),
    }
}

async fn metrics(State(app): State<Arc<App>>) -> Response {
    let stats = app.served.get().map(|s| &*s.stats);
    let page = app.telemetry.render(app.in_flight.load(Ordering::Relaxed), stats);
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], page).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::HeaderMap;

    #[test]
    fn hosts_are_addresses_bare_ipv6_bracketed_or_names() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let bind = |h: &str| rt.block_on(bind_addr(h, 8080));
        assert_eq!(bind("127.0.0.1").unwrap().to_string(), "127.0.0.1:8080");
        assert_eq!(bind("::1").unwrap().to_string(), "[::1]:8080");
        assert_eq!(bind("[::1]").unwrap().to_string(), "[::1]:8080");
        assert_eq!(bind("0.0.0.0").unwrap().to_string(), "0.0.0.0:8080");
        let local = bind("localhost").unwrap();
        assert!(local.ip().is_loopback() && local.port() == 8080, "{local}");
    }

    async fn read(r: Response) -> (StatusCode, serde_json::Value) {
        let status = r.status();
        let bytes = axum::body::to_bytes(r.into_body(), 1 << 16).await.unwrap();
        (status, serde_json::from_slice(&bytes).unwrap())
    }

    /// Before the model is loaded, health and every generating endpoint answer 503 in their
    /// API's shape (the loaded state is what the suite's server tests see).
    #[tokio::test]
    async fn while_loading_everything_is_503() {
        let app = Arc::new(App {
            served: OnceLock::new(),
            api_key: None,
            model_id: "m".into(),
            in_flight: AtomicUsize::new(0),
            capacity: 4,
            next_id: AtomicUsize::new(1),
            telemetry: telemetry::Telemetry::install().unwrap(),
            embedder: OnceLock::new(),
            wants_embedder: false,
            access_log: false,
        });
        let body = || Body::from(r#"{"messages": [{"role": "user", "content": "hi"}]}"#);
        let (st, v) = read(health(State(app.clone())).await).await;
        assert_eq!((st, &v["status"]), (StatusCode::SERVICE_UNAVAILABLE, &json!("loading")));
        let (st, v) = read(openai::chat(State(app.clone()), HeaderMap::new(), body()).await).await;
        assert_eq!(st, StatusCode::SERVICE_UNAVAILABLE, "{v}");
        assert_eq!(v["error"]["code"], "model_loading", "{v}");
        assert!(v["error"]["message"].as_str().unwrap().contains("loading"), "{v}");
        let (st, v) = read(ollama::chat(State(app.clone()), HeaderMap::new(), body()).await).await;
        assert_eq!(st, StatusCode::SERVICE_UNAVAILABLE, "{v}");
        assert!(v["error"].as_str().unwrap().contains("loading"), "{v}");
        // Nothing was admitted.
        assert_eq!(app.in_flight.load(Ordering::Relaxed), 0);
    }
}
