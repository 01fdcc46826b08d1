//! Pre-tokenizers for byte-level BPE: split a text fragment into the words BPE merges within.
//!
//! A pre-tokenizer is the list of regexes llama.cpp keys on `tokenizer.ggml.pre`
//! (`llm_tokenizer_bpe`'s constructor); each regex splits every piece the previous one produced,
//! keeping both matches and the gaps between them (`unicode_regex_split`). The long patterns are
//! ports of llama.cpp's hand-written matchers (`unicode_regex_split_custom_gpt2` / `_llama3` /
//! `_qwen2`), the short ones are one-line predicates; all read llama.cpp's own category table.

use super::unicode_data::{CATEGORY_RANGES, LETTER, NUMBER, PUNCTUATION, WHITESPACE};
use crate::error::{Error, Result};

/// One regex stage of a pre-tokenizer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Split {
    /// `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)` (+ `\s+`).
    Gpt2,
    /// `(?:'[sS]|'[tT]|…)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,D}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
    /// with D = `max_digits` (3: llama3, 1: qwen2).
    Llama3 { max_digits: usize },
    /// `\p{N}`: every number codepoint alone.
    EachNumber,
    /// `\p{N}+`
    NumberRuns,
    /// `[0-9][0-9][0-9]`
    AsciiDigitTriples,
    /// `[\p{P}\$\+<=>\^~\|]+`, with `` ` `` added for falcon.
    PunctRuns { backtick: bool },
    /// `[^\n]+|[\n]+`
    Newlines,
}

/// What a `tokenizer.ggml.pre` name selects, with the flags llama.cpp sets alongside.
#[derive(Clone, Debug)]
pub(crate) struct PreTokenizer {
    pub name: String,
    pub stages: &'static [Split],
    /// Whole words that are tokens skip the merges (llama3-style vocabularies).
    pub ignore_merges: bool,
    /// llama.cpp's `clean_up_tokenization_spaces` for this pre-tokenizer (kept for reference;
    /// `decode` stays lossless and does not apply it).
    pub clean_spaces: bool,
    /// Pre-tokenizers that turn BOS on before the file's `add_bos_token` is read.
    pub add_bos: bool,
    /// Pre-tokenizers that clear the default BOS id before the file's `bos_token_id` is read.
    pub no_default_bos: bool,
    /// Words are GPT-2 byte-encoded before the merges (byte-level BPE); false: the raw UTF-8
    /// characters, byte tokens `<0xXX>` for what no token covers (SentencePiece-style BPE).
    pub byte_encode: bool,
    /// Spaces become `▁` before the merges, and back when decoding (SentencePiece-style BPE).
    pub escape_whitespaces: bool,
}

const DEFAULT: &[Split] = &[
    Split::PunctRuns { backtick: false },
    Split::Gpt2,
    Split::NumberRuns,
    Split::AsciiDigitTriples,
];
const GPT2: &[Split] = &[Split::Gpt2];
const STARCODER: &[Split] = &[Split::EachNumber, Split::Gpt2];
const FALCON: &[Split] = &[
    Split::PunctRuns { backtick: true },
    Split::Gpt2,
    Split::AsciiDigitTriples,
];
const LLAMA3: &[Split] = &[Split::Llama3 { max_digits: 3 }];
const QWEN2: &[Split] = &[Split::Llama3 { max_digits: 1 }];
const LAGUNA: &[Split] = &[Split::Newlines, Split::Llama3 { max_digits: 1 }];
const NEWLINES: &[Split] = &[Split::Newlines];

impl PreTokenizer {
    /// `name` as llama.cpp spells it (`llama_vocab::impl::load`); None is llama.cpp's "default".
    pub fn from_name(name: Option<&str>) -> Result<PreTokenizer> {
        let n = name.unwrap_or("default");
        // (stages, clean_spaces, ignore_merges, add_bos, no_default_bos)
        let (stages, clean_spaces, ignore_merges, add_bos, no_default_bos) = match n {
            "default" => (DEFAULT, true, false, false, false),
            "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral" | "midm-2.0" | "lfm2"
            | "jina-v5-nano" => (LLAMA3, true, true, true, false),
            "dbrx" | "smaug-bpe" => (LLAMA3, true, false, false, false),
            "chatglm-bpe" => (LLAMA3, true, false, false, true),
            "glm4" | "glm5" => (LLAMA3, true, true, false, true),
            "falcon" => (FALCON, true, false, false, false),
            "gpt-2" | "phi-2" | "jina-es" | "jina-de" | "gigachat" | "jina-v2-es" | "jina-v2-de" | "a.x-4.0"
            | "mellum" | "modern-bert" | "jina-v1-en" | "jina-v2-code" | "roberta-bpe" | "exaone4" | "mpt"
            | "olmo" | "jais" => (GPT2, true, false, false, false),
            "trillion" | "granite-docling" => (GPT2, false, false, false, false),
            "starcoder" | "refact" | "codeshell" | "exaone" | "minerva-7b" | "mellum2" => {
                (STARCODER, true, false, false, false)
            }
            "smollm" | "command-r" => (STARCODER, false, false, false, false),
            "stablelm2" | "megrez" => (QWEN2, true, false, false, false),
            "qwen2" | "deepseek-r1-qwen" | "kormo" | "f2llmv2" | "hunyuan" | "solar-open" | "grok-2" => {
                (QWEN2, false, false, false, false)
            }
            "laguna" => (LAGUNA, false, false, false, false),
            // Gemma 4: SentencePiece-style BPE over whole lines (below).
            "gemma4" | "granite-embed-multi-311m" => (NEWLINES, true, false, true, true),
            other => {
                return Err(Error::Tokenizer(format!(
                    "pre-tokenizer '{other}' (tokenizer.ggml.pre) is not supported; supported families: \
                     default, gpt-2, llama-bpe (llama3), qwen2, smollm/starcoder, falcon, dbrx, chatglm-bpe/glm4, laguna, gemma4"
                )))
            }
        };
        let spm_style = stages == NEWLINES;
        Ok(PreTokenizer {
            name: n.to_string(),
            stages,
            ignore_merges,
            clean_spaces,
            add_bos,
            no_default_bos,
            byte_encode: !spm_style,
            escape_whitespaces: spm_style,
        })
    }

    /// Splits `text` into words; returns their byte ranges in order (they tile the text).
    pub fn split(&self, text: &str) -> Vec<(usize, usize)> {
        let cpts: Vec<char> = text.chars().collect();
        let flags: Vec<u16> = cpts.iter().map(|&c| cpt_flags(c)).collect();
        let mut offsets = vec![cpts.len()];
        for &stage in self.stages {
            let mut out = Vec::with_capacity(offsets.len() * 2);
            let mut start = 0;
            for &len in &offsets {
                let s = Span {
                    cpts: &cpts,
                    flags: &flags,
                    ini: start,
                    end: start + len,
                };
                match stage {
                    Split::Gpt2 => s.gpt2(&mut out),
                    Split::Llama3 { max_digits } => s.llama3(max_digits, &mut out),
                    Split::EachNumber => s.runs(&mut out, |_, f| (f & NUMBER != 0).then_some(1)),
                    Split::NumberRuns => s.runs(&mut out, |_, f| (f & NUMBER != 0).then_some(usize::MAX)),
                    Split::AsciiDigitTriples => s.digit_triples(&mut out),
                    Split::PunctRuns { backtick } => s.runs(&mut out, |c, f| {
                        let sym = matches!(c, '$' | '+' | '<' | '=' | '>' | '^' | '~' | '|') || (backtick && c == '`');
                        (f & PUNCTUATION != 0 || sym).then_some(usize::MAX)
                    }),
                    Split::Newlines => s.newline_runs(&mut out),
                }
                start += len;
            }
            offsets = out;
        }
        // codepoint lengths → byte ranges
        let mut ranges = Vec::with_capacity(offsets.len());
        let (mut cp, mut byte) = (0, 0);
        for len in offsets {
            let b0 = byte;
            byte += cpts[cp..cp + len].iter().map(|c| c.len_utf8()).sum::<usize>();
            cp += len;
            ranges.push((b0, byte));
        }
        ranges
    }
}

const WS: u16 = 0x100;

/// llama.cpp `unicode_cpt_flags_from_cpt`: the category bit, plus `WS` for whitespace.
pub(crate) fn cpt_flags(c: char) -> u16 {
    let c = c as u32;
    let i = CATEGORY_RANGES.partition_point(|&(start, _)| start <= c);
    let cat = u16::from(CATEGORY_RANGES[i.saturating_sub(1)].1);
    if WHITESPACE.binary_search(&c).is_ok() {
        cat | WS
    } else {
        cat
    }
}

const OUT_OF_RANGE: u32 = u32::MAX;

/// One piece of the previous stage, in codepoints `[ini, end)`; outside it flags read as 0.
struct Span<'a> {
    cpts: &'a [char],
    flags: &'a [u16],
    ini: usize,
    end: usize,
}

/// llama.cpp's `_add_token`: emits `[prev, end)` if non-empty.
struct Emitter<'o> {
    out: &'o mut Vec<usize>,
    prev: usize,
}

impl Emitter<'_> {
    fn add(&mut self, end: usize) -> usize {
        let len = end - self.prev;
        if len > 0 {
            self.out.push(len);
        }
        self.prev = end;
        len
    }
}

impl Span<'_> {
    fn cpt(&self, p: usize) -> u32 {
        if p >= self.ini && p < self.end {
            self.cpts[p] as u32
        } else {
            OUT_OF_RANGE
        }
    }

    fn flg(&self, p: usize) -> u16 {
        if p >= self.ini && p < self.end {
            self.flags[p]
        } else {
            0
        }
    }

    fn contraction(&self, pos: usize, lower: bool) -> usize {
        let fold = |c: u32| {
            if lower && (b'A' as u32..=b'Z' as u32).contains(&c) {
                c + 32
            } else {
                c
            }
        };
        if self.cpt(pos) != '\'' as u32 || pos + 1 >= self.end {
            return 0;
        }
        let n1 = fold(self.cpt(pos + 1));
        if [b's', b't', b'm', b'd'].iter().any(|&b| n1 == b as u32) {
            return 2;
        }
        if pos + 2 < self.end {
            let n2 = fold(self.cpt(pos + 2));
            let pair = |a: u8, b: u8| n1 == a as u32 && n2 == b as u32;
            if pair(b'r', b'e') || pair(b'v', b'e') || pair(b'l', b'l') {
                return 3;
            }
        }
        0
    }

    /// Port of `unicode_regex_split_custom_gpt2`.
    fn gpt2(&self, out: &mut Vec<usize>) {
        let mut e = Emitter { out, prev: self.ini };
        let mut pos = self.ini;
        while pos < self.end {
            let cpt = self.cpt(pos);
            let n = self.contraction(pos, false);
            if n > 0 {
                pos += e.add(pos + n);
                continue;
            }
            let space = cpt == ' ' as u32;
            let mut f2 = if space { self.flg(pos + 1) } else { self.flg(pos) };
            // <space>?\p{L}+ | <space>?\p{N}+
            if f2 & (LETTER | NUMBER) != 0 {
                let class = if f2 & LETTER != 0 { LETTER } else { NUMBER };
                pos += space as usize;
                while f2 & class != 0 {
                    pos += 1;
                    f2 = self.flg(pos);
                }
                e.add(pos);
                continue;
            }
            // <space>?[^\s\p{L}\p{N}]+
            let other = |f: u16| f & (WS | LETTER | NUMBER) == 0 && f != 0;
            if other(f2) {
                pos += space as usize;
                while other(f2) {
                    pos += 1;
                    f2 = self.flg(pos);
                }
                e.add(pos);
                continue;
            }
            let mut nws = 0;
            while self.flg(pos + nws) & WS != 0 {
                nws += 1;
            }
            if nws > 1 && self.cpt(pos + nws) != OUT_OF_RANGE {
                pos += nws - 1;
                e.add(pos);
                continue;
            }
            if nws > 0 {
                pos += nws;
                e.add(pos);
                continue;
            }
            pos += 1;
            e.add(pos);
        }
    }

    /// Port of `unicode_regex_split_custom_llama3` (`max_digits` 3) and `_qwen2` (`max_digits` 1).
    fn llama3(&self, max_digits: usize, out: &mut Vec<usize>) {
        let mut e = Emitter { out, prev: self.ini };
        let mut pos = self.ini;
        while pos < self.end {
            let cpt = self.cpt(pos);
            let flags = self.flg(pos);
            let n = self.contraction(pos, true);
            if n > 0 {
                pos += e.add(pos + n);
                continue;
            }
            let is_number = flags & NUMBER != 0;
            // [^\r\n\p{L}\p{N}]?\p{L}+
            if !(cpt == '\r' as u32 || cpt == '\n' as u32 || is_number)
                && (flags & LETTER != 0 || self.flg(pos + 1) & LETTER != 0)
            {
                pos += 1;
                while self.flg(pos) & LETTER != 0 {
                    pos += 1;
                }
                e.add(pos);
                continue;
            }
            // \p{N}{1,max_digits}
            if is_number {
                let mut ini = pos;
                while self.flg(pos) & NUMBER != 0 {
                    pos += 1;
                    if pos - ini >= max_digits {
                        e.add(pos);
                        ini = pos;
                    }
                }
                e.add(pos);
                continue;
            }
            // <space>?[^\s\p{L}\p{N}]+[\r\n]*  (llama.cpp tests `flags`, not `flags2`, for non-zero)
            let space = cpt == ' ' as u32;
            let mut f2 = if space { self.flg(pos + 1) } else { flags };
            let other = |f: u16| f & (WS | LETTER | NUMBER) == 0;
            if other(f2) && flags != 0 {
                pos += space as usize;
                while other(f2) && f2 != 0 {
                    pos += 1;
                    f2 = self.flg(pos);
                }
                while self.cpt(pos) == '\r' as u32 || self.cpt(pos) == '\n' as u32 {
                    pos += 1;
                }
                e.add(pos);
                continue;
            }
            let mut nws = 0;
            let mut last_rn = 0;
            while self.flg(pos + nws) & WS != 0 {
                let c = self.cpt(pos + nws);
                if c == '\r' as u32 || c == '\n' as u32 {
                    last_rn = pos + nws + 1;
                }
                nws += 1;
            }
            // \s*[\r\n]+
            if last_rn > 0 {
                pos = last_rn;
                e.add(pos);
                continue;
            }
            // \s+(?!\S)
            if nws > 1 && self.cpt(pos + nws) != OUT_OF_RANGE {
                pos += nws - 1;
                e.add(pos);
                continue;
            }
            // \s+
            if nws > 0 {
                pos += nws;
                e.add(pos);
                continue;
            }
            pos += 1;
            e.add(pos);
        }
    }

    /// A single-class regex (`X` or `X+`), matches and gaps both kept: `class` returns the longest
    /// match allowed at a codepoint of the class (1 or unbounded), None outside it.
    fn runs(&self, out: &mut Vec<usize>, class: impl Fn(char, u16) -> Option<usize>) {
        let mut e = Emitter { out, prev: self.ini };
        let mut pos = self.ini;
        while pos < self.end {
            match class(self.cpts[pos], self.flags[pos]) {
                Some(max) => {
                    e.add(pos); // the gap before
                    let start = pos;
                    while pos < self.end && pos - start < max && class(self.cpts[pos], self.flags[pos]).is_some() {
                        pos += 1;
                    }
                    e.add(pos);
                }
                None => pos += 1,
            }
        }
        e.add(self.end);
    }

    fn digit_triples(&self, out: &mut Vec<usize>) {
        let mut e = Emitter { out, prev: self.ini };
        let digit = |p: usize| p < self.end && self.cpts[p].is_ascii_digit();
        let mut pos = self.ini;
        while pos < self.end {
            if digit(pos) && digit(pos + 1) && digit(pos + 2) {
                e.add(pos);
                pos += 3;
                e.add(pos);
            } else {
                pos += 1;
            }
        }
        e.add(self.end);
    }

    fn newline_runs(&self, out: &mut Vec<usize>) {
        let mut pos = self.ini;
        while pos < self.end {
            let nl = self.cpts[pos] == '\n';
            let start = pos;
            while pos < self.end && (self.cpts[pos] == '\n') == nl {
                pos += 1;
            }
            out.push(pos - start);
        }
    }
}
