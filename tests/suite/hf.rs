//! Hugging Face models: the random llama/qwen2/qwen3/gemma3/phi3 safetensors directories against
//! transformers' recorded logits and against their GGUF f32 conversions run by this engine;
//! config → hyperparameters equal to the GGUF path's; tokenizer.json against the GGUF tokenizer;
//! sharded, wrapped and bf16 checkpoints the test writes; HF cache resolution on a fake cache
//! tree; hostile safetensors files.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{json, Value as J};

use minfer::backend::{BackendChoice, KvType};
use minfer::engine::{Engine, GenerateOptions};
use minfer::hf::{resolve_in, HfDir, HubName, SafetensorsFile};
use minfer::load::{self, Source};
use minfer::model::RopeMode;
use minfer::sampling::SamplerConfig;
use minfer::tokenizer::Tokenizer;
use minfer::{Model, Session, SessionOptions};

use crate::common;

tests![
    random_hf_models_match_transformers,
    random_hf_models_greedy_equals_gguf_f32,
    hf_dirs_rebuilt_from_gguf_match_transformers,
    fused_hf_tensor_of_the_wrong_size_is_named,
    hf_hparams_equal_gguf_hparams,
    hf_tokenizer_matches_gguf_tokenizer,
    engine_runs_an_hf_directory,
    sharded_wrapped_checkpoint_equals_the_plain_one,
    half_precision_and_tied_checkpoints_run,
    unexpected_tensors_are_refused,
    resolves_names_in_a_fake_hf_cache,
    #[cfg(unix)]
    runs_a_model_from_a_symlinked_snapshot,
    hostile_safetensors_are_clear_errors,
    hostile_model_directories_are_clear_errors,
    mutated_safetensors_never_panic,
];

/// The random HF directories whose `model.safetensors` is shipped.
const ARCHS: [&str; 5] = ["llama", "qwen2", "qwen3", "gemma3", "phi3"];

fn opts(n_ctx: usize) -> SessionOptions {
    SessionOptions {
        n_ctx,
        n_batch: 512,
        threads: Some(2),
        backend: BackendChoice::Cpu,
        kv_type: Some(KvType::F32),
        gpu: None,
        ..SessionOptions::default()
    }
}

pub(crate) fn open(path: &Path) -> Arc<Model> {
    Arc::new(load::open_model(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
}

fn session(path: &Path, n_ctx: usize) -> Session {
    Session::new(open(path), &opts(n_ctx)).unwrap()
}

pub(crate) fn ids(v: &J) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

fn argmax(x: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in x.iter().enumerate() {
        if v > x[best] {
            best = i;
        }
    }
    best as u32
}

pub(crate) fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

/// All-position logits of `prompt`.
pub(crate) fn logits(path: &Path, prompt: &[u32]) -> Vec<f32> {
    session(path, prompt.len() + 8).eval(prompt, true).unwrap()
}

/// `n` greedy tokens after `prompt`.
fn greedy(path: &Path, prompt: &[u32], n: usize) -> Vec<u32> {
    let mut s = session(path, prompt.len() + n + 1);
    let mut logits = s.eval(prompt, false).unwrap();
    let mut out = Vec::new();
    for _ in 0..n {
        let next = argmax(&logits);
        out.push(next);
        logits = s.eval(&[next], false).unwrap();
    }
    out
}

/// A fresh directory under the system temp dir, removed when dropped.
pub(crate) struct TempDir(pub(crate) PathBuf);

impl TempDir {
    pub(crate) fn new(tag: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!("minfer-hf-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

// --- whole models -------------------------------------------------------------------------------

/// Every position's logits of the HF directories against transformers (float32, eager): max |Δ| ≤ 5e-3.
fn random_hf_models_match_transformers() {
    let Some(root) = common::ref_dir("random_hf_models_match_transformers") else {
        return;
    };
    let r = root.join("random");
    let mut failures = Vec::new();
    for arch in ARCHS {
        let refs = common::read_json(&r.join(format!("refs/{arch}.hf-fp32.json")));
        let prompt = ids(&refs["prompt_ids"]);
        let want = common::read_npy_f32(&r.join(format!("refs/{arch}.hf-fp32.all_logits.npy")));
        let got = logits(&r.join(format!("hf/{arch}")), &prompt);
        let n_vocab = want.len() / prompt.len();
        let per_pos: Vec<f32> = (0..prompt.len())
            .map(|p| {
                max_abs_diff(
                    &got[p * n_vocab..(p + 1) * n_vocab],
                    &want[p * n_vocab..(p + 1) * n_vocab],
                )
            })
            .collect();
        let worst = per_pos.iter().copied().fold(0.0, f32::max);
        eprintln!(
            "{arch} (hf dir): max|Δ| vs transformers {worst:.2e} over {} positions",
            prompt.len()
        );
        if worst > 5e-3 {
            failures.push(format!("{arch}: max |Δ| {worst} (per position {per_pos:?})"));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// The HF name of a canonical GGUF name in `arch`'s checkpoints (the inverse of `hf::names`).
pub fn hf_name(arch: &str, canonical: &str) -> String {
    match canonical {
        "token_embd.weight" => return "model.embed_tokens.weight".into(),
        "output_norm.weight" => return "model.norm.weight".into(),
        "output.weight" => return "lm_head.weight".into(),
        _ => {}
    }
    let rest = canonical.strip_prefix("blk.").unwrap();
    let (n, tail) = rest.split_once('.').unwrap();
    let (stem, kind) = tail.rsplit_once('.').unwrap();
    let hf = match (arch, stem) {
        (_, "attn_norm") => "input_layernorm",
        (_, "attn_q") => "self_attn.q_proj",
        (_, "attn_k") => "self_attn.k_proj",
        (_, "attn_v") => "self_attn.v_proj",
        (_, "attn_output") => "self_attn.o_proj",
        (_, "attn_q_norm") => "self_attn.q_norm",
        (_, "attn_k_norm") => "self_attn.k_norm",
        ("glm4", "ffn_up") => "mlp.gate_up_proj",
        (_, "ffn_gate") => "mlp.gate_proj",
        (_, "ffn_up") => "mlp.up_proj",
        (_, "ffn_down") => "mlp.down_proj",
        (_, "ffn_norm") => "post_attention_layernorm",
        ("olmo2", "post_attention_norm") => "post_attention_layernorm",
        ("olmo2", "post_ffw_norm") => "post_feedforward_layernorm",
        ("glm4", "post_attention_norm") => "post_self_attn_layernorm",
        ("glm4", "post_ffw_norm") => "post_mlp_layernorm",
        // The MoE families' non-expert tensors (`hf_moe` rebuilds their checkpoints).
        ("gpt-oss", "attn_sinks") => return format!("model.layers.{n}.self_attn.sinks"),
        ("gpt-oss", "post_attention_norm") => "post_attention_layernorm",
        ("gpt-oss", "ffn_gate_inp") => "mlp.router",
        ("mixtral", "ffn_gate_inp") => "block_sparse_moe.gate",
        (_, "ffn_gate_inp") => "mlp.gate",
        (_, "ffn_gate_shexp") => "mlp.shared_expert.gate_proj",
        (_, "ffn_up_shexp") => "mlp.shared_expert.up_proj",
        (_, "ffn_down_shexp") => "mlp.shared_expert.down_proj",
        (_, "ffn_gate_inp_shexp") => "mlp.shared_expert_gate",
        _ => panic!("{arch}: no HF name for {canonical}"),
    };
    format!("model.layers.{n}.{hf}.{kind}")
}

/// The random dense families whose `model.safetensors` is not shipped (olmo2, granite, smollm3,
/// glm4): their directory rebuilt from the f32 GGUF's tensors under the HF names (Q/K rows
/// un-permuted where the converter permuted them for NORM RoPE: granite, smollm3) beside the
/// shipped config.json, so config → hyperparameters (multipliers, NoPE layers, partial rotary in
/// `rope_parameters`), the name table and HF's RoPE convention are checked against transformers:
/// every position within 5e-3.
fn hf_dirs_rebuilt_from_gguf_match_transformers() {
    let Some(root) = common::ref_dir("hf_dirs_rebuilt_from_gguf_match_transformers") else {
        return;
    };
    let r = root.join("random");
    let tmp = TempDir::new("hf-rebuilt");
    for arch in ["olmo2", "granite", "smollm3", "glm4"] {
        let gguf = minfer::gguf::GgufFile::open(r.join(format!("gguf/{arch}-f32.gguf"))).unwrap();
        let u = |k: &str| gguf.metadata.get_u64(&format!("{arch}.{k}")).unwrap().unwrap() as usize;
        let (n_head, n_head_kv) = (u("attention.head_count"), u("attention.head_count_kv"));
        let permuted = matches!(arch, "granite" | "smollm3");
        let tensors: Vec<StTensor> = gguf
            .tensors
            .iter()
            .map(|t| {
                let mut bytes = t.bytes().to_vec();
                let heads = if t.name.ends_with("attn_q.weight") {
                    Some(n_head)
                } else if t.name.ends_with("attn_k.weight") {
                    Some(n_head_kv)
                } else {
                    None
                };
                if let (true, Some(h)) = (permuted, heads) {
                    // convert_hf_to_gguf's permute: GGUF row h·hd + 2i + s is HF row h·hd + s·hd/2 + i.
                    let rb = t.shape[0] as usize * 4;
                    let hd = t.shape[1] as usize / h;
                    let src = bytes.clone();
                    for hh in 0..h {
                        for i in 0..hd / 2 {
                            for s in 0..2 {
                                let (g, f) = (hh * hd + 2 * i + s, hh * hd + s * hd / 2 + i);
                                bytes[f * rb..(f + 1) * rb].copy_from_slice(&src[g * rb..(g + 1) * rb]);
                            }
                        }
                    }
                }
                let shape: Vec<u64> = t.shape.iter().rev().copied().collect();
                (hf_name(arch, &t.name), "F32".to_string(), shape, bytes)
            })
            .collect();
        let dir = tmp.0.join(arch);
        std::fs::create_dir_all(&dir).unwrap();
        copy_side_files(&r.join(format!("hf/{arch}")), &dir);
        write_safetensors(&dir.join("model.safetensors"), &tensors);

        let refs = common::read_json(&r.join(format!("refs/{arch}.hf-fp32.json")));
        let prompt = ids(&refs["prompt_ids"]);
        let want = common::read_npy_f32(&r.join(format!("refs/{arch}.hf-fp32.all_logits.npy")));
        let model = open(&dir);
        if permuted {
            assert_eq!(model.hparams.rope.mode, RopeMode::Neox, "{arch}");
        }
        let worst = max_abs_diff(&logits(&dir, &prompt), &want);
        eprintln!("{arch} (hf dir rebuilt from its GGUF): max|Δ| vs transformers {worst:.2e}");
        assert!(worst <= 5e-3, "{arch}: max |Δ| {worst} > 5e-3");
    }
}

/// phi3's checkpoint with a `qkv_proj` two rows short: an error naming the checkpoint tensor
/// and the rows the split needs, not a model with shifted K/V.
fn fused_hf_tensor_of_the_wrong_size_is_named() {
    let Some(root) = common::ref_dir("fused_hf_tensor_of_the_wrong_size_is_named") else {
        return;
    };
    let src = root.join("random/hf/phi3");
    let tmp = TempDir::new("fused-short");
    copy_side_files(&src, &tmp.0);
    let mut tensors = read_safetensors(&src.join("model.safetensors"));
    let name = "model.layers.1.self_attn.qkv_proj.weight";
    let t = tensors.iter_mut().find(|t| t.0 == name).unwrap();
    assert_eq!(t.2, vec![512, 256]);
    t.2 = vec![510, 256];
    t.3.truncate(510 * 256 * 4);
    write_safetensors(&tmp.0.join("model.safetensors"), &tensors);
    let e = load::open_model(&tmp.0)
        .err()
        .expect("accepted a short qkv_proj")
        .to_string();
    assert!(
        e.contains(name) && e.contains("blk.1.attn_qkv.weight") && e.contains("[256, 512]"),
        "{e}"
    );
}

/// 32 greedy tokens from the HF directory equal those of its GGUF f32 conversion (and, where the
/// margins allow, transformers' recorded ones).
fn random_hf_models_greedy_equals_gguf_f32() {
    let Some(root) = common::ref_dir("random_hf_models_greedy_equals_gguf_f32") else {
        return;
    };
    let r = root.join("random");
    for arch in ARCHS {
        let refs = common::read_json(&r.join(format!("refs/{arch}.hf-fp32.json")));
        let prompt = ids(&refs["prompt_ids"]);
        let hf = greedy(&r.join(format!("hf/{arch}")), &prompt, 32);
        let gguf = greedy(&r.join(format!("gguf/{arch}-f32.gguf")), &prompt, 32);
        let tf = ids(&refs["greedy_ids"]);
        let same_tf = hf.iter().zip(&tf).take_while(|(a, b)| a == b).count();
        eprintln!(
            "{arch}: hf dir vs gguf f32 greedy {}, vs transformers {same_tf}/32",
            hf == gguf
        );
        assert_eq!(
            hf, gguf,
            "{arch}: greedy ids differ between the HF directory and the GGUF f32"
        );
        assert_eq!(
            same_tf, 32,
            "{arch}: greedy ids differ from transformers' after {same_tf}"
        );
    }
}

/// config.json maps to the hyperparameters the GGUF conversion gives — except Llama's RoPE
/// mode, which is NeoX for the unpermuted HF Q/K rows by design.
fn hf_hparams_equal_gguf_hparams() {
    let Some(root) = common::ref_dir("hf_hparams_equal_gguf_hparams") else {
        return;
    };
    let r = root.join("random");
    for arch in ARCHS {
        let hf = open(&r.join(format!("hf/{arch}")));
        let gguf = open(&r.join(format!("gguf/{arch}-f32.gguf")));
        let mut want = gguf.hparams.clone();
        if arch == "llama" {
            assert_eq!(want.rope.mode, RopeMode::Norm);
            assert_eq!(hf.hparams.rope.mode, RopeMode::Neox);
            want.rope.mode = RopeMode::Neox;
            want.rope_swa.mode = RopeMode::Neox;
        }
        let (a, b) = (
            serde_json::to_value(&hf.hparams).unwrap(),
            serde_json::to_value(&want).unwrap(),
        );
        assert_eq!(a, b, "{arch}: HF hparams {a:#} vs GGUF {b:#}");
        assert_eq!(hf.arch, gguf.arch);
        let source = |p: String| load::resolve(r.join(p)).unwrap();
        assert!(matches!(source(format!("hf/{arch}")), Source::HfDir(_)));
        assert!(matches!(source(format!("gguf/{arch}-f32.gguf")), Source::Gguf(_)));
        // Same canonical weights, same shapes.
        let mut names: Vec<&String> = hf.weights.keys().collect();
        names.sort();
        let mut gnames: Vec<&String> = gguf.weights.keys().collect();
        gnames.sort();
        assert_eq!(names, gnames, "{arch}");
        for (n, t) in &hf.weights {
            assert_eq!(t.shape, gguf.weights[n].shape, "{arch}: {n}");
        }
    }
}

/// tokenizer.json gives the GGUF tokenizer's ids and text; the flags and special ids come from
/// the config files as transformers reads them (the references' prompts start with BOS exactly
/// where tokenizer_config.json says add_bos_token).
fn hf_tokenizer_matches_gguf_tokenizer() {
    let Some(root) = common::ref_dir("hf_tokenizer_matches_gguf_tokenizer") else {
        return;
    };
    let r = root.join("random");
    let texts = [
        "Hello world, this is a test.",
        "  leading spaces and\ttabs\nnewlines",
        "<|im_start|>user\nhi<|im_end|>",
        "numbers 12345 and ünïcödé ✓ 日本語",
        "",
    ];
    for arch in ARCHS {
        let hf = load::open_tokenizer(r.join(format!("hf/{arch}"))).unwrap();
        let gguf = load::open(r.join(format!("gguf/{arch}-f32.gguf"))).unwrap().tokenizer;
        assert_eq!(hf.n_vocab(), gguf.n_vocab(), "{arch}");
        for t in texts {
            let a = hf.encode(t, false, true).unwrap();
            let b = gguf.encode(t, false, true).unwrap();
            assert_eq!(a, b, "{arch}: {t:?}");
            assert_eq!(hf.decode(&a, false).unwrap(), t, "{arch}: round trip");
            // The streamed pieces concatenate to the same text.
            let mut dec = minfer::tokenizer::StreamDecoder::new(&hf);
            let mut s: String = a.iter().map(|&id| dec.push(id)).collect();
            s.push_str(&dec.flush());
            assert_eq!(s, t, "{arch}: streamed");
        }
        // Special tokens typed in the text: one id each, or plain text when not parsed.
        assert_eq!(hf.encode("<|im_end|>", false, true).unwrap(), vec![2]);
        assert!(hf.encode("<|im_end|>", false, false).unwrap().len() > 1);
        let refs = common::read_json(&r.join(format!("refs/{arch}.hf-fp32.json")));
        let prompt = ids(&refs["prompt_ids"]);
        assert_eq!(hf.add_bos(), Some(prompt[0]) == hf.bos(), "{arch}: add_bos");
        assert_eq!(hf.bos(), Some(0));
        let eos_text = hf.eos().and_then(|e| hf.token_str(e)).unwrap();
        // phi3's tokenizer_config.json names its chat turn end, as qwen's do.
        let want_eos = if arch.starts_with("qwen") || arch == "phi3" {
            "<|im_end|>"
        } else {
            "<|endoftext|>"
        };
        assert_eq!(eos_text, want_eos, "{arch}: eos from tokenizer_config.json");
        // generation_config.json's eos_token_id (0) and the turn ends all stop generation.
        for id in [0, 2] {
            assert!(hf.is_eog(id), "{arch}: {id} ends generation");
        }
        assert!(hf.is_control(1) && !hf.is_eog(3));
        assert_eq!(hf.token_to_piece(3), gguf.token_to_piece(3));
    }
}

/// The library API on an HF directory: template from chat_template.jinja, tokenizer.json, and
/// the same greedy text as the GGUF conversion.
fn engine_runs_an_hf_directory() {
    let Some(root) = common::ref_dir("engine_runs_an_hf_directory") else {
        return;
    };
    let r = root.join("random");
    let run = |path: PathBuf| {
        let mut e = Engine::load(&path, &opts(128)).unwrap();
        let msgs = [minfer::chat::ChatMessage::new("user", "Hello there")];
        let text = e.apply_chat_template(&msgs, true);
        let prompt = e.tokenize("The quick brown fox", true, true).unwrap();
        let g = GenerateOptions {
            max_tokens: 12,
            sampler: SamplerConfig {
                temperature: 0.0,
                ..Default::default()
            },
            stop: vec![],
            ignore_eos: false,
            ..GenerateOptions::default()
        };
        let out = e.generate(&prompt, &g, |_| minfer::engine::Flow::Continue).unwrap();
        (text.ok(), prompt, out.tokens, out.text)
    };
    let (tmpl, p_hf, toks_hf, text_hf) = run(r.join("hf/qwen3"));
    assert_eq!(
        tmpl.as_deref(),
        Some("<|im_start|>user\nHello there<|im_end|>\n<|im_start|>assistant\n")
    );
    let (_, p_gguf, toks_gguf, text_gguf) = run(r.join("gguf/qwen3-f32.gguf"));
    assert_eq!(p_hf, p_gguf);
    assert_eq!((toks_hf, text_hf), (toks_gguf, text_gguf));
    // llama's directory has no template: a clear error, not a panic.
    let e = Engine::load(r.join("hf/llama"), &opts(64)).unwrap();
    assert!(e.template.is_none());
}

// --- checkpoints the test writes ----------------------------------------------------------------

/// (name, dtype, shape as written, bytes)
pub(crate) type StTensor = (String, String, Vec<u64>, Vec<u8>);

pub(crate) fn write_safetensors(path: &Path, tensors: &[StTensor]) {
    let mut header = serde_json::Map::new();
    header.insert("__metadata__".into(), json!({"format": "pt"}));
    let mut off = 0usize;
    for (name, dtype, shape, bytes) in tensors {
        header.insert(
            name.clone(),
            json!({"dtype": dtype, "shape": shape, "data_offsets": [off, off + bytes.len()]}),
        );
        off += bytes.len();
    }
    let mut h = serde_json::to_vec(&J::Object(header)).unwrap();
    while !(8 + h.len()).is_multiple_of(8) {
        h.push(b' ');
    }
    let mut out = (h.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&h);
    for t in tensors {
        out.extend_from_slice(&t.3);
    }
    std::fs::write(path, out).unwrap();
}

fn read_safetensors(path: &Path) -> Vec<StTensor> {
    let f = SafetensorsFile::open(path).unwrap();
    f.tensors(0)
        .unwrap()
        .into_iter()
        .map(|t| {
            let mut shape = t.shape.clone();
            shape.reverse();
            (t.name.clone(), t.qtype.name().to_uppercase(), shape, t.bytes().to_vec())
        })
        .collect()
}

pub(crate) fn copy_side_files(from: &Path, to: &Path) {
    for f in [
        "tokenizer.json",
        "tokenizer_config.json",
        "generation_config.json",
        "config.json",
    ] {
        std::fs::copy(from.join(f), to.join(f)).unwrap();
    }
}

/// gemma3 rewritten as a multimodal checkpoint: `text_config` nested under a `gemma3` wrapper,
/// weights under `model.language_model.`, a vision tensor to skip, three shards with an index
/// (and a stray file the index does not name). Same logits, bit for bit.
fn sharded_wrapped_checkpoint_equals_the_plain_one() {
    let Some(root) = common::ref_dir("sharded_wrapped_checkpoint_equals_the_plain_one") else {
        return;
    };
    let src = root.join("random/hf/gemma3");
    let tmp = TempDir::new("sharded");
    let dir = &tmp.0;
    copy_side_files(&src, dir);
    let text_config = common::read_json(&src.join("config.json"));
    let cfg = json!({"model_type": "gemma3", "architectures": ["Gemma3ForConditionalGeneration"],
                     "text_config": text_config, "vision_config": {"hidden_size": 8}});
    std::fs::write(dir.join("config.json"), cfg.to_string()).unwrap();
    let mut tensors = read_safetensors(&src.join("model.safetensors"));
    for t in &mut tensors {
        t.0 = t.0.replacen("model.", "model.language_model.", 1);
    }
    tensors.push((
        "model.vision_tower.patch_embedding.weight".into(),
        "F32".into(),
        vec![2],
        vec![0; 8],
    ));
    let mut weight_map = serde_json::Map::new();
    for (i, chunk) in tensors.chunks(tensors.len().div_ceil(3)).enumerate() {
        let file = format!("model-{:05}-of-00003.safetensors", i + 1);
        for t in chunk {
            weight_map.insert(t.0.clone(), J::String(file.clone()));
        }
        write_safetensors(&dir.join(&file), chunk);
    }
    std::fs::write(
        dir.join("model.safetensors.index.json"),
        json!({"metadata": {}, "weight_map": weight_map}).to_string(),
    )
    .unwrap();
    write_safetensors(&dir.join("consolidated.safetensors"), &tensors[..1]);

    let opened = HfDir::open(dir).unwrap();
    assert_eq!(opened.shards.len(), 3);
    assert_eq!(
        opened.skipped,
        vec!["model.vision_tower.patch_embedding.weight".to_string()]
    );
    let prompt = [0u32, 571, 886, 130, 408, 511];
    assert_eq!(logits(dir, &prompt), logits(&src, &prompt));

    // An index that places a tensor in the wrong shard is refused by name.
    let mut bad = weight_map.clone();
    bad.insert(
        tensors[0].0.clone(),
        J::String("model-00003-of-00003.safetensors".into()),
    );
    std::fs::write(
        dir.join("model.safetensors.index.json"),
        json!({"weight_map": bad}).to_string(),
    )
    .unwrap();
    let e = load::open_model(dir).err().unwrap().to_string();
    assert!(e.contains(&tensors[0].0) && e.contains("model-00003-of-00003"), "{e}");
}

/// F16 and BF16 checkpoints run as those qtypes (no f32 copy of the matrices) and stay close to
/// the f32 logits; llama's tied-embedding variant (no lm_head) runs too.
fn half_precision_and_tied_checkpoints_run() {
    let Some(root) = common::ref_dir("half_precision_and_tied_checkpoints_run") else {
        return;
    };
    let src = root.join("random/hf/llama");
    let prompt = [0u32, 571, 886, 130, 408, 511, 341, 700];
    let want = logits(&src, &prompt);
    for dtype in ["F16", "BF16"] {
        let tmp = TempDir::new(&format!("half-{dtype}"));
        copy_side_files(&src, &tmp.0);
        let tensors: Vec<StTensor> = read_safetensors(&src.join("model.safetensors"))
            .into_iter()
            .map(|(n, _, shape, bytes)| {
                let conv: Vec<u8> = bytes
                    .chunks_exact(4)
                    .flat_map(|c| {
                        let x = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                        match dtype {
                            "F16" => half::f16::from_f32(x).to_le_bytes(),
                            _ => half::bf16::from_f32(x).to_le_bytes(),
                        }
                    })
                    .collect();
                (n, dtype.to_string(), shape, conv)
            })
            .collect();
        write_safetensors(&tmp.0.join("model.safetensors"), &tensors);
        let m = open(&tmp.0);
        assert_eq!(m.weights["blk.0.attn_q.weight"].qtype.name(), dtype.to_lowercase());
        assert_eq!(m.weight_bytes() * 2, open(&src).weight_bytes());
        let got = logits(&tmp.0, &prompt);
        let d = max_abs_diff(&got, &want);
        eprintln!("llama {dtype}: max|Δ| vs f32 {d:.2e}");
        assert!(d < 0.1, "{dtype}: {d}");
    }
    // Without lm_head.weight the output is tied to the embedding.
    let tmp = TempDir::new("tied");
    copy_side_files(&src, &tmp.0);
    let tensors: Vec<StTensor> = read_safetensors(&src.join("model.safetensors"))
        .into_iter()
        .filter(|t| t.0 != "lm_head.weight")
        .collect();
    write_safetensors(&tmp.0.join("model.safetensors"), &tensors);
    let m = open(&tmp.0);
    assert!(m.hparams.tied_output && !m.weights.contains_key("output.weight"));
    assert_eq!(logits(&tmp.0, &prompt).len(), want.len());
}

/// A checkpoint whose tensors the config does not describe is refused by the tensor's name.
fn unexpected_tensors_are_refused() {
    let Some(root) = common::ref_dir("unexpected_tensors_are_refused") else {
        return;
    };
    let src = root.join("random/hf/llama");
    let base = read_safetensors(&src.join("model.safetensors"));
    let cases: [(&str, StTensor); 2] = [
        // A bias the llama graph has no place for.
        (
            "model.layers.0.self_attn.q_proj.bias",
            (
                "model.layers.0.self_attn.q_proj.bias".into(),
                "F32".into(),
                vec![256],
                vec![0; 1024],
            ),
        ),
        // A name that is no llama tensor at all.
        (
            "model.layers.0.self_attn.rel_pos.weight",
            (
                "model.layers.0.self_attn.rel_pos.weight".into(),
                "F32".into(),
                vec![4],
                vec![0; 16],
            ),
        ),
    ];
    for (want, extra) in cases {
        let tmp = TempDir::new("unexpected");
        copy_side_files(&src, &tmp.0);
        let mut t = base.clone();
        t.push(extra);
        write_safetensors(&tmp.0.join("model.safetensors"), &t);
        let e = load::open_model(&tmp.0).err().unwrap().to_string();
        assert!(e.contains(want), "{e}");
    }
}

// --- HF cache resolution ------------------------------------------------------------------------

const MAIN: &str = "1111111111111111111111111111111111111111";
const OLD: &str = "2222222222222222222222222222222222222222";

/// `models--acme--tiny` with two snapshots: refs/main → MAIN, refs/v1 → OLD.
fn fake_cache(root: &Path) {
    let repo = root.join("models--acme--tiny");
    for (rev, snap) in [("main", MAIN), ("v1", OLD)] {
        std::fs::create_dir_all(repo.join("refs")).unwrap();
        std::fs::write(repo.join("refs").join(rev), format!("{snap}\n")).unwrap();
        let s = repo.join("snapshots").join(snap);
        std::fs::create_dir_all(&s).unwrap();
        std::fs::write(s.join("config.json"), format!("{{\"rev\": \"{rev}\"}}")).unwrap();
    }
    // huggingface_hub keeps a revision named `refs/pr/1` at `refs/refs/pr/1`.
    std::fs::create_dir_all(repo.join("refs/refs/pr")).unwrap();
    std::fs::write(repo.join("refs/refs/pr/1"), OLD).unwrap();
    // A GGUF repository: its snapshot holds a .gguf and no config.json.
    let g = root.join("models--acme--tiny-GGUF/snapshots").join(MAIN);
    std::fs::create_dir_all(&g).unwrap();
    std::fs::write(g.join("tiny-Q4_0.gguf"), b"GGUF").unwrap();
    std::fs::create_dir_all(root.join("models--acme--tiny-GGUF/refs")).unwrap();
    std::fs::write(root.join("models--acme--tiny-GGUF/refs/main"), MAIN).unwrap();
}

fn resolves_names_in_a_fake_hf_cache() {
    let tmp = TempDir::new("cache");
    let root = &tmp.0;
    fake_cache(root);
    let snap = |s: &str| root.join("models--acme--tiny/snapshots").join(s);
    let r = |name: &str| resolve_in(root, &HubName::parse(name).unwrap());
    assert_eq!(r("acme/tiny").unwrap(), snap(MAIN));
    assert_eq!(r("acme/tiny@main").unwrap(), snap(MAIN));
    assert_eq!(r("acme/tiny@v1").unwrap(), snap(OLD));
    assert_eq!(r("acme/tiny@refs/pr/1").unwrap(), snap(OLD));
    assert_eq!(r(&format!("acme/tiny@{OLD}")).unwrap(), snap(OLD));
    assert_eq!(load::classify_dir(&snap(MAIN)).unwrap(), Source::HfDir(snap(MAIN)));
    let g = resolve_in(root, &HubName::parse("acme/tiny-GGUF").unwrap()).unwrap();
    assert_eq!(load::classify_dir(&g).unwrap(), Source::Gguf(g.join("tiny-Q4_0.gguf")));

    // Names that resolve nowhere list what was tried.
    let tried = r("acme/tiny@v2").unwrap_err();
    assert!(tried.iter().any(|t| t.contains("refs/v2")), "{tried:?}");
    let tried = r(&format!("acme/tiny@{}", "3".repeat(40))).unwrap_err();
    assert!(tried.iter().any(|t| t.contains(&"3".repeat(40))), "{tried:?}");
    let tried = r("acme/huge").unwrap_err();
    assert!(tried.iter().any(|t| t.contains("models--acme--huge")), "{tried:?}");

    // refs/main pointing nowhere, or missing with two snapshots: an error, not a guess.
    std::fs::write(root.join("models--acme--tiny/refs/main"), "not-a-hash").unwrap();
    assert!(r("acme/tiny").unwrap_err()[0].contains("not-a-hash"));
    std::fs::remove_file(root.join("models--acme--tiny/refs/main")).unwrap();
    assert!(r("acme/tiny").unwrap_err()[0].contains("refs/main"));
    // …but one snapshot without refs is unambiguous.
    std::fs::remove_dir_all(snap(OLD)).unwrap();
    assert_eq!(r("acme/tiny").unwrap(), snap(MAIN));
}

/// A snapshot laid out as huggingface_hub leaves it (files are symlinks into blobs/) opens and
/// runs like the directory it came from.
#[cfg(unix)]
fn runs_a_model_from_a_symlinked_snapshot() {
    let Some(root) = common::ref_dir("runs_a_model_from_a_symlinked_snapshot") else {
        return;
    };
    let src = root.join("random/hf/qwen2");
    let tmp = TempDir::new("snapshot");
    let repo = tmp.0.join("models--acme--qwen2-random");
    let snap = repo.join("snapshots").join(MAIN);
    std::fs::create_dir_all(&snap).unwrap();
    std::fs::create_dir_all(repo.join("blobs")).unwrap();
    std::fs::create_dir_all(repo.join("refs")).unwrap();
    std::fs::write(repo.join("refs/main"), MAIN).unwrap();
    for (i, e) in std::fs::read_dir(&src).unwrap().enumerate() {
        let e = e.unwrap();
        let blob = repo.join("blobs").join(format!("blob{i}"));
        std::fs::copy(e.path(), &blob).unwrap();
        std::os::unix::fs::symlink(format!("../../blobs/blob{i}"), snap.join(e.file_name())).unwrap();
    }
    let dir = resolve_in(&tmp.0, &HubName::parse("acme/qwen2-random").unwrap()).unwrap();
    let prompt = [571u32, 886, 130, 408];
    assert_eq!(logits(&dir, &prompt), logits(&src, &prompt));
    let t: Tokenizer = load::open(&dir).unwrap().tokenizer;
    assert_eq!(
        t.encode("hello", false, true).unwrap(),
        load::open_tokenizer(&src)
            .unwrap()
            .encode("hello", false, true)
            .unwrap()
    );
}

// --- hostile safetensors ------------------------------------------------------------------------

fn image(header: &str, data: usize) -> Vec<u8> {
    let mut v = (header.len() as u64).to_le_bytes().to_vec();
    v.extend_from_slice(header.as_bytes());
    v.extend(std::iter::repeat_n(0u8, data));
    v
}

/// Each broken file is an error naming the offending value; none panics or allocates by a
/// length it read.
fn hostile_safetensors_are_clear_errors() {
    let tmp = TempDir::new("hostile");
    let mut huge = 200_000_000u64.to_le_bytes().to_vec();
    huge.extend_from_slice(b"{}");
    let mut past_eof = 1000u64.to_le_bytes().to_vec();
    past_eof.extend_from_slice(b"{}");
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("short", vec![1, 2, 3], "too short"),
        (
            "past_eof",
            past_eof,
            "header length 1000 runs past the end of the file (10 bytes)",
        ),
        (
            "huge_header",
            huge,
            "header length 200000000 is over the 100000000-byte cap",
        ),
        ("invalid_json", image("{\"a\": [", 0), "not a JSON object"),
        ("json_array", image("[1, 2]", 0), "not a JSON object"),
        (
            "outside",
            image(
                r#"{"w": {"dtype": "F32", "shape": [1024], "data_offsets": [0, 4096]}}"#,
                16,
            ),
            "data_offsets [0, 4096] lie outside the 16 bytes of data",
        ),
        (
            "reversed",
            image(r#"{"w": {"dtype": "F32", "shape": [1], "data_offsets": [8, 4]}}"#, 16),
            "data_offsets [8, 4] are reversed",
        ),
        (
            "mismatch",
            image(r#"{"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}"#, 16),
            "dtype F32 × shape [3] is 12 bytes, but data_offsets [0, 8] hold 8",
        ),
        (
            "overflow",
            image(
                r#"{"w": {"dtype": "F32", "shape": [4294967296, 4294967296, 16], "data_offsets": [0, 8]}}"#,
                16,
            ),
            "overflows",
        ),
        (
            "overlap",
            image(
                r#"{"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                    "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}"#,
                16,
            ),
            "tensors 'a' [0, 8) and 'b' [4, 12) overlap",
        ),
        (
            "unknown_dtype",
            image(r#"{"w": {"dtype": "Q9_K", "shape": [1], "data_offsets": [0, 4]}}"#, 4),
            "unknown dtype 'Q9_K'",
        ),
        (
            "int_dtype",
            image(r#"{"w": {"dtype": "I64", "shape": [1], "data_offsets": [0, 8]}}"#, 8),
            "dtype I64 is not supported",
        ),
        (
            "negative_dim",
            image(r#"{"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}}"#, 4),
            "shape entry -1",
        ),
        (
            "rank",
            image(
                r#"{"w": {"dtype": "F32", "shape": [1,1,1,1,1,1,1,1,1], "data_offsets": [0, 4]}}"#,
                4,
            ),
            "rank 9",
        ),
        (
            "no_offsets",
            image(r#"{"w": {"dtype": "F32", "shape": [1]}}"#, 4),
            "tensor 'w': no data_offsets",
        ),
        (
            "bad_metadata",
            image(r#"{"__metadata__": {"format": 3}}"#, 0),
            "__metadata__ 'format' is a number",
        ),
    ];
    for (name, bytes, want) in cases {
        let path = tmp.0.join(format!("{name}.safetensors"));
        std::fs::write(&path, &bytes).unwrap();
        let e = match SafetensorsFile::open(&path) {
            Ok(_) => panic!("{name}: opened"),
            Err(e) => e.to_string(),
        };
        assert!(e.contains(want), "{name}: {e:?} does not say {want:?}");
        assert!(
            e.contains(&path.display().to_string()),
            "{name}: {e:?} does not name the file"
        );
    }
    // A valid file with an empty tensor and metadata opens.
    let ok = image(
        r#"{"__metadata__": {"format": "pt"}, "e": {"dtype": "BF16", "shape": [0, 4], "data_offsets": [0, 0]},
            "w": {"dtype": "BF16", "shape": [2, 2], "data_offsets": [0, 8]}}"#,
        8,
    );
    let f = SafetensorsFile::from_bytes(ok, "ok").unwrap();
    assert_eq!(f.header.metadata, vec![("format".to_string(), "pt".to_string())]);
    let w = f.tensors(0).unwrap().into_iter().find(|t| t.name == "w").unwrap();
    assert_eq!((w.qtype.name(), w.shape.clone(), w.data.len()), ("bf16", vec![2, 2], 8));
}

/// A model directory with a broken shard or config fails with the file's name.
fn hostile_model_directories_are_clear_errors() {
    let tmp = TempDir::new("hostile-dir");
    let dir = &tmp.0;
    std::fs::write(dir.join("config.json"), "{\"model_type\": \"llama\"").unwrap();
    let e = load::open_model(dir).err().unwrap().to_string();
    assert!(e.contains("config.json") && e.contains("invalid JSON"), "{e}");
    std::fs::write(dir.join("config.json"), r#"{"model_type": "mamba"}"#).unwrap();
    let e = load::open_model(dir).err().unwrap().to_string();
    assert!(e.contains("'mamba' is not supported"), "{e}");
    std::fs::write(
        dir.join("config.json"),
        r#"{"model_type": "llama", "hidden_size": 8, "num_hidden_layers": 1, "intermediate_size": 8, "num_attention_heads": 2}"#,
    )
    .unwrap();
    let e = load::open_model(dir).err().unwrap().to_string();
    assert!(e.contains("no *.safetensors"), "{e}");
    std::fs::write(dir.join("model.safetensors"), image("{\"x\": 1}", 0)).unwrap();
    let e = load::open_model(dir).err().unwrap().to_string();
    assert!(e.contains("model.safetensors") && e.contains("tensor 'x'"), "{e}");
    std::fs::write(
        dir.join("model.safetensors.index.json"),
        r#"{"weight_map": {"a": "../../etc/passwd.safetensors"}}"#,
    )
    .unwrap();
    let e = load::open_model(dir).err().unwrap().to_string();
    assert!(e.contains("../../etc/passwd.safetensors"), "{e}");
}

/// Random byte flips and truncations of a valid file never panic.
fn mutated_safetensors_never_panic() {
    let valid = image(
        r#"{"a": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
            "b": {"dtype": "F16", "shape": [4], "data_offsets": [16, 24]}}"#,
        24,
    );
    let mut state = 0x9e3779b97f4a7c15u64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for _ in 0..5000 {
        let mut v = valid.clone();
        for _ in 0..1 + next() % 4 {
            let i = (next() % v.len() as u64) as usize;
            v[i] = next() as u8;
        }
        if next() % 4 == 0 {
            v.truncate((next() % v.len() as u64) as usize);
        }
        if let Ok(f) = SafetensorsFile::from_bytes(v, "mutated") {
            for t in f.tensors(0).unwrap() {
                assert_eq!(t.data.len() as u64, t.n_elements() * t.qtype.block_bytes() as u64);
            }
        }
    }
}
