//! Ollama's API over plain HTTP with SmolLM2: `/api/chat` and `/api/generate` answer what
//! `run` answers (whole and as NDJSON lines), the model endpoints describe the file as
//! gguf-py recorded it, and bad input gets `{"error": …}` with its status.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::{http, run_greedy, stream_until, Server, SMOL};
use crate::common;

tests![
    ollama_chat_and_generate_answer_as_run_does,
    ollama_model_endpoints_describe_the_file,
    ollama_errors_and_the_load_call,
    ollama_hang_up_cancels_and_a_full_server_says_429,
];

/// The loaded model's Ollama name, whatever a request calls it.
const NAME: &str = "SmolLM2-135M-Instruct.Q4_1:latest";

/// An NDJSON body as its objects, checking one object per line.
fn ndjson(body: &str) -> Vec<Value> {
    body.lines()
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: line {l:?}")))
        .collect()
}

/// The last object of an answer: done, with its reason and every timing field (ns).
fn check_done(v: &Value, reason: &str, eval_count: u64) {
    assert_eq!(v["done"], true, "{v}");
    assert_eq!(v["done_reason"], reason, "{v}");
    assert_eq!(v["model"], NAME, "{v}");
    assert_eq!(v["eval_count"], eval_count, "{v}");
    for k in [
        "total_duration",
        "load_duration",
        "prompt_eval_count",
        "prompt_eval_duration",
        "eval_duration",
    ] {
        assert!(v[k].is_u64(), "{k} in {v}");
    }
    let total = v["total_duration"].as_u64().unwrap();
    let parts = v["prompt_eval_duration"].as_u64().unwrap() + v["eval_duration"].as_u64().unwrap();
    assert!(total > 0 && parts > 0 && total >= parts, "{v}");
    assert!(v["created_at"].as_str().unwrap().ends_with('Z'), "{v}");
}

/// Posts and returns (status, content type, NDJSON objects).
fn post_lines(s: &Server, path: &str, body: &Value) -> (u16, String, Vec<Value>) {
    let (st, head, raw) = http(s.port, "POST", path, &[], body.to_string().as_bytes());
    let ct = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-type: ")
                .map(str::to_string)
        })
        .unwrap_or_default();
    (st, ct, ndjson(&raw))
}

/// Greedy `/api/chat` (whole and streamed, the default) and `/api/generate` (templated and
/// raw) equal `run`'s answers; the counts equal the OpenAI endpoint's usage.
fn ollama_chat_and_generate_answer_as_run_does() {
    let Some(model) = common::real_model("ollama_chat_and_generate_answer_as_run_does", SMOL) else {
        return;
    };
    let s = Server::start(&model, &[]);
    let q = "What is the capital of France?";
    let want = run_greedy(&model, q, 24, false);
    let opts = json!({"temperature": 0, "num_predict": 24, "num_ctx": 4096});
    let chat =
        json!({"model": "llama3.2", "messages": [{"role": "user", "content": q}], "options": opts, "keep_alive": "5m"});

    let mut whole = chat.clone();
    whole["stream"] = json!(false);
    let (st, v) = s.post("/api/chat", &whole);
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["message"]["role"], "assistant");
    assert_eq!(v["message"]["content"].as_str().unwrap(), want);
    check_done(&v, "length", 24);
    let (_, oa) = s.post("/v1/chat/completions", &super::chat_body(q, 24));
    assert_eq!(v["prompt_eval_count"], oa["usage"]["prompt_tokens"], "{oa}");

    let (st, ct, lines) = post_lines(&s, "/api/chat", &chat);
    assert_eq!(st, 200);
    assert_eq!(ct, "application/x-ndjson");
    let (last, pieces) = lines.split_last().unwrap();
    assert!(pieces.len() > 1, "one line per piece: {lines:?}");
    assert!(pieces.iter().all(|p| p["done"] == false && p["model"] == NAME));
    let text: String = lines
        .iter()
        .map(|p| p["message"]["content"].as_str().unwrap())
        .collect();
    assert_eq!(text, want, "streamed text");
    check_done(last, "length", 24);
    assert_eq!(last["prompt_eval_count"], v["prompt_eval_count"]);

    // A prompt without raw goes through the template as the user's message.
    let (st, v) = s.post(
        "/api/generate",
        &json!({"model": "x", "prompt": q, "stream": false, "options": opts}),
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["response"].as_str().unwrap(), want);
    check_done(&v, "length", 24);

    let p = "The three primary colours are";
    let want = run_greedy(&model, p, 16, true);
    let raw = json!({"model": "x", "prompt": p, "raw": true, "options": {"temperature": 0, "num_predict": 16}});
    let (st, ct, lines) = post_lines(&s, "/api/generate", &raw);
    assert_eq!((st, ct.as_str()), (200, "application/x-ndjson"));
    let text: String = lines.iter().map(|p| p["response"].as_str().unwrap()).collect();
    assert_eq!(text, want, "raw, streamed");
    check_done(lines.last().unwrap(), "length", 16);
    let mut whole = raw.clone();
    whole["stream"] = json!(false);
    let (_, v) = s.post("/api/generate", &whole);
    assert_eq!(v["response"].as_str().unwrap(), want, "raw, whole");

    // A stop string ends the answer before it, with reason stop.
    let cut = want.trim_start().split(' ').nth(1).unwrap().to_string();
    whole["options"]["stop"] = json!([cut]);
    let (_, v) = s.post("/api/generate", &whole);
    assert_eq!(v["done_reason"], "stop", "{v}");
    assert!(want.starts_with(v["response"].as_str().unwrap()), "{v}");
    assert!(!v["response"].as_str().unwrap().contains(&cut), "{v}");
}

/// `/`, `/api/version`, `/api/tags`, `/api/show` and `/api/ps` in Ollama's shapes, their
/// facts equal to gguf-py's recorded summary of the file.
fn ollama_model_endpoints_describe_the_file() {
    let test = "ollama_model_endpoints_describe_the_file";
    let Some(model) = common::real_model(test, SMOL) else {
        return;
    };
    let Some(refs) = common::ref_dir(test) else {
        return;
    };
    let all: Vec<Value> =
        serde_json::from_str(&std::fs::read_to_string(refs.join("gguf_summary_real.json")).unwrap()).unwrap();
    let r = all
        .iter()
        .find(|e| e["file"].as_str().unwrap().ends_with(SMOL))
        .expect("SmolLM2 in gguf_summary_real.json");
    let s = Server::start(&model, &[]);

    assert_eq!(s.get("/"), (200, "Ollama is running".to_string()));
    let (st, _, body) = http(s.port, "HEAD", "/", &[], b"");
    assert_eq!((st, body.as_str()), (200, ""));
    let (st, v) = s.get("/api/version");
    assert_eq!(st, 200);
    let v: Value = serde_json::from_str(&v).unwrap();
    let ver = v["version"].as_str().unwrap();
    assert!(ver.split('.').all(|p| p.parse::<u32>().is_ok()), "{v}");

    let (st, tags) = s.get("/api/tags");
    assert_eq!(st, 200);
    let tags: Value = serde_json::from_str(&tags).unwrap();
    let m = &tags["models"][0];
    assert_eq!(m["name"], NAME, "{tags}");
    assert_eq!(m["model"], NAME);
    assert_eq!(m["size"], r["size_bytes"]);
    let digest = m["digest"].as_str().unwrap();
    assert!(
        digest.len() == 64 && digest.bytes().all(|b| b.is_ascii_hexdigit()),
        "{digest}"
    );
    assert!(m["modified_at"].as_str().unwrap().ends_with('Z'));
    let d = &m["details"];
    assert_eq!(d["format"], "gguf");
    assert_eq!(d["family"], r["architecture"]);
    assert_eq!(d["families"], json!([r["architecture"]]));
    assert_eq!(
        d["quantization_level"], "Q4_1",
        "general.file_type {}",
        r["general.file_type"]
    );
    // 134 515 008 parameters: Ollama's HumanNumber gives "135M".
    assert_eq!(d["parameter_size"], "135M");

    let (st, show) = s.post("/api/show", &json!({"model": "anything"}));
    assert_eq!(st, 200, "{show}");
    assert_eq!(show["details"], *d);
    let info = &show["model_info"];
    assert_eq!(info["general.architecture"], r["architecture"]);
    assert_eq!(info["general.file_type"], r["general.file_type"]);
    assert_eq!(info["general.name"], r["general.name"]);
    for (k, want) in r["hparams"].as_object().unwrap() {
        let got = info[k].as_f64().unwrap_or_else(|| panic!("{k} missing from {info}"));
        let want = want.as_f64().unwrap();
        assert!((got - want).abs() <= 1e-6 * want.abs(), "{k}: {got} vs {want}");
    }
    let template = show["template"].as_str().unwrap();
    assert!(template.contains("<|im_start|>"), "{template}");
    assert_eq!(show["capabilities"], json!(["completion"]));
    assert!(show["parameters"].as_str().unwrap().contains("temperature"));

    let (st, ps) = s.get("/api/ps");
    assert_eq!(st, 200);
    let ps: Value = serde_json::from_str(&ps).unwrap();
    let p = &ps["models"][0];
    assert_eq!(p["name"], NAME);
    assert_eq!(p["digest"], m["digest"]);
    assert!(
        p["size"].as_u64().unwrap() > 0 && p["context_length"].as_u64().unwrap() > 0,
        "{ps}"
    );
    assert_eq!(p["size_vram"], 0, "the CPU backend holds nothing on a GPU");
}

/// Ollama's error shape: `{"error": "message"}` and nothing else.
fn error_message(status: u16, body: &str) -> String {
    let v: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{status}: {e}: {body}"));
    assert_eq!(v.as_object().map(|o| o.len()), Some(1), "{status}: {v}");
    v["error"]
        .as_str()
        .unwrap_or_else(|| panic!("{status}: not Ollama's shape: {v}"))
        .to_string()
}

/// Bad JSON, bad fields and bad option types are 400 with `{"error": message}` naming the
/// field; a bad `format` is refused, and a good one enforced; a missing key is 401, an unknown route 404 and a
/// huge body 413, all in that shape; an empty prompt (or no messages) is the load call,
/// answered at once without a request to the scheduler.
fn ollama_errors_and_the_load_call() {
    let Some(model) = common::real_model("ollama_errors_and_the_load_call", SMOL) else {
        return;
    };
    let s = Server::start(&model, &["--api-key", "sesame"]);
    let auth = [("Authorization", "Bearer sesame")];
    let post = |path: &str, body: &Value| {
        let (st, _, b) = http(s.port, "POST", path, &auth, body.to_string().as_bytes());
        (
            st,
            serde_json::from_str::<Value>(&b).unwrap_or_else(|e| panic!("{e}: {b}")),
        )
    };
    let chat = |extra: Value| {
        let mut b = json!({"model": "x", "messages": [{"role": "user", "content": "hi"}], "stream": false});
        for (k, v) in extra.as_object().unwrap() {
            b[k] = v.clone();
        }
        b
    };
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("/api/chat", b"{\"messages\": [".to_vec(), "JSON"),
        ("/api/chat", b"[1, 2]".to_vec(), "object"),
        (
            "/api/chat",
            chat(json!({"messages": "hi"})).to_string().into_bytes(),
            "messages",
        ),
        (
            "/api/chat",
            chat(json!({"stream": "yes"})).to_string().into_bytes(),
            "stream",
        ),
        (
            "/api/chat",
            chat(json!({"options": {"temperature": "hot"}}))
                .to_string()
                .into_bytes(),
            "temperature",
        ),
        (
            "/api/chat",
            chat(json!({"options": {"num_predict": "24"}})).to_string().into_bytes(),
            "num_predict",
        ),
        (
            "/api/chat",
            chat(json!({"options": {"stop": [1]}})).to_string().into_bytes(),
            "stop",
        ),
        (
            "/api/chat",
            chat(json!({"options": 3})).to_string().into_bytes(),
            "options",
        ),
        (
            "/api/chat",
            chat(json!({"options": {"top_p": 7}})).to_string().into_bytes(),
            "top_p",
        ),
        (
            "/api/chat",
            chat(json!({"format": "yaml"})).to_string().into_bytes(),
            "format",
        ),
        (
            "/api/chat",
            chat(json!({"messages": [{"role": "user", "content": "?", "images": ["aGk="]}]}))
                .to_string()
                .into_bytes(),
            "images",
        ),
        (
            "/api/generate",
            json!({"prompt": "hi", "images": ["aGk="]}).to_string().into_bytes(),
            "images",
        ),
        (
            "/api/generate",
            json!({"prompt": "hi", "format": {"type": "no-such-type"}})
                .to_string()
                .into_bytes(),
            "format",
        ),
        (
            "/api/generate",
            json!({"prompt": "hi", "raw": true, "system": "be brief"})
                .to_string()
                .into_bytes(),
            "system",
        ),
        ("/api/generate", json!({"prompt": 5}).to_string().into_bytes(), "prompt"),
        (
            "/api/generate",
            json!({"prompt": "def f(", "suffix": "return 1"})
                .to_string()
                .into_bytes(),
            "suffix",
        ),
        (
            "/api/chat",
            chat(json!({"think": true})).to_string().into_bytes(),
            "think",
        ),
    ];
    for (path, body, names) in &cases {
        let (st, _, b) = http(s.port, "POST", path, &auth, body);
        let what = String::from_utf8_lossy(body);
        assert_eq!(st, 400, "{path} {what}: {b}");
        let msg = error_message(st, &b);
        assert!(msg.contains(names), "{path} {what}: {msg:?} should name {names}");
    }
    let (st, _, b) = http(s.port, "POST", "/api/chat", &auth, &vec![b' '; 9 << 20]);
    assert_eq!(st, 413, "{b}");
    error_message(st, &b);
    let ok = chat(json!({"options": {"num_predict": 2, "temperature": 0}}));
    for (path, headers) in [
        ("/api/chat", &[][..]),
        ("/api/generate", &[("Authorization", "Bearer wrong")][..]),
        ("/api/show", &[][..]),
    ] {
        let (st, _, b) = http(s.port, "POST", path, headers, ok.to_string().as_bytes());
        assert_eq!(st, 401, "{path}: {b}");
        assert!(error_message(st, &b).contains("API key"), "{b}");
    }
    let (st, _, b) = http(s.port, "GET", "/api/tags", &[], b"");
    assert_eq!(st, 401, "{b}");
    let (st, _, b) = http(s.port, "POST", "/api/pull", &auth, b"{}");
    assert_eq!(st, 404, "{b}");
    assert!(error_message(st, &b).contains("/api/pull"), "{b}");

    // Go clients send empty strings for fields they do not set: those are no fields; `think:
    // false`, `keep_alive` and options without a meaning here change nothing.
    let mut empty = ok.clone();
    empty["format"] = json!("");
    empty["think"] = json!(false);
    empty["keep_alive"] = json!(-1);
    let (st, v) = post("/api/chat", &empty);
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["eval_count"], 2);
    let g = json!({"prompt": "Hi", "system": "", "template": "", "suffix": "", "format": "", "images": null,
        "context": [], "raw": false, "stream": false, "options": {"num_predict": 2, "num_gpu": 99}});
    let (st, v) = post("/api/generate", &g);
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["eval_count"], 2);

    let before = s.metric("requests_total");
    for (path, body, key) in [
        ("/api/generate", json!({"model": "x"}), "response"),
        ("/api/generate", json!({"model": "x", "prompt": ""}), "response"),
        ("/api/chat", json!({"model": "x", "messages": []}), "message"),
    ] {
        let (st, v) = post(path, &body);
        assert_eq!(st, 200, "{v}");
        assert_eq!(v["done"], true, "{v}");
        assert_eq!(v["done_reason"], "load", "{v}");
        assert_eq!(v["model"], NAME);
        assert!(v.get(key).is_some(), "{v}");
    }
    assert_eq!(s.metric("requests_total"), before, "the load call runs nothing");

    // `format`: the answer is JSON of the schema, on chat and generate.
    let schema = json!({"type": "object", "properties": {"planet": {"type": "string", "maxLength": 24}, "moons": {"type": "integer", "minimum": 0, "maximum": 200}},
        "required": ["planet", "moons"], "additionalProperties": false});
    let opts = json!({"temperature": 0, "num_predict": 48});
    for (path, mut body, key) in [
        (
            "/api/chat",
            chat(json!({"format": schema, "options": opts})),
            "/message/content",
        ),
        (
            "/api/generate",
            json!({"prompt": "Name a planet and its moons.", "format": schema, "stream": false, "options": opts}),
            "/response",
        ),
        (
            "/api/chat",
            chat(json!({"format": "json", "options": opts})),
            "/message/content",
        ),
    ] {
        body["model"] = json!("x");
        let (st, v) = post(path, &body);
        assert_eq!(st, 200, "{v}");
        let text = v.pointer(key).and_then(Value::as_str).unwrap_or_default();
        if !body["format"].is_object() && v["done_reason"] == "length" {
            // Any object: a small model may go on adding keys past the token limit.
            assert!(text.starts_with('{'), "{path}: {text:?}");
            continue;
        }
        let got: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{path}: {e}: {text:?}"));
        assert!(got.is_object(), "{path}: {got}");
        if body["format"].is_object() {
            assert!(got["planet"].is_string() && got["moons"].is_i64(), "{path}: {got}");
        }
    }
}

/// A streaming `/api/chat` whose client hangs up is cancelled within a step and gives its
/// place back; while it holds the only place, another request is 429 with `Retry-After`.
fn ollama_hang_up_cancels_and_a_full_server_says_429() {
    let Some(model) = common::real_model("ollama_hang_up_cancels_and_a_full_server_says_429", SMOL) else {
        return;
    };
    let s = Server::start(&model, &["--parallel", "1", "--max-queue", "0"]);
    let body = json!({
        "model": "x",
        "messages": [{"role": "user", "content": "Count from 1 to 1000, one number per line."}],
        "options": {"temperature": 0, "num_predict": 2000},
    })
    .to_string();
    let c = stream_until(s.port, "/api/chat", &body, b"\"done\":false", 5);
    let small =
        json!({"messages": [{"role": "user", "content": "Hi"}], "stream": false, "options": {"num_predict": 2}});
    let (st, head, b) = http(s.port, "POST", "/api/chat", &[], small.to_string().as_bytes());
    assert_eq!(st, 429, "{b}");
    assert!(head.to_ascii_lowercase().contains("retry-after: 1"), "{head}");
    assert!(error_message(st, &b).contains("try again"), "{b}");

    drop(c);
    let t0 = Instant::now();
    while s.metric("requests_cancelled_total") < 1 || s.metric("requests_in_flight") > 0 {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "the hung-up request was not cancelled"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let (st, v) = s.post("/api/chat", &small);
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["eval_count"], 2, "{v}");
}
