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

use std::sync::Arc;
use std::time::Instant;

use anyhow::Result;
use serde_json::json;

use minfer::backend::{BackendChoice, KvType};
use minfer::{Batch, Session, SessionOptions};

pub struct Args {
    pub n_prompt: usize,
    pub n_gen: usize,
    pub reps: usize,
    /// `-d`: tokens of context before each test (one row per depth).
    pub depths: Vec<usize>,
    pub threads: Option<usize>,
    pub backends: Vec<BackendChoice>,
    pub gpu: Option<usize>,
    pub kv_type: Option<KvType>,
    pub json: bool,
    /// The environment's options (backend switches, `--profile`, the upload bar).
    pub base: SessionOptions,
    /// `-npl`: the batched mode's parallel sequence counts (empty: the pp/tg mode).
    pub npl: Vec<usize>,
    pub npp: Vec<usize>,
    pub ntg: Vec<usize>,
    /// `-pps`: the sequences share one prompt (evaluated once, then forked).
    pub pp_shared: bool,
    pub n_batch: usize,
    /// `-fa`: flash-attention numerics.
    pub flash_attn: bool,
    /// Embedding models: tokens per input, and inputs per call.
    pub embd_len: Vec<usize>,
    pub embd_batch: Vec<usize>,
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

fn time_pp(s: &mut Session, context: &[u32], toks: &[u32]) -> Result<u64> {
    start(s, context, PP_BATCH)?;
    let t = Instant::now();
    s.eval(toks, false)?;
    Ok(t.elapsed().as_nanos() as u64)
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
    args: &Args,
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

pub fn run(path: &std::path::Path, args: &Args) -> Result<()> {
    if !args.npl.is_empty() {
        return batched(path, args);
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
        let n_threads = args.threads.unwrap_or_else(minfer::backend::cpu::default_threads);
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
                let samples = (0..args.reps)
                    .map(|_| time_pp(&mut s, context, toks))
                    .collect::<Result<Vec<_>>>()?;
                records.push(record(args.n_prompt, 0, samples, None, None));
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
                    "profile": r.profile.as_ref().map(super::bench_profile::json),
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
    // One profile table per decode test, the backends side by side.
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
        print!("{}", super::bench_profile::markdown(&test, &cols));
    }
    Ok(())
}

/// The KV cells a batched case needs, as llama-batched-bench counts them.
fn n_kv_req(pp: usize, tg: usize, pl: usize, shared: bool) -> usize {
    if shared {
        pp + pl * tg
    } else {
        pl * (pp + tg)
    }
}

/// llama-batched-bench's run: per backend, every (pp, tg, pl) case from an empty pool.
fn batched(path: &std::path::Path, args: &Args) -> Result<()> {
    let model = Arc::new(minfer::load::open_model(path)?);
    let mut cases = Vec::new();
    for &pp in &args.npp {
        for &tg in &args.ntg {
            for &pl in &args.npl {
                if pp == 0 || pl == 0 {
                    anyhow::bail!("-npp and -npl take values of at least 1 (got pp {pp}, pl {pl})");
                }
                cases.push((pp, tg, pl));
            }
        }
    }
    let n_ctx = cases
        .iter()
        .map(|&(pp, tg, pl)| n_kv_req(pp, tg, pl, args.pp_shared))
        .max()
        .unwrap_or(16)
        .max(16);
    for &b in &args.backends {
        let Some(mut s) = session(&model, args, b, n_ctx, args.n_batch)? else {
            continue;
        };
        let n_threads = args.threads.unwrap_or_else(minfer::backend::cpu::default_threads);
        let mut rng = prompt_tokens(1 << 16, s.n_vocab()).into_iter().cycle();
        // Warm-up: 16 tokens, as llama-batched-bench.
        let warm: Vec<u32> = rng.by_ref().take(16).collect();
        s.eval(&warm, false)?;
        s.reset();
        if !args.json {
            println!();
            println!(
                "n_kv_max = {n_ctx}, n_batch = {}, is_pp_shared = {}, backend = {}, n_threads = {n_threads}",
                args.n_batch,
                u8::from(args.pp_shared),
                s.backend_name
            );
            println!();
            println!(
                "|{:>6} | {:>6} | {:>4} | {:>6} | {:>8} | {:>8} | {:>8} | {:>8} | {:>8} | {:>8} |",
                "PP", "TG", "B", "N_KV", "T_PP s", "S_PP t/s", "T_TG s", "S_TG t/s", "T s", "S t/s"
            );
            println!(
                "|-------|--------|------|--------|----------|----------|----------|----------|----------|----------|"
            );
        }
        for &(pp, tg, pl) in &cases {
            let main = s.main_seq();
            let seqs: Vec<_> = (0..pl).map(|i| if i == 0 { main } else { s.seq_new() }).collect();
            let mut batch = Batch::new();
            for (j, &seq) in seqs.iter().enumerate() {
                if args.pp_shared && j > 0 {
                    break;
                }
                for i in 0..pp {
                    batch.push(seq, rng.next().unwrap_or(0), i, i == pp - 1);
                }
            }
            let t0 = Instant::now();
            s.decode(&batch)?;
            let t_pp = t0.elapsed().as_secs_f64();
            let mut seqs = seqs;
            if args.pp_shared {
                for seq in seqs.iter_mut().skip(1) {
                    s.seq_remove(*seq)?;
                    *seq = s.seq_fork(main, pp)?;
                }
            }
            let t1 = Instant::now();
            for i in 0..tg {
                batch.clear();
                for &seq in &seqs {
                    batch.push(seq, rng.next().unwrap_or(0), pp + i, true);
                }
                s.decode(&batch)?;
            }
            let t_tg = t1.elapsed().as_secs_f64();
            for &seq in &seqs {
                s.seq_remove(seq)?;
            }
            let t = t_pp + t_tg;
            let n_kv = n_kv_req(pp, tg, pl, args.pp_shared);
            let pp_tokens = if args.pp_shared { pp } else { pl * pp };
            let speed_pp = pp_tokens as f64 / t_pp;
            let speed_tg = (pl * tg) as f64 / t_tg;
            let speed = (pp_tokens + pl * tg) as f64 / t;
            if args.json {
                let rec = json!({
                    "n_kv_max": n_ctx,
                    "n_batch": args.n_batch,
                    "n_ubatch": args.n_batch,
                    "flash_attn": 0,
                    "is_pp_shared": u8::from(args.pp_shared),
                    "n_gpu_layers": 0,
                    "n_threads": n_threads,
                    "n_threads_batch": n_threads,
                    "pp": pp,
                    "tg": tg,
                    "pl": pl,
                    "n_kv": n_kv,
                    "t_pp": t_pp,
                    "speed_pp": speed_pp,
                    "t_tg": t_tg,
                    "speed_tg": speed_tg,
                    "t": t,
                    "speed": speed,
                    "backend": s.backend_name,
                });
                println!("{rec}");
            } else {
                println!(
                    "|{pp:>6} | {tg:>6} | {pl:>4} | {n_kv:>6} | {t_pp:>8.3} | {speed_pp:>8.2} | {t_tg:>8.3} | {speed_tg:>8.2} | {t:>8.3} | {speed:>8.2} |"
                );
            }
        }
        super::print_profile(&s);
    }
    Ok(())
}

/// The embeddings mode: `batch` inputs of `len` tokens each (`[CLS]`, random ids, `[SEP]`) per
/// call, one row per backend × length × count.
fn embeddings(path: &std::path::Path, model: Arc<minfer::Model>, args: &Args) -> Result<()> {
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
    let n_threads = args.threads.unwrap_or_else(minfer::backend::cpu::default_threads);
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
