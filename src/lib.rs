//! minfer: portable LLM inference over raw GGUF blocks.
//!
//! Pipeline: [`load`] resolves a MODEL argument and opens it — [`gguf`] the file (or [`hf`] a
//! safetensors directory), [`tokenizer`] its vocabulary → [`model`] dispatches on the
//! architecture and builds the graph → [`backend`] gates and runs it → [`session`] owns the KV
//! cache and batching.
//!
//! The modules form layers, each importing only from those below; `module_graph_tests.rs`
//! draws them and fails on an import that closes a cycle.

pub mod backend;
pub mod chat;
pub mod constrain;
pub mod embed;
pub mod engine;
pub(crate) mod env;
pub mod error;
pub mod gguf;
pub mod hf;
pub(crate) mod kv;
pub mod load;
pub(crate) mod logits;
pub mod model;
#[cfg(test)]
mod module_graph_tests;
pub mod overrides;
pub mod perplexity;
pub mod quant;
pub mod quantize;
pub mod sampling;
pub mod sched;
pub mod session;
pub(crate) mod spec;
pub mod tensor;
#[doc(hidden)]
pub mod testing;
pub mod tokenizer;
pub mod toolcall;

pub use error::{Error, Result};
pub use model::Model;
pub use session::{Batch, Session, SessionOptions};
