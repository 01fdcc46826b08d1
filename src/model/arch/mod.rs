//! The architecture table: one file per architecture, one match arm each.

mod bert;
mod gemma3;
mod gemma4;
mod glm4;
mod gpt_oss;
mod granite;
mod llama;
mod mistral3;
mod olmo2;
mod phi3;
mod qwen2;
mod qwen2moe;
mod qwen3;
mod qwen3moe;
mod smollm3;

use crate::error::{Error, Result};
use crate::model::graph::{Builder, Graph};
use crate::model::hparams::{HParams, Keys, Weights};

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Arch {
    Llama,
    Qwen2,
    Qwen3,
    Gemma3,
    Gemma4,
    Qwen3Moe,
    Qwen2Moe,
    Mistral3,
    #[serde(rename = "gpt-oss")]
    GptOss,
    Phi3,
    Olmo2,
    Granite,
    Smollm3,
    Glm4,
    Bert,
}

impl Arch {
    /// The decoders: every architecture that generates text.
    pub const DECODERS: [Arch; 14] = [
        Arch::Llama,
        Arch::Qwen2,
        Arch::Qwen3,
        Arch::Gemma3,
        Arch::Gemma4,
        Arch::Qwen3Moe,
        Arch::Qwen2Moe,
        Arch::Mistral3,
        Arch::GptOss,
        Arch::Phi3,
        Arch::Olmo2,
        Arch::Granite,
        Arch::Smollm3,
        Arch::Glm4,
    ];

    /// The encoders: every token's hidden state is their output (embedding models).
    pub const ENCODERS: [Arch; 1] = [Arch::Bert];

    /// Dispatch happens here, once, on the `general.architecture` string.
    pub fn from_name(name: &str) -> Result<Arch> {
        Ok(match name {
            "llama" => Arch::Llama,
            "qwen2" => Arch::Qwen2,
            "qwen3" => Arch::Qwen3,
            "gemma3" => Arch::Gemma3,
            "gemma4" => Arch::Gemma4,
            "qwen3moe" => Arch::Qwen3Moe,
            "qwen2moe" => Arch::Qwen2Moe,
            "mistral3" => Arch::Mistral3,
            "gpt-oss" => Arch::GptOss,
            "phi3" => Arch::Phi3,
            "olmo2" => Arch::Olmo2,
            "granite" => Arch::Granite,
            "smollm3" => Arch::Smollm3,
            "glm4" => Arch::Glm4,
            "bert" => Arch::Bert,
            other => {
                return Err(Error::UnknownArchitecture {
                    name: other.to_string(),
                    supported: Arch::names(),
                })
            }
        })
    }

    /// Every registered name, comma-separated (for errors).
    pub fn names() -> String {
        let all: Vec<&str> = Arch::DECODERS.iter().chain(&Arch::ENCODERS).map(|a| a.name()).collect();
        all.join(", ")
    }

    pub fn name(self) -> &'static str {
        match self {
            Arch::Llama => "llama",
            Arch::Qwen2 => "qwen2",
            Arch::Qwen3 => "qwen3",
            Arch::Gemma3 => "gemma3",
            Arch::Gemma4 => "gemma4",
            Arch::Qwen3Moe => "qwen3moe",
            Arch::Qwen2Moe => "qwen2moe",
            Arch::Mistral3 => "mistral3",
            Arch::GptOss => "gpt-oss",
            Arch::Phi3 => "phi3",
            Arch::Olmo2 => "olmo2",
            Arch::Granite => "granite",
            Arch::Smollm3 => "smollm3",
            Arch::Glm4 => "glm4",
            Arch::Bert => "bert",
        }
    }

    /// Rewrites the loaded weights into the canonical ones the graph names, before
    /// `hparams` reads them: fused tensors become zero-copy views (Phi-3's `attn_qkv`, the
    /// gate/up `ffn_up` of Phi-3 and GLM-4). Called by every loader.
    pub fn prepare_weights(self, keys: &Keys, weights: &mut Weights) -> Result<()> {
        match self {
            Arch::Phi3 => phi3::prepare_weights(keys, weights),
            Arch::Glm4 => glm4::prepare_weights(keys, weights),
            _ => Ok(()),
        }
    }

    pub fn hparams(self, keys: &Keys, tensors: &Weights) -> Result<HParams> {
        match self {
            Arch::Llama => llama::hparams(keys, tensors),
            Arch::Qwen2 => qwen2::hparams(keys, tensors),
            Arch::Qwen3 => qwen3::hparams(keys, tensors),
            Arch::Gemma3 => gemma3::hparams(keys, tensors),
            Arch::Gemma4 => gemma4::hparams(keys, tensors),
            Arch::Qwen3Moe => qwen3moe::hparams(keys, tensors),
            Arch::Qwen2Moe => qwen2moe::hparams(keys, tensors),
            Arch::Mistral3 => mistral3::hparams(keys, tensors),
            Arch::GptOss => gpt_oss::hparams(keys, tensors),
            Arch::Phi3 => phi3::hparams(keys, tensors),
            Arch::Olmo2 => olmo2::hparams(keys, tensors),
            Arch::Granite => granite::hparams(keys, tensors),
            Arch::Smollm3 => smollm3::hparams(keys, tensors),
            Arch::Glm4 => glm4::hparams(keys, tensors),
            Arch::Bert => bert::hparams(keys, tensors),
        }
    }

    pub fn build(self, b: Builder) -> Graph {
        match self {
            Arch::Llama => llama::build(b),
            Arch::Qwen2 => qwen2::build(b),
            Arch::Qwen3 => qwen3::build(b),
            Arch::Gemma3 => gemma3::build(b),
            Arch::Gemma4 => gemma4::build(b),
            Arch::Qwen3Moe => qwen3moe::build(b),
            Arch::Qwen2Moe => qwen2moe::build(b),
            Arch::Mistral3 => mistral3::build(b),
            Arch::GptOss => gpt_oss::build(b),
            Arch::Phi3 => phi3::build(b),
            Arch::Olmo2 => olmo2::build(b),
            Arch::Granite => granite::build(b),
            Arch::Smollm3 => smollm3::build(b),
            Arch::Glm4 => glm4::build(b),
            Arch::Bert => bert::build(b),
        }
    }
}
