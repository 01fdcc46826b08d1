//! Byte-level BPE (`tokenizer.ggml.model = "gpt2"`): GPT-2's bytes→unicode mapping, merges by rank.
//! Also SentencePiece-style BPE (`"gemma4"`): the same merges over raw UTF-8 characters, spaces as
//! `▁`, byte tokens `<0xXX>` for what no token covers.
//!
//! Follows llama.cpp `llm_tokenizer_bpe_session::tokenize`: each pre-tokenized word is byte-encoded,
//! split into characters, and the adjacent pair with the lowest merge rank (leftmost on ties) is
//! merged until none is left; a final piece that is not a token falls back to its single bytes.
//! Merge pieces are interned as symbol ids once at load, so the hot loop compares integers.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use super::pretokenize::PreTokenizer;
use super::vocab::Vocab;
use crate::error::{Error, Result};

const fn printable(b: u8) -> bool {
    matches!(b, 0x21..=0x7E | 0xA1..=0xAC | 0xAE..=0xFF)
}

/// GPT-2 `bytes_to_unicode` (llama.cpp `unicode_byte_to_utf8_map`): printable bytes map to
/// themselves, the other 68 to U+0100.. in byte order.
pub(crate) const BYTE_TO_CHAR: [char; 256] = {
    let mut table = ['\0'; 256];
    let (mut b, mut n) = (0usize, 0u32);
    while b < 256 {
        let cp = if printable(b as u8) {
            b as u32
        } else {
            n += 1;
            255 + n
        };
        table[b] = match char::from_u32(cp) {
            Some(c) => c,
            None => '\0',
        };
        b += 1;
    }
    table
};

/// The non-printable bytes in order: U+0100 + i stands for `NON_PRINTABLE[i]`.
const NON_PRINTABLE: [u8; 68] = {
    let mut table = [0u8; 68];
    let (mut b, mut n) = (0usize, 0usize);
    while b < 256 {
        if !printable(b as u8) {
            table[n] = b as u8;
            n += 1;
        }
        b += 1;
    }
    table
};

/// The inverse of [`BYTE_TO_CHAR`] (llama.cpp `unicode_utf8_to_byte`).
pub(crate) fn char_to_byte(c: char) -> Option<u8> {
    let cp = c as u32;
    match cp {
        0..=0xFF if printable(cp as u8) => Some(cp as u8),
        0x100..=0x143 => Some(NON_PRINTABLE[(cp - 0x100) as usize]),
        _ => None,
    }
}

/// llama.cpp `llama_decode_text`: a byte-level token's text back to raw bytes.
pub(crate) fn decode_text(text: &str, out: &mut Vec<u8>) {
    for c in text.chars() {
        match char_to_byte(c) {
            Some(b) => out.push(b),
            None => {
                let mut utf8 = [0u8; 4];
                out.extend_from_slice(b"[UNK_BYTE_0x");
                for b in c.encode_utf8(&mut utf8).bytes() {
                    out.extend_from_slice(format!("{b:02x}").as_bytes());
                }
                out.extend_from_slice(text.as_bytes());
                out.push(b']');
            }
        }
    }
}

const NO_SYMBOL: u32 = u32::MAX;

pub(crate) struct Bpe {
    pub pre: PreTokenizer,
    /// (left symbol, right symbol) → (rank, merged symbol). Symbols below `n_vocab` are token ids.
    merges: HashMap<(u32, u32), (u32, u32)>,
    /// Merge pieces that are not tokens, with symbol ids from `n_vocab` up.
    extra: HashMap<String, u32>,
    n_vocab: u32,
}

#[derive(Clone, Copy)]
struct Symbol {
    start: u32,
    len: u32,
    prev: i32,
    next: i32,
    id: u32,
}

impl Bpe {
    /// `merges[i]` is "left right" with rank i; the first occurrence of a pair wins.
    pub fn new(vocab: &Vocab, merges: &[String], pre: PreTokenizer) -> Result<Bpe> {
        let n_vocab = vocab.n_tokens() as u32;
        let mut bpe = Bpe {
            pre,
            merges: HashMap::with_capacity(merges.len()),
            extra: HashMap::new(),
            n_vocab,
        };
        let mut joined = String::new();
        for (rank, m) in merges.iter().enumerate() {
            // llama.cpp splits at the first space after the first byte.
            let pos = m.bytes().skip(1).position(|b| b == b' ').map(|p| p + 1);
            let Some(pos) = pos else {
                return Err(Error::Tokenizer(format!(
                    "merge {rank} ({m:?}) is not two pieces separated by a space"
                )));
            };
            let (left, right) = (&m[..pos], &m[pos + 1..]);
            let l = bpe.intern(vocab, left);
            let r = bpe.intern(vocab, right);
            joined.clear();
            joined.push_str(left);
            joined.push_str(right);
            let merged = bpe.intern(vocab, &joined);
            bpe.merges.entry((l, r)).or_insert((rank as u32, merged));
        }
        Ok(bpe)
    }

    fn intern(&mut self, vocab: &Vocab, s: &str) -> u32 {
        if let Some(id) = vocab.get(s) {
            return id;
        }
        if let Some(&id) = self.extra.get(s) {
            return id;
        }
        let id = self.n_vocab + self.extra.len() as u32;
        self.extra.insert(s.to_string(), id);
        id
    }

    fn symbol_of(&self, vocab: &Vocab, s: &str) -> u32 {
        vocab.get(s).or_else(|| self.extra.get(s).copied()).unwrap_or(NO_SYMBOL)
    }

    #[cfg(test)]
    pub fn n_merges(&self) -> usize {
        self.merges.len()
    }

    /// Rank of merging `left` and `right` (token or piece texts), if that merge exists.
    #[cfg(test)]
    pub fn rank(&self, vocab: &Vocab, left: &str, right: &str) -> Option<u32> {
        let (l, r) = (self.symbol_of(vocab, left), self.symbol_of(vocab, right));
        self.merges.get(&(l, r)).map(|&(rank, _)| rank)
    }

    /// Tokenizes one raw-text fragment (no special tokens in it), appending ids.
    pub fn encode(&self, vocab: &Vocab, text: &str, out: &mut Vec<u32>) {
        let mut word = String::new();
        let mut symbols = Vec::new();
        let mut heap = BinaryHeap::new();
        for (a, b) in self.pre.split(text) {
            word.clear();
            if self.pre.byte_encode {
                word.extend(text.as_bytes()[a..b].iter().map(|&byte| BYTE_TO_CHAR[byte as usize]));
            } else {
                word.push_str(&text[a..b]);
                // Gemma 4: a run of newlines that is a token is that token (llama.cpp #21343).
                if word.bytes().all(|c| c == b'\n') {
                    if let Some(id) = vocab.get(&word) {
                        out.push(id);
                        continue;
                    }
                }
            }
            self.encode_word(vocab, &word, &mut symbols, &mut heap, out);
        }
    }

    fn encode_word(
        &self,
        vocab: &Vocab,
        word: &str,
        symbols: &mut Vec<Symbol>,
        heap: &mut BinaryHeap<Reverse<(u32, u32, u32, u32)>>,
        out: &mut Vec<u32>,
    ) {
        if self.pre.ignore_merges {
            if let Some(id) = vocab.get(word) {
                out.push(id);
                return;
            }
        }
        symbols.clear();
        heap.clear();
        for (i, (start, c)) in word.char_indices().enumerate() {
            let mut buf = [0u8; 4];
            symbols.push(Symbol {
                start: start as u32,
                len: c.len_utf8() as u32,
                prev: i as i32 - 1,
                next: i as i32 + 1,
                id: self.symbol_of(vocab, c.encode_utf8(&mut buf)),
            });
        }
        if let Some(last) = symbols.last_mut() {
            last.next = -1;
        }
        // heap entries: (rank, left index, right index, combined byte length); min rank, then leftmost
        let push = |symbols: &[Symbol], heap: &mut BinaryHeap<_>, l: i32, r: i32| {
            if l < 0 || r < 0 {
                return;
            }
            let (ls, rs) = (symbols[l as usize], symbols[r as usize]);
            if let Some(&(rank, _)) = self.merges.get(&(ls.id, rs.id)) {
                heap.push(Reverse((rank, l as u32, r as u32, ls.len + rs.len)));
            }
        };
        for i in 1..symbols.len() as i32 {
            push(symbols, heap, i - 1, i);
        }
        while let Some(Reverse((_, l, r, size))) = heap.pop() {
            let (ls, rs) = (symbols[l as usize], symbols[r as usize]);
            // stale: one side already merged away or grown (llama.cpp compares the texts)
            if ls.len == 0 || rs.len == 0 || ls.len + rs.len != size {
                continue;
            }
            let Some(&(_, merged)) = self.merges.get(&(ls.id, rs.id)) else {
                continue;
            };
            let left = &mut symbols[l as usize];
            left.len += rs.len;
            left.id = merged;
            left.next = rs.next;
            symbols[r as usize].len = 0;
            if rs.next >= 0 {
                symbols[rs.next as usize].prev = l as i32;
            }
            let prev = symbols[l as usize].prev;
            push(symbols, heap, prev, l as i32);
            push(symbols, heap, l as i32, rs.next);
        }
        for s in symbols.iter().filter(|s| s.len > 0) {
            if s.id < self.n_vocab {
                out.push(s.id);
                continue;
            }
            // not a token: each byte of the encoded text that is itself a token (raw UTF-8:
            // its byte tokens, `<0xXX>`)
            let piece = &word.as_bytes()[s.start as usize..(s.start + s.len) as usize];
            for &b in piece {
                if !self.pre.byte_encode {
                    out.extend(vocab.get(&format!("<0x{b:02X}>")));
                } else if b.is_ascii() {
                    if let Some(id) = vocab.get(std::str::from_utf8(&[b]).unwrap_or("")) {
                        out.push(id);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_map_is_gpt2s() {
        let t = BYTE_TO_CHAR;
        assert_eq!(t[b'A' as usize], 'A');
        assert_eq!(t[b' ' as usize], 'Ġ'); // U+0120
        assert_eq!(t[b'\n' as usize], 'Ċ'); // U+010A
        assert_eq!(t[0], '\u{100}');
        assert_eq!(t[0xAD], '\u{143}');
        for b in 0..=255u8 {
            assert_eq!(char_to_byte(t[b as usize]), Some(b), "byte {b}");
        }
        let distinct: std::collections::HashSet<char> = t.iter().copied().collect();
        assert_eq!(distinct.len(), 256);
        assert_eq!(char_to_byte('\u{144}'), None);
    }

    #[test]
    fn decode_text_marks_unknown_chars() {
        let mut out = Vec::new();
        decode_text("HiĠthere", &mut out);
        assert_eq!(out, b"Hi there");
        out.clear();
        decode_text("é€", &mut out);
        assert_eq!(&out[..1], &[0xE9]);
        assert!(out.ends_with(b"[UNK_BYTE_0xe282ac\xc3\xa9\xe2\x82\xac]"));
    }
}
