//! The token table: texts, scores, llama.cpp attributes, special ids and the end-of-generation set.
//!
//! Follows `llama_vocab::impl::load` (llama.cpp `src/llama-vocab.cpp`, commit 0c1e570): default
//! special ids per model type, the text-based auto-detection of EOT/EOM/FIM tokens (which also forces
//! them to CONTROL), the EOG list, and the special-token cache sorted longest first.

use std::collections::BTreeSet;

use super::table::TextTable;

use super::{SpecialIds, TokenizerSpec};
use crate::error::{Error, Result};

// llama.cpp `llama_token_attr` bits.
pub(crate) const ATTR_UNKNOWN: u16 = 1 << 0;
pub(crate) const ATTR_UNUSED: u16 = 1 << 1;
pub(crate) const ATTR_NORMAL: u16 = 1 << 2;
pub(crate) const ATTR_CONTROL: u16 = 1 << 3;
pub(crate) const ATTR_USER_DEFINED: u16 = 1 << 4;
pub(crate) const ATTR_BYTE: u16 = 1 << 5;
pub(crate) const ATTR_LSTRIP: u16 = 1 << 7;
pub(crate) const ATTR_RSTRIP: u16 = 1 << 8;

/// llama.cpp `llama_token_type` (the GGUF `tokenizer.ggml.token_type` values) → attribute.
fn attr_from_type(t: i32) -> u16 {
    match t {
        1 => ATTR_NORMAL,
        2 => ATTR_UNKNOWN,
        3 => ATTR_CONTROL,
        4 => ATTR_USER_DEFINED,
        5 => ATTR_UNUSED,
        6 => ATTR_BYTE,
        _ => 0, // UNDEFINED
    }
}

/// Texts llama.cpp recognises as EOT when `eot_token_id` is absent.
const EOT_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "<｜end▁of▁sentence｜>",
    "<end_of_utterance>",
];
const EOM_TEXTS: &[&str] = &["<|eom_id|>"];
const FIM_PRE_TEXTS: &[&str] = &[
    "<|fim_prefix|>",
    "<fim-prefix>",
    "<fim_prefix>",
    "<｜fim▁begin｜>",
    "<PRE>",
    "▁<PRE>",
    "<|code_prefix|>",
    "<|prefix|>",
];
const FIM_SUF_TEXTS: &[&str] = &[
    "<|fim_suffix|>",
    "<fim-suffix>",
    "<fim_suffix>",
    "<｜fim▁hole｜>",
    "<SUF>",
    "▁<SUF>",
    "<|code_suffix|>",
    "<|suffix|>",
];
const FIM_MID_TEXTS: &[&str] = &[
    "<|fim_middle|>",
    "<fim-middle>",
    "<fim_middle>",
    "<｜fim▁end｜>",
    "<MID>",
    "▁<MID>",
    "<|code_middle|>",
    "<|middle|>",
];
const FIM_PAD_TEXTS: &[&str] = &["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"];
const FIM_REP_TEXTS: &[&str] = &["<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"];
const FIM_SEP_TEXTS: &[&str] = &["<|file_sep|>"];

/// Texts that end generation whenever they are in the vocabulary.
const EOG_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<｜end▁of▁sentence｜>",
    "[e~[",
];

pub(crate) struct Vocab {
    pub texts: TextTable,
    pub scores: Vec<f32>,
    pub attrs: Vec<u16>,
    pub special: SpecialIds,
    /// End-of-generation ids, ascending.
    pub eog: BTreeSet<u32>,
    /// CONTROL / USER_DEFINED / UNKNOWN ids, longest text first (ties by id), as matched in the text.
    pub special_cache: Vec<u32>,
}

impl Vocab {
    /// `default_ids` are llama.cpp's per-model-type defaults (used when the file has no valid id).
    pub fn build(spec: &mut TokenizerSpec, default_ids: SpecialIds) -> Result<Vocab> {
        let n = spec.tokens.len();
        if n == 0 {
            return Err(Error::Tokenizer("the token list is empty".into()));
        }
        if n > u32::MAX as usize / 2 {
            return Err(Error::Tokenizer(format!(
                "{n} tokens is more than a vocabulary can hold"
            )));
        }
        if !spec.scores.is_empty() && spec.scores.len() < n {
            return Err(Error::Tokenizer(format!("{} scores for {n} tokens", spec.scores.len())));
        }
        if !spec.token_types.is_empty() && spec.token_types.len() < n {
            return Err(Error::Tokenizer(format!(
                "{} token types for {n} tokens",
                spec.token_types.len()
            )));
        }

        let mut texts = std::mem::take(&mut spec.tokens);
        for (i, t) in texts.iter_mut().enumerate() {
            if t.is_empty() {
                *t = format!("[EMPTY_{i}]");
            }
        }
        let table = TextTable::new(&texts).map_err(|(a, b)| {
            Error::Tokenizer(format!("token {:?} appears twice (ids {a} and {b})", texts[b as usize]))
        })?;
        drop(texts);
        let scores = if spec.scores.is_empty() {
            vec![0.0; n]
        } else {
            spec.scores[..n].to_vec()
        };
        let attrs: Vec<u16> = if spec.token_types.is_empty() {
            vec![ATTR_NORMAL; n]
        } else {
            spec.token_types[..n].iter().map(|&t| attr_from_type(t)).collect()
        };

        let mut v = Vocab {
            texts: table,
            scores,
            attrs,
            special: SpecialIds::default(),
            eog: BTreeSet::new(),
            special_cache: Vec::new(),
        };
        v.special = v.resolve_special_ids(spec, default_ids);
        v.detect_special_tokens();
        v.build_eog();
        v.build_special_cache();
        v.apply_model_attrs(spec.pre.as_deref(), spec.model_name.as_deref());
        Ok(v)
    }

    pub fn n_tokens(&self) -> usize {
        self.texts.len()
    }

    pub fn token_str(&self, id: u32) -> Option<&str> {
        ((id as usize) < self.texts.len()).then(|| self.texts.text(id))
    }

    pub fn get(&self, text: &str) -> Option<u32> {
        self.texts.get(text)
    }

    pub fn attr(&self, id: u32) -> u16 {
        self.attrs.get(id as usize).copied().unwrap_or(0)
    }

    fn valid(&self, id: Option<u32>) -> Option<u32> {
        id.filter(|&i| (i as usize) < self.texts.len())
    }

    /// A default out of range is dropped; a file id out of range leaves the default (llama.cpp warns).
    fn resolve_special_ids(&self, spec: &TokenizerSpec, d: SpecialIds) -> SpecialIds {
        let pick = |file: Option<u32>, default: Option<u32>| self.valid(file).or(self.valid(default));
        SpecialIds {
            bos: pick(spec.special.bos, d.bos),
            eos: pick(spec.special.eos, d.eos),
            eot: pick(spec.special.eot, d.eot),
            eom: pick(spec.special.eom, d.eom),
            unk: pick(spec.special.unk, d.unk),
            sep: pick(spec.special.sep, d.sep),
            pad: pick(spec.special.pad, d.pad),
            mask: pick(spec.special.mask, d.mask),
            fim_pre: pick(spec.special.fim_pre, d.fim_pre),
            fim_suf: pick(spec.special.fim_suf, d.fim_suf),
            fim_mid: pick(spec.special.fim_mid, d.fim_mid),
            fim_pad: pick(spec.special.fim_pad, d.fim_pad),
            fim_rep: pick(spec.special.fim_rep, d.fim_rep),
            fim_sep: pick(spec.special.fim_sep, d.fim_sep),
        }
    }

    /// llama.cpp walks its hash map and takes the first match; we take the lowest id, which is the
    /// same whenever a vocabulary has only one candidate (all real ones seen so far).
    fn find_first(&self, candidates: &[&str]) -> Option<u32> {
        candidates.iter().filter_map(|t| self.get(t)).min()
    }

    fn force_control(&mut self, id: u32) {
        self.attrs[id as usize] |= ATTR_CONTROL;
    }

    fn detect_special_tokens(&mut self) {
        type Field = fn(&mut SpecialIds) -> &mut Option<u32>;
        let lists: [(&[&str], Field); 8] = [
            (EOT_TEXTS, |s| &mut s.eot),
            (EOM_TEXTS, |s| &mut s.eom),
            (FIM_PRE_TEXTS, |s| &mut s.fim_pre),
            (FIM_SUF_TEXTS, |s| &mut s.fim_suf),
            (FIM_MID_TEXTS, |s| &mut s.fim_mid),
            (FIM_PAD_TEXTS, |s| &mut s.fim_pad),
            (FIM_REP_TEXTS, |s| &mut s.fim_rep),
            (FIM_SEP_TEXTS, |s| &mut s.fim_sep),
        ];
        for (texts, field) in lists {
            if field(&mut self.special).is_none() {
                if let Some(id) = self.find_first(texts) {
                    *field(&mut self.special) = Some(id);
                    self.force_control(id);
                }
            }
        }
        // Control tokens named "unused…" are marked UNUSED.
        for (t, a) in self.texts.iter().zip(self.attrs.iter_mut()) {
            if *a & ATTR_CONTROL != 0 && t.contains("unused") {
                *a |= ATTR_UNUSED;
            }
        }
    }

    fn build_eog(&mut self) {
        let s = self.special;
        let mut eog: BTreeSet<u32> = [s.fim_pad, s.fim_rep, s.fim_sep].into_iter().flatten().collect();
        for t in EOG_TEXTS {
            if let Some(id) = self.get(t) {
                eog.insert(id);
                self.force_control(id);
            }
        }
        // gpt-oss: always rendered.
        for t in ["<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"] {
            if let Some(id) = self.get(t) {
                self.attrs[id as usize] = ATTR_USER_DEFINED;
            }
        }
        eog.extend([s.eos, s.eot, s.eom].into_iter().flatten());

        // o200k_harmony / solar-open: "<|end|>" ends a message, not the generation.
        let in_eog = |t: &str| self.get(t).filter(|id| eog.contains(id));
        let has = |t: &str| in_eog(t).is_some();
        let has_call = has("<|call|>") || has("<|calls|>");
        let end = in_eog("<|end|>").filter(|_| has_call && (has("<|return|>") || has("<|flush|>")));
        // gemma4 / plamo: "</s>" is an ordinary token there.
        let s_id = in_eog("</s>").filter(|_| has("<|tool_response>") || has("<|plamo:eos|>"));
        if let Some(end) = end {
            eog.remove(&end);
            self.attrs[end as usize] = ATTR_USER_DEFINED;
        }
        if let Some(s_id) = s_id {
            eog.remove(&s_id);
            self.attrs[s_id as usize] = ATTR_NORMAL;
        }
        self.eog = eog;
    }

    fn build_special_cache(&mut self) {
        let mask = ATTR_CONTROL | ATTR_USER_DEFINED | ATTR_UNKNOWN;
        let mut ids: Vec<u32> = (0..self.texts.len() as u32)
            .filter(|&i| self.attrs[i as usize] & mask != 0)
            .collect();
        // llama.cpp uses an unstable std::sort by length; ties by id keep ours deterministic.
        ids.sort_by_key(|&i| std::cmp::Reverse(self.texts.text(i).len()));
        self.special_cache = ids;
    }

    /// llama.cpp's per-model attribute fixes (LSTRIP/RSTRIP), keyed on `general.name` / the pre name.
    fn apply_model_attrs(&mut self, pre: Option<&str>, model_name: Option<&str>) {
        let name = model_name.unwrap_or("").to_lowercase();
        let pre = pre.unwrap_or("");
        let set = |v: &mut Vocab, text: &str, bit: u16, on: bool| {
            if let Some(id) = v.get(text) {
                let a = &mut v.attrs[id as usize];
                *a = if on { *a | bit } else { *a & !bit };
            }
        };
        if ["jina-v2-de", "jina-v2-es", "jina-v2-code"]
            .iter()
            .any(|p| pre.contains(p))
        {
            set(self, "<mask>", ATTR_LSTRIP, true);
        } else if name.contains("phi-3") || name.contains("phi3") {
            for i in 0..self.special_cache.len() {
                let id = self.special_cache[i];
                self.attrs[id as usize] |= ATTR_RSTRIP;
            }
            set(self, "</s>", ATTR_RSTRIP, true);
            for t in ["<unk>", "<s>", "<|endoftext|>"] {
                set(self, t, ATTR_RSTRIP, false);
            }
        } else if name.contains("modern-bert") {
            set(self, "[MASK]", ATTR_LSTRIP, true);
        }
    }
}
