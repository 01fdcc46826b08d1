//! GGUF `tokenizer.ggml.*` metadata → [`TokenizerSpec`]. Every value is checked; a wrong one is an
//! error naming the key and the value.

use super::{SpecialIds, TokenizerSpec};
use crate::error::{Error, Result};
use crate::gguf::{Metadata, Value};

/// Token arrays longer than this are refused before anything is allocated for them.
const MAX_TOKENS: usize = 1 << 24;

fn strings(md: &Metadata, key: &str) -> Result<Option<Vec<String>>> {
    let Some(items) = md.get_array(key)? else {
        return Ok(None);
    };
    if items.len() > MAX_TOKENS {
        return Err(Error::metadata(
            key,
            format!("{} entries is more than {MAX_TOKENS}", items.len()),
        ));
    }
    let mut out = Vec::with_capacity(items.len());
    for (i, v) in items.iter().enumerate() {
        match v {
            Value::String(s) => out.push(s.clone()),
            other => {
                return Err(Error::metadata(
                    key,
                    format!("entry {i} is {}, not a string", other.display(2)),
                ));
            }
        }
    }
    Ok(Some(out))
}

fn numbers<T>(md: &Metadata, key: &str, conv: impl Fn(&Value) -> Option<T>) -> Result<Vec<T>> {
    let Some(items) = md.get_array(key)? else {
        return Ok(Vec::new());
    };
    if items.len() > MAX_TOKENS {
        return Err(Error::metadata(
            key,
            format!("{} entries is more than {MAX_TOKENS}", items.len()),
        ));
    }
    items
        .iter()
        .enumerate()
        .map(|(i, v)| {
            conv(v).ok_or_else(|| Error::metadata(key, format!("entry {i} is {}, not a number", v.display(2))))
        })
        .collect()
}

fn id(md: &Metadata, key: &str) -> Result<Option<u32>> {
    // llama.cpp reads ids as uint32; larger values are out of any vocabulary and ignored there too.
    Ok(md.get_u64(key)?.map(|v| u32::try_from(v).unwrap_or(u32::MAX)))
}

impl TokenizerSpec {
    /// Reads the `tokenizer.ggml.*` keys (and `general.name`) of a GGUF file.
    pub fn from_gguf(md: &Metadata) -> Result<TokenizerSpec> {
        let model = md
            .get_str("tokenizer.ggml.model")?
            .ok_or_else(|| Error::Tokenizer("tokenizer.ggml.model is missing".into()))?
            .to_string();
        if !matches!(model.as_str(), "gpt2" | "llama" | "bert" | "gemma4") {
            return Err(super::unsupported_model(&model));
        }
        let tokens = strings(md, "tokenizer.ggml.tokens")?
            .ok_or_else(|| Error::Tokenizer("tokenizer.ggml.tokens is missing".into()))?;
        let merges = match model.as_str() {
            "gpt2" | "gemma4" => strings(md, "tokenizer.ggml.merges")?
                .ok_or_else(|| Error::Tokenizer(format!("tokenizer.ggml.merges is missing ({model} BPE needs it)")))?,
            _ => Vec::new(),
        };
        let scores = numbers(md, "tokenizer.ggml.scores", |v| v.as_f64().map(|x| x as f32))?;
        let token_types = numbers(md, "tokenizer.ggml.token_type", |v| {
            v.as_i64().and_then(|x| i32::try_from(x).ok())
        })?;

        let k = |name: &str| format!("tokenizer.ggml.{name}");
        // The deprecated prefix/suffix/middle keys are read after the fim_* ones and win when valid.
        let n = tokens.len() as u64;
        let fim = |new: &str, old: &str| -> Result<Option<u32>> {
            let old = id(md, &k(old))?.filter(|&v| u64::from(v) < n);
            Ok(old.or(id(md, &k(new))?))
        };
        Ok(TokenizerSpec {
            pre: md.get_str("tokenizer.ggml.pre")?.map(str::to_string),
            special: SpecialIds {
                bos: id(md, &k("bos_token_id"))?,
                eos: id(md, &k("eos_token_id"))?,
                eot: id(md, &k("eot_token_id"))?,
                eom: id(md, &k("eom_token_id"))?,
                unk: id(md, &k("unknown_token_id"))?,
                sep: id(md, &k("seperator_token_id"))?,
                pad: id(md, &k("padding_token_id"))?,
                mask: id(md, &k("mask_token_id"))?,
                fim_pre: fim("fim_pre_token_id", "prefix_token_id")?,
                fim_suf: fim("fim_suf_token_id", "suffix_token_id")?,
                fim_mid: fim("fim_mid_token_id", "middle_token_id")?,
                fim_pad: id(md, &k("fim_pad_token_id"))?,
                fim_rep: id(md, &k("fim_rep_token_id"))?,
                fim_sep: id(md, &k("fim_sep_token_id"))?,
            },
            add_bos: md.get_bool(&k("add_bos_token"))?,
            add_eos: md.get_bool(&k("add_eos_token"))?,
            add_space_prefix: md.get_bool(&k("add_space_prefix"))?,
            model_name: md.get_str("general.name")?.map(str::to_string),
            model,
            tokens,
            scores,
            token_types,
            merges,
        })
    }
}
