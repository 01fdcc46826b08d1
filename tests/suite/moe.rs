//! Mixtures of experts on the CPU backend: the random MoE models of the reference pack against
//! transformers (f32) and llama.cpp (quantized), and the routing itself against transformers'
//! per-token expert choice.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use minfer::backend::{BackendChoice, BackendOptions, KvType};
use minfer::{load, Session, SessionOptions};

use crate::common;
use crate::model::{diff, ids, session};

tests![
    moe_f32_models_match_transformers,
    moe_quantized_models_match_llama_cpp,
    tokens_choose_different_experts_as_transformers_does,
    decode_reads_the_dense_part_and_k_of_e_experts,
];

/// The MoE archs whose f32 GGUF and transformers reference are in the pack.
const MOE_ARCHS: [&str; 4] = ["qwen3moe", "mixtral", "qwen2moe", "gpt-oss"];

/// Every quantized MoE file the pack has references for, shipped or recreated by `quantize`
/// (its sha256 checked against the pack's manifest).
const MOE_QUANTIZED: [&str; 18] = [
    "qwen3moe-Q8_0",
    "qwen3moe-Q6_K",
    "qwen3moe-Q4_K_M",
    "qwen3moe-Q4_0",
    "mixtral-Q8_0",
    "mixtral-Q6_K",
    "mixtral-Q4_K_M",
    "mixtral-Q4_0",
    "qwen2moe-Q8_0",
    "qwen2moe-Q6_K",
    "qwen2moe-Q4_K_M",
    "qwen2moe-Q4_0",
    "gpt-oss-Q8_0",
    "gpt-oss-Q6_K",
    "gpt-oss-Q4_K_M",
    "gpt-oss-Q4_0",
    "gpt-oss-MXFP4_MOE",
    "gpt-oss-mxfp4-mxfp4",
];

fn all_logits(gguf: &Path, prompt: &[u32]) -> (Vec<f32>, usize) {
    let mut s = session(gguf, prompt.len() + 8, KvType::F16);
    let n_vocab = s.n_vocab();
    (s.eval(prompt, true).unwrap(), n_vocab)
}

/// f32 GGUFs against transformers' float32 logits at every position: max |Δ| ≤ 5e-3, as the
/// dense random models.
fn moe_f32_models_match_transformers() {
    let t = "moe_f32_models_match_transformers";
    let Some(root) = common::ref_dir(t) else {
        return;
    };
    for arch in MOE_ARCHS {
        let hf = common::read_json(&root.join(format!("random/refs/{arch}.hf-fp32.json")));
        let prompt = ids(&hf["prompt_ids"]);
        let want = common::read_npy_f32(&root.join(format!("random/refs/{arch}.hf-fp32.all_logits.npy")));
        let (got, _) = all_logits(&root.join(format!("random/gguf/{arch}-f32.gguf")), &prompt);
        let (maxd, nmse) = diff(&got, &want);
        eprintln!("{arch}-f32: max|Δ| {maxd:.2e}, NMSE {nmse:.2e} vs transformers");
        assert!(maxd <= 5e-3, "{arch}-f32: max |Δ| {maxd} > 5e-3");
    }
}

/// Quantized MoE files against llama.cpp's logits of the same file: the last position's
/// logits within the CPU engine's tolerance (max |Δ| ≤ 0.1 or NMSE ≤ 1e-3), and at every
/// position the recorded top-20 logits likewise. A router near-tie can pick another expert
/// under different rounding and move a whole position (the pack's README lists such
/// positions), so each position is checked on its own and none may be off.
fn moe_quantized_models_match_llama_cpp() {
    let t = "moe_quantized_models_match_llama_cpp";
    let Some(root) = common::ref_dir(t) else {
        return;
    };
    let mut failures = Vec::new();
    for name in MOE_QUANTIZED {
        let r = common::read_json(&root.join(format!("random/refs/{name}.json")));
        let prompt = ids(&r["prompt_ids"]);
        let Some(gguf) = common::random_gguf(t, &root, name) else {
            return;
        };
        let (all, n_vocab) = all_logits(&gguf, &prompt);
        let last = &all[(prompt.len() - 1) * n_vocab..];
        let want = common::read_npy_f32(&root.join(format!("random/refs/{name}.last_logits.npy")));
        let (maxd, nmse) = diff(last, &want);
        let mut worst = (0usize, 0f32);
        for (pos, entries) in r["top20_per_position"].as_array().unwrap().iter().enumerate() {
            let row = &all[pos * n_vocab..(pos + 1) * n_vocab];
            for e in entries.as_array().unwrap() {
                let d = (row[e[0].as_u64().unwrap() as usize] - e[1].as_f64().unwrap() as f32).abs();
                if d > worst.1 {
                    worst = (pos, d);
                }
            }
        }
        eprintln!(
            "{name}: last max|Δ| {maxd:.3e} NMSE {nmse:.3e}; top-20 worst {:.3e} at position {}",
            worst.1, worst.0
        );
        if !(maxd <= 0.1 || nmse <= 1e-3) {
            failures.push(format!("{name}: last logits max|Δ| {maxd}, NMSE {nmse}"));
        }
        if worst.1 > 0.1 {
            failures.push(format!(
                "{name}: top-20 logits off by {} at position {}",
                worst.1, worst.0
            ));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// Layer 0's routing, read from the graph's `blk.0.ffn_moe_route` node, picks the experts
/// transformers picked at every prompt position, and different positions pick different sets.
fn tokens_choose_different_experts_as_transformers_does() {
    let t = "tokens_choose_different_experts_as_transformers_does";
    let Some(root) = common::ref_dir(t) else {
        return;
    };
    for arch in MOE_ARCHS {
        let hf = common::read_json(&root.join(format!("random/refs/{arch}.hf-fp32.json")));
        let prompt = ids(&hf["prompt_ids"]);
        let mut s = session(
            &root.join(format!("random/gguf/{arch}-f32.gguf")),
            prompt.len() + 8,
            KvType::F16,
        );
        let route = s.trace(&prompt, "blk.0.ffn_moe_route").unwrap();
        let mut s = session(
            &root.join(format!("random/gguf/{arch}-f32.gguf")),
            prompt.len() + 8,
            KvType::F16,
        );
        let logits = s.trace(&prompt, "blk.0.ffn_moe_logits").unwrap();
        let (k, n_expert) = (route.width / 2, logits.width);
        let mut distinct = BTreeSet::new();
        eprintln!("{arch}: layer-0 experts per position (ours | transformers)");
        for (pos, want) in hf["router_topk_layer0"].as_array().unwrap().iter().enumerate() {
            let row = &route.values[pos * 2 * k..(pos + 1) * 2 * k];
            let ours: BTreeSet<u32> = row[..k].iter().map(|&e| e as u32).collect();
            let theirs: BTreeSet<u32> = ids(want).into_iter().collect();
            eprintln!("  {pos:>2}: {ours:?} | {theirs:?}  weights {:?}", &row[k..]);
            // Where the k-th and the next router logits tie (an all-zero embedding row gives
            // all-zero logits), either choice is right.
            let mut l = logits.values[pos * n_expert..(pos + 1) * n_expert].to_vec();
            l.sort_by(|a, b| b.total_cmp(a));
            if (l[k - 1] - l[k]).abs() <= 1e-6 {
                eprintln!("      (router logits tie at the k-th expert: {l:?})");
                continue;
            }
            assert_eq!(ours, theirs, "{arch}: position {pos}");
            distinct.insert(ours);
        }
        assert!(distinct.len() > 1, "{arch}: every token chose {distinct:?}");
    }
}

/// The CPU profile of one decoded token: the expert matmuls read exactly the k chosen experts
/// of every `*_exps` tensor (k/E of their bytes), and the token's whole weight traffic is the
/// dense part plus that share.
fn decode_reads_the_dense_part_and_k_of_e_experts() {
    let t = "decode_reads_the_dense_part_and_k_of_e_experts";
    let Some(root) = common::ref_dir(t) else {
        return;
    };
    for name in ["qwen3moe-f32", "qwen3moe-Q4_K_M", "gpt-oss-MXFP4_MOE"] {
        let Some(path) = common::random_gguf(t, &root, name) else {
            return;
        };
        let model = Arc::new(load::open_model(&path).unwrap());
        let (k, e) = (model.hparams.n_expert_used as u64, model.hparams.n_expert as u64);
        let experts: u64 = model
            .weights
            .iter()
            .filter(|(n, _)| n.contains("_exps."))
            .map(|(n, w)| if n.ends_with(".bias") { 0 } else { w.data.len() as u64 })
            .sum();
        let opts = SessionOptions {
            n_ctx: 64,
            threads: Some(2),
            backend: BackendChoice::Cpu,
            kv_type: Some(KvType::F16),
            backend_options: BackendOptions {
                profile: true,
                ..BackendOptions::default()
            },
            ..SessionOptions::default()
        };
        let mut s = Session::new(model.clone(), &opts).unwrap();
        s.eval(&[1, 5, 9, 14], false).unwrap();
        for tok in [21, 3, 17] {
            s.eval(&[tok], false).unwrap();
        }
        let report = s.profile_report().expect("a CPU profile");
        let decode: Vec<&str> = report
            .lines()
            .skip_while(|l| !l.contains("decode steps"))
            .skip(2)
            .take_while(|l| l.starts_with("  "))
            .collect();
        let kib = |l: &str| -> f64 { l.split_whitespace().last().unwrap().parse().unwrap() };
        let id: f64 = decode
            .iter()
            .filter(|l| l.trim_start().starts_with("matmul_id/"))
            .map(|l| kib(l))
            .sum();
        let total = kib(decode.iter().find(|l| l.trim_start().starts_with("total")).unwrap());
        let want = (experts * k / e) as f64 / 1024.0;
        println!(
            "{name}: experts {id:.1} KiB/token (k/E of {:.1} = {want:.1}), total {total:.1} KiB/token, model {:.1} KiB",
            experts as f64 / 1024.0,
            model.weight_bytes() as f64 / 1024.0
        );
        assert!(
            (id - want).abs() <= 0.1,
            "{name}: the expert matmuls read {id} KiB a token, k/E of the experts is {want}\n{report}"
        );
        // The dense part: every weight but the experts (the output matrix, attention, norms,
        // router; one embedding row rather than the table).
        let embd = model.weight("token_embd.weight").unwrap().data.len() as f64 / 1024.0;
        let dense = (model.weight_bytes() - experts) as f64 / 1024.0;
        assert!(
            total >= id + dense - embd - 1.0 && total <= id + dense + 1.0,
            "{name}: {total} KiB a token, dense {dense} + experts {id}\n{report}"
        );
    }
}
