//! The command line. Every command is built on the library API and nothing else.

mod bench;
mod embed;
mod flags;
mod generate;
mod info;
mod perplexity;
mod plan;
mod progress;
mod quantize;
#[cfg(feature = "server")]
mod serve;
mod trace;

use std::path::Path;

use anyhow::{Context as _, Result};
use clap::{Parser, Subcommand};

use minfer::overrides::Overrides;
use minfer::{Session, SessionOptions};

#[derive(Parser)]
#[command(
    name = "minfer-wgpu",
    version,
    about = "Run GGUF and Hugging Face language models on wgpu, CUDA or the CPU",
    after_help = "MODEL is a .gguf file, a Hugging Face model directory (config.json, *.safetensors, \
                  tokenizer.json), or org/name[@revision] from the Hugging Face cache \
                  ($HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub)."
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
    /// Per-op time on stderr after the run (MINFER_PROFILE=1): wgpu timestamp queries; on the
    /// CPU its clock and the weight bytes each op reads per token
    #[arg(long, global = true)]
    profile: bool,
}

/// What every command starts from: the environment's overrides (read once, in `main`) and
/// the global flags that override them.
struct Base {
    env: Overrides,
    profile: bool,
}

impl Base {
    /// Session options as the environment has them, with `--profile` and the upload bar.
    fn session(&self) -> SessionOptions {
        let mut o = SessionOptions::from_overrides(&self.env);
        o.backend_options.profile |= self.profile;
        o.backend_options.progress = Some(progress::upload_bar());
        o
    }
}

/// Prints the backend's per-op time table, where `--profile` asked for one.
fn print_profile(s: &Session) {
    if let Some(report) = s.profile_report() {
        eprint!("{report}");
    }
}

#[derive(Subcommand)]
enum Cmd {
    /// Generate text: `run [MODEL] [PROMPT]` (prompt from stdin when absent)
    Run(generate::RunArgs),
    /// Chat with a model: `/reset`, `/exit`, Ctrl-C stops an answer
    Chat(generate::ChatArgs),
    /// Embedding vectors of TEXTs (one per line of stdin when none): one JSON array per line,
    /// pooled and normalised as the model says
    Embed(embed::EmbedArgs),
    /// Print the token ids of TEXT, as llama-tokenize does
    Tokenize(generate::TokenizeArgs),
    /// Print a model's metadata, tensor table and each backend's verdict
    Info(info::InfoArgs),
    /// Perplexity over a text file, as llama-perplexity computes it
    Perplexity(perplexity::PerplexityArgs),
    /// One named intermediate (a node of `--dump-graph`, e.g. blk.3.attn_out) of PROMPT's
    /// forward on each backend, against the first backend's
    Trace(trace::TraceArgs),
    /// An OpenAI- and Ollama-compatible HTTP server (chat and text completions, streaming,
    /// embeddings) on continuous batching; MODEL defaults as for run
    #[cfg(feature = "server")]
    Serve(serve::ServeArgs),
    /// Quantize a GGUF file as llama-quantize does (same types, mixes and bytes): TYPE is
    /// Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K_S/M/L, Q4_K_S/M, Q5_K_S/M, Q6_K, IQ4_NL,
    /// MXFP4_MOE, F16, BF16 or F32
    Quantize(quantize::QuantizeArgs),
    /// One forward's GPU launch table on a device profile, with each launch's bytes, FLOPs,
    /// occupancy and roofline time (no GPU needed)
    Plan(plan::PlanArgs),
    /// Prompt (pp) and generation (tg) speed per backend, llama-bench style
    Bench(bench::BenchArgs),
}

/// llama.cpp spells some flags with one dash and several letters (`-npl`); they are taken
/// as the long flags they are here.
fn llama_style_args(args: impl Iterator<Item = std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    args.map(|a| match a.to_str() {
        Some(f @ ("-npl" | "-npp" | "-ntg" | "-pps")) => format!("-{f}").into(),
        _ => a,
    })
    .collect()
}

pub fn main() -> std::process::ExitCode {
    let cli = Cli::parse_from(llama_style_args(std::env::args_os()));
    let run = Overrides::from_env().map_err(anyhow::Error::from).and_then(|env| {
        let base = Base {
            env,
            profile: cli.profile,
        };
        dispatch(cli, &base)
    });
    match run {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// `--dump-graph FILE` of `run` and `info`: the decode graph as JSON or Graphviz dot.
fn dump_graph(model: &Path, file: &Path) -> Result<()> {
    let m = minfer::load::open_model(model)?;
    let g = m.graph(minfer::model::GraphKey::new(1, 1));
    let text = if file.extension().is_some_and(|e| e == "json") {
        serde_json::to_string_pretty(&g)?
    } else {
        g.to_dot()
    };
    std::fs::write(file, text).with_context(|| format!("writing {}", file.display()))?;
    eprintln!("graph: {} nodes written to {}", g.nodes.len(), file.display());
    Ok(())
}

fn dispatch(cli: Cli, base: &Base) -> Result<()> {
    match cli.cmd {
        Cmd::Run(a) => generate::run(a, base),
        Cmd::Chat(a) => generate::chat(a, base),
        Cmd::Embed(a) => embed::run(a, base),
        Cmd::Tokenize(a) => generate::tokenize(a),
        Cmd::Info(a) => info::run(a, base),
        Cmd::Perplexity(a) => perplexity::run(a, base),
        Cmd::Trace(a) => trace::run(a, base),
        #[cfg(feature = "server")]
        Cmd::Serve(a) => serve::run(a, base),
        Cmd::Quantize(a) => quantize::run(a),
        Cmd::Plan(a) => plan::run(a, base),
        Cmd::Bench(a) => bench::run(a, base),
    }
}
