//! The library's one error type. Every variant carries the offending value (a byte offset,
//! a tensor name, a qtype id, an architecture string) so that the message alone says what was wrong.

use std::path::PathBuf;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    // --- files -------------------------------------------------------------------------------
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    // --- GGUF / safetensors containers --------------------------------------------------------
    #[error("{file}: at byte {offset}: {what}")]
    Format { file: String, offset: u64, what: String },
    #[error("unknown quant type '{0}'")]
    UnknownQTypeName(String),
    #[error("split model: {0}")]
    Split(String),

    // --- models ------------------------------------------------------------------------------
    /// `supported`: the registered names, comma-separated.
    #[error("unknown architecture '{name}' (supported: {supported})")]
    UnknownArchitecture { name: String, supported: String },
    #[error("metadata key '{key}': {what}")]
    Metadata { key: String, what: String },
    #[error("tensor '{name}': {what}")]
    Tensor { name: String, what: String },
    #[error("missing tensor '{0}'")]
    MissingTensor(String),
    #[error("{what} is not supported for quant type {qtype}")]
    Unsupported { qtype: &'static str, what: String },

    // --- running -----------------------------------------------------------------------------
    #[error("context overflow: position {pos} is past the context size {n_ctx}")]
    ContextOverflow { pos: usize, n_ctx: usize },
    #[error("KV cache full: {need} more cells wanted, {free} of {n_ctx} free")]
    KvFull { need: usize, free: usize, n_ctx: usize },
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    #[error("backend {backend}: {what}")]
    Backend { backend: &'static str, what: String },

    // --- text --------------------------------------------------------------------------------
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    #[error("chat template: {0}")]
    Template(String),
    /// A JSON schema, regex or grammar that cannot constrain output, or a matcher that failed.
    #[error("constraint: {0}")]
    Constraint(String),
}

impl Error {
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    pub fn tensor(name: impl Into<String>, what: impl Into<String>) -> Self {
        Error::Tensor {
            name: name.into(),
            what: what.into(),
        }
    }

    pub fn metadata(key: impl Into<String>, what: impl Into<String>) -> Self {
        Error::Metadata {
            key: key.into(),
            what: what.into(),
        }
    }
}
