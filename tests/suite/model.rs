//! Whole-model parity with llama.cpp's recorded outputs (and transformers' for the f32/f16
//! random models), on the CPU backend with an f16 KV cache as the references used.

use std::path::Path;
use std::sync::Arc;

use minfer::backend::{BackendChoice, KvType};
use minfer::{load, Session, SessionOptions};

use crate::common;

tests![
    random_f32_f16_models_match_transformers,
    random_quantized_models_match_llama_cpp,
    real_models_match_llama_cpp,
    perplexity_matches_llama_cpp,
    smollm2_chat_reply_matches_llama_cpp,
    qwen25coder_matches_llama_cpp_avx2_build,
    random_ministral3_matches_transformers_and_llama_cpp,
];

pub fn session(path: &Path, n_ctx: usize, kv: KvType) -> Session {
    let model = Arc::new(load::open_model(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())));
    let opts = SessionOptions {
        n_ctx,
        n_batch: 512,
        threads: Some(2),
        backend: BackendChoice::Cpu,
        kv_type: Some(kv),
        gpu: None,
        ..SessionOptions::default()
    };
    Session::new(model, &opts).unwrap()
}

pub fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

fn argmax(x: &[f32]) -> usize {
    let mut best = 0;
    for (i, &v) in x.iter().enumerate() {
        if v > x[best] {
            best = i;
        }
    }
    best
}

fn top2(x: &[f32]) -> [(usize, f32); 2] {
    let a = argmax(x);
    let mut b = if a == 0 { 1 } else { 0 };
    for (i, &v) in x.iter().enumerate() {
        if i != a && v > x[b] {
            b = i;
        }
    }
    [(a, x[a]), (b, x[b])]
}

/// (max |Δ|, NMSE) of `ours` against `reference`.
pub fn diff(ours: &[f32], reference: &[f32]) -> (f32, f64) {
    assert_eq!(ours.len(), reference.len());
    let mut maxd = 0f32;
    let (mut num, mut den) = (0f64, 0f64);
    for (&a, &b) in ours.iter().zip(reference) {
        maxd = maxd.max((a - b).abs());
        num += ((a - b) as f64).powi(2);
        den += (b as f64).powi(2);
    }
    (maxd, num / den.max(1e-30))
}

struct TopCheck {
    counted: usize,
    agree: usize,
    /// llama.cpp's top-1 margin at each disagreeing position.
    disagree_margins: Vec<f32>,
    skipped_small_margin: Vec<usize>,
    max_top20_delta: f32,
}

/// Top-1 at every position whose recorded margin is ≥ `min_margin`; also the largest |Δ| of
/// the recorded top-20 logits.
fn check_top1(all: &[f32], n_vocab: usize, top20: &serde_json::Value, min_margin: f32) -> TopCheck {
    let mut c = TopCheck {
        counted: 0,
        agree: 0,
        disagree_margins: vec![],
        skipped_small_margin: vec![],
        max_top20_delta: 0.0,
    };
    for (pos, entries) in top20.as_array().unwrap().iter().enumerate() {
        let row = &all[pos * n_vocab..(pos + 1) * n_vocab];
        let e = entries.as_array().unwrap();
        let tok = |i: usize| e[i][0].as_u64().unwrap() as usize;
        let logit = |i: usize| e[i][1].as_f64().unwrap() as f32;
        for i in 0..e.len() {
            c.max_top20_delta = c.max_top20_delta.max((row[tok(i)] - logit(i)).abs());
        }
        if logit(0) - logit(1) < min_margin {
            c.skipped_small_margin.push(pos);
            continue;
        }
        c.counted += 1;
        if argmax(row) == tok(0) {
            c.agree += 1;
        } else {
            let ours = top2(row);
            c.disagree_margins.push(logit(0) - logit(1));
            eprintln!(
                "  position {pos}: llama.cpp top-2 {:?}/{:?} ({} {}), ours {:?}",
                tok(0),
                tok(1),
                logit(0),
                logit(1),
                ours
            );
        }
    }
    c
}

const RANDOM_ARCHS: [&str; 4] = ["llama", "qwen2", "qwen3", "gemma3"];
/// The dense families of the second batch with the GGUF types shipped in `random/gguf/`:
/// f32/f16 are checked against transformers, the others against llama.cpp. The files the
/// MANIFEST lists as not shipped (f16, Q8_0, Q4_K_M, Q4_0) are recreated byte-identically by
/// `quantize`; each one made is one more entry here.
pub const RANDOM_DENSE2: [(&str, &[&str]); 6] = [
    ("phi3", &["f32"]),
    ("olmo2", &["f32"]),
    ("granite", &["f32"]),
    ("smollm3", &["f32"]),
    ("glm4", &["f32"]),
    ("gemma4", &["f32"]),
];

/// The batch-2 dense families' quantized files: not shipped, recreated byte for byte by
/// `quantize` from the f32 GGUF (`common::quantized_ref`) and held against llama.cpp's refs.
const RANDOM_DENSE2_QUANTIZED: [&str; 7] = ["phi3", "olmo2", "granite", "smollm3", "glm4", "ministral3", "gemma4"];
const RANDOM_DENSE2_QTYPES: [&str; 3] = ["Q8_0", "Q4_K_M", "Q4_0"];

/// Every (arch, type) the random-model tests run: batch 1's archs × `types`, then the batch-2
/// dense families' shipped files of those types.
fn random_cases<'a>(types: &'a [&'a str]) -> Vec<(&'a str, &'a str)> {
    let mut v: Vec<(&str, &str)> = RANDOM_ARCHS
        .iter()
        .flat_map(|&a| types.iter().map(move |&t| (a, t)))
        .collect();
    for (a, shipped) in RANDOM_DENSE2 {
        v.extend(shipped.iter().filter(|t| types.contains(t)).map(|&t| (a, t)));
    }
    v
}
const RANDOM_QTYPES: [&str; 10] = [
    "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K_M", "Q5_K_M", "Q6_K", "Q3_K_M", "Q2_K",
];

/// Runs one random GGUF on the reference prompt; returns all-position logits.
fn run_random(gguf: &Path, prompt: &[u32]) -> (Vec<f32>, usize) {
    let mut s = session(gguf, prompt.len() + 8, KvType::F16);
    let n_vocab = s.n_vocab();
    (s.eval(prompt, true).unwrap(), n_vocab)
}

/// f32 and f16 GGUFs against transformers' float32 logits at every position: max |Δ| ≤ 5e-3.
fn random_f32_f16_models_match_transformers() {
    let t = "random_f32_f16_models_match_transformers";
    let Some(root) = common::ref_dir(t) else {
        return;
    };
    for (arch, ty) in random_cases(&["f32", "f16"]) {
        let hf = common::read_json(&root.join(format!("random/refs/{arch}.hf-fp32.json")));
        let prompt = ids(&hf["prompt_ids"]);
        let want = common::read_npy_f32(&root.join(format!("random/refs/{arch}.hf-fp32.all_logits.npy")));
        let (got, _) = run_random(&root.join(format!("random/gguf/{arch}-{ty}.gguf")), &prompt);
        let (maxd, nmse) = diff(&got, &want);
        eprintln!("{arch}-{ty}: max|Δ| {maxd:.2e}, NMSE {nmse:.2e} vs transformers");
        assert!(maxd <= 5e-3, "{arch}-{ty}: max |Δ| {maxd} > 5e-3");
    }
}

/// Every quantized random model against llama.cpp: full last-position logits within
/// max |Δ| ≤ 0.1 or NMSE ≤ 1e-3, the recorded top-20 at every position likewise, and top-1
/// equal wherever llama.cpp's margin exceeds 0.1.
fn random_quantized_models_match_llama_cpp() {
    let t = "random_quantized_models_match_llama_cpp";
    let Some(root) = common::ref_dir(t) else {
        return;
    };
    let mut failures = Vec::new();
    eprintln!(
        "{:<18} {:>10} {:>10} {:>12} {:>8}",
        "model", "max|Δ|", "NMSE", "top20 max|Δ|", "top-1"
    );
    let mut cases = random_cases(&RANDOM_QTYPES);
    for a in RANDOM_DENSE2_QUANTIZED {
        cases.extend(RANDOM_DENSE2_QTYPES.iter().map(|&ty| (a, ty)));
    }
    for (arch, ty) in cases {
        let name = format!("{arch}-{ty}");
        let r = common::read_json(&root.join(format!("random/refs/{name}.json")));
        let prompt = ids(&r["prompt_ids"]);
        let Some(gguf) = common::random_gguf(t, &root, &name) else {
            return;
        };
        let (all, n_vocab) = run_random(&gguf, &prompt);
        let last = &all[(prompt.len() - 1) * n_vocab..];
        let want = common::read_npy_f32(&root.join(format!("random/refs/{name}.last_logits.npy")));
        let (maxd, nmse) = diff(last, &want);
        let top = check_top1(&all, n_vocab, &r["top20_per_position"], 0.1);
        eprintln!(
            "{name:<18} {maxd:>10.3e} {nmse:>10.3e} {:>12.3e} {:>4}/{:<3}",
            top.max_top20_delta, top.agree, top.counted
        );
        if !(maxd <= 0.1 || nmse <= 1e-3) {
            failures.push(format!("{name}: last logits max|Δ| {maxd}, NMSE {nmse}"));
        }
        if top.agree != top.counted {
            failures.push(format!("{name}: top-1 {}/{}", top.agree, top.counted));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

const REAL_CASES: [(&str, &str); 5] = [
    ("smollm2.p1_capital", "SmolLM2-135M-Instruct.Q4_1.gguf"),
    ("smollm2.p2_chat_jinja", "SmolLM2-135M-Instruct.Q4_1.gguf"),
    ("smollm2.p3_paragraph", "SmolLM2-135M-Instruct.Q4_1.gguf"),
    ("gemma3.p1_capital", "gemma-3-270m-Q4_K_M.gguf"),
    ("gemma3.p3_paragraph", "gemma-3-270m-Q4_K_M.gguf"),
];

/// The real models from llama.cpp's prompt ids, against the top-20 logits llama.cpp recorded at
/// every position. The CPU backend reproduces the arithmetic of the paths llama.cpp's AVX-512
/// build takes for these prompts (tinyBLAS and ggml's dot products for q4_1, q5_0, q8_0, its
/// tiled K-quant GEMM for q6_K batches, its repacked q4_K GEMM/GEMV, its attention, softmax,
/// SiLU and RoPE), so every case comes out bit for bit.
/// Asserted: every position at margin ≥ 0.05 agrees, the last logits are equal (NMSE
/// ≤ 1e-12) and so are the first 16 greedy tokens (or up to end-of-turn), in every case.
fn real_models_match_llama_cpp() {
    let t = "real_models_match_llama_cpp";
    let Some(root) = common::ref_dir(t) else {
        return;
    };
    let mut greedy_ok = 0;
    let mut top1_failures = Vec::new();
    for (case, file) in REAL_CASES {
        let Some(model) = common::real_model(t, file) else {
            return;
        };
        let r = common::read_json(&root.join(format!("real/{case}.json")));
        let prompt = ids(&r["prompt_ids"]);
        let want_greedy = ids(&r["greedy_ids"]);
        let mut s = session(&model, prompt.len() + 40, KvType::F16);
        let n_vocab = s.n_vocab();
        let all = s.eval(&prompt, true).unwrap();
        let top = check_top1(&all, n_vocab, &r["top20_per_position"], 0.05);
        let want_last = common::read_npy_f32(&root.join(format!("real/{case}.last_logits.npy")));
        let (maxd, nmse) = diff(&all[(prompt.len() - 1) * n_vocab..], &want_last);
        // Greedy continuation.
        let n_check = want_greedy.len().min(16);
        let mut logits = all[(prompt.len() - 1) * n_vocab..].to_vec();
        let mut got = Vec::new();
        let mut diverged = None;
        for step in 0..n_check {
            let next = argmax(&logits) as u32;
            got.push(next);
            if next != want_greedy[step] {
                let ours = top2(&logits);
                diverged = Some(format!(
                    "step {step}: llama.cpp {} vs ours {next}; our top-2 {ours:?}, llama.cpp's logit for its token here: {}",
                    want_greedy[step],
                    logits[want_greedy[step] as usize]
                ));
                break;
            }
            if step + 1 < n_check {
                logits = s.eval(&[next], false).unwrap();
            }
        }
        eprintln!(
            "{case}: top-1 {}/{} (small margins at {:?}), last logits max|Δ| {maxd:.3}, NMSE {nmse:.2e}, greedy {}",
            top.agree,
            top.counted,
            top.skipped_small_margin,
            diverged.as_deref().unwrap_or("identical")
        );
        if diverged.is_none() {
            greedy_ok += 1;
        }
        if top.agree < top.counted || nmse > 1e-12 || diverged.is_some() {
            top1_failures.push(format!(
                "{case}: top-1 {}/{}, NMSE {nmse:e}, greedy {}",
                top.agree,
                top.counted,
                diverged.as_deref().unwrap_or("identical")
            ));
        }
    }
    assert!(top1_failures.is_empty(), "not llama.cpp's logits: {top1_failures:?}");
    assert_eq!(greedy_ok, REAL_CASES.len());
}

/// `perplexity` on the Apache-2.0 text against llama-perplexity, which ran with its default
/// flash attention: for batches of 64 or more that is ggml's tiled flash-attention kernel, whose
/// order `--flash-attn` reproduces. Asserted: every running PPL, the final PPL and its error
/// equal to the digits llama.cpp printed (SmolLM2 15.9289 ± 1.42219, gemma-3 10.1452 ± 0.86669);
/// Qwen2.5-Coder's reference, from an AVX2 build, within 0.8 %.
fn perplexity_matches_llama_cpp() {
    let t = "perplexity_matches_llama_cpp";
    let Some(root) = common::ref_dir(t) else { return };
    let results = common::read_json(&root.join("ppl/results.json"));
    let text = std::fs::read_to_string(root.join("ppl/ppl_apache2.txt")).unwrap();
    for r in results["results"].as_array().unwrap() {
        let file = r["model_file"].as_str().unwrap();
        let Some(path) = common::real_model(t, file) else {
            return;
        };
        let mut s = session(&path, 512, KvType::F16);
        // llama-perplexity ran with its default `-fa auto`, which is on for the CPU.
        s.set_flash_attn(true);
        let tok = minfer::tokenizer::Tokenizer::from_gguf(&s.model.metadata).unwrap();
        let got = minfer::perplexity::perplexity(&mut s, &tok, &text, 512, None, |_, _| {}).unwrap();
        let want = r["final_ppl"].as_f64().unwrap();
        let rel = (got.ppl - want).abs() / want;
        eprintln!(
            "{file}: PPL {:.4} ± {:.5} (llama.cpp {want:.4}), {:.3} % off; running {:?}",
            got.ppl,
            got.err,
            rel * 100.0,
            got.running
        );
        assert_eq!(
            got.running.len() as u64,
            r["n_chunks"].as_u64().unwrap(),
            "{file}: chunk count"
        );
        // A reference from llama.cpp's AVX2 build (Qwen2.5-Coder) sums in other orders than the
        // AVX-512 ones this backend follows: within 0.8 %, the spread between llama.cpp's own
        // builds and settings (measured 0.47 %: 3.0800 vs 3.0945).
        if r["machine"].as_str().is_some_and(|m| m.contains("no AVX-512")) {
            assert!(rel <= 8e-3, "{file}: PPL {} vs llama.cpp's AVX2 build {want}", got.ppl);
            continue;
        }
        // llama.cpp printed 4 decimals (5 for the error): every figure equal to those.
        let printed = |x: f64, d: i32| (x * 10f64.powi(d)).round();
        let running: Vec<f64> = r["chunk_running_ppl"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect();
        for (i, (&ours, &theirs)) in got.running.iter().zip(&running).enumerate() {
            assert_eq!(
                printed(ours, 4),
                printed(theirs, 4),
                "{file}: chunk {i}: {ours} vs llama.cpp {theirs}"
            );
        }
        let want_err = r["final_ppl_stderr"].as_f64().unwrap();
        assert_eq!(
            printed(got.err, 5),
            printed(want_err, 5),
            "{file}: ± {} vs {want_err}",
            got.err
        );
        assert_eq!(
            printed(got.ppl, 4),
            printed(want, 4),
            "{file}: PPL {} vs llama.cpp {want}",
            got.ppl
        );
    }
}

/// The chat-templated SmolLM2 prompt: rendered by the model's own template, tokenized to
/// llama.cpp's ids, and the greedy reply through the generation API equals llama.cpp's.
fn smollm2_chat_reply_matches_llama_cpp() {
    use minfer::chat::ChatMessage;
    use minfer::engine::{Engine, Flow, GenerateOptions};
    use minfer::sampling::SamplerConfig;

    let t = "smollm2_chat_reply_matches_llama_cpp";
    let Some(path) = common::real_model(t, "SmolLM2-135M-Instruct.Q4_1.gguf") else {
        return;
    };
    let r = common::read_json(&common::data_dir().join("real/smollm2.p2_chat_jinja.json"));
    let opts = SessionOptions {
        n_ctx: 256,
        n_batch: 512,
        threads: Some(2),
        backend: BackendChoice::Cpu,
        kv_type: Some(KvType::F16),
        gpu: None,
        ..SessionOptions::default()
    };
    let mut engine = Engine::load(&path, &opts).unwrap();
    let msgs: Vec<ChatMessage> = serde_json::from_value(r["chat"]["messages"].clone()).unwrap();
    let text = engine.apply_chat_template(&msgs, true).unwrap();
    assert_eq!(text, r["chat"]["rendered_text"].as_str().unwrap());
    let Some(refs) = common::ref_file(t, "real/smollm2.p2_chat_jinja.json") else {
        return;
    };
    let refs = common::read_json(&refs);
    let ids = engine.tokenize(&text, true, true).unwrap();
    assert_eq!(ids, super::model::ids(&refs["prompt_ids"]));
    let gen = GenerateOptions {
        max_tokens: 48,
        sampler: SamplerConfig::greedy(),
        stop: vec![],
        ignore_eos: false,
        ..GenerateOptions::default()
    };
    let mut streamed = String::new();
    let out = engine
        .generate(&ids, &gen, |piece| {
            streamed.push_str(piece);
            Flow::Continue
        })
        .unwrap();
    assert_eq!(out.tokens, super::model::ids(&refs["greedy_ids"]));
    assert_eq!(streamed, out.text);
    assert_eq!(out.text, "The capital of France is Paris.");
}

/// Qwen2.5-Coder-0.5B (qwen2: q/k/v biases, untied Q8_0 output, mostly Q5_0) against references
/// made by llama.cpp's AVX2 build, whose sums differ from the AVX-512 orders this backend
/// reproduces (`real_models_match_llama_cpp`), so within tolerances rather than bit for bit:
/// top-1 at every position whose recorded margin is ≥ 0.1, the last logits within NMSE 2e-3
/// (measured 1.5e-4 to 1.1e-3), and the recorded greedy continuation up to the first step where
/// our own top-2 margin is under 0.5 (near-ties flip between builds).
fn qwen25coder_matches_llama_cpp_avx2_build() {
    let t = "qwen25coder_matches_llama_cpp_avx2_build";
    let Some(root) = common::ref_dir(t) else { return };
    let Some(model) = common::real_model(t, QWEN25CODER) else {
        return;
    };
    let mut failures = Vec::new();
    for case in ["p1_capital", "p2_chat_jinja", "p3_paragraph", "p4_tools_jinja"] {
        let r = common::read_json(&root.join(format!("real/qwen25coder.{case}.json")));
        let prompt = ids(&r["prompt_ids"]);
        let want_greedy = ids(&r["greedy_ids"]);
        let mut s = session(&model, prompt.len() + want_greedy.len() + 8, KvType::F16);
        let n_vocab = s.n_vocab();
        let all = s.eval(&prompt, true).unwrap();
        let top = check_top1(&all, n_vocab, &r["top20_per_position"], 0.1);
        let want_last = common::read_npy_f32(&root.join(format!("real/qwen25coder.{case}.last_logits.npy")));
        let (maxd, nmse) = diff(&all[(prompt.len() - 1) * n_vocab..], &want_last);
        let mut logits = all[(prompt.len() - 1) * n_vocab..].to_vec();
        let mut same = 0;
        let mut flip = None;
        for (step, &want) in want_greedy.iter().enumerate() {
            let next = argmax(&logits) as u32;
            if next != want {
                let [(_, a), (_, b)] = top2(&logits);
                flip = Some(a - b);
                break;
            }
            same += 1;
            if step + 1 < want_greedy.len() {
                logits = s.eval(&[next], false).unwrap();
            }
        }
        eprintln!(
            "qwen25coder.{case}: top-1 {}/{} (small margins at {:?}), top-20 max |Δ| {:.3}, last logits max |Δ| {maxd:.3}, NMSE {nmse:.2e}, greedy {same}/{} equal (our margin where it flips: {flip:?})",
            top.agree,
            top.counted,
            top.skipped_small_margin,
            top.max_top20_delta,
            want_greedy.len()
        );
        if top.agree < top.counted || nmse > 2e-3 || flip.is_some_and(|m| m >= 0.5) {
            failures.push(format!(
                "{case}: top-1 {}/{}, NMSE {nmse:.2e}, greedy {same}/{}",
                top.agree,
                top.counted,
                want_greedy.len()
            ));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

const QWEN25CODER: &str = "qwen2.5-coder-0.5b-instruct.gguf";

/// Ministral 3 (GGUF `mistral3`: YaRN RoPE with an original context of 16 and the attention
/// temperature, which the 24-token prompt crosses at position 16): the f32 GGUF against
/// transformers' float32 logits at every position (max |Δ| ≤ 5e-3) and llama.cpp's last ones.
fn random_ministral3_matches_transformers_and_llama_cpp() {
    let t = "random_ministral3_matches_transformers_and_llama_cpp";
    let Some(root) = common::ref_dir(t) else {
        return;
    };
    let hf = common::read_json(&root.join("random/refs/ministral3.hf-fp32.json"));
    let prompt = ids(&hf["prompt_ids"]);
    let want = common::read_npy_f32(&root.join("random/refs/ministral3.hf-fp32.all_logits.npy"));
    let (got, n_vocab) = run_random(&root.join("random/gguf/ministral3-f32.gguf"), &prompt);
    let (maxd, nmse) = diff(&got, &want);
    eprintln!("ministral3-f32: max|Δ| {maxd:.2e}, NMSE {nmse:.2e} vs transformers");
    assert!(maxd <= 5e-3, "ministral3-f32: max |Δ| {maxd} > 5e-3 vs transformers");
    // The positions the temperature scales (pos ≥ 16), on their own.
    let late = 16 * n_vocab;
    let (late_d, _) = diff(&got[late..], &want[late..]);
    assert!(late_d <= 5e-3, "ministral3-f32: positions ≥ 16 max |Δ| {late_d}");
    let r = common::read_json(&root.join("random/refs/ministral3-f32.json"));
    assert_eq!(ids(&r["prompt_ids"]), prompt);
    let last = &got[(prompt.len() - 1) * n_vocab..];
    let want = common::read_npy_f32(&root.join("random/refs/ministral3-f32.last_logits.npy"));
    let (maxd, nmse_l) = diff(last, &want);
    eprintln!("ministral3-f32: last logits max|Δ| {maxd:.2e}, NMSE {nmse_l:.2e} vs llama.cpp");
    assert!(maxd <= 5e-3, "ministral3-f32: last logits max |Δ| {maxd} vs llama.cpp");
    let top = check_top1(&got, n_vocab, &r["top20_per_position"], 0.1);
    assert_eq!(top.agree, top.counted, "ministral3-f32: top-1 vs llama.cpp");
    let _ = nmse;
}
