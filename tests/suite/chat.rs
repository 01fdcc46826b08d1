//! Chat templates rendered as HF transformers' `apply_chat_template` renders them with jinja2.

use minfer::chat::{ChatMessage, ChatTemplate};
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
