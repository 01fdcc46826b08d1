//! The request fields that shape decoding — `response_format` (and Ollama's `format`),
//! `logit_bias`, `logprobs`/`top_logprobs`, `n`, `speculative.n_max`/`n_min` — parsed into the
//! library's options; log-probabilities and llama.cpp's `timings` rendered in their shapes.

use serde_json::{json, Map, Value};

use minfer::constrain::ConstraintSpec;
use minfer::engine::{GenerateOptions, Speculation};
use minfer::sampling::TokenLogprob;
use minfer::sched::Finished;
use minfer::tokenizer::Tokenizer;

use super::{reject, Reject};

/// Most choices one request may ask for (`n`): each is a sequence of its own.
pub(crate) const MAX_CHOICES: u64 = 8;

/// Most alternatives per token (`top_logprobs`), as OpenAI allows.
pub(crate) const MAX_TOP_LOGPROBS: i64 = 20;

/// Most tokens a request may have drafted per verification (`speculative.n_max`).
pub(crate) const MAX_DRAFT: i64 = 64;

/// The server's speculation (`--spec`, `--draft`, `--draft-max`, `--draft-min`), which every
/// request takes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Speculative {
    pub(crate) speculation: Speculation,
    pub(crate) draft_max: usize,
    pub(crate) draft_min: usize,
}

impl Speculative {
    /// Gives `opts` the server's speculation.
    pub(crate) fn set(&self, opts: &mut GenerateOptions) {
        opts.speculation = self.speculation;
        opts.draft_max = self.draft_max;
        opts.draft_min = self.draft_min;
    }

    /// Gives `opts` the server's speculation with the draft lengths a request sets, as
    /// llama.cpp's server takes them (`speculative.n_max`, 0: no drafts; `speculative.n_min`).
    pub(crate) fn apply(
        &self,
        opts: &mut GenerateOptions,
        n_max: Option<i64>,
        n_min: Option<i64>,
    ) -> Result<(), Reject> {
        let check = |v: Option<i64>, name: &str| match v {
            Some(n) if !(0..=MAX_DRAFT).contains(&n) => {
                Err(reject(format!("{name} {n} must be in 0..={MAX_DRAFT}"), name))
            }
            v => Ok(v.map(|n| n as usize)),
        };
        let n_max = check(n_max, "speculative.n_max")?;
        let n_min = check(n_min, "speculative.n_min")?;
        self.set(opts);
        opts.draft_max = n_max.unwrap_or(opts.draft_max);
        opts.draft_min = n_min.unwrap_or(opts.draft_min);
        Ok(())
    }
}

/// llama.cpp's `timings` of a request: its prompt (the first choice's: the others reuse its
/// cells) and its completions (summed; the time is the longest), in milliseconds and per
/// second; with speculation, the tokens drafted and accepted (`draft_n`, `draft_n_accepted`).
pub(crate) fn timings(fs: &[Finished]) -> Value {
    let Some(first) = fs.first() else {
        return Value::Null;
    };
    let u = &first.usage;
    let prompt_n = u.prompt_tokens - u.cached_tokens;
    let prompt_ms = u.prefill_secs * 1e3;
    let predicted_n: usize = fs.iter().map(|f| f.usage.completion_tokens).sum();
    let predicted_ms = fs.iter().map(|f| f.usage.decode_secs).fold(0.0, f64::max) * 1e3;
    let per_token = |ms: f64, n: usize| if n > 0 { ms / n as f64 } else { 0.0 };
    let per_second = |ms: f64, n: usize| if ms > 0.0 { n as f64 * 1e3 / ms } else { 0.0 };
    let mut t = json!({
        "cache_n": u.cached_tokens,
        "prompt_n": prompt_n,
        "prompt_ms": prompt_ms,
        "prompt_per_token_ms": per_token(prompt_ms, prompt_n),
        "prompt_per_second": per_second(prompt_ms, prompt_n),
        "predicted_n": predicted_n,
        "predicted_ms": predicted_ms,
        "predicted_per_token_ms": per_token(predicted_ms, predicted_n),
        "predicted_per_second": per_second(predicted_ms, predicted_n),
    });
    let drafted: usize = fs.iter().map(|f| f.usage.drafted).sum();
    if drafted > 0 {
        t["draft_n"] = json!(drafted);
        t["draft_n_accepted"] = json!(fs.iter().map(|f| f.usage.accepted).sum::<usize>());
    }
    t
}

/// A schema or grammar that does not compile is a 400 naming `param`.
fn checked(spec: ConstraintSpec, param: &str) -> Result<Option<ConstraintSpec>, Reject> {
    match spec.check() {
        Ok(()) => Ok(Some(spec)),
        Err(e) => Err(reject(format!("{param}: {e}"), param)),
    }
}

/// OpenAI's `response_format`: `{"type":"text"}` (none), `{"type":"json_object"}`, or
/// `{"type":"json_schema","json_schema":{"name","schema","strict"}}`. Whatever is not text is
/// enforced; anything else is refused, never ignored.
pub(crate) fn response_format(v: Option<&Value>) -> Result<Option<ConstraintSpec>, Reject> {
    const P: &str = "response_format";
    let Some(v) = v.filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    match v.get("type").and_then(Value::as_str) {
        Some("text") => Ok(None),
        Some("json_object") => match v.get("schema") {
            // llama.cpp's extension: a schema beside json_object.
            Some(s) if !s.is_null() => checked(ConstraintSpec::JsonSchema(s.clone()), P),
            _ => Ok(Some(ConstraintSpec::JsonObject)),
        },
        Some("json_schema") => {
            let schema = v
                .get("json_schema")
                .and_then(|j| j.get("schema"))
                .or_else(|| v.get("schema"))
                .filter(|s| !s.is_null());
            match schema {
                Some(s) => checked(ConstraintSpec::JsonSchema(s.clone()), P),
                None => Err(reject("response_format json_schema without json_schema.schema", P)),
            }
        }
        Some(t) => Err(reject(
            format!("response_format type '{t}' (expected text, json_object or json_schema)"),
            P,
        )),
        None => Err(reject("response_format without a type", P)),
    }
}

/// Ollama's `format`: `"json"` (any JSON object) or a JSON schema; `""`/null for none. The
/// error is a message for Ollama's error shape.
pub(crate) fn ollama_format(v: Option<&Value>) -> Result<Option<ConstraintSpec>, String> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::String(s)) if s == "json" => Ok(Some(ConstraintSpec::JsonObject)),
        Some(Value::Object(_)) => {
            let spec = ConstraintSpec::JsonSchema(v.cloned().unwrap_or_default());
            spec.check().map_err(|e| format!("format: {e}"))?;
            Ok(Some(spec))
        }
        Some(other) => Err(format!("format {other} (expected \"json\" or a JSON schema object)")),
    }
}

/// `logit_bias`: token id strings to biases in [-100, 100], ids inside the vocabulary.
pub(crate) fn logit_bias(m: Option<&Map<String, Value>>, n_vocab: usize) -> Result<Vec<(u32, f32)>, Reject> {
    const P: &str = "logit_bias";
    let Some(m) = m else { return Ok(Vec::new()) };
    let mut out = Vec::with_capacity(m.len().min(n_vocab));
    for (k, v) in m {
        let id: u32 = k
            .trim()
            .parse()
            .map_err(|_| reject(format!("logit_bias key {k:?} is not a token id"), P))?;
        if id as usize >= n_vocab {
            return Err(reject(
                format!("logit_bias token id {id} is outside the vocabulary of {n_vocab}"),
                P,
            ));
        }
        let b = v.as_f64().filter(|b| (-100.0..=100.0).contains(b)).ok_or_else(|| {
            reject(
                format!("logit_bias for token {id}: {v} is not a number in [-100, 100]"),
                P,
            )
        })?;
        out.push((id, b as f32));
    }
    Ok(out)
}

/// `logprobs` (chat: a bool, with `top_logprobs` alternatives; completions: the number of
/// alternatives) to the alternatives wanted, or none.
pub(crate) fn logprobs(logprobs: Option<&Value>, top: Option<i64>) -> Result<Option<usize>, Reject> {
    if let Some(t) = top {
        if !(0..=MAX_TOP_LOGPROBS).contains(&t) {
            return Err(reject(
                format!("top_logprobs {t} must be in 0..={MAX_TOP_LOGPROBS}"),
                "top_logprobs",
            ));
        }
    }
    match logprobs {
        None | Some(Value::Null) | Some(Value::Bool(false)) => match top {
            Some(_) => Err(reject("top_logprobs needs logprobs: true", "top_logprobs")),
            None => Ok(None),
        },
        Some(Value::Bool(true)) => Ok(Some(top.unwrap_or(0) as usize)),
        Some(v) => match v.as_i64() {
            Some(n) if (0..=MAX_TOP_LOGPROBS).contains(&n) => Ok(Some(n as usize)),
            _ => Err(reject(
                format!("logprobs {v} (expected a bool, or for completions 0..={MAX_TOP_LOGPROBS})"),
                "logprobs",
            )),
        },
    }
}

/// `n`: 1 ..= [`MAX_CHOICES`].
pub(crate) fn choices(n: Option<u64>) -> Result<usize, Reject> {
    match n.unwrap_or(1) {
        n @ 1..=MAX_CHOICES => Ok(n as usize),
        n => Err(reject(format!("n {n} must be in 1..={MAX_CHOICES}"), "n")),
    }
}

fn token_text(tok: &Tokenizer, id: u32) -> (String, Vec<u8>) {
    let b = tok.token_to_piece(id);
    (String::from_utf8_lossy(&b).into_owned(), b)
}

/// Chat's `logprobs.content` entries: `{token, logprob, bytes, top_logprobs: [{token, logprob,
/// bytes}]}` per token.
pub(crate) fn chat_logprobs(tok: &Tokenizer, lps: &[TokenLogprob]) -> Value {
    let entry = |id: u32, lp: f32| {
        let (t, b) = token_text(tok, id);
        json!({"token": t, "logprob": lp, "bytes": b})
    };
    let content: Vec<Value> = lps
        .iter()
        .map(|l| {
            let mut e = entry(l.id, l.logprob);
            e["top_logprobs"] = l.top.iter().map(|&(id, lp)| entry(id, lp)).collect();
            e
        })
        .collect();
    json!({ "content": content })
}

/// Completions' `logprobs`: parallel `tokens`, `token_logprobs`, `top_logprobs` (token → logprob
/// maps) and `text_offset` (character offsets into the choice's text, from `offset`). Returns
/// the offset after the last token too (streaming continues from it).
pub(crate) fn completion_logprobs(tok: &Tokenizer, lps: &[TokenLogprob], mut offset: usize) -> (Value, usize) {
    let (mut tokens, mut values, mut tops, mut offsets) = (vec![], vec![], vec![], vec![]);
    for l in lps {
        let (t, _) = token_text(tok, l.id);
        offsets.push(offset);
        offset += t.chars().count();
        tokens.push(t);
        values.push(l.logprob);
        let top: Map<String, Value> = l
            .top
            .iter()
            .map(|&(id, lp)| (token_text(tok, id).0, json!(lp)))
            .collect();
        tops.push(Value::Object(top));
    }
    (
        json!({"tokens": tokens, "token_logprobs": values, "top_logprobs": tops, "text_offset": offsets}),
        offset,
    )
}

#[cfg(test)]
mod tests {
    use axum::http::StatusCode;
    use serde_json::json;

    use super::*;

    fn status<T: std::fmt::Debug>(r: Result<T, Reject>) -> StatusCode {
        match r {
            Ok(v) => panic!("accepted: {v:?}"),
            Err(r) => r.status(),
        }
    }

    #[test]
    fn ollama_format_is_json_or_a_schema() {
        assert_eq!(ollama_format(None).unwrap(), None);
        assert_eq!(ollama_format(Some(&json!(""))).unwrap(), None);
        assert_eq!(
            ollama_format(Some(&json!("json"))).unwrap(),
            Some(ConstraintSpec::JsonObject)
        );
        let schema = json!({"type": "object", "properties": {"a": {"type": "integer"}}});
        assert_eq!(
            ollama_format(Some(&schema)).unwrap(),
            Some(ConstraintSpec::JsonSchema(schema.clone()))
        );
        for bad in [json!("yaml"), json!(5), json!({"type": "no-such-type"})] {
            assert!(ollama_format(Some(&bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn response_format_shapes() {
        assert_eq!(response_format(Some(&json!({"type": "text"}))).unwrap(), None);
        assert_eq!(
            response_format(Some(&json!({"type": "json_object"}))).unwrap(),
            Some(ConstraintSpec::JsonObject)
        );
        let s = json!({"type": "object"});
        let v = json!({"type": "json_schema", "json_schema": {"name": "x", "schema": s, "strict": true}});
        assert_eq!(response_format(Some(&v)).unwrap(), Some(ConstraintSpec::JsonSchema(s)));
        for bad in [json!({}), json!({"type": "json_schema"}), json!({"type": "xml"})] {
            assert_eq!(status(response_format(Some(&bad))), StatusCode::BAD_REQUEST, "{bad}");
        }
    }

    #[test]
    fn speculative_lengths_and_timings() {
        use minfer::engine::StopReason;
        use minfer::sched::Usage;

        let spec = Speculative {
            speculation: Speculation::Ngram { min_n: 1, max_n: 3 },
            draft_max: 8,
            draft_min: 0,
        };
        let mut o = GenerateOptions::default();
        spec.apply(&mut o, Some(3), None).unwrap();
        assert_eq!((o.speculation, o.draft_max, o.draft_min), (spec.speculation, 3, 0));
        spec.apply(&mut o, None, Some(2)).unwrap();
        assert_eq!((o.draft_max, o.draft_min), (8, 2));
        for (n_max, n_min) in [(Some(MAX_DRAFT + 1), None), (Some(-1), None), (None, Some(-1))] {
            assert_eq!(status(spec.apply(&mut o, n_max, n_min)), StatusCode::BAD_REQUEST);
        }
        let fin = |drafted, accepted| Finished {
            reason: StopReason::MaxTokens,
            tokens: Vec::new(),
            logprobs: Vec::new(),
            rest: String::new(),
            usage: Usage {
                prompt_tokens: 10,
                cached_tokens: 4,
                completion_tokens: 5,
                prefill_secs: 0.5,
                decode_secs: 1.0,
                drafted,
                accepted,
            },
        };
        let t = timings(&[fin(0, 0)]);
        assert_eq!(
            (&t["cache_n"], &t["prompt_n"], &t["predicted_n"]),
            (&json!(4), &json!(6), &json!(5))
        );
        assert_eq!(
            (&t["prompt_per_second"], &t["predicted_per_second"]),
            (&json!(12.0), &json!(5.0))
        );
        assert!(t.get("draft_n").is_none(), "{t}");
        let t = timings(&[fin(6, 4), fin(2, 1)]);
        assert_eq!((&t["draft_n"], &t["draft_n_accepted"]), (&json!(8), &json!(5)));
        assert_eq!(t["predicted_n"], json!(10));
    }

    #[test]
    fn logprobs_bias_and_n() {
        assert_eq!(logprobs(None, None).unwrap(), None);
        assert_eq!(logprobs(Some(&json!(true)), Some(3)).unwrap(), Some(3));
        assert_eq!(logprobs(Some(&json!(true)), None).unwrap(), Some(0));
        assert_eq!(logprobs(Some(&json!(5)), None).unwrap(), Some(5));
        assert_eq!(status(logprobs(Some(&json!(true)), Some(21))), StatusCode::BAD_REQUEST);
        assert_eq!(status(logprobs(None, Some(2))), StatusCode::BAD_REQUEST);
        assert_eq!(status(logprobs(Some(&json!(-1)), None)), StatusCode::BAD_REQUEST);
        let m = json!({"5": -100, " 7": 2.5});
        assert_eq!(logit_bias(m.as_object(), 10).unwrap(), [(5, -100.0), (7, 2.5)]);
        for bad in [json!({"10": 1}), json!({"x": 1}), json!({"1": "a"}), json!({"1": 101})] {
            assert_eq!(
                status(logit_bias(bad.as_object(), 10)),
                StatusCode::BAD_REQUEST,
                "{bad}"
            );
        }
        assert_eq!(choices(None).unwrap(), 1);
        assert_eq!(choices(Some(8)).unwrap(), 8);
        assert_eq!(status(choices(Some(0))), StatusCode::BAD_REQUEST);
        assert_eq!(status(choices(Some(9))), StatusCode::BAD_REQUEST);
    }
}
