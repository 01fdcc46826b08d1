//! `tokenizer.json` through the `tokenizers` crate, with the special tokens and flags of
//! `tokenizer_config.json`, `generation_config.json` and `config.json`, and the chat template
//! (`tokenizer_config.json`'s `chat_template`, else `chat_template.jinja`).
//!
//! Precedence, as transformers applies it: BOS/EOS by text from `tokenizer_config.json`, else the
//! ids in `generation_config.json`, else `config.json`. Every EOS id any of them lists ends
//! generation. `add_bos_token` / `add_eos_token` from `tokenizer_config.json`; when absent,
//! whatever the tokenizer's own post-processor adds around an empty text.

use std::path::Path;
use std::sync::OnceLock;

use serde_json::Value as J;

use super::config::{ids, Fields};
use super::read_json;
use crate::error::{Error, Result};
use crate::tokenizer::{Tokenizer, TokenizerSpec};

/// `tokenizer.json` of a 256k-token vocabulary is ~35 MB.
const MAX_TOKENIZER_JSON: u64 = 512 << 20;
const MAX_CONFIG_JSON: u64 = 64 << 20;

/// The HF tokenizer behind a [`Tokenizer`]: encoding and decoding go to the `tokenizers` crate;
/// the token table (pieces, attributes, end-of-generation ids) is the shared one.
pub(crate) struct HfTokenizer {
    tok: tokenizers::Tokenizer,
    /// A copy that reads special tokens in the text as plain text, made on first use.
    plain: OnceLock<tokenizers::Tokenizer>,
    /// Byte-level BPE (GPT-2 style pieces); otherwise SentencePiece style (`▁`, `<0xXX>`).
    pub byte_level: bool,
    pub model_type: &'static str,
}

fn tok_err(what: &str, e: impl std::fmt::Display) -> Error {
    Error::Tokenizer(format!("{what}: {e}"))
}

impl HfTokenizer {
    pub fn encode(&self, text: &str, parse_special: bool) -> Result<Vec<u32>> {
        let tok = if parse_special {
            &self.tok
        } else {
            self.plain.get_or_init(|| {
                let mut t = self.tok.clone();
                t.set_encode_special_tokens(true);
                t
            })
        };
        let enc = tok.encode(text, false).map_err(|e| tok_err("encode", e))?;
        Ok(enc.get_ids().to_vec())
    }

    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String> {
        self.tok.decode(ids, skip_special).map_err(|e| tok_err("decode", e))
    }
}

/// Loads the tokenizer of the HF model directory `dir`.
pub fn load(dir: &Path) -> Result<Tokenizer> {
    let path = dir.join("tokenizer.json");
    let bytes = read_capped(&path, MAX_TOKENIZER_JSON)?;
    let tok = tokenizers::Tokenizer::from_bytes(&bytes).map_err(|e| tok_err(&path.display().to_string(), e))?;
    drop(bytes);
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

    let by_text = |key: &str| -> Option<u32> {
        let text = match tc.get(key)? {
            J::String(s) => s.as_str(),
            J::Object(o) => o.get("content")?.as_str()?,
            _ => return None,
        };
        tok.token_to_id(text)
    };
    let id_lists = |key: &str| -> Result<Vec<u32>> {
        let mut out = ids(&Fields(&gc), key)?;
        out.extend(ids(&Fields(&cc), key)?);
        out.extend(ids(&Fields(&cc_text), key)?);
        Ok(out)
    };
    let bos = by_text("bos_token").or(id_lists("bos_token_id")?.first().copied());
    let eos_ids = id_lists("eos_token_id")?;
    let eos = by_text("eos_token").or(eos_ids.first().copied());

    // What the post-processor adds around nothing: BOS first, EOS last, for tokenizers whose
    // config does not say.
    let probe = tok.encode("", true).map_err(|e| tok_err("encode", e))?;
    let probe = probe.get_ids();
    let flag = |key: &str| tc.get(key).and_then(J::as_bool);
    let add_bos = flag("add_bos_token").unwrap_or(bos.is_some() && probe.first() == bos.as_ref());
    let add_eos = flag("add_eos_token")
        .unwrap_or(eos.is_some() && probe.last() == eos.as_ref() && probe.len() > add_bos as usize);

    let spec = token_table(&tok, bos, eos, add_bos, add_eos);
    let byte_level = is_byte_level(tok.get_decoder());
    let model_type = match tok.get_model() {
        tokenizers::ModelWrapper::BPE(_) => "BPE",
        tokenizers::ModelWrapper::Unigram(_) => "Unigram",
        tokenizers::ModelWrapper::WordPiece(_) => "WordPiece",
        tokenizers::ModelWrapper::WordLevel(_) => "WordLevel",
    };
    let hf = HfTokenizer {
        tok,
        plain: OnceLock::new(),
        byte_level,
        model_type,
    };
    Tokenizer::from_hf(spec, hf, &eos_ids)
}

/// The token table in GGUF's terms: texts by id, and llama.cpp token types (special added
/// tokens are control, other added tokens user-defined, `<0xXX>` of a byte-fallback model bytes).
fn token_table(
    tok: &tokenizers::Tokenizer,
    bos: Option<u32>,
    eos: Option<u32>,
    add_bos: bool,
    add_eos: bool,
) -> TokenizerSpec {
    let n = tok.get_vocab_size(true);
    let added = tok.get_added_tokens_decoder();
    let byte_fallback = match tok.get_model() {
        tokenizers::ModelWrapper::BPE(b) => b.byte_fallback,
        tokenizers::ModelWrapper::Unigram(u) => u.byte_fallback(),
        _ => false,
    };
    let mut seen = std::collections::HashSet::with_capacity(n);
    let mut tokens = Vec::with_capacity(n);
    let mut types = Vec::with_capacity(n);
    for id in 0..n as u32 {
        // Holes in the id space and (rare) repeated texts become placeholders.
        let text = tok
            .id_to_token(id)
            .filter(|t| seen.insert(t.clone()))
            .unwrap_or_default();
        let ty = match added.get(&id) {
            Some(a) if a.special => 3,
            Some(_) => 4,
            None if byte_fallback && is_byte_token(&text) => 6,
            None => 1,
        };
        tokens.push(text);
        types.push(ty);
    }
    TokenizerSpec {
        model: "hf".into(),
        tokens,
        token_types: types,
        bos,
        eos,
        add_bos: Some(add_bos),
        add_eos: Some(add_eos),
        ..Default::default()
    }
}

/// `<0x0A>`
fn is_byte_token(t: &str) -> bool {
    t.len() == 6 && t.starts_with("<0x") && t.ends_with('>') && t.as_bytes()[3..5].iter().all(u8::is_ascii_hexdigit)
}

fn is_byte_level(d: Option<&tokenizers::DecoderWrapper>) -> bool {
    use tokenizers::DecoderWrapper as D;
    match d {
        Some(D::ByteLevel(_)) => true,
        Some(D::Sequence(s)) => s.get_decoders().iter().any(|d| is_byte_level(Some(d))),
        _ => false,
    }
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

#[cfg(test)]
mod tests {
    #[test]
    fn byte_tokens() {
        assert!(super::is_byte_token("<0x0A>"));
        assert!(super::is_byte_token("<0xff>"));
        assert!(!super::is_byte_token("<0x0A"));
        assert!(!super::is_byte_token("<0xZZ>"));
        assert!(!super::is_byte_token("<0x0AB>"));
    }
}
