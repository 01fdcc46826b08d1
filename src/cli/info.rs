//! `minfer-wgpu info MODEL [--json]`: metadata, the tensor table, and each backend's verdict.
//! Reads only the header: no tensor data is touched.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Result;
use serde_json::{json, Value as J};

use minfer::backend::{self, KvType};
use minfer::gguf::{GgufFile, Value};
use minfer::Model;

/// Metadata arrays longer than this are abbreviated in the text listing.
const TEXT_ARRAY_ITEMS: usize = 8;

pub fn run(path: &Path, as_json: bool) -> Result<()> {
    let file = GgufFile::open(path)?;
    let arch = file
        .architecture()
        .map(str::to_string)
        .unwrap_or_else(|_| "(none)".into());
    let mut per_qtype: BTreeMap<&str, (usize, u64)> = BTreeMap::new();
    for t in &file.tensors {
        let e = per_qtype.entry(t.qtype.name()).or_default();
        e.0 += 1;
        e.1 += t.data.len() as u64;
    }
    let parts: Vec<String> = file.parts.iter().map(|p| p.path.display().to_string()).collect();
    let params = file.n_params();
    let file_bytes = file.file_bytes();
    let tensors: Vec<J> = file
        .tensors
        .iter()
        .map(|t| json!({"name": t.name, "qtype": t.qtype.name(), "shape": t.shape, "bytes": t.data.len()}))
        .collect();
    let metadata_json: serde_json::Map<String, J> = file
        .metadata
        .iter()
        .map(|(k, v)| (k.to_string(), metadata_json(k, v)))
        .collect();
    let metadata_text: Vec<(String, String)> = file
        .metadata
        .iter()
        .map(|(k, v)| (k.to_string(), v.display(TEXT_ARRAY_ITEMS)))
        .collect();
    let version = file.version;

    // The gate verdicts need the architecture dispatched; a model that fails to load says why.
    let (model_err, verdicts) = match Model::from_gguf(file, path.display().to_string()) {
        Ok(model) => {
            let kv = KvType::auto(&model).unwrap_or(KvType::F16);
            let v: Vec<(String, Result<(), String>)> = backend::verdicts(&model, kv)
                .into_iter()
                .map(|(n, r)| (n, r.map_err(|e| e.0)))
                .collect();
            (None, v)
        }
        Err(e) => (Some(e.to_string()), Vec::new()),
    };

    if as_json {
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
            "gguf_version": version,
            "metadata": metadata_json,
            "tensors": tensors,
            "qtypes": qt,
            "params": params,
            "file_bytes": file_bytes,
            "parts": parts,
            "model_error": model_err,
            "backends": backends,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }

    println!("file:         {}", parts.join(", "));
    println!(
        "size:         {} bytes in {} part(s), GGUF v{version}",
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
            "  {:<40} {:<7} {:<24} {:>12}",
            t["name"].as_str().unwrap_or(""),
            t["qtype"].as_str().unwrap_or(""),
            shape.join(", "),
            t["bytes"]
        );
    }
    println!("\nbytes per qtype:");
    for (q, (n, b)) in &per_qtype {
        println!("  {q:<7} {n:>5} tensors {:>14} bytes", b);
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
