//! Unit tests on tiny hand-made vocabularies (the real models are checked in tests/suite/tokenize.rs).

use super::pretokenize::{cpt_flags, PreTokenizer};
use super::*;

fn words(pre: &str, text: &str) -> Vec<String> {
    let p = PreTokenizer::from_name(Some(pre)).unwrap();
    p.split(text).into_iter().map(|(a, b)| text[a..b].to_string()).collect()
}

#[test]
fn category_flags_match_llama_cpp_table() {
    assert_eq!(cpt_flags('a') & 0x04, 0x04); // letter
    assert_eq!(cpt_flags('7') & 0x02, 0x02); // number
    assert_eq!(cpt_flags('²') & 0x02, 0x02); // No is \p{N}
    assert_eq!(cpt_flags('!') & 0x20, 0x20); // punctuation
    assert_eq!(cpt_flags(' ') & 0x100, 0x100); // whitespace
    assert_eq!(cpt_flags('\u{3000}') & 0x100, 0x100);
    assert_eq!(cpt_flags('\u{378}'), 0x01); // unassigned: UNDEFINED
    assert_eq!(cpt_flags('日') & 0x04, 0x04);
}

#[test]
fn gpt2_split() {
    assert_eq!(words("gpt-2", "Hello world"), ["Hello", " world"]);
    assert_eq!(words("gpt-2", "  Hello  world  "), [" ", " Hello", " ", " world", "  "]);
    // `\s+(?!\S)` leaves the last whitespace before a word to stand alone
    assert_eq!(
        words("gpt-2", "I'm 42!!\n\nok"),
        ["I", "'m", " 42", "!!", "\n", "\n", "ok"]
    );
    assert_eq!(words("gpt-2", "a\nb"), ["a", "\n", "b"]);
}

#[test]
fn smollm_isolates_digits() {
    assert_eq!(
        words("smollm", "x 2024-01"),
        ["x", " ", "2", "0", "2", "4", "-", "0", "1"]
    );
}

#[test]
fn llama3_and_qwen2_split() {
    assert_eq!(
        words("llama-bpe", "Hello 12345 WE'RE\r\n\n  x"),
        ["Hello", " ", "123", "45", " WE", "'RE", "\r\n\n", " ", " x"]
    );
    assert_eq!(words("qwen2", "ab 123"), ["ab", " ", "1", "2", "3"]);
    assert_eq!(words("llama-bpe", "a...\n\nb"), ["a", "...\n\n", "b"]);
}

#[test]
fn default_split_groups_punctuation_and_digit_triples() {
    assert_eq!(words("default", "a+=b 12345"), ["a", "+=", "b", " ", "123", "45"]);
}

#[test]
fn unknown_pre_is_named() {
    let err = PreTokenizer::from_name(Some("no-such-pre")).unwrap_err().to_string();
    assert!(err.contains("'no-such-pre'"), "{err}");
}

fn tiny_bpe(merges: &[&str]) -> Tokenizer {
    let tokens = [
        "<|endoftext|>",
        "a",
        "b",
        "c",
        "ab",
        "bc",
        "abc",
        "Ġ",
        "Ġa",
        "<|im_end|>",
    ];
    Tokenizer::from_parts(TokenizerSpec {
        model: "gpt2".into(),
        pre: Some("gpt-2".into()),
        tokens: tokens.iter().map(|s| s.to_string()).collect(),
        token_types: vec![3, 1, 1, 1, 1, 1, 1, 1, 1, 3],
        merges: merges.iter().map(|s| s.to_string()).collect(),
        special: SpecialIds {
            eos: Some(9),
            ..Default::default()
        },
        ..Default::default()
    })
    .unwrap()
}

#[test]
fn bpe_merges_lowest_rank_first() {
    let t = tiny_bpe(&["a b", "b c", "ab c"]);
    assert_eq!(t.encode("abc", false, false).unwrap(), [6]);
    // "b c" first: then "a"+"bc" has no merge
    let t = tiny_bpe(&["b c", "a b", "ab c"]);
    assert_eq!(t.encode("abc", false, false).unwrap(), [1, 5]);
    let Kind::Bpe(bpe) = &t.kind else { panic!() };
    assert_eq!(bpe.rank(&t.vocab, "a", "b"), Some(1));
    assert_eq!(bpe.rank(&t.vocab, "ab", "c"), Some(2));
    assert_eq!(bpe.rank(&t.vocab, "c", "a"), None);
    assert_eq!(bpe.n_merges(), 3);
}

#[test]
fn bpe_equal_ranks_merge_leftmost() {
    // "a a a": both pairs have rank 0; the left one merges, the right "a" stays alone
    let t = Tokenizer::from_parts(TokenizerSpec {
        model: "gpt2".into(),
        pre: Some("gpt-2".into()),
        tokens: vec!["a".into(), "aa".into()],
        merges: vec!["a a".into()],
        ..Default::default()
    })
    .unwrap();
    assert_eq!(t.encode("aaa", false, false).unwrap(), [1, 0]);
}

#[test]
fn special_tokens_are_cut_out_only_when_parsing_special() {
    let t = tiny_bpe(&["a b", "b c", "ab c", "Ġ a"]);
    assert_eq!(t.encode("abc<|im_end|> a", false, true).unwrap(), [6, 9, 8]);
    // not parsed: the text goes through BPE; '<', '|', … are not in the vocab and vanish as llama.cpp's do
    let ids = t.encode("a<|im_end|>", false, false).unwrap();
    assert_eq!(ids.first(), Some(&1));
    assert!(!ids.contains(&9));
    assert!(t.is_eog(9) && t.is_eog(0) && !t.is_eog(1));
    assert_eq!(t.decode(&[6, 9, 8], false).unwrap(), "abc<|im_end|> a");
    assert_eq!(t.decode(&[6, 9, 8], true).unwrap(), "abc a");
}

fn tiny_spm(add_space_prefix: bool) -> Tokenizer {
    let mut tokens: Vec<String> = ["<unk>", "<s>", "</s>", "▁", "h", "i", "hi", "▁hi", "▁h"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let mut types = vec![2, 3, 3, 1, 1, 1, 1, 1, 1];
    let mut scores = vec![0.0, 0.0, 0.0, -1.0, -2.0, -2.0, -1.5, -0.5, -3.0];
    for b in 0..=255u32 {
        tokens.push(format!("<0x{b:02X}>"));
        types.push(6);
        scores.push(0.0);
    }
    Tokenizer::from_parts(TokenizerSpec {
        model: "llama".into(),
        tokens,
        token_types: types,
        scores,
        add_space_prefix: Some(add_space_prefix),
        ..Default::default()
    })
    .unwrap()
}

#[test]
fn spm_merges_by_score_with_byte_fallback() {
    let t = tiny_spm(true);
    assert_eq!(t.bos(), Some(1));
    assert!(t.add_bos());
    // " hi" → "▁hi" (score -0.5 beats "hi" -1.5 … merge order: "▁h"(-3) vs "hi"(-1.5): "hi" first, then "▁"+"hi")
    assert_eq!(t.encode("hi", true, true).unwrap(), [1, 7]);
    // "é" is not a token: two byte tokens
    let ids = t.encode("é", false, true).unwrap();
    assert_eq!(ids, [3, 9 + 0xC3, 9 + 0xA9]);
    assert_eq!(t.decode(&ids, false).unwrap(), "é");
    assert_eq!(t.decode(&[1, 7], true).unwrap(), " hi");
    assert_eq!(t.decode(&[7], true).unwrap(), "hi");
    let t = tiny_spm(false);
    assert_eq!(t.encode("hi", false, true).unwrap(), [6]);
}

#[test]
fn stream_decoder_holds_partial_chars() {
    let t = tiny_spm(false);
    let ids = t.encode("é", false, true).unwrap();
    let mut s = StreamDecoder::new(&t);
    assert_eq!(s.push(ids[0]), "");
    assert_eq!(s.push(ids[1]), "é");
    assert_eq!(s.flush(), "");
    assert_eq!(s.push(9 + 0xE2), "");
    assert_eq!(s.push(9 + 0x41), "\u{FFFD}A");
    assert_eq!(s.push(9 + 0xF0), "");
    assert_eq!(s.flush(), "\u{FFFD}");
}

#[test]
fn hostile_specs_are_refused() {
    let bad = |spec: TokenizerSpec| {
        Tokenizer::from_parts(spec)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
    };
    let base = TokenizerSpec {
        model: "gpt2".into(),
        tokens: vec!["a".into(), "b".into()],
        ..Default::default()
    };
    assert!(bad(TokenizerSpec {
        model: "wordpiece".into(),
        ..base.clone()
    })
    .contains("'wordpiece'"));
    assert!(bad(TokenizerSpec {
        merges: vec!["ab".into()],
        ..base.clone()
    })
    .contains("\"ab\""));
    assert!(bad(TokenizerSpec {
        tokens: vec!["a".into(), "a".into()],
        ..base.clone()
    })
    .contains("twice"));
    assert!(bad(TokenizerSpec {
        tokens: vec![],
        ..base.clone()
    })
    .contains("empty"));
    assert!(bad(TokenizerSpec {
        add_bos: Some(true),
        ..base.clone()
    })
    .contains("BOS"));
    assert!(bad(TokenizerSpec {
        scores: vec![0.0],
        ..base
    })
    .contains("1 scores"));
}
