//! The tokenizer files of an HF model directory: `tokenizer.json`, with the special tokens and
//! flags of `tokenizer_config.json`, `generation_config.json` and `config.json`, and the chat
//! template (`tokenizer_config.json`'s `chat_template`, else `chat_template.jinja`).
//!
//! Precedence, as transformers applies it: BOS/EOS by text from `tokenizer_config.json`, else the
//! ids in `generation_config.json`, else `config.json`. Every EOS id any of them lists ends
//! generation. `add_bos_token` / `add_eos_token` from `tokenizer_config.json`; when absent,
//! whatever the tokenizer's own post-processor adds around an empty text. The tokenizer itself
//! is [`Tokenizer::from_hf_json`].

use std::path::Path;

use serde_json::Value as J;

use super::config::{ids, Fields};
use super::read_json;
use crate::error::{Error, Result};
use crate::tokenizer::{HfSpecials, Tokenizer};

/// `tokenizer.json` of a 256k-token vocabulary is ~35 MB.
const MAX_TOKENIZER_JSON: u64 = 512 << 20;
const MAX_CONFIG_JSON: u64 = 64 << 20;

/// Loads the tokenizer of the HF model directory `dir`.
pub fn load(dir: &Path) -> Result<Tokenizer> {
    let path = dir.join("tokenizer.json");
    let json = read_capped(&path, MAX_TOKENIZER_JSON)?;
    let specials = specials(dir)?;
    Tokenizer::from_hf_json(&json, &path.display().to_string(), &specials)
}

/// The special tokens and flags the config files of `dir` give the tokenizer.
pub fn specials(dir: &Path) -> Result<HfSpecials> {
    let tc = optional_json(&dir.join("tokenizer_config.json"))?;
    let gc = optional_json(&dir.join("generation_config.json"))?;
    let cc = optional_json(&dir.join("config.json"))?;
    let empty = serde_json::Map::new();
    let obj = |v: &Option<J>| v.as_ref().and_then(J::as_object).unwrap_or(&empty).clone();
    let (tc, gc, cc) = (obj(&tc), obj(&gc), obj(&cc));
    // A multimodal wrapper keeps the text model's ids in text_config.
    let cc_text = cc
        .get("text_config")
        .and_then(J::as_object)
        .cloned()
        .unwrap_or_default();

    let text = |key: &str| -> Option<String> {
        match tc.get(key)? {
            J::String(s) => Some(s.clone()),
            J::Object(o) => o.get("content")?.as_str().map(str::to_string),
            _ => None,
        }
    };
    let id_lists = |key: &str| -> Result<Vec<u32>> {
        let mut out = ids(&Fields(&gc), key)?;
        out.extend(ids(&Fields(&cc), key)?);
        out.extend(ids(&Fields(&cc_text), key)?);
        Ok(out)
    };
    let flag = |key: &str| tc.get(key).and_then(J::as_bool);
    Ok(HfSpecials {
        bos_text: text("bos_token"),
        eos_text: text("eos_token"),
        bos_ids: id_lists("bos_token_id")?,
        eos_ids: id_lists("eos_token_id")?,
        add_bos: flag("add_bos_token"),
        add_eos: flag("add_eos_token"),
    })
}

/// The chat template: `tokenizer_config.json`'s `chat_template` (a string, or a list of
/// `{name, template}` whose `default` entry is taken), else `chat_template.jinja`.
pub fn chat_template(dir: &Path) -> Result<Option<String>> {
    let path = dir.join("tokenizer_config.json");
    if let Some(tc) = optional_json(&path)? {
        match tc.get("chat_template") {
            Some(J::String(s)) => return Ok(Some(s.clone())),
            Some(J::Array(list)) => {
                let named = |want: &str| {
                    list.iter().find_map(|e| {
                        (e.get("name")?.as_str()? == want).then(|| e.get("template")?.as_str().map(str::to_string))?
                    })
                };
                if let Some(t) = named("default") {
                    return Ok(Some(t));
                }
            }
            _ => {}
        }
    }
    let jinja = dir.join("chat_template.jinja");
    if jinja.is_file() {
        let bytes = read_capped(&jinja, MAX_CONFIG_JSON)?;
        return String::from_utf8(bytes).map(Some).map_err(|e| {
            Error::Template(format!(
                "{}: not UTF-8 at byte {}",
                jinja.display(),
                e.utf8_error().valid_up_to()
            ))
        });
    }
    Ok(None)
}

fn optional_json(path: &Path) -> Result<Option<J>> {
    if !path.is_file() {
        return Ok(None);
    }
    read_json(path, MAX_CONFIG_JSON).map(Some)
}

pub(crate) fn read_capped(path: &Path, cap: u64) -> Result<Vec<u8>> {
    let len = std::fs::metadata(path).map_err(|e| Error::io(path, e))?.len();
    if len > cap {
        return Err(Error::Format {
            file: path.display().to_string(),
            offset: 0,
            what: format!("{len} bytes is over the {cap}-byte cap for this file"),
        });
    }
    std::fs::read(path).map_err(|e| Error::io(path, e))
}
