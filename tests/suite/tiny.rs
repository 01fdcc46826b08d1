//! Tiny random models written with the project's own GGUF writer — one per registered
//! architecture, weights seeded by tensor name — so every architecture is exercised by the
//! default suite without any reference data: prefill vs decode, cache types, threads, ISAs,
//! and hostile shapes.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use minfer::backend::{BackendChoice, KvType};
use minfer::gguf::{GgufWriter, Value, ValueType};
use minfer::model::Arch;
use minfer::quant::QType;
use minfer::{load, Session, SessionOptions};

use crate::model::diff;

tests![
    prefill_equals_decode_steps_for_every_architecture,
    flash_toggle_takes_effect_after_a_forward,
    trace_reads_a_named_intermediate,
    kv_types_and_threads_agree,
    hostile_shapes_are_named,
    unknown_architecture_and_bad_steps_are_errors,
    drop_ffn_leaves_every_ffn_tensor_out,
];

const N_EMBD: usize = 64;
const N_FF: usize = 128;
const N_HEAD: usize = 4;
const N_HEAD_KV: usize = 2;
const HEAD_DIM: usize = 32;
const N_VOCAB: usize = 96;
const N_LAYER: usize = 3;
const N_EXPERT: usize = 4;
const N_FF_EXP: usize = 32;

/// Deterministic values from a tensor's name (FNV-1a seed, xorshift stream).
fn values(name: &str, n: usize, scale: f32) -> Vec<f32> {
    let mut s = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    });
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 11) as f32 / (1u64 << 53) as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}

/// Writes a tiny model of `arch` whose matrices are `qtype`; `edit` may change the writer
/// (drop or reshape a tensor) before it is written.
pub fn write_tiny(dir: &Path, arch: Arch, qtype: QType, edit: impl FnOnce(&mut Vec<(String, Vec<u64>)>)) -> PathBuf {
    if arch == Arch::Gemma4 {
        return write_tiny_gemma4(dir, qtype, edit);
    }
    let a = arch.name();
    let mut w = GgufWriter::new();
    w.set("general.architecture", Value::String(a.into()));
    let u = |v: usize| Value::U32(v as u32);
    w.set(&format!("{a}.block_count"), u(N_LAYER));
    w.set(&format!("{a}.context_length"), u(256));
    w.set(&format!("{a}.embedding_length"), u(N_EMBD));
    w.set(&format!("{a}.feed_forward_length"), u(N_FF));
    w.set(&format!("{a}.attention.head_count"), u(N_HEAD));
    w.set(&format!("{a}.attention.head_count_kv"), u(N_HEAD_KV));
    w.set(&format!("{a}.attention.key_length"), u(HEAD_DIM));
    w.set(&format!("{a}.attention.value_length"), u(HEAD_DIM));
    w.set(&format!("{a}.attention.layer_norm_rms_epsilon"), Value::F32(1e-5));
    w.set(&format!("{a}.rope.freq_base"), Value::F32(10000.0));
    if arch == Arch::Gemma3 {
        w.set("gemma3.attention.sliding_window", u(4));
        w.set("gemma3.attention.sliding_window_pattern", u(2));
        w.set("gemma3.final_logit_softcapping", Value::F32(30.0));
    }
    let moe = matches!(arch, Arch::Qwen3Moe | Arch::Qwen2Moe | Arch::GptOss);
    if moe {
        w.set(&format!("{a}.expert_count"), u(N_EXPERT));
        w.set(&format!("{a}.expert_used_count"), u(2));
        w.set(&format!("{a}.expert_feed_forward_length"), u(N_FF_EXP));
    }
    if arch == Arch::Qwen2Moe {
        w.set(&format!("{a}.expert_shared_feed_forward_length"), u(N_FF));
    }
    if arch == Arch::GptOss {
        w.set("gpt-oss.attention.sliding_window", u(4));
    }
    if arch == Arch::Mistral3 {
        // YaRN over an original context of 4, so the prompt crosses the temperature's floors.
        w.set("mistral3.rope.scaling.type", Value::String("yarn".into()));
        w.set("mistral3.rope.scaling.factor", Value::F32(8.0));
        w.set("mistral3.rope.scaling.original_context_length", u(4));
        w.set("mistral3.rope.scaling.yarn_beta_fast", Value::F32(32.0));
        w.set("mistral3.rope.scaling.yarn_beta_slow", Value::F32(1.0));
        w.set("mistral3.rope.scaling.yarn_log_multiplier", Value::F32(1.0));
        w.set("mistral3.attention.temperature_scale", Value::F32(0.05));
    }
    if arch == Arch::Granite {
        for (k, v) in [
            ("embedding_scale", 3.0),
            ("residual_scale", 0.5),
            ("attention.scale", 0.1),
            ("logit_scale", 4.0),
        ] {
            w.set(&format!("granite.{k}"), Value::F32(v));
        }
    }
    if arch == Arch::Glm4 {
        w.set("glm4.rope.dimension_count", u(HEAD_DIM / 2));
    }
    let tokens: Vec<Value> = (0..N_VOCAB).map(|i| Value::String(format!("t{i}"))).collect();
    w.set("tokenizer.ggml.tokens", Value::Array(ValueType::String, tokens));

    let (q, kv) = (N_HEAD * HEAD_DIM, N_HEAD_KV * HEAD_DIM);
    let mut mats: Vec<(String, Vec<u64>)> = vec![("token_embd.weight".into(), vec![N_EMBD as u64, N_VOCAB as u64])];
    let mut vecs: Vec<(String, usize)> = vec![("output_norm.weight".into(), N_EMBD)];
    // Float matrices whatever `qtype` (expert biases).
    let mut floats: Vec<(String, Vec<u64>)> = Vec::new();
    for l in 0..N_LAYER {
        let p = format!("blk.{l}");
        for (n, i, o) in [
            ("attn_q", N_EMBD, q),
            ("attn_k", N_EMBD, kv),
            ("attn_v", N_EMBD, kv),
            ("attn_output", q, N_EMBD),
            ("ffn_gate", N_EMBD, N_FF),
            ("ffn_up", N_EMBD, N_FF),
            ("ffn_down", N_FF, N_EMBD),
        ] {
            if moe && n.starts_with("ffn_") {
                continue;
            }
            mats.push((format!("{p}.{n}.weight"), vec![i as u64, o as u64]));
        }
        if moe {
            let (e, f) = (N_EXPERT as u64, N_FF_EXP as u64);
            mats.push((format!("{p}.ffn_gate_inp.weight"), vec![N_EMBD as u64, e]));
            mats.push((format!("{p}.ffn_gate_exps.weight"), vec![N_EMBD as u64, f, e]));
            mats.push((format!("{p}.ffn_up_exps.weight"), vec![N_EMBD as u64, f, e]));
            mats.push((format!("{p}.ffn_down_exps.weight"), vec![f, N_EMBD as u64, e]));
        }
        if arch == Arch::Qwen2Moe {
            for (n, i, o) in [
                ("ffn_gate_shexp", N_EMBD, N_FF),
                ("ffn_up_shexp", N_EMBD, N_FF),
                ("ffn_down_shexp", N_FF, N_EMBD),
            ] {
                mats.push((format!("{p}.{n}.weight"), vec![i as u64, o as u64]));
            }
            vecs.push((format!("{p}.ffn_gate_inp_shexp.weight"), N_EMBD));
        }
        if arch != Arch::Olmo2 {
            vecs.push((format!("{p}.attn_norm.weight"), N_EMBD));
        }
        if arch == Arch::GptOss {
            // gpt-oss' pre-FFN norm has the name other files give the post-attention norm.
            vecs.push((format!("{p}.post_attention_norm.weight"), N_EMBD));
            vecs.push((format!("{p}.attn_output.bias"), N_EMBD));
            vecs.push((format!("{p}.attn_sinks.weight"), N_HEAD));
            vecs.push((format!("{p}.ffn_gate_inp.bias"), N_EXPERT));
            let (e, f) = (N_EXPERT as u64, N_FF_EXP as u64);
            floats.push((format!("{p}.ffn_gate_exps.bias"), vec![f, e]));
            floats.push((format!("{p}.ffn_up_exps.bias"), vec![f, e]));
            floats.push((format!("{p}.ffn_down_exps.bias"), vec![N_EMBD as u64, e]));
        } else if arch != Arch::Olmo2 {
            vecs.push((format!("{p}.ffn_norm.weight"), N_EMBD));
        }
        // Fused tensors as their GGUFs store them: Q, K, V rows stacked; gate rows then up.
        if arch == Arch::Phi3 {
            mats.retain(|(n, _)| {
                !n.starts_with(&format!("{p}.attn_q"))
                    && !n.starts_with(&format!("{p}.attn_k"))
                    && !n.starts_with(&format!("{p}.attn_v"))
            });
            mats.push((format!("{p}.attn_qkv.weight"), vec![N_EMBD as u64, (q + 2 * kv) as u64]));
        }
        if matches!(arch, Arch::Phi3 | Arch::Glm4) {
            mats.retain(|(n, _)| *n != format!("{p}.ffn_gate.weight"));
            mats.iter_mut()
                .find(|(n, _)| *n == format!("{p}.ffn_up.weight"))
                .unwrap()
                .1 = vec![N_EMBD as u64, 2 * N_FF as u64];
        }
        match arch {
            Arch::Qwen2 | Arch::Qwen2Moe | Arch::GptOss | Arch::Glm4 => {
                vecs.push((format!("{p}.attn_q.bias"), q));
                vecs.push((format!("{p}.attn_k.bias"), kv));
                vecs.push((format!("{p}.attn_v.bias"), kv));
            }
            Arch::Qwen3 | Arch::Gemma3 | Arch::Qwen3Moe => {
                vecs.push((format!("{p}.attn_q_norm.weight"), HEAD_DIM));
                vecs.push((format!("{p}.attn_k_norm.weight"), HEAD_DIM));
            }
            Arch::Olmo2 => {
                vecs.push((format!("{p}.attn_q_norm.weight"), q));
                vecs.push((format!("{p}.attn_k_norm.weight"), kv));
            }
            Arch::Llama | Arch::Mistral3 | Arch::Phi3 | Arch::Granite | Arch::Smollm3 | Arch::Gemma4 => {}
            Arch::Bert => panic!("tiny models are decoders; bert runs on all-MiniLM-L6-v2 (embed)"),
        }
        if matches!(arch, Arch::Gemma3 | Arch::Olmo2 | Arch::Glm4) {
            vecs.push((format!("{p}.post_attention_norm.weight"), N_EMBD));
            vecs.push((format!("{p}.post_ffw_norm.weight"), N_EMBD));
        }
    }
    if matches!(arch, Arch::Llama | Arch::Qwen2Moe | Arch::GptOss | Arch::Olmo2) {
        mats.push(("output.weight".into(), vec![N_EMBD as u64, N_VOCAB as u64]));
    }
    if arch == Arch::Mistral3 {
        // Frequency factors in [0.8, 1.2] (Llama 3 style `rope_freqs.weight`).
        vecs.push(("rope_freqs.weight".into(), HEAD_DIM / 2));
    }
    edit(&mut mats);
    for (name, shape) in &floats {
        let n: u64 = shape.iter().product();
        w.add_f32(name, QType::F32, shape, &values(name, n as usize, 0.5))
            .unwrap();
    }
    add_tensors(&mut w, qtype, &mats, &vecs);
    let path = dir.join(format!("tiny-{a}-{}.gguf", qtype.name()));
    w.write(&path).unwrap();
    path
}

/// Writes `mats` as `qtype` matrices (F32 where a row is not whole blocks) and `vecs` as
/// 1 + small values; a vector an `edit` moved into the matrices (to reshape it) is written
/// once, as edited.
fn add_tensors(w: &mut GgufWriter, qtype: QType, mats: &[(String, Vec<u64>)], vecs: &[(String, usize)]) {
    for (name, shape) in mats {
        let n: u64 = shape.iter().product();
        let ty = if (shape[0] as usize).is_multiple_of(qtype.block_elems()) {
            qtype
        } else {
            QType::F32
        };
        w.add_f32(name, ty, shape, &values(name, n as usize, 0.5)).unwrap();
    }
    for (name, n) in vecs.iter().filter(|(v, _)| !mats.iter().any(|(m, _)| m == v)) {
        let v: Vec<f32> = values(name, *n, 0.2).iter().map(|x| 1.0 + x).collect();
        w.add_f32(name, QType::F32, &[*n as u64], &v).unwrap();
    }
}

/// A tiny Gemma 4: layers [sliding, full, sliding, full] (window 4), sliding heads of 32 with
/// 2 KV heads, full heads of 64 with 1 KV head and K = V, the last two layers reading the
/// K/V of layers 0 and 1, per-layer inputs of 32 (the GPU matmuls take rows in 32s), a scalar
/// per layer output.
fn write_tiny_gemma4(dir: &Path, qtype: QType, edit: impl FnOnce(&mut Vec<(String, Vec<u64>)>)) -> PathBuf {
    const N_LAYER: usize = 4;
    const PLE: usize = 32;
    let swa = [true, false, true, false];
    let (hd_swa, hd_full) = (HEAD_DIM, 2 * HEAD_DIM);
    let n_kv = [2usize, 1, 2, 1];
    let mut w = GgufWriter::new();
    w.set("general.architecture", Value::String("gemma4".into()));
    let u = |v: usize| Value::U32(v as u32);
    let arr = |v: &[usize]| Value::Array(ValueType::U32, v.iter().map(|&x| u(x)).collect());
    w.set("gemma4.block_count", u(N_LAYER));
    w.set("gemma4.context_length", u(256));
    w.set("gemma4.embedding_length", u(N_EMBD));
    w.set("gemma4.feed_forward_length", arr(&[N_FF, N_FF, 2 * N_FF, 2 * N_FF]));
    w.set("gemma4.attention.head_count", u(N_HEAD));
    w.set("gemma4.attention.head_count_kv", arr(&n_kv));
    w.set("gemma4.attention.key_length", u(hd_full));
    w.set("gemma4.attention.value_length", u(hd_full));
    w.set("gemma4.attention.key_length_swa", u(hd_swa));
    w.set("gemma4.attention.value_length_swa", u(hd_swa));
    w.set("gemma4.attention.layer_norm_rms_epsilon", Value::F32(1e-6));
    w.set("gemma4.rope.freq_base", Value::F32(1e6));
    w.set("gemma4.rope.freq_base_swa", Value::F32(1e4));
    w.set("gemma4.rope.dimension_count", u(hd_full));
    w.set("gemma4.rope.dimension_count_swa", u(hd_swa));
    w.set("gemma4.attention.sliding_window", u(4));
    w.set(
        "gemma4.attention.sliding_window_pattern",
        Value::Array(ValueType::Bool, swa.iter().map(|&b| Value::Bool(b)).collect()),
    );
    w.set("gemma4.attention.shared_kv_layers", u(2));
    w.set("gemma4.embedding_length_per_layer_input", u(PLE));
    w.set("gemma4.final_logit_softcapping", Value::F32(30.0));
    let tokens: Vec<Value> = (0..N_VOCAB).map(|i| Value::String(format!("t{i}"))).collect();
    w.set("tokenizer.ggml.tokens", Value::Array(ValueType::String, tokens));

    let e = N_EMBD as u64;
    let all = (N_LAYER * PLE) as u64;
    let mut mats: Vec<(String, Vec<u64>)> = vec![
        ("token_embd.weight".into(), vec![e, N_VOCAB as u64]),
        ("per_layer_token_embd.weight".into(), vec![all, N_VOCAB as u64]),
        ("per_layer_model_proj.weight".into(), vec![e, all]),
    ];
    let mut vecs: Vec<(String, usize)> = vec![
        ("output_norm.weight".into(), N_EMBD),
        ("per_layer_proj_norm.weight".into(), PLE),
        ("rope_freqs.weight".into(), hd_full / 2),
    ];
    for l in 0..N_LAYER {
        let p = format!("blk.{l}");
        let hd = if swa[l] { hd_swa } else { hd_full };
        let (q, kv) = ((N_HEAD * hd) as u64, (n_kv[l] * hd) as u64);
        let ff = if l < 2 { N_FF } else { 2 * N_FF } as u64;
        mats.push((format!("{p}.attn_q.weight"), vec![e, q]));
        mats.push((format!("{p}.attn_output.weight"), vec![q, e]));
        vecs.push((format!("{p}.attn_q_norm.weight"), hd));
        if l < 2 {
            mats.push((format!("{p}.attn_k.weight"), vec![e, kv]));
            vecs.push((format!("{p}.attn_k_norm.weight"), hd));
            if swa[l] {
                mats.push((format!("{p}.attn_v.weight"), vec![e, kv]));
            }
        }
        mats.push((format!("{p}.ffn_gate.weight"), vec![e, ff]));
        mats.push((format!("{p}.ffn_up.weight"), vec![e, ff]));
        mats.push((format!("{p}.ffn_down.weight"), vec![ff, e]));
        mats.push((format!("{p}.inp_gate.weight"), vec![e, PLE as u64]));
        mats.push((format!("{p}.proj.weight"), vec![PLE as u64, e]));
        for n in [
            "attn_norm",
            "post_attention_norm",
            "ffn_norm",
            "post_ffw_norm",
            "post_norm",
        ] {
            vecs.push((format!("{p}.{n}.weight"), N_EMBD));
        }
        vecs.push((format!("{p}.layer_output_scale.weight"), 1));
    }
    edit(&mut mats);
    add_tensors(&mut w, qtype, &mats, &vecs);
    let path = dir.join(format!("tiny-gemma4-{}.gguf", qtype.name()));
    w.write(&path).unwrap();
    path
}

fn session(path: &Path, kv: KvType, threads: usize) -> Session {
    let model = Arc::new(load::open_model(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())));
    let opts = SessionOptions {
        n_ctx: 64,
        n_batch: 512,
        threads: Some(threads),
        backend: BackendChoice::Cpu,
        kv_type: Some(kv),
        gpu: None,
        ..SessionOptions::default()
    };
    Session::new(model, &opts).unwrap()
}

const PROMPT: [u32; 11] = [1, 17, 5, 93, 42, 42, 8, 61, 3, 77, 20];

/// Prefill of n tokens gives the same logits as n single decode steps, for every architecture
/// (gemma3's window of 4 is crossed), and a prefill split into batches as well.
fn prefill_equals_decode_steps_for_every_architecture() {
    let dir = crate::gguf::tempdir("tiny-prefill");
    for arch in Arch::DECODERS {
        for qtype in [QType::F32, QType::Q8_0, QType::Q4K] {
            let path = write_tiny(&dir, arch, qtype, |_| {});
            let mut a = session(&path, KvType::F32, 2);
            let all = a.eval(&PROMPT, true).unwrap();
            let mut b = session(&path, KvType::F32, 2);
            let mut steps = Vec::new();
            for &t in &PROMPT {
                steps.extend(b.eval(&[t], false).unwrap());
            }
            let (maxd, _) = diff(&steps, &all);
            assert!(
                maxd <= 1e-4,
                "{} {qtype}: prefill vs decode max |Δ| {maxd}",
                arch.name()
            );
            let model = Arc::new(load::open_model(&path).unwrap());
            let opts = SessionOptions {
                n_ctx: 64,
                n_batch: 4,
                threads: Some(1),
                backend: BackendChoice::Cpu,
                kv_type: Some(KvType::F32),
                gpu: None,
                ..SessionOptions::default()
            };
            let mut c = Session::new(model, &opts).unwrap();
            let batched = c.eval(&PROMPT, true).unwrap();
            let (maxd, _) = diff(&batched, &all);
            assert!(
                maxd <= 1e-4,
                "{} {qtype}: batches of 4 vs one batch max |Δ| {maxd}",
                arch.name()
            );
        }
    }
}

/// f16 and q8_0 caches stay close to f32; thread count changes nothing.
fn kv_types_and_threads_agree() {
    let dir = crate::gguf::tempdir("tiny-kv");
    for arch in Arch::DECODERS {
        let path = write_tiny(&dir, arch, QType::F16, |_| {});
        let base = session(&path, KvType::F32, 1).eval(&PROMPT, true).unwrap();
        let two = session(&path, KvType::F32, 2).eval(&PROMPT, true).unwrap();
        assert_eq!(base, two, "{}: 1 vs 2 threads", arch.name());
        for (kv, bound) in [(KvType::F16, 1e-4), (KvType::Q8_0, 1e-2)] {
            let got = session(&path, kv, 2).eval(&PROMPT, true).unwrap();
            let (_, nmse) = diff(&got, &base);
            eprintln!("{} kv {}: NMSE {nmse:.2e} vs f32", arch.name(), kv.name());
            assert!(nmse <= bound, "{} kv {}: NMSE {nmse} vs f32", arch.name(), kv.name());
        }
    }
}

/// Hostile shapes: a tensor that contradicts the hyperparameters, or a missing one, is an
/// error naming it — at load, before any backend is involved.
fn hostile_shapes_are_named() {
    let dir = crate::gguf::tempdir("tiny-hostile");
    let p = write_tiny(&dir, Arch::Llama, QType::F32, |m| {
        m.iter_mut().find(|(n, _)| n == "blk.1.ffn_up.weight").unwrap().1 = vec![N_EMBD as u64, 100];
    });
    let e = load::open_model(&p).err().expect("accepted a wrong shape").to_string();
    assert!(e.contains("blk.1.ffn_up.weight") && e.contains("[64, 100]"), "{e}");
    let p = write_tiny(&dir, Arch::Qwen3, QType::F32, |m| {
        m.retain(|(n, _)| n != "blk.2.attn_v.weight")
    });
    let e = load::open_model(&p)
        .err()
        .expect("accepted a missing tensor")
        .to_string();
    assert!(e.contains("blk.2.attn_v.weight"), "{e}");
    let p = write_tiny(&dir, Arch::Gemma3, QType::F32, |m| {
        m.iter_mut().find(|(n, _)| n == "blk.0.attn_k.weight").unwrap().1 = vec![N_EMBD as u64, 3 * HEAD_DIM as u64];
    });
    let e = load::open_model(&p)
        .err()
        .expect("accepted a K width that contradicts head_count_kv")
        .to_string();
    assert!(e.contains("blk.0.attn_k.weight"), "{e}");
    let p = write_tiny(&dir, Arch::Mistral3, QType::F32, |m| {
        m.push(("rope_freqs.weight".into(), vec![HEAD_DIM as u64 / 2 + 1]));
    });
    let e = load::open_model(&p)
        .err()
        .expect("accepted frequency factors that do not fit n_rot")
        .to_string();
    assert!(e.contains("rope_freqs.weight"), "{e}");
    // Fused tensors whose rows are not exactly their parts: named, with the sizes wanted.
    let p = write_tiny(&dir, Arch::Phi3, QType::F32, |m| {
        m.iter_mut().find(|(n, _)| n == "blk.1.attn_qkv.weight").unwrap().1 = vec![N_EMBD as u64, 250];
    });
    let e = load::open_model(&p)
        .err()
        .expect("accepted a short attn_qkv")
        .to_string();
    let want = (N_HEAD + 2 * N_HEAD_KV) * HEAD_DIM;
    assert!(
        e.contains("blk.1.attn_qkv.weight") && e.contains(&format!("[64, {want}]")),
        "{e}"
    );
    let p = write_tiny(&dir, Arch::Glm4, QType::F32, |m| {
        m.iter_mut().find(|(n, _)| n == "blk.2.ffn_up.weight").unwrap().1 = vec![N_EMBD as u64, N_FF as u64];
    });
    let e = load::open_model(&p)
        .err()
        .expect("accepted an unfused ffn_up")
        .to_string();
    assert!(
        e.contains("blk.2.ffn_up.weight") && e.contains(&format!("[64, {}]", 2 * N_FF)),
        "{e}"
    );
}

/// An unknown architecture string is one error naming it; out-of-vocabulary ids and
/// positions past the context are errors, not corruption.
fn unknown_architecture_and_bad_steps_are_errors() {
    let dir = crate::gguf::tempdir("tiny-arch");
    let mut w = GgufWriter::new();
    w.set("general.architecture", Value::String("mamba9".into()));
    let p = dir.join("m.gguf");
    w.write(&p).unwrap();
    let e = load::open_model(&p).err().expect("unknown arch accepted").to_string();
    assert!(e.contains("'mamba9'"), "{e}");

    let path = write_tiny(&dir, Arch::Llama, QType::F32, |_| {});
    let mut s = session(&path, KvType::F32, 1);
    let e = s
        .eval(&[N_VOCAB as u32 + 5], false)
        .expect_err("oov id accepted")
        .to_string();
    assert!(e.contains(&(N_VOCAB + 5).to_string()), "{e}");
    let long: Vec<u32> = (0..70).map(|i| i % N_VOCAB as u32).collect();
    let e = s.eval(&long, false).expect_err("overflow accepted").to_string();
    assert!(e.contains("context"), "{e}");
}

/// Switching flash attention on after a forward takes effect (plans are keyed by the graph's
/// options, not its shape alone), and switching it off again gives the plain logits back:
/// `open()` gives a fresh session on the backend under test, with an f16 cache, where the two
/// numerics differ (flash keeps its V accumulator in f16).
pub fn check_flash_toggle(label: &str, open: &dyn Fn() -> Session) {
    let run = |s: &mut Session| {
        s.reset();
        let mut v = s.eval(&PROMPT, true).unwrap();
        v.extend(s.eval(&[PROMPT[0]], false).unwrap());
        v
    };
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<u32>>();
    let mut s = open();
    let off = run(&mut s);
    s.set_flash_attn(true);
    let toggled = run(&mut s);
    s.set_flash_attn(false);
    let back = run(&mut s);
    let mut f = open();
    f.set_flash_attn(true);
    let fresh = run(&mut f);
    assert!(
        bits(&off) != bits(&fresh),
        "{label}: flash and plain attention agree bit for bit, so this probe cannot see the switch"
    );
    assert!(
        bits(&toggled) == bits(&fresh),
        "{label}: flash switched on after a forward differs from a flash session (max |Δ| {}); plain vs flash {}",
        diff(&toggled, &fresh).0,
        diff(&off, &fresh).0
    );
    assert!(
        bits(&back) == bits(&off),
        "{label}: flash switched off again differs from plain attention (max |Δ| {})",
        diff(&back, &off).0
    );
}

fn flash_toggle_takes_effect_after_a_forward() {
    let dir = crate::gguf::tempdir("tiny-flash");
    for arch in Arch::DECODERS {
        let path = write_tiny(&dir, arch, QType::F32, |_| {});
        check_flash_toggle(&format!("cpu {}", arch.name()), &|| session(&path, KvType::F16, 2));
    }
}

/// `Session::trace` returns a named node's value after a forward: the logits node equals what
/// `eval` returns, an intermediate has its node's shape, a kept node survives the buffers reused
/// after it, and an unknown name is an error naming it.
fn trace_reads_a_named_intermediate() {
    let dir = crate::gguf::tempdir("tiny-trace");
    for arch in Arch::DECODERS {
        let path = write_tiny(&dir, arch, QType::Q8_0, |_| {});
        let want = session(&path, KvType::F16, 2).eval(&PROMPT, false).unwrap();
        let mut s = session(&path, KvType::F16, 2);
        // The graph's result: the LM head, soft-capped for gemma3, divided for granite.
        let head = match arch {
            Arch::Gemma3 | Arch::Gemma4 => "result_softcap",
            Arch::Granite => "result_scaled",
            _ => "result_output",
        };
        let t = s.trace(&PROMPT, head).unwrap();
        assert_eq!((t.rows, t.width), (1, N_VOCAB));
        assert_eq!(t.values, want, "{}: traced logits", arch.name());
        // blk.0's attention output is dead long before the head; kept, it is still whole.
        let mut s = session(&path, KvType::F16, 2);
        let a = s.trace(&PROMPT, "blk.0.attn_out").unwrap();
        assert_eq!(
            (a.rows, a.width, a.values.len()),
            (PROMPT.len(), N_EMBD, PROMPT.len() * N_EMBD)
        );
        let mut again = session(&path, KvType::F16, 2);
        assert_eq!(again.trace(&PROMPT, "blk.0.attn_out").unwrap().values, a.values);
        assert_ne!(a.values, vec![0.0; a.values.len()]);
        let e = s.trace(&[1], "blk.0.no_such_node").unwrap_err().to_string();
        assert!(e.contains("blk.0.no_such_node"), "{e}");
    }
}

/// `drop_ffn` (`--no-ffn`): for every architecture, no FFN, expert or FFN-norm tensor is left
/// in the model, named by the graph, or uploaded by any backend (the GPUs hold exactly the
/// attention-only weights); what was left out is counted; the outputs change.
fn drop_ffn_leaves_every_ffn_tensor_out() {
    let dir = crate::gguf::tempdir("tiny-no-ffn");
    for arch in Arch::DECODERS {
        // gpt-oss' `post_attention_norm` is its pre-FFN norm.
        let is_ffn = |n: &str| {
            n.contains(".ffn_")
                || n.contains("post_ffw_norm")
                || (arch == Arch::GptOss && n.contains("post_attention_norm"))
        };
        let path = write_tiny(&dir, arch, QType::Q8_0, |_| {});
        let full = Arc::new(load::open_model(&path).unwrap());
        let (lean, dropped) = full.without_ffn().unwrap();
        let ffn_bytes: u64 = full
            .weights
            .values()
            .filter(|t| is_ffn(&t.name))
            .map(|t| t.data.len() as u64)
            .sum();
        assert_eq!(dropped.bytes, ffn_bytes, "{}", arch.name());
        assert_eq!(lean.weight_bytes() + ffn_bytes, full.weight_bytes());
        assert!(lean.weights.keys().all(|n| !is_ffn(n)), "{}", arch.name());
        let g = lean.graph(minfer::model::GraphKey::new(4, 1));
        assert!(g.nodes.iter().flat_map(|n| n.op.weights()).all(|w| !is_ffn(&w)));
        assert!(g.nodes.iter().all(|n| !n.name.contains("ffn")), "{}", arch.name());

        let opts = SessionOptions {
            n_ctx: 64,
            threads: Some(2),
            backend: BackendChoice::Cpu,
            kv_type: Some(KvType::F32),
            drop_ffn: true,
            ..SessionOptions::default()
        };
        let mut s = Session::new(full.clone(), &opts).unwrap();
        assert!(s.model.weights.keys().all(|n| !is_ffn(n)));
        assert!(s.log.iter().any(|l| l.contains("left out")), "{:?}", s.log);
        let attn_only = s.eval(&PROMPT, false).unwrap();
        let whole = session(&path, KvType::F32, 2).eval(&PROMPT, false).unwrap();
        assert_ne!(attn_only, whole, "{}: dropping the FFNs changed nothing", arch.name());
        #[cfg(feature = "wgpu")]
        for gpu in crate::gpu::gpus("drop_ffn_leaves_every_ffn_tensor_out", None) {
            let mut s = Session::on(vec![gpu.backend.clone()], full.clone(), &opts).unwrap();
            assert_eq!(
                s.resident_bytes(),
                lean.weight_bytes(),
                "{} on {}",
                arch.name(),
                gpu.label
            );
            let got = s.eval(&PROMPT, false).unwrap();
            let (maxd, _) = diff(&got, &attn_only);
            assert!(
                maxd <= 1e-2,
                "{} on {}: max |Δ| {maxd} vs the CPU",
                arch.name(),
                gpu.label
            );
        }
    }
}
