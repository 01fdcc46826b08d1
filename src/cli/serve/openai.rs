//! The OpenAI API: chat and text completions (streaming as SSE), models, and llama.cpp's
//! tokenize/detokenize.

mod answer;

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{json, Value};

use minfer::chat::{Chat, ChatMessage};
use minfer::engine::GenerateOptions;
use minfer::sampling::SamplerConfig;
use minfer::sched::Prompt;

use super::tools::{self, Tools};
use super::{authorize, bad, error, params, prelude, reject, App, Reject};
use answer::{generate, Kind};

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
