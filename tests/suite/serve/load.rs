//! A bounded load: 64 requests from 16 concurrent clients on loopback — greedy chat and text
//! completions, streamed and not, some hung up mid-stream, some malformed — each answered as it
//! should be, within a time limit; afterwards the server is idle with no sequence or KV cell
//! left behind.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::{chat_body, http, sse_data, stream_until, Server, QUESTIONS, SMOL};
use crate::common;

tests![serve_load_64_requests_16_clients];

const CLIENTS: usize = 16;
const REQUESTS: usize = 64;
const MAX_TOKENS: usize = 12;
/// The whole load must be answered within this (2 cores; about 10 s when the machine is quiet).
const LIMIT: Duration = Duration::from_secs(300);

/// What request `i` is; a fixed mix, so that every run is the same load.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Chat,
    ChatStream,
    Text,
    HangUp,
    BadJson,
    BadField,
    TooLong,
}

fn kind(i: usize) -> Kind {
    match i % 8 {
        0 | 4 => Kind::Chat,
        1 | 5 => Kind::ChatStream,
        2 => Kind::Text,
        3 => Kind::HangUp,
        6 if i % 16 == 6 => Kind::BadJson,
        6 => Kind::BadField,
        _ if i % 16 == 7 => Kind::TooLong,
        _ => Kind::Chat,
    }
}

fn text_body(q: &str) -> Value {
    json!({"prompt": q, "temperature": 0, "max_tokens": MAX_TOKENS})
}

/// Sends a streaming request, reads until the first token's chunk, and hangs up.
fn hang_up(port: u16, q: &str) {
    let mut body = chat_body(q, 400);
    body["stream"] = json!(true);
    body["ignore_eos"] = json!(true);
    // Past the role chunk, the first token's.
    drop(stream_until(
        port,
        "/v1/chat/completions",
        &body.to_string(),
        b"\"content\"",
        2,
    ));
}

fn error_shape(st: u16, b: &str, want: u16, what: &str) {
    assert_eq!(st, want, "{what}: {b}");
    let v: Value = serde_json::from_str(b).unwrap_or_else(|e| panic!("{what}: {e}: {b}"));
    assert!(v["error"]["message"].is_string(), "{what}: {v}");
    // OpenAI's code: a string or null, never the status number.
    assert!(
        v["error"]["code"].is_string() || v["error"]["code"].is_null(),
        "{what}: {v}"
    );
}

/// One request of the load, checked against the answers each prompt gets alone.
fn one(port: u16, i: usize, chat: &[String], text: &[String], n_ctx: usize) {
    let q = QUESTIONS[i % QUESTIONS.len()];
    let want_chat = &chat[i % QUESTIONS.len()];
    match kind(i) {
        Kind::Chat => {
            let (st, _, b) = http(
                port,
                "POST",
                "/v1/chat/completions",
                &[],
                chat_body(q, MAX_TOKENS).to_string().as_bytes(),
            );
            assert_eq!(st, 200, "request {i}: {b}");
            let v: Value = serde_json::from_str(&b).unwrap();
            assert_eq!(
                v["choices"][0]["message"]["content"].as_str(),
                Some(want_chat.as_str()),
                "request {i}: {q}"
            );
        }
        Kind::ChatStream => {
            let mut body = chat_body(q, MAX_TOKENS);
            body["stream"] = json!(true);
            let (st, _, raw) = http(port, "POST", "/v1/chat/completions", &[], body.to_string().as_bytes());
            assert_eq!(st, 200, "request {i}: {raw}");
            let data = sse_data(&raw);
            assert_eq!(data.last().map(String::as_str), Some("[DONE]"), "request {i}");
            let got: String = data[..data.len() - 1]
                .iter()
                .map(|d| serde_json::from_str::<Value>(d).unwrap())
                .filter_map(|c| c["choices"][0]["delta"]["content"].as_str().map(str::to_string))
                .collect();
            assert_eq!(&got, want_chat, "request {i} (streamed): {q}");
        }
        Kind::Text => {
            let (st, _, b) = http(
                port,
                "POST",
                "/v1/completions",
                &[],
                text_body(q).to_string().as_bytes(),
            );
            assert_eq!(st, 200, "request {i}: {b}");
            let v: Value = serde_json::from_str(&b).unwrap();
            assert_eq!(
                v["choices"][0]["text"].as_str(),
                Some(text[i % QUESTIONS.len()].as_str()),
                "request {i}: {q}"
            );
        }
        Kind::HangUp => hang_up(port, q),
        Kind::BadJson => {
            let (st, _, b) = http(port, "POST", "/v1/chat/completions", &[], b"{\"messages\": [");
            error_shape(st, &b, 400, "malformed JSON");
        }
        Kind::BadField => {
            let body = json!({"messages": [{"role": "user", "content": q}], "temperature": "hot"});
            let (st, _, b) = http(port, "POST", "/v1/chat/completions", &[], body.to_string().as_bytes());
            error_shape(st, &b, 400, "a field of the wrong type");
        }
        Kind::TooLong => {
            let body = text_body(&"word ".repeat(n_ctx + 16));
            let (st, _, b) = http(port, "POST", "/v1/completions", &[], body.to_string().as_bytes());
            error_shape(st, &b, 400, "a prompt longer than the context");
            assert!(b.contains(&n_ctx.to_string()), "the error names the context: {b}");
        }
    }
}

fn serve_load_64_requests_16_clients() {
    let Some(model) = common::real_model("serve_load_64_requests_16_clients", SMOL) else {
        return;
    };
    let n_ctx = 1024;
    let mut s = Server::start(
        &model,
        &["--parallel", "4", "--max-queue", "64", "-c", &n_ctx.to_string()],
    );
    let port = s.port;
    // Each prompt's answers alone, first.
    let alone = |path: &str, body: &dyn Fn(&str) -> Value, field: &dyn Fn(&Value) -> &Value| -> Vec<String> {
        QUESTIONS
            .iter()
            .map(|q| {
                let (st, v) = s.post(path, &body(q));
                assert_eq!(st, 200, "{v}");
                field(&v).as_str().unwrap().to_string()
            })
            .collect()
    };
    let chat = Arc::new(alone("/v1/chat/completions", &|q| chat_body(q, MAX_TOKENS), &|v| {
        &v["choices"][0]["message"]["content"]
    }));
    let text = Arc::new(alone("/v1/completions", &text_body, &|v| &v["choices"][0]["text"]));

    let next = Arc::new(AtomicUsize::new(0));
    let t0 = Instant::now();
    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let (next, chat, text) = (next.clone(), chat.clone(), text.clone());
            std::thread::spawn(move || -> Result<(), String> {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= REQUESTS {
                        return Ok(());
                    }
                    let r = std::panic::catch_unwind(|| one(port, i, &chat, &text, n_ctx));
                    if let Err(e) = r {
                        let msg = e
                            .downcast_ref::<String>()
                            .cloned()
                            .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                            .unwrap_or_default();
                        return Err(format!("request {i} ({:?}): {msg}", kind(i)));
                    }
                }
            })
        })
        .collect();
    for c in clients {
        if let Err(e) = c.join().unwrap() {
            panic!("{e}");
        }
    }
    let took = t0.elapsed();
    assert!(took < LIMIT, "64 requests took {took:?}");
    assert!(s.child.try_wait().unwrap().is_none(), "the server exited");

    // Idle again: nothing running, queued or in flight, and no cell held beyond what the
    // finished sequences kept for prefix reuse hold.
    let t1 = Instant::now();
    while s.metric("sequences_running") + s.metric("requests_waiting") + s.metric("requests_in_flight") > 0 {
        assert!(t1.elapsed() < Duration::from_secs(20), "the server did not go idle");
        std::thread::sleep(Duration::from_millis(50));
    }
    let (used, kept) = (s.metric("kv_cells_used"), s.metric("kept_tokens"));
    assert!(
        used <= kept,
        "{used} KV cells in use, but the kept sequences hold at most {kept}"
    );
    let hung_up = (0..REQUESTS).filter(|&i| matches!(kind(i), Kind::HangUp)).count() as u64;
    assert!(
        s.metric("requests_cancelled_total") >= hung_up,
        "{hung_up} clients hung up, {} requests cancelled",
        s.metric("requests_cancelled_total")
    );
    // And it still answers as before.
    let (st, v) = s.post("/v1/chat/completions", &chat_body(QUESTIONS[0], MAX_TOKENS));
    assert_eq!(st, 200);
    assert_eq!(v["choices"][0]["message"]["content"].as_str(), Some(chat[0].as_str()));
}
