//! Embeddings over HTTP: `serve` with SmolLM2 and `--embedding-model all-MiniLM-L6-v2`, the
//! vectors against sentence-transformers' (`tests/data/embeddings`), every input shape and
//! encoding, the routing by `model`, the refusals; the `openai` and `ollama` Python clients;
//! an embedding model served alone.

use std::process::Command;

use serde_json::{json, Value};

use super::{Server, SMOL};
use crate::common;

tests![
    serve_embeddings_beside_a_chat_model,
    serve_embedding_clients,
    serve_an_embedding_model_alone
];

const MINILM: &str = "all-MiniLM-L6-v2";

use crate::embed::minilm;

/// (text, ids, vector) of the first `n` recorded cases.
fn refs(n: usize) -> Vec<(String, Vec<u64>, Vec<f64>)> {
    let doc = common::read_json(&common::data_dir().join("embeddings/all-minilm-l6-v2.json"));
    doc["cases"].as_array().unwrap()[..n]
        .iter()
        .map(|c| {
            (
                c["text"].as_str().unwrap().to_string(),
                c["ids"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|x| x.as_u64().unwrap())
                    .collect(),
                c["embedding"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|x| x.as_f64().unwrap())
                    .collect(),
            )
        })
        .collect()
}

/// A JSON array of f32 values, each read back as the f32 it was written from.
fn floats(v: &Value) -> Vec<f64> {
    v.as_array()
        .unwrap_or_else(|| panic!("not an array: {v}"))
        .iter()
        .map(|x| x.as_f64().unwrap() as f32 as f64)
        .collect()
}

fn cosine(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    let dot: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    dot / (a.iter().map(|x| x * x).sum::<f64>() * b.iter().map(|x| x * x).sum::<f64>()).sqrt()
}

fn b64_floats(s: &str) -> Vec<f64> {
    let val = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => panic!("not base64: {c}"),
    } as u32;
    let mut bytes = Vec::new();
    for q in s.as_bytes().chunks(4) {
        let pad = q.iter().filter(|&&c| c == b'=').count();
        let n = q.iter().take(4 - pad).fold(0u32, |n, &c| n << 6 | val(c)) << (6 * pad);
        bytes.extend(&n.to_be_bytes()[1..4 - pad]);
    }
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64)
        .collect()
}

fn serve_embeddings_beside_a_chat_model() {
    let t = "serve_embeddings_beside_a_chat_model";
    let (Some(smol), Some(dir)) = (common::real_model(t, SMOL), minilm(t)) else {
        return;
    };
    let s = Server::start(&smol, &["--embedding-model", &dir.display().to_string()]);
    let r = refs(3);
    let (texts, ids): (Vec<&str>, Vec<&Vec<u64>>) = r.iter().map(|c| (c.0.as_str(), &c.1)).unzip();
    // A list of strings: each vector sentence-transformers', the tokens counted.
    let (st, v) = s.post("/v1/embeddings", &json!({"model": MINILM, "input": texts}));
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["object"], "list");
    assert_eq!(v["model"], MINILM);
    let data = v["data"].as_array().unwrap();
    assert_eq!(data.len(), 3);
    for (i, (d, c)) in data.iter().zip(&r).enumerate() {
        assert_eq!(d["index"], i);
        assert_eq!(d["object"], "embedding");
        let cos = cosine(&floats(&d["embedding"]), &c.2);
        assert!(cos >= 0.9999, "{}: cosine {cos}", c.0);
    }
    let n: usize = ids.iter().map(|i| i.len()).sum();
    assert_eq!(v["usage"]["prompt_tokens"], n, "{v}");
    let first = floats(&data[0]["embedding"]);
    // The same input as token ids, and as base64: the same vector.
    let (st, v) = s.post("/v1/embeddings", &json!({"input": ids[0]}));
    assert_eq!(st, 200, "{v}");
    assert_eq!(floats(&v["data"][0]["embedding"]), first);
    let (st, v) = s.post(
        "/v1/embeddings",
        &json!({"model": MINILM, "input": texts[0], "encoding_format": "base64"}),
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(b64_floats(v["data"][0]["embedding"].as_str().unwrap()), first);
    // dimensions: the first 128 values, unit length again.
    let (st, v) = s.post(
        "/v1/embeddings",
        &json!({"model": MINILM, "input": texts[0], "dimensions": 128}),
    );
    assert_eq!(st, 200, "{v}");
    let short = floats(&v["data"][0]["embedding"]);
    assert_eq!(short.len(), 128);
    assert!((short.iter().map(|x| x * x).sum::<f64>() - 1.0).abs() < 1e-5);
    assert!(cosine(&short, &first[..128]) > 0.99999);
    // Refusals, each naming what is wrong; the server goes on.
    let long = "word ".repeat(700);
    for (body, needle) in [
        (json!({"model": MINILM, "input": long}), "512"),
        (json!({"model": MINILM, "input": []}), "empty"),
        (json!({"model": MINILM, "input": [[1, 2], {}]}), "input[1]"),
        (json!({"model": MINILM, "input": [999999]}), "vocabulary"),
        (
            json!({"model": MINILM, "input": "a", "encoding_format": "hex"}),
            "encoding_format",
        ),
        (json!({"model": MINILM, "input": "a", "dimensions": 1000}), "dimensions"),
        (json!({"model": SMOL.trim_end_matches(".gguf"), "input": "a"}), MINILM),
    ] {
        let (st, v) = s.post("/v1/embeddings", &body);
        assert_eq!(st, 400, "{body}: {v}");
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(msg.contains(needle), "{body}: {msg}");
    }
    // Ollama's: truncation by default, refused with `truncate: false`; the older endpoint.
    let (st, v) = s.post("/api/embed", &json!({"model": MINILM, "input": texts[0]}));
    assert_eq!(st, 200, "{v}");
    assert_eq!(floats(&v["embeddings"][0]), first);
    assert_eq!(v["prompt_eval_count"], ids[0].len());
    let (st, v) = s.post("/api/embed", &json!({"model": MINILM, "input": long}));
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["prompt_eval_count"], 512);
    let (st, v) = s.post(
        "/api/embed",
        &json!({"model": MINILM, "input": long, "truncate": false}),
    );
    assert_eq!(st, 400, "{v}");
    assert!(v["error"].as_str().unwrap().contains("512"), "{v}");
    let (st, v) = s.post("/api/embeddings", &json!({"model": MINILM, "prompt": texts[0]}));
    assert_eq!(st, 200, "{v}");
    assert_eq!(floats(&v["embedding"]), first);
    // Both models listed; the chat model still answers.
    let (_, m) = s.get("/v1/models");
    assert!(m.contains(MINILM) && m.contains("SmolLM2"), "{m}");
    let (st, v) = s.post(
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}),
    );
    assert_eq!(st, 200, "{v}");
}

fn serve_embedding_clients() {
    let t = "serve_embedding_clients";
    let (Some(smol), Some(dir)) = (common::real_model(t, SMOL), minilm(t)) else {
        return;
    };
    if !common::python_with(t, "openai, ollama", "pip install openai ollama") {
        return;
    }
    let s = Server::start(&smol, &["--embedding-model", &dir.display().to_string()]);
    let r = refs(4);
    let expected = json!({
        "model": MINILM,
        "texts": r.iter().map(|c| c.0.clone()).collect::<Vec<_>>(),
        "vectors": r.iter().map(|c| c.2.clone()).collect::<Vec<_>>(),
    });
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/embeddings_client.py");
    let o = Command::new("python3")
        .args([script, &format!("http://127.0.0.1:{}", s.port), &expected.to_string()])
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// `serve all-MiniLM-L6-v2`: embeddings whatever the `model`; the generating endpoints are 400s
/// that say it is an embedding model.
fn serve_an_embedding_model_alone() {
    let Some(dir) = minilm("serve_an_embedding_model_alone") else {
        return;
    };
    let s = Server::start(&dir, &[]);
    let r = refs(1);
    let (st, v) = s.post("/v1/embeddings", &json!({"model": "anything", "input": r[0].0}));
    assert_eq!(st, 200, "{v}");
    assert!(cosine(&floats(&v["data"][0]["embedding"]), &r[0].2) >= 0.9999);
    let (st, v) = s.post(
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "Hi"}]}),
    );
    assert_eq!(st, 400, "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("embedding model"),
        "{v}"
    );
    let (st, v) = s.post("/api/generate", &json!({"model": MINILM, "prompt": "Hi"}));
    assert_eq!(st, 400, "{v}");
}
