//! `minfer-wgpu bench MODEL`: prompt processing (pp) and generation (tg) speed per backend,
//! in llama-bench's conventions: a warm-up run, then `r` timed runs from an empty cache;
//! t/s as mean ± stddev over the runs; one markdown row per backend × test, or JSON records
//! shaped like llama-bench's. `-d 0,1024,4096` repeats every test after that many tokens of
//! context (prefilled untimed, llama-bench's depth: `pp512 @ d1024`, `n_depth` in JSON).
//!
//! With `-npl 1,2,4,8` it is llama-batched-bench instead: for each prompt length (`-npp`),
//! generation length (`-ntg`) and parallel count (`-npl`), `pl` sequences of `pp` random
//! tokens are prefilled in forwards of `n_batch` tokens (logits for each one's last), then
//! `tg` steps decode one token of every sequence per forward; one row per case with prompt,
//! generation and total tokens/s, or with `--json` JSON lines under llama-batched-bench's own
//! field names.
//!
//! An embedding model gets the embeddings mode instead: for each input length
//! (`--embd-len`, tokens with `[CLS]` and `[SEP]`) and count (`--embd-batch`), that many inputs
//! of random tokens embedded in one call (forwards of up to `-b` tokens of whole inputs), after a
//! warm-up; embeddings and tokens per second, mean ± stddev over `-r` runs.

mod batched;
mod profile;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Result};
use clap::Args;
use serde_json::json;

use minfer::backend::{BackendChoice, KvType};
use minfer::{Session, SessionOptions};

use super::flags::parse_kv;
use super::Base;

#[derive(Args)]
pub struct BenchArgs {
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
}

pub fn run(a: BenchArgs, base: &Base) -> Result<()> {
    if a.n_batch == 0 {
        bail!("--batch-size must be at least 1");
    }
    if a.reps == 0 {
        bail!("--repetitions must be at least 1");
    }
    let backends = a
        .backend
        .split(',')
        .map(BackendChoice::parse)
        .collect::<minfer::Result<Vec<_>>>()?;
    let c = Config {
        n_prompt: a.n_prompt,
        n_gen: a.n_gen,
        reps: a.reps,
        depths: a.depth,
        threads: a.threads,
        backends,
        gpu: a.gpu,
        kv_type: a.kv_type.or(base.env.kv_type),
        json: a.json,
        base: base.session(),
        npl: a.npl,
        npp: a.npp,
        ntg: a.ntg,
        pp_shared: a.pp_shared,
        n_batch: a.n_batch,
        flash_attn: a.flash_attn,
        embd_len: a.embd_len,
        embd_batch: a.embd_batch,
    };
    measure(&a.model, &c)
}

/// What the tests run with: the flags over the environment.
struct Config {
    n_prompt: usize,
    n_gen: usize,
    reps: usize,
    /// `-d`: tokens of context before each test (one row per depth).
    depths: Vec<usize>,
    threads: Option<usize>,
    backends: Vec<BackendChoice>,
    gpu: Option<usize>,
    kv_type: Option<KvType>,
    json: bool,
    /// The environment's options (backend switches, `--profile`, the upload bar).
    base: SessionOptions,
    /// `-npl`: the batched mode's parallel sequence counts (empty: the pp/tg mode).
    npl: Vec<usize>,
    npp: Vec<usize>,
    ntg: Vec<usize>,
    /// `-pps`: the sequences share one prompt (evaluated once, then forked).
    pp_shared: bool,
    n_batch: usize,
    /// `-fa`: flash-attention numerics.
    flash_attn: bool,
    /// Embedding models: tokens per input, and inputs per call.
    embd_len: Vec<usize>,
    embd_batch: Vec<usize>,
}

struct Record {
    backend: String,
    describe: String,
    n_threads: usize,
    n_prompt: usize,
    n_gen: usize,
    n_depth: usize,
    samples_ns: Vec<u64>,
    /// Decode: what one token's forward submitted (GPU backends).
    submitted: Option<minfer::backend::Submitted>,
    /// Decode with `--profile`: per-op time of the timed steps.
    profile: Option<minfer::backend::OpProfile>,
}

impl Record {
    fn n_tokens(&self) -> usize {
        self.n_prompt + self.n_gen
    }
    fn samples_ts(&self) -> Vec<f64> {
        self.samples_ns
            .iter()
            .map(|&ns| self.n_tokens() as f64 * 1e9 / ns as f64)
            .collect()
    }
    fn test_name(&self) -> String {
        let test = if self.n_gen == 0 {
            format!("pp{}", self.n_prompt)
        } else {
            format!("tg{}", self.n_gen)
        };
        if self.n_depth > 0 {
            format!("{test} @ d{}", self.n_depth)
        } else {
            test
        }
    }
}

fn mean_std(x: &[f64]) -> (f64, f64) {
    let n = x.len() as f64;
    let mean = x.iter().sum::<f64>() / n;
    let var = if x.len() > 1 {
        x.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0)
    } else {
        0.0
    };
    (mean, var.sqrt())
}

/// Deterministic pseudo-random prompt tokens (llama-bench uses random ids too).
fn prompt_tokens(n: usize, n_vocab: usize) -> Vec<u32> {
    let mut s = 0x9E37_79B9_7F4A_7C15u64;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s % n_vocab as u64) as u32
        })
        .collect()
}

/// An empty cache, then `context` prefilled (untimed, as llama-bench's depth).
fn start(s: &mut Session, context: &[u32], n_batch: usize) -> Result<()> {
    s.reset();
    for c in context.chunks(n_batch.max(1)) {
        s.eval(c, false)?;
    }
    Ok(())
}

/// A prompt of `toks` after `context`, timed; with the profile of its own steps (not the
/// context's) where profiling was asked for.
fn time_pp(s: &mut Session, context: &[u32], toks: &[u32]) -> Result<(u64, Option<minfer::backend::OpProfile>)> {
    start(s, context, PP_BATCH)?;
    s.reset_profile();
    let t = Instant::now();
    s.eval(toks, false)?;
    let ns = t.elapsed().as_nanos() as u64;
    Ok((ns, s.batch_profile().filter(|p| p.forwards > 0)))
}

fn time_tg(s: &mut Session, context: &[u32], n: usize, tok: u32) -> Result<u64> {
    start(s, context, PP_BATCH)?;
    let t = Instant::now();
    let mut next = tok;
    for _ in 0..n {
        next = s.eval_argmax(&[next])?;
    }
    Ok(t.elapsed().as_nanos() as u64)
}

/// Tokens per forward of the pp mode's prompts and depths (llama-bench's micro-batch).
const PP_BATCH: usize = 512;

/// A session on backend `b` for the run, its log on stderr. With several backends, one that is
/// absent is a row less (None), not the end of the run.
fn session(
    model: &Arc<minfer::Model>,
    args: &Config,
    b: BackendChoice,
    n_ctx: usize,
    n_batch: usize,
) -> Result<Option<Session>> {
    let opts = SessionOptions {
        n_ctx,
        n_batch,
        threads: args.threads,
        backend: b,
        kv_type: args.kv_type,
        gpu: args.gpu,
        ..args.base.clone()
    };
    let s = match Session::new(model.clone(), &opts) {
        Ok(s) => s,
        Err(e) if args.backends.len() > 1 => {
            eprintln!("bench: {} skipped — {e}", format!("{b:?}").to_lowercase());
            return Ok(None);
        }
        Err(e) => return Err(e.into()),
    };
    for line in &s.log {
        eprintln!("{line}");
    }
    let mut s = s;
    s.set_flash_attn(args.flash_attn);
    Ok(Some(s))
}

fn measure(path: &std::path::Path, args: &Config) -> Result<()> {
    if !args.npl.is_empty() {
        return batched::run(path, args);
    }
    let model = Arc::new(minfer::load::open_model(path)?);
    if model.hparams.pooling.is_some() {
        return embeddings(path, model, args);
    }
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default();
    let mut records = Vec::new();
    let max_depth = args.depths.iter().copied().max().unwrap_or(0);
    let n_train = model.hparams.n_ctx_train;
    if max_depth + args.n_prompt.max(args.n_gen) > n_train {
        anyhow::bail!(
            "-d {max_depth} with {} test tokens is past the model's context of {n_train} tokens",
            args.n_prompt.max(args.n_gen)
        );
    }
    for &b in &args.backends {
        let n_ctx = max_depth + args.n_prompt.max(args.n_gen) + 16;
        let Some(mut s) = session(&model, args, b, n_ctx, PP_BATCH)? else {
            continue;
        };
        let describe = s.log.first().cloned().unwrap_or_default();
        let n_threads = args.threads.unwrap_or_else(minfer::testing::cpu::default_threads);
        let n_vocab = s.n_vocab();
        for &depth in &args.depths {
            // Context and test tokens from one stream, so the test continues the context.
            let all = prompt_tokens(depth + args.n_prompt.max(1), n_vocab);
            let (context, toks) = all.split_at(depth);
            let record = |n_prompt, n_gen, samples_ns, submitted, profile| Record {
                backend: s.backend_name.into(),
                describe: describe.clone(),
                n_threads,
                n_prompt,
                n_gen,
                n_depth: depth,
                samples_ns,
                submitted,
                profile,
            };
            if args.n_prompt > 0 {
                time_pp(&mut s, context, toks)?; // warm-up
                let (mut samples, mut profile) = (Vec::new(), None::<minfer::backend::OpProfile>);
                for _ in 0..args.reps {
                    let (ns, p) = time_pp(&mut s, context, toks)?;
                    samples.push(ns);
                    match (&mut profile, p) {
                        (Some(all), Some(p)) => all.merge(&p),
                        (None, p) => profile = p,
                        _ => {}
                    }
                }
                records.push(record(args.n_prompt, 0, samples, None, profile));
            }
            if args.n_gen > 0 {
                time_tg(&mut s, context, args.n_gen.min(16), toks[0])?; // warm-up
                                                                        // The profile of the timed steps only (not the warm-up's, nor other depths').
                s.reset_profile();
                let samples = (0..args.reps)
                    .map(|_| time_tg(&mut s, context, args.n_gen, toks[0]))
                    .collect::<Result<Vec<_>>>()?;
                let profile = s.decode_profile().filter(|p| p.forwards > 0);
                records.push(record(0, args.n_gen, samples, s.submitted(), profile));
            }
        }
        super::print_profile(&s);
    }

    if records.is_empty() && args.n_prompt + args.n_gen > 0 {
        anyhow::bail!("no backend could run the benchmark");
    }
    if args.json {
        let out: Vec<_> = records
            .iter()
            .map(|r| {
                let ts = r.samples_ts();
                let (avg_ts, stddev_ts) = mean_std(&ts);
                let ns: Vec<f64> = r.samples_ns.iter().map(|&v| v as f64).collect();
                let (avg_ns, stddev_ns) = mean_std(&ns);
                json!({
                    "model_filename": path.display().to_string(),
                    "model_type": format!("{} {}", model.arch.name(), name),
                    "model_size": model.file_bytes,
                    "model_n_params": model.weights.values().map(|t| t.n_elements()).sum::<u64>(),
                    "backend": r.backend,
                    "backend_desc": r.describe,
                    "n_threads": r.n_threads,
                    "n_prompt": r.n_prompt,
                    "n_gen": r.n_gen,
                    "n_depth": r.n_depth,
                    "flash_attn": args.flash_attn,
                    "avg_ns": avg_ns as u64,
                    "stddev_ns": stddev_ns as u64,
                    "avg_ts": avg_ts,
                    "stddev_ts": stddev_ts,
                    "samples_ns": r.samples_ns,
                    "samples_ts": ts,
                    "dispatches_per_token": r.submitted.map(|w| w.dispatches),
                    "passes_per_token": r.submitted.map(|w| w.passes),
                    "submits_per_token": r.submitted.map(|w| w.submits),
                    "profile": r.profile.as_ref().map(profile::json),
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    println!("| model | size | params | backend | threads | fa | test | t/s |");
    println!("| --- | ---: | ---: | --- | ---: | -: | ---: | ---: |");
    let params = model.weights.values().map(|t| t.n_elements()).sum::<u64>();
    for r in &records {
        let (avg, sd) = mean_std(&r.samples_ts());
        println!(
            "| {} {} | {:.2} MiB | {:.2} M | {} | {} | {} | {} | {avg:.2} ± {sd:.2} |",
            model.arch.name(),
            name,
            model.file_bytes as f64 / (1 << 20) as f64,
            params as f64 / 1e6,
            r.backend,
            r.n_threads,
            u8::from(args.flash_attn),
            r.test_name()
        );
    }
    for r in &records {
        if let Some(w) = r.submitted {
            println!(
                "\n{} {}: {} dispatches, {} passes, {} submits per token",
                r.backend,
                r.test_name(),
                w.dispatches,
                w.passes,
                w.submits
            );
        }
    }
    // One profile table per test, the backends side by side.
    let mut tests: Vec<String> = Vec::new();
    for r in records.iter().filter(|r| r.profile.is_some()) {
        if !tests.contains(&r.test_name()) {
            tests.push(r.test_name());
        }
    }
    for test in tests {
        let cols: Vec<(&str, &minfer::backend::OpProfile)> = records
            .iter()
            .filter(|r| r.test_name() == test)
            .filter_map(|r| Some((r.backend.as_str(), r.profile.as_ref()?)))
            .collect();
        print!("{}", profile::markdown(&test, &cols));
    }
    Ok(())
}

/// The embeddings mode: `batch` inputs of `len` tokens each (`[CLS]`, random ids, `[SEP]`) per
/// call, one row per backend × length × count.
fn embeddings(path: &std::path::Path, model: Arc<minfer::Model>, args: &Config) -> Result<()> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default();
    let n_pos = model.hparams.n_ctx_train;
    if let Some(&bad) = args.embd_len.iter().find(|&&l| l < 2 || l > n_pos) {
        anyhow::bail!("--embd-len {bad}: inputs are 2 to {n_pos} tokens for this model");
    }
    if args.embd_batch.contains(&0) {
        anyhow::bail!("--embd-batch 0: at least one input per call");
    }
    let longest = args.embd_len.iter().copied().max().unwrap_or(0);
    let n_threads = args.threads.unwrap_or_else(minfer::testing::cpu::default_threads);
    let mut rows = Vec::new();
    for &b in &args.backends {
        // Forwards of up to -b tokens (at least one whole input).
        let n_batch = args.n_batch.max(longest);
        let Some(mut s) = session(&model, args, b, n_batch, n_batch)? else {
            continue;
        };
        let n_vocab = s.n_vocab();
        for &len in &args.embd_len {
            for &batch in &args.embd_batch {
                let inputs: Vec<Vec<u32>> = (0..batch)
                    .map(|i| {
                        let mut ids = vec![101u32.min(n_vocab as u32 - 1)];
                        ids.extend(prompt_tokens(len - 2 + i, n_vocab).into_iter().skip(i));
                        ids.push(102u32.min(n_vocab as u32 - 1));
                        ids
                    })
                    .collect();
                minfer::embed::embed_tokens(&mut s, &inputs)?;
                let mut samples = Vec::with_capacity(args.reps);
                for _ in 0..args.reps {
                    let t = Instant::now();
                    minfer::embed::embed_tokens(&mut s, &inputs)?;
                    samples.push(t.elapsed().as_secs_f64());
                }
                let per_s: Vec<f64> = samples.iter().map(|t| batch as f64 / t).collect();
                let (mean, std) = mean_std(&per_s);
                rows.push((s.backend_name, len, batch, mean, std, samples));
            }
        }
        if let Some(r) = s.profile_report() {
            eprintln!("{r}");
        }
    }
    if args.json {
        let out: Vec<_> = rows
            .iter()
            .map(|(backend, len, batch, mean, std, samples)| {
                json!({
                    "model_filename": name,
                    "backend": backend,
                    "n_threads": n_threads,
                    "n_tokens": len,
                    "n_inputs": batch,
                    "avg_embd_s": mean,
                    "stddev_embd_s": std,
                    "avg_tok_s": mean * *len as f64,
                    "samples_s": samples,
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    println!("| model | backend | threads | test | embeddings/s | tokens/s |");
    println!("| --- | --- | ---: | --- | ---: | ---: |");
    for (backend, len, batch, mean, std, _) in &rows {
        println!(
            "| {name} | {backend} | {n_threads} | {len} tok × {batch} | {mean:.2} ± {std:.2} | {:.1} |",
            mean * *len as f64
        );
    }
    Ok(())
}
