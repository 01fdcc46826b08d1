//! Tools on the chat endpoint: the request's `tools` and `tool_choice` checked, the history's
//! calls read, and the answer's calls (found by `minfer::toolcall`) written as OpenAI's
//! `tool_calls`, whole or as stream deltas.
//!
//! `tool_choice`: `none` renders without tools and parses nothing; `auto`, `required` and a
//! named function render the tools and parse the answer; under `required` or a named choice
//! generation is constrained to a bare JSON call ([`Tools::format`]).
//!
//! A chat template that renders no tools (SmolLM2's) gets them in llama.cpp's generic format
//! (`minfer::chat::with_generic_tools`): a system message lists them, and the answer is
//! constrained to JSON, a call or `{"response": …}`, whose reply becomes the content.

use serde_json::{json, Map, Value};

use minfer::chat::{FunctionCall, ToolCall};
use minfer::toolcall::{ParsedCall, Piece, ToolCallParser};

use super::{reject, Reject};

#[derive(Clone, Debug, PartialEq)]
enum Choice {
    Auto,
    Required,
    Named(String),
}

/// The tools a request renders with and whose calls its answer is parsed for.
#[derive(Clone, Debug)]
pub(super) struct Tools {
    /// As sent (`[{"type": "function", "function": {...}}]`), for the template.
    pub(super) list: Vec<Value>,
    choice: Choice,
    /// The template renders no tools: the generic format (the module's header).
    pub(super) generic: bool,
}

/// How an answer with tools is read.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Reading {
    /// Generation was constrained to a call (`required`, a named tool): text that is not one
    /// is a call cut short, never content.
    pub(super) forced: bool,
    /// The generic format: a reply is `{"response": …}`, its string the content.
    pub(super) generic: bool,
}

impl Tools {
    /// The request's tools, or `None` when it has none or chose `none`; a 400 naming the
    /// offending `tools[i]` or `tool_choice`.
    pub(super) fn from_request(tools: Option<&Value>, choice: Option<&Value>) -> Result<Option<Tools>, Reject> {
        let list = match tools {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(list)) => list.clone(),
            Some(_) => return Err(reject("tools must be a list of function tools", "tools")),
        };
        let names = list
            .iter()
            .enumerate()
            .map(|(i, t)| function_name(i, t))
            .collect::<Result<Vec<_>, _>>()?;
        let choice = match choice {
            None | Some(Value::Null) => Choice::Auto,
            Some(Value::String(s)) => match s.as_str() {
                "none" => return Ok(None),
                "auto" => Choice::Auto,
                "required" => Choice::Required,
                other => {
                    return Err(reject(
                        format!("tool_choice '{other}' is not one of none, auto, required or a function"),
                        "tool_choice",
                    ))
                }
            },
            Some(v) => {
                let name = (v.get("type").and_then(Value::as_str) == Some("function"))
                    .then(|| v.pointer("/function/name").and_then(Value::as_str))
                    .flatten()
                    .ok_or_else(|| {
                        reject(
                            "tool_choice must be none, auto, required or {\"type\": \"function\", \"function\": {\"name\": ...}}",
                            "tool_choice",
                        )
                    })?;
                if !names.contains(&name) {
                    return Err(reject(
                        format!("tool_choice names '{name}', which is not among tools"),
                        "tool_choice",
                    ));
                }
                Choice::Named(name.to_owned())
            }
        };
        if list.is_empty() {
            if choice != Choice::Auto {
                return Err(reject("tool_choice requires tools", "tool_choice"));
            }
            return Ok(None);
        }
        Ok(Some(Tools {
            list,
            choice,
            generic: false,
        }))
    }

    pub(super) fn reading(&self) -> Reading {
        Reading {
            forced: self.choice != Choice::Auto,
            generic: self.generic,
        }
    }

    /// The `response_format` generation is constrained to, set on a request that has no format
    /// of its own: for `required` and named choices the call (a JSON schema of `{"name",
    /// "arguments"}` over the allowed tools); in the generic format also under `auto`, a call
    /// or `{"response": …}`.
    pub(super) fn format(&self) -> Option<Value> {
        let allowed: Vec<&Value> = match &self.choice {
            Choice::Auto if !self.generic => return None,
            Choice::Auto | Choice::Required => self.list.iter().collect(),
            Choice::Named(n) => self
                .list
                .iter()
                .filter(|t| t.pointer("/function/name").and_then(Value::as_str) == Some(n))
                .collect(),
        };
        let one = |t: &Value| {
            let name = t.pointer("/function/name").cloned().unwrap_or(Value::Null);
            let mut params = t
                .pointer("/function/parameters")
                .cloned()
                .unwrap_or_else(|| json!({"type": "object"}));
            close_objects(&mut params);
            json!({
                "type": "object",
                "properties": {"name": {"const": name}, "arguments": params},
                "required": ["name", "arguments"],
                "additionalProperties": false,
            })
        };
        let reply = self.choice == Choice::Auto;
        let schema = minfer::chat::generic_tools_schema(allowed.iter().map(|t| one(t)).collect(), reply);
        Some(json!({"type": "json_schema", "json_schema": {"name": "tool_call", "schema": schema}}))
    }
}

/// Closes every object of a JSON schema that does not say whether it is open
/// (`additionalProperties: false`), through properties, items and combinators: a forced call
/// then carries exactly the keys the function names, where an open schema would let a small
/// model go on adding its own.
fn close_objects(schema: &mut Value) {
    let Some(o) = schema.as_object_mut() else {
        return;
    };
    let is_object = o.get("type").and_then(Value::as_str) == Some("object") || o.contains_key("properties");
    if is_object && !o.contains_key("additionalProperties") {
        o.insert("additionalProperties".into(), Value::Bool(false));
    }
    for key in ["properties", "patternProperties", "$defs", "definitions"] {
        if let Some(Value::Object(m)) = o.get_mut(key) {
            m.values_mut().for_each(close_objects);
        }
    }
    for key in ["items", "additionalItems", "not"] {
        if let Some(v) = o.get_mut(key) {
            close_objects(v);
        }
    }
    for key in ["anyOf", "oneOf", "allOf", "prefixItems"] {
        if let Some(Value::Array(a)) = o.get_mut(key) {
            a.iter_mut().for_each(close_objects);
        }
    }
}

/// `tools[i]`'s function name, or a 400 naming `tools[i]`.
fn function_name(i: usize, t: &Value) -> Result<&str, Reject> {
    let param = format!("tools[{i}]");
    let bad = |why: &str| reject(format!("{param}: {why}"), &param);
    if t.get("type").and_then(Value::as_str) != Some("function") {
        return Err(bad(
            "only {\"type\": \"function\", \"function\": {...}} tools are supported",
        ));
    }
    let Some(f) = t.get("function").and_then(Value::as_object) else {
        return Err(bad("function must be an object"));
    };
    let name = match f.get("name").and_then(Value::as_str) {
        Some(n) if !n.is_empty() => n,
        _ => return Err(bad("function.name must be a non-empty string")),
    };
    if f.get("description").is_some_and(|d| !d.is_string() && !d.is_null()) {
        return Err(bad("function.description must be a string"));
    }
    if f.get("parameters").is_some_and(|p| !p.is_object() && !p.is_null()) {
        return Err(bad("function.parameters must be a JSON schema object"));
    }
    Ok(name)
}

/// `chat_template_kwargs`: an object of extra template variables, or a 400.
pub(super) fn template_kwargs(v: Option<&Value>) -> Result<Map<String, Value>, Reject> {
    match v {
        None | Some(Value::Null) => Ok(Map::new()),
        Some(Value::Object(m)) => Ok(m.clone()),
        Some(_) => Err(reject("chat_template_kwargs must be an object", "chat_template_kwargs")),
    }
}

/// `messages[i].tool_calls` (an assistant's earlier calls) for the template; arguments stay as
/// sent (a JSON string or an object).
pub(super) fn history_calls(i: usize, calls: Option<&Value>) -> Result<Vec<ToolCall>, Reject> {
    let list = match calls {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(l)) => l,
        Some(_) => return Err(reject(format!("messages[{i}].tool_calls must be a list"), "messages")),
    };
    list.iter()
        .enumerate()
        .map(|(j, c)| {
            let bad = |why: &str| reject(format!("messages[{i}].tool_calls[{j}]: {why}"), "messages");
            let name = match c.pointer("/function/name").and_then(Value::as_str) {
                Some(n) if !n.is_empty() => n,
                _ => return Err(bad("function.name must be a non-empty string")),
            };
            let arguments = match c.pointer("/function/arguments") {
                None | Some(Value::Null) => Value::String("{}".into()),
                Some(a @ (Value::String(_) | Value::Object(_))) => a.clone(),
                Some(_) => return Err(bad("function.arguments must be a JSON string or an object")),
            };
            let id = match c.get("id") {
                None | Some(Value::Null) => None,
                Some(Value::String(s)) => Some(s.clone()),
                Some(_) => return Err(bad("id must be a string")),
            };
            Ok(ToolCall {
                id,
                kind: "function".into(),
                function: FunctionCall {
                    name: name.to_owned(),
                    arguments,
                },
            })
        })
        .collect()
}

/// OpenAI's `tool_calls[k]` for a parsed call.
fn call_json(id: String, c: &ParsedCall) -> Value {
    json!({"id": id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}})
}

/// The answer's `message` and whether it made calls: `content` is the text around the calls
/// (null when there is none; in the generic format a reply's string) and `tool_calls` the
/// calls, ids `{ids}_{k}`.
pub(super) fn message(text: &str, ids: &str, generic: bool) -> (Value, bool) {
    let (content, calls) = minfer::toolcall::parse(text);
    if calls.is_empty() {
        let content = match generic {
            true => minfer::chat::generic_response(&content),
            false => content,
        };
        return (json!({"role": "assistant", "content": content}), false);
    }
    let content = if content.trim().is_empty() {
        Value::Null
    } else {
        Value::String(content)
    };
    let calls: Vec<Value> = calls
        .iter()
        .enumerate()
        .map(|(k, c)| call_json(format!("{ids}_{k}"), c))
        .collect();
    (
        json!({"role": "assistant", "content": content, "tool_calls": calls}),
        true,
    )
}

/// A streamed answer's deltas: content as it is released, each call as a header delta
/// (`index`, `id`, `type`, `function.name`, empty `arguments`) then its arguments.
pub(super) struct CallStream {
    parser: ToolCallParser,
    ids: String,
    calls: usize,
    reading: Reading,
    /// The generic format's content, held until the end: the reply inside `{"response": …}`.
    held: String,
}

impl CallStream {
    pub(super) fn new(ids: String, reading: Reading) -> Self {
        CallStream {
            parser: ToolCallParser::new(),
            ids,
            calls: 0,
            reading,
            held: String::new(),
        }
    }

    /// Whether the answer has made a call (its finish reason is then `tool_calls`).
    pub(super) fn called(&self) -> bool {
        self.calls > 0
    }

    /// The deltas for the next piece of generated text, in order.
    pub(super) fn push(&mut self, text: &str) -> Vec<Value> {
        let pieces = self.parser.push(text);
        self.deltas(pieces)
    }

    /// The deltas for the text left at the end (`rest`) and what was held back.
    pub(super) fn end(&mut self, rest: &str) -> Vec<Value> {
        let mut pieces = self.parser.push(rest);
        pieces.extend(std::mem::take(&mut self.parser).finish());
        let mut out = self.deltas(pieces);
        let held = std::mem::take(&mut self.held);
        if !held.trim().is_empty() && !self.called() {
            out.push(json!({"content": minfer::chat::generic_response(&held)}));
        }
        out
    }

    fn deltas(&mut self, pieces: Vec<Piece>) -> Vec<Value> {
        let mut out = Vec::new();
        for p in pieces {
            match p {
                Piece::Content(c) if c.is_empty() || self.reading.forced => {}
                Piece::Content(c) if self.reading.generic => self.held.push_str(&c),
                // Whitespace after a call is not content.
                Piece::Content(c) if self.called() && c.trim().is_empty() => {}
                Piece::Content(c) => out.push(json!({"content": c})),
                Piece::Call(c) => {
                    let index = self.calls;
                    self.calls += 1;
                    let id = format!("{}_{index}", self.ids);
                    out.push(json!({"tool_calls": [{
                        "index": index, "id": id, "type": "function",
                        "function": {"name": c.name, "arguments": ""},
                    }]}));
                    out.push(json!({"tool_calls": [{"index": index, "function": {"arguments": c.arguments}}]}));
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn weather() -> Value {
        json!({"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}})
    }

    /// The `param` of a 400.
    fn param(r: axum::response::Response) -> Value {
        assert_eq!(r.status(), axum::http::StatusCode::BAD_REQUEST);
        let body = futures_util::FutureExt::now_or_never(axum::body::to_bytes(r.into_body(), 1 << 16))
            .expect("ready")
            .expect("body");
        serde_json::from_slice::<Value>(&body).unwrap()["error"]["param"].clone()
    }

    #[test]
    fn tools_and_choice_are_checked() {
        let tools = json!([weather()]);
        let t = Tools::from_request(Some(&tools), None).unwrap().unwrap();
        assert_eq!(t.list, [weather()]);
        assert!(t.format().is_none());
        assert!(Tools::from_request(Some(&tools), Some(&json!("none")))
            .unwrap()
            .is_none());
        assert!(Tools::from_request(None, Some(&json!("auto"))).unwrap().is_none());
        let named = json!({"type": "function", "function": {"name": "get_weather"}});
        let t = Tools::from_request(Some(&tools), Some(&named)).unwrap().unwrap();
        let f = t.format().unwrap();
        assert_eq!(
            f.pointer("/json_schema/schema/properties/name/const"),
            Some(&json!("get_weather"))
        );
        // The call and its arguments are closed: no key beyond the function's.
        assert_eq!(
            f.pointer("/json_schema/schema/additionalProperties"),
            Some(&json!(false))
        );
        assert_eq!(
            f.pointer("/json_schema/schema/properties/arguments/additionalProperties"),
            Some(&json!(false))
        );
        // Nested objects too, and a schema that opens itself stays open.
        let mut s = json!({"type": "object", "properties": {
            "a": {"type": "object", "properties": {"b": {"type": "string"}}},
            "c": {"type": "array", "items": {"properties": {"d": {}}}},
            "e": {"type": "object", "additionalProperties": true},
            "f": {"anyOf": [{"type": "object"}, {"type": "null"}]},
        }});
        close_objects(&mut s);
        for (path, want) in [
            ("/additionalProperties", json!(false)),
            ("/properties/a/additionalProperties", json!(false)),
            ("/properties/c/items/additionalProperties", json!(false)),
            ("/properties/e/additionalProperties", json!(true)),
            ("/properties/f/anyOf/0/additionalProperties", json!(false)),
        ] {
            assert_eq!(s.pointer(path), Some(&want), "{path}: {s}");
        }
        assert_eq!(s.pointer("/properties/f/anyOf/1/additionalProperties"), None);
        let bad_tools = [
            json!("x"),
            json!([weather(), {"type": "code_interpreter"}]),
            json!([weather(), {"type": "function"}]),
            json!([weather(), {"type": "function", "function": {"name": ""}}]),
            json!([weather(), {"type": "function", "function": {"name": "f", "parameters": 3}}]),
        ];
        for (k, b) in bad_tools.iter().enumerate() {
            let want = if k == 0 { "tools" } else { "tools[1]" };
            assert_eq!(
                param(*Tools::from_request(Some(b), None).unwrap_err()),
                json!(want),
                "{b}"
            );
        }
        for c in [
            json!("always"),
            json!({"type": "function", "function": {"name": "other"}}),
            json!({"function": {"name": "get_weather"}}),
        ] {
            assert_eq!(
                param(*Tools::from_request(Some(&tools), Some(&c)).unwrap_err()),
                json!("tool_choice")
            );
        }
        assert_eq!(
            param(*Tools::from_request(None, Some(&json!("required"))).unwrap_err()),
            json!("tool_choice")
        );
    }

    /// A template without tools: `auto` is constrained too, to a call or a reply, and the
    /// reply's string is the content, whole or (held to the end) streamed.
    #[test]
    fn the_generic_format_constrains_auto_and_unwraps_replies() {
        let tools = json!([weather()]);
        let mut t = Tools::from_request(Some(&tools), None).unwrap().unwrap();
        t.generic = true;
        let f = t.format().expect("auto is constrained in the generic format");
        let any = f
            .pointer("/json_schema/schema/anyOf")
            .and_then(Value::as_array)
            .unwrap();
        assert_eq!(any.len(), 2, "{f}");
        assert_eq!(any[0].pointer("/properties/name/const"), Some(&json!("get_weather")));
        assert_eq!(any[1]["required"], json!(["response"]));
        let r = t.reading();
        assert!(r.generic && !r.forced);

        let reply = r#"{"response": "It is sunny."}"#;
        assert_eq!(
            message(reply, "c", true),
            (json!({"role": "assistant", "content": "It is sunny."}), false)
        );
        let call = r#"{"name": "get_weather", "arguments": {"city": "Paris"}}"#;
        assert!(message(call, "c", true).1);
        let mut s = CallStream::new("c".into(), r);
        let mut deltas = Vec::new();
        for ch in reply.chars() {
            deltas.extend(s.push(&ch.to_string()));
        }
        assert!(deltas.is_empty(), "held to the end: {deltas:?}");
        deltas.extend(s.end(""));
        assert_eq!(deltas, [json!({"content": "It is sunny."})]);
    }

    #[test]
    fn answers_become_tool_calls() {
        let qwen = r#"{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}"#;
        let (m, called) = message(qwen, "call_7", false);
        assert!(called);
        assert_eq!(
            m,
            json!({"role": "assistant", "content": null, "tool_calls": [{"id": "call_7_0", "type": "function",
                "function": {"name": "get_weather", "arguments": r#"{"city":"Paris","unit":"celsius"}"#}}]})
        );
        assert_eq!(
            message("Hi", "c", false).0,
            json!({"role": "assistant", "content": "Hi"})
        );

        let mut s = CallStream::new("call_7".into(), Reading::default());
        let mut deltas = Vec::new();
        for ch in qwen.chars() {
            deltas.extend(s.push(&ch.to_string()));
        }
        deltas.extend(s.end("\n"));
        assert!(s.called());
        assert_eq!(
            deltas,
            [
                json!({"tool_calls": [{"index": 0, "id": "call_7_0", "type": "function",
                    "function": {"name": "get_weather", "arguments": ""}}]}),
                json!({"tool_calls": [{"index": 0, "function": {"arguments": r#"{"city":"Paris","unit":"celsius"}"#}}]}),
            ]
        );

        // A forced call cut short: no content deltas, no call.
        let mut s = CallStream::new(
            "call_9".into(),
            Reading {
                forced: true,
                generic: false,
            },
        );
        let mut deltas = s.push(r#"{"name": "get_weather", "arguments": {"ci"#);
        deltas.extend(s.end(""));
        assert!(deltas.is_empty() && !s.called(), "{deltas:?}");

        // Text around a Hermes block: content deltas for the text only, indices per call.
        let mut s = CallStream::new("call_8".into(), Reading::default());
        let mut deltas = s.push("Sure. <tool_");
        deltas.extend(s.push(&format!("call>{qwen}</tool_call>\n<tool_call>{qwen}")));
        deltas.extend(s.end("</tool_call> "));
        let kinds: Vec<String> = deltas
            .iter()
            .map(|d| match (&d["content"], &d["tool_calls"][0]) {
                (Value::String(c), _) => format!("content {c:?}"),
                (_, t) => format!("call {} {}", t["index"], t["id"]),
            })
            .collect();
        assert_eq!(
            kinds,
            [
                r#"content "Sure. ""#,
                r#"call 0 "call_8_0""#,
                "call 0 null",
                r#"call 1 "call_8_1""#,
                "call 1 null"
            ]
        );
    }

    #[test]
    fn history_calls_keep_arguments_as_sent() {
        let calls = json!([{"id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]);
        let got = history_calls(2, Some(&calls)).unwrap();
        assert_eq!(got[0].function.arguments, json!("{\"city\": \"Paris\"}"));
        assert_eq!(got[0].id.as_deref(), Some("call_1"));
        let bad = json!([{"function": {"name": "f", "arguments": 3}}]);
        let r = *history_calls(2, Some(&bad)).unwrap_err();
        assert_eq!(r.status(), axum::http::StatusCode::BAD_REQUEST);
    }
}
