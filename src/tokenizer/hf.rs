//! A Hugging Face `tokenizer.json` behind a [`Tokenizer`]: encoding and decoding go to the
//! `tokenizers` crate; the token table (pieces, attributes, end-of-generation ids) is the shared
//! one. Built from the file's bytes and the special tokens its directory's config files name
//! ([`HfSpecials`]); reading those files is the directory loader's job (`crate::hf`).

use std::sync::OnceLock;

use super::{SpecialIds, Tokenizer, TokenizerSpec};
use crate::error::{Error, Result};

/// Special tokens and flags from the config files next to `tokenizer.json`, as transformers
/// reads them: BOS/EOS by text (`tokenizer_config.json`) win over ids (`generation_config.json`,
/// then `config.json`); every id in `eos_ids` ends generation.
#[derive(Clone, Debug, Default)]
pub struct HfSpecials {
    /// `tokenizer_config.json` `bos_token` / `eos_token` (a string, or `{content}`).
    pub bos_text: Option<String>,
    pub eos_text: Option<String>,
    /// `bos_token_id` / `eos_token_id` of the config files, in precedence order.
    pub bos_ids: Vec<u32>,
    pub eos_ids: Vec<u32>,
    /// `tokenizer_config.json` `add_bos_token` / `add_eos_token`; None = whatever the tokenizer's
    /// own post-processor adds around an empty text.
    pub add_bos: Option<bool>,
    pub add_eos: Option<bool>,
}

/// The HF tokenizer behind `Kind::Hf`.
pub(super) struct HfTokenizer {
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

impl Tokenizer {
    /// A tokenizer from the bytes of a `tokenizer.json` (`file` names it in errors) and the
    /// special tokens of its directory.
    pub fn from_hf_json(json: &[u8], file: &str, specials: &HfSpecials) -> Result<Tokenizer> {
        let mut tok = tokenizers::Tokenizer::from_bytes(json).map_err(|e| tok_err(file, e))?;
        // A file's own truncation and padding (BERT exports often carry 128 of each) would cut
        // or pad every text in silence: lengths are the engine's to check.
        tok.with_truncation(None).map_err(|e| tok_err(file, e))?;
        tok.with_padding(None);
        let by_text = |text: &Option<String>| text.as_deref().and_then(|t| tok.token_to_id(t));
        let mut bos = by_text(&specials.bos_text).or(specials.bos_ids.first().copied());
        let mut eos = by_text(&specials.eos_text).or(specials.eos_ids.first().copied());

        // What the post-processor adds around nothing: BOS first, EOS last, for tokenizers whose
        // config does not say.
        let probe = tok.encode("", true).map_err(|e| tok_err("encode", e))?;
        let probe = probe.get_ids();
        // A template with two tokens and no BOS/EOS named anywhere (BERT's `[CLS] $A [SEP]`):
        // they are the ones added around every text.
        if let ([first, last], None, None) = (probe, bos, eos) {
            (bos, eos) = (Some(*first), Some(*last));
        }
        let add_bos = specials
            .add_bos
            .unwrap_or(bos.is_some() && probe.first() == bos.as_ref());
        let add_eos = specials
            .add_eos
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
        Tokenizer::from_hf(spec, hf, &specials.eos_ids)
    }
}

/// A `tokenizer.json` for a GGUF WordPiece vocabulary (`tokenizer.ggml.model = "bert"`), as
/// BERT's own: the converter's `▁word` / `piece` forms back to `word` / `##piece` (bracketed
/// special tokens stay), BERT's normaliser and pre-tokenizer, and the control tokens as
/// special added tokens.
pub(super) fn wordpiece_json(spec: &TokenizerSpec) -> Result<Vec<u8>> {
    use serde_json::{json, Map, Value};
    let mut vocab = Map::with_capacity(spec.tokens.len());
    let mut added = Vec::new();
    for (id, t) in spec.tokens.iter().enumerate() {
        let ty = spec.token_types.get(id).copied().unwrap_or(1);
        let bracketed = t.starts_with('[') && t.ends_with(']') && t.len() > 1;
        let text = if bracketed {
            t.clone()
        } else if let Some(w) = t.strip_prefix('\u{2581}') {
            w.to_string()
        } else {
            format!("##{t}")
        };
        if ty == 3 {
            added.push(json!({
                "id": id, "content": text, "single_word": false, "lstrip": false,
                "rstrip": false, "normalized": false, "special": true
            }));
        }
        // The first of two identical texts keeps its id, as in BERT's `vocab.txt`.
        vocab.entry(text).or_insert(Value::from(id));
    }
    let unk = spec
        .special
        .unk
        .and_then(|id| spec.tokens.get(id as usize))
        .cloned()
        .unwrap_or_else(|| "[UNK]".into());
    let doc = json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": {
            "type": "BertNormalizer", "clean_text": true, "handle_chinese_chars": true,
            "strip_accents": null, "lowercase": true
        },
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "post_processor": null,
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": true},
        "model": {
            "type": "WordPiece", "unk_token": unk, "continuing_subword_prefix": "##",
            "max_input_chars_per_word": 100, "vocab": vocab
        }
    });
    serde_json::to_vec(&doc).map_err(|e| tok_err("tokenizer.ggml.tokens (bert)", e))
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
        special: SpecialIds {
            bos,
            eos,
            ..Default::default()
        },
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
