//! The command line. Every command is built on the library API and nothing else.

mod bench;
mod bench_profile;
mod embed;
mod generate;
mod info;
mod perplexity;
mod plan;
mod progress;
mod quantize;
#[cfg(feature = "server")]
mod serve;
mod trace;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context as _, Result};
use clap::{Args, Parser, Subcommand};

use minfer::backend::{BackendChoice, KvType};
use minfer::engine::Speculation;
use minfer::overrides::Overrides;
use minfer::sampling::SamplerConfig;
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

#[derive(Args, Clone)]
struct EngineFlags {
    /// Context size in tokens (0 = the model's, at most 4096)
    #[arg(short = 'c', long = "ctx-size", default_value_t = 0)]
    ctx: usize,
    /// Prompt tokens per forward
    #[arg(short = 'b', long = "batch-size", default_value_t = 512)]
    batch: usize,
    /// CPU threads (default: all cores)
    #[arg(short = 't', long)]
    threads: Option<usize>,
    /// KV cache type: f32, f16 or q8_0 (default: f16 for all but tiny models)
    #[arg(long = "cache-type", value_name = "CACHE_TYPE", value_parser = parse_kv)]
    kv_type: Option<KvType>,
    /// auto, cpu, wgpu or cuda
    #[arg(long, default_value = "auto", value_parser = parse_backend)]
    backend: BackendChoice,
    /// CUDA device index
    #[arg(long)]
    gpu: Option<usize>,
    /// Flash-attention numerics as llama.cpp's CPU backend has them (one pass, f16 accumulator)
    #[arg(long = "flash-attn")]
    flash_attn: bool,
    /// Leave every FFN and expert tensor out: attention-only graphs for attention analysis
    /// (the outputs are NOT the model's)
    #[arg(long = "no-ffn")]
    drop_ffn: bool,
}

impl EngineFlags {
    /// The flags over `base` (a flag given wins over the environment).
    fn session(&self, base: &Base) -> SessionOptions {
        let b = base.session();
        SessionOptions {
            n_ctx: self.ctx,
            n_batch: self.batch,
            threads: self.threads,
            backend: self.backend,
            kv_type: self.kv_type.or(b.kv_type),
            gpu: self.gpu,
            drop_ffn: self.drop_ffn,
            ..b
        }
    }
}

/// A constraint that compiles, or the error naming `flag`.
fn checked(spec: minfer::constrain::ConstraintSpec, flag: &str) -> Result<minfer::constrain::ConstraintSpec> {
    spec.check().with_context(|| flag.to_string())?;
    Ok(spec)
}

/// `-n`: a count of tokens, or -1 for as many as the context holds (llama.cpp's meaning).
fn parse_n_predict(s: &str) -> std::result::Result<usize, String> {
    match s.trim() {
        "-1" => Ok(usize::MAX),
        t => t
            .parse::<usize>()
            .map_err(|_| format!("'{s}' is not a token count (or -1 for until the context is full)")),
    }
}

/// `--shutdown-timeout`: seconds, whole or not, 0 or more.
#[cfg(feature = "server")]
fn parse_seconds(s: &str) -> std::result::Result<std::time::Duration, String> {
    s.trim()
        .parse::<f64>()
        .ok()
        .filter(|v| v.is_finite() && *v >= 0.0 && *v <= 1e9)
        .map(std::time::Duration::from_secs_f64)
        .ok_or_else(|| format!("'{s}' is not a number of seconds (0 or more)"))
}

/// `--seed`: a number, or -1 for a random one (llama.cpp's meaning).
#[derive(Clone, Copy)]
struct Seed(Option<u64>);

fn parse_seed(s: &str) -> std::result::Result<Seed, String> {
    match s.trim() {
        "-1" => Ok(Seed(None)),
        t => t
            .parse::<u64>()
            .map(|v| Seed(Some(v)))
            .map_err(|_| format!("'{s}' is not a seed (0 to 2^64 - 1, or -1 for a random one)")),
    }
}

/// `--prompt-ids`: comma-separated token ids.
#[derive(Clone)]
struct TokenIds(Vec<u32>);

fn parse_ids(s: &str) -> std::result::Result<TokenIds, String> {
    let ids = s
        .split(',')
        .map(|t| {
            t.trim()
                .parse::<u32>()
                .map_err(|_| format!("'{}' is not a token id", t.trim()))
        })
        .collect::<std::result::Result<Vec<u32>, String>>()?;
    Ok(TokenIds(ids))
}

fn parse_spec(s: &str) -> std::result::Result<Speculation, String> {
    Speculation::parse(s).map_err(|e| e.to_string())
}

#[derive(Args, Clone)]
struct SampleFlags {
    /// Tokens to generate; -1: until the context is full
    #[arg(short = 'n', long = "n-predict", default_value = "256", value_parser = parse_n_predict, allow_negative_numbers = true)]
    n_predict: usize,
    /// Temperature; 0 (or below) = greedy
    #[arg(long, default_value_t = 0.8, allow_negative_numbers = true)]
    temp: f32,
    #[arg(long = "top-k", default_value_t = 40)]
    top_k: usize,
    #[arg(long = "top-p", default_value_t = 0.95)]
    top_p: f32,
    #[arg(long = "min-p", default_value_t = 0.05)]
    min_p: f32,
    #[arg(long = "repeat-penalty", default_value_t = 1.0)]
    repeat_penalty: f32,
    #[arg(long = "presence-penalty", default_value_t = 0.0)]
    presence_penalty: f32,
    #[arg(long = "frequency-penalty", default_value_t = 0.0)]
    frequency_penalty: f32,
    /// Tokens the penalties look back over
    #[arg(long = "repeat-last-n", default_value_t = 64)]
    repeat_last_n: usize,
    /// Seed for reproducible sampling; -1: a random one
    #[arg(long, value_parser = parse_seed, allow_negative_numbers = true)]
    seed: Option<Seed>,
    /// Stop before this string (repeatable)
    #[arg(long)]
    stop: Vec<String>,
    /// Never end at an end-of-generation token: generate exactly -n tokens (as llama.cpp's
    /// flag, end tokens are masked out of sampling; stop strings still stop)
    #[arg(long = "ignore-eos")]
    ignore_eos: bool,
    #[command(flatten)]
    spec: SpecFlags,
    /// A system message for the chat template
    #[arg(long)]
    system: Option<String>,
    /// Use this Jinja chat template instead of the model's own
    #[arg(long = "chat-template-file")]
    chat_template_file: Option<PathBuf>,
    /// The output is JSON valid against this schema: a file, or the schema itself
    #[arg(long = "json-schema", value_name = "FILE_OR_JSON", conflicts_with = "grammar")]
    json_schema: Option<String>,
    /// The output follows this Lark grammar (llguidance's dialect) from a file
    #[arg(long = "grammar", value_name = "FILE")]
    grammar: Option<PathBuf>,
}

/// Speculative decoding, for `run`, `chat` and `serve` alike.
#[derive(Args, Clone)]
struct SpecFlags {
    /// Speculative decoding: `ngram` (prompt lookup) or `draft` (with --draft); greedy output
    /// is the same as without
    #[arg(long = "spec", value_parser = parse_spec)]
    spec: Option<Speculation>,
    /// A draft model of the same vocabulary for speculative decoding (implies --spec draft)
    #[arg(long = "draft")]
    draft: Option<PathBuf>,
    /// Most tokens drafted per verification
    #[arg(long = "draft-max", default_value_t = 8)]
    draft_max: usize,
    /// Drafts shorter than this are not verified
    #[arg(long = "draft-min", default_value_t = 0)]
    draft_min: usize,
}

impl SpecFlags {
    /// `--spec` (or `draft` when only `--draft` is given) with the draft model and lengths.
    fn spec(&self) -> generate::Spec {
        let speculation = match (self.spec, &self.draft) {
            (Some(s), _) => s,
            (None, Some(_)) => Speculation::Draft,
            (None, None) => Speculation::Off,
        };
        generate::Spec {
            speculation,
            draft: self.draft.clone(),
            draft_max: self.draft_max,
            draft_min: self.draft_min,
        }
    }
}

impl SampleFlags {
    /// What `run` and `chat` generate with: these flags and the engine's, in one place.
    fn run_args(&self, engine: &EngineFlags, base: &Base, raw: bool, json: bool) -> Result<generate::RunArgs> {
        Ok(generate::RunArgs {
            session: engine.session(base),
            flash_attn: engine.flash_attn,
            sampler: self.sampler()?,
            n_predict: self.n_predict,
            ignore_eos: self.ignore_eos,
            system: self.system.clone(),
            raw,
            json,
            stop: self.stop.clone(),
            chat_template: self.chat_template()?,
            spec: self.spec.spec(),
            constraint: self.constraint()?,
            logits_out: None,
        })
    }

    /// `--json-schema` (inline JSON when it parses as such, else a file) or `--grammar`.
    fn constraint(&self) -> Result<Option<minfer::constrain::ConstraintSpec>> {
        use minfer::constrain::ConstraintSpec;
        let spec = match (&self.json_schema, &self.grammar) {
            (Some(s), _) => {
                let text = match serde_json::from_str::<serde_json::Value>(s) {
                    Ok(v) => return Ok(Some(checked(ConstraintSpec::JsonSchema(v), "--json-schema")?)),
                    Err(_) => std::fs::read_to_string(s).with_context(|| format!("--json-schema: reading {s}"))?,
                };
                let v = serde_json::from_str(&text).with_context(|| format!("--json-schema: {s} is not JSON"))?;
                ConstraintSpec::JsonSchema(v)
            }
            (None, Some(f)) => {
                let g = std::fs::read_to_string(f).with_context(|| format!("--grammar: reading {}", f.display()))?;
                ConstraintSpec::Lark(g)
            }
            (None, None) => return Ok(None),
        };
        let flag = if self.json_schema.is_some() {
            "--json-schema"
        } else {
            "--grammar"
        };
        Ok(Some(checked(spec, flag)?))
    }

    fn chat_template(&self) -> Result<Option<String>> {
        read_chat_template(self.chat_template_file.as_deref())
    }

    fn sampler(&self) -> Result<SamplerConfig> {
        let c = SamplerConfig {
            // Below 0 is greedy, as llama.cpp takes it.
            temperature: if self.temp < 0.0 { 0.0 } else { self.temp },
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            repeat_penalty: self.repeat_penalty,
            presence_penalty: self.presence_penalty,
            frequency_penalty: self.frequency_penalty,
            penalty_last_n: self.repeat_last_n,
            seed: self.seed.and_then(|s| s.0),
        };
        c.validate()?;
        Ok(c)
    }
}

fn parse_kv(s: &str) -> Result<KvType, String> {
    KvType::parse(s).map_err(|e| e.to_string())
}

fn parse_backend(s: &str) -> Result<BackendChoice, String> {
    BackendChoice::parse(s).map_err(|e| e.to_string())
}

#[derive(Subcommand)]
enum Cmd {
    /// Generate text: `run [MODEL] [PROMPT]` (prompt from stdin when absent)
    Run {
        /// [MODEL] [PROMPT]
        args: Vec<String>,
        #[command(flatten)]
        engine: EngineFlags,
        #[command(flatten)]
        sample: SampleFlags,
        /// Skip the chat template; special tokens typed in the prompt are parsed
        #[arg(long)]
        raw: bool,
        /// Print one JSON object {"prompt_tokens", "tokens", "text"} instead of streaming
        #[arg(long)]
        json: bool,
        /// Write the decode graph to FILE (.json, else Graphviz dot)
        #[arg(long = "dump-graph")]
        dump_graph: Option<PathBuf>,
        /// The prompt as token ids (`1,2,3`): fed as given, no tokenizer, template or BOS
        #[arg(long = "prompt-ids", value_parser = parse_ids)]
        prompt_ids: Option<TokenIds>,
        /// Write the logits of every prompt position to FILE (.npy, float32 [n_prompt, n_vocab])
        /// before generating; with -n 0, only that
        #[arg(long = "logits-out")]
        logits_out: Option<PathBuf>,
    },
    /// Chat with a model: `/reset`, `/exit`, Ctrl-C stops an answer
    Chat {
        model: Option<PathBuf>,
        #[command(flatten)]
        engine: EngineFlags,
        #[command(flatten)]
        sample: SampleFlags,
    },
    /// Embedding vectors of TEXTs (one per line of stdin when none): one JSON array per line,
    /// pooled and normalised as the model says
    Embed {
        model: PathBuf,
        texts: Vec<String>,
        /// One JSON object {"data": [{"index", "embedding", "tokens"}], "usage"} instead
        #[arg(long)]
        json: bool,
        /// Cut texts longer than the model's positions (keeping the closing [SEP]) instead of
        /// refusing them
        #[arg(long)]
        truncate: bool,
        #[command(flatten)]
        engine: EngineFlags,
    },
    /// Print the token ids of TEXT, as llama-tokenize does
    Tokenize {
        model: PathBuf,
        /// Print a JSON array of ids
        #[arg(long)]
        json: bool,
        /// Treat special tokens in the text as plain text
        #[arg(long = "no-special")]
        no_special: bool,
        text: String,
    },
    /// Print a model's metadata, tensor table and each backend's verdict
    Info {
        model: PathBuf,
        /// Print one JSON object
        #[arg(long)]
        json: bool,
        /// Also state what --no-ffn leaves out (and the verdicts on the attention-only model)
        #[arg(long = "no-ffn")]
        drop_ffn: bool,
        /// Write the decode graph to FILE (.json, else Graphviz dot)
        #[arg(long = "dump-graph")]
        dump_graph: Option<PathBuf>,
    },
    /// Perplexity over a text file, as llama-perplexity computes it
    Perplexity {
        model: PathBuf,
        #[arg(short = 'f', long = "file")]
        file: PathBuf,
        /// Tokens per chunk
        #[arg(short = 'c', long = "ctx-size", default_value_t = 512)]
        ctx: usize,
        #[arg(short = 'b', long = "batch-size", default_value_t = 512)]
        batch: usize,
        #[arg(long)]
        chunks: Option<usize>,
        #[arg(short = 't', long)]
        threads: Option<usize>,
        #[arg(long = "cache-type", value_name = "CACHE_TYPE", value_parser = parse_kv)]
        kv_type: Option<KvType>,
        #[arg(long, default_value = "auto", value_parser = parse_backend)]
        backend: BackendChoice,
        /// Flash-attention numerics (llama-perplexity's default on the CPU)
        #[arg(long = "flash-attn")]
        flash_attn: bool,
    },
    /// One named intermediate (a node of `--dump-graph`, e.g. blk.3.attn_out) of PROMPT's
    /// forward on each backend, against the first backend's
    Trace {
        model: PathBuf,
        /// The node's name
        node: String,
        /// The raw prompt (special tokens parsed, BOS as the model adds it)
        prompt: String,
        /// Comma-separated backends, the first the reference
        #[arg(long, default_value = "cpu,wgpu")]
        backend: String,
        #[arg(short = 't', long)]
        threads: Option<usize>,
        #[arg(long = "cache-type", value_name = "CACHE_TYPE", value_parser = parse_kv)]
        kv_type: Option<KvType>,
        #[arg(long = "flash-attn")]
        flash_attn: bool,
        /// One JSON object per backend, with every value
        #[arg(long)]
        json: bool,
    },
    /// An OpenAI- and Ollama-compatible HTTP server (chat and text completions, streaming,
    /// embeddings) on continuous batching; MODEL defaults as for run
    #[cfg(feature = "server")]
    Serve {
        model: Option<PathBuf>,
        #[arg(long, default_value = "127.0.0.1")]
        host: String,
        #[arg(long, default_value_t = 8080)]
        port: u16,
        /// Sequences decoding together; each may use the whole context
        #[arg(long, default_value_t = 4)]
        parallel: usize,
        /// Requests may carry `Authorization: Bearer KEY`; others are refused with 401
        #[arg(long = "api-key")]
        api_key: Option<String>,
        /// An origin allowed to call the server from a browser (repeatable)
        #[arg(long)]
        cors: Vec<String>,
        /// Requests waiting beyond the running ones before 429
        #[arg(long = "max-queue", default_value_t = 64)]
        max_queue: usize,
        /// Use this Jinja chat template instead of the model's own
        #[arg(long = "chat-template-file")]
        chat_template_file: Option<PathBuf>,
        /// An embedding model (BERT family) served beside MODEL on /v1/embeddings and
        /// /api/embed, chosen by the request's `model`
        #[arg(long = "embedding-model")]
        embedding_model: Option<PathBuf>,
        /// No access log (a line per request on stderr: method, path, status, tokens, time)
        #[arg(long = "log-disable")]
        log_disable: bool,
        /// Seconds live requests may run on after Ctrl-C or SIGTERM before they are ended
        /// where they are (streams with a final chunk, finish_reason "length"); default: until
        /// they finish
        #[arg(long = "shutdown-timeout", value_parser = parse_seconds)]
        shutdown_timeout: Option<std::time::Duration>,
        #[command(flatten)]
        engine: EngineFlags,
        #[command(flatten)]
        spec: SpecFlags,
    },
    /// Quantize a GGUF file as llama-quantize does (same types, mixes and bytes): TYPE is
    /// Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K_S/M/L, Q4_K_S/M, Q5_K_S/M, Q6_K, IQ4_NL,
    /// MXFP4_MOE, F16, BF16 or F32
    Quantize {
        input: PathBuf,
        output: PathBuf,
        #[arg(value_name = "TYPE")]
        ty: String,
        /// Every quantizable weight TYPE, token_embd and output included (no per-tensor mix)
        #[arg(long)]
        pure: bool,
        /// Re-encode tensors that are already quantized
        #[arg(long = "allow-requantize")]
        allow_requantize: bool,
        #[arg(short = 't', long)]
        threads: Option<usize>,
    },
    /// One forward's GPU launch table on a device profile, with each launch's bytes, FLOPs,
    /// occupancy and roofline time (no GPU needed)
    Plan {
        model: PathBuf,
        /// Tokens in the step
        #[arg(long, default_value_t = 1)]
        tokens: usize,
        /// Sequences the tokens belong to, each with tokens / seqs of them and its own logits
        /// (default: every token its own sequence up to 8 tokens, a single prompt above)
        #[arg(long)]
        seqs: Option<usize>,
        /// Positions each sequence has in the cache before the step
        #[arg(short = 'd', long, default_value_t = 0)]
        depth: usize,
        /// A built-in device profile (h200, a100, rtx4090, m3max) or a JSON file of one
        #[arg(long, default_value = "h200")]
        device: String,
        /// cuda or wgpu
        #[arg(long, default_value = "cuda")]
        backend: String,
        #[arg(long = "cache-type", value_name = "CACHE_TYPE", value_parser = parse_kv)]
        kv_type: Option<KvType>,
        /// One JSON object
        #[arg(long)]
        json: bool,
    },
    /// Prompt (pp) and generation (tg) speed per backend, llama-bench style
    Bench {
        model: PathBuf,
        #[arg(short = 'p', long = "n-prompt", default_value_t = 512)]
        n_prompt: usize,
        #[arg(short = 'n', long = "n-gen", default_value_t = 128)]
        n_gen: usize,
        #[arg(short = 'r', long = "repetitions", default_value_t = 5)]
        reps: usize,
        /// Tokens of context before each test (llama-bench's `-d 0,1024,4096`): prefilled
        /// untimed, then the pp or tg test runs after them
        #[arg(short = 'd', long = "n-depth", value_delimiter = ',', default_values_t = [0])]
        depth: Vec<usize>,
        #[arg(short = 't', long)]
        threads: Option<usize>,
        /// Comma-separated backends to run side by side
        #[arg(long, default_value = "cpu")]
        backend: String,
        /// CUDA device index
        #[arg(long)]
        gpu: Option<usize>,
        #[arg(long = "cache-type", value_name = "CACHE_TYPE", value_parser = parse_kv)]
        kv_type: Option<KvType>,
        #[arg(long)]
        json: bool,
        /// llama-batched-bench mode: parallel sequence counts (`-npl 1,2,4,8`)
        #[arg(long = "npl", value_delimiter = ',')]
        npl: Vec<usize>,
        /// Batched mode: prompt lengths per sequence
        #[arg(long = "npp", value_delimiter = ',', default_values_t = [128])]
        npp: Vec<usize>,
        /// Batched mode: tokens generated per sequence
        #[arg(long = "ntg", value_delimiter = ',', default_values_t = [128])]
        ntg: Vec<usize>,
        /// Batched mode: one prompt shared by every sequence (evaluated once, forked)
        #[arg(long = "pps")]
        pp_shared: bool,
        /// Tokens per forward
        #[arg(short = 'b', long = "batch-size", default_value_t = 512)]
        n_batch: usize,
        /// Flash-attention numerics (llama-bench's `-fa 1`, its CPU default)
        #[arg(long = "flash-attn", visible_alias = "fa")]
        flash_attn: bool,
        /// Embedding models: tokens per input (with [CLS] and [SEP])
        #[arg(long = "embd-len", value_delimiter = ',', default_values_t = [16, 128, 512])]
        embd_len: Vec<usize>,
        /// Embedding models: inputs per call
        #[arg(long = "embd-batch", value_delimiter = ',', default_values_t = [1, 32])]
        embd_batch: Vec<usize>,
    },
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

fn dump_graph(model: &std::path::Path, file: &std::path::Path) -> Result<()> {
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
        Cmd::Info {
            model,
            json,
            dump_graph: dg,
            drop_ffn,
        } => {
            if let Some(f) = dg {
                dump_graph(&model, &f)?;
            }
            let ask = info::Ask {
                json,
                kv_type: base.env.kv_type,
                backends: base.env.backend_options(),
                drop_ffn,
            };
            info::run(&model, &ask)
        }
        Cmd::Run {
            args,
            engine,
            sample,
            raw,
            json,
            dump_graph: dg,
            prompt_ids,
            logits_out,
        } => {
            let (model, prompt) = generate::split_model_prompt(&args, &base.env)?;
            if let Some(f) = dg {
                dump_graph(&model, &f)?;
            }
            let prompt = match (prompt, &prompt_ids) {
                (Some(_), Some(_)) => anyhow::bail!("give the prompt as text or as --prompt-ids, not both"),
                (Some(p), None) => generate::Prompt::Text(p),
                (None, Some(ids)) => generate::Prompt::Ids(ids.0.clone()),
                (None, None) => generate::Prompt::Text(generate::read_stdin_prompt()?),
            };
            let a = generate::RunArgs {
                logits_out,
                ..sample.run_args(&engine, base, raw, json)?
            };
            generate::run(&model, &prompt, &a)
        }
        Cmd::Chat { model, engine, sample } => {
            let model = match model {
                Some(m) => m,
                None => generate::default_model(&base.env)?,
            };
            generate::chat(&model, &sample.run_args(&engine, base, false, false)?)
        }
        Cmd::Embed {
            model,
            texts,
            json,
            truncate,
            engine,
        } => embed::run(
            &model,
            texts,
            &embed::Args {
                session: engine.session(base),
                json,
                truncate,
            },
        ),
        Cmd::Tokenize {
            model,
            json,
            no_special,
            text,
        } => generate::tokenize(&model, &text, json, no_special),
        Cmd::Perplexity {
            model,
            file,
            ctx,
            batch,
            chunks,
            threads,
            kv_type,
            backend,
            flash_attn,
        } => {
            let text = std::fs::read(&file).with_context(|| format!("reading {}", file.display()))?;
            let text = String::from_utf8(text).map_err(|e| {
                anyhow::anyhow!(
                    "{} is not valid UTF-8 (at byte {})",
                    file.display(),
                    e.utf8_error().valid_up_to()
                )
            })?;
            let minfer::load::Loaded {
                model: m,
                tokenizer: tok,
            } = minfer::load::open(&model)?;
            let m = Arc::new(m);
            let b = base.session();
            let opts = SessionOptions {
                n_ctx: ctx,
                n_batch: batch,
                threads,
                backend,
                kv_type: kv_type.or(b.kv_type),
                gpu: None,
                ..b
            };
            let mut session = Session::new(m, &opts)?;
            session.set_flash_attn(flash_attn);
            for line in &session.log {
                eprintln!("{line}");
            }
            perplexity::run(&mut session, &tok, &text, ctx, chunks)?;
            print_profile(&session);
            Ok(())
        }
        Cmd::Trace {
            model,
            node,
            prompt,
            backend,
            threads,
            kv_type,
            flash_attn,
            json,
        } => {
            let backends = backend
                .split(',')
                .map(BackendChoice::parse)
                .collect::<minfer::Result<Vec<_>>>()?;
            trace::run(
                &model,
                &node,
                &prompt,
                &trace::Args {
                    backends,
                    threads,
                    kv_type: kv_type.or(base.env.kv_type),
                    flash_attn,
                    json,
                    base: base.session(),
                },
            )
        }
        #[cfg(feature = "server")]
        Cmd::Serve {
            model,
            host,
            port,
            parallel,
            api_key,
            cors,
            max_queue,
            chat_template_file,
            embedding_model,
            log_disable,
            shutdown_timeout,
            engine,
            spec,
        } => {
            if parallel == 0 {
                bail!("--parallel must be at least 1");
            }
            let model = match model {
                Some(m) => m,
                None => generate::default_model(&base.env)?,
            };
            let chat_template = read_chat_template(chat_template_file.as_deref())?;
            if let Some(src) = &chat_template {
                // Refused before the server listens, not after.
                minfer::chat::ChatTemplate::new(src, "", "").context("--chat-template-file")?;
            }
            let spec = spec.spec();
            spec.check()?;
            serve::run(serve::ServeArgs {
                model,
                chat_template,
                host,
                port,
                parallel,
                api_key,
                cors,
                max_queue,
                session: engine.session(base),
                flash_attn: engine.flash_attn,
                embedding_model,
                log_disable,
                shutdown_timeout,
                spec,
            })
        }
        Cmd::Quantize {
            input,
            output,
            ty,
            pure,
            allow_requantize,
            threads,
        } => {
            let opts = minfer::quantize::Options {
                pure,
                allow_requantize,
                threads: threads.unwrap_or(0),
            };
            quantize::run(&input, &output, &ty, &opts)
        }
        Cmd::Plan {
            model,
            tokens,
            seqs,
            depth,
            device,
            backend,
            kv_type,
            json,
        } => {
            let backend = minfer::backend::gpu::roofline::GpuBackend::parse(&backend).map_err(anyhow::Error::msg)?;
            let seqs = seqs.unwrap_or(if tokens <= 8 { tokens } else { 1 });
            plan::run(
                &model,
                &plan::Args {
                    ask: minfer::backend::gpu::roofline::Ask {
                        tokens,
                        seqs,
                        depth,
                        backend,
                        kv: kv_type.or(base.env.kv_type).unwrap_or(KvType::F16),
                    },
                    device,
                    json,
                },
            )
        }
        Cmd::Bench {
            model,
            n_prompt,
            n_gen,
            reps,
            depth,
            threads,
            backend,
            gpu,
            kv_type,
            json,
            npl,
            npp,
            ntg,
            pp_shared,
            n_batch,
            flash_attn,
            embd_len,
            embd_batch,
        } => {
            if n_batch == 0 {
                bail!("--batch-size must be at least 1");
            }
            if reps == 0 {
                bail!("--repetitions must be at least 1");
            }
            let backends = backend
                .split(',')
                .map(BackendChoice::parse)
                .collect::<minfer::Result<Vec<_>>>()?;
            bench::run(
                &model,
                &bench::Args {
                    n_prompt,
                    n_gen,
                    reps,
                    depths: depth,
                    threads,
                    backends,
                    gpu,
                    kv_type: kv_type.or(base.env.kv_type),
                    json,
                    base: base.session(),
                    npl,
                    npp,
                    ntg,
                    pp_shared,
                    n_batch,
                    flash_attn,
                    embd_len,
                    embd_batch,
                },
            )
        }
    }
}

/// `--chat-template-file`'s text, where given.
fn read_chat_template(path: Option<&Path>) -> Result<Option<String>> {
    path.map(|f| std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display())))
        .transpose()
}
