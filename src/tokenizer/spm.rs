//! SentencePiece BPE by scores (`tokenizer.ggml.model = "llama"`), with `<0xXX>` byte fallback.
//!
//! Follows llama.cpp `llm_tokenizer_spm_session::tokenize`: the (already ▁-escaped) text is split
//! into UTF-8 characters, and the adjacent pair whose concatenation is the highest-scoring token
//! (leftmost on ties) is merged until no pair forms a token; leftover pieces become byte tokens.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

use super::vocab::Vocab;
use crate::error::{Error, Result};

/// "▁" (U+2581), SentencePiece's escaped space.
pub(crate) const ESCAPED_SPACE: &str = "\u{2581}";

/// Per-byte fallback tokens: `<0xXX>`, else the one-byte text (llama.cpp `byte_to_token`).
pub(crate) fn byte_tokens(vocab: &Vocab) -> [Option<u32>; 256] {
    let mut t = [None; 256];
    for (b, slot) in t.iter_mut().enumerate() {
        *slot = vocab.get(&format!("<0x{b:02X}>")).or_else(|| {
            let one = [b as u8];
            std::str::from_utf8(&one).ok().and_then(|s| vocab.get(s))
        });
    }
    t
}

#[derive(Clone, Copy)]
struct Symbol {
    start: u32,
    len: u32,
    prev: i32,
    next: i32,
}

/// Heap entry: highest score first, then lowest left index (llama.cpp `llm_bigram_spm::comparator`).
struct Bigram {
    score: f32,
    left: u32,
    right: u32,
    size: u32,
}

impl Bigram {
    fn key(&self) -> (TotalF32, Reverse<u32>) {
        (TotalF32(self.score), Reverse(self.left))
    }
}

impl PartialEq for Bigram {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Bigram {}
impl PartialOrd for Bigram {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Bigram {
    fn cmp(&self, other: &Self) -> Ordering {
        self.key().cmp(&other.key())
    }
}

#[derive(PartialEq)]
struct TotalF32(f32);
impl Eq for TotalF32 {}
impl PartialOrd for TotalF32 {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for TotalF32 {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// Tokenizes `text` (spaces already escaped to ▁), appending ids.
pub(crate) fn encode(vocab: &Vocab, bytes: &[Option<u32>; 256], text: &str, out: &mut Vec<u32>) -> Result<()> {
    let mut symbols: Vec<Symbol> = Vec::with_capacity(text.len());
    for (i, (start, c)) in text.char_indices().enumerate() {
        symbols.push(Symbol {
            start: start as u32,
            len: c.len_utf8() as u32,
            prev: i as i32 - 1,
            next: i as i32 + 1,
        });
    }
    if let Some(last) = symbols.last_mut() {
        last.next = -1;
    }
    let piece = |s: &Symbol, len: u32| &text[s.start as usize..(s.start + len) as usize];
    let mut heap = BinaryHeap::new();
    let try_add = |symbols: &[Symbol], heap: &mut BinaryHeap<Bigram>, l: i32, r: i32| {
        if l < 0 || r < 0 {
            return;
        }
        let (ls, rs) = (&symbols[l as usize], &symbols[r as usize]);
        let size = ls.len + rs.len;
        if let Some(id) = vocab.get(piece(ls, size)) {
            heap.push(Bigram {
                score: vocab.scores[id as usize],
                left: l as u32,
                right: r as u32,
                size,
            });
        }
    };
    for i in 1..symbols.len() as i32 {
        try_add(&symbols, &mut heap, i - 1, i);
    }
    while let Some(b) = heap.pop() {
        let (ls, rs) = (symbols[b.left as usize], symbols[b.right as usize]);
        if ls.len == 0 || rs.len == 0 || ls.len + rs.len != b.size {
            continue;
        }
        let left = &mut symbols[b.left as usize];
        left.len += rs.len;
        left.next = rs.next;
        symbols[b.right as usize].len = 0;
        if rs.next >= 0 {
            symbols[rs.next as usize].prev = b.left as i32;
        }
        let prev = symbols[b.left as usize].prev;
        try_add(&symbols, &mut heap, prev, b.left as i32);
        try_add(&symbols, &mut heap, b.left as i32, rs.next);
    }
    // llama.cpp's `resegment`: every merged piece is a token by construction, so a piece is either
    // a token or a single character that falls back to its bytes.
    let mut i = if symbols.is_empty() { -1 } else { 0 };
    while i >= 0 {
        let s = &symbols[i as usize];
        let p = piece(s, s.len);
        match vocab.get(p) {
            Some(id) => out.push(id),
            None => {
                for &b in p.as_bytes() {
                    let id = bytes[b as usize]
                        .ok_or_else(|| Error::Tokenizer(format!("no byte-fallback token <0x{b:02X}> for {p:?}")))?;
                    out.push(id);
                }
            }
        }
        i = s.next;
    }
    Ok(())
}
