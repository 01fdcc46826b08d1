//! Tool calls in generated text, found as the text streams in.
//!
//! Two shapes are recognised:
//! - Hermes/Qwen blocks, anywhere in the reply: `<tool_call>{"name": …, "arguments": {…}}</tool_call>`
//!   (one or more, with text around them);
//! - a bare JSON call at the start of the reply (or right after another call), which small
//!   models emit: `{"name": …, "arguments": {…}}` (or `"parameters"`), or a list of them.
//!
//! [`ToolCallParser::push`] takes the text piece by piece and gives back what is settled:
//! content is released as soon as it cannot be the start of a call (a reply starting with `{`
//! is held while it could still be one; so is a trailing `<tool_` that may become the tag), and
//! a call once its JSON is complete. A block or object that turns out not to be a call comes
//! back as content, unchanged: nothing the model wrote is lost. Whitespace between calls, or
//! before the first, is dropped. [`parse`] does the same on a whole text.

use serde_json::{Map, Value};

const OPEN: &str = "<tool_call>";
const CLOSE: &str = "</tool_call>";

/// A call: the function's name and its arguments as a JSON text (OpenAI's
/// `function.arguments`), compact.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParsedCall {
    pub name: String,
    pub arguments: String,
}

/// What the parser settles, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Piece {
    Content(String),
    Call(ParsedCall),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// Plain text; `buf` holds only what could still be the start of a call.
    Text,
    /// Inside a `<tool_call>` block: `buf` starts with the tag.
    Block,
    /// A bare JSON value that may be a call: `buf` is leading whitespace then the value so far;
    /// `scan` has read `buf[..scan.pos]`.
    Json,
}

/// Bracket depth of a JSON text read so far, string- and escape-aware.
#[derive(Clone, Copy, Debug, Default)]
struct Scan {
    pos: usize,
    depth: usize,
    in_str: bool,
    escaped: bool,
}

#[derive(Clone, Debug)]
pub struct ToolCallParser {
    buf: String,
    mode: Mode,
    /// Nothing but whitespace and calls since the start: a bare JSON call may begin here.
    at_start: bool,
    calls: usize,
    scan: Scan,
}

impl Default for ToolCallParser {
    fn default() -> Self {
        ToolCallParser::new()
    }
}

impl ToolCallParser {
    pub fn new() -> Self {
        ToolCallParser {
            buf: String::new(),
            mode: Mode::Text,
            at_start: true,
            calls: 0,
            scan: Scan::default(),
        }
    }

    /// Calls found so far.
    pub fn calls(&self) -> usize {
        self.calls
    }

    /// Feeds the next piece of text; returns what is settled (adjacent content merged).
    pub fn push(&mut self, text: &str) -> Vec<Piece> {
        self.buf.push_str(text);
        let mut out = Vec::new();
        while self.step(&mut out) {}
        out
    }

    /// The end of the text: whatever is held is settled (an unclosed block whose JSON is a
    /// complete call counts as a call; anything else is content).
    pub fn finish(mut self) -> Vec<Piece> {
        let mut out = Vec::new();
        while self.step(&mut out) {}
        let rest = std::mem::take(&mut self.buf);
        match self.mode {
            Mode::Block => match call_object(rest[OPEN.len()..].trim()) {
                Some(c) => self.emit_call(&mut out, c),
                None => emit(&mut out, rest),
            },
            // Whitespace after the last call is not content.
            Mode::Text if self.at_start && self.calls > 0 && rest.trim().is_empty() => {}
            Mode::Text | Mode::Json => emit(&mut out, rest),
        }
        out
    }

    /// One move on `buf`; false when it must wait for more text.
    fn step(&mut self, out: &mut Vec<Piece>) -> bool {
        match self.mode {
            Mode::Text => self.step_text(out),
            Mode::Block => self.step_block(out),
            Mode::Json => self.step_json(out),
        }
    }

    fn step_text(&mut self, out: &mut Vec<Piece>) -> bool {
        if self.at_start {
            let lead = self.buf.len() - self.buf.trim_start().len();
            let rest = &self.buf[lead..];
            match rest.chars().next() {
                None => return false, // whitespace only: wait
                Some('{') | Some('[') => {
                    self.mode = Mode::Json;
                    self.scan = Scan {
                        pos: lead,
                        ..Scan::default()
                    };
                    return true;
                }
                Some('<') if rest.starts_with(OPEN) => {
                    self.buf.drain(..lead);
                    self.mode = Mode::Block;
                    return true;
                }
                Some('<') if OPEN.starts_with(rest) => return false,
                Some(_) => self.at_start = false,
            }
        }
        if let Some(i) = self.buf.find(OPEN) {
            let before: String = self.buf.drain(..i).collect();
            emit(out, before);
            self.mode = Mode::Block;
            return true;
        }
        // Release all but a tail that could grow into the tag.
        let keep = partial_suffix(&self.buf, OPEN);
        let released: String = self.buf.drain(..self.buf.len() - keep).collect();
        emit(out, released);
        false
    }

    fn step_block(&mut self, out: &mut Vec<Piece>) -> bool {
        let inner = &self.buf[OPEN.len()..];
        let body = inner.trim_start();
        if !body.is_empty() && !body.starts_with('{') {
            // Not JSON after all: the tag is text, and the rest is read afresh.
            let tag: String = self.buf.drain(..OPEN.len()).collect();
            emit(out, tag);
            self.mode = Mode::Text;
            self.at_start = false;
            return true;
        }
        let Some(j) = inner.find(CLOSE) else {
            return false;
        };
        let end = OPEN.len() + j + CLOSE.len();
        let call = call_object(inner[..j].trim());
        let block: String = self.buf.drain(..end).collect();
        self.mode = Mode::Text;
        match call {
            Some(c) => self.emit_call(out, c),
            None => {
                emit(out, block);
                self.at_start = false;
            }
        }
        true
    }

    fn step_json(&mut self, out: &mut Vec<Piece>) -> bool {
        let lead = self.buf.len() - self.buf.trim_start().len();
        let Some(end) = self.scan_to_end() else {
            if could_start_call(&self.buf[lead..]) {
                return false;
            }
            self.mode = Mode::Text;
            self.at_start = false;
            return true; // released as text by step_text
        };
        let value = &self.buf[lead..end];
        let calls = serde_json::from_str::<Value>(value).ok().and_then(|v| bare_calls(&v));
        self.mode = Mode::Text;
        match calls {
            Some(cs) => {
                self.buf.drain(..end);
                for c in cs {
                    self.emit_call(out, c);
                }
            }
            None => self.at_start = false,
        }
        true
    }

    /// Advances `scan` over `buf`; the end offset of the value once its brackets close.
    fn scan_to_end(&mut self) -> Option<usize> {
        let s = &mut self.scan;
        let bytes = self.buf.as_bytes();
        while s.pos < bytes.len() {
            let b = bytes[s.pos];
            s.pos += 1;
            if s.in_str {
                match b {
                    _ if s.escaped => s.escaped = false,
                    b'\\' => s.escaped = true,
                    b'"' => s.in_str = false,
                    _ => {}
                }
                continue;
            }
            match b {
                b'"' => s.in_str = true,
                b'{' | b'[' => s.depth += 1,
                // A mismatched closer (`{]`) ends the value too; it then fails to parse.
                b'}' | b']' => {
                    s.depth = s.depth.saturating_sub(1);
                    if s.depth == 0 {
                        return Some(s.pos);
                    }
                }
                _ => {}
            }
        }
        None
    }

    fn emit_call(&mut self, out: &mut Vec<Piece>, c: ParsedCall) {
        self.calls += 1;
        self.at_start = true;
        out.push(Piece::Call(c));
    }
}

/// The content and calls of a whole text.
pub fn parse(text: &str) -> (String, Vec<ParsedCall>) {
    let mut p = ToolCallParser::new();
    let mut pieces = p.push(text);
    pieces.extend(p.finish());
    let mut content = String::new();
    let mut calls = Vec::new();
    for piece in pieces {
        match piece {
            Piece::Content(s) => content.push_str(&s),
            Piece::Call(c) => calls.push(c),
        }
    }
    (content, calls)
}

fn emit(out: &mut Vec<Piece>, s: String) {
    if s.is_empty() {
        return;
    }
    match out.last_mut() {
        Some(Piece::Content(prev)) => prev.push_str(&s),
        _ => out.push(Piece::Content(s)),
    }
}

/// The length of the longest tail of `s` that is a proper prefix of `tag`.
fn partial_suffix(s: &str, tag: &str) -> usize {
    (1..tag.len().min(s.len() + 1))
        .rev()
        .find(|&n| s.is_char_boundary(s.len() - n) && tag.starts_with(&s[s.len() - n..]))
        .unwrap_or(0)
}

/// Whether an incomplete JSON text may still become a call (or a list of calls): `{` then a
/// first key that is (a prefix of) `name`, `arguments` or `parameters`, after an optional `[`.
fn could_start_call(s: &str) -> bool {
    let s = match s.strip_prefix('[') {
        Some(rest) => rest.trim_start(),
        None => s,
    };
    let Some(obj) = s.strip_prefix('{') else {
        return s.is_empty();
    };
    let obj = obj.trim_start();
    let Some(key) = obj.strip_prefix('"') else {
        return obj.is_empty();
    };
    let keys = ["name", "arguments", "parameters"];
    match key.find('"') {
        Some(end) => keys.contains(&&key[..end]),
        None => keys.iter().any(|k| k.starts_with(key)),
    }
}

/// A `<tool_call>` body: one call object (its arguments may be absent: the tag says it is a call).
fn call_object(body: &str) -> Option<ParsedCall> {
    match serde_json::from_str::<Value>(body).ok()? {
        Value::Object(o) => call_from(&o, false),
        _ => None,
    }
}

/// A bare call or a non-empty list of them; `arguments` (or `parameters`) is required here, so
/// that ordinary JSON with a `name` stays content.
fn bare_calls(v: &Value) -> Option<Vec<ParsedCall>> {
    match v {
        Value::Object(o) => Some(vec![call_from(o, true)?]),
        Value::Array(items) if !items.is_empty() => items
            .iter()
            .map(|i| i.as_object().and_then(|o| call_from(o, true)))
            .collect(),
        _ => None,
    }
}

fn call_from(o: &Map<String, Value>, need_arguments: bool) -> Option<ParsedCall> {
    let name = o.get("name")?.as_str()?;
    if name.is_empty() {
        return None;
    }
    let arguments = match o.get("arguments").or_else(|| o.get("parameters")) {
        Some(a @ Value::Object(_)) => a.to_string(),
        // Arguments already encoded as a JSON string, as OpenAI sends them.
        Some(Value::String(s)) if matches!(serde_json::from_str(s), Ok(Value::Object(_))) => s.clone(),
        Some(_) => return None,
        None if need_arguments => return None,
        None => "{}".into(),
    };
    Some(ParsedCall {
        name: name.to_owned(),
        arguments,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const QWEN: &str = r#"{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}"#;
    const ARGS: &str = r#"{"city":"Paris","unit":"celsius"}"#;

    fn weather() -> ParsedCall {
        ParsedCall {
            name: "get_weather".into(),
            arguments: ARGS.into(),
        }
    }

    fn content(s: &str) -> Piece {
        Piece::Content(s.into())
    }

    /// Pieces with adjacent content merged (how a stream's pieces read once joined).
    fn merged(pieces: Vec<Piece>) -> Vec<Piece> {
        let mut out = Vec::new();
        for p in pieces {
            match p {
                Piece::Content(s) => emit(&mut out, s),
                c => out.push(c),
            }
        }
        out
    }

    /// All pieces of `text` fed in one go.
    fn whole(text: &str) -> Vec<Piece> {
        let mut p = ToolCallParser::new();
        let mut v = p.push(text);
        v.extend(p.finish());
        merged(v)
    }

    /// Fed as two pieces split at byte `at`.
    fn split(text: &str, at: usize) -> Vec<Piece> {
        let mut p = ToolCallParser::new();
        let mut v = p.push(&text[..at]);
        v.extend(p.push(&text[at..]));
        v.extend(p.finish());
        merged(v)
    }

    /// Fed one character at a time.
    fn chars(text: &str) -> Vec<Piece> {
        let mut p = ToolCallParser::new();
        let mut v = Vec::new();
        for c in text.chars() {
            v.extend(p.push(c.encode_utf8(&mut [0; 4])));
        }
        v.extend(p.finish());
        merged(v)
    }

    /// Every way of feeding `text` gives `want`.
    fn check(text: &str, want: &[Piece]) {
        assert_eq!(whole(text), want, "whole: {text:?}");
        assert_eq!(chars(text), want, "by char: {text:?}");
        for at in (0..=text.len()).filter(|&i| text.is_char_boundary(i)) {
            assert_eq!(split(text, at), want, "split at {at}: {text:?}");
        }
    }

    #[test]
    fn bare_json_call_as_qwen_answers() {
        check(QWEN, &[Piece::Call(weather())]);
        check(&format!("\n {QWEN}\n"), &[Piece::Call(weather())]);
        let params = r#"{"name": "get_weather", "parameters": {"city": "Paris", "unit": "celsius"}}"#;
        check(params, &[Piece::Call(weather())]);
        let string_args = r#"{"name": "get_weather", "arguments": "{\"city\":\"Paris\",\"unit\":\"celsius\"}"}"#;
        check(string_args, &[Piece::Call(weather())]);
        assert_eq!(parse(QWEN), (String::new(), vec![weather()]));
    }

    #[test]
    fn bare_json_list_and_consecutive_calls() {
        let time = ParsedCall {
            name: "time".into(),
            arguments: "{}".into(),
        };
        let list = format!(r#"[{QWEN}, {{"name": "time", "arguments": {{}}}}]"#);
        check(&list, &[Piece::Call(weather()), Piece::Call(time.clone())]);
        let two = format!("{QWEN}\n{{\"name\": \"time\", \"arguments\": {{}}}}");
        check(&two, &[Piece::Call(weather()), Piece::Call(time)]);
        check(&format!("{QWEN} Done."), &[Piece::Call(weather()), content(" Done.")]);
    }

    #[test]
    fn hermes_blocks_with_text_around() {
        let block = format!("<tool_call>\n{QWEN}\n</tool_call>");
        check(&block, &[Piece::Call(weather())]);
        let text = format!("Let me check.\n{block}\n{block} Back soon.");
        check(
            &text,
            &[
                content("Let me check.\n"),
                Piece::Call(weather()),
                Piece::Call(weather()),
                content(" Back soon."),
            ],
        );
        // Without arguments inside the tag: a call of none.
        check(
            r#"<tool_call>{"name": "now"}</tool_call>"#,
            &[Piece::Call(ParsedCall {
                name: "now".into(),
                arguments: "{}".into(),
            })],
        );
        // Unclosed at the end, but complete JSON: still the call.
        check(&format!("<tool_call>\n{QWEN}\n"), &[Piece::Call(weather())]);
    }

    #[test]
    fn malformed_calls_are_content_unchanged() {
        for text in [
            r#"{"name": "get_weather", "arguments": {"city": "Par"#, // cut off
            r#"{"name": "get_weather"}"#,                            // bare without arguments
            r#"{"name": 3, "arguments": {}}"#,
            r#"{"name": "f", "arguments": [1]}"#,
            "<tool_call>{\"name\": }</tool_call> after",
            "<tool_call>not json</tool_call>",
            "<tool_call>{\"name\": \"f\", \"arguments\": {",
            "[]",
            "[1, 2]",
            r#"{"answer": 42}"#,
            "{}",
            "<tool_ca",
            "a < b and <tool_call",
            "{ \"na",
        ] {
            let (c, calls) = parse(text);
            assert!(calls.is_empty(), "{text:?}: {calls:?}");
            assert_eq!(c, text);
            for at in (0..=text.len()).filter(|&i| text.is_char_boundary(i)) {
                assert_eq!(split(text, at), [content(text)], "split at {at}: {text:?}");
            }
        }
        // A stray closer after a call: the call is taken, the closer is content.
        assert_eq!(
            parse(r#"{"name": "f", "arguments": {}}}"#),
            (
                "}".into(),
                vec![ParsedCall {
                    name: "f".into(),
                    arguments: "{}".into()
                }]
            )
        );
    }

    #[test]
    fn plain_text_is_released_at_once() {
        let mut p = ToolCallParser::new();
        assert_eq!(p.push("Hello"), [content("Hello")]);
        assert_eq!(p.push(" world <tool"), [content(" world ")]);
        assert_eq!(p.push("box>"), [content("<toolbox>")]);
        assert_eq!(
            p.push("{\"name\": 1}"),
            [content("{\"name\": 1}")],
            "a `{{` mid-reply is text"
        );
        assert!(p.finish().is_empty());

        // A JSON reply that is not a call is released as soon as its first key says so.
        let mut p = ToolCallParser::new();
        assert!(p.push("{\"na").is_empty());
        assert_eq!(p.push("me2\": 1"), [content("{\"name2\": 1")]);
        let mut p = ToolCallParser::new();
        assert_eq!(p.push("[1"), [content("[1")]);
        let mut p = ToolCallParser::new();
        assert!(p.push("  ").is_empty(), "leading whitespace waits");
        assert_eq!(p.push("Hi"), [content("  Hi")]);
        let mut p = ToolCallParser::new();
        assert_eq!(p.push("<tool_call>Sure"), [content("<tool_call>Sure")]);
        assert_eq!(whole("   "), [content("   ")]);
        assert_eq!(whole(""), []);
    }

    #[test]
    fn held_text_while_a_call_may_follow() {
        let mut p = ToolCallParser::new();
        assert!(p.push("{\"name\": \"get_weather\", ").is_empty());
        assert!(
            p.push("\"arguments\": {\"city\": \"Paris}\"").is_empty(),
            "a brace in a string"
        );
        assert_eq!(
            p.push("}}<tool"),
            [Piece::Call(ParsedCall {
                name: "get_weather".into(),
                arguments: r#"{"city":"Paris}"}"#.into()
            })]
        );
        assert_eq!(p.calls(), 1);
        assert_eq!(p.finish(), [content("<tool")]);
    }

    #[test]
    fn multibyte_text_around_a_block() {
        let text = format!("Voilà — ☂ <tool_call>{QWEN}</tool_call>é");
        check(&text, &[content("Voilà — ☂ "), Piece::Call(weather()), content("é")]);
    }
}
