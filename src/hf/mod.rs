//! Hugging Face models: a directory of `config.json` + `*.safetensors` (+ `tokenizer.json`), or
//! `org/name[@revision]` found in the HF cache.
//!
//! The weights stay raw bytes in the mapped shards (F32/F16/BF16 are qtypes like any other),
//! renamed to the canonical names; `config.json` becomes the GGUF keys the architecture already
//! reads, so the same `hparams`, graph and backends run the model. Two conventions the GGUF
//! converter bakes into the weights are handled here instead:
//! - Llama's Q/K rows: the converter permutes them for adjacent-pair RoPE; HF's unpermuted rows
//!   are exactly NeoX-style rotation, so an HF Llama runs with `RopeMode::Neox` (no weight touched).
//! - Gemma's RMSNorm weights: HF stores `w`, the converter `1 + w`; [`gemma_norm_plus_one`] makes
//!   that f32 copy of those few small vectors at load.

pub(crate) mod config;
pub(crate) mod experts;
pub(crate) mod names;
pub(crate) mod resolve;
pub(crate) mod safetensors;
pub(crate) mod tokenizer;

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use serde_json::Value as J;

pub use resolve::{hub_cache_root, resolve_in, resolve_name, HubName};
pub use safetensors::SafetensorsFile;
pub use tokenizer::{chat_template, load as load_tokenizer};

use crate::error::{Error, Result};
use crate::gguf::Value;
use crate::model::{hparams, Arch, GraphKey, HParams, Model, RopeMode};
use crate::quant::QType;
use crate::tensor::{Bytes, Tensor};
use config::Config;
use names::Mapped;

const INDEX_FILE: &str = "model.safetensors.index.json";
const MAX_JSON: u64 = 64 << 20;
/// More shards than any published model has.
const MAX_SHARDS: usize = 4096;

/// One safetensors file of the model.
#[derive(Clone, Debug)]
pub struct Shard {
    pub path: PathBuf,
    pub size: u64,
    pub n_tensors: usize,
}

/// An opened model directory, before the architecture checks its hyperparameters.
pub struct HfDir {
    pub dir: PathBuf,
    pub config: Config,
    pub shards: Vec<Shard>,
    /// Weights by canonical name (Gemma norms already `1 + w`).
    pub weights: HashMap<String, Tensor>,
    /// Canonical name → the name in the checkpoint.
    pub hf_names: HashMap<String, String>,
    /// Checkpoint tensors that are not the text model (vision tower, buffers).
    pub skipped: Vec<String>,
}

impl HfDir {
    pub fn open(dir: &Path) -> Result<HfDir> {
        let cfg_path = dir.join("config.json");
        let config = config::parse(&read_json(&cfg_path, MAX_JSON)?).map_err(|e| in_file(&cfg_path, e))?;
        let arch = config.arch;
        let mut cfg = config;
        (cfg.extras.pooling, cfg.extras.normalize) = sentence_transformers(dir)?;
        if let Some(t) = tokenizer::chat_template(dir)? {
            cfg.metadata.insert("tokenizer.chat_template", Value::String(t));
        }
        let files = shard_files(dir)?;
        let mut shards = Vec::with_capacity(files.len());
        let mut weights = HashMap::new();
        let mut hf_names = HashMap::new();
        let mut skipped = Vec::new();
        let mut seen: HashMap<String, usize> = HashMap::new();
        let mut expert_pieces = Vec::new();
        for (part, (path, expected)) in files.iter().enumerate() {
            let file = SafetensorsFile::open(path)?;
            let tensors = file.tensors(part)?;
            for name in expected {
                if !file.header.entries.iter().any(|e| &e.name == name) {
                    return Err(Error::tensor(
                        name,
                        format!("{INDEX_FILE} places it in {}, which does not hold it", path.display()),
                    ));
                }
            }
            shards.push(Shard {
                path: path.clone(),
                size: file.size,
                n_tensors: tensors.len(),
            });
            for (name, shape, data) in file.raw_u8()? {
                if let Some(prev) = seen.insert(name.clone(), part) {
                    return Err(Error::tensor(
                        &name,
                        format!("appears in both {} and {}", files[prev].0.display(), path.display()),
                    ));
                }
                let Some(n) = experts::parse(arch, &name) else {
                    return Err(Error::tensor(
                        &name,
                        "has dtype U8, which only MXFP4 expert *_blocks / *_scales may have",
                    ));
                };
                let hf_name = name;
                expert_pieces.push((
                    n,
                    experts::Piece {
                        hf_name,
                        qtype: None,
                        shape,
                        data,
                    },
                ));
            }
            for mut t in tensors {
                if let Some(prev) = seen.insert(t.name.clone(), part) {
                    return Err(Error::tensor(
                        &t.name,
                        format!("appears in both {} and {}", files[prev].0.display(), path.display()),
                    ));
                }
                if let Some(n) = experts::parse(arch, &t.name) {
                    let piece = experts::Piece {
                        hf_name: t.name,
                        qtype: Some(t.qtype),
                        shape: t.shape,
                        data: t.data,
                    };
                    expert_pieces.push((n, piece));
                    continue;
                }
                let canonical = match names::canonical(arch, &t.name) {
                    Mapped::Canonical(c) => c,
                    Mapped::Skip => {
                        skipped.push(t.name);
                        continue;
                    }
                    Mapped::Unknown => {
                        return Err(Error::tensor(
                            &t.name,
                            format!(
                                "not a tensor of a {} text model (model_type '{}')",
                                arch.name(),
                                cfg.model_type
                            ),
                        ))
                    }
                };
                if let Some(other) = hf_names.get(&canonical) {
                    return Err(Error::tensor(
                        &t.name,
                        format!("maps to '{canonical}', as '{other}' already does"),
                    ));
                }
                let hf_name = std::mem::replace(&mut t.name, canonical.clone());
                if arch == Arch::Gemma3 && names::is_gemma_norm(&canonical) {
                    t = gemma_norm_plus_one(&t)?;
                }
                hf_names.insert(canonical.clone(), hf_name);
                weights.insert(canonical, t);
            }
        }
        if !expert_pieces.is_empty() {
            let key = format!("{}.expert_count", arch.name());
            let n_expert = cfg
                .metadata
                .get_u64(&key)?
                .filter(|&n| n > 0 && n <= hparams::MAX_EXPERTS as u64)
                .ok_or_else(|| {
                    Error::metadata(&key, "missing or out of range, but the checkpoint has expert tensors")
                })? as usize;
            for b in experts::assemble(arch, n_expert, expert_pieces)? {
                let canonical = b.tensor.name.clone();
                if let Some(other) = hf_names.insert(canonical.clone(), b.hf_name.clone()) {
                    return Err(Error::tensor(
                        &b.hf_name,
                        format!("maps to '{canonical}', as '{other}' already does"),
                    ));
                }
                weights.insert(canonical, b.tensor);
            }
        }
        // Fused checkpoint tensors (Phi-3 qkv_proj, gate_up_proj) become views, as in a GGUF.
        let keys = hparams::Keys {
            md: &cfg.metadata,
            arch: arch.name(),
        };
        arch.prepare_weights(&keys, &mut weights).map_err(|e| match e {
            // Name the checkpoint's tensor beside the canonical one.
            Error::Tensor { name, what } => match hf_names.get(&name) {
                Some(hf) => Error::Tensor {
                    name: hf.clone(),
                    what: format!("(loaded as '{name}') {what}"),
                },
                None => Error::Tensor { name, what },
            },
            other => other,
        })?;
        for (fused, parts) in [
            ("attn_qkv", ["attn_q", "attn_k", "attn_v"].as_slice()),
            ("ffn_up", &["ffn_gate"]),
        ] {
            let split: Vec<(String, String)> = hf_names
                .iter()
                .filter(|(c, _)| c.ends_with(&format!(".{fused}.weight")))
                .flat_map(|(c, h)| parts.iter().map(move |p| (c.replace(fused, p), h.clone())))
                .collect();
            hf_names.extend(split);
        }
        Ok(HfDir {
            dir: dir.to_path_buf(),
            config: cfg,
            shards,
            weights,
            hf_names,
            skipped,
        })
    }

    pub fn file_bytes(&self) -> u64 {
        self.shards.iter().map(|s| s.size).sum()
    }

    /// The hyperparameters: the architecture's reading of the mapped keys, then what only the
    /// HF config says.
    pub fn hparams(&self) -> Result<HParams> {
        let arch = self.config.arch;
        let keys = hparams::Keys {
            md: &self.config.metadata,
            arch: arch.name(),
        };
        let mut hp = arch.hparams(&keys, &self.weights)?;
        if matches!(arch, Arch::Llama | Arch::Mistral3 | Arch::Granite | Arch::Smollm3) {
            // Unpermuted HF Q/K rows: RoPE rotates (i, i + n_rot/2), not adjacent pairs.
            // (GLM-4's HF rotation is interleaved: its GGUF rows are not permuted.)
            hp.rope.mode = RopeMode::Neox;
            hp.rope_swa.mode = RopeMode::Neox;
        }
        let x = &self.config.extras;
        if let Some(swa) = &x.swa_layers {
            if swa.len() != hp.n_layer {
                return Err(Error::metadata(
                    "config.json layer_types",
                    format!("{} entries for {} layers", swa.len(), hp.n_layer),
                ));
            }
            hp.swa_layers = if hp.sliding_window.is_some() {
                swa.clone()
            } else {
                vec![false; hp.n_layer]
            };
        }
        if let Some(nope) = &x.nope_layers {
            if nope.len() != hp.n_layer {
                return Err(Error::metadata(
                    "config.json no_rope_layers",
                    format!("{} entries for {} layers", nope.len(), hp.n_layer),
                ));
            }
            hp.nope_layers = nope.clone();
        }
        if let Some(b) = x.rope_local_base {
            hp.rope_swa.base = b;
        }
        if let Some(q) = x.query_pre_attn_scalar {
            hp.attn_scale = 1.0 / q.sqrt();
        }
        if let Some(p) = x.pooling {
            hp.pooling = Some(p);
        }
        if let Some(n) = x.normalize {
            hp.normalize = n;
        }
        Ok(hp)
    }

    /// The model, checked: hyperparameters against the tensors, every weight the graph names
    /// present with its shape, and every text weight of the checkpoint used by the graph.
    pub fn into_model(self) -> Result<Model> {
        let hp = self.hparams()?;
        let file_bytes = self.file_bytes();
        let source = self.dir.display().to_string();
        let HfDir {
            config,
            weights,
            hf_names,
            ..
        } = self;
        let model = Model::from_parts(config.arch, hp, config.metadata, weights, source, file_bytes)?;
        let graph = model.graph(GraphKey::new(1, 1));
        let used: BTreeSet<String> = graph
            .nodes
            .iter()
            .flat_map(|n| n.op.weights())
            .map(|w| w.into_owned())
            .collect();
        let mut unused: Vec<&String> = model.weights.keys().filter(|k| !used.contains(k.as_str())).collect();
        unused.sort();
        if let Some(name) = unused.first() {
            let hf = hf_names.get(*name).map(String::as_str).unwrap_or("?");
            return Err(Error::tensor(
                hf,
                format!(
                    "loaded as '{name}', which the {} graph does not use (the config does not describe these weights)",
                    model.arch.name()
                ),
            ));
        }
        Ok(model)
    }
}

/// Opens the HF model directory `dir` as a [`Model`].
pub fn open_model(dir: &Path) -> Result<Model> {
    HfDir::open(dir)?.into_model()
}

/// Gemma's norm weights as the graph reads them: `1 + w`, in f32 (HF computes the sum in f32
/// too: `Gemma3RMSNorm.forward`). Only these few vectors are copied.
pub fn gemma_norm_plus_one(t: &Tensor) -> Result<Tensor> {
    if !matches!(t.qtype, QType::F32 | QType::F16 | QType::BF16) {
        return Err(Error::tensor(
            &t.name,
            format!("norm weight is {}, not a float type", t.qtype),
        ));
    }
    let v = t.to_f32()?;
    let bytes: Vec<u8> = v.iter().flat_map(|x| (1.0 + x).to_le_bytes()).collect();
    Ok(Tensor {
        qtype: QType::F32,
        data: Bytes::from_vec(bytes),
        ..t.clone()
    })
}

/// The shards to open, each with the tensors the index places in it: the index's files when
/// `model.safetensors.index.json` is there, else every `*.safetensors`, sorted.
fn shard_files(dir: &Path) -> Result<Vec<(PathBuf, Vec<String>)>> {
    let index = dir.join(INDEX_FILE);
    if index.is_file() {
        let v = read_json(&index, MAX_JSON)?;
        let map = v
            .get("weight_map")
            .and_then(J::as_object)
            .ok_or_else(|| Error::metadata(format!("{} weight_map", index.display()), "missing or not an object"))?;
        let mut by_file: std::collections::BTreeMap<String, Vec<String>> = Default::default();
        for (tensor, file) in map {
            let f = file.as_str().filter(|f| is_plain_file_name(f)).ok_or_else(|| {
                Error::metadata(
                    format!("{} weight_map", index.display()),
                    format!("'{tensor}' → {file} is not a .safetensors file name in this directory"),
                )
            })?;
            by_file.entry(f.to_string()).or_default().push(tensor.clone());
        }
        if by_file.len() > MAX_SHARDS {
            return Err(Error::metadata(
                format!("{} weight_map", index.display()),
                format!("{} files is absurd", by_file.len()),
            ));
        }
        return Ok(by_file.into_iter().map(|(f, t)| (dir.join(f), t)).collect());
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| Error::io(dir, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "safetensors") && p.is_file())
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(Error::InvalidArgument(format!(
            "{}: no *.safetensors files",
            dir.display()
        )));
    }
    if files.len() > MAX_SHARDS {
        return Err(Error::InvalidArgument(format!(
            "{}: {} safetensors files",
            dir.display(),
            files.len()
        )));
    }
    Ok(files.into_iter().map(|p| (p, Vec::new())).collect())
}

fn is_plain_file_name(f: &str) -> bool {
    f.ends_with(".safetensors") && !f.starts_with('.') && !f.contains(['/', '\\']) && f.len() <= 255
}

pub(crate) fn read_json(path: &Path, cap: u64) -> Result<J> {
    let bytes = tokenizer::read_capped(path, cap)?;
    serde_json::from_slice(&bytes).map_err(|e| Error::Format {
        file: path.display().to_string(),
        offset: 0,
        what: format!("invalid JSON: {e}"),
    })
}

/// A sentence-transformers pipeline (`modules.json`): its `Pooling` module's mode and whether
/// a `Normalize` module follows. (None, None) where the directory has no `modules.json`.
fn sentence_transformers(dir: &Path) -> Result<(Option<crate::model::Pooling>, Option<bool>)> {
    use crate::model::Pooling;
    let path = dir.join("modules.json");
    if !path.is_file() {
        return Ok((None, None));
    }
    let bad = |what: String| Error::Format {
        file: path.display().to_string(),
        offset: 0,
        what,
    };
    let modules = read_json(&path, MAX_JSON)?;
    let list = modules
        .as_array()
        .ok_or_else(|| bad("is not a list of modules".into()))?;
    let mut pooling = None;
    let mut normalize = false;
    for m in list {
        let ty = m.get("type").and_then(J::as_str).unwrap_or("");
        let sub = m.get("path").and_then(J::as_str).unwrap_or("");
        if ty.ends_with(".Normalize") {
            normalize = true;
        } else if ty.ends_with(".Pooling") {
            if sub.contains("..") || Path::new(sub).is_absolute() {
                return Err(bad(format!("module path '{sub}' leaves the model directory")));
            }
            let cfg_path = dir.join(sub).join("config.json");
            let cfg = read_json(&cfg_path, MAX_JSON)?;
            let on = |k: &str| cfg.get(k).and_then(J::as_bool).unwrap_or(false);
            let modes = [
                ("pooling_mode_mean_tokens", Some(Pooling::Mean)),
                ("pooling_mode_cls_token", Some(Pooling::Cls)),
                ("pooling_mode_lasttoken", Some(Pooling::Last)),
                ("pooling_mode_max_tokens", None),
                ("pooling_mode_mean_sqrt_len_tokens", None),
                ("pooling_mode_weightedmean_tokens", None),
            ];
            let chosen: Vec<_> = modes.iter().filter(|(k, _)| on(k)).collect();
            pooling = match chosen.as_slice() {
                [(_, Some(p))] => Some(*p),
                [(k, None)] => {
                    return Err(Error::Format {
                        file: cfg_path.display().to_string(),
                        offset: 0,
                        what: format!("{k} is not supported (mean, cls or last token pooling)"),
                    })
                }
                _ => {
                    return Err(Error::Format {
                        file: cfg_path.display().to_string(),
                        offset: 0,
                        what: format!(
                            "{} pooling modes are on; one of mean, cls or last token is supported",
                            chosen.len()
                        ),
                    })
                }
            };
        }
    }
    Ok((pooling, Some(normalize)))
}

/// Names the config file in a metadata error.
fn in_file(path: &Path, e: Error) -> Error {
    match e {
        Error::Metadata { key, what } => Error::Metadata {
            key,
            what: format!("{what} (in {})", path.display()),
        },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vector(qtype: QType, bytes: Vec<u8>, n: u64) -> Tensor {
        Tensor {
            name: "blk.0.attn_norm.weight".into(),
            qtype,
            shape: vec![n],
            data: Bytes::from_vec(bytes),
            part: 0,
            file_offset: 0,
        }
    }

    #[test]
    fn gemma_norm_plus_one_adds_one_in_f32() {
        let w = [0.5f32, -1.0, 0.0, 2.25];
        let t = vector(QType::F32, w.iter().flat_map(|x| x.to_le_bytes()).collect(), 4);
        let out = gemma_norm_plus_one(&t).unwrap();
        assert_eq!(out.qtype, QType::F32);
        assert_eq!(out.shape, vec![4]);
        assert_eq!(out.name, t.name);
        assert_eq!(out.to_f32().unwrap(), vec![1.5, 0.0, 1.0, 3.25]);

        // bf16 in, f32 out: 1 + w computed on the widened value.
        let bf: Vec<u8> = w.iter().flat_map(|x| half::bf16::from_f32(*x).to_le_bytes()).collect();
        let out = gemma_norm_plus_one(&vector(QType::BF16, bf, 4)).unwrap();
        assert_eq!(
            (out.qtype, out.to_f32().unwrap()),
            (QType::F32, vec![1.5, 0.0, 1.0, 3.25])
        );

        let q = vector(QType::Q8_0, vec![0; 34], 32);
        assert!(gemma_norm_plus_one(&q).unwrap_err().to_string().contains("q8_0"));
    }

    #[test]
    fn index_file_names_stay_in_the_directory() {
        assert!(is_plain_file_name("model-00001-of-00002.safetensors"));
        for bad in [
            "../x.safetensors",
            "/etc/x.safetensors",
            "a/b.safetensors",
            "x.bin",
            ".hidden.safetensors",
        ] {
            assert!(!is_plain_file_name(bad), "{bad}");
        }
    }
}
