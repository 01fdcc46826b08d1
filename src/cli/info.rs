//! `minfer-wgpu info MODEL [--json]`: metadata, the tensor table, and each backend's verdict,
//! for a GGUF file or a Hugging Face directory (its config as the GGUF keys it maps to, its
//! tensors under their canonical names). Reads only the headers: no tensor data is touched
//! (but Gemma's few norm vectors, which an HF load turns into `1 + w`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Result;
use clap::Args;
use serde_json::{json, Value as J};

use minfer::backend::{self, KvType};
use minfer::gguf::{GgufFile, Metadata, Value};
use minfer::hf::HfDir;
use minfer::load::Source;
use minfer::tensor::Tensor;
use minfer::Model;

use super::Base;

#[derive(Args)]
pub struct InfoArgs {
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
}

pub fn run(a: InfoArgs, base: &Base) -> Result<()> {
    if let Some(f) = &a.dump_graph {
        super::dump_graph(&a.model, f)?;
    }
    let ask = Ask {
        json: a.json,
        kv_type: base.env.kv_type,
        backends: base.env.backend_options(),
        drop_ffn: a.drop_ffn,
    };
    show(&a.model, &ask)
}

/// What `info` is asked for: the output format, and the KV type and backend switches the
/// verdicts are given under (the environment's, as a run would have them).
struct Ask {
    json: bool,
    kv_type: Option<KvType>,
    backends: backend::BackendOptions,
    /// `--no-ffn`: what the attention-only model leaves out, and the verdicts on it.
    drop_ffn: bool,
}

/// Metadata arrays longer than this are abbreviated in the text listing.
const TEXT_ARRAY_ITEMS: usize = 8;

fn show(path: &Path, ask: &Ask) -> Result<()> {
    match minfer::load::resolve(path)? {
        Source::Gguf(p) => {
            let file = GgufFile::open(&p)?;
            let listing = Listing::new(&file.metadata, &file.tensors, |_| None);
            let (format, version) = (format!("GGUF v{}", file.version), json!(file.version));
            let parts: Vec<String> = file.parts.iter().map(|p| p.path.display().to_string()).collect();
            let file_bytes = file.file_bytes();
            let model = Model::from_gguf(file, p.display().to_string());
            print(listing, &format, version, parts, file_bytes, model, ask)
        }
        Source::HfDir(d) => {
            let dir = HfDir::open(&d)?;
            let mut tensors: Vec<&Tensor> = dir.weights.values().collect();
            tensors.sort_by_key(|t| (t.part, t.file_offset));
            let tensors: Vec<Tensor> = tensors.into_iter().cloned().collect();
            let listing = Listing::new(&dir.config.metadata, &tensors, |name| dir.hf_names.get(name).cloned());
            let parts: Vec<String> = dir.shards.iter().map(|s| s.path.display().to_string()).collect();
            let file_bytes = dir.file_bytes();
            if !dir.skipped.is_empty() {
                eprintln!("({} tensors of other modalities not loaded)", dir.skipped.len());
            }
            print(
                listing,
                "safetensors",
                J::Null,
                parts,
                file_bytes,
                dir.into_model(),
                ask,
            )
        }
    }
}

/// What both formats list.
struct Listing {
    arch: String,
    per_qtype: BTreeMap<&'static str, (usize, u64)>,
    params: u64,
    tensors: Vec<J>,
    metadata_json: serde_json::Map<String, J>,
    metadata_text: Vec<(String, String)>,
}

impl Listing {
    fn new(md: &Metadata, tensors: &[Tensor], hf_name: impl Fn(&str) -> Option<String>) -> Listing {
        let arch = md
            .get_str("general.architecture")
            .ok()
            .flatten()
            .unwrap_or("(none)")
            .to_string();
        let mut per_qtype: BTreeMap<&str, (usize, u64)> = BTreeMap::new();
        for t in tensors {
            let e = per_qtype.entry(t.qtype.name()).or_default();
            e.0 += 1;
            e.1 += t.data.len() as u64;
        }
        let tensors_json = tensors
            .iter()
            .map(|t| {
                let mut j = json!({"name": t.name, "qtype": t.qtype.name(), "shape": t.shape, "bytes": t.data.len()});
                if let Some(h) = hf_name(&t.name) {
                    j["hf_name"] = J::String(h);
                }
                j
            })
            .collect();
        Listing {
            arch,
            per_qtype,
            params: tensors.iter().map(|t| t.n_elements()).sum(),
            tensors: tensors_json,
            metadata_json: md.iter().map(|(k, v)| (k.to_string(), metadata_json(k, v))).collect(),
            metadata_text: md
                .iter()
                .map(|(k, v)| (k.to_string(), v.display(TEXT_ARRAY_ITEMS)))
                .collect(),
        }
    }
}

fn print(
    l: Listing,
    format: &str,
    version: J,
    parts: Vec<String>,
    file_bytes: u64,
    model: minfer::Result<Model>,
    ask: &Ask,
) -> Result<()> {
    let Listing {
        arch,
        per_qtype,
        params,
        tensors,
        metadata_json,
        metadata_text,
    } = l;
    // The gate verdicts need the architecture dispatched; a model that fails to load says why.
    let mut dropped = None;
    let model = match model {
        Ok(m) if ask.drop_ffn => m.without_ffn().map(|(m, d)| {
            dropped = Some((d, m.weight_bytes()));
            m
        }),
        other => other,
    };
    let (model_err, verdicts) = match model {
        Ok(model) => {
            let kv = ask.kv_type.unwrap_or_else(|| KvType::auto(&model));
            let v: Vec<(String, Result<(), String>)> = backend::verdicts(&model, kv, &ask.backends)
                .into_iter()
                .map(|(n, r)| (n, r.map_err(|e| e.0)))
                .collect();
            (None, v)
        }
        Err(e) => (Some(e.to_string()), Vec::new()),
    };

    if ask.json {
        let backends: serde_json::Map<String, J> = verdicts
            .iter()
            .map(|(n, r)| {
                let v = match r {
                    Ok(()) => json!({"ok": true}),
                    Err(why) => json!({"ok": false, "reason": why}),
                };
                (n.clone(), v)
            })
            .collect();
        let qt: serde_json::Map<String, J> = per_qtype
            .iter()
            .map(|(q, (n, b))| (q.to_string(), json!({"tensors": n, "bytes": b})))
            .collect();
        let out = json!({
            "architecture": arch,
            "format": format,
            "gguf_version": version,
            "metadata": metadata_json,
            "tensors": tensors,
            "qtypes": qt,
            "params": params,
            "file_bytes": file_bytes,
            "parts": parts,
            "model_error": model_err,
            "backends": backends,
            "no_ffn": dropped.map(|(d, kept)| json!({"tensors_left_out": d.tensors, "bytes_left_out": d.bytes, "bytes_kept": kept})),
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }

    println!("file:         {}", parts.join(", "));
    println!(
        "size:         {} bytes in {} part(s), {format}",
        file_bytes,
        parts.len()
    );
    println!("architecture: {arch}");
    println!("parameters:   {params} ({:.1} M)", params as f64 / 1e6);
    println!("\nmetadata ({} keys):", metadata_text.len());
    for (k, v) in &metadata_text {
        println!("  {k:<44} {v}");
    }
    println!("\ntensors ({}):", tensors.len());
    println!(
        "  {:<40} {:<7} {:<24} {:>12}",
        "name", "qtype", "shape (ne0, ne1, …)", "bytes"
    );
    for t in &tensors {
        let shape: Vec<String> = t["shape"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|d| d.to_string())
            .collect();
        println!(
            "  {:<40} {:<7} {:<24} {:>12}{}",
            t["name"].as_str().unwrap_or(""),
            t["qtype"].as_str().unwrap_or(""),
            shape.join(", "),
            t["bytes"],
            t["hf_name"].as_str().map(|h| format!("  ← {h}")).unwrap_or_default()
        );
    }
    println!("\nbytes per qtype:");
    for (q, (n, b)) in &per_qtype {
        println!("  {q:<7} {n:>5} tensors {:>14} bytes", b);
    }
    if let Some((d, kept)) = dropped {
        println!(
            "\nno-ffn:       {} FFN/expert tensors, {} bytes ({:.1} MB) left out; {} bytes kept \
             (attention-only graphs: the outputs are not the model's)",
            d.tensors,
            d.bytes,
            d.bytes as f64 / 1e6,
            kept
        );
    }
    println!("\nbackends:");
    if let Some(e) = &model_err {
        println!("  (model not loadable: {e})");
    }
    for (n, r) in &verdicts {
        match r {
            Ok(()) => println!("  {n:<5} ok — hosts every weight and op"),
            Err(why) => println!("  {n:<5} skipped — {why}"),
        }
    }
    Ok(())
}

/// JSON for one metadata value: whole, except the big tokenizer arrays, summarised by length.
fn metadata_json(key: &str, v: &Value) -> J {
    match v {
        Value::Array(t, items) if key.starts_with("tokenizer.") => {
            json!({"type": "array", "element_type": t.name(), "len": items.len()})
        }
        _ => v.to_json(),
    }
}
