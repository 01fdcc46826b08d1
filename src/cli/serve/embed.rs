//! Embeddings over HTTP: OpenAI's `POST /v1/embeddings` and Ollama's `POST /api/embed` (and
//! the older `POST /api/embeddings`), from the embedding model — the served model itself when
//! it is one, or `--embedding-model` beside a chat model, chosen by the request's `model`.
//!
//! The model runs on a thread of its own; a request's inputs go through it as one batch
//! (`minfer::embed`), one request after another, so one request's bad input never touches
//! another's.

use std::path::Path;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context as _, Result};
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use minfer::embed::{self, Embedding, Overflow};
use minfer::engine::Engine;
use minfer::SessionOptions;

use super::{authorize, bad, body_json, error, App, Reject};

/// One input: a text, or token ids as the client tokenized it.
enum Input {
    Text(String),
    Ids(Vec<u32>),
}

struct Job {
    inputs: Vec<Input>,
    overflow: Overflow,
    reply: tokio::sync::oneshot::Sender<std::result::Result<Vec<Embedding>, String>>,
}

/// The embedding model's thread and what requests are checked against.
pub(crate) struct Embedder {
    pub(crate) model_id: String,
    tx: std::sync::Mutex<mpsc::Sender<Job>>,
    /// The vector's width.
    dim: usize,
    normalize: bool,
}

impl Embedder {
    /// Starts the thread that owns `engine` (an embedding model's).
    pub(crate) fn start(engine: Engine, model_id: String) -> Result<Embedder> {
        embed::pooling(engine.session())?;
        let hp = &engine.model().hparams;
        let (dim, normalize) = (hp.n_embd, hp.normalize);
        let (tx, rx) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("embed".into())
            .spawn(move || worker(engine, rx))
            .context("starting the embedding thread")?;
        Ok(Embedder {
            model_id,
            tx: std::sync::Mutex::new(tx),
            dim,
            normalize,
        })
    }

    /// Loads `path` as the embedding model.
    pub(crate) fn load(path: &Path, session: &SessionOptions) -> Result<Embedder> {
        let engine = Engine::load(path, session).map_err(|e| super::named(e, path))?;
        for line in &engine.session().log {
            eprintln!("{line}");
        }
        let id = path
            .file_stem()
            .map(|s| s.to_string_lossy().to_string())
            .unwrap_or_else(|| "embedding-model".into());
        Embedder::start(engine, id)
    }

    async fn run(&self, inputs: Vec<Input>, overflow: Overflow) -> std::result::Result<Vec<Embedding>, String> {
        let (reply, rx) = tokio::sync::oneshot::channel();
        let sent = self
            .tx
            .lock()
            .map_err(|_| "the embedding thread is gone".to_string())?
            .send(Job {
                inputs,
                overflow,
                reply,
            });
        sent.map_err(|_| "the embedding thread is gone".to_string())?;
        rx.await.map_err(|_| "the embedding thread is gone".to_string())?
    }
}

fn worker(mut engine: Engine, rx: mpsc::Receiver<Job>) {
    while let Ok(job) = rx.recv() {
        let limit = embed::max_tokens(engine.session());
        let r = (|| -> minfer::Result<Vec<Embedding>> {
            let mut ids = Vec::with_capacity(job.inputs.len());
            for input in &job.inputs {
                let mut t = match input {
                    Input::Text(s) => {
                        embed::tokenize(engine.session(), engine.tokenizer(), &[s], job.overflow)?.remove(0)
                    }
                    Input::Ids(v) => v.clone(),
                };
                if job.overflow == Overflow::Truncate && t.len() > limit {
                    t.truncate(limit);
                }
                ids.push(t);
            }
            engine.embed_tokens(&ids)
        })();
        let _ = job.reply.send(r.map_err(|e| e.to_string()));
    }
}

/// The embedder a request names (by `model`), or the response saying why there is none.
fn pick<'a>(app: &'a App, model: Option<&str>, ollama: bool) -> std::result::Result<&'a Embedder, Reject> {
    let refuse = |status: StatusCode, msg: String| {
        Box::new(match ollama {
            true => (status, axum::Json(json!({ "error": msg }))).into_response(),
            false => error(status, msg, Some("model")),
        })
    };
    let Some(e) = app.embedder.get() else {
        return Err(match app.served.get() {
            None => refuse(StatusCode::SERVICE_UNAVAILABLE, "the model is loading".into()),
            Some(_) => refuse(
                StatusCode::BAD_REQUEST,
                format!(
                    "{} is a text generation model, not an embedding model (serve one with --embedding-model)",
                    app.model_id
                ),
            ),
        });
    };
    // A chat model named by a server that has both: say which model embeds.
    if let Some(m) = model {
        let bare = m.strip_suffix(":latest").unwrap_or(m);
        if bare == app.model_id && bare != e.model_id && app.served.get().is_some() {
            return Err(refuse(
                StatusCode::BAD_REQUEST,
                format!(
                    "{} is a text generation model; embeddings come from {}",
                    app.model_id, e.model_id
                ),
            ));
        }
    }
    Ok(e)
}

/// `input` as OpenAI takes it: a string, a list of strings, a list of ids, a list of lists.
fn inputs(v: &Value, param: &str) -> std::result::Result<Vec<Input>, String> {
    let ids = |a: &[Value]| -> std::result::Result<Vec<u32>, String> {
        a.iter()
            .map(|x| {
                x.as_u64()
                    .and_then(|n| u32::try_from(n).ok())
                    .ok_or_else(|| format!("{param}: {x} is not a token id"))
            })
            .collect()
    };
    let list = match v {
        Value::String(s) => return Ok(vec![Input::Text(s.clone())]),
        Value::Array(a) => a,
        Value::Null => return Err(format!("{param} is required")),
        other => return Err(format!("{param} must be a string or a list, not {other}")),
    };
    if list.is_empty() {
        return Err(format!("{param} is an empty list"));
    }
    if list.len() > 2048 {
        return Err(format!("{param} has {} inputs; at most 2048 per request", list.len()));
    }
    if list.iter().all(Value::is_number) {
        return Ok(vec![Input::Ids(ids(list)?)]);
    }
    list.iter()
        .enumerate()
        .map(|(i, x)| match x {
            Value::String(s) => Ok(Input::Text(s.clone())),
            Value::Array(a) => Ok(Input::Ids(ids(a)?)),
            other => Err(format!(
                "{param}[{i}] must be a string or a list of token ids, not {other}"
            )),
        })
        .collect()
}

/// The first `n` values, scaled to unit length again where the model normalises.
fn shorten(v: &mut Vec<f32>, n: usize, normalize: bool) {
    if n < v.len() {
        v.truncate(n);
        if normalize {
            embed::l2_normalize(v);
        }
    }
}

/// Authorization, the body as JSON and the embedder its `model` picks, or the response that
/// says why not (in Ollama's shape where `ollama`).
async fn prelude<'a>(
    app: &'a App,
    headers: &HeaderMap,
    body: Body,
    ollama: bool,
) -> std::result::Result<(&'a Embedder, Value), Reject> {
    authorize(app, headers)?;
    let req: Value = body_json(headers, body).await?;
    let e = pick(app, req.get("model").and_then(Value::as_str), ollama)?;
    Ok((e, req))
}

/// `dimensions`: the model's width where absent, else 1 up to it.
fn dimensions(e: &Embedder, req: &Value) -> std::result::Result<usize, String> {
    match req.get("dimensions") {
        None | Some(Value::Null) => Ok(e.dim),
        Some(v) => match v.as_u64() {
            Some(n) if n >= 1 && n as usize <= e.dim => Ok(n as usize),
            _ => Err(format!("dimensions {v} is not between 1 and the model's {}", e.dim)),
        },
    }
}

/// `POST /v1/embeddings`.
pub(super) async fn openai(State(app): State<Arc<App>>, headers: HeaderMap, body: Body) -> Response {
    let (e, req) = match prelude(&app, &headers, body, false).await {
        Ok(v) => v,
        Err(r) => return *r,
    };
    let inputs = match inputs(req.get("input").unwrap_or(&Value::Null), "input") {
        Ok(i) => i,
        Err(m) => return bad(m, "input"),
    };
    let base64 = match req.get("encoding_format") {
        None | Some(Value::Null) => false,
        Some(Value::String(f)) if f == "float" => false,
        Some(Value::String(f)) if f == "base64" => true,
        Some(other) => {
            return bad(
                format!("encoding_format {other} is not float or base64"),
                "encoding_format",
            )
        }
    };
    let dims = match dimensions(e, &req) {
        Ok(d) => d,
        Err(m) => return bad(m, "dimensions"),
    };
    let out = match e.run(inputs, Overflow::Refuse).await {
        Ok(o) => o,
        Err(m) => return bad(m, "input"),
    };
    let tokens: usize = out.iter().map(|x| x.n_tokens).sum();
    let data: Vec<Value> = out
        .into_iter()
        .enumerate()
        .map(|(i, mut x)| {
            shorten(&mut x.vector, dims, e.normalize);
            let emb = match base64 {
                true => Value::String(base64_f32(&x.vector)),
                false => json!(x.vector),
            };
            json!({"object": "embedding", "index": i, "embedding": emb})
        })
        .collect();
    let mut r = axum::Json(json!({
        "object": "list",
        "data": data,
        "model": e.model_id,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }))
    .into_response();
    r.extensions_mut().insert(super::telemetry::Tokens {
        prompt: tokens,
        completion: 0,
    });
    r
}

fn ollama_bad(msg: impl Into<String>) -> Response {
    (StatusCode::BAD_REQUEST, axum::Json(json!({ "error": msg.into() }))).into_response()
}

/// `POST /api/embed`: `input` a string or a list; `truncate` (default true) cuts inputs past
/// the model's positions, false refuses them.
pub(super) async fn ollama_embed(State(app): State<Arc<App>>, headers: HeaderMap, body: Body) -> Response {
    let t0 = Instant::now();
    let (e, req) = match prelude(&app, &headers, body, true).await {
        Ok(v) => v,
        Err(r) => return *r,
    };
    let inputs = match inputs(req.get("input").unwrap_or(&Value::Null), "input") {
        Ok(i) => i,
        Err(m) => return ollama_bad(m),
    };
    let overflow = match req.get("truncate") {
        None | Some(Value::Null) | Some(Value::Bool(true)) => Overflow::Truncate,
        Some(Value::Bool(false)) => Overflow::Refuse,
        Some(other) => return ollama_bad(format!("truncate {other} is not a boolean")),
    };
    let dims = match dimensions(e, &req) {
        Ok(d) => d,
        Err(m) => return ollama_bad(m),
    };
    let out = match e.run(inputs, overflow).await {
        Ok(o) => o,
        Err(m) => return ollama_bad(m),
    };
    let tokens: usize = out.iter().map(|x| x.n_tokens).sum();
    let vectors: Vec<Vec<f32>> = out
        .into_iter()
        .map(|mut x| {
            shorten(&mut x.vector, dims, e.normalize);
            x.vector
        })
        .collect();
    axum::Json(json!({
        "model": e.model_id,
        "embeddings": vectors,
        "total_duration": t0.elapsed().as_nanos() as u64,
        "load_duration": 0,
        "prompt_eval_count": tokens,
    }))
    .into_response()
}

/// `POST /api/embeddings` (Ollama's older endpoint): one `prompt`, one `embedding`.
pub(super) async fn ollama_embeddings(State(app): State<Arc<App>>, headers: HeaderMap, body: Body) -> Response {
    let (e, req) = match prelude(&app, &headers, body, true).await {
        Ok(v) => v,
        Err(r) => return *r,
    };
    let prompt = match req.get("prompt") {
        Some(Value::String(s)) => s.clone(),
        _ => return ollama_bad("prompt must be a string"),
    };
    match e.run(vec![Input::Text(prompt)], Overflow::Truncate).await {
        Ok(mut o) => axum::Json(json!({"embedding": o.remove(0).vector})).into_response(),
        Err(m) => ollama_bad(m),
    }
}

/// Little-endian f32 bytes in standard base64, as OpenAI's `encoding_format: "base64"`.
fn base64_f32(v: &[f32]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    let mut s = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for c in bytes.chunks(3) {
        let n = (c[0] as u32) << 16 | (*c.get(1).unwrap_or(&0) as u32) << 8 | *c.get(2).unwrap_or(&0) as u32;
        for (i, shift) in [18, 12, 6, 0].into_iter().enumerate() {
            if i <= c.len() {
                s.push(A[(n >> shift & 63) as usize] as char);
            } else {
                s.push('=');
            }
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_of_floats_is_standard() {
        // 1.0f32 = 00 00 80 3f; 2 floats = 8 bytes = 2 groups and a 2-byte tail.
        assert_eq!(base64_f32(&[1.0]), "AACAPw==");
        assert_eq!(base64_f32(&[1.0, -2.0]), "AACAPwAAAMA=");
        assert_eq!(base64_f32(&[]), "");
    }

    #[test]
    fn inputs_take_every_openai_shape_and_name_bad_ones() {
        let n = |v: Value| inputs(&v, "input").map(|i| i.len());
        assert_eq!(n(json!("a")), Ok(1));
        assert_eq!(n(json!(["a", "b"])), Ok(2));
        assert_eq!(n(json!([1, 2, 3])), Ok(1));
        assert_eq!(n(json!([[1, 2], [3]])), Ok(2));
        assert!(n(json!([])).unwrap_err().contains("empty"));
        assert!(n(json!(5)).unwrap_err().contains("string or a list"));
        assert!(n(json!([-1])).unwrap_err().contains("not a token id"));
        assert!(n(json!(["a", {}])).unwrap_err().contains("input[1]"));
    }
}
