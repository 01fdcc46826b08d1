//! Streaming detokenization: token pieces in, complete UTF-8 out.

use super::Tokenizer;

/// Feed ids one at a time; each call returns the text that is now complete UTF-8, holding back the
/// first bytes of a character split across tokens. Invalid bytes become U+FFFD exactly as
/// `String::from_utf8_lossy` would replace them, so the chunks concatenate to
/// `decode(ids, skip_special)` (for a tokenizer without a leading-space strip, or a continuation).
pub struct StreamDecoder<'a> {
    tok: &'a Tokenizer,
    utf8: Utf8Stream,
    skip_special: bool,
}

/// Bytes in, complete UTF-8 out: the part of [`StreamDecoder`] that holds no tokenizer, for
/// owners that outlive a borrow of one (a scheduler's requests).
#[derive(Clone, Debug, Default)]
pub struct Utf8Stream {
    pending: Vec<u8>,
}

impl Utf8Stream {
    /// The text `bytes` complete (a character split across calls is held back).
    pub fn push(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        self.take(false)
    }

    /// Whatever is held back, with an incomplete trailing character replaced by U+FFFD.
    pub fn flush(&mut self) -> String {
        self.take(true)
    }
}

impl<'a> StreamDecoder<'a> {
    /// Control tokens render as their text (`<|im_end|>`), as llama.cpp's `token_to_piece(special = true)`.
    pub fn new(tok: &'a Tokenizer) -> Self {
        StreamDecoder {
            tok,
            utf8: Utf8Stream::default(),
            skip_special: false,
        }
    }

    /// Drop control and unknown tokens instead of rendering them.
    pub fn skip_special(mut self, skip: bool) -> Self {
        self.skip_special = skip;
        self
    }

    pub fn push(&mut self, id: u32) -> String {
        self.utf8.push(&self.tok.piece(id, !self.skip_special))
    }

    /// Whatever is held back, with an incomplete trailing character replaced by U+FFFD.
    pub fn flush(&mut self) -> String {
        self.utf8.flush()
    }
}

impl Utf8Stream {
    fn take(&mut self, last: bool) -> String {
        let mut out = String::new();
        let mut rest: &[u8] = &self.pending;
        loop {
            match std::str::from_utf8(rest) {
                Ok(s) => {
                    out.push_str(s);
                    rest = &[];
                    break;
                }
                Err(e) => {
                    let (valid, tail) = rest.split_at(e.valid_up_to());
                    out.push_str(std::str::from_utf8(valid).unwrap_or_default());
                    match e.error_len() {
                        Some(n) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            rest = &tail[n..];
                        }
                        None if last => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            rest = &[];
                            break;
                        }
                        None => {
                            rest = tail;
                            break;
                        }
                    }
                }
            }
        }
        let keep = rest.len();
        let n = self.pending.len();
        self.pending.drain(..n - keep);
        out
    }
}
