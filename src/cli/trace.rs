//! `trace`: one named intermediate of the prompt's forward on each backend, side by side,
//! held against the first backend's (NMSE, max |Δ|): where backends part, node by node.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Result};
use clap::Args;
use minfer::backend::{BackendChoice, KvType};
use minfer::session::Trace;
use minfer::{Session, SessionOptions};

use super::flags::parse_kv;
use super::Base;

#[derive(Args)]
pub struct TraceArgs {
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
}

/// What the sessions are built with: the flags over the environment.
struct Config {
    backends: Vec<BackendChoice>,
    threads: Option<usize>,
    kv_type: Option<KvType>,
    flash_attn: bool,
    json: bool,
    base: SessionOptions,
}

pub fn run(a: TraceArgs, base: &Base) -> Result<()> {
    let backends = a
        .backend
        .split(',')
        .map(BackendChoice::parse)
        .collect::<minfer::Result<Vec<_>>>()?;
    let c = Config {
        backends,
        threads: a.threads,
        kv_type: a.kv_type.or(base.env.kv_type),
        flash_attn: a.flash_attn,
        json: a.json,
        base: base.session(),
    };
    compare(&a.model, &a.node, &a.prompt, &c)
}

/// (NMSE, max |Δ|) of `ours` against `reference`.
fn gap(ours: &[f32], reference: &[f32]) -> (f64, f32) {
    let (mut num, mut den, mut maxd) = (0f64, 0f64, 0f32);
    for (&a, &b) in ours.iter().zip(reference) {
        num += ((a - b) as f64).powi(2);
        den += (b as f64).powi(2);
        maxd = maxd.max((a - b).abs());
    }
    (num / den.max(1e-30), maxd)
}

fn compare(model: &Path, node: &str, prompt: &str, a: &Config) -> Result<()> {
    if a.backends.is_empty() {
        bail!("--backend names no backend");
    }
    let minfer::load::Loaded { model, tokenizer } = minfer::load::open(model)?;
    let model = Arc::new(model);
    let ids = tokenizer.encode(prompt, tokenizer.add_bos(), true)?;
    if ids.is_empty() {
        bail!("the prompt has no tokens");
    }
    let mut traces: Vec<(String, Trace)> = Vec::new();
    for &choice in &a.backends {
        let opts = SessionOptions {
            n_ctx: ids.len(),
            n_batch: ids.len(),
            threads: a.threads,
            backend: choice,
            kv_type: a.kv_type,
            ..a.base.clone()
        };
        let mut s = Session::new(model.clone(), &opts)?;
        s.set_flash_attn(a.flash_attn);
        let t = s.trace(&ids, node)?;
        traces.push((s.backend_name.to_string(), t));
    }
    let reference = traces[0].1.values.clone();
    for (backend, t) in &traces {
        let (nmse, maxd) = gap(&t.values, &reference);
        let n = t.values.len().max(1) as f64;
        let rms = (t.values.iter().map(|&x| (x as f64).powi(2)).sum::<f64>() / n).sqrt();
        if a.json {
            let j = serde_json::json!({
                "backend": backend, "node": t.name, "rows": t.rows, "width": t.width,
                "rms": rms, "nmse_vs_first": nmse, "max_abs_diff_vs_first": maxd,
                "values": t.values,
            });
            println!("{j}");
        } else {
            let last = &t.values[t.values.len().saturating_sub(t.width)..];
            let head: Vec<String> = last.iter().take(6).map(|x| format!("{x:.5}")).collect();
            println!(
                "{backend:<6} {} [{}x{}]  rms {rms:.5}  vs {}: NMSE {nmse:.2e}, max |Δ| {maxd:.3e}  last row [{} …]",
                t.name,
                t.rows,
                t.width,
                traces[0].0,
                head.join(", ")
            );
        }
    }
    Ok(())
}
