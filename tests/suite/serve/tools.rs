//! Tools on `serve`'s chat endpoint with the real Qwen2.5-Coder-0.5B: its recorded tools
//! prompt (llama.cpp's greedy answer is a bare JSON call) comes back as `tool_calls`, whole and
//! as stream deltas; a second turn carrying the call and the tool's answer renders and
//! answers; malformed `tools` are a 400 naming them. The default SmolLM2, whose template shows
//! no tools, calls them through the generic format.

use serde_json::{json, Value};

use super::{chat_body, http, sse_data, Server, SMOL};
use crate::common;

tests![
    serve_tools_qwen_answers_with_tool_calls,
    serve_tools_follow_up_turn_answers,
    serve_tools_bad_tools_are_400,
    serve_tools_on_a_template_without_tools_take_the_generic_format,
];

const QWEN: &str = "qwen2.5-coder-0.5b-instruct.gguf";

/// The recorded tools prompt's chat (messages, tools) and llama.cpp's greedy call, parsed from
/// its text: (request body, call name, call arguments, prompt tokens).
fn recorded(test: &str) -> Option<(Value, String, Value, u64)> {
    let rec = common::ref_file(test, "real/qwen25coder.p4_tools_jinja.json")?;
    let j = common::read_json(&rec);
    let text = j["greedy_text"].as_str().expect("greedy_text");
    let call: Value = serde_json::from_str(text.strip_suffix("<|im_end|>").expect("ends at eos")).expect("a JSON call");
    let body = json!({
        "model": "qwen",
        "messages": j["chat"]["messages"],
        "tools": j["chat"]["tools"],
        "temperature": 0,
        "max_tokens": j["greedy_n_requested"],
    });
    let name = call["name"].as_str().expect("name").to_owned();
    Some((
        body,
        name,
        call["arguments"].clone(),
        j["n_prompt"].as_u64().expect("n_prompt"),
    ))
}

fn args_of(call: &Value) -> Value {
    let a = call["function"]["arguments"]
        .as_str()
        .unwrap_or_else(|| panic!("arguments as a string: {call}"));
    serde_json::from_str(a).unwrap_or_else(|e| panic!("arguments {a:?}: {e}"))
}

/// The streamed chunks of a chat request (without `[DONE]`, which must end it).
fn stream(s: &Server, mut body: Value) -> Vec<Value> {
    body["stream"] = json!(true);
    let (st, _, raw) = http(s.port, "POST", "/v1/chat/completions", &[], body.to_string().as_bytes());
    assert_eq!(st, 200, "{raw}");
    let data = sse_data(&raw);
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"), "{raw}");
    data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).unwrap_or_else(|e| panic!("{d}: {e}")))
        .collect()
}

fn serve_tools_qwen_answers_with_tool_calls() {
    let test = "serve_tools_qwen_answers_with_tool_calls";
    let Some(model) = common::real_model(test, QWEN) else {
        return;
    };
    let Some((body, name, args, n_prompt)) = recorded(test) else {
        return;
    };
    assert_eq!(
        (name.as_str(), &args),
        ("get_weather", &json!({"city": "Paris", "unit": "celsius"}))
    );
    let s = Server::start(&model, &[]);

    let (st, v) = s.post("/v1/chat/completions", &body);
    assert_eq!(st, 200, "{v}");
    // The tools reached the template: the prompt is llama.cpp's, token for token in count.
    assert_eq!(v["usage"]["prompt_tokens"], n_prompt, "{v}");
    let choice = &v["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls", "{v}");
    let msg = &choice["message"];
    assert_eq!(msg["role"], "assistant");
    assert!(msg["content"].is_null(), "no text around the call: {msg}");
    let calls = msg["tool_calls"]
        .as_array()
        .unwrap_or_else(|| panic!("tool_calls: {msg}"));
    assert_eq!(calls.len(), 1, "{msg}");
    let call = &calls[0];
    assert_eq!(call["type"], "function");
    assert!(call["id"].as_str().is_some_and(|i| i.starts_with("call_")), "{call}");
    assert_eq!(call["function"]["name"], name.as_str());
    assert_eq!(args_of(call), args);

    // Streamed: the role, then a call header and its argument fragments, then the finish.
    let chunks = stream(&s, body.clone());
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let content: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(content, "", "no content deltas for a call");
    let mut streamed: Vec<Value> = Vec::new();
    for d in chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["tool_calls"].as_array())
    {
        for t in d {
            let i = t["index"].as_u64().unwrap_or_else(|| panic!("index: {t}")) as usize;
            if i == streamed.len() {
                assert!(
                    t["id"].is_string() && t["function"]["name"].is_string(),
                    "a call's first delta: {t}"
                );
                streamed.push(json!({"id": t["id"], "type": t["type"], "function": {"name": t["function"]["name"], "arguments": ""}}));
            }
            let frag = t["function"]["arguments"].as_str().unwrap_or("");
            let whole = streamed[i]["function"]["arguments"].as_str().unwrap().to_owned() + frag;
            streamed[i]["function"]["arguments"] = json!(whole);
        }
    }
    assert_eq!(streamed.len(), 1, "{chunks:?}");
    assert_eq!(streamed[0]["type"], "function");
    assert_eq!(streamed[0]["function"], call["function"], "streamed call = whole call");
    let finishes: Vec<&Value> = chunks
        .iter()
        .map(|c| &c["choices"][0]["finish_reason"])
        .filter(|f| !f.is_null())
        .collect();
    assert_eq!(finishes, [&json!("tool_calls")]);

    // A named choice (and template variables this template does not use) renders the same
    // prompt: the same call, from cached cells.
    let mut named = body.clone();
    named["tool_choice"] = json!({"type": "function", "function": {"name": name}});
    named["chat_template_kwargs"] = json!({"enable_thinking": false});
    let (st, v) = s.post("/v1/chat/completions", &named);
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["usage"]["prompt_tokens"], n_prompt, "{v}");
    assert!(
        v["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap() > 0,
        "{v}"
    );
    assert_eq!(
        v["choices"][0]["message"]["tool_calls"][0]["function"], call["function"],
        "{v}"
    );
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");

    // A forced call that max_tokens cuts is no content: finish_reason length, no half call
    // as text, streamed or not.
    let mut cut = named.clone();
    cut["max_tokens"] = json!(4);
    let (st, v) = s.post("/v1/chat/completions", &cut);
    assert_eq!(st, 200, "{v}");
    let m = &v["choices"][0]["message"];
    assert!(m["content"].is_null() && m.get("tool_calls").is_none(), "{v}");
    assert_eq!(v["choices"][0]["finish_reason"], "length", "{v}");
    cut["stream"] = json!(true);
    let (st, _, b) = http(s.port, "POST", "/v1/chat/completions", &[], cut.to_string().as_bytes());
    assert_eq!(st, 200, "{b}");
    let chunks: Vec<Value> = sse_data(&b)
        .iter()
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    assert!(
        chunks
            .iter()
            .all(|c| c["choices"][0]["delta"]["content"].as_str().is_none_or(str::is_empty)),
        "{b}"
    );
    assert_eq!(chunks.last().unwrap()["choices"][0]["finish_reason"], "length", "{b}");

    // `tool_choice: none` renders without the tools and answers in text.
    let mut none = body.clone();
    none["tool_choice"] = json!("none");
    none["max_tokens"] = json!(8);
    let (st, v) = s.post("/v1/chat/completions", &none);
    assert_eq!(st, 200, "{v}");
    assert!(v["usage"]["prompt_tokens"].as_u64().unwrap() < n_prompt / 2, "{v}");
    assert!(v["choices"][0]["message"].get("tool_calls").is_none(), "{v}");
    assert_ne!(v["choices"][0]["finish_reason"], "tool_calls");
}

/// The second turn: the assistant's call (arguments as OpenAI's JSON string, content null) and
/// the tool's answer render, and the model answers with content.
fn serve_tools_follow_up_turn_answers() {
    let test = "serve_tools_follow_up_turn_answers";
    let Some(model) = common::real_model(test, QWEN) else {
        return;
    };
    let Some((mut body, name, args, n_prompt)) = recorded(test) else {
        return;
    };
    let s = Server::start(&model, &[]);
    let messages = body["messages"].as_array_mut().unwrap();
    messages.push(json!({
        "role": "assistant", "content": null,
        "tool_calls": [{"id": "call_1", "type": "function",
                        "function": {"name": name, "arguments": args.to_string()}}],
    }));
    messages.push(
        json!({"role": "tool", "tool_call_id": "call_1", "content": r#"{"temperature": 18, "unit": "celsius"}"#}),
    );
    body["max_tokens"] = json!(32);
    let (st, v) = s.post("/v1/chat/completions", &body);
    assert_eq!(st, 200, "{v}");
    // The call and the tool's answer are in the prompt: more than the first turn's.
    assert!(v["usage"]["prompt_tokens"].as_u64().unwrap() > n_prompt + 20, "{v}");
    // Greedy, this small model calls again and then writes out the tool's answer (text around
    // the call: content); the 18 degrees it read are in it.
    let content = v["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or_else(|| panic!("content: {v}"));
    assert!(content.contains("18"), "{v}");
}

fn serve_tools_bad_tools_are_400() {
    let Some(model) = common::real_model("serve_tools_bad_tools_are_400", SMOL) else {
        return;
    };
    let s = Server::start(&model, &[]);
    let ok = json!({"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}});
    let bad_msgs = json!([{"role": "user", "content": "x"},
                          {"role": "assistant", "tool_calls": [{"type": "function", "function": {"arguments": "{}"}}]}]);
    for (field, value, param) in [
        ("tools", json!("f"), "tools"),
        ("tools", json!([{"type": "function"}]), "tools[0]"),
        ("tools", json!([ok, {"type": "retrieval"}]), "tools[1]"),
        (
            "tools",
            json!([ok, {"type": "function", "function": {"name": ""}}]),
            "tools[1]",
        ),
        (
            "tools",
            json!([{"type": "function", "function": {"name": "f", "parameters": "{}"}}]),
            "tools[0]",
        ),
        ("tool_choice", json!("sometimes"), "tool_choice"),
        (
            "tool_choice",
            json!({"type": "function", "function": {"name": "g"}}),
            "tool_choice",
        ),
        (
            "chat_template_kwargs",
            json!(["enable_thinking"]),
            "chat_template_kwargs",
        ),
        ("messages", bad_msgs, "messages"),
    ] {
        let mut b = chat_body("Hi", 4);
        b["tools"] = json!([ok]);
        b[field] = value;
        let (st, v) = s.post("/v1/chat/completions", &b);
        assert_eq!(st, 400, "{field}: {v}");
        let e = &v["error"];
        assert_eq!(e["param"], param, "{v}");
        assert_eq!(e["type"], "invalid_request_error", "{v}");
        assert!(e["message"].as_str().is_some_and(|m| m.contains(param)), "{v}");
    }
    // `required` without tools has nothing to call.
    let mut b = chat_body("Hi", 4);
    b["tool_choice"] = json!("required");
    let (st, v) = s.post("/v1/chat/completions", &b);
    assert_eq!((st, &v["error"]["param"]), (400, &json!("tool_choice")), "{v}");
    // Good tools on a model whose template ignores them: an ordinary answer.
    let mut b = chat_body("Hi", 4);
    b["tools"] = json!([ok]);
    b["tool_choice"] = json!("auto");
    let (st, v) = s.post("/v1/chat/completions", &b);
    assert_eq!(st, 200, "{v}");
}

/// SmolLM2's template shows no tools: without the generic format `tools` changed nothing (the
/// same prompt tokens, no call ever). With it the tools are in the prompt, the answer is JSON,
/// and a weather question comes back as a `get_weather` call whose arguments validate against
/// the function's schema closed (the `jsonschema` crate), whole and streamed; the response says
/// which format was used; `tool_choice: none` leaves the prompt as it was; a named call under a
/// tight `max_tokens` is a valid call or cut with no content.
fn serve_tools_on_a_template_without_tools_take_the_generic_format() {
    let test = "serve_tools_on_a_template_without_tools_take_the_generic_format";
    let Some(model) = common::real_model(test, SMOL) else {
        return;
    };
    let s = Server::start(&model, &[]);
    let params = json!({
        "type": "object",
        "properties": {
            "city": {"type": "string", "description": "The city, e.g. Paris"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        },
        "required": ["city"],
    });
    let tool = json!({"type": "function", "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": params,
    }});
    let mut body = chat_body("What is the weather like in Paris today?", 64);
    body["tools"] = json!([tool]);

    let (st, head, raw) = http(s.port, "POST", "/v1/chat/completions", &[], body.to_string().as_bytes());
    assert_eq!(st, 200, "{raw}");
    assert!(head.to_ascii_lowercase().contains("x-tool-format: generic"), "{head}");
    let v: Value = serde_json::from_str(&raw).unwrap();
    let mut plain = body.clone();
    plain["tool_choice"] = json!("none");
    let (st, p) = s.post("/v1/chat/completions", &plain);
    assert_eq!(st, 200, "{p}");
    assert!(
        v["usage"]["prompt_tokens"].as_u64() > p["usage"]["prompt_tokens"].as_u64(),
        "the tools are in the prompt: {v} vs {p}"
    );
    let choice = &v["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls", "{v}");
    let calls = choice["message"]["tool_calls"]
        .as_array()
        .unwrap_or_else(|| panic!("{v}"));
    assert_eq!(calls.len(), 1, "{v}");
    assert_eq!(calls[0]["function"]["name"], "get_weather", "{v}");
    let args = args_of(&calls[0]);
    // Against the function's schema closed: no key it does not name.
    let mut closed = params.clone();
    closed["additionalProperties"] = json!(false);
    let validator = jsonschema::validator_for(&closed).unwrap();
    assert!(validator.is_valid(&args), "{args} against {closed}");

    // A named call under a tight max_tokens (the case that once came back as text with keys
    // of the model's own): a call within the schema, or cut with no content and "length".
    let mut named = body.clone();
    named["tool_choice"] = json!({"type": "function", "function": {"name": "get_weather"}});
    for max_tokens in [40, 6] {
        named["max_tokens"] = json!(max_tokens);
        let (st, v) = s.post("/v1/chat/completions", &named);
        assert_eq!(st, 200, "{v}");
        let c = &v["choices"][0];
        match c["finish_reason"].as_str() {
            Some("tool_calls") => {
                let a = args_of(&c["message"]["tool_calls"][0]);
                assert!(validator.is_valid(&a), "{a} against {closed}");
            }
            Some("length") => assert!(c["message"]["content"].is_null(), "{v}"),
            _ => panic!("max_tokens {max_tokens}: {v}"),
        }
    }

    // Streamed: the same call.
    let chunks = stream(&s, body.clone());
    let name: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["tool_calls"][0]["function"]["name"].as_str())
        .collect();
    assert_eq!(name, "get_weather", "{chunks:?}");
    let streamed: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"].as_str())
        .collect();
    assert_eq!(
        streamed,
        calls[0]["function"]["arguments"].as_str().unwrap(),
        "{chunks:?}"
    );
}
