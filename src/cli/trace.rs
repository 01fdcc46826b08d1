//! `trace`: one named intermediate of the prompt's forward on each backend, side by side,
//! held against the first backend's (NMSE, max |Δ|): where backends part, node by node.

use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, Result};
use minfer::backend::{BackendChoice, KvType};
use minfer::session::Trace;
use minfer::{Session, SessionOptions};

pub struct Args {
    pub backends: Vec<BackendChoice>,
    pub threads: Option<usize>,
    pub kv_type: Option<KvType>,
    pub flash_attn: bool,
    pub json: bool,
    pub base: SessionOptions,
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

pub fn run(model: &Path, node: &str, prompt: &str, a: &Args) -> Result<()> {
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
