//! Chat templates rendered as HF transformers' `apply_chat_template` renders them with jinja2.

use minfer::chat::{Chat, ChatMessage, ChatTemplate, FunctionCall, ToolCall};
use minfer::gguf::GgufFile;
use minfer::Error;

use crate::common;

tests![
    smollm2_template_from_gguf_matches_jinja2,
    smollm2_template_matches_jinja2,
    chatml_system_and_multi_turn,
    qwen2_template_renders,
    raise_exception_is_a_template_error,
    syntax_and_unknown_filter_errors_are_template_errors,
    qwen25coder_tools_prompt_matches_jinja2,
    qwen25coder_tool_call_turn_renders,
    gemma4_template_matches_transformers,
];

fn template(file: &str) -> String {
    let p = common::data_dir().join("templates").join(file);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The recorded render: (messages, add_generation_prompt, rendered_text).
fn smollm2_reference() -> (Vec<ChatMessage>, bool, String) {
    let j = common::read_json(&common::data_dir().join("real/smollm2.p2_chat_jinja.json"));
    let chat = &j["chat"];
    let messages = serde_json::from_value(chat["messages"].clone()).expect("chat.messages");
    let gen = chat["add_generation_prompt"]
        .as_bool()
        .expect("chat.add_generation_prompt");
    let text = chat["rendered_text"].as_str().expect("chat.rendered_text").to_owned();
    (messages, gen, text)
}

fn msgs(pairs: &[(&str, &str)]) -> Vec<ChatMessage> {
    pairs.iter().map(|(r, c)| ChatMessage::new(*r, *c)).collect()
}

fn smollm2_template_from_gguf_matches_jinja2() {
    let Some(path) = common::real_model("chat", "SmolLM2-135M-Instruct.Q4_1.gguf") else {
        return;
    };
    let gguf = GgufFile::open(&path).unwrap();
    let source = gguf
        .metadata
        .get_str("tokenizer.chat_template")
        .unwrap()
        .expect("chat template");
    assert_eq!(
        source,
        template("smollm2.jinja"),
        "tests/data/templates/smollm2.jinja is stale"
    );
    let (messages, gen, want) = smollm2_reference();
    let got = ChatTemplate::new(source, "<|im_start|>", "<|im_end|>")
        .unwrap()
        .render(&messages, gen)
        .unwrap();
    assert_eq!(got, want);
}

fn smollm2_template_matches_jinja2() {
    let (messages, gen, want) = smollm2_reference();
    let t = ChatTemplate::new(&template("smollm2.jinja"), "<|im_start|>", "<|im_end|>").unwrap();
    assert_eq!(t.render(&messages, gen).unwrap(), want);
    // A caller-supplied system message replaces the default one.
    let with_system = msgs(&[("system", "Be brief."), ("user", "Hi")]);
    assert_eq!(
        t.render(&with_system, false).unwrap(),
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
    );
}

fn chatml_system_and_multi_turn() {
    // Indented block tags and their newlines vanish (lstrip_blocks, trim_blocks), as in jinja2.
    let src = r#"{% for message in messages %}
    {% if message.role == 'system' %}
<|im_start|>system
{{ message.content }}<|im_end|>
    {% else %}
<|im_start|>{{ message.role }}
{{ message.content.strip() }}<|im_end|>
    {% endif %}
{% endfor %}
{% if add_generation_prompt %}
<|im_start|>assistant
{% endif %}
"#;
    let t = ChatTemplate::new(src, "", "<|im_end|>").unwrap();
    let conv = msgs(&[
        ("system", "You are terse."),
        ("user", "Hi! "),
        ("assistant", "Hello."),
        ("user", "2+2?"),
    ]);
    let turns = "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n\
                 <|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n";
    assert_eq!(t.render(&conv, false).unwrap(), turns);
    assert_eq!(
        t.render(&conv, true).unwrap(),
        format!("{turns}<|im_start|>assistant\n")
    );
}

fn qwen2_template_renders() {
    let t = ChatTemplate::new(&template("qwen2.jinja"), "", "<|im_end|>").unwrap();
    let conv = msgs(&[("system", "S"), ("user", "U"), ("assistant", "A"), ("user", "V")]);
    assert_eq!(
        t.render(&conv, true).unwrap(),
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\nA<|im_end|>\n\
         <|im_start|>user\nV<|im_end|>\n<|im_start|>assistant\n"
    );
}

fn raise_exception_is_a_template_error() {
    let src = "{% if messages[0]['role'] != 'system' %}{{ raise_exception('x: need a system turn') }}{% endif %}";
    let t = ChatTemplate::new(src, "", "").unwrap();
    match t.render(&msgs(&[("user", "hi")]), true) {
        Err(Error::Template(m)) => {
            assert!(m.contains("x: need a system turn"), "{m}");
            assert!(m.contains("chat_template:1"), "no line info: {m}");
        }
        other => panic!("expected Error::Template, got {other:?}"),
    }
    assert_eq!(t.render(&msgs(&[("system", "s")]), true).unwrap(), "");
}

fn syntax_and_unknown_filter_errors_are_template_errors() {
    match ChatTemplate::new("ok\n{% for m in messages %}{{ m.content }", "", "") {
        Err(Error::Template(m)) => assert!(m.contains("syntax error") && m.contains("chat_template:2"), "{m}"),
        other => panic!("expected Error::Template, got {other:?}"),
    }
    match ChatTemplate::new("{{ messages | no_such_filter }}", "", "") {
        Err(Error::Template(m)) => assert!(m.contains("no_such_filter") || m.contains("unknown filter"), "{m}"),
        Ok(t) => match t.render(&[], false) {
            Err(Error::Template(m)) => assert!(m.contains("filter"), "{m}"),
            other => panic!("expected Error::Template, got {other:?}"),
        },
        Err(e) => panic!("expected Error::Template, got {e:?}"),
    }
}

/// Qwen2.5-Coder's own template (from its GGUF) and the recorded tools render: (template,
/// the recorded chat with tools, jinja2's text).
fn qwen25coder_tools_reference(test: &str) -> Option<(ChatTemplate, Chat, String)> {
    let path = common::real_model(test, "qwen2.5-coder-0.5b-instruct.gguf")?;
    let rec = common::ref_file(test, "real/qwen25coder.p4_tools_jinja.json")?;
    let gguf = GgufFile::open(&path).unwrap();
    let source = gguf
        .metadata
        .get_str("tokenizer.chat_template")
        .unwrap()
        .expect("chat template")
        .to_owned();
    let j = common::read_json(&rec);
    let chat = &j["chat"];
    assert_eq!(
        chat["chat_template"].as_str(),
        Some(source.as_str()),
        "the recording was made with another template"
    );
    assert_eq!(chat["add_generation_prompt"].as_bool(), Some(true));
    let c = Chat {
        messages: serde_json::from_value(chat["messages"].clone()).expect("chat.messages"),
        tools: serde_json::from_value(chat["tools"].clone()).expect("chat.tools"),
        kwargs: serde_json::Map::new(),
    };
    let want = j["prompt_text"].as_str().expect("prompt_text").to_owned();
    assert_eq!(chat["rendered_text"].as_str(), Some(want.as_str()));
    Some((ChatTemplate::new(&source, "", "<|im_end|>").unwrap(), c, want))
}

fn qwen25coder_tools_prompt_matches_jinja2() {
    let Some((t, chat, want)) = qwen25coder_tools_reference("qwen25coder_tools_prompt_matches_jinja2") else {
        return;
    };
    assert!(!chat.tools.is_empty());
    assert_eq!(t.render_chat(&chat, true).unwrap(), want);
    // Without tools the same messages take the template's other branch.
    let plain = t.render(&chat.messages, true).unwrap();
    assert!(!plain.contains("<tools>") && want.contains("<tools>"), "{plain}");
}

/// The second turn of a call: the assistant's call (arguments as OpenAI's JSON string, which
/// the template must see as an object) and the tool's answer, in Qwen's format.
fn qwen25coder_tool_call_turn_renders() {
    let Some((t, mut chat, first)) = qwen25coder_tools_reference("qwen25coder_tool_call_turn_renders") else {
        return;
    };
    let call = ToolCall {
        id: Some("call_1".into()),
        kind: "function".into(),
        function: FunctionCall {
            name: "get_weather".into(),
            arguments: serde_json::Value::String(r#"{"city": "Paris", "unit": "celsius"}"#.into()),
        },
    };
    chat.messages.push(ChatMessage {
        tool_calls: vec![call],
        ..ChatMessage::new("assistant", "")
    });
    chat.messages.push(ChatMessage {
        tool_call_id: Some("call_1".into()),
        ..ChatMessage::new("tool", r#"{"temperature": 18}"#)
    });
    let got = t.render_chat(&chat, true).unwrap();
    let turn = "<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": \
                {\"city\": \"Paris\", \"unit\": \"celsius\"}}\n</tool_call><|im_end|>\n\
                <|im_start|>user\n<tool_response>\n{\"temperature\": 18}\n</tool_response><|im_end|>\n\
                <|im_start|>assistant\n";
    let head = first
        .strip_suffix("<|im_start|>assistant\n")
        .expect("generation prompt");
    assert_eq!(got, format!("{head}{turn}"));
    // The same turn deserialized from OpenAI's wire shape (content null, arguments a string).
    let wire: ChatMessage = serde_json::from_value(serde_json::json!({
        "role": "assistant", "content": null,
        "tool_calls": [{"id": "call_1", "type": "function",
                        "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"unit\": \"celsius\"}"}}],
    }))
    .unwrap();
    assert_eq!(wire, chat.messages[chat.messages.len() - 2]);
}

/// Gemma 4's template (llama.cpp 0c1e570's `models/templates/google-gemma-4-31B-it.jinja`:
/// macros, namespaces, `dictsort`, its own tool declaration and call syntax) renders as
/// transformers renders it (`scripts/make-template-refs.py`): plain turns, a system turn, no
/// generation prompt, tools, and a call with its answer.
fn gemma4_template_matches_transformers() {
    let refs = common::read_json(&common::data_dir().join("templates/gemma4.renders.json"));
    let t = ChatTemplate::new(&template(refs["template"].as_str().unwrap()), "<bos>", "<eos>").unwrap();
    let cases = refs["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 5);
    for c in cases {
        let chat = Chat {
            messages: serde_json::from_value(c["messages"].clone()).expect("messages"),
            tools: serde_json::from_value(c["tools"].clone()).expect("tools"),
            kwargs: serde_json::Map::new(),
        };
        let got = t.render_chat(&chat, c["gen"].as_bool().unwrap()).unwrap();
        assert_eq!(got, c["rendered"].as_str().unwrap(), "{}", c["name"]);
    }
}
