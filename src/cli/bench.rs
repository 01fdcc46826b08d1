//! `minfer-wgpu bench MODEL`: prompt processing (pp) and generation (tg) speed per backend,
//! in llama-bench's conventions: a warm-up run, then `r` timed runs from an empty cache;
//! t/s as mean ± stddev over the runs; one markdown row per backend × test, or JSON records
//! shaped like llama-bench's.

use std::sync::Arc;
use std::time::Instant;

use anyhow::Result;
use serde_json::json;

use minfer::backend::{BackendChoice, KvType};
use minfer::{Session, SessionOptions};

pub struct Args {
    pub n_prompt: usize,
    pub n_gen: usize,
    pub reps: usize,
    pub threads: Option<usize>,
    pub backends: Vec<BackendChoice>,
    pub gpu: Option<usize>,
    pub kv_type: Option<KvType>,
    pub json: bool,
    /// The environment's options (backend switches, `--profile`, the upload bar).
    pub base: SessionOptions,
}

struct Record {
    backend: String,
    describe: String,
    n_threads: usize,
    n_prompt: usize,
    n_gen: usize,
    samples_ns: Vec<u64>,
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
        if self.n_gen == 0 {
            format!("pp{}", self.n_prompt)
        } else {
            format!("tg{}", self.n_gen)
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

fn time_pp(s: &mut Session, toks: &[u32]) -> Result<u64> {
    s.reset();
    let t = Instant::now();
    s.eval(toks, false)?;
    Ok(t.elapsed().as_nanos() as u64)
}

fn time_tg(s: &mut Session, n: usize, tok: u32) -> Result<u64> {
    s.reset();
    let t = Instant::now();
    let mut next = tok;
    for _ in 0..n {
        next = s.eval_argmax(&[next])?;
    }
    Ok(t.elapsed().as_nanos() as u64)
}

pub fn run(path: &std::path::Path, args: &Args) -> Result<()> {
    let model = Arc::new(minfer::load::open_model(path)?);
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default();
    let mut records = Vec::new();
    for &b in &args.backends {
        let opts = SessionOptions {
            n_ctx: args.n_prompt.max(args.n_gen) + 16,
            n_batch: 512,
            threads: args.threads,
            backend: b,
            kv_type: args.kv_type,
            gpu: args.gpu,
            ..args.base.clone()
        };
        // With several backends, one that is absent is a row less, not the end of the run.
        let mut s = match Session::new(model.clone(), &opts) {
            Ok(s) => s,
            Err(e) if args.backends.len() > 1 => {
                eprintln!("bench: {} skipped — {e}", format!("{b:?}").to_lowercase());
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        for line in &s.log {
            eprintln!("{line}");
        }
        let describe = s.log.first().cloned().unwrap_or_default();
        let n_threads = args.threads.unwrap_or_else(minfer::backend::cpu::default_threads);
        let toks = prompt_tokens(args.n_prompt.max(1), s.n_vocab());
        if args.n_prompt > 0 {
            time_pp(&mut s, &toks)?; // warm-up
            let samples = (0..args.reps)
                .map(|_| time_pp(&mut s, &toks))
                .collect::<Result<Vec<_>>>()?;
            records.push(Record {
                backend: s.backend_name.into(),
                describe: describe.clone(),
                n_threads,
                n_prompt: args.n_prompt,
                n_gen: 0,
                samples_ns: samples,
            });
        }
        if args.n_gen > 0 {
            time_tg(&mut s, args.n_gen.min(16), toks[0])?; // warm-up
            let samples = (0..args.reps)
                .map(|_| time_tg(&mut s, args.n_gen, toks[0]))
                .collect::<Result<Vec<_>>>()?;
            records.push(Record {
                backend: s.backend_name.into(),
                describe,
                n_threads,
                n_prompt: 0,
                n_gen: args.n_gen,
                samples_ns: samples,
            });
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
                    "avg_ns": avg_ns as u64,
                    "stddev_ns": stddev_ns as u64,
                    "avg_ts": avg_ts,
                    "stddev_ts": stddev_ts,
                    "samples_ns": r.samples_ns,
                    "samples_ts": ts,
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    println!("| model | size | params | backend | threads | test | t/s |");
    println!("| --- | ---: | ---: | --- | ---: | ---: | ---: |");
    let params = model.weights.values().map(|t| t.n_elements()).sum::<u64>();
    for r in &records {
        let (avg, sd) = mean_std(&r.samples_ts());
        println!(
            "| {} {} | {:.2} MiB | {:.2} M | {} | {} | {} | {avg:.2} ± {sd:.2} |",
            model.arch.name(),
            name,
            model.file_bytes as f64 / (1 << 20) as f64,
            params as f64 / 1e6,
            r.backend,
            r.n_threads,
            r.test_name()
        );
    }
    Ok(())
}
