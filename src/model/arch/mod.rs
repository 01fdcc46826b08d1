//! The architecture table: one file per architecture, one match arm each.

mod gemma3;
mod gpt_oss;
mod llama;
mod mistral3;
mod qwen2;
mod qwen2moe;
mod qwen3;
mod qwen3moe;

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
    Qwen3Moe,
    Qwen2Moe,
    Mistral3,
    #[serde(rename = "gpt-oss")]
    GptOss,
}

impl Arch {
    pub const ALL: [Arch; 8] = [
        Arch::Llama,
        Arch::Qwen2,
        Arch::Qwen3,
        Arch::Gemma3,
        Arch::Qwen3Moe,
        Arch::Qwen2Moe,
        Arch::Mistral3,
        Arch::GptOss,
    ];

    /// Dispatch happens here, once, on the `general.architecture` string.
    pub fn from_name(name: &str) -> Result<Arch> {
        Ok(match name {
            "llama" => Arch::Llama,
            "qwen2" => Arch::Qwen2,
            "qwen3" => Arch::Qwen3,
            "gemma3" => Arch::Gemma3,
            "qwen3moe" => Arch::Qwen3Moe,
            "qwen2moe" => Arch::Qwen2Moe,
            "mistral3" => Arch::Mistral3,
            "gpt-oss" => Arch::GptOss,
            other => return Err(Error::UnknownArchitecture(other.to_string())),
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Arch::Llama => "llama",
            Arch::Qwen2 => "qwen2",
            Arch::Qwen3 => "qwen3",
            Arch::Gemma3 => "gemma3",
            Arch::Qwen3Moe => "qwen3moe",
            Arch::Qwen2Moe => "qwen2moe",
            Arch::Mistral3 => "mistral3",
            Arch::GptOss => "gpt-oss",
        }
    }

    pub fn hparams(self, keys: &Keys, tensors: &Weights) -> Result<HParams> {
        match self {
            Arch::Llama => llama::hparams(keys, tensors),
            Arch::Qwen2 => qwen2::hparams(keys, tensors),
            Arch::Qwen3 => qwen3::hparams(keys, tensors),
            Arch::Gemma3 => gemma3::hparams(keys, tensors),
            Arch::Qwen3Moe => qwen3moe::hparams(keys, tensors),
            Arch::Qwen2Moe => qwen2moe::hparams(keys, tensors),
            Arch::Mistral3 => mistral3::hparams(keys, tensors),
            Arch::GptOss => gpt_oss::hparams(keys, tensors),
        }
    }

    pub fn build(self, b: Builder) -> Graph {
        match self {
            Arch::Llama => llama::build(b),
            Arch::Qwen2 => qwen2::build(b),
            Arch::Qwen3 => qwen3::build(b),
            Arch::Gemma3 => gemma3::build(b),
            Arch::Qwen3Moe => qwen3moe::build(b),
            Arch::Qwen2Moe => qwen2moe::build(b),
            Arch::Mistral3 => mistral3::build(b),
            Arch::GptOss => gpt_oss::build(b),
        }
    }
}
