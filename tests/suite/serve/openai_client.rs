//! The official `openai` Python client (`pip install openai`; CI installs it) against the
//! server: models, chat, streaming chat with usage, completions, and its typed errors. The
//! answers must equal `run`'s greedy ones.

use std::process::Command;

use serde_json::json;

use super::{run_greedy, Server, SMOL};
use crate::common;

tests![serve_openai_python_client];

fn serve_openai_python_client() {
    let name = "serve_openai_python_client";
    let Some(model) = common::real_model(name, SMOL) else {
        return;
    };
    if !common::python_with(name, "openai", "pip install openai") {
        return;
    }
    let (question, prompt) = ("What is the capital of France?", "The three primary colours are");
    let expected = json!({
        "question": question,
        "chat": run_greedy(&model, question, 24, false),
        "chat_tokens": 24,
        "prompt": prompt,
        "text": run_greedy(&model, prompt, 16, true),
        "text_tokens": 16,
    });
    let s = Server::start(&model, &["--api-key", "sk-local"]);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/openai_client.py");
    let o = Command::new("python3")
        .args([
            script,
            &format!("http://127.0.0.1:{}/v1", s.port),
            "sk-local",
            &expected.to_string(),
        ])
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}
