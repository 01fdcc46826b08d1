//! A completion's answer: the request submitted to the scheduler, its choices whole or
//! streamed as SSE chunks, in the chat or the text completions' shape.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use minfer::engine::StopReason;
use minfer::sampling::TokenLogprob;
use minfer::sched::{Event, Finished, Prompt, Request};
use minfer::tokenizer::Tokenizer;

use super::Params;
use crate::cli::serve::telemetry::Clock;
use crate::cli::serve::tools::{self, CallStream, Reading, Tools};
use crate::cli::serve::{bad, error, now, params, telemetry, App, Place, Served};

#[derive(Clone, Copy, PartialEq)]
pub(super) enum Kind {
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
pub(super) async fn generate(
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
        r.extensions_mut().insert(telemetry::Tokens {
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
