//! The flag groups more than one command takes (`#[command(flatten)]`), and the parsers of
//! values several commands read.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use clap::Args;

use minfer::backend::{BackendChoice, KvType};
use minfer::engine::Speculation;
use minfer::sampling::SamplerConfig;
use minfer::SessionOptions;

use super::{generate, Base};

#[derive(Args, Clone)]
pub struct EngineFlags {
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
    pub flash_attn: bool,
    /// Leave every FFN and expert tensor out: attention-only graphs for attention analysis
    /// (the outputs are NOT the model's)
    #[arg(long = "no-ffn")]
    drop_ffn: bool,
}

impl EngineFlags {
    /// The flags over `base` (a flag given wins over the environment).
    pub fn session(&self, base: &Base) -> SessionOptions {
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

fn parse_spec(s: &str) -> std::result::Result<Speculation, String> {
    Speculation::parse(s).map_err(|e| e.to_string())
}

#[derive(Args, Clone)]
pub struct SampleFlags {
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
pub struct SpecFlags {
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
    pub fn spec(&self) -> generate::Spec {
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
    pub fn config(&self, engine: &EngineFlags, base: &Base, raw: bool, json: bool) -> Result<generate::Config> {
        Ok(generate::Config {
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

pub fn parse_kv(s: &str) -> Result<KvType, String> {
    KvType::parse(s).map_err(|e| e.to_string())
}

pub fn parse_backend(s: &str) -> Result<BackendChoice, String> {
    BackendChoice::parse(s).map_err(|e| e.to_string())
}

/// `--chat-template-file`'s text, where given.
pub fn read_chat_template(path: Option<&Path>) -> Result<Option<String>> {
    path.map(|f| std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display())))
        .transpose()
}
