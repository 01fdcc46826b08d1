//! Embeddings: all-MiniLM-L6-v2 (the sentence-transformers directory from
//! `scripts/fetch-models minilm`, and its GGUF made by llama.cpp's `convert_hf_to_gguf.py`,
//! `scripts/fetch-models minilm-gguf`) against the vectors and WordPiece ids sentence-transformers
//! recorded (`tests/data/embeddings/all-minilm-l6-v2.json`, `scripts/make-embedding-refs.py`);
//! batch invariance; the `embed` command and its refusals.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value as J;

use minfer::backend::BackendChoice;
use minfer::engine::Engine;
use minfer::SessionOptions;

use crate::common;

tests![
    minilm_matches_sentence_transformers,
    minilm_batch_of_32_equals_each_alone,
    minilm_gguf_equals_the_safetensors_directory,
    embed_command_prints_vectors_and_names_bad_input,
    decoder_last_token_pooling_is_transformers_hidden_state,
];

const MINILM: &str = "all-MiniLM-L6-v2";
const MINILM_GGUF: &str = "all-MiniLM-L6-v2-f32.gguf";

/// The sentence-transformers directory, or a skip.
pub(crate) fn minilm(test: &str) -> Option<PathBuf> {
    let d = common::model_path(MINILM);
    if d.join("model.safetensors").is_file() {
        Some(d)
    } else {
        common::skip(
            test,
            &format!("{} is missing (run scripts/fetch-models minilm)", d.display()),
        )
    }
}

/// The GGUF llama.cpp's converter made of it, or a skip.
pub(crate) fn minilm_gguf(test: &str) -> Option<PathBuf> {
    let p = common::model_path(MINILM_GGUF);
    if p.is_file() {
        Some(p)
    } else {
        common::skip(
            test,
            &format!("{} is missing (run scripts/fetch-models minilm-gguf)", p.display()),
        )
    }
}

pub(crate) struct Case {
    pub(crate) name: String,
    pub(crate) text: String,
    pub(crate) ids: Vec<u32>,
    pub(crate) embedding: Vec<f32>,
}

/// The 20 recorded texts with their ids and vectors.
pub(crate) fn cases() -> Vec<Case> {
    let doc = common::read_json(&common::data_dir().join("embeddings/all-minilm-l6-v2.json"));
    let floats = |v: &J| -> Vec<f32> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap() as f32)
            .collect()
    };
    doc["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| Case {
            name: c["name"].as_str().unwrap().to_string(),
            text: c["text"].as_str().unwrap().to_string(),
            ids: c["ids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_u64().unwrap() as u32)
                .collect(),
            embedding: floats(&c["embedding"]),
        })
        .collect()
}

pub(crate) fn cosine(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len());
    let dot: f64 = a.iter().zip(b).map(|(&x, &y)| x as f64 * y as f64).sum();
    let na: f64 = a.iter().map(|&x| (x as f64).powi(2)).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|&x| (x as f64).powi(2)).sum::<f64>().sqrt();
    dot / (na * nb)
}

fn cpu_engine(path: &Path) -> Engine {
    let opts = SessionOptions {
        backend: BackendChoice::Cpu,
        ..Default::default()
    };
    Engine::load(path, &opts).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every case's ids equal the `tokenizers` library's, and its vector is within cosine 0.9999
/// of sentence-transformers' (unit length, as its `Normalize` makes it).
fn check_against_references(engine: &mut Engine, what: &str) -> Vec<Vec<f32>> {
    let cases = cases();
    assert_eq!(cases.len(), 20);
    for c in &cases {
        let ids = engine.tokenize(&c.text, true, false).unwrap();
        assert_eq!(ids, c.ids, "{what}: WordPiece ids of {} ({:?})", c.name, c.text);
    }
    let texts: Vec<&str> = cases.iter().map(|c| c.text.as_str()).collect();
    let vecs = engine.embed(&texts).unwrap();
    let mut worst = (1.0f64, "");
    for (c, v) in cases.iter().zip(&vecs) {
        let cos = cosine(v, &c.embedding);
        assert!(
            cos >= 0.9999,
            "{what}: {}: cosine {cos} to sentence-transformers",
            c.name
        );
        let norm: f64 = v.iter().map(|&x| (x as f64).powi(2)).sum::<f64>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5, "{what}: {}: length {norm}", c.name);
        if cos < worst.0 {
            worst = (cos, &c.name);
        }
    }
    eprintln!("{what}: lowest cosine {:.9} ({})", worst.0, worst.1);
    vecs
}

fn minilm_matches_sentence_transformers() {
    let Some(dir) = minilm("minilm_matches_sentence_transformers") else {
        return;
    };
    let mut engine = cpu_engine(&dir);
    check_against_references(&mut engine, "safetensors");
}

/// 32 inputs of 3 to 213 tokens in one call give each input the bits it gets alone.
fn minilm_batch_of_32_equals_each_alone() {
    let Some(dir) = minilm("minilm_batch_of_32_equals_each_alone") else {
        return;
    };
    let mut engine = cpu_engine(&dir);
    let cases = cases();
    let mut texts: Vec<String> = cases.iter().map(|c| c.text.clone()).collect();
    for c in cases.iter().take(12) {
        // Other lengths again: a prefix of each of the first twelve texts.
        let cut = c
            .text
            .char_indices()
            .nth(c.text.chars().count() / 2)
            .map_or(0, |(i, _)| i);
        texts.push(format!("{} {}", &c.text[..cut], c.name));
    }
    assert_eq!(texts.len(), 32);
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let together = engine.embed(&refs).unwrap();
    for (t, v) in refs.iter().zip(&together) {
        let alone = engine.embed(&[t]).unwrap();
        assert_eq!(&alone[0], v, "{t:?}: embedded alone differs from its batch's vector");
    }
}

fn minilm_gguf_equals_the_safetensors_directory() {
    const T: &str = "minilm_gguf_equals_the_safetensors_directory";
    let Some(dir) = minilm(T) else {
        return;
    };
    let Some(gguf) = minilm_gguf(T) else {
        return;
    };
    let mut g = cpu_engine(&gguf);
    assert_eq!(g.model().arch.name(), "bert");
    let from_gguf = check_against_references(&mut g, "gguf");
    let mut s = cpu_engine(&dir);
    let texts: Vec<String> = cases().into_iter().map(|c| c.text).collect();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let from_dir = s.embed(&refs).unwrap();
    for ((a, b), t) in from_gguf.iter().zip(&from_dir).zip(&refs) {
        let cos = cosine(a, b);
        assert!(cos >= 0.999_999, "{t:?}: GGUF and safetensors vectors at cosine {cos}");
    }
}

fn embed_command_prints_vectors_and_names_bad_input() {
    let Some(dir) = minilm("embed_command_prints_vectors_and_names_bad_input") else {
        return;
    };
    let cases = cases();
    let run = |args: &[&str], stdin: Option<&str>| {
        let mut c = Command::new(common::exe());
        c.arg("embed").arg(&dir).args(args).env_remove("MINFER_MODEL");
        c.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = c.spawn().unwrap();
        let mut input = child.stdin.take().unwrap();
        if let Some(s) = stdin {
            input.write_all(s.as_bytes()).unwrap();
        }
        drop(input);
        child.wait_with_output().unwrap()
    };
    // Two texts as arguments: one JSON array per line, in order.
    let o = run(&[&cases[0].text, &cases[2].text], None);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    let lines: Vec<Vec<f32>> = String::from_utf8(o.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert!(cosine(&lines[0], &cases[0].embedding) >= 0.9999);
    assert!(cosine(&lines[1], &cases[2].embedding) >= 0.9999);
    // Lines of stdin, --json: the OpenAI shape with token counts.
    let o = run(&["--json"], Some(&format!("{}\n\n{}\n", cases[1].text, cases[3].text)));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let doc: J = serde_json::from_slice(&o.stdout).unwrap();
    let data = doc["data"].as_array().unwrap();
    assert_eq!(data.len(), 2);
    assert_eq!(data[1]["index"], 1);
    assert_eq!(data[0]["tokens"].as_u64(), Some(cases[1].ids.len() as u64));
    let tokens = (cases[1].ids.len() + cases[3].ids.len()) as u64;
    assert_eq!(doc["usage"]["prompt_tokens"].as_u64(), Some(tokens));
    // Past the 512 positions: refused with both numbers, or cut with --truncate.
    let long = "word ".repeat(700);
    let o = run(&[&long], None);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && !err.contains("panicked"), "{err}");
    assert!(err.contains("702 tokens") && err.contains("512"), "{err}");
    let o = run(&["--truncate", &long], None);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // An encoder generates no text.
    let o = Command::new(common::exe())
        .args(["run"])
        .arg(&dir)
        .arg("hello")
        .env_remove("MINFER_MODEL")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("embedding model"), "{err}");
}

/// A decoder as an embedding model (Qwen3-Embedding's last-token pooling): the random qwen3
/// checkpoint with a sentence-transformers pooling module and no normalisation. Its vector is
/// the final norm's output at the last token, so through the tied output matrix it must give
/// transformers' recorded logits at the last position.
fn decoder_last_token_pooling_is_transformers_hidden_state() {
    const T: &str = "decoder_last_token_pooling_is_transformers_hidden_state";
    let Some(root) = common::ref_dir(T) else {
        return;
    };
    let r = root.join("random");
    let src = r.join("hf/qwen3");
    let dir = std::env::temp_dir().join(format!("minfer-test-qwen3-embedding-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("1_Pooling")).unwrap();
    for e in std::fs::read_dir(&src).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), dir.join(e.file_name())).unwrap();
    }
    let modules = serde_json::json!([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ]);
    std::fs::write(dir.join("modules.json"), modules.to_string()).unwrap();
    let pooling = serde_json::json!({"word_embedding_dimension": 256, "pooling_mode_lasttoken": true});
    std::fs::write(dir.join("1_Pooling/config.json"), pooling.to_string()).unwrap();

    let refs = common::read_json(&r.join("refs/qwen3.hf-fp32.json"));
    let prompt: Vec<u32> = refs["prompt_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect();
    let want = common::read_npy_f32(&r.join("refs/qwen3.hf-fp32.all_logits.npy"));
    let mut engine = cpu_engine(&dir);
    let hp = engine.model().hparams.clone();
    assert_eq!(hp.pooling, Some(minfer::model::Pooling::Last));
    assert!(!hp.normalize);
    let out = engine.embed_tokens(std::slice::from_ref(&prompt)).unwrap();
    let v = &out[0].vector;
    assert_eq!(v.len(), hp.n_embd);
    let emb = engine.model().weight("token_embd.weight").unwrap().to_f32().unwrap();
    let last = &want[(prompt.len() - 1) * hp.n_vocab..];
    let worst = emb
        .chunks_exact(hp.n_embd)
        .zip(last)
        .map(|(row, &l)| (row.iter().zip(v).map(|(&a, &b)| a as f64 * b as f64).sum::<f64>() - l as f64).abs())
        .fold(0f64, f64::max);
    assert!(
        worst <= 5e-3,
        "logits through the pooled vector: max |Δ| {worst} vs transformers"
    );
    // Generation is refused: the graph has no LM head.
    let e = engine
        .generate(&prompt, &Default::default(), |_| minfer::engine::Flow::Continue)
        .unwrap_err();
    assert!(e.to_string().contains("embedding model"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}
