//! Chat templates: a model's Jinja `tokenizer.chat_template`, rendered the way HF transformers'
//! `apply_chat_template` renders it with jinja2 (`transformers/utils/chat_template_utils.py`):
//! `trim_blocks` and `lstrip_blocks` on, `raise_exception`, `strftime_now`, a `tojson` that is
//! Python's `json.dumps`, and Python's str/list/dict methods through minijinja-contrib's pycompat.
//!
//! Known differences from jinja2, by the minijinja features this crate enables: `{% break %}` /
//! `{% continue %}` need minijinja's `loop_controls` feature, and dicts iterate in key order
//! rather than insertion order unless its `preserve_order` feature is on.

use std::time::{SystemTime, UNIX_EPOCH};

use minijinja::value::{Kwargs, Value, ValueKind};
use minijinja::{context, Environment, ErrorKind};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

const NAME: &str = "chat_template";

/// One turn, with the optional fields OpenAI messages carry: an assistant's `tool_calls`, a
/// `tool` message's `tool_call_id`, a participant's `name`. Absent fields are left out of the
/// template context (as transformers does), so `message.tool_calls is defined` is false.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatMessage {
    pub role: String,
    #[serde(default, deserialize_with = "null_as_empty")]
    pub content: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl ChatMessage {
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        ChatMessage {
            role: role.into(),
            content: content.into(),
            ..ChatMessage::default()
        }
    }
}

/// OpenAI sends `"content": null` beside `tool_calls`.
fn null_as_empty<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<String, D::Error> {
    Ok(Option::<String>::deserialize(d)?.unwrap_or_default())
}

/// An assistant's call: `{"id", "type": "function", "function": {"name", "arguments"}}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(rename = "type", default = "function_type")]
    pub kind: String,
    pub function: FunctionCall,
}

fn function_type() -> String {
    "function".into()
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FunctionCall {
    pub name: String,
    /// A JSON string as OpenAI sends it, or an object. Rendered as an object when the string
    /// parses (llama.cpp does the same), since templates such as Qwen's write
    /// `tool_call.arguments | tojson` and would otherwise print a quoted string.
    pub arguments: serde_json::Value,
}

/// A conversation with what the template may use besides the messages: the request's tools
/// (OpenAI's `[{"type": "function", "function": {...}}]`, passed to the template as they
/// came) and extra template variables (`chat_template_kwargs`, e.g. `enable_thinking`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Chat {
    pub messages: Vec<ChatMessage>,
    pub tools: Vec<serde_json::Value>,
    pub kwargs: serde_json::Map<String, serde_json::Value>,
}

impl Chat {
    pub fn new(messages: Vec<ChatMessage>) -> Self {
        Chat {
            messages,
            ..Chat::default()
        }
    }
}

/// The tools of `chat` for a template that renders none (llama.cpp's "generic" tool format): a
/// system message (the first one, extended, or a new one) lists them as JSON and asks for a JSON
/// answer, either a call `{"name": …, "arguments": {…}}` or `{"response": "…"}`, which the
/// caller constrains generation to ([`generic_tools_schema`]) and reads back
/// ([`generic_response`]). The tools themselves are left out of `chat.tools`.
pub fn with_generic_tools(chat: &Chat) -> Chat {
    let list = serde_json::to_string_pretty(&chat.tools).unwrap_or_default();
    let text = format!(
        "You are a helpful assistant with access to these tools:\n{list}\n\n\
         When a tool can answer the user's request, call it by replying with JSON only: \
         {{\"name\": \"<tool name>\", \"arguments\": {{<its arguments>}}}}. \
         Otherwise reply with JSON: {{\"response\": \"<your answer>\"}}."
    );
    let mut messages = chat.messages.clone();
    match messages.first_mut() {
        Some(m) if m.role == "system" => m.content = format!("{}\n\n{text}", m.content),
        _ => messages.insert(0, ChatMessage::new("system", text)),
    }
    Chat {
        messages,
        tools: Vec::new(),
        kwargs: chat.kwargs.clone(),
    }
}

/// The JSON schema of a generic-format answer: one of `calls` (the call schemas the tools
/// allow, `{"name", "arguments"}` each) or, where `reply` is allowed, `{"response": string}`.
pub fn generic_tools_schema(calls: Vec<serde_json::Value>, reply: bool) -> serde_json::Value {
    let mut any = calls;
    if reply {
        any.push(serde_json::json!({
            "type": "object",
            "properties": {"response": {"type": "string"}},
            "required": ["response"],
            "additionalProperties": false,
        }));
    }
    match any.len() {
        1 => any.pop().unwrap_or_default(),
        _ => serde_json::json!({ "anyOf": any }),
    }
}

/// The reply of a generic-format answer that is not a call: the string of
/// `{"response": "…"}` (as far as it goes where `max_tokens` cut it), or the text as it is
/// where it is not that.
pub fn generic_response(text: &str) -> String {
    if let Ok(serde_json::Value::Object(o)) = serde_json::from_str::<serde_json::Value>(text.trim()) {
        return match (o.len(), o.get("response")) {
            (1, Some(serde_json::Value::String(s))) => s.clone(),
            _ => text.to_string(),
        };
    }
    // Cut short: the string's characters so far, its escapes undone.
    let open = text
        .trim_start()
        .strip_prefix('{')
        .map(str::trim_start)
        .and_then(|t| t.strip_prefix("\"response\""))
        .map(str::trim_start)
        .and_then(|t| t.strip_prefix(':'))
        .map(str::trim_start)
        .and_then(|t| t.strip_prefix('"'));
    let Some(rest) = open else {
        return text.to_string();
    };
    // Whole escapes only: a trailing backslash (or a cut \uXXXX) is dropped.
    let mut end = rest.len();
    while end > 0 {
        if let Ok(s) = serde_json::from_str::<String>(&format!("\"{}\"", &rest[..end])) {
            return s;
        }
        end = rest[..end].char_indices().next_back().map_or(0, |(i, _)| i);
    }
    String::new()
}

/// The messages as the template sees them: string arguments that hold JSON become objects.
fn template_messages(messages: &[ChatMessage]) -> Value {
    if messages.iter().all(|m| m.tool_calls.is_empty()) {
        return Value::from_serialize(messages);
    }
    let mut ms = messages.to_vec();
    for call in ms.iter_mut().flat_map(|m| m.tool_calls.iter_mut()) {
        if let serde_json::Value::String(s) = &call.function.arguments {
            if let Ok(v @ serde_json::Value::Object(_)) = serde_json::from_str(s) {
                call.function.arguments = v;
            }
        }
    }
    Value::from_serialize(&ms)
}

/// A chat template compiled once; rendering is cheap.
pub struct ChatTemplate {
    env: Environment<'static>,
    bos_token: String,
    eos_token: String,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("bos_token", &self.bos_token)
            .field("eos_token", &self.eos_token)
            .finish_non_exhaustive()
    }
}

impl ChatTemplate {
    /// Compiles `source`; a syntax error is an [`Error::Template`] naming the line.
    pub fn new(source: &str, bos_token: &str, eos_token: &str) -> Result<Self> {
        let mut env = Environment::new();
        // Whitespace control is applied at compile time: set it before adding the template.
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", |fmt: String| strftime(&fmt, SystemTime::now()));
        env.add_filter("tojson", tojson);
        env.add_template_owned(NAME, source.to_owned())
            .map_err(template_error)?;
        Ok(ChatTemplate {
            env,
            bos_token: bos_token.to_owned(),
            eos_token: eos_token.to_owned(),
        })
    }

    /// Renders the conversation, with the assistant header appended if `add_generation_prompt`.
    pub fn render(&self, messages: &[ChatMessage], add_generation_prompt: bool) -> Result<String> {
        self.render_messages(messages, &[], &serde_json::Map::new(), add_generation_prompt)
    }

    /// Renders a conversation with its tools and extra variables.
    pub fn render_chat(&self, chat: &Chat, add_generation_prompt: bool) -> Result<String> {
        self.render_messages(&chat.messages, &chat.tools, &chat.kwargs, add_generation_prompt)
    }

    /// Whether the template shows the model a request's tools: a probe tool's name appears in
    /// its rendering. Where it does not (SmolLM2's, Gemma's), tools go through
    /// [`with_generic_tools`] instead of vanishing.
    pub fn renders_tools(&self) -> bool {
        const PROBE: &str = "minfer_probe_tool_3c9e";
        let chat = Chat {
            messages: vec![ChatMessage::new("user", "?")],
            tools: vec![serde_json::json!({
                "type": "function",
                "function": {"name": PROBE, "description": PROBE, "parameters": {"type": "object", "properties": {}}},
            })],
            ..Chat::default()
        };
        self.render_chat(&chat, true).is_ok_and(|s| s.contains(PROBE))
    }

    fn render_messages(
        &self,
        messages: &[ChatMessage],
        tools: &[serde_json::Value],
        kwargs: &serde_json::Map<String, serde_json::Value>,
        add_generation_prompt: bool,
    ) -> Result<String> {
        let tmpl = self.env.get_template(NAME).map_err(template_error)?;
        // No tools is `none`, as transformers passes it: templates test `{% if tools %}`.
        let tools = if tools.is_empty() {
            Value::from(())
        } else {
            Value::from_serialize(tools)
        };
        // The named variables win over a kwarg of the same name.
        tmpl.render(context! {
            messages => template_messages(messages),
            add_generation_prompt => add_generation_prompt,
            bos_token => &self.bos_token,
            eos_token => &self.eos_token,
            tools => tools,
            // What llama.cpp's common/chat.cpp passes: "%d %b %Y", e.g. "26 Jul 2024".
            date_string => strftime("%d %b %Y", SystemTime::now()),
            ..Value::from_serialize(kwargs)
        })
        .map_err(template_error)
    }
}

/// minijinja's message (kind, detail, "(in chat_template:LINE)") and its causes.
fn template_error(e: minijinja::Error) -> Error {
    let mut msg = e.to_string();
    let mut cause = std::error::Error::source(&e);
    while let Some(c) = cause {
        msg.push_str(": ");
        msg.push_str(&c.to_string());
        cause = c.source();
    }
    Error::Template(msg)
}

fn raise_exception(msg: String) -> std::result::Result<Value, minijinja::Error> {
    Err(minijinja::Error::new(ErrorKind::InvalidOperation, msg))
}

// --- tojson: Python's json.dumps ---------------------------------------------------------------

/// transformers' override of jinja2's `tojson`: `json.dumps(x, ensure_ascii=False, indent=None,
/// separators=None, sort_keys=False)`, without jinja2's HTML escaping.
fn tojson(value: &Value, kwargs: Kwargs) -> std::result::Result<String, minijinja::Error> {
    let indent = match kwargs.get::<Option<Value>>("indent")? {
        Some(v) if v.is_none() => None,
        Some(v) => match (v.as_i64(), v.as_str()) {
            (Some(n), _) => Some(" ".repeat(n.clamp(0, 64) as usize)),
            (None, Some(s)) => Some(s.to_owned()),
            _ => return Err(minijinja::Error::new(ErrorKind::InvalidOperation, "tojson: bad indent")),
        },
        None => None,
    };
    let (item_sep, key_sep) = match kwargs.get::<Option<Vec<String>>>("separators")? {
        Some(s) if s.len() == 2 => (s[0].clone(), s[1].clone()),
        Some(s) => {
            let msg = format!("tojson: separators must be a pair, got {s:?}");
            return Err(minijinja::Error::new(ErrorKind::InvalidOperation, msg));
        }
        // Python's default: ", " without indent, "," with one.
        None if indent.is_some() => (",".into(), ": ".into()),
        None => (", ".into(), ": ".into()),
    };
    let json = Json {
        indent,
        item_sep,
        key_sep,
        sort_keys: kwargs.get::<Option<bool>>("sort_keys")?.unwrap_or(false),
        ensure_ascii: kwargs.get::<Option<bool>>("ensure_ascii")?.unwrap_or(false),
    };
    kwargs.assert_all_used()?;
    let mut out = String::new();
    json.write(&mut out, value, 0)?;
    Ok(out)
}

struct Json {
    indent: Option<String>,
    item_sep: String,
    key_sep: String,
    sort_keys: bool,
    ensure_ascii: bool,
}

impl Json {
    fn write(&self, out: &mut String, v: &Value, depth: usize) -> std::result::Result<(), minijinja::Error> {
        if depth > 256 {
            return Err(minijinja::Error::new(
                ErrorKind::InvalidOperation,
                "tojson: nesting too deep",
            ));
        }
        match v.kind() {
            ValueKind::Undefined | ValueKind::None => out.push_str("null"),
            ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
            ValueKind::Number if v.is_integer() => out.push_str(&v.to_string()),
            ValueKind::Number => out.push_str(&py_float_repr(f64::try_from(v.clone())?)),
            ValueKind::String => self.write_str(out, v.as_str().unwrap_or_default()),
            ValueKind::Map => {
                let mut keys: Vec<Value> = v.try_iter()?.collect();
                if self.sort_keys {
                    keys.sort();
                }
                let mut items = Vec::with_capacity(keys.len());
                for k in keys {
                    let item = v.get_item(&k)?;
                    items.push((k, item));
                }
                self.write_container(out, ('{', '}'), &items, depth, |out, (k, item)| {
                    match k.as_str() {
                        Some(s) => self.write_str(out, s),
                        None => self.write_str(out, &k.to_string()),
                    }
                    out.push_str(&self.key_sep);
                    self.write(out, item, depth + 1)
                })?;
            }
            ValueKind::Seq | ValueKind::Iterable => {
                let items: Vec<Value> = v.try_iter()?.collect();
                self.write_container(out, ('[', ']'), &items, depth, |out, item| {
                    self.write(out, item, depth + 1)
                })?;
            }
            _ => self.write_str(out, &v.to_string()),
        }
        Ok(())
    }

    fn write_container<T>(
        &self,
        out: &mut String,
        (open, close): (char, char),
        items: &[T],
        depth: usize,
        mut each: impl FnMut(&mut String, &T) -> std::result::Result<(), minijinja::Error>,
    ) -> std::result::Result<(), minijinja::Error> {
        out.push(open);
        if items.is_empty() {
            out.push(close);
            return Ok(());
        }
        for (i, item) in items.iter().enumerate() {
            if i > 0 {
                out.push_str(&self.item_sep);
            }
            if let Some(ind) = &self.indent {
                out.push('\n');
                out.push_str(&ind.repeat(depth + 1));
            }
            each(out, item)?;
        }
        if let Some(ind) = &self.indent {
            out.push('\n');
            out.push_str(&ind.repeat(depth));
        }
        out.push(close);
        Ok(())
    }

    /// Python's `json.encoder.py_encode_basestring` (and `_ascii` when `ensure_ascii`).
    fn write_str(&self, out: &mut String, s: &str) {
        out.push('"');
        for c in s.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                '\u{8}' => out.push_str("\\b"),
                '\u{c}' => out.push_str("\\f"),
                c if (c as u32) < 0x20 || (self.ensure_ascii && !c.is_ascii()) => {
                    let mut buf = [0u16; 2];
                    for unit in c.encode_utf16(&mut buf) {
                        out.push_str(&format!("\\u{unit:04x}"));
                    }
                }
                c => out.push(c),
            }
        }
        out.push('"');
    }
}

/// Python's `float.__repr__`: shortest round-trip digits, positional for 1e-4 ≤ |x| < 1e16.
fn py_float_repr(x: f64) -> String {
    if x.is_nan() {
        return "NaN".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    // `{:e}` gives the shortest round-trip digits: "-1.2345e-5".
    let sci = format!("{x:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (sign, mantissa) = mantissa.strip_prefix('-').map_or(("", mantissa), |m| ("-", m));
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    if (-4..16).contains(&exp) {
        let point = exp + 1; // digits before the decimal point
        let s = if point <= 0 {
            format!("0.{}{digits}", "0".repeat((-point) as usize))
        } else if point as usize >= digits.len() {
            format!("{digits}{}.0", "0".repeat(point as usize - digits.len()))
        } else {
            format!("{}.{}", &digits[..point as usize], &digits[point as usize..])
        };
        format!("{sign}{s}")
    } else {
        let m = if digits.len() > 1 {
            format!("{}.{}", &digits[..1], &digits[1..])
        } else {
            digits
        };
        format!("{sign}{m}e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs())
    }
}

// --- strftime_now ------------------------------------------------------------------------------

/// C `strftime` for the common conversions, in UTC (jinja2's `datetime.now()` is local time;
/// we have no time-zone database). Unknown conversions are copied through, as glibc does.
fn strftime(fmt: &str, t: SystemTime) -> String {
    const DAYS: [&str; 7] = [
        "Monday",
        "Tuesday",
        "Wednesday",
        "Thursday",
        "Friday",
        "Saturday",
        "Sunday",
    ];
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    let secs = t.duration_since(UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0);
    let (days, sod) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    let (hh, mm, ss) = (sod / 3600, sod % 3600 / 60, sod % 60);
    let weekday = (days + 3).rem_euclid(7) as usize; // 1970-01-01 was a Thursday (index 3)
    let yday = days - days_from_civil(y, 1, 1) + 1;
    let month = MONTHS[(m - 1) as usize];
    let mut out = String::new();
    let mut chars = fmt.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let s = match chars.next() {
            Some('Y') => y.to_string(),
            Some('y') => format!("{:02}", y.rem_euclid(100)),
            Some('m') => format!("{m:02}"),
            Some('d') => format!("{d:02}"),
            Some('e') => format!("{d:2}"),
            Some('j') => format!("{yday:03}"),
            Some('H') => format!("{hh:02}"),
            Some('I') => format!("{:02}", (hh + 11) % 12 + 1),
            Some('p') => (if hh < 12 { "AM" } else { "PM" }).into(),
            Some('M') => format!("{mm:02}"),
            Some('S') => format!("{ss:02}"),
            Some('B') => month.into(),
            Some('b') | Some('h') => month[..3].into(),
            Some('A') => DAYS[weekday].into(),
            Some('a') => DAYS[weekday][..3].into(),
            Some('u') => (weekday + 1).to_string(),
            Some('w') => ((weekday + 1) % 7).to_string(),
            Some('F') => format!("{y}-{m:02}-{d:02}"),
            Some('T') => format!("{hh:02}:{mm:02}:{ss:02}"),
            Some('%') => "%".into(),
            Some(other) => format!("%{other}"),
            None => "%".into(),
        };
        out.push_str(&s);
    }
    out
}

/// Howard Hinnant's `civil_from_days`: days since 1970-01-01 → (year, month 1..=12, day 1..=31).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// The inverse of [`civil_from_days`].
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = (i64::from(m) + 9) % 12;
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn render(src: &str) -> String {
        let t = ChatTemplate::new(src, "<s>", "</s>").unwrap();
        t.render(&[ChatMessage::new("user", "hi")], false).unwrap()
    }

    #[test]
    fn float_repr_matches_python() {
        let cases = [
            (0.1, "0.1"),
            (1.0, "1.0"),
            (-2.5, "-2.5"),
            (100.0, "100.0"),
            (1e16, "1e+16"),
            (1.5e-5, "1.5e-05"),
            (0.0001, "0.0001"),
            (123456.789, "123456.789"),
            (0.0, "0.0"),
        ];
        for (x, want) in cases {
            assert_eq!(py_float_repr(x), want, "{x}");
        }
    }

    #[test]
    fn tojson_is_python_json_dumps() {
        let src = r#"{{ {"a": [1, 2.5, true, none], "b": "x\"é<\n"} | tojson }}|{{ [] | tojson(indent=2) }}|{{ {"k": [1]} | tojson(indent=2) }}"#;
        assert_eq!(
            render(src),
            "{\"a\": [1, 2.5, true, null], \"b\": \"x\\\"é<\\n\"}|[]|{\n  \"k\": [\n    1\n  ]\n}"
        );
        assert_eq!(render(r#"{{ "é" | tojson(ensure_ascii=true) }}"#), "\"\\u00e9\"");
        assert_eq!(render(r#"{{ [1, 2] | tojson(separators=(",", ":")) }}"#), "[1,2]");
    }

    #[test]
    fn strftime_known_dates() {
        // 2024-07-26 13:05:09 UTC, a Friday, day 208 of a leap year.
        let t = UNIX_EPOCH + Duration::from_secs(1_722_000_000 - 1_722_000_000 % 86_400 + 47_109);
        assert_eq!(strftime("%d %b %Y", t), "26 Jul 2024");
        assert_eq!(
            strftime("%A %B %e %j %H:%M:%S %p %I %y %% %Q", t),
            "Friday July 26 208 13:05:09 PM 01 24 % %Q"
        );
        assert_eq!(strftime("%F %a", UNIX_EPOCH), "1970-01-01 Thu");
        for days in [-1000, 0, 59, 60, 11_016, 20_000, 100_000] {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
        }
    }

    #[test]
    fn tools_kwargs_and_string_arguments_reach_the_template() {
        let src = "{{ tools[0].function.name }}|{{ enable_thinking }}|{{ messages | length }}|\
                   {% for m in messages %}{{ m.tool_calls is defined }}{% endfor %}|\
                   {{ messages[1].tool_calls[0].function.arguments | tojson }}|\
                   {{ messages[2].arguments | tojson }}|{{ messages[2].tool_call_id }}";
        let t = ChatTemplate::new(src, "", "").unwrap();
        let call = |arguments: serde_json::Value| ToolCall {
            id: None,
            kind: "function".into(),
            function: FunctionCall {
                name: "f".into(),
                arguments,
            },
        };
        let mut kwargs = serde_json::Map::new();
        kwargs.insert("enable_thinking".into(), false.into());
        // A kwarg never replaces what the renderer passes.
        kwargs.insert("messages".into(), "shadowed".into());
        let chat = Chat {
            messages: vec![
                ChatMessage::new("user", "hi"),
                ChatMessage {
                    tool_calls: vec![call(r#"{"b": 1, "a": [2]}"#.into())],
                    ..ChatMessage::new("assistant", "")
                },
                ChatMessage {
                    tool_call_id: Some("call_0".into()),
                    ..ChatMessage::new("tool", "ok")
                },
            ],
            tools: vec![serde_json::json!({"type": "function", "function": {"name": "f"}})],
            kwargs,
        };
        assert_eq!(
            t.render_chat(&chat, false).unwrap(),
            r#"f|False|3|FalseTrueFalse|{"b": 1, "a": [2]}|null|call_0"#
        );
        // A string that is not a JSON object stays a string.
        let mut odd = chat.clone();
        odd.messages[1].tool_calls[0] = call("not json".into());
        assert!(t.render_chat(&odd, false).unwrap().contains(r#"|"not json"|"#));
    }

    #[test]
    fn python_methods_and_whitespace_control() {
        let src = "{% for m in messages %}\n  {% if m.role == 'user' %}\n[{{ m.content.upper().strip() }}]\n  {% endif %}\n{% endfor %}";
        assert_eq!(render(src), "[HI]\n");
        assert_eq!(
            render("{{ bos_token }}{{ eos_token }}{{ tools is none }}"),
            "<s></s>True" // Python's str(True), as jinja2 prints it
        );
    }

    /// A template that prints no tools is found out and the generic format carries them: a
    /// system message (extended or new) listing them, a schema of calls or a reply, the
    /// reply's string read back.
    #[test]
    fn templates_without_tools_get_the_generic_format() {
        let plain = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}";
        let with = "{% if tools %}{{ tools | tojson }}{% endif %}{% for m in messages %}{{ m.content }}{% endfor %}";
        assert!(!ChatTemplate::new(plain, "", "").unwrap().renders_tools());
        assert!(ChatTemplate::new(with, "", "").unwrap().renders_tools());

        let tool = serde_json::json!({"type": "function", "function": {"name": "get_weather"}});
        let chat = Chat {
            messages: vec![ChatMessage::new("user", "Weather?")],
            tools: vec![tool.clone()],
            ..Chat::default()
        };
        let g = with_generic_tools(&chat);
        assert!(g.tools.is_empty());
        assert_eq!(g.messages.len(), 2);
        assert_eq!(g.messages[0].role, "system");
        assert!(
            g.messages[0].content.contains("\"get_weather\""),
            "{}",
            g.messages[0].content
        );
        assert!(g.messages[0].content.contains("\"response\""));
        let mut sys = chat.clone();
        sys.messages.insert(0, ChatMessage::new("system", "Be brief."));
        let g = with_generic_tools(&sys);
        assert_eq!(g.messages.len(), 2);
        assert!(g.messages[0].content.starts_with("Be brief.\n\n"));

        let call = serde_json::json!({"type": "object"});
        assert_eq!(generic_tools_schema(vec![call.clone()], false), call);
        let both = generic_tools_schema(vec![call.clone()], true);
        assert_eq!(both["anyOf"][0], call);
        assert_eq!(both["anyOf"][1]["required"], serde_json::json!(["response"]));
        assert_eq!(generic_response(r#" {"response": "Hi"} "#), "Hi");
        assert_eq!(generic_response(r#"{"response": 3}"#), r#"{"response": 3}"#);
        // Cut by max_tokens: the reply so far, a half escape dropped.
        assert_eq!(
            generic_response(r#"{"response": "Paris, \"the\" ci"#),
            r#"Paris, "the" ci"#
        );
        assert_eq!(generic_response(r#"{"response": "a\"#), "a");
        assert_eq!(generic_response(r#"{"respo"#), r#"{"respo"#);
        assert_eq!(generic_response("plain"), "plain");
    }
}
