//! Hugging Face checkpoints of the mixture-of-experts families: qwen3_moe, qwen2_moe, mixtral
//! and gpt_oss directories rebuilt from their f32 GGUFs in each expert layout a checkpoint uses
//! (one tensor per expert, transformers 5's fused `gate_up_proj`, gpt-oss's interleaved one),
//! against the GGUF path and transformers; the shipped gpt-oss MXFP4 checkpoint against its
//! GGUF conversion (expert bytes identical) and both oracles; missing or misshapen experts.

use std::path::Path;

use minfer::gguf::GgufFile;
use minfer::hf::HfDir;
use minfer::model::RopeMode;

use crate::common;
use crate::hf::{copy_side_files, hf_name, ids, logits, max_abs_diff, open, write_safetensors, StTensor, TempDir};

tests![
    moe_hf_dirs_rebuilt_from_gguf_match_gguf_and_transformers,
    gpt_oss_mxfp4_checkpoint_equals_its_gguf_conversion,
    missing_or_misshapen_experts_are_named,
];

/// How a rebuilt checkpoint stores its experts.
#[derive(Clone, Copy, PartialEq)]
enum Layout {
    /// `mlp.experts.E.{gate,up,down}_proj.weight`.
    PerExpert,
    /// Mixtral's `block_sparse_moe.experts.E.{w1,w3,w2}.weight`.
    Mixtral,
    /// transformers 5: `mlp.experts.gate_up_proj` [E, 2ff, hidden], `down_proj` [E, hidden, ff].
    Fused,
    /// gpt-oss: `gate_up_proj` [E, hidden, 2ff] interleaved, `down_proj` [E, ff, hidden], biases.
    GptOss,
}

const CASES: [(&str, Layout); 4] = [
    ("qwen3moe", Layout::PerExpert),
    ("mixtral", Layout::Mixtral),
    ("qwen2moe", Layout::Fused),
    ("gpt-oss", Layout::GptOss),
];

/// convert_hf_to_gguf's Q/K permute undone: GGUF row h·hd + 2i + s is HF row h·hd + s·hd/2 + i.
fn unpermute(bytes: &mut [u8], row_bytes: usize, heads: usize) {
    let src = bytes.to_vec();
    let hd = bytes.len() / row_bytes / heads;
    for h in 0..heads {
        for i in 0..hd / 2 {
            for s in 0..2 {
                let (g, f) = (h * hd + 2 * i + s, h * hd + s * hd / 2 + i);
                bytes[f * row_bytes..(f + 1) * row_bytes].copy_from_slice(&src[g * row_bytes..(g + 1) * row_bytes]);
            }
        }
    }
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// The checkpoint tensors of an f32 MoE GGUF in `layout`.
fn checkpoint(arch: &str, gguf: &GgufFile, layout: Layout) -> Vec<StTensor> {
    let a = gguf
        .metadata
        .get_str("general.architecture")
        .unwrap()
        .unwrap()
        .to_string();
    let u = |k: &str| gguf.metadata.get_u64(&format!("{a}.{k}")).unwrap().unwrap() as usize;
    let (n_head, n_head_kv) = (u("attention.head_count"), u("attention.head_count_kv"));
    let mut out = Vec::new();
    let exps = |name: &str| {
        let t = gguf.tensors.iter().find(|t| t.name == name).unwrap();
        (f32s(t.bytes()), t.shape.clone())
    };
    for t in &gguf.tensors {
        let n = &t.name;
        if n.contains("_exps.") {
            continue;
        }
        let mut b = t.bytes().to_vec();
        if arch == "mixtral" && (n.ends_with("attn_q.weight") || n.ends_with("attn_k.weight")) {
            let heads = if n.ends_with("attn_q.weight") {
                n_head
            } else {
                n_head_kv
            };
            unpermute(&mut b, t.shape[0] as usize * 4, heads);
        }
        let shape: Vec<u64> = t.shape.iter().rev().copied().collect();
        out.push((hf_name(arch, n), "F32".to_string(), shape, b));
    }
    for il in 0..u("block_count") {
        let p = format!("model.layers.{il}");
        let (gate, gs) = exps(&format!("blk.{il}.ffn_gate_exps.weight"));
        let (up, _) = exps(&format!("blk.{il}.ffn_up_exps.weight"));
        let (down, _) = exps(&format!("blk.{il}.ffn_down_exps.weight"));
        let (hidden, ff, ne) = (gs[0] as usize, gs[1] as usize, gs[2] as usize);
        let m = hidden * ff;
        let st = |name: String, shape: Vec<usize>, v: &[f32]| {
            (
                name,
                "F32".to_string(),
                shape.iter().map(|&d| d as u64).collect(),
                bytes(v),
            )
        };
        match layout {
            Layout::PerExpert | Layout::Mixtral => {
                let names = if layout == Layout::Mixtral {
                    [
                        "block_sparse_moe.experts.{e}.w1",
                        "block_sparse_moe.experts.{e}.w3",
                        "block_sparse_moe.experts.{e}.w2",
                    ]
                } else {
                    [
                        "mlp.experts.{e}.gate_proj",
                        "mlp.experts.{e}.up_proj",
                        "mlp.experts.{e}.down_proj",
                    ]
                };
                for e in 0..ne {
                    for (k, (w, shape)) in [(&gate, [ff, hidden]), (&up, [ff, hidden]), (&down, [hidden, ff])]
                        .into_iter()
                        .enumerate()
                    {
                        let name = format!("{p}.{}.weight", names[k].replace("{e}", &e.to_string()));
                        out.push(st(name, shape.to_vec(), &w[e * m..(e + 1) * m]));
                    }
                }
            }
            Layout::Fused => {
                let gu: Vec<f32> = (0..ne)
                    .flat_map(|e| gate[e * m..(e + 1) * m].iter().chain(&up[e * m..(e + 1) * m]).copied())
                    .collect();
                out.push(st(
                    format!("{p}.mlp.experts.gate_up_proj"),
                    vec![ne, 2 * ff, hidden],
                    &gu,
                ));
                out.push(st(format!("{p}.mlp.experts.down_proj"), vec![ne, hidden, ff], &down));
            }
            Layout::GptOss => {
                // W[e][i][2o] = gate[e][o][i], W[e][i][2o + 1] = up[e][o][i].
                let mut gu = vec![0f32; ne * hidden * 2 * ff];
                let mut dn = vec![0f32; ne * ff * hidden];
                for e in 0..ne {
                    for o in 0..ff {
                        for i in 0..hidden {
                            gu[(e * hidden + i) * 2 * ff + 2 * o] = gate[(e * ff + o) * hidden + i];
                            gu[(e * hidden + i) * 2 * ff + 2 * o + 1] = up[(e * ff + o) * hidden + i];
                        }
                    }
                    // down ggml [ff, hidden, E]: (e, o, i) at (e·hidden + o)·ff + i; HF [E, ff, hidden].
                    for o in 0..hidden {
                        for i in 0..ff {
                            dn[(e * ff + i) * hidden + o] = down[(e * hidden + o) * ff + i];
                        }
                    }
                }
                out.push(st(
                    format!("{p}.mlp.experts.gate_up_proj"),
                    vec![ne, hidden, 2 * ff],
                    &gu,
                ));
                out.push(st(format!("{p}.mlp.experts.down_proj"), vec![ne, ff, hidden], &dn));
                let (gb, _) = exps(&format!("blk.{il}.ffn_gate_exps.bias"));
                let (ub, _) = exps(&format!("blk.{il}.ffn_up_exps.bias"));
                let (db, _) = exps(&format!("blk.{il}.ffn_down_exps.bias"));
                let gub: Vec<f32> = gb.iter().zip(&ub).flat_map(|(g, u)| [*g, *u]).collect();
                out.push(st(format!("{p}.mlp.experts.gate_up_proj_bias"), vec![ne, 2 * ff], &gub));
                out.push(st(format!("{p}.mlp.experts.down_proj_bias"), vec![ne, hidden], &db));
            }
        }
    }
    out
}

fn build(root: &Path, tmp: &Path, arch: &str, layout: Layout, edit: impl Fn(&mut Vec<StTensor>)) -> std::path::PathBuf {
    let r = root.join("random");
    let gguf = GgufFile::open(r.join(format!("gguf/{arch}-f32.gguf"))).unwrap();
    let mut tensors = checkpoint(arch, &gguf, layout);
    edit(&mut tensors);
    let dir = tmp.join(arch);
    std::fs::create_dir_all(&dir).unwrap();
    copy_side_files(&r.join(format!("hf/{arch}")), &dir);
    write_safetensors(&dir.join("model.safetensors"), &tensors);
    dir
}

/// Each MoE family's directory rebuilt from its f32 GGUF (qwen3moe one tensor per expert,
/// mixtral `w1/w3/w2` with unpermuted Q/K, qwen2moe fused with its shared expert and gate,
/// gpt-oss interleaved with biases, sinks, YaRN and sliding layers from config.json): every
/// position's logits equal the GGUF path's (≤ 1e-4) and transformers' (≤ 5e-3).
fn moe_hf_dirs_rebuilt_from_gguf_match_gguf_and_transformers() {
    let Some(root) = common::ref_dir("moe_hf_dirs_rebuilt_from_gguf_match_gguf_and_transformers") else {
        return;
    };
    let r = root.join("random");
    let tmp = TempDir::new("moe-rebuilt");
    for (arch, layout) in CASES {
        let dir = build(&root, &tmp.0, arch, layout, |_| {});
        let refs = common::read_json(&r.join(format!("refs/{arch}.hf-fp32.json")));
        let prompt = ids(&refs["prompt_ids"]);
        let want = common::read_npy_f32(&r.join(format!("refs/{arch}.hf-fp32.all_logits.npy")));
        // The config's keys give the GGUF's hyperparameters (mixtral: HF's unpermuted Q/K
        // rows rotate NeoX-style), and the weights are the GGUF's names and shapes.
        let (hm, gm) = (open(&dir), open(&r.join(format!("gguf/{arch}-f32.gguf"))));
        let mut hp = gm.hparams.clone();
        if arch == "mixtral" {
            hp.rope.mode = RopeMode::Neox;
            hp.rope_swa.mode = RopeMode::Neox;
        }
        let (a, b) = (
            serde_json::to_value(&hm.hparams).unwrap(),
            serde_json::to_value(&hp).unwrap(),
        );
        assert_eq!(a, b, "{arch}: HF hparams {a:#} vs GGUF {b:#}");
        assert_eq!(hm.weights.len(), gm.weights.len(), "{arch}");
        for (n, t) in &gm.weights {
            assert_eq!(
                (hm.weights[n].qtype, &hm.weights[n].shape),
                (t.qtype, &t.shape),
                "{arch}: {n}"
            );
        }
        let hf = logits(&dir, &prompt);
        let gguf = logits(&r.join(format!("gguf/{arch}-f32.gguf")), &prompt);
        let (vs_gguf, vs_tf) = (max_abs_diff(&hf, &gguf), max_abs_diff(&hf, &want));
        eprintln!(
            "{arch} (hf dir rebuilt from its GGUF): max|Δ| vs gguf f32 {vs_gguf:.2e}, vs transformers {vs_tf:.2e}"
        );
        assert!(vs_gguf <= 1e-4, "{arch}: max |Δ| vs the GGUF path {vs_gguf} > 1e-4");
        assert!(vs_tf <= 5e-3, "{arch}: max |Δ| vs transformers {vs_tf} > 5e-3");
    }
}

/// `hf/gpt-oss-mxfp4` (openai's checkpoint format: U8 blocks + E8M0 scales, interleaved
/// gate/up) loads to tensors byte-identical to `convert_hf_to_gguf.py`'s conversion, so its
/// logits equal that GGUF's; against llama.cpp's logits of that GGUF within the quantized-MoE
/// tolerance (last position max |Δ| ≤ 0.1 or NMSE ≤ 1e-3, every recorded top-20 logit ≤ 0.1);
/// against transformers' exact dequantisation per position, reported, with all but the
/// router-flip position ≤ 0.05.
fn gpt_oss_mxfp4_checkpoint_equals_its_gguf_conversion() {
    let t = "gpt_oss_mxfp4_checkpoint_equals_its_gguf_conversion";
    let Some(root) = common::ref_dir(t) else {
        return;
    };
    let r = root.join("random");
    let dir = r.join("hf/gpt-oss-mxfp4");
    let gguf_path = r.join("gguf/gpt-oss-mxfp4-mxfp4.gguf");
    let hf = HfDir::open(&dir).unwrap();
    let gguf = GgufFile::open(&gguf_path).unwrap();
    assert_eq!(hf.weights.len(), gguf.tensors.len());
    for g in &gguf.tensors {
        let w = hf.weights.get(&g.name).unwrap_or_else(|| panic!("no {}", g.name));
        assert_eq!((w.qtype, &w.shape), (g.qtype, &g.shape), "{}", g.name);
        assert!(
            w.bytes() == g.bytes(),
            "{}: bytes differ from the GGUF conversion",
            g.name
        );
    }
    let refs = common::read_json(&r.join("refs/gpt-oss-mxfp4.hf-fp32.json"));
    let prompt = ids(&refs["prompt_ids"]);
    let got = logits(&dir, &prompt);
    let from_gguf = logits(&gguf_path, &prompt);
    assert_eq!(max_abs_diff(&got, &from_gguf), 0.0, "same bytes, same graph");

    let n_vocab = got.len() / prompt.len();
    let lr = common::read_json(&r.join("refs/gpt-oss-mxfp4-mxfp4.json"));
    let last = common::read_npy_f32(&r.join("refs/gpt-oss-mxfp4-mxfp4.last_logits.npy"));
    let ours_last = &got[(prompt.len() - 1) * n_vocab..];
    let maxd = max_abs_diff(ours_last, &last);
    let nmse = {
        let (num, den) = ours_last.iter().zip(&last).fold((0f64, 0f64), |(n, d), (a, b)| {
            (n + ((a - b) as f64).powi(2), d + (*b as f64).powi(2))
        });
        num / den
    };
    let mut top20 = 0f32;
    for (pos, entries) in lr["top20_per_position"].as_array().unwrap().iter().enumerate() {
        for e in entries.as_array().unwrap() {
            let d = (got[pos * n_vocab + e[0].as_u64().unwrap() as usize] - e[1].as_f64().unwrap() as f32).abs();
            top20 = top20.max(d);
        }
    }
    eprintln!("gpt-oss-mxfp4 hf dir vs llama.cpp: last max|Δ| {maxd:.3e} NMSE {nmse:.3e}, top-20 worst {top20:.3e}");
    assert!(maxd <= 0.1 || nmse <= 1e-3, "last logits max|Δ| {maxd}, NMSE {nmse}");
    assert!(top20 <= 0.1, "top-20 logits off by {top20}");

    let want = common::read_npy_f32(&r.join("refs/gpt-oss-mxfp4.hf-fp32.all_logits.npy"));
    let per_pos: Vec<f32> = (0..prompt.len())
        .map(|p| {
            max_abs_diff(
                &got[p * n_vocab..(p + 1) * n_vocab],
                &want[p * n_vocab..(p + 1) * n_vocab],
            )
        })
        .collect();
    let shown: Vec<String> = per_pos.iter().map(|d| format!("{d:.2e}")).collect();
    eprintln!("gpt-oss-mxfp4 hf dir vs transformers per position: {}", shown.join(" "));
    // The README's one router flip (position 18, 0.96) aside, MXFP4's Q8_0 activations cost
    // 0.02-0.04 per position.
    let off: Vec<usize> = (0..per_pos.len()).filter(|&p| per_pos[p] > 0.05).collect();
    assert!(
        off.len() <= 1,
        "positions {off:?} off transformers by > 0.05: {per_pos:?}"
    );
}

/// An absent expert, an expert of another shape, experts both fused and per tensor, a U8
/// tensor that is not MXFP4, and a MoE config with dense layers: errors naming the tensor
/// (or key), never a model.
fn missing_or_misshapen_experts_are_named() {
    let Some(root) = common::ref_dir("missing_or_misshapen_experts_are_named") else {
        return;
    };
    let tmp = TempDir::new("moe-bad");
    let err = |dir: &Path| {
        minfer::load::open_model(dir)
            .err()
            .unwrap_or_else(|| panic!("{} loaded", dir.display()))
            .to_string()
    };
    let gone = "model.layers.1.mlp.experts.3.up_proj.weight";
    let dir = build(&root, &tmp.0.join("a"), "qwen3moe", Layout::PerExpert, |t| {
        t.retain(|t| t.0 != gone)
    });
    let e = err(&dir);
    assert!(
        e.contains(gone) && e.contains("missing") && e.contains("4 experts"),
        "{e}"
    );

    let odd = "model.layers.0.block_sparse_moe.experts.2.w2.weight";
    let dir = build(&root, &tmp.0.join("b"), "mixtral", Layout::Mixtral, |ts| {
        let t = ts.iter_mut().find(|t| t.0 == odd).unwrap();
        t.2 = vec![128, 512];
    });
    let e = err(&dir);
    assert!(e.contains(odd) && e.contains("[512, 128]"), "{e}");

    let dir = build(&root, &tmp.0.join("c"), "qwen3moe", Layout::PerExpert, |ts| {
        ts.push((
            "model.layers.0.mlp.experts.down_proj".into(),
            "F32".into(),
            vec![4, 256, 256],
            vec![0; 4 << 18],
        ));
    });
    let e = err(&dir);
    assert!(
        e.contains("model.layers.0.mlp.experts.down_proj") && e.contains("both fused"),
        "{e}"
    );

    let dir = build(&root, &tmp.0.join("d"), "qwen3moe", Layout::PerExpert, |ts| {
        ts.push((
            "model.layers.0.self_attn.q_proj.scales".into(),
            "U8".into(),
            vec![4],
            vec![0; 4],
        ));
    });
    let e = err(&dir);
    assert!(e.contains("q_proj.scales") && e.contains("U8"), "{e}");

    let bigger = "model.layers.0.mlp.experts.4.gate_proj.weight";
    let dir = build(&root, &tmp.0.join("e"), "qwen3moe", Layout::PerExpert, |ts| {
        ts.push((bigger.into(), "F32".into(), vec![256, 256], vec![0; 1 << 18]));
    });
    let e = err(&dir);
    assert!(e.contains(bigger) && e.contains("4 experts"), "{e}");

    // gpt-oss MXFP4: scales missing, or of another shape than their blocks.
    let src = root.join("random/hf/gpt-oss-mxfp4");
    let f = minfer::hf::SafetensorsFile::open(&src.join("model.safetensors")).unwrap();
    let mut all: Vec<StTensor> = f
        .tensors(0)
        .unwrap()
        .into_iter()
        .map(|t| {
            (
                t.name,
                t.qtype.name().to_uppercase(),
                t.shape.iter().rev().copied().collect(),
                t.data.to_vec(),
            )
        })
        .collect();
    for (name, shape, data) in f.raw_u8().unwrap() {
        all.push((name, "U8".into(), shape.iter().rev().copied().collect(), data.to_vec()));
    }
    let scales = "model.layers.1.mlp.experts.down_proj_scales";
    for (tag, short) in [("g", false), ("h", true)] {
        let dir = tmp.0.join(tag);
        std::fs::create_dir_all(&dir).unwrap();
        copy_side_files(&src, &dir);
        let mut ts = all.clone();
        if short {
            let t = ts.iter_mut().find(|t| t.0 == scales).unwrap();
            assert_eq!(t.2, vec![4, 256, 8]);
            t.2 = vec![4, 256, 7];
            t.3.truncate(4 * 256 * 7);
        } else {
            ts.retain(|t| t.0 != scales);
        }
        write_safetensors(&dir.join("model.safetensors"), &ts);
        let e = err(&dir);
        let want = if short { scales } else { "down_proj_blocks" };
        assert!(
            e.contains(want) && e.contains(if short { "[7, 256, 4]" } else { "_scales" }),
            "{e}"
        );
    }

    let dir = tmp.0.join("f/qwen3moe");
    let mut cfg = common::read_json(&dir.parent().unwrap().parent().unwrap().join("a/qwen3moe/config.json"));
    cfg["mlp_only_layers"] = serde_json::json!([1]);
    std::fs::create_dir_all(&dir).unwrap();
    for f in [
        "tokenizer.json",
        "tokenizer_config.json",
        "generation_config.json",
        "model.safetensors",
    ] {
        std::fs::copy(tmp.0.join("e/qwen3moe").join(f), dir.join(f)).unwrap();
    }
    std::fs::write(dir.join("config.json"), cfg.to_string()).unwrap();
    let e = err(&dir);
    assert!(e.contains("mlp_only_layers"), "{e}");
}
