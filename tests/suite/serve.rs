//! `minfer-wgpu serve`: the real binary on 127.0.0.1:0 with SmolLM2, spoken to over plain
//! HTTP/1.1: answers equal `run`'s, streaming equals non-streaming, concurrent requests equal
//! sequential ones, a client that hangs up frees its sequence, and every error has its status
//! and OpenAI's shape.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common;

pub mod constrain;
pub mod embed;
pub mod load;
pub mod ollama;
pub mod openai_client;
pub mod tools;

tests![
    serve_answers_as_run_does_streamed_or_not,
    serve_concurrent_requests_equal_sequential_ones,
    serve_errors_have_their_status_and_shape,
    serve_hang_up_frees_the_sequence,
    serve_template_exception_is_400_with_its_message,
    serve_sigterm_finishes_live_streams_then_exits_0,
    serve_shutdown_timeout_ends_live_streams_with_their_final_chunk,
    serve_takes_token_ids_and_names_bad_fields,
    serve_missing_model_fails_before_listening,
    serve_speculation_changes_no_token_and_reports_drafts,
];

pub(crate) const SMOL: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// A server process, killed on drop.
pub(crate) struct Server {
    pub(crate) child: Child,
    pub(crate) port: u16,
}

impl Server {
    pub(crate) fn start(model: &Path, extra: &[&str]) -> Server {
        let mut child = Command::new(crate::common::exe())
            .args([
                "serve",
                &model.display().to_string(),
                "--port",
                "0",
                "-t",
                "2",
                "--backend",
                "cpu",
            ])
            .args(extra)
            .env_remove("MINFER_MODEL")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn minfer-wgpu serve");
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let port = loop {
            let line = lines.next().expect("the server said nothing").unwrap();
            if let Some(a) = line.strip_prefix("listening on http://") {
                break a.rsplit(':').next().unwrap().parse().unwrap();
            }
        };
        // Keep draining stderr so the server never blocks on it.
        std::thread::spawn(move || for _ in lines {});
        let s = Server { child, port };
        let t0 = Instant::now();
        while s.get("/health").0 != 200 {
            assert!(
                t0.elapsed() < Duration::from_secs(120),
                "the server did not become ready"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        s
    }

    pub(crate) fn get(&self, path: &str) -> (u16, String) {
        let (st, _, body) = http(self.port, "GET", path, &[], b"");
        (st, body)
    }

    pub(crate) fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        let (st, _, b) = http(self.port, "POST", path, &[], body.to_string().as_bytes());
        (
            st,
            serde_json::from_str(&b).unwrap_or_else(|e| panic!("{path}: {e}: {b}")),
        )
    }

    pub(crate) fn metric(&self, name: &str) -> u64 {
        let (_, m) = self.get("/metrics");
        m.lines()
            .find_map(|l| l.strip_prefix(&format!("minfer_{name} ")))
            .unwrap_or_else(|| panic!("no metric {name} in {m}"))
            .parse()
            .unwrap()
    }
}

impl Server {
    /// The server's exit status, which must come within `limit` of `since`.
    pub(crate) fn exit_within(&mut self, since: Instant, limit: Duration) -> std::process::ExitStatus {
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                return st;
            }
            assert!(since.elapsed() < limit, "the server did not exit");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One request, `Connection: close`: (status, headers, body with chunked encoding undone).
pub(crate) fn http(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, String, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(300))).unwrap();
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    // A body over 1 MiB is only announced: the server refuses it by its length.
    if body.len() <= 1 << 20 {
        s.write_all(body).unwrap();
    }
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw).to_string();
    let (head, rest) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        dechunk(rest)
    } else {
        rest.to_string()
    };
    (status, head.to_string(), body)
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        s = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// Posts `body` to `path` and reads the streamed answer until `mark` has come `count` times;
/// the open connection back, for the caller to hang up by dropping it.
pub(crate) fn stream_until(port: u16, path: &str, body: &str, mark: &[u8], count: usize) -> TcpStream {
    let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(300))).unwrap();
    write!(
        c,
        "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while got.windows(mark.len()).filter(|w| w == &mark).count() < count {
        let n = c.read(&mut buf).unwrap();
        assert!(n > 0, "{path}: the stream ended early");
        got.extend_from_slice(&buf[..n]);
    }
    c
}

/// The `data:` payloads of an SSE body.
pub(crate) fn sse_data(body: &str) -> Vec<String> {
    body.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(str::to_string)
        .collect()
}

pub(crate) fn run_greedy(model: &Path, prompt: &str, n: usize, raw: bool) -> String {
    let mut c = Command::new(crate::common::exe());
    c.args([
        "run",
        &model.display().to_string(),
        prompt,
        "--temp",
        "0",
        "-t",
        "2",
        "--backend",
        "cpu",
        "--json",
    ])
    .args(["-n", &n.to_string()])
    .env_remove("MINFER_MODEL");
    if raw {
        c.arg("--raw");
    }
    let o = c.output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    v["text"].as_str().unwrap().to_string()
}

pub(crate) fn chat_body(q: &str, n: usize) -> Value {
    json!({"model": "x", "messages": [{"role": "user", "content": q}], "temperature": 0, "max_tokens": n})
}

/// Chat and text completions answer what `run` answers (greedy, same messages or raw prompt);
/// the streamed chat carries the role first, the same text in deltas, the finish reason, the
/// usage asked for and `[DONE]`; a second turn reuses the first's cells.
fn serve_answers_as_run_does_streamed_or_not() {
    let Some(model) = common::real_model("serve_answers_as_run_does_streamed_or_not", SMOL) else {
        return;
    };
    let s = Server::start(&model, &[]);
    let q = "What is the capital of France?";
    let want = run_greedy(&model, q, 24, false);
    let (st, v) = s.post("/v1/chat/completions", &chat_body(q, 24));
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["choices"][0]["message"]["content"].as_str().unwrap(), want);
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    assert_eq!(v["usage"]["completion_tokens"], 24);

    // Content as parts is the same message.
    let parts = json!({"messages": [{"role": "user", "content": [{"type": "text", "text": q}]}], "temperature": 0, "max_tokens": 24});
    let (_, v2) = s.post("/v1/chat/completions", &parts);
    assert_eq!(
        v2["choices"][0]["message"]["content"],
        v["choices"][0]["message"]["content"]
    );
    assert!(
        v2["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap() > 0,
        "{v2}"
    );

    let mut body = chat_body(q, 24);
    body["stream"] = json!(true);
    body["stream_options"] = json!({"include_usage": true});
    let (st, head, raw) = http(s.port, "POST", "/v1/chat/completions", &[], body.to_string().as_bytes());
    assert_eq!(st, 200);
    assert!(head.to_ascii_lowercase().contains("text/event-stream"), "{head}");
    let data = sse_data(&raw);
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"));
    let chunks: Vec<Value> = data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let ids: Vec<&Value> = chunks.iter().map(|c| &c["id"]).filter(|i| !i.is_null()).collect();
    assert!(ids.windows(2).all(|w| w[0] == w[1]), "one id per stream");
    let text: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(text, want, "streamed text");
    let fin = &chunks[chunks.len() - 2];
    assert_eq!(fin["choices"][0]["finish_reason"], "length");
    let usage = &chunks[chunks.len() - 1];
    assert_eq!(usage["usage"]["completion_tokens"], 24, "{usage}");

    let p = "The three primary colours are";
    let want = run_greedy(&model, p, 16, true);
    let (st, v) = s.post(
        "/v1/completions",
        &json!({"prompt": p, "temperature": 0, "max_tokens": 16}),
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["choices"][0]["text"].as_str().unwrap(), want);
    let (_, models) = s.get("/v1/models");
    assert!(models.contains("SmolLM2"), "{models}");
    // One model by id (the SDKs' models.retrieve), and an id not served: a 404 naming it.
    let id = serde_json::from_str::<Value>(&models).unwrap()["data"][0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let (st, one) = s.get(&format!("/v1/models/{id}"));
    let one: Value = serde_json::from_str(&one).unwrap();
    assert_eq!(
        (st, one["id"].as_str(), one["object"].as_str()),
        (200, Some(id.as_str()), Some("model"))
    );
    let (st, none) = s.get("/v1/models/gpt-4o");
    assert_eq!(st, 404, "{none}");
    let none: Value = serde_json::from_str(&none).unwrap();
    assert!(
        none["error"]["message"].as_str().unwrap().contains("'gpt-4o'"),
        "{none}"
    );
    let (st, v) = s.post("/tokenize", &json!({"content": "Hello world"}));
    assert_eq!(st, 200);
    let (_, back) = s.post("/detokenize", &json!({"tokens": v["tokens"]}));
    assert!(back["content"].as_str().unwrap().ends_with("Hello world"), "{back}");
}

pub(crate) const QUESTIONS: [&str; 8] = [
    "What is the capital of France?",
    "Name three colours.",
    "Write a haiku about rain.",
    "What is 2 + 2?",
    "Who wrote Hamlet?",
    "Give me a synonym for happy.",
    "What is the largest planet?",
    "Translate 'thank you' into Spanish.",
];

/// Eight greedy requests at once, four sequences decoding together and the rest queued, each
/// answer equal to the same request sent alone.
fn serve_concurrent_requests_equal_sequential_ones() {
    let Some(model) = common::real_model("serve_concurrent_requests_equal_sequential_ones", SMOL) else {
        return;
    };
    let s = Server::start(&model, &["--parallel", "4"]);
    let alone: Vec<Value> = QUESTIONS
        .iter()
        .map(|q| s.post("/v1/chat/completions", &chat_body(q, 20)).1["choices"][0]["message"]["content"].clone())
        .collect();
    let port = s.port;
    let threads: Vec<_> = QUESTIONS
        .iter()
        .map(|q| {
            let body = chat_body(q, 20).to_string();
            std::thread::spawn(move || {
                let (st, _, b) = http(port, "POST", "/v1/chat/completions", &[], body.as_bytes());
                assert_eq!(st, 200, "{b}");
                let v: Value = serde_json::from_str(&b).unwrap();
                v["choices"][0]["message"]["content"].clone()
            })
        })
        .collect();
    for (i, t) in threads.into_iter().enumerate() {
        assert_eq!(t.join().unwrap(), alone[i], "request {i}: {}", QUESTIONS[i]);
    }
    let t0 = Instant::now();
    while s.metric("sequences_running") + s.metric("requests_in_flight") > 0 {
        assert!(t0.elapsed() < Duration::from_secs(10), "sequences still running");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A template that raises (`--chat-template-file`) answers 400 with the template's own
/// message, on both APIs; a conversation it accepts is answered as usual; a template that does
/// not compile stops the server before it listens.
fn serve_template_exception_is_400_with_its_message() {
    let Some(model) = common::real_model("serve_template_exception_is_400_with_its_message", SMOL) else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("minfer-serve-template-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("strict.jinja");
    std::fs::write(
        &file,
        "{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('System messages are not supported by this template') }}{% endif %}\
         <|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
    )
    .unwrap();
    let s = Server::start(&model, &["--chat-template-file", &file.display().to_string()]);
    let with_system = json!({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}], "max_tokens": 4});
    let (st, v) = s.post("/v1/chat/completions", &with_system);
    assert_eq!(st, 400, "{v}");
    assert_eq!(v["error"]["type"], "invalid_request_error", "{v}");
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("System messages are not supported by this template"),
        "{msg}"
    );
    let (st, v) = s.post(
        "/api/chat",
        &json!({"messages": with_system["messages"], "stream": false}),
    );
    assert_eq!(st, 400, "{v}");
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("System messages are not supported"),
        "{v}"
    );
    let (st, v) = s.post("/v1/chat/completions", &chat_body("Hi", 4));
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["usage"]["completion_tokens"], 4, "{v}");
    drop(s);

    std::fs::write(&file, "{% for m in messages %}{{ m.content }").unwrap();
    let o = Command::new(crate::common::exe())
        .args([
            "serve",
            &model.display().to_string(),
            "--port",
            "0",
            "--chat-template-file",
        ])
        .arg(&file)
        .env_remove("MINFER_MODEL")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("chat-template-file"), "{err}");
    assert!(!err.contains("listening"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every refusal has its status and `{"error": {"message", "type", "param", "code"}}`, and the
/// server answers the next request as if nothing happened.
fn serve_errors_have_their_status_and_shape() {
    let Some(model) = common::real_model("serve_errors_have_their_status_and_shape", SMOL) else {
        return;
    };
    let s = Server::start(&model, &["-c", "64", "--api-key", "sesame"]);
    let auth = [("Authorization", "Bearer sesame")];
    let call = |path: &str, body: &[u8], headers: &[(&str, &str)]| {
        let (st, _, b) = http(s.port, "POST", path, headers, body);
        let v: Value = serde_json::from_str(&b).unwrap_or_else(|e| panic!("{path} (status {st}): {e}: {b}"));
        let e = &v["error"];
        assert!(
            e["message"].is_string() && e["type"].is_string() && (e["code"].is_string() || e["code"].is_null()),
            "{path}: {v}"
        );
        (st, e["message"].as_str().unwrap().to_string())
    };
    let ok = chat_body("Hi", 4).to_string();
    let (st, m) = call("/v1/chat/completions", ok.as_bytes(), &[]);
    assert_eq!(st, 401, "{m}");
    let (st, _) = call(
        "/v1/chat/completions",
        ok.as_bytes(),
        &[("Authorization", "Bearer wrong")],
    );
    assert_eq!(st, 401);
    // OpenAI's code names the error, as a string.
    let (_, _, b) = http(s.port, "POST", "/v1/chat/completions", &[], ok.as_bytes());
    assert_eq!(
        serde_json::from_str::<Value>(&b).unwrap()["error"]["code"],
        "invalid_api_key",
        "{b}"
    );
    let (st, m) = call("/v1/chat/completions", b"{\"messages\": [", &auth);
    assert_eq!((st, m.contains("JSON")), (400, true), "{m}");
    let (st, m) = call("/v1/chat/completions", br#"{"messages": "hello"}"#, &auth);
    assert_eq!(st, 400, "{m}");
    let (st, m) = call(
        "/v1/chat/completions",
        br#"{"messages": [{"role": "user", "content": "x"}], "max_tokens": "many"}"#,
        &auth,
    );
    assert_eq!(st, 400, "{m}");
    let long = json!({"messages": [{"role": "user", "content": "word ".repeat(200)}], "max_tokens": 4}).to_string();
    let (st, m) = call("/v1/chat/completions", long.as_bytes(), &auth);
    assert!(st == 400 && m.contains("64"), "{st}: {m}");
    for (field, body) in [
        ("response_format", json!({"type": "no-such-format"})),
        ("n", json!(1000)),
        ("tools", json!([{"type": "function"}])),
    ] {
        let mut b = chat_body("Hi", 4);
        b[field] = body;
        let (st, m) = call("/v1/chat/completions", b.to_string().as_bytes(), &auth);
        assert!(st == 400 && m.contains(field), "{field}: {st} {m}");
    }
    let big = vec![b' '; 9 << 20];
    let (st, _) = call("/v1/chat/completions", &big, &auth);
    assert_eq!(st, 413);
    let (st, _) = call("/v1/nothing", b"{}", &auth);
    assert_eq!(st, 404);
    // A chat model serves no embeddings: a 400 saying which flag would.
    let (st, m) = call("/v1/embeddings", br#"{"input": "a"}"#, &auth);
    assert!(st == 400 && m.contains("--embedding-model"), "{st} {m}");
    // And the server is unharmed.
    let (st, _, b) = http(s.port, "POST", "/v1/chat/completions", &auth, ok.as_bytes());
    assert_eq!(st, 200, "{b}");
}

/// A streaming client that hangs up mid-answer has its sequence cancelled within a step (the
/// metrics say so), and a request running beside it answers as it would alone.
fn serve_hang_up_frees_the_sequence() {
    let Some(model) = common::real_model("serve_hang_up_frees_the_sequence", SMOL) else {
        return;
    };
    let s = Server::start(&model, &[]);
    let q = QUESTIONS[4];
    let alone = s.post("/v1/chat/completions", &chat_body(q, 48)).1;
    let port = s.port;
    let other = std::thread::spawn(move || {
        let (_, _, b) = http(
            port,
            "POST",
            "/v1/chat/completions",
            &[],
            chat_body(q, 48).to_string().as_bytes(),
        );
        serde_json::from_str::<Value>(&b).unwrap()
    });
    let body = json!({"messages": [{"role": "user", "content": "Tell me a long story."}], "stream": true, "max_tokens": 2000, "ignore_eos": true}).to_string();
    let c = stream_until(s.port, "/v1/chat/completions", &body, b"data: ", 5);
    assert!(s.metric("sequences_running") >= 1);
    drop(c);
    let t0 = Instant::now();
    while s.metric("requests_cancelled_total") < 1 {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "the hung-up request was not cancelled"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let v = other.join().unwrap();
    assert_eq!(
        v["choices"][0]["message"]["content"],
        alone["choices"][0]["message"]["content"]
    );
    // The gauges are published at the end of the step that answered.
    let t0 = Instant::now();
    while s.metric("sequences_running") + s.metric("requests_in_flight") > 0 {
        assert!(t0.elapsed() < Duration::from_secs(10), "sequences still running");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// SIGTERM (how Kubernetes, systemd and docker stop a process) drains as Ctrl-C does: a stream
/// live when it arrives runs to its finish reason and `[DONE]`, new connections are refused,
/// and the process exits 0.
fn serve_sigterm_finishes_live_streams_then_exits_0() {
    let t = "serve_sigterm_finishes_live_streams_then_exits_0";
    let Some(model) = crate::common::real_model(t, SMOL) else {
        return;
    };
    let mut s = Server::start(&model, &[]);
    let body = json!({
        "messages": [{"role": "user", "content": "Count from one to fifty in words."}],
        "max_tokens": 48,
        "temperature": 0,
        "stream": true,
    })
    .to_string();
    let mut c = stream_until(s.port, "/v1/chat/completions", &body, b"data:", 3);
    // SAFETY: kill(2) on the server's own pid; no memory is touched.
    assert_eq!(unsafe { libc::kill(s.child.id() as i32, libc::SIGTERM) }, 0);
    // The server closes the connection once the stream is done (it is stopping).
    c.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut rest = String::new();
    c.read_to_string(&mut rest).unwrap();
    assert!(rest.contains("data: [DONE]"), "the stream was cut: {rest}");
    assert!(
        rest.contains("\"finish_reason\":\"length\"") || rest.contains("\"finish_reason\":\"stop\""),
        "no finish reason: {rest}"
    );
    let t0 = Instant::now();
    let status = s.exit_within(t0, Duration::from_secs(30));
    assert!(status.success(), "exit status {status}");
    assert!(TcpStream::connect(("127.0.0.1", s.port)).is_err(), "still accepting");
}

/// Past `--shutdown-timeout` a stream still running is ended where it is, long before its
/// `max_tokens`: its final chunk (finish_reason "length") and `[DONE]`, then exit 0.
fn serve_shutdown_timeout_ends_live_streams_with_their_final_chunk() {
    let t = "serve_shutdown_timeout_ends_live_streams_with_their_final_chunk";
    let Some(model) = crate::common::real_model(t, SMOL) else {
        return;
    };
    let mut s = Server::start(&model, &["--shutdown-timeout", "0.5"]);
    let body = json!({
        "messages": [{"role": "user", "content": "Count from one to a thousand in words."}],
        "max_tokens": 2000,
        "ignore_eos": true,
        "temperature": 0,
        "stream": true,
    })
    .to_string();
    let mut c = stream_until(s.port, "/v1/chat/completions", &body, b"data:", 3);
    // SAFETY: kill(2) on the server's own pid; no memory is touched.
    assert_eq!(unsafe { libc::kill(s.child.id() as i32, libc::SIGTERM) }, 0);
    let t0 = Instant::now();
    c.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut rest = String::new();
    c.read_to_string(&mut rest).unwrap();
    assert!(
        t0.elapsed() < Duration::from_secs(20),
        "ended {:?} after SIGTERM",
        t0.elapsed()
    );
    assert!(rest.contains("data: [DONE]"), "the stream was cut: {rest}");
    let finishes: Vec<String> = sse_data(&rest)
        .iter()
        .filter(|d| *d != "[DONE]")
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter_map(|c| c["choices"][0]["finish_reason"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(finishes, ["length"], "{rest}");
    let chunks = rest.matches("data: ").count();
    assert!(chunks < 1500, "{chunks} chunks: not ended early");
    let status = s.exit_within(t0, Duration::from_secs(30));
    assert!(status.success(), "exit status {status}");
}

/// OpenAI's edges: a completions prompt as token ids (bare or in a list) answers as its text
/// does; no tokens, an unknown role, a penalty outside -2..2 are 400s naming them; `seed: -1`
/// is a random seed; a wrong method is a 405 with an error body.
fn serve_takes_token_ids_and_names_bad_fields() {
    let t = "serve_takes_token_ids_and_names_bad_fields";
    let Some(model) = common::real_model(t, SMOL) else {
        return;
    };
    let s = Server::start(&model, &[]);
    let text = "The three primary colours are";
    let (st, v) = s.post("/tokenize", &json!({"content": text, "add_special": true}));
    assert_eq!(st, 200, "{v}");
    let ids = v["tokens"].clone();
    let body = |prompt: Value| json!({"prompt": prompt, "max_tokens": 6, "temperature": 0});
    let (st, by_text) = s.post("/v1/completions", &body(json!(text)));
    assert_eq!(st, 200, "{by_text}");
    for prompt in [ids.clone(), json!([ids.clone()])] {
        let (st, v) = s.post("/v1/completions", &body(prompt.clone()));
        assert_eq!(st, 200, "{prompt}: {v}");
        assert_eq!(v["choices"][0]["text"], by_text["choices"][0]["text"], "{prompt}");
        assert_eq!(v["usage"]["prompt_tokens"], by_text["usage"]["prompt_tokens"]);
    }
    for (path, body, needle) in [
        ("/v1/completions", json!({"prompt": [999999999]}), "not a token id"),
        ("/v1/completions", json!({"prompt": ["a", "b"]}), "more than one prompt"),
        ("/v1/completions", json!({"prompt": {"x": 1}}), "string or token ids"),
        ("/v1/completions", json!({"prompt": [[]]}), "empty prompt"),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "bogus", "content": "hi"}]}),
            "role 'bogus'",
        ),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "hi"}], "frequency_penalty": 5}),
            "frequency_penalty 5",
        ),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "hi"}], "presence_penalty": -2.5}),
            "presence_penalty -2.5",
        ),
    ] {
        let (st, v) = s.post(path, &body);
        assert_eq!(st, 400, "{body}: {v}");
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(msg.contains(needle), "{body}: {msg}");
        assert!(!msg.contains("untagged"), "{msg}");
    }
    let (st, v) = s.post(
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "hi"}], "seed": -1, "max_tokens": 2}),
    );
    assert_eq!(st, 200, "{v}");
    let (st, _, b) = http(s.port, "GET", "/v1/chat/completions", &[], b"");
    assert_eq!(st, 405, "{b}");
    let v: Value = serde_json::from_str(&b).unwrap();
    assert!(v["error"]["message"].as_str().unwrap().contains("GET"), "{v}");
}

/// `serve MISSING.gguf` fails before it listens, naming the file, with the path said once.
fn serve_missing_model_fails_before_listening() {
    let o = Command::new(crate::common::exe())
        .args(["serve", "/nonexistent/MISSING.gguf", "--port", "0"])
        .env_remove("MINFER_MODEL")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(!err.contains("listening"), "{err}");
    assert_eq!(err.matches("MISSING.gguf").count(), 1, "{err}");
}

/// A server that speculates (`--spec ngram`; `--draft` with the model as its own draft)
/// answers greedy requests as one that does not, streamed or not, and reports the drafts in
/// llama.cpp's `timings` (`draft_n`, `draft_n_accepted`) and /metrics; a request's
/// `speculative.n_max` 0 drafts nothing, and one out of range is a 400 naming it.
fn serve_speculation_changes_no_token_and_reports_drafts() {
    let t = "serve_speculation_changes_no_token_and_reports_drafts";
    let Some(model) = common::real_model(t, SMOL) else {
        return;
    };
    let code = "def mean(values):\n    s = 0\n    for v in values:\n        s = s + v\n    return s / len(values)\n";
    let q = format!("Repeat this code exactly, then explain it.\n\n{code}");
    let body = chat_body(&q, 40);
    let completion = json!({"prompt": format!("{code}\n{code}"), "temperature": 0, "max_tokens": 24});
    let (want_chat, want_text) = {
        let s = Server::start(&model, &[]);
        let (st, v) = s.post("/v1/chat/completions", &body);
        assert_eq!(st, 200, "{v}");
        assert!(v["timings"]["predicted_n"].as_u64() == Some(40), "{v}");
        assert!(
            v["timings"].get("draft_n").is_none(),
            "no drafts without speculation: {v}"
        );
        let (_, c) = s.post("/v1/completions", &completion);
        (
            v["choices"][0]["message"]["content"].clone(),
            c["choices"][0]["text"].clone(),
        )
    };
    let path = model.display().to_string();
    for extra in [&["--spec", "ngram", "--draft-max", "5"][..], &["--draft", &path]] {
        let s = Server::start(&model, extra);
        let (st, v) = s.post("/v1/chat/completions", &body);
        assert_eq!(st, 200, "{extra:?}: {v}");
        assert_eq!(v["choices"][0]["message"]["content"], want_chat, "{extra:?}");
        let t = &v["timings"];
        let (n, acc) = (
            t["draft_n"].as_u64().unwrap_or(0),
            t["draft_n_accepted"].as_u64().unwrap_or(0),
        );
        assert!(n > 0 && acc <= n, "{extra:?}: {t}");
        if extra[0] == "--draft" {
            assert_eq!(acc, n, "the model drafting for itself: {t}");
        }
        assert_eq!(
            (s.metric("draft_tokens_total"), s.metric("draft_tokens_accepted_total")),
            (n, acc)
        );
        let (_, c) = s.post("/v1/completions", &completion);
        assert_eq!(c["choices"][0]["text"], want_text, "{extra:?}: {c}");
        assert!(c["timings"]["draft_n"].as_u64().unwrap_or(0) > 0, "{extra:?}: {c}");

        // Streamed: the same text; the final chunk carries the timings.
        let mut sb = body.clone();
        sb["stream"] = json!(true);
        let (st, _, raw) = http(s.port, "POST", "/v1/chat/completions", &[], sb.to_string().as_bytes());
        assert_eq!(st, 200);
        let data = sse_data(&raw);
        let chunks: Vec<Value> = data[..data.len() - 1]
            .iter()
            .map(|d| serde_json::from_str(d).unwrap())
            .collect();
        let text: String = chunks
            .iter()
            .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
            .collect();
        assert_eq!(json!(text), want_chat, "{extra:?}: streamed");
        let last = chunks.last().unwrap();
        assert!(
            last["timings"]["draft_n"].as_u64().unwrap_or(0) > 0,
            "{extra:?}: {last}"
        );

        let mut none = body.clone();
        none["speculative.n_max"] = json!(0);
        let (_, v) = s.post("/v1/chat/completions", &none);
        assert_eq!(v["choices"][0]["message"]["content"], want_chat, "{extra:?}: n_max 0");
        assert!(v["timings"].get("draft_n").is_none(), "{extra:?}: n_max 0 drafted: {v}");
        none["speculative.n_max"] = json!(-1);
        let (st, v) = s.post("/v1/chat/completions", &none);
        assert_eq!((st, &v["error"]["param"]), (400, &json!("speculative.n_max")), "{v}");
    }
}
