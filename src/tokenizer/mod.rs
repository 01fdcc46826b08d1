//! Tokenizers built from GGUF metadata that give exactly llama.cpp's token ids.
//!
//! `tokenizer.ggml.model = "gpt2"` is byte-level BPE with the pre-tokenizer named by
//! `tokenizer.ggml.pre` (`bpe.rs`, `pretokenize.rs`); `"gemma4"` the same BPE over raw UTF-8 with
//! spaces as `▁`; `"llama"` is SentencePiece BPE with byte fallback (`spm.rs`); `"bert"` WordPiece
//! (through the `tokenizers` crate). Special and user-defined tokens written in the text are cut out first, longest
//! first, as llama.cpp's `tokenizer_st_partition` does. Everything follows llama.cpp
//! `src/llama-vocab.cpp` and `src/unicode.cpp` at commit 0c1e570 (the reference data's oracle).
//!
//! A Hugging Face `tokenizer.json` ([`Tokenizer::from_hf_json`], `hf.rs`) encodes and decodes
//! through the `tokenizers` crate; its token table, pieces and end-of-generation set are the
//! shared ones.
//!
//! Reads only bytes and metadata handed to it: no other part of the crate but `gguf`'s
//! [`Metadata`] and `error` (finding the files is `crate::load`'s job).

mod bpe;
mod hf;
mod load;
mod pretokenize;
mod spm;
mod stream;
mod table;
mod unicode_data;
mod vocab;

pub use hf::HfSpecials;
pub use stream::{StreamDecoder, Utf8Stream};

use std::borrow::Cow;

use crate::error::{Error, Result};
use crate::gguf::Metadata;
use bpe::Bpe;
use pretokenize::PreTokenizer;
use vocab::{Vocab, ATTR_BYTE, ATTR_CONTROL, ATTR_LSTRIP, ATTR_NORMAL, ATTR_RSTRIP, ATTR_UNKNOWN, ATTR_USER_DEFINED};

/// Everything a tokenizer is built from, in GGUF's terms (`tokenizer.ggml.*`). Built by
/// [`TokenizerSpec::from_gguf`], or by hand (tests, `tokenizer.json`).
#[derive(Clone, Debug, Default)]
pub struct TokenizerSpec {
    /// `"gpt2"` (byte-level BPE) or `"llama"` (SentencePiece).
    pub model: String,
    /// BPE pre-tokenizer as llama.cpp spells it; None is llama.cpp's `default`.
    pub pre: Option<String>,
    pub tokens: Vec<String>,
    /// SentencePiece scores; empty = all 0.
    pub scores: Vec<f32>,
    /// llama.cpp token types (1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte);
    /// empty = all normal.
    pub token_types: Vec<i32>,
    /// BPE merges `"left right"`, rank = index.
    pub merges: Vec<String>,
    /// Special ids from the file; absent or out-of-range ones take llama.cpp's per-model defaults.
    pub special: SpecialIds,
    /// Flags from the file; None = llama.cpp's default for the model type / pre-tokenizer.
    pub add_bos: Option<bool>,
    pub add_eos: Option<bool>,
    pub add_space_prefix: Option<bool>,
    /// `general.name`: llama.cpp keys a few per-model attribute fixes on it (Phi-3).
    pub model_name: Option<String>,
}

/// The special token ids: what a file says ([`TokenizerSpec::special`]), llama.cpp's defaults
/// per model type, and what the vocabulary ends up with after both and auto-detection.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpecialIds {
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub eot: Option<u32>,
    pub eom: Option<u32>,
    pub unk: Option<u32>,
    pub sep: Option<u32>,
    pub pad: Option<u32>,
    pub mask: Option<u32>,
    pub fim_pre: Option<u32>,
    pub fim_suf: Option<u32>,
    pub fim_mid: Option<u32>,
    pub fim_pad: Option<u32>,
    pub fim_rep: Option<u32>,
    pub fim_sep: Option<u32>,
}

enum Kind {
    Bpe(Box<Bpe>),
    Spm { bytes: Box<[Option<u32>; 256]> },
    Hf(Box<hf::HfTokenizer>),
}

pub struct Tokenizer {
    vocab: Vocab,
    kind: Kind,
    add_bos: bool,
    add_eos: bool,
    add_space_prefix: bool,
}

/// A piece of the input after special tokens are cut out: raw text (a byte range) or a token.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Fragment {
    Text(usize, usize),
    Token(u32),
}

impl Tokenizer {
    pub fn from_gguf(md: &Metadata) -> Result<Tokenizer> {
        Self::from_parts(TokenizerSpec::from_gguf(md)?)
    }

    pub fn from_parts(mut spec: TokenizerSpec) -> Result<Tokenizer> {
        let n = spec.tokens.len() as u32;
        let in_vocab = |id: u32| (id < n).then_some(id);
        match spec.model.as_str() {
            "gpt2" => {
                let pre = PreTokenizer::from_name(spec.pre.as_deref())?;
                let default_bos = if pre.no_default_bos { None } else { in_vocab(11) };
                let defaults = SpecialIds {
                    bos: default_bos,
                    eos: in_vocab(11),
                    ..Default::default()
                };
                let add_bos = spec.add_bos.unwrap_or(pre.add_bos);
                let merges = std::mem::take(&mut spec.merges);
                let vocab = Vocab::build(&mut spec, defaults)?;
                let bpe = Box::new(Bpe::new(&vocab, &merges, pre)?);
                // BPE never adds a space when encoding; the flag only strips one when decoding.
                let (add_eos, add_space_prefix) =
                    (spec.add_eos.unwrap_or(false), spec.add_space_prefix.unwrap_or(false));
                Self::finish(vocab, Kind::Bpe(bpe), add_bos, add_eos, add_space_prefix)
            }
            // Gemma 4: BPE as SentencePiece splits, whole lines with spaces as `▁`; no default
            // special ids, and BOS always added (llama.cpp's workaround for the converted files).
            "gemma4" => {
                let pre = PreTokenizer::from_name(Some("gemma4"))?;
                let merges = std::mem::take(&mut spec.merges);
                let add_eos = spec.add_eos.unwrap_or(false);
                let vocab = Vocab::build(&mut spec, SpecialIds::default())?;
                let bpe = Box::new(Bpe::new(&vocab, &merges, pre)?);
                Self::finish(vocab, Kind::Bpe(bpe), true, add_eos, false)
            }
            "llama" => {
                let defaults = SpecialIds {
                    bos: in_vocab(1),
                    eos: in_vocab(2),
                    unk: in_vocab(0),
                    ..Default::default()
                };
                let (add_bos, add_eos) = (spec.add_bos.unwrap_or(true), spec.add_eos.unwrap_or(false));
                let add_space_prefix = spec.add_space_prefix.unwrap_or(true);
                let vocab = Vocab::build(&mut spec, defaults)?;
                let bytes = Box::new(spm::byte_tokens(&vocab));
                Self::finish(vocab, Kind::Spm { bytes }, add_bos, add_eos, add_space_prefix)
            }
            // WordPiece: llama.cpp's converter writes word-initial pieces with `▁` and
            // continuations bare; the table is turned back into BERT's `##` form and run by the
            // `tokenizers` crate with BERT's normaliser (lower-casing, accents stripped) and
            // pre-tokenizer, so the ids are those of the model's own `tokenizer.json`.
            "bert" => {
                let json = hf::wordpiece_json(&spec)?;
                let at = |id: Option<u32>, default: u32| id.filter(|&i| i < n).or(in_vocab(default));
                let cls = at(spec.special.bos, 101);
                let sep = at(spec.special.sep.or(spec.special.eos), 102);
                let specials = HfSpecials {
                    bos_ids: cls.into_iter().collect(),
                    eos_ids: sep.into_iter().collect(),
                    add_bos: Some(cls.is_some()),
                    add_eos: Some(sep.is_some()),
                    ..Default::default()
                };
                Tokenizer::from_hf_json(&json, "tokenizer.ggml.tokens (bert)", &specials)
            }
            other => Err(unsupported_model(other)),
        }
    }

    /// A Hugging Face tokenizer (built by [`Tokenizer::from_hf_json`]): `spec` is its token
    /// table with the special ids and flags from the config files; every id in `eos_ids` also
    /// ends generation.
    fn from_hf(mut spec: TokenizerSpec, hf: hf::HfTokenizer, eos_ids: &[u32]) -> Result<Tokenizer> {
        let (add_bos, add_eos) = (spec.add_bos.unwrap_or(false), spec.add_eos.unwrap_or(false));
        let mut vocab = Vocab::build(&mut spec, SpecialIds::default())?;
        let n = vocab.n_tokens();
        vocab.eog.extend(eos_ids.iter().filter(|&&id| (id as usize) < n));
        Self::finish(vocab, Kind::Hf(Box::new(hf)), add_bos, add_eos, false)
    }

    fn finish(vocab: Vocab, kind: Kind, add_bos: bool, add_eos: bool, add_space_prefix: bool) -> Result<Tokenizer> {
        if add_bos && vocab.special.bos.is_none() {
            return Err(Error::Tokenizer(
                "tokenizer.ggml.add_bos_token is true but there is no BOS id".into(),
            ));
        }
        if add_eos && vocab.special.eos.is_none() {
            return Err(Error::Tokenizer(
                "tokenizer.ggml.add_eos_token is true but there is no EOS id".into(),
            ));
        }
        Ok(Tokenizer {
            vocab,
            kind,
            add_bos,
            add_eos,
            add_space_prefix,
        })
    }

    /// `add_special`: add BOS/EOS per the model's flags; `parse_special`: control tokens typed in the
    /// text become their single id (llama.cpp's default). User-defined tokens always do.
    pub fn encode(&self, text: &str, add_special: bool, parse_special: bool) -> Result<Vec<u32>> {
        let mut out = Vec::with_capacity(text.len() / 3 + 2);
        if add_special && self.add_bos {
            out.extend(self.vocab.special.bos);
        }
        match &self.kind {
            Kind::Hf(hf) => out.extend(hf.encode(text, parse_special)?),
            Kind::Bpe(bpe) => {
                for f in self.partition(text, parse_special) {
                    match f {
                        Fragment::Text(a, b) if bpe.pre.escape_whitespaces => {
                            bpe.encode(&self.vocab, &text[a..b].replace(' ', spm::ESCAPED_SPACE), &mut out)
                        }
                        Fragment::Text(a, b) => bpe.encode(&self.vocab, &text[a..b], &mut out),
                        Fragment::Token(id) => out.push(id),
                    }
                }
            }
            Kind::Spm { bytes } => {
                let mut prev_special = true; // a space prefix goes before the first text, too
                let mut buf = String::new();
                for f in self.partition(text, parse_special) {
                    match f {
                        Fragment::Text(a, b) => {
                            buf.clear();
                            if self.add_space_prefix && prev_special {
                                buf.push_str(spm::ESCAPED_SPACE);
                            }
                            for (i, piece) in text[a..b].split(' ').enumerate() {
                                if i > 0 {
                                    buf.push_str(spm::ESCAPED_SPACE);
                                }
                                buf.push_str(piece);
                            }
                            spm::encode(&self.vocab, bytes, &buf, &mut out)?;
                            prev_special = false;
                        }
                        Fragment::Token(id) => {
                            out.push(id);
                            prev_special = true;
                        }
                    }
                }
            }
        }
        if add_special && self.add_eos {
            out.extend(self.vocab.special.eos);
        }
        Ok(out)
    }

    /// llama.cpp `tokenizer_st_partition`: for each special token, longest first, cut every
    /// occurrence out of the remaining raw-text fragments.
    fn partition(&self, text: &str, parse_special: bool) -> Vec<Fragment> {
        let mut frags = Vec::new();
        if text.is_empty() {
            return frags;
        }
        frags.push(Fragment::Text(0, text.len()));
        for &id in &self.vocab.special_cache {
            let attr = self.vocab.attr(id);
            if !parse_special && attr & (ATTR_CONTROL | ATTR_UNKNOWN) != 0 {
                continue;
            }
            let tok = self.vocab.texts.text(id);
            let mut i = 0;
            while i < frags.len() {
                let Fragment::Text(mut start, end) = frags[i] else {
                    i += 1;
                    continue;
                };
                let Some(first) = text[start..end].find(tok) else {
                    i += 1;
                    continue;
                };
                let mut pieces = Vec::new();
                let mut at = Some(start + first);
                while let Some(m) = at {
                    let mut left_end = m;
                    if attr & ATTR_LSTRIP != 0 {
                        while left_end > start && text.as_bytes()[left_end - 1].is_ascii_whitespace_c() {
                            left_end -= 1;
                        }
                    }
                    if left_end > start {
                        pieces.push(Fragment::Text(start, left_end));
                    }
                    pieces.push(Fragment::Token(id));
                    start = m + tok.len();
                    if attr & ATTR_RSTRIP != 0 {
                        while start < end && text.as_bytes()[start].is_ascii_whitespace_c() {
                            start += 1;
                        }
                    }
                    at = text[start..end].find(tok).map(|p| start + p);
                }
                if start < end {
                    pieces.push(Fragment::Text(start, end));
                }
                let n = pieces.len();
                frags.splice(i..i + 1, pieces);
                i += n;
            }
        }
        frags
    }

    /// Concatenated pieces as llama.cpp's `llama_detokenize(remove_special = skip_special,
    /// unparse_special = !skip_special)` renders them, except that its optional
    /// clean-up-spaces pass is not applied (so ordinary text round-trips exactly). An id outside the
    /// vocabulary is an error.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String> {
        if let Some(&bad) = ids.iter().find(|&&id| id as usize >= self.vocab.n_tokens()) {
            return Err(Error::Tokenizer(format!(
                "token id {bad} is outside the vocabulary of {}",
                self.n_vocab()
            )));
        }
        if let Kind::Hf(hf) = &self.kind {
            return hf.decode(ids, skip_special);
        }
        let mut ids = ids;
        let mut remove_space = self.add_space_prefix;
        if skip_special && self.add_bos && !ids.is_empty() && Some(ids[0]) == self.vocab.special.bos {
            remove_space = false;
            ids = &ids[1..];
        }
        if skip_special && self.add_eos && !ids.is_empty() && ids.last().copied() == self.vocab.special.eos {
            ids = &ids[..ids.len() - 1];
        }
        let mut bytes = Vec::with_capacity(ids.len() * 4);
        for &id in ids {
            let piece = self.piece(id, !skip_special);
            let strip = remove_space && piece.first() == Some(&b' ');
            bytes.extend_from_slice(&piece[strip as usize..]);
            remove_space = false;
        }
        Ok(match String::from_utf8(bytes) {
            Ok(s) => s,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        })
    }

    /// Raw bytes of one token as llama.cpp's `token_to_piece(special = true)` renders it; empty for
    /// an id outside the vocabulary.
    pub fn token_to_piece(&self, id: u32) -> Vec<u8> {
        self.piece(id, true).into_owned()
    }

    /// llama.cpp `token_to_piece` without lstrip: `special` renders control/unknown tokens as text.
    pub(crate) fn piece(&self, id: u32, special: bool) -> Cow<'_, [u8]> {
        let Some(text) = self.vocab.token_str(id) else {
            return Cow::Borrowed(&[]);
        };
        let attr = self.vocab.attr(id);
        if attr & (ATTR_UNKNOWN | ATTR_CONTROL) != 0 && !special {
            return Cow::Borrowed(&[]);
        }
        if attr & (ATTR_UNKNOWN | ATTR_CONTROL | ATTR_USER_DEFINED) != 0 {
            return Cow::Borrowed(text.as_bytes());
        }
        if attr & ATTR_NORMAL != 0 {
            let byte_level = match &self.kind {
                Kind::Bpe(b) => b.pre.byte_encode,
                Kind::Spm { .. } => false,
                Kind::Hf(hf) => hf.byte_level,
            };
            return match byte_level {
                false => match text.contains(spm::ESCAPED_SPACE) {
                    true => Cow::Owned(text.replace(spm::ESCAPED_SPACE, " ").into_bytes()),
                    false => Cow::Borrowed(text.as_bytes()),
                },
                true => {
                    let mut out = Vec::with_capacity(text.len());
                    bpe::decode_text(text, &mut out);
                    Cow::Owned(out)
                }
            };
        }
        if attr & ATTR_BYTE != 0 {
            // llama.cpp `token_to_byte`: the two hex digits of "<0xXX>"
            let hex = text.get(3..5).unwrap_or("");
            let digits: String = hex.chars().take_while(|c| c.is_ascii_hexdigit()).collect();
            return Cow::Owned(vec![u8::from_str_radix(&digits, 16).unwrap_or(0)]);
        }
        Cow::Borrowed(&[])
    }

    pub fn n_vocab(&self) -> usize {
        self.vocab.n_tokens()
    }

    pub fn bos(&self) -> Option<u32> {
        self.vocab.special.bos
    }

    pub fn eos(&self) -> Option<u32> {
        self.vocab.special.eos
    }

    /// `tokenizer.ggml.eot_token_id`, or the token llama.cpp recognises as end-of-turn by its text.
    pub fn eot(&self) -> Option<u32> {
        self.vocab.special.eot
    }

    pub fn add_bos(&self) -> bool {
        self.add_bos
    }

    pub fn add_eos(&self) -> bool {
        self.add_eos
    }

    /// End of generation: EOS, EOT, EOM, FIM pad/repo/sep and the turn-end tokens llama.cpp knows
    /// by text (`<|im_end|>`, `<|endoftext|>`, `<end_of_turn>`, `<|eot_id|>`, …).
    pub fn is_eog(&self, id: u32) -> bool {
        self.vocab.eog.contains(&id)
    }

    /// All end-of-generation ids, ascending.
    pub fn eog_ids(&self) -> Vec<u32> {
        self.vocab.eog.iter().copied().collect()
    }

    /// The vocabulary string of a token (`▁`/byte-level characters not undone).
    pub fn token_str(&self, id: u32) -> Option<&str> {
        self.vocab.token_str(id)
    }

    /// Id of a token by its exact vocabulary string.
    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.vocab.get(text)
    }

    /// True for control and unknown tokens, which `decode(.., skip_special = true)` drops.
    pub fn is_control(&self, id: u32) -> bool {
        self.vocab.attr(id) & (ATTR_CONTROL | ATTR_UNKNOWN) != 0
    }

    /// Whether llama.cpp's `llama_detokenize` would also clean up spaces before punctuation for this
    /// vocabulary (BPE pre-tokenizers only); [`Tokenizer::decode`] never does.
    pub fn clean_spaces(&self) -> bool {
        matches!(&self.kind, Kind::Bpe(b) if b.pre.clean_spaces)
    }

    /// `"gpt2"` or `"llama"`, and the BPE pre-tokenizer name; `"tokenizer.json"` and its model
    /// type for a Hugging Face tokenizer.
    pub fn model(&self) -> (&'static str, Option<&str>) {
        match &self.kind {
            Kind::Bpe(b) => ("gpt2", Some(b.pre.name.as_str())),
            Kind::Spm { .. } => ("llama", None),
            Kind::Hf(hf) => ("tokenizer.json", Some(hf.model_type)),
        }
    }
}

fn unsupported_model(name: &str) -> Error {
    Error::Tokenizer(format!(
        "tokenizer model '{name}' (tokenizer.ggml.model) is not supported; supported: gpt2, llama, gemma4, bert"
    ))
}

/// C `isspace` in the "C" locale, which llama.cpp's lstrip/rstrip use.
trait CSpace {
    fn is_ascii_whitespace_c(&self) -> bool;
}

impl CSpace for u8 {
    fn is_ascii_whitespace_c(&self) -> bool {
        matches!(self, b' ' | b'\t' | b'\n' | 0x0B | 0x0C | b'\r')
    }
}

#[cfg(test)]
mod tests;
