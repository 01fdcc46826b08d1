//! The integration suite: one test binary, one module per layer.
//!
//! Adding a test: write a plain `fn name()` in its module and add `name` to that module's
//! `tests![…]` list (a new module: also one `tests.extend(module::tests())` in `main`). A test
//! whose data or device is missing calls `common::skip` and returns: it is counted as ignored,
//! with the reason (in CI, a failure). Runner and list syntax: `harness`.
//!
//! - `batch`     — many sequences: batch invariance, fork, truncate, a full pool, growth, the
//!   scheduler (continuous batching, cancellation, prefix reuse)
//! - `cli`       — the binary: info --json, tokenize, greedy run per ISA, chat over a pipe, bad input
//! - `common`    — fixtures: tests/data, $MINFER_REF_DIR, the fetched real models; `skip`
//! - `harness`   — the runner (libtest-mimic): registration, run-time ignores with their reason,
//!   and its own tests
//! - `embed`     — embeddings: all-MiniLM-L6-v2 against sentence-transformers, batches, `embed`
//! - `gguf`      — the container: round trips, split files, real models, hostile files
//! - `hf`        — safetensors directories vs transformers and GGUF; HF cache resolution; hostile files
//! - `hf_moe`    — MoE safetensors: expert layouts stacked/split, gpt-oss MXFP4, bad experts
//! - `model`     — whole-model logits against llama.cpp and transformers (CPU backend)
//! - `moe`       — mixtures of experts: random MoE models against both oracles, the routing
//! - `serve`     — the HTTP server: answers as `run`, streaming, concurrency, hang-ups, errors;
//!   `serve/ollama` (Ollama's API)
//! - `tiny`      — tiny random models per architecture: prefill/decode, caches, threads, bad shapes
//! - `quant`     — every qtype's codecs against ggml's recorded bytes and floats
//! - `quantize`  — `quantize` against llama-quantize's recorded files and mixes; the CLI's errors
//! - `chat`      — chat templates against jinja2's renders (SmolLM2's recorded, ChatML, Qwen2)
//! - `tokenize`  — GGUF tokenizers against llama.cpp's ids, pieces and detokenized text
//! - `gpu`       — the GPU backends (wgpu; with the `cuda` feature, CUDA on its CPU emulation
//!   and on a device where there is one) against the CPU, op by op and qtype by qtype; with
//!   `gpu/translate` (every shader through naga, no GPU), `gpu/cuda` (every CUDA kernel through
//!   NVRTC, no GPU), `gpu/geometry` (launch tables on device profiles, no GPU), `gpu/models`
//!   (whole models) and `gpu/batch` (many sequences per step);
//!   built without the `wgpu` feature, one ignored entry says so

// An unlisted test fn is dead code: a compile error, not a test that silently never runs.
#![deny(dead_code)]

#[macro_use]
mod harness;

mod batch;
mod chat;
mod cli;
mod common;
mod embed;
mod gguf;
#[cfg(feature = "wgpu")]
mod gpu;
mod hf;
mod hf_moe;
mod model;
mod moe;
mod quant;
mod quantize;
#[cfg(feature = "server")]
mod serve;
mod tiny;
mod tokenize;

fn main() {
    let mut tests = Vec::new();
    tests.extend(harness::tests());
    tests.extend(batch::tests());
    tests.extend(chat::tests());
    tests.extend(cli::tests());
    tests.extend(embed::tests());
    tests.extend(gguf::tests());
    tests.extend(hf::tests());
    tests.extend(hf_moe::tests());
    tests.extend(model::tests());
    tests.extend(moe::tests());
    tests.extend(quant::tests());
    tests.extend(quantize::tests());
    #[cfg(feature = "server")]
    {
        tests.extend(serve::tests());
        tests.extend(serve::load::tests());
        tests.extend(serve::openai_client::tests());
        tests.extend(serve::ollama::tests());
        tests.extend(serve::tools::tests());
        tests.extend(serve::constrain::tests());
        tests.extend(serve::embed::tests());
    }
    tests.extend(tiny::tests());
    tests.extend(tokenize::tests());
    #[cfg(feature = "wgpu")]
    {
        tests.extend(gpu::tests());
        tests.extend(gpu::geometry::tests());
        tests.extend(gpu::models::tests());
        tests.extend(gpu::moe::tests());
        tests.extend(gpu::batch::tests());
        tests.extend(gpu::translate::tests());
        #[cfg(feature = "cuda")]
        tests.extend(gpu::cuda::tests());
    }
    #[cfg(not(feature = "wgpu"))]
    tests.push(harness::Test::unavailable("gpu::all", "built without the wgpu feature"));
    harness::main(tests)
}
