//! Opening what a user names as MODEL: a `.gguf` file (a split set by any of its parts, or its
//! first), a directory (Hugging Face: `config.json` + `*.safetensors`; else the one GGUF model in
//! it), or `org/name[@revision]` in the Hugging Face cache. [`resolve`] decides which, once; the
//! [`Source`] it returns opens the model, its tokenizer, or both.
//!
//! ```no_run
//! # fn main() -> minfer::Result<()> {
//! let minfer::load::Loaded { model, tokenizer } = minfer::load::open("Qwen/Qwen3-0.6B")?;
//! println!("{}: {} tokens", model.arch.name(), tokenizer.n_vocab());
//! # Ok(())
//! # }
//! ```
//!
//! Module dependencies among the loaders (the `crate::…` paths in their code;
//! `module_graph_tests.rs` scans for them, so a new edge is a deliberate edit here and in that test):
//!
//! ```text
//! load      → {hf, gguf, model, tokenizer}   picks the format, opens model and tokenizer
//! hf        → {gguf, model, tokenizer}       an HF directory: weights → Model, config files →
//!                                            the tokenizer's special tokens
//! model     → {gguf}                         architectures, hyperparameters, the graph
//! tokenizer → {gguf}                         from GGUF metadata or tokenizer.json bytes
//! ```
//!
//! (Leaf modules — `error`, `tensor`, `quant` — are left out.) No cycle: `model` and
//! `tokenizer` know nothing of files beyond a GGUF's, `hf` nothing of how a path was classified.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::gguf::GgufFile;
use crate::hf::{self, HubName};
use crate::model::Model;
use crate::tokenizer::Tokenizer;

/// A model on disk, classified.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// A GGUF file (for a split set, the part named; the reader finds the others).
    Gguf(PathBuf),
    /// A directory with `config.json` and safetensors.
    HfDir(PathBuf),
}

/// A model and its tokenizer.
pub struct Loaded {
    pub model: Model,
    pub tokenizer: Tokenizer,
}

impl Loaded {
    /// The model's own chat template (Jinja source): GGUF `tokenizer.chat_template`, or the HF
    /// directory's `tokenizer_config.json` / `chat_template.jinja`, which the HF loader files
    /// under the same key.
    pub fn chat_template(&self) -> Result<Option<&str>> {
        self.model.metadata.get_str("tokenizer.chat_template")
    }
}

/// Resolves `arg` and opens the model and its tokenizer.
pub fn open(arg: impl AsRef<Path>) -> Result<Loaded> {
    resolve(arg)?.open()
}

/// Resolves `arg` and opens the model only.
pub fn open_model(arg: impl AsRef<Path>) -> Result<Model> {
    resolve(arg)?.open_model()
}

/// Resolves `arg` and opens the tokenizer only (no weights are read).
pub fn open_tokenizer(arg: impl AsRef<Path>) -> Result<Tokenizer> {
    resolve(arg)?.open_tokenizer()
}

impl Source {
    pub fn path(&self) -> &Path {
        match self {
            Source::Gguf(p) | Source::HfDir(p) => p,
        }
    }

    pub fn open(&self) -> Result<Loaded> {
        match self {
            Source::Gguf(p) => {
                let model = gguf_model(p)?;
                let tokenizer = Tokenizer::from_gguf(&model.metadata)?;
                Ok(Loaded { model, tokenizer })
            }
            Source::HfDir(d) => Ok(Loaded {
                model: hf::open_model(d)?,
                tokenizer: hf::load_tokenizer(d)?,
            }),
        }
    }

    pub fn open_model(&self) -> Result<Model> {
        match self {
            Source::Gguf(p) => gguf_model(p),
            Source::HfDir(d) => hf::open_model(d),
        }
    }

    /// The tokenizer alone: the GGUF header's metadata (no tensor data touched), or the HF
    /// directory's `tokenizer.json` and config files.
    pub fn open_tokenizer(&self) -> Result<Tokenizer> {
        match self {
            Source::Gguf(p) => Tokenizer::from_gguf(&GgufFile::open(p)?.metadata),
            Source::HfDir(d) => hf::load_tokenizer(d),
        }
    }
}

fn gguf_model(path: &Path) -> Result<Model> {
    Model::from_gguf(GgufFile::open(path)?, path.display().to_string())
}

/// Classifies a MODEL argument. An existing file is GGUF; a directory is an HF model if it has
/// `config.json`, else the one GGUF (or first split part) in it; anything else that reads as
/// `org/name[@rev]` is looked up in the HF cache. A path that is none of these comes back as
/// GGUF, so that opening it reports the file error.
pub fn resolve(arg: impl AsRef<Path>) -> Result<Source> {
    let arg = arg.as_ref();
    if arg.is_dir() {
        return classify_dir(arg);
    }
    if arg.exists() {
        return Ok(Source::Gguf(arg.to_path_buf()));
    }
    match arg.to_str().filter(|s| !s.ends_with(".gguf")).and_then(HubName::parse) {
        Some(name) => classify_dir(&hf::resolve_name(&name)?),
        None => Ok(Source::Gguf(arg.to_path_buf())),
    }
}

/// A model directory: `config.json` → HF; else exactly one GGUF model (a split set counts as one,
/// by its first part).
pub fn classify_dir(dir: &Path) -> Result<Source> {
    if dir.join("config.json").is_file() {
        return Ok(Source::HfDir(dir.to_path_buf()));
    }
    let mut ggufs: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| Error::io(dir, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "gguf") && p.is_file())
        .collect();
    ggufs.sort();
    // Parts 2..N of a split set are not models of their own.
    ggufs.retain(|p| crate::gguf::parse_split_name(p).is_none_or(|(_, no, _)| no == 1));
    match ggufs.as_slice() {
        [one] => Ok(Source::Gguf(one.clone())),
        [] => Err(Error::InvalidArgument(format!(
            "{}: a model directory needs config.json (Hugging Face) or a .gguf file; it has neither",
            dir.display()
        ))),
        many => Err(Error::InvalidArgument(format!(
            "{}: no config.json and {} GGUF models ({}); pass one of them",
            dir.display(),
            many.len(),
            many.iter()
                .filter_map(|p| p.file_name()?.to_str())
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}
