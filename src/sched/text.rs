//! Generated tokens to text, and the stop strings that end it.

use crate::tokenizer::{Tokenizer, Utf8Stream};

/// Generated tokens to text: complete UTF-8 pieces, holding back any tail that might begin a
/// stop string; a stop string ends the text and is not part of it.
#[derive(Clone, Debug, Default)]
pub struct TextStream {
    utf8: Utf8Stream,
    /// Text that might begin a stop string.
    held: String,
    stop: Vec<String>,
    stopped: bool,
}

impl TextStream {
    pub fn new(stop: &[String]) -> TextStream {
        TextStream {
            stop: stop.iter().filter(|s| !s.is_empty()).cloned().collect(),
            ..TextStream::default()
        }
    }

    /// The text `id` makes safe to show, and whether a stop string has now ended the text
    /// (that piece is the last).
    pub fn push(&mut self, tok: &Tokenizer, id: u32) -> (String, bool) {
        if self.stopped {
            return (String::new(), true);
        }
        self.held.push_str(&self.utf8.push(&tok.piece(id, true)));
        if let Some(cut) = self.stop.iter().filter_map(|s| self.held.find(s.as_str())).min() {
            self.held.truncate(cut);
            self.stopped = true;
            return (std::mem::take(&mut self.held), true);
        }
        let safe = safe_prefix(&self.held, &self.stop);
        (self.held.drain(..safe).collect(), false)
    }

    /// What is still held back at the end of generation (a stop string cut off).
    pub fn finish(&mut self) -> String {
        if !self.stopped {
            self.held.push_str(&self.utf8.flush());
            if let Some(cut) = self.stop.iter().filter_map(|s| self.held.find(s.as_str())).min() {
                self.held.truncate(cut);
            }
        }
        std::mem::take(&mut self.held)
    }
}

/// Length of the longest prefix of `held` that cannot be the start of any stop string.
fn safe_prefix(held: &str, stops: &[String]) -> usize {
    let mut safe = held.len();
    for s in stops {
        for (i, _) in held.char_indices() {
            if i < safe && s.starts_with(&held[i..]) {
                safe = i;
                break;
            }
        }
    }
    safe
}

#[cfg(test)]
mod tests {
    use super::safe_prefix;

    #[test]
    fn holds_back_possible_stop_prefixes() {
        let stops = vec!["</s>".to_string()];
        assert_eq!(safe_prefix("hello", &stops), 5);
        assert_eq!(safe_prefix("hello </", &stops), 6);
        assert_eq!(safe_prefix("hello <", &stops), 6);
        assert_eq!(safe_prefix("abc", &[]), 3);
    }
}
