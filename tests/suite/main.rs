//! The integration suite: one test binary, one module per layer.
//!
//! - `cli`       — the binary: info --json, tokenize, greedy run per ISA, chat over a pipe, bad input
//! - `common`    — fixtures: tests/data, $MINFER_REF_DIR, the fetched real models
//! - `gguf`      — the container: round trips, split files, real models, hostile files
//! - `hf`        — safetensors directories vs transformers and GGUF; HF cache resolution; hostile files
//! - `model`     — whole-model logits against llama.cpp and transformers (CPU backend)
//! - `tiny`      — tiny random models per architecture: prefill/decode, caches, threads, bad shapes
//! - `quant`     — every qtype's codecs against ggml's recorded bytes and floats
//! - `chat`      — chat templates against jinja2's renders (SmolLM2's recorded, ChatML, Qwen2)
//! - `tokenize`  — GGUF tokenizers against llama.cpp's ids, pieces and detokenized text
//! - `gpu`       — the GPU backends (wgpu; with the `cuda` feature, CUDA on its CPU emulation
//!   and on a device where there is one) against the CPU, op by op and qtype by qtype; with
//!   `gpu/translate` (every shader through naga, no GPU), `gpu/cuda` (every CUDA kernel through
//!   NVRTC, no GPU) and `gpu/models` (whole models)

mod chat;
mod cli;
mod common;
mod gguf;
mod gpu;
mod hf;
mod model;
mod quant;
mod tiny;
mod tokenize;
