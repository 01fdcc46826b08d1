//! The OpenAI API: chat and text completions (streaming as SSE), models, and llama.cpp's
//! tokenize/detokenize.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{json, Value};

use minfer::chat::{Chat, ChatMessage};
use minfer::engine::{GenerateOptions, StopReason};
use minfer::sampling::SamplerConfig;
use minfer::sched::{Event, Finished, Prompt, Request};

use super::telemetry::Clock;
use super::tools::{self, CallStream, Tools};
use super::{authorize, bad, error, now, prelude, reject, App, Place, Reject, Served};

pub(super) async fn models(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    if let Err(r) = authorize(&app, &headers) {
        return *r;
    }
    axum::Json(json!({
        "object": "list",
        "data": [{"id": app.model_id, "object": "model", "created": 0, "owned_by": "minfer"}],
    }))
    .into_response()
}

pub(super) async fn embeddings(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
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

pub(super) async fn tokenize(State(app): State<Arc<App>>, headers: HeaderMap, body: Body) -> Response {
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

pub(super) async fn detokenize(State(app): State<Arc<App>>, headers: HeaderMap, body: Body) -> Response {
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
    #[serde(default)]
    tool_calls: Option<Value>,
    #[serde(default)]
    tool_call_id: Option<String>,
    #[serde(default)]
    name: Option<String>,
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
    logprobs: Option<bool>,
    logit_bias: Option<serde_json::Map<String, Value>>,
}

#[derive(Deserialize)]
struct ChatReq {
    messages: Vec<Message>,
    tools: Option<Value>,
    tool_choice: Option<Value>,
    chat_template_kwargs: Option<Value>,
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
            Ok(ChatMessage {
                tool_calls: tools::history_calls(i, m.tool_calls.as_ref())?,
                tool_call_id: m.tool_call_id.clone(),
                name: m.name.clone(),
                ..ChatMessage::new(m.role.as_str(), content)
            })
        })
        .collect()
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

pub(super) async fn chat(State(app): State<Arc<App>>, headers: HeaderMap, body: Body) -> Response {
    let (s, r) = match prelude::<ChatReq>(&app, &headers, body).await {
        Ok(v) => v,
        Err(r) => return *r,
    };
    let prepared = messages(&r.messages).and_then(|m| {
        let tools = Tools::from_request(r.tools.as_ref(), r.tool_choice.as_ref())?;
        let kwargs = tools::template_kwargs(r.chat_template_kwargs.as_ref())?;
        Ok((m, tools, kwargs))
    });
    let (messages, tools, kwargs) = match prepared {
        Ok(v) => v,
        Err(r) => return *r,
    };
    let chat = Chat {
        messages,
        tools: tools.as_ref().map(|t| t.list.clone()).unwrap_or_default(),
        kwargs,
    };
    generate(&app, s, Prompt::Chat(chat), &r.p, Kind::Chat, tools).await
}

pub(super) async fn completions(State(app): State<Arc<App>>, headers: HeaderMap, body: Body) -> Response {
    let (s, r) = match prelude::<CompletionReq>(&app, &headers, body).await {
        Ok(v) => v,
        Err(r) => return *r,
    };
    let prompt = match r.prompt {
        OneOrMany::One(p) => p,
        OneOrMany::Many(mut v) if v.len() == 1 => v.remove(0),
        OneOrMany::Many(_) => return bad("prompt as a list of more than one string is not supported", "prompt"),
    };
    generate(&app, s, Prompt::Text(prompt), &r.p, Kind::Completion, None).await
}

/// Submits the request and answers it, streamed or whole; with `tools`, the answer's calls
/// become `tool_calls`.
async fn generate(
    app: &Arc<App>,
    s: &Served,
    prompt: Prompt,
    p: &Params,
    kind: Kind,
    tools: Option<Tools>,
) -> Response {
    let opts = match p.options(s.n_ctx) {
        Ok(o) => o,
        Err(r) => return *r,
    };
    let place = match Place::take(app) {
        Ok(p) => p,
        Err(r) => return *r,
    };
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Event>();
    let mut clock = Clock::start();
    let ticket = s.runner.submit_sink(Request { prompt, opts }, move |e| {
        clock.observe(&e);
        tx.send(e).is_ok()
    });
    let n = app.next_id.fetch_add(1, Ordering::Relaxed);
    let id = match kind {
        Kind::Chat => format!("chatcmpl-{n}"),
        Kind::Completion => format!("cmpl-{n}"),
    };
    let model = app.model_id.clone();
    let created = now();
    let call_ids = format!("call_{n}");
    // The first event decides the status: an error before any token is the request's fault.
    let first = match rx.recv().await {
        Some(Event::Error(e)) => {
            let param = if kind == Kind::Chat { "messages" } else { "prompt" };
            return bad(e, param);
        }
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
                        Kind::Chat if tools.is_some() => {
                            let (message, called) = tools::message(&text, &call_ids);
                            let finish = if called { "tool_calls" } else { finish_reason(f.reason) };
                            json!({"index": 0, "message": message, "finish_reason": finish})
                        }
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
    // The usage chunk is one of the stream's chunks: same id, object, created and model.
    let usage_chunk = {
        let object = if kind == Kind::Chat {
            "chat.completion.chunk"
        } else {
            "text_completion"
        };
        let head = json!({"id": id, "object": object, "created": created, "model": model, "choices": []});
        move |f: &Finished| {
            let mut c = head.clone();
            c["usage"] = usage(f);
            SseEvent::default().data(c.to_string())
        }
    };
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
        calls: Option<CallStream>,
        _hold: (minfer::sched::Ticket, Place),
    }
    let st = St {
        rx,
        pending: Vec::new(),
        first: Some(first),
        done: false,
        calls: tools.map(|_| CallStream::new(call_ids)),
        _hold: (ticket, place),
    };
    let stream = futures_util::stream::unfold(st, move |mut st| {
        let chunk = chunk.clone();
        let usage_chunk = usage_chunk.clone();
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
                    Event::Token { text, .. } => match &mut st.calls {
                        Some(c) => {
                            for d in c.push(&text).into_iter().rev() {
                                st.pending.push(chunk(d, None));
                            }
                        }
                        None if !text.is_empty() => st.pending.push(chunk(json!({"content": text}), None)),
                        None => {}
                    },
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
                        let deltas = match &mut st.calls {
                            Some(c) => c.end(&f.rest),
                            None if f.rest.is_empty() => Vec::new(),
                            None => vec![json!({"content": f.rest})],
                        };
                        let called = st.calls.as_ref().is_some_and(CallStream::called);
                        let finish = if called { "tool_calls" } else { finish_reason(f.reason) };
                        st.pending.push(chunk(json!({}), Some(finish)));
                        for d in deltas.into_iter().rev() {
                            st.pending.push(chunk(d, None));
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
