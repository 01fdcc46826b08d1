//! Whole models on the GPU backends: the random GGUFs of every architecture and type, wgpu's
//! row and batch splits, and the real models against llama.cpp's records and the CPU (on
//! hardware and llvmpipe; the CUDA emulation is too slow for 135M-parameter models).

use std::sync::Arc;

use minfer::backend::{Backend, BackendChoice, KvType, Step};
use minfer::quant::QType;
use minfer::tensor::Bytes;
use minfer::testing::cpu::CpuBackend;
use minfer::{load, Model, Session, SessionOptions};

use super::{gpu, gpus, gpus_at, nmse, Gpu};
use crate::common;

tests![
    random_models_match_cpu,
    ministral3_matches_cpu,
    flash_toggle_takes_effect_after_a_forward,
    traced_intermediates_match_cpu,
    split_weights_and_batches_change_nothing,
    real_models_match_llama_cpp_and_cpu,
    #[ignore = "minutes on llvmpipe's emulation; run with --ignored f16_cooperative_tiles_hold"]
    f16_cooperative_tiles_hold_a_real_model,
    greedy_runs_match_cpu,
    minilm_embeddings_match_sentence_transformers,
    launches_passes_and_submits_are_bounded,
    trusted_shaders_compute_what_checked_ones_do,
    #[ignore = "minutes on llvmpipe; run with --ignored gemma3_paragraph"]
    gemma3_paragraph_matches_llama_cpp_and_cpu,
];

fn prompt_ids(json: &serde_json::Value) -> Vec<u32> {
    json["prompt_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as u32)
        .collect()
}

/// `model` with every quantized weight decoded to f32 by the reference codecs: the CPU then
/// multiplies by exactly the weights the shaders see, with f32 activations as they do.
fn dequantized(model: &Model) -> Model {
    let weights = model
        .weights
        .iter()
        .map(|(n, t)| {
            let mut t = t.clone();
            if t.qtype.is_quantized() {
                let f = t.to_f32().unwrap();
                t.data = Bytes::from_vec(bytemuck::cast_slice(&f).to_vec());
                t.qtype = QType::F32;
            }
            (n.clone(), t)
        })
        .collect();
    Model {
        arch: model.arch,
        hparams: model.hparams.clone(),
        metadata: model.metadata.clone(),
        weights,
        source: format!("{} (dequantized)", model.source),
        file_bytes: model.file_bytes,
    }
}

fn opts(n_ctx: usize, choice: BackendChoice, kv: KvType) -> SessionOptions {
    SessionOptions {
        n_ctx,
        n_batch: 512,
        threads: Some(2),
        backend: choice,
        kv_type: Some(kv),
        gpu: None,
        ..SessionOptions::default()
    }
}

fn session_of(model: Model, n_ctx: usize, choice: BackendChoice, kv: KvType) -> Session {
    Session::new(Arc::new(model), &opts(n_ctx, choice, kv)).unwrap()
}

/// A session on one GPU backend under test (the gate must take the model).
fn session_on(g: &Gpu, model: Arc<Model>, n_ctx: usize, kv: KvType) -> Session {
    let s = Session::on(vec![g.backend.clone()], model, &opts(n_ctx, BackendChoice::Auto, kv))
        .unwrap_or_else(|e| panic!("{}: {e}", g.label));
    assert_eq!(s.backend_name, g.backend.name());
    s
}

/// The wgpu kernels run as trusted shaders (without wgpu's runtime checks); the same kernels
/// with the checks give the same logits bit for bit, prompt and decode steps (the last two
/// through the split-KV attention), on each reduction path, over models that take every kind
/// of launch: packs with biases (qwen2), K-quants and sliding windows (gemma3), experts and
/// sinks (gpt-oss), and a q8_0 KV cache. An index the checks would have clamped (in a
/// workgroup or local array everywhere; in a buffer where the platform has no robust access
/// of its own) would read something else unchecked.
fn trusted_shaders_compute_what_checked_ones_do() {
    let t = "trusted_shaders_compute_what_checked_ones_do";
    let Some(root) = common::ref_dir(t) else {
        return;
    };
    const PROMPT: usize = 24;
    let backend = |subgroups: bool, checked: bool| {
        let opts = minfer::testing::wgpu::WgpuOptions {
            allow_software: true,
            subgroups,
            max_binding: None,
            checked,
            int8_matmul: true,
            coop_matmul: true,
        };
        minfer::testing::wgpu::WgpuBackend::new(opts).map(|b| b.with_split_span(PROMPT as u32 + 3))
    };
    // Created with subgroups asked for: whether the adapter has them.
    let Some(first) = gpu(t, true, None) else {
        return;
    };
    let paths = [true, false].into_iter().filter(|&sg| !sg || first.uses_subgroups());
    for subgroups in paths {
        let [trusted, checked] = [false, true].map(|c| {
            let b = backend(subgroups, c).unwrap();
            Gpu {
                label: format!("{} (subgroups {subgroups}, checked {c})", b.describe()),
                backend: Arc::new(b),
                alt: false,
                emulated: false,
            }
        });
        for (name, kv) in [
            ("llama-Q4_1", KvType::F16),
            ("qwen2-Q5_0", KvType::F16),
            ("gemma3-Q4_K_M", KvType::Q8_0),
            ("gpt-oss-MXFP4_MOE", KvType::F16),
        ] {
            let prompt = prompt_ids(&common::read_json(&root.join(format!("random/refs/{name}.json"))));
            assert_eq!(prompt.len(), PROMPT);
            let Some(path) = common::random_gguf(t, &root, name) else {
                continue;
            };
            let model = Arc::new(load::open_model(&path).unwrap());
            let run = |g: &Gpu| {
                let mut s = session_on(g, model.clone(), PROMPT + 8, kv);
                let mut out = s.eval(&prompt, true).unwrap();
                let mut next = minfer::testing::argmax(&out[out.len() - s.n_vocab()..]);
                for _ in 0..4 {
                    let o = s.eval(&[next], false).unwrap();
                    next = minfer::testing::argmax(&o);
                    out.extend(o);
                }
                out
            };
            let (a, b) = (run(&trusted), run(&checked));
            assert!(
                a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()) && a.len() == b.len(),
                "{name}: {} and {} differ",
                trusted.label,
                checked.label
            );
            eprintln!(
                "{t}: {name} kv {}: {} logits equal bit for bit ({})",
                kv.name(),
                a.len(),
                trusted.label
            );
        }
    }
}

/// Every random model (4 architectures × 12 types, and the shipped files of the batch-2 dense
/// families and mixtures of experts): all-position logits of the reference
/// prompt, then 4 greedy decode steps, with an f16 KV cache (and once each with f32 and q8_0
/// caches). On the weights decoded to f32 (f32 activations on both sides) against the CPU:
/// NMSE ≤ 1e-6. On the quantized file, where both round activations to 8 bits and a last-bit
/// difference can tip a rounding: NMSE ≤ 5e-3, the bound `model.rs` holds the CPU to on these
/// models.
fn random_models_match_cpu() {
    let t = "random_models_match_cpu";
    let Some(root) = common::ref_dir(t) else {
        return;
    };
    // The prompts are 24 tokens: of the 4 decode steps after them, the first two run the
    // one-kernel attention and the last two (contexts of 27 and 28) the split-KV one.
    const PROMPT: usize = 24;
    let gs: Vec<Gpu> = gpus_at(t, None, PROMPT as u32 + 3)
        .into_iter()
        .filter(|g| !g.alt)
        .collect();
    if gs.is_empty() {
        return;
    }
    // Every type with the f16 cache llama.cpp's references used; f32 and q8_0 caches once each.
    let mut types: Vec<(&str, KvType)> = [
        "f32", "f16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K_M", "Q5_K_M", "Q6_K", "Q3_K_M", "Q2_K",
    ]
    .into_iter()
    .map(|ty| (ty, KvType::F16))
    .collect();
    types.extend([("f32", KvType::F32), ("Q4_K_M", KvType::Q8_0)]);
    let mut cases: Vec<(&str, &str, KvType)> = ["llama", "qwen2", "qwen3", "gemma3"]
        .into_iter()
        .flat_map(|a| types.iter().map(move |&(ty, kv)| (a, ty, kv)))
        .collect();
    // The batch-2 dense families: their shipped files, with the f16 cache; gemma4 (per-layer
    // K/V widths, KV-shared layers) also with the f32 cache, and its quantized files. (Its
    // scale-1 attention over normed K makes a q8_0 cache tip roundings on last-bit differences
    // upstream: 1.1e-5 on f32 weights, above this test's 1e-6.)
    for (a, shipped) in crate::model::RANDOM_DENSE2 {
        cases.extend(shipped.iter().map(|&ty| (a, ty, KvType::F16)));
    }
    cases.extend([
        ("gemma4", "f32", KvType::F32),
        ("gemma4", "Q8_0", KvType::F16),
        ("gemma4", "Q4_K_M", KvType::F16),
        ("gemma4", "Q4_0", KvType::F16),
    ]);
    // The mixtures of experts: their shipped files.
    for (arch, tys) in [
        ("qwen3moe", &["f32", "Q8_0", "Q4_K_M"][..]),
        ("mixtral", &["f32", "Q4_K_M"]),
        ("qwen2moe", &["f32", "Q4_K_M"]),
        ("gpt-oss", &["f32", "Q4_K_M", "MXFP4_MOE", "mxfp4-mxfp4"]),
    ] {
        cases.extend(tys.iter().map(|&ty| (arch, ty, KvType::F16)));
    }
    let mut failures = Vec::new();
    for (arch, ty, kv) in cases {
        let name = format!("{arch}-{ty}");
        let refs = if ty.starts_with('f') {
            format!("{arch}.hf-fp32")
        } else {
            name.clone()
        };
        let prompt = prompt_ids(&common::read_json(&root.join(format!("random/refs/{refs}.json"))));
        assert_eq!(prompt.len(), PROMPT, "{refs}: the prompt the split span was set for");
        // Quantized files the pack does not ship are recreated (`common::random_gguf`).
        let Some(path) = common::random_gguf(t, &root, &name) else {
            continue;
        };
        let model = load::open_model(&path).unwrap();
        let n_ctx = prompt.len() + 8;
        let mut exact = session_of(dequantized(&model), n_ctx, BackendChoice::Cpu, kv);
        let mut c = session_of(model, n_ctx, BackendChoice::Cpu, kv);
        let want_exact = exact.eval(&prompt, true).unwrap();
        let want_cpu = c.eval(&prompt, true).unwrap();
        let mut steps = Vec::new();
        let mut next = minfer::testing::argmax(&want_cpu[want_cpu.len() - c.n_vocab()..]);
        for _ in 0..4 {
            let o = c.eval(&[next], false).unwrap();
            steps.push((next, exact.eval(&[next], false).unwrap(), o.clone()));
            next = minfer::testing::argmax(&o);
        }
        for gb in &gs {
            // Both sides on the same model, the full prompt, then the CPU's greedy steps.
            let run = |m: Arc<Model>, want: &[f32], steps: &[(u32, Vec<f32>)]| {
                let mut g = session_on(gb, m, n_ctx, kv);
                let mut e = nmse(&g.eval(&prompt, true).unwrap(), want);
                for (tok, want) in steps {
                    e = e.max(nmse(&g.eval(&[*tok], false).unwrap(), want));
                }
                e
            };
            let exact_steps: Vec<(u32, Vec<f32>)> = steps.iter().map(|(t, e, _)| (*t, e.clone())).collect();
            let cpu_steps: Vec<(u32, Vec<f32>)> = steps.iter().map(|(t, _, c)| (*t, c.clone())).collect();
            let e_exact = run(
                Arc::new(dequantized(&load::open_model(&path).unwrap())),
                &want_exact,
                &exact_steps,
            );
            let e_cpu = run(Arc::new(load::open_model(&path).unwrap()), &want_cpu, &cpu_steps);
            let name = format!("{name} kv {}", kv.name());
            eprintln!(
                "{name:<24} {:<10} NMSE {e_exact:.2e} vs cpu on f32 weights, {e_cpu:.2e} vs cpu",
                gb.label
            );
            if e_exact > 1e-6 || e_cpu > 5e-3 {
                failures.push(format!(
                    "{}: {name}: NMSE {e_exact:.2e} (f32 weights), {e_cpu:.2e} (quantized)",
                    gb.label
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// With 48 KiB bindings every weight is split by rows and the prompt into sub-batches of 12
/// tokens (all-position logits of 1,024 would not fit one binding): the logits are unchanged.
/// (Sub-batches past `VEC_MAX_TOKENS`, so they take the tiles as the whole prompt does; a
/// sub-batch of up to 8 tokens would take the matvec, whose sums differ in order.)
fn split_weights_and_batches_change_nothing() {
    let t = "split_weights_and_batches_change_nothing";
    let Some(root) = common::ref_dir(t) else {
        return;
    };
    let (Some(whole), Some(split)) = (gpu(t, true, None), gpu(t, true, Some(48 << 10))) else {
        return;
    };
    for name in ["llama-Q4_K_M", "gemma3-Q8_0", "qwen2-Q5_0"] {
        let prompt = prompt_ids(&common::read_json(&root.join(format!("random/refs/{name}.json"))));
        let model = Arc::new(load::open_model(root.join(format!("random/gguf/{name}.gguf"))).unwrap());
        let mut logits = Vec::new();
        for b in [&whole, &split] {
            let mut ctx = b.new_context(&model, prompt.len() + 2, KvType::F16).unwrap();
            let mut all = Vec::new();
            ctx.forward(
                &model.graph(minfer::model::GraphKey::new(prompt.len(), prompt.len())),
                &Step::contiguous(&prompt, 0),
                &mut all,
            )
            .unwrap();
            let id = ctx
                .forward_argmax(
                    &model.graph(minfer::model::GraphKey::new(1, 1)),
                    &Step::contiguous(&[prompt[0]], prompt.len()),
                )
                .unwrap();
            logits.push((all, id));
        }
        let e = nmse(&logits[1].0, &logits[0].0);
        eprintln!("{name}: split vs whole NMSE {e:.1e}");
        assert!(e <= 1e-12, "{name}: NMSE {e:.2e}");
        assert_eq!(logits[1].1, logits[0].1, "{name}: greedy id");
    }
}

/// Perplexity of `ids[1..]` under all-position logits.
fn perplexity(logits: &[f32], ids: &[u32], n_vocab: usize) -> f64 {
    let mut nll = 0f64;
    for (pos, &next) in ids.iter().enumerate().skip(1) {
        let row = &logits[(pos - 1) * n_vocab..pos * n_vocab];
        let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
        let sum: f64 = row.iter().map(|&v| (v as f64 - max).exp()).sum();
        nll += max + sum.ln() - row[next as usize] as f64;
    }
    (nll / (ids.len() - 1) as f64).exp()
}

/// How far one run's all-position logits are from the CPU backend's (which are llama.cpp's,
/// bit for bit): NMSE, relative perplexity difference, and top-1 misses against llama.cpp's
/// record at the positions where its margin is ≥ 0.05.
#[derive(Default)]
struct Gap {
    nmse: f64,
    ppl: f64,
    misses: usize,
}

impl Gap {
    fn add(&mut self, o: &Gap) {
        self.nmse += o.nmse;
        self.ppl += o.ppl;
        self.misses += o.misses;
    }

    /// Each measure at most twice the yardstick's.
    fn within_twice(&self, floor: &Gap) -> Result<(), String> {
        let ok = self.nmse <= 2.0 * floor.nmse && self.ppl <= 2.0 * floor.ppl && self.misses <= 2 * floor.misses;
        let text = format!(
            "NMSE {:.2e}, perplexity {:.3} %, top-1 misses {} (the scalar kernels: {:.2e}, {:.3} %, {})",
            self.nmse,
            100.0 * self.ppl,
            self.misses,
            floor.nmse,
            100.0 * floor.ppl,
            floor.misses
        );
        if ok {
            Ok(())
        } else {
            Err(text)
        }
    }
}

/// One real-model case with both KV cache types: the GPU's gap from the CPU backend, and the
/// gap of the CPU's own scalar kernels (the yardstick, see `real_models_match_llama_cpp_and_cpu`).
fn real_case(t: &str, g: &Gpu, case: &str, file: &str) -> Option<(Gap, Gap)> {
    let root = common::ref_dir(t)?;
    let path = common::real_model(t, file)?;
    let r = common::read_json(&root.join(format!("real/{case}.json")));
    let ids = prompt_ids(&r);
    let model = Arc::new(load::open_model(&path).unwrap());
    let scalar: Arc<dyn Backend> = Arc::new(CpuBackend::with_isa(Some(2), "scalar").unwrap());
    let eval = |b: Option<Arc<dyn Backend>>, kv| {
        let n_ctx = ids.len() + 8;
        let mut s = match b {
            Some(b) => Session::on(vec![b], model.clone(), &opts(n_ctx, BackendChoice::Auto, kv)).unwrap(),
            None => Session::new(model.clone(), &opts(n_ctx, BackendChoice::Cpu, kv)).unwrap(),
        };
        s.eval(&ids, true).unwrap()
    };
    let n_vocab = model.hparams.n_vocab;
    let ppl = |l: &[f32]| perplexity(l, &ids, n_vocab);
    let margins: Vec<(usize, u32)> = r["top20_per_position"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .filter_map(|(pos, e)| {
            let e = e.as_array().unwrap();
            let margin = e[0][1].as_f64().unwrap() - e[1][1].as_f64().unwrap();
            (margin >= 0.05).then(|| (pos, e[0][0].as_u64().unwrap() as u32))
        })
        .collect();
    // `pc`: the CPU's perplexity, computed once per cache type.
    let gap = |l: &[f32], cpu: &[f32], pc: f64| Gap {
        nmse: nmse(l, cpu),
        ppl: (ppl(l) - pc).abs() / pc,
        misses: margins
            .iter()
            .filter(|&&(pos, tok)| minfer::testing::argmax(&l[pos * n_vocab..(pos + 1) * n_vocab]) != tok)
            .count(),
    };
    let (mut ours, mut floor) = (Gap::default(), Gap::default());
    for kv in [KvType::F16, KvType::F32] {
        let start = std::time::Instant::now();
        let got = eval(Some(g.backend.clone()), kv);
        let secs = start.elapsed().as_secs_f64();
        let cpu = eval(None, kv);
        let pc = ppl(&cpu);
        let (o, f) = (gap(&got, &cpu, pc), gap(&eval(Some(scalar.clone()), kv), &cpu, pc));
        eprintln!(
            "{case} kv {} on {}: {} tokens in {secs:.1} s; vs cpu NMSE {:.1e}, perplexity {:.3} % ({:.4} vs {:.4}), \
             top-1 misses {}/{}; cpu scalar kernels: NMSE {:.1e}, perplexity {:.3} %, misses {}",
            kv.name(),
            g.label,
            ids.len(),
            o.nmse,
            100.0 * o.ppl,
            ppl(&got),
            pc,
            o.misses,
            margins.len(),
            f.nmse,
            100.0 * f.ppl,
            f.misses
        );
        ours.add(&o);
        floor.add(&f);
    }
    Some((ours, floor))
}

/// The real models on llama.cpp's recorded prompts, all-position logits with f16 and f32 KV
/// caches, against the CPU backend (llama.cpp's logits bit for bit).
///
/// The GPU rounds activations to 8 bits exactly as the CPU does (the matmul test holds each
/// product to NMSE 1e-9 of the CPU's), so the two differ only in f32 summation order, and on
/// these models such differences grow: a last-bit change that tips an 8-bit rounding moves every
/// layer after it. The CPU's own scalar kernels (the same integer products and roundings, other
/// summation orders) end up as far from its SIMD kernels: about NMSE 1e-3 and 1 % perplexity
/// on SmolLM2. So the yardstick is the scalar kernels' gap, summed over the cases: the GPU's NMSE,
/// perplexity difference and top-1 misses against llama.cpp's record (where its margin is
/// ≥ 0.05) each at most twice theirs.
fn real_models_match_llama_cpp_and_cpu() {
    let t = "real_models_match_llama_cpp_and_cpu";
    let cases = [
        ("smollm2.p1_capital", "SmolLM2-135M-Instruct.Q4_1.gguf"),
        ("smollm2.p2_chat_jinja", "SmolLM2-135M-Instruct.Q4_1.gguf"),
        ("smollm2.p3_paragraph", "SmolLM2-135M-Instruct.Q4_1.gguf"),
        ("gemma3.p1_capital", "gemma-3-270m-Q4_K_M.gguf"),
    ];
    let gs: Vec<Gpu> = gpus(t, None).into_iter().filter(|g| !g.alt && !g.emulated).collect();
    let mut failures = Vec::new();
    for g in &gs {
        let (mut ours, mut floor) = (Gap::default(), Gap::default());
        for (case, file) in cases {
            let Some((o, f)) = real_case(t, g, case, file) else {
                return;
            };
            ours.add(&o);
            floor.add(&f);
        }
        match ours.within_twice(&floor) {
            Ok(()) => eprintln!(
                "{}: summed over the cases, within twice the scalar kernels' gap",
                g.label
            ),
            Err(e) => failures.push(format!("{}: summed over the cases, {e}", g.label)),
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// The f16 cooperative-matrix prefill tile (on the device's matrices, or on their emulation
/// where it has none) over a real model: SmolLM2's 204-token paragraph, whose matmuls take the
/// tiles, within twice the CPU scalar kernels' gap of the CPU (see above) — the halves' rounding
/// of weights and activations stays below the summation-order differences every path has.
fn f16_cooperative_tiles_hold_a_real_model() {
    use minfer::testing::wgpu::Coop;
    let t = "f16_cooperative_tiles_hold_a_real_model";
    let Some(b) = gpu(t, true, None) else {
        return;
    };
    let b = b.with_coop_emulation();
    let coop = b.uses_coop();
    if !matches!(coop, Coop::F16x16 | Coop::F16x16Emulated) {
        common::skip::<()>(t, &format!("{}: {coop:?}", b.describe()));
        return;
    }
    let g = Gpu {
        label: format!("{} ({coop:?})", b.describe()),
        backend: Arc::new(b),
        alt: false,
        emulated: false,
    };
    let Some((ours, floor)) = real_case(t, &g, "smollm2.p3_paragraph", "SmolLM2-135M-Instruct.Q4_1.gguf") else {
        return;
    };
    if let Err(e) = ours.within_twice(&floor) {
        panic!("{}: {e}", g.label);
    }
}

/// Greedy generation of 32 tokens (`run --raw --temp 0 -n 32`), on SmolLM2 with each recorded
/// prompt and both KV cache types: the GPU picks the CPU's token at every step up to the first
/// one whose top-2 margin on the CPU is below 0.5, a near-tie that last-bit differences may
/// tip either way (see above: logits move by a few tenths). Prints how many runs are equal for
/// all 32 steps.
fn greedy_runs_match_cpu() {
    let t = "greedy_runs_match_cpu";
    let Some(root) = common::ref_dir(t) else {
        return;
    };
    let Some(path) = common::real_model(t, "SmolLM2-135M-Instruct.Q4_1.gguf") else {
        return;
    };
    let model = Arc::new(load::open_model(&path).unwrap());
    let gs: Vec<Gpu> = gpus(t, None).into_iter().filter(|g| !g.alt && !g.emulated).collect();
    let mut failures = Vec::new();
    for g in &gs {
        let (mut whole, mut runs) = (0, 0);
        for case in ["p1_capital", "p2_chat_jinja", "p3_paragraph"] {
            let ids = prompt_ids(&common::read_json(&root.join(format!("real/smollm2.{case}.json"))));
            for kv in [KvType::F16, KvType::F32] {
                let n_ctx = ids.len() + 40;
                let mut cpu = Session::new(model.clone(), &opts(n_ctx, BackendChoice::Cpu, kv)).unwrap();
                let mut gpu = session_on(g, model.clone(), n_ctx, kv);
                let (mut c, mut o) = (cpu.eval(&ids, false).unwrap(), gpu.eval(&ids, false).unwrap());
                // Both are fed the CPU's token: up to the first difference, that is each one's
                // own greedy run.
                let (mut diff, mut tie) = (None, None);
                for step in 0..32 {
                    let (want, margin) = top2(&c);
                    if margin < 0.5 && tie.is_none() {
                        tie = Some((step, margin));
                    }
                    if minfer::testing::argmax(&o) != want {
                        diff = Some(step);
                        break;
                    }
                    c = cpu.eval(&[want], false).unwrap();
                    o = gpu.eval(&[want], false).unwrap();
                }
                runs += 1;
                whole += usize::from(diff.is_none());
                let what = format!("smollm2.{case} kv {} on {}", kv.name(), g.label);
                let tie_text = tie.map_or("no near-tie".into(), |(s, m)| {
                    format!("first near-tie at step {s} (margin {m:.3})")
                });
                match diff {
                    None => eprintln!("{what}: all 32 tokens equal; {tie_text}"),
                    Some(d) => {
                        eprintln!("{what}: tokens differ from step {d}; {tie_text}");
                        if tie.is_none_or(|(s, _)| s > d) {
                            failures.push(format!("{what}: tokens differ from step {d}, before any near-tie"));
                        }
                    }
                }
            }
        }
        eprintln!(
            "{}: {whole} of {runs} greedy runs equal to the CPU's for all 32 tokens",
            g.label
        );
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// The top token and its margin over the second.
fn top2(l: &[f32]) -> (u32, f32) {
    let best = minfer::testing::argmax(l);
    let second = l
        .iter()
        .enumerate()
        .filter(|&(i, _)| i != best as usize)
        .map(|(_, &v)| v)
        .fold(f32::NEG_INFINITY, f32::max);
    (best, l[best as usize] - second)
}

/// gemma-3 on the 206-token paragraph: all-position logits of a 262k vocabulary (216 MB) are
/// split into sub-batches on a 128 MiB-binding adapter. Minutes on llvmpipe, hence ignored by
/// default: `cargo test --release -- --ignored gemma3_paragraph`.
fn gemma3_paragraph_matches_llama_cpp_and_cpu() {
    let t = "gemma3_paragraph_matches_llama_cpp_and_cpu";
    for g in gpus(t, None).iter().filter(|g| !g.alt && !g.emulated) {
        if let Some((ours, floor)) = real_case(t, g, "gemma3.p3_paragraph", "gemma-3-270m-Q4_K_M.gguf") {
            if let Err(e) = ours.within_twice(&floor) {
                panic!("{}: {e}", g.label);
            }
        }
    }
}

/// The flash switch after a forward takes effect on every GPU backend, as on the CPU
/// (`tiny::check_flash_toggle`): their plan caches key on the graph's options too.
fn flash_toggle_takes_effect_after_a_forward() {
    let t = "flash_toggle_takes_effect_after_a_forward";
    let gs = gpus(t, None);
    if gs.is_empty() {
        return;
    }
    let dir = crate::gguf::tempdir("gpu-flash");
    let path = crate::tiny::write_tiny(&dir, minfer::model::Arch::Llama, QType::Q8_0, |_| {});
    for g in &gs {
        let open = || session_on(g, Arc::new(minfer::load::open_model(&path).unwrap()), 64, KvType::F16);
        crate::tiny::check_flash_toggle(&g.label, &open);
    }
}

/// One intermediate per layer kind, read back by name from every GPU backend and held against the
/// CPU's (`Session::trace`, `--trace`): within the random-model tests' quantized bound.
fn traced_intermediates_match_cpu() {
    let t = "traced_intermediates_match_cpu";
    let gs = gpus(t, None);
    if gs.is_empty() {
        return;
    }
    let dir = crate::gguf::tempdir("gpu-trace");
    let path = crate::tiny::write_tiny(&dir, minfer::model::Arch::Qwen3, QType::Q8_0, |_| {});
    let prompt = [1u32, 17, 5, 93, 42, 42, 8];
    let cpu = |name: &str| {
        let m = Arc::new(minfer::load::open_model(&path).unwrap());
        session_of_arc(m, 64, BackendChoice::Cpu, KvType::F16)
            .trace(&prompt, name)
            .unwrap()
    };
    for name in ["blk.0.attn_q_norm", "blk.1.attn", "blk.2.ffn_swiglu", "result_norm"] {
        let want = cpu(name);
        for g in &gs {
            let mut s = session_on(g, Arc::new(minfer::load::open_model(&path).unwrap()), 64, KvType::F16);
            let got = s.trace(&prompt, name).unwrap();
            assert_eq!((got.rows, got.width), (want.rows, want.width), "{name}");
            let e = nmse(&got.values, &want.values);
            eprintln!("{name:<20} {:<40} NMSE {e:.2e}", g.label);
            assert!(e <= 5e-3, "{}: {name}: NMSE {e:.2e}", g.label);
        }
    }
}

fn session_of_arc(model: Arc<Model>, n_ctx: usize, choice: BackendChoice, kv: KvType) -> Session {
    Session::new(model, &opts(n_ctx, choice, kv)).unwrap()
}

/// Ministral 3 (YaRN RoPE, the attention temperature from position 16) on every GPU backend: the
/// reference prompt, then 4 greedy steps, with f16 and f32 caches, against the CPU: NMSE ≤ 1e-6
/// (the GPUs round the rotation and the temperature together, the CPU apart).
fn ministral3_matches_cpu() {
    let t = "ministral3_matches_cpu";
    let Some(root) = common::ref_dir(t) else {
        return;
    };
    let gs: Vec<Gpu> = gpus(t, None).into_iter().filter(|g| !g.alt).collect();
    if gs.is_empty() {
        return;
    }
    let prompt = prompt_ids(&common::read_json(&root.join("random/refs/ministral3.hf-fp32.json")));
    let path = root.join("random/gguf/ministral3-f32.gguf");
    let n_ctx = prompt.len() + 8;
    for kv in [KvType::F16, KvType::F32] {
        let mut c = session_of(load::open_model(&path).unwrap(), n_ctx, BackendChoice::Cpu, kv);
        let want = c.eval(&prompt, true).unwrap();
        let mut steps = Vec::new();
        let mut next = minfer::testing::argmax(&want[want.len() - c.n_vocab()..]);
        for _ in 0..4 {
            let o = c.eval(&[next], false).unwrap();
            steps.push((next, o.clone()));
            next = minfer::testing::argmax(&o);
        }
        for gb in &gs {
            let mut g = session_on(gb, Arc::new(load::open_model(&path).unwrap()), n_ctx, kv);
            let mut e = nmse(&g.eval(&prompt, true).unwrap(), &want);
            for (tok, want) in &steps {
                e = e.max(nmse(&g.eval(&[*tok], false).unwrap(), want));
            }
            eprintln!("ministral3-f32 kv {} {}: NMSE {e:.2e} vs cpu", kv.name(), gb.label);
            assert!(e <= 1e-6, "{}: ministral3 kv {}: NMSE {e:.2e}", gb.label, kv.name());
        }
    }
}

/// What a forward hands the device (`Session::submitted`). A decode step of the random llama
/// (q4_1) and Qwen2 (q5_0, Q/K/V biases): at most 7 launches per layer (from 20 and 23: Q/K/V
/// and gate/up are one launch each over their pack, with the RMS norm before them and the
/// biases folded in; the ropes fold into their readers, the GLU and the attention round their
/// output for the quantized matmul after them, and the output and down projections add into the
/// residual), on wgpu recorded into one compute pass per 64 of them, and one submit. A
/// 600-token prefill on wgpu (attention in three launches, several submits) matches the CPU's
/// last logits.
fn launches_passes_and_submits_are_bounded() {
    let t = "launches_passes_and_submits_are_bounded";
    let Some(root) = common::ref_dir(t) else {
        return;
    };
    let gs = gpus(t, None);
    if gs.is_empty() {
        return;
    }
    let open = |name: &str| Arc::new(load::open_model(root.join("random/gguf").join(name)).unwrap());
    let model = open("llama-Q4_1.gguf");
    for m in [model.clone(), open("qwen2-Q5_0.gguf")] {
        let n_layer = m.hparams.n_layer as u64;
        for g in &gs {
            let mut s = session_on(g, m.clone(), 64, KvType::F16);
            s.eval(&[1, 2, 3], false).unwrap();
            s.eval_argmax(&[4]).unwrap();
            let w = s.submitted().expect("a GPU backend says what it submitted");
            // Per layer: Q/K/V (the norm and biases in), the store (K's rope folded in), the
            // attention (q's rope folded in, rounding its output), the output matmul adding
            // into the residual, gate/up (the norm in), the GLU rounding its output, the down
            // matmul adding into the residual. Besides the layers: get_rows, the output norm
            // and matmul, the argmax (its slices, then their reduction).
            let l = format!("{} {}", g.label, m.arch.name());
            assert!(w.dispatches <= 7 * n_layer + 5, "{l}: {w:?} for {n_layer} layers");
            assert!(w.dispatches >= 7 * n_layer, "{l}: {w:?} counts every launch");
            assert_eq!(w.submits, 1, "{l}: {w:?}");
            if g.backend.name() == "wgpu" {
                // The output copy ends a pass; the argmax is one of its own.
                assert!(w.passes <= w.dispatches.div_ceil(64) + 2, "{l}: {w:?}");
            }
        }
    }
    let Some(g) = gs.iter().find(|g| g.backend.name() == "wgpu") else {
        return;
    };
    let toks: Vec<u32> = (0..600).map(|i| (i * 7919 % 1000) as u32 + 3).collect();
    let on = |b: Arc<dyn Backend>, n: usize| {
        let o = SessionOptions {
            n_batch: n,
            ..opts(n + 16, BackendChoice::Auto, KvType::F16)
        };
        Session::on(vec![b], model.clone(), &o).unwrap()
    };
    let mut s = on(g.backend.clone(), 600);
    let ours = s.eval(&toks, false).unwrap();
    let w = s.submitted().unwrap();
    assert!(w.submits >= 2, "{}: a 600-token prefill in {w:?}", g.label);
    let want = on(Arc::new(CpuBackend::new(Some(2)).unwrap()), 600)
        .eval(&toks, false)
        .unwrap();
    let e = nmse(&ours, &want);
    assert!(e <= 5e-3, "{}: last logits NMSE {e:.2e} against the CPU", g.label);
}

/// all-MiniLM-L6-v2 (BERT: LayerNorm, GELU, learned positions, attention both ways) on each
/// GPU backend, from the sentence-transformers directory and from llama.cpp's conversion, every
/// recorded text in one batch, against sentence-transformers' vectors.
fn minilm_embeddings_match_sentence_transformers() {
    let t = "minilm_embeddings_match_sentence_transformers";
    let (Some(dir), Some(gguf)) = (crate::embed::minilm(t), crate::embed::minilm_gguf(t)) else {
        return;
    };
    let gs: Vec<Gpu> = gpus(t, None).into_iter().filter(|g| !g.alt).collect();
    let cases = crate::embed::cases();
    for src in [&dir, &gguf] {
        let load::Loaded { model, tokenizer } = load::open(src).unwrap();
        let model = Arc::new(model);
        let ids: Vec<Vec<u32>> = cases
            .iter()
            .map(|c| tokenizer.encode(&c.text, true, false).unwrap())
            .collect();
        for g in &gs {
            let mut s = session_on(g, model.clone(), 512, KvType::F32);
            let out = minfer::embed::embed_tokens(&mut s, &ids).unwrap_or_else(|e| panic!("{}: {e}", g.label));
            let mut worst = 1f64;
            for (c, e) in cases.iter().zip(&out) {
                let cos = crate::embed::cosine(&e.vector, &c.embedding);
                assert!(
                    cos >= 0.9999,
                    "{} ({}): {}: cosine {cos}",
                    g.label,
                    src.display(),
                    c.name
                );
                worst = worst.min(cos);
            }
            eprintln!(
                "{} ({}): {} texts, lowest cosine {worst:.9}",
                g.label,
                src.display(),
                cases.len()
            );
        }
    }
}
