//! The integration suite: one test binary, one module per layer.
//!
//! - `common`    — fixtures: tests/data, $MINFER_REF_DIR, the fetched real models
//! - `gguf`      — the container: round trips, split files, real models, hostile files
//! - `model`     — whole-model logits against llama.cpp and transformers (CPU backend)
//! - `quant`     — every qtype's codecs against ggml's recorded bytes and floats
//! - `chat`      — chat templates against jinja2's renders (SmolLM2's recorded, ChatML, Qwen2)
//! - `tokenize`  — GGUF tokenizers against llama.cpp's ids, pieces and detokenized text

mod chat;
mod common;
mod gguf;
mod model;
mod quant;
mod tokenize;
