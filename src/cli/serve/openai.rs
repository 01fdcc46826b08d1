//! The OpenAI API: chat and text completions (streaming as SSE), models, and llama.cpp's
//! tokenize/detokenize.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{json, Value};

use minfer::chat::{Chat, ChatMessage};
use minfer::engine::{GenerateOptions, StopReason};
use minfer::sampling::{SamplerConfig, TokenLogprob};
use minfer::sched::{Event, Finished, Prompt, Request};
use minfer::tokenizer::Tokenizer;

use super::telemetry::Clock;
use super::tools::{self, CallStream, Reading, Tools};
use super::{authorize, bad, error, now, params, prelude, reject, App, Place, Reject, Served};

/// The served model as OpenAI describes one.
fn model_object(app: &App) -> serde_json::Value {
    json!({"id": app.model_id, "object": "model", "created": 0, "owned_by": "minfer"})
}

pub(super) async fn models(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    if let Err(r) = authorize(&app, &headers) {
        return *r;
    }
    let mut data = vec![model_object(&app)];
    if let Some(e) = app.embedder.get().filter(|e| e.model_id != app.model_id) {
        data.push(json!({"id": e.model_id, "object": "model", "created": 0, "owned_by": "minfer"}));
    }
    axum::Json(json!({"object": "list", "data": data})).into_response()
}

/// `GET /v1/models/{id}` (the SDKs' `models.retrieve`): the served model, or a 404 naming the
/// id asked for.
pub(super) async fn model(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    axum::extract::Path(id): axum::extract::Path<String>,
) -> Response {
    if let Err(r) = authorize(&app, &headers) {
        return *r;
    }
    if id != app.model_id {
        return error(
            StatusCode::NOT_FOUND,
            format!(
                "model '{id}' is not served here (this server serves '{}')",
                app.model_id
            ),
            Some("model"),
        );
    }
    axum::Json(model_object(&app)).into_response()
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
    /// -1 (any negative): a random seed, as llama.cpp's server takes it.
    seed: Option<i64>,
    stop: Option<OneOrMany>,
    n: Option<u64>,
    #[serde(default)]
    ignore_eos: bool,
    response_format: Option<Value>,
    /// Chat: a bool; completions: the number of alternatives.
    logprobs: Option<Value>,
    top_logprobs: Option<i64>,
    logit_bias: Option<serde_json::Map<String, Value>>,
    /// llama.cpp's draft lengths for a server that speculates (`params::Speculative`).
    #[serde(rename = "speculative.n_max")]
    speculative_n_max: Option<i64>,
    #[serde(rename = "speculative.n_min")]
    speculative_n_min: Option<i64>,
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
    /// A string, token ids, or a list of one of either (OpenAI's four shapes).
    prompt: Value,
    #[serde(flatten)]
    p: Params,
}

/// The completions `prompt`: a string or token ids, alone or as a one-element list.
fn completion_prompt(v: &Value, n_vocab: usize) -> Result<Prompt, Reject> {
    let ids = |a: &[Value]| -> Result<Prompt, Reject> {
        let ids = a
            .iter()
            .map(|x| {
                x.as_u64()
                    .and_then(|n| u32::try_from(n).ok())
                    .filter(|&n| (n as usize) < n_vocab)
                    .ok_or_else(|| {
                        reject(
                            format!("prompt: {x} is not a token id of the vocabulary of {n_vocab}"),
                            "prompt",
                        )
                    })
            })
            .collect::<Result<Vec<u32>, Reject>>()?;
        // (No tokens at all: the scheduler's check refuses it.)
        Ok(Prompt::Ids(ids))
    };
    match v {
        Value::String(s) => Ok(Prompt::Text(s.clone())),
        Value::Array(a) if !a.is_empty() && a.iter().all(Value::is_number) => ids(a),
        Value::Array(a) if a.len() == 1 => match &a[0] {
            Value::String(s) => Ok(Prompt::Text(s.clone())),
            Value::Array(inner) => ids(inner),
            other => Err(reject(
                format!("prompt[0] is {other}, not a string or token ids"),
                "prompt",
            )),
        },
        Value::Array(a) if a.len() > 1 => Err(reject(
            "prompt as a list of more than one prompt is not supported (send one per request)",
            "prompt",
        )),
        other => Err(reject(
            format!("prompt must be a string or token ids, not {other}"),
            "prompt",
        )),
    }
}

impl Params {
    /// Our generation options, or a 400 naming the field this server does not take.
    fn options(&self, n_ctx: usize, n_vocab: usize, spec: &params::Speculative) -> Result<GenerateOptions, Reject> {
        params::choices(self.n)?;
        let constraint = params::response_format(self.response_format.as_ref())?;
        let logprobs = params::logprobs(self.logprobs.as_ref(), self.top_logprobs)?;
        let logit_bias = params::logit_bias(self.logit_bias.as_ref(), n_vocab)?;
        let d = SamplerConfig::default();
        let top_k = match self.top_k {
            Some(k) if k < 0 => 0,
            Some(k) => k as usize,
            None => d.top_k,
        };
        // OpenAI's ranges for its two penalties.
        for (name, v) in [
            ("presence_penalty", self.presence_penalty),
            ("frequency_penalty", self.frequency_penalty),
        ] {
            if let Some(v) = v.filter(|v| !(-2.0..=2.0).contains(v)) {
                return Err(reject(format!("{name} {v} is outside -2 to 2"), name));
            }
        }
        let sampler = SamplerConfig {
            temperature: self.temperature.unwrap_or(d.temperature),
            top_k,
            top_p: self.top_p.unwrap_or(d.top_p),
            min_p: self.min_p.unwrap_or(d.min_p),
            repeat_penalty: self.repeat_penalty.unwrap_or(d.repeat_penalty),
            presence_penalty: self.presence_penalty.unwrap_or(d.presence_penalty),
            frequency_penalty: self.frequency_penalty.unwrap_or(d.frequency_penalty),
            seed: self.seed.and_then(|x| u64::try_from(x).ok()),
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
        let mut opts = GenerateOptions {
            max_tokens,
            sampler,
            stop,
            ignore_eos: self.ignore_eos,
            constraint,
            logit_bias,
            logprobs,
            ..GenerateOptions::default()
        };
        spec.apply(&mut opts, self.speculative_n_max, self.speculative_n_min)?;
        Ok(opts)
    }
}

/// The roles a chat message may have (OpenAI's, `developer` and the older `function` included).
const ROLES: [&str; 6] = ["system", "developer", "user", "assistant", "tool", "function"];

fn messages(ms: &[Message]) -> Result<Vec<ChatMessage>, Reject> {
    if ms.is_empty() {
        return Err(reject("messages is empty", "messages"));
    }
    ms.iter()
        .enumerate()
        .map(|(i, m)| {
            if !ROLES.contains(&m.role.as_str()) {
                return Err(reject(
                    format!("messages[{i}].role '{}' is not one of {}", m.role, ROLES.join(", ")),
                    "messages",
                ));
            }
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
        // Callback: cut by the server stopping past --shutdown-timeout, as incomplete as a
        // limit leaves it.
        StopReason::MaxTokens | StopReason::ContextFull | StopReason::Callback => "length",
        _ => "stop",
    }
}

/// Usage over a request's choices: the prompt counted once (as OpenAI bills it), the
/// completions summed.
fn usage(fs: &[Finished]) -> Value {
    let (prompt, cached) = fs
        .first()
        .map_or((0, 0), |f| (f.usage.prompt_tokens, f.usage.cached_tokens));
    let completion: usize = fs.iter().map(|f| f.usage.completion_tokens).sum();
    json!({
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    })
}

/// A choice's `logprobs` value in `kind`'s shape (null when not asked for); for
/// completions, `offset` is where the tokens' text starts in the choice's text.
fn logprobs_value(kind: Kind, tok: &Tokenizer, asked: bool, lps: &[TokenLogprob], offset: &mut usize) -> Value {
    if !asked {
        return Value::Null;
    }
    match kind {
        Kind::Chat => params::chat_logprobs(tok, lps),
        Kind::Completion => {
            let (v, end) = params::completion_logprobs(tok, lps, *offset);
            *offset = end;
            v
        }
    }
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
    let (messages, mut tools, kwargs) = match prepared {
        Ok(v) => v,
        Err(r) => return *r,
    };
    let mut chat = Chat {
        messages,
        tools: tools.as_ref().map(|t| t.list.clone()).unwrap_or_default(),
        kwargs,
    };
    // A template that shows no tools: they go in the generic format (`tools`).
    let format = tools.as_mut().map(|t| {
        t.generic = !s.renders_tools;
        if t.generic {
            chat = minfer::chat::with_generic_tools(&chat);
        }
        if t.generic {
            "generic"
        } else {
            "template"
        }
    });
    let mut answer = generate(&app, s, Prompt::Chat(chat), &r.p, Kind::Chat, tools).await;
    if let Some(f) = format {
        answer
            .headers_mut()
            .insert("x-tool-format", HeaderValue::from_static(f));
    }
    answer
}

pub(super) async fn completions(State(app): State<Arc<App>>, headers: HeaderMap, body: Body) -> Response {
    let (s, r) = match prelude::<CompletionReq>(&app, &headers, body).await {
        Ok(v) => v,
        Err(r) => return *r,
    };
    let prompt = match completion_prompt(&r.prompt, s.tokenizer.n_vocab()) {
        Ok(p) => p,
        Err(r) => return *r,
    };
    generate(&app, s, prompt, &r.p, Kind::Completion, None).await
}

/// One choice as the answer carries it; with tools (`calls`: the choice's call-id prefix),
/// calls in the text become `tool_calls`.
fn choice(
    kind: Kind,
    index: usize,
    text: String,
    logprobs: Value,
    f: &Finished,
    calls: Option<&str>,
    reading: Reading,
) -> Value {
    match kind {
        Kind::Chat if calls.is_some() => {
            let (mut message, called) = tools::message(&text, calls.unwrap_or_default(), reading.generic);
            if reading.forced && !called {
                // A forced call cut short (max_tokens, the context): no half call as content;
                // finish_reason says why it ended.
                message["content"] = Value::Null;
            }
            let finish = if called { "tool_calls" } else { finish_reason(f.reason) };
            json!({"index": index, "message": message, "logprobs": logprobs, "finish_reason": finish})
        }
        Kind::Chat => json!({
            "index": index,
            "message": {"role": "assistant", "content": text},
            "logprobs": logprobs,
            "finish_reason": finish_reason(f.reason),
        }),
        Kind::Completion => json!({
            "index": index,
            "text": text,
            "logprobs": logprobs,
            "finish_reason": finish_reason(f.reason),
        }),
    }
}

/// Submits the request (`n` sequences for `n` choices, which share the prompt's cells
/// through the scheduler's prefix reuse; seeded choices take seed, seed + 1, …) and answers
/// it, streamed or whole; with `tools`, the answer's calls become `tool_calls`.
async fn generate(
    app: &Arc<App>,
    s: &Served,
    prompt: Prompt,
    p: &Params,
    kind: Kind,
    tools: Option<Tools>,
) -> Response {
    let mut opts = match p.options(s.n_ctx, s.tokenizer.n_vocab(), &s.speculative) {
        Ok(o) => o,
        Err(r) => return *r,
    };
    // `required` or a named tool: the answer is constrained to a call; in the generic format
    // always to JSON, a call or a reply (unless the request has a format of its own).
    let reading = tools.as_ref().map(Tools::reading).unwrap_or_default();
    if let Some(format) = tools.as_ref().and_then(Tools::format) {
        if opts.constraint.is_none() {
            match params::response_format(Some(&format)) {
                Ok(c) => opts.constraint = c,
                Err(r) => return *r,
            }
        }
    }
    let n = match params::choices(p.n) {
        Ok(n) if n > app.capacity => {
            return bad(
                format!(
                    "n {n} is more than the {} requests this server takes at once",
                    app.capacity
                ),
                "n",
            )
        }
        Ok(n) => n,
        Err(r) => return *r,
    };
    let mut places = Vec::with_capacity(n);
    for _ in 0..n {
        match Place::take(app) {
            Ok(p) => places.push(p),
            Err(r) => return *r,
        }
    }
    let asked = opts.logprobs.is_some();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(usize, Event)>();
    let submit = |i: usize| {
        let tx = tx.clone();
        let mut opts = opts.clone();
        opts.sampler.seed = opts.sampler.seed.map(|x| x.wrapping_add(i as u64));
        let req = Request {
            prompt: prompt.clone(),
            opts,
        };
        let mut clock = Clock::start();
        s.runner.submit_sink(req, move |e| {
            clock.observe(&e);
            tx.send((i, e)).is_ok()
        })
    };
    let mut tickets = vec![submit(0)];
    // Events already received, in order. The other choices go in once the first has
    // evaluated the prompt (its first token, end or error), so that they fork its cells
    // rather than evaluate the prompt again beside it.
    let mut early: VecDeque<(usize, Event)> = VecDeque::new();
    if n > 1 {
        while let Some(e) = rx.recv().await {
            let evaluated = !matches!(e.1, Event::Started { .. });
            early.push_back(e);
            if evaluated {
                break;
            }
        }
        tickets.extend((1..n).map(submit));
    }
    drop(tx);
    let id_n = app.next_id.fetch_add(1, Ordering::Relaxed);
    let id = match kind {
        Kind::Chat => format!("chatcmpl-{id_n}"),
        Kind::Completion => format!("cmpl-{id_n}"),
    };
    let model = app.model_id.clone();
    let created = now();
    let tok = s.tokenizer.clone();
    // Each choice's call-id prefix, where tools were given.
    let call_ids: Vec<Option<String>> = (0..n)
        .map(|i| {
            tools.as_ref().map(|_| match n {
                1 => format!("call_{id_n}"),
                _ => format!("call_{id_n}_{i}"),
            })
        })
        .collect();
    // The first event decides the status: an error before any token is the request's fault.
    let first = match early.pop_front() {
        Some(e) => Some(e),
        None => rx.recv().await,
    };
    match first {
        Some((_, Event::Error(e))) => {
            let param = if kind == Kind::Chat { "messages" } else { "prompt" };
            return bad(e, param);
        }
        Some(e) => early.push_front(e),
        None => return error(StatusCode::SERVICE_UNAVAILABLE, "the scheduler stopped", None),
    }
    if !p.stream {
        let mut texts = vec![String::new(); n];
        let mut lps: Vec<Vec<TokenLogprob>> = vec![Vec::new(); n];
        let mut fins: Vec<Option<Finished>> = vec![None; n];
        let mut left = n;
        while left > 0 {
            let (i, e) = match early.pop_front() {
                Some(e) => e,
                None => match rx.recv().await {
                    Some(e) => e,
                    None => return error(StatusCode::SERVICE_UNAVAILABLE, "the scheduler stopped", None),
                },
            };
            match e {
                Event::Started { .. } => {}
                Event::Token { text: t, logprob, .. } => {
                    texts[i].push_str(&t);
                    lps[i].extend(logprob);
                }
                Event::Error(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, e, None),
                Event::Done(f) => {
                    texts[i].push_str(&f.rest);
                    fins[i] = Some(f);
                    left -= 1;
                }
            }
        }
        drop((tickets, places));
        let fins: Vec<Finished> = fins.into_iter().flatten().collect();
        let choices: Vec<Value> = fins
            .iter()
            .zip(texts)
            .zip(&lps)
            .enumerate()
            .map(|(i, ((f, text), lp))| {
                let lv = logprobs_value(kind, &tok, asked, lp, &mut 0);
                choice(kind, i, text, lv, f, call_ids[i].as_deref(), reading)
            })
            .collect();
        let object = if kind == Kind::Chat {
            "chat.completion"
        } else {
            "text_completion"
        };
        let mut r = axum::Json(json!({
            "id": id,
            "object": object,
            "created": created,
            "model": model,
            "choices": choices,
            "usage": usage(&fins),
            "timings": params::timings(&fins),
        }))
        .into_response();
        r.extensions_mut().insert(super::telemetry::Tokens {
            prompt: fins.first().map_or(0, |f| f.usage.prompt_tokens),
            completion: fins.iter().map(|f| f.usage.completion_tokens).sum(),
        });
        return r;
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
        move |fs: &[Finished]| {
            let mut c = head.clone();
            c["usage"] = usage(fs);
            SseEvent::default().data(c.to_string())
        }
    };
    // The last choice's final chunk carries the request's `timings`, as llama.cpp's does.
    let chunk = move |index: usize, delta: Value, logprobs: Value, finish: Option<&str>, timings: Value| -> SseEvent {
        let choice = match kind {
            Kind::Chat => json!({"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish}),
            Kind::Completion => json!({
                "index": index,
                "text": delta.get("content").cloned().unwrap_or(json!("")),
                "logprobs": logprobs,
                "finish_reason": finish,
            }),
        };
        let object = if kind == Kind::Chat {
            "chat.completion.chunk"
        } else {
            "text_completion"
        };
        let mut c = json!({"id": id, "object": object, "created": created, "model": model, "choices": [choice]});
        if !timings.is_null() {
            c["timings"] = timings;
        }
        SseEvent::default().data(c.to_string())
    };
    // The stream owns the tickets and the places: when the client goes, they go.
    struct St {
        rx: tokio::sync::mpsc::UnboundedReceiver<(usize, Event)>,
        pending: Vec<SseEvent>,
        early: VecDeque<(usize, Event)>,
        done: bool,
        /// Per choice: log-probabilities of tokens whose text is still held back, and (for
        /// completions) the text offset reached.
        held: Vec<(Vec<TokenLogprob>, usize)>,
        fins: Vec<Finished>,
        /// Per choice, with tools: its call parser.
        calls: Vec<Option<CallStream>>,
        _hold: (Vec<minfer::sched::Ticket>, Vec<Place>),
    }
    let st = St {
        rx,
        pending: Vec::new(),
        early,
        done: false,
        held: vec![(Vec::new(), 0); n],
        fins: Vec::new(),
        calls: call_ids
            .into_iter()
            .map(|c| c.map(|ids| CallStream::new(ids, reading)))
            .collect(),
        _hold: (tickets, places),
    };
    let stream = futures_util::stream::unfold(st, move |mut st| {
        let chunk = chunk.clone();
        let usage_chunk = usage_chunk.clone();
        let tok = tok.clone();
        async move {
            // Pushes choice i's `deltas` (in sending order) onto the `pending` stack, the
            // log-probabilities held so far with the first of them.
            let push_deltas = |pending: &mut Vec<SseEvent>,
                               i: usize,
                               deltas: Vec<Value>,
                               held: &mut Vec<TokenLogprob>,
                               offset: &mut usize| {
                let mut chunks = Vec::with_capacity(deltas.len());
                for (k, d) in deltas.into_iter().enumerate() {
                    let lv = if k == 0 {
                        let lv = logprobs_value(kind, &tok, asked, held, offset);
                        held.clear();
                        lv
                    } else {
                        Value::Null
                    };
                    chunks.push(chunk(i, d, lv, None, Value::Null));
                }
                pending.extend(chunks.into_iter().rev());
            };
            loop {
                if let Some(e) = st.pending.pop() {
                    return Some((Ok::<_, std::convert::Infallible>(e), st));
                }
                if st.done {
                    return None;
                }
                let (i, e) = match st.early.pop_front() {
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
                            st.pending.push(chunk(
                                i,
                                json!({"role": "assistant", "content": ""}),
                                Value::Null,
                                None,
                                Value::Null,
                            ));
                        }
                    }
                    Event::Token { text, logprob, .. } => {
                        let (held, offset) = &mut st.held[i];
                        held.extend(logprob);
                        // With tools, text that may be a call is held back by the parser;
                        // the log-probabilities go with the first delta it lets out.
                        let deltas = match &mut st.calls[i] {
                            Some(c) => c.push(&text),
                            None if text.is_empty() => Vec::new(),
                            None => vec![json!({"content": text})],
                        };
                        push_deltas(&mut st.pending, i, deltas, held, offset);
                    }
                    Event::Error(e) => {
                        st.done = true;
                        st.pending.push(SseEvent::default().data("[DONE]"));
                        let err = json!({"error": {"message": e, "type": "server_error"}});
                        st.pending.push(SseEvent::default().data(err.to_string()));
                    }
                    Event::Done(f) => {
                        let (held, offset) = &mut st.held[i];
                        let last = st.fins.len() + 1 == n;
                        let mut timings = Value::Null;
                        if last {
                            st.done = true;
                            st.pending.push(SseEvent::default().data("[DONE]"));
                            let mut fs = st.fins.clone();
                            fs.push(f.clone());
                            if include_usage {
                                st.pending.push(usage_chunk(&fs));
                            }
                            timings = params::timings(&fs);
                        }
                        let deltas = match &mut st.calls[i] {
                            Some(c) => c.end(&f.rest),
                            None if f.rest.is_empty() && held.is_empty() => Vec::new(),
                            None => vec![json!({"content": f.rest})],
                        };
                        let called = st.calls[i].as_ref().is_some_and(CallStream::called);
                        let finish = if called { "tool_calls" } else { finish_reason(f.reason) };
                        st.pending.push(chunk(i, json!({}), Value::Null, Some(finish), timings));
                        push_deltas(&mut st.pending, i, deltas, held, offset);
                        st.fins.push(f);
                    }
                }
            }
        }
    });
    Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(10)))
        .into_response()
}
