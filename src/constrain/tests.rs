use serde_json::{json, Value};

use super::{Constrainer, ConstraintSpec};
use crate::error::Error;
use crate::tokenizer::{SpecialIds, Tokenizer, TokenizerSpec};

/// SentencePiece with byte fallback: `<unk>`, `<s>`, `</s>` (EOS), every byte, and a few words
/// that span several JSON characters.
fn tiny() -> Tokenizer {
    let mut tokens: Vec<String> = ["<unk>", "<s>", "</s>"].iter().map(|s| s.to_string()).collect();
    let mut types = vec![2, 3, 3];
    for b in 0..=255u32 {
        tokens.push(format!("<0x{b:02X}>"));
        types.push(6);
    }
    for w in ["{\"", "\":", "▁\"", "true", "12", "abc", "\"}"] {
        tokens.push(w.to_string());
        types.push(1);
    }
    let n = tokens.len();
    Tokenizer::from_parts(TokenizerSpec {
        model: "llama".into(),
        tokens,
        token_types: types,
        scores: vec![0.0; n],
        special: SpecialIds {
            eos: Some(2),
            ..Default::default()
        },
        ..Default::default()
    })
    .unwrap()
}

/// Runs a constraint to its end over pseudo-random logits: each step takes the highest allowed
/// logit. Returns the text and whether it ended by end-of-generation (rather than completion).
fn walk(tok: &Tokenizer, spec: &ConstraintSpec, seed: u64, max: usize) -> (String, bool) {
    let c = Constrainer::new(tok).unwrap();
    let mut m = c.constraint(spec).unwrap();
    let mut s = seed | 1;
    let mut bytes = Vec::new();
    for _ in 0..max {
        let mut l: Vec<f32> = (0..tok.n_vocab() + 3)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                (s >> 40) as f32 / (1u64 << 24) as f32
            })
            .collect();
        m.mask(&mut l).unwrap();
        // Rows past the tokenizer's vocabulary are never allowed.
        assert!(l[tok.n_vocab()..].iter().all(|x| *x == f32::NEG_INFINITY));
        let t = crate::logits::argmax(&l);
        assert!(l[t as usize].is_finite(), "nothing allowed");
        if tok.is_eog(t) {
            return (String::from_utf8(bytes).unwrap(), true);
        }
        m.accept(t).unwrap();
        bytes.extend_from_slice(&tok.piece(t, false));
        if m.is_complete() {
            return (String::from_utf8(bytes).unwrap(), false);
        }
    }
    panic!("no end after {max} tokens: {:?}", String::from_utf8_lossy(&bytes));
}

#[test]
fn regex_output_matches_and_ends() {
    let tok = tiny();
    for seed in 0..8 {
        let (text, _) = walk(&tok, &ConstraintSpec::Regex("(ab|c)[0-9]{2,4}!".into()), seed, 64);
        let re_ok = text.ends_with('!')
            && (text.starts_with("ab") || text.starts_with('c'))
            && text
                .trim_start_matches("ab")
                .trim_start_matches('c')
                .trim_end_matches('!')
                .len()
                >= 2;
        assert!(re_ok, "{text:?}");
    }
}

#[test]
fn json_schema_output_parses_and_has_the_fields() {
    let tok = tiny();
    let schema = json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 6},
            "n": {"type": "integer", "minimum": 0, "maximum": 99},
            "kind": {"enum": ["cat", "dog"]},
            "tags": {"type": "array", "items": {"$ref": "#/$defs/tag"}, "maxItems": 2},
        },
        "required": ["name", "n", "kind", "tags"],
        "additionalProperties": false,
        "$defs": {"tag": {"type": "boolean"}},
    });
    for seed in 0..6 {
        let (text, _) = walk(&tok, &ConstraintSpec::JsonSchema(schema.clone()), seed, 400);
        let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
        assert!(v["name"].as_str().is_some_and(|s| s.chars().count() <= 6), "{text}");
        assert!(v["n"].as_u64().is_some_and(|n| n <= 99), "{text}");
        assert!(["cat", "dog"].contains(&v["kind"].as_str().unwrap_or("")), "{text}");
        let tags = v["tags"].as_array().unwrap();
        assert!(tags.len() <= 2 && tags.iter().all(Value::is_boolean), "{text}");
        assert_eq!(v.as_object().unwrap().len(), 4, "{text}");
    }
}

#[test]
fn json_object_is_an_object() {
    let tok = tiny();
    for seed in 0..4 {
        let c = Constrainer::new(&tok).unwrap();
        let mut m = c.constraint(&ConstraintSpec::JsonObject).unwrap();
        // The first token must open an object.
        let mut l = vec![0.0f32; tok.n_vocab()];
        m.mask(&mut l).unwrap();
        let open = |id: usize| tok.piece(id as u32, false).first() == Some(&b'{');
        assert!(
            l.iter().enumerate().all(|(i, x)| x.is_infinite() || open(i)),
            "seed {seed}"
        );
        // End-of-generation is not allowed before the object closes.
        assert_eq!(l[2], f32::NEG_INFINITY);
    }
}

#[test]
fn end_of_generation_only_where_the_grammar_may_stop() {
    let tok = tiny();
    let c = Constrainer::new(&tok).unwrap();
    // "a+" may stop after any a: EOS is allowed then, not before.
    let mut m = c.constraint(&ConstraintSpec::Regex("a+".into())).unwrap();
    let mut l = vec![0.0f32; tok.n_vocab()];
    m.mask(&mut l).unwrap();
    assert_eq!(l[2], f32::NEG_INFINITY);
    let a = tok.token_id("<0x61>").unwrap();
    assert_eq!(l[a as usize], 0.0);
    m.accept(a).unwrap();
    assert!(!m.is_complete());
    let mut l = vec![0.0f32; tok.n_vocab()];
    m.mask(&mut l).unwrap();
    assert_eq!((l[2], l[a as usize]), (0.0, 0.0));
    // A fixed string completes: nothing may follow.
    let mut m = c.constraint(&ConstraintSpec::Lark("start: \"abc\"".into())).unwrap();
    m.accept(tok.token_id("abc").unwrap()).unwrap();
    assert!(m.is_complete());
}

#[test]
fn bad_specs_are_errors_naming_the_fault() {
    let tok = tiny();
    let c = Constrainer::new(&tok).unwrap();
    let cases = [
        (
            ConstraintSpec::JsonSchema(json!({"type": "no-such-type"})),
            "no-such-type",
        ),
        (ConstraintSpec::JsonSchema(json!([1, 2])), "[1,2]"),
        (
            ConstraintSpec::JsonSchema(json!({"$ref": "#/$defs/missing"})),
            "missing",
        ),
        (ConstraintSpec::Regex("(ab".into()), ""),
        (ConstraintSpec::Lark("start: foo".into()), "foo"),
        (ConstraintSpec::Lark("  ".into()), "empty"),
    ];
    for (spec, what) in cases {
        for r in [spec.check(), c.constraint(&spec).map(drop)] {
            match r {
                Err(Error::Constraint(m)) => assert!(m.contains(what), "{spec:?}: {m:?} lacks {what:?}"),
                other => panic!("{spec:?}: {other:?}"),
            }
        }
    }
    ConstraintSpec::JsonObject.check().unwrap();
    ConstraintSpec::JsonSchema(json!(true)).check().unwrap();
}
