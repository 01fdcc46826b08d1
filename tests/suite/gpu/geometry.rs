//! The launch geometry without a GPU: `plan` (`backend::gpu::roofline`) on files of a real
//! model's shape whose data is a hole (a sparse file: the header, then zeros nobody reads), its
//! counts against hand counts, and the check that every launch fills an H200 and every kernel
//! keeps a quarter of an SM busy at the least.

use std::path::{Path, PathBuf};

use minfer::backend::KvType;
use minfer::gguf::{encode_header, Metadata, TensorEntry, Value};
use minfer::quant::QType;
use minfer::testing::gpu::roofline::{self, Ask, GpuBackend, Plan};
use minfer::testing::gpu::{DeviceProfile, Unit};

tests![
    plan_counts_bytes_and_grids_as_by_hand,
    plan_json_is_stable_and_bad_asks_are_named,
    prefill_tiles_are_priced_on_the_units_they_take,
    decode_launches_fill_an_h200_at_1_and_8_tokens,
    batched_decode_fills_an_h200,
    launches_fill_an_h200_at_512_tokens,
];

/// A Llama shape: (width, FFN width, heads, KV heads, vocabulary).
#[derive(Clone, Copy)]
pub struct Shape {
    pub name: &'static str,
    pub embd: u64,
    pub ff: u64,
    pub heads: u64,
    pub kv_heads: u64,
    pub vocab: u64,
}

pub const LLAMA2_7B: Shape = Shape {
    name: "llama2-7b",
    embd: 4096,
    ff: 11008,
    heads: 32,
    kv_heads: 32,
    vocab: 32000,
};

pub const LLAMA3_8B: Shape = Shape {
    name: "llama3-8b",
    embd: 4096,
    ff: 14336,
    heads: 32,
    kv_heads: 8,
    vocab: 128256,
};

/// `shape` with `layers` layers as llama.cpp's Q4_0 (`q4_k_m` false) or Q4_K_M writes it:
/// Q4_K_M's attn_v and ffn_down in q6_K on its "more bits" layers, output in q6_K. The data is
/// a hole: the file takes a few KB on disk, and plan never reads it.
pub fn write_sparse(dir: &Path, shape: Shape, q4_k_m: bool, layers: u64) -> PathBuf {
    let base = if q4_k_m { QType::Q4K } else { QType::Q4_0 };
    let more_bits = |i: u64| i < layers / 8 || i >= 7 * layers / 8 || (i as i64 - (layers / 8) as i64) % 3 == 2;
    let (e, kv) = (shape.embd, shape.embd * shape.kv_heads / shape.heads);
    let mut t: Vec<(String, QType, Vec<u64>)> = vec![("token_embd.weight".into(), base, vec![e, shape.vocab])];
    for i in 0..layers {
        let heavy = if q4_k_m && more_bits(i) { QType::Q6K } else { base };
        let p = format!("blk.{i}");
        t.extend([
            (format!("{p}.attn_norm.weight"), QType::F32, vec![e]),
            (format!("{p}.attn_q.weight"), base, vec![e, e]),
            (format!("{p}.attn_k.weight"), base, vec![e, kv]),
            (format!("{p}.attn_v.weight"), heavy, vec![e, kv]),
            (format!("{p}.attn_output.weight"), base, vec![e, e]),
            (format!("{p}.ffn_norm.weight"), QType::F32, vec![e]),
            (format!("{p}.ffn_gate.weight"), base, vec![e, shape.ff]),
            (format!("{p}.ffn_up.weight"), base, vec![e, shape.ff]),
            (format!("{p}.ffn_down.weight"), heavy, vec![shape.ff, e]),
        ]);
    }
    t.push(("output_norm.weight".into(), QType::F32, vec![e]));
    let out = if q4_k_m { QType::Q6K } else { base };
    t.push(("output.weight".into(), out, vec![e, shape.vocab]));

    let mut md = Metadata::new();
    let u = |v: u64| Value::U32(v as u32);
    md.insert("general.architecture", Value::String("llama".into()));
    md.insert("llama.block_count", u(layers));
    md.insert("llama.context_length", u(8192));
    md.insert("llama.embedding_length", u(e));
    md.insert("llama.feed_forward_length", u(shape.ff));
    md.insert("llama.attention.head_count", u(shape.heads));
    md.insert("llama.attention.head_count_kv", u(shape.kv_heads));
    md.insert("llama.rope.dimension_count", u(e / shape.heads));
    md.insert("llama.attention.layer_norm_rms_epsilon", Value::F32(1e-5));
    md.insert("llama.rope.freq_base", Value::F32(10000.0));
    let entries: Vec<TensorEntry> = t
        .iter()
        .map(|(name, q, dims)| TensorEntry {
            name,
            qtype: *q,
            shape: dims,
            n_bytes: q.bytes_for(dims.iter().product()).unwrap(),
        })
        .collect();
    let align = 32;
    let head = encode_header(&md, &entries, align);
    let data: u64 = entries.iter().map(|t| t.n_bytes.div_ceil(align) * align).sum();
    let path = dir.join(format!(
        "{}-{}-{layers}l.gguf",
        shape.name,
        if q4_k_m { "q4_k_m" } else { "q4_0" }
    ));
    // Written aside and renamed into place: tests running at once each write the same file,
    // and none may open it half written.
    let part = path.with_extension(format!("{:?}.part", std::thread::current().id()).replace(['(', ')'], ""));
    std::fs::write(&part, &head).unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&part)
        .unwrap()
        .set_len(head.len() as u64 + data)
        .unwrap();
    std::fs::rename(&part, &path).unwrap();
    path
}

fn plan(path: &Path, tokens: usize, backend: GpuBackend, profile: &DeviceProfile) -> Plan {
    plan_at(path, tokens, 0, backend, profile)
}

/// `plan` with `depth` positions in the cache before the step.
/// A step of `tokens` after `depth` positions: a token per sequence up to 8 (decode), else one
/// sequence (prefill); `seqs` overrides.
fn plan_at(path: &Path, tokens: usize, depth: usize, backend: GpuBackend, profile: &DeviceProfile) -> Plan {
    plan_seqs(
        path,
        tokens,
        if tokens <= 8 { tokens } else { 1 },
        depth,
        backend,
        profile,
    )
}

fn plan_seqs(
    path: &Path,
    tokens: usize,
    seqs: usize,
    depth: usize,
    backend: GpuBackend,
    profile: &DeviceProfile,
) -> Plan {
    let m = minfer::load::open_model(path).unwrap();
    let ask = Ask {
        tokens,
        seqs,
        depth,
        backend,
        kv: KvType::F16,
    };
    roofline::plan(&m, &ask, profile, None).unwrap()
}

fn tmp() -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("geometry");
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Three launches of a one-token step of a two-layer Llama-2-7B Q4_K_M (layer 1 is a "more
/// bits" layer: attn_v in q6_K, so Q and K make the pack and the norm before them runs on its
/// own), counted by hand from the kernels' header comments and the GGUF block sizes.
fn plan_counts_bytes_and_grids_as_by_hand() {
    let h200 = DeviceProfile::find("h200").unwrap();
    let path = write_sparse(&tmp(), LLAMA2_7B, true, 2);
    let p = plan(&path, 1, GpuBackend::Cuda, &h200);
    let find = |kernel: &str, node: &str| {
        p.launches
            .iter()
            .find(|l| l.kernel == kernel && l.node == node)
            .unwrap_or_else(|| panic!("no {kernel} for {node}"))
    };
    // q4_K: 144 bytes per 256 elements.
    let q4k_row = 4096 / 256 * 144;

    // The token's embedding row: one invocation per 8 elements, 32 per workgroup.
    let g = find("get_rows_q4_K", "inp_embd");
    assert_eq!((g.workgroups, g.threads), (4096 / 8 / 32, 32));
    assert_eq!(
        (g.weight_bytes, g.bytes_read, g.bytes_written),
        (q4k_row, q4k_row + 4, 4096 * 4)
    );

    // attn_output, 4,096 × 4,096 q4_K, into the residual (a fused add): 4 rows per workgroup of
    // 128; the int8 activations (a byte and, per 32, a scale); the residual read and written.
    let o = find("matmul_vec_q4_K", "blk.1.attn_out");
    assert_eq!((o.workgroups, o.threads), (4096 / 4, 128));
    assert_eq!(o.weight_bytes, 4096 * q4k_row);
    assert_eq!(o.bytes_read, 4096 * q4k_row + (4096 + 4096 / 32 * 4) + 4096 * 4);
    assert_eq!((o.bytes_written, o.flops), (4096 * 4, 2 * 4096 * 4096));

    // The attention norm, rounding its row for the pack: the one row spread over 32 workgroups of
    // 256, half a q8_K block each (each sums the whole row, and scales its whole block); reads
    // the row and the f32 weight once, writes the row and quantize_act's layout of it.
    let n = find("rms_norm_f32", "blk.1.attn_norm");
    assert_eq!((n.workgroups, n.threads), (4096 / 128, 256));
    assert_eq!((n.weight_bytes, n.bytes_read), (4096 * 4, 2 * 4096 * 4));
    let act = 4096 * 4 + 4096 / 32 * 4 + 4096 + 4096 / 32 * 4 + 16;
    assert_eq!(n.bytes_written, 4096 * 4 + act);

    // The step's bytes: every weight once (the embedding's one row), the whole of it the
    // roofline's; the launches' times add up.
    let weights: u64 = p.launches.iter().map(|l| l.weight_bytes).sum();
    let m = minfer::load::open_model(&path).unwrap();
    let all: u64 = m.weights.values().map(|t| t.data.len() as u64).sum();
    let emb = m.weights["token_embd.weight"].data.len() as u64;
    assert_eq!(weights, all - emb + q4k_row);
    let sum: f64 = p.launches.iter().map(|l| l.est_us).sum();
    assert!((sum - p.est_us_total).abs() < 1e-6 * sum);
    assert!(p.est_tokens_per_s < p.roofline_tokens_per_s);
    assert!(p
        .launches
        .iter()
        .all(|l| l.est_us >= h200.launch_us && l.fill > 0.0 && l.fill <= 1.0));
}

/// A 512-token step's tiles over quantized weights multiply where each backend takes them on an
/// H200: CUDA's on the int8 tensor cores over the 8-bit activations (a byte and a scale per 32),
/// wgpu's on Vulkan's f16 cooperative matrices over the f32 values, with their dequantization
/// and conversion as f32 work; the decode rows keep dot4. The A100 (sm_80) likewise, and a GPU
/// without tensor cores in the profile (m3max) keeps dot4 on both. The matrix tiles also count
/// their L1 wavefronts (`cost::mma_l1_wavefronts`, `cost::coop16_l1_wavefronts`), and take at
/// least their time.
fn prefill_tiles_are_priced_on_the_units_they_take() {
    let path = write_sparse(&tmp(), LLAMA2_7B, true, 2);
    let unit = |backend: GpuBackend, profile: &str, tokens: usize| {
        let p = plan(&path, tokens, backend, &DeviceProfile::find(profile).unwrap());
        let l = p
            .launches
            .iter()
            .find(|l| l.node == "blk.0.attn_out" && l.kernel.starts_with("matmul"))
            .unwrap_or_else(|| panic!("no attn_out launch"))
            .clone();
        (l.kernel, l.unit, l.bytes_read - l.weight_bytes)
    };
    let (k, tokens) = (4096u64, 512u64);
    // x, and the residual the fused add reads.
    let (int8_x, f32_x) = (tokens * (k + k / 8), tokens * k * 4);
    let resid = tokens * 4096 * 4;
    for profile in ["h200", "a100"] {
        let (kernel, u, acts) = unit(GpuBackend::Cuda, profile, 512);
        assert_eq!(
            (kernel.as_str(), u, acts),
            ("matmul_mma64_q4_K", Some(Unit::Int8Tensor), int8_x + resid),
            "{profile}"
        );
        let (kernel, u, acts) = unit(GpuBackend::Wgpu, profile, 512);
        assert_eq!(
            (kernel.as_str(), u, acts),
            ("matmul_q4_K", Some(Unit::F16Tensor), f32_x + resid),
            "{profile}"
        );
        // One token's x in the 8-bit form, and the residual.
        let (kernel, u, acts) = unit(GpuBackend::Wgpu, profile, 1);
        let one = k + k / 8 + 4096 * 4;
        assert_eq!(
            (kernel.as_str(), u, acts),
            ("matmul_vec_q4_K", Some(Unit::Dot4), one),
            "{profile}: decode"
        );
    }
    let (_, u, _) = unit(GpuBackend::Wgpu, "m3max", 512);
    assert_eq!(u, Some(Unit::Dot4), "m3max");

    // The integer tiles' L1: 4,096 rows × 512 tokens of q4_K in 32 × 8 tiles of 128 × 64, 32
    // steps of 128, eight warps, each warp and step 182 wavefronts: weight loads 2 rows × 8
    // chunks × 2 loads (the block's first 16 bytes, 8 bytes of nibbles) = 32 and token loads
    // 2 × 2 × 4 = 16; stores 16 (quants) + 2 (two scale items a thread, an s each) + 2 × 2 (their
    // m, split in two: 64 bits) + 2 (a row's d) + 8 (token chunks) + 4 (d) + 4 (d · Σ q_x,
    // split); fragment and scale reads 4 blocks × (8 + 2 + 8) (two ldmatrix of A, a lane's two
    // rows' s as one read, two of B), the tokens' d and the rows' 4 + 2, and the offsets' 2 × 2 + 4
    // reads of 64 bits, 16.
    // wgpu's f16 tiles likewise: 64 × 64 tiles, 64 steps of 64, four subgroups, each subgroup
    // and step 240: weight loads 4 chunks × 5 loads × 4 rows = 80 and their half stores
    // 4 × 8 = 32, token loads 8 × 4 = 32 and stores 8 × 4 = 32, operands 4 × 4 × 4.
    let h200 = DeviceProfile::find("h200").unwrap();
    let counts = [
        (GpuBackend::Cuda, 32 * 8 * 32 * 8 * 182u64),
        (GpuBackend::Wgpu, 64 * 8 * 64 * 4 * 240),
    ];
    for (b, want) in counts {
        let p = plan(&path, 512, b, &h200);
        let l = p
            .launches
            .iter()
            .find(|l| l.node == "blk.0.attn_out" && l.kernel.starts_with("matmul"))
            .unwrap();
        assert_eq!(l.l1_wavefronts, Some(want), "{b:?}: {}", l.kernel);
        let l1_us = want as f64 / (h200.l1_gwavefronts.unwrap() * 1e3);
        assert!(l.est_us >= l1_us, "{b:?}: {} µs under the L1's {l1_us} µs", l.est_us);
    }
    // CUDA's tiles issue their instructions four a clock an SM: 868 a warp and step of the
    // 64-wide q4_K tile, which takes longer than its L1 traffic and is what the launch waits on.
    let p = plan(&path, 512, GpuBackend::Cuda, &h200);
    let l = p
        .launches
        .iter()
        .find(|l| l.node == "blk.0.attn_out" && l.kernel.starts_with("matmul"))
        .unwrap();
    let issue = 32 * 8 * 32 * 8 * 868u64;
    assert_eq!(l.issue, Some(issue), "{}", l.kernel);
    let issue_us = issue as f64 / (4.0 * h200.l1_gwavefronts.unwrap() * 1e3);
    let l1_us = l.l1_wavefronts.unwrap() as f64 / (h200.l1_gwavefronts.unwrap() * 1e3);
    assert!(issue_us > l1_us, "issue {issue_us} µs, L1 {l1_us} µs");
    assert!(l.est_us >= issue_us, "{} µs under the issue's {issue_us} µs", l.est_us);
    // wgpu's tiles have no such count (another compiler).
    let p = plan(&path, 512, GpuBackend::Wgpu, &h200);
    assert!(p.launches.iter().all(|l| l.issue.is_none()));
    // Stream-k: the FFN's gate is 86 × 8 tiles of 128 × 64 at 512 tokens, 688 on an H200's
    // 264 places (two blocks an SM): 528 take a block each and 264 blocks share the other 160
    // (32 steps each: 19.4 steps a block), so the launch ends without a part-empty third round
    // and takes its L1 or issue time; attn_out's 256 tiles keep a block each.
    let p = plan(&path, 512, GpuBackend::Cuda, &h200);
    let node = |name: &str| {
        p.launches
            .iter()
            .find(|l| l.node == name && l.kernel.starts_with("matmul"))
            .unwrap()
    };
    let gate = node("blk.0.ffn_gate");
    assert_eq!(gate.grid, [528 + 264, 1, 1], "{}", gate.kernel);
    let rate = h200.l1_gwavefronts.unwrap() * 1e3;
    let bound = (gate.l1_wavefronts.unwrap() as f64 / rate).max(gate.issue.unwrap() as f64 / (4.0 * rate));
    assert!(
        (gate.est_us - bound).abs() < 1e-6 * bound,
        "{} µs, L1 or issue {bound} µs",
        gate.est_us
    );
    assert_eq!(node("blk.0.attn_out").grid, [32, 8, 1]);
    // Not modelled elsewhere: the decode matvecs.
    for b in [GpuBackend::Wgpu, GpuBackend::Cuda] {
        let p = plan(&path, 1, b, &h200);
        assert!(p.launches.iter().all(|l| l.l1_wavefronts.is_none()), "{b:?}");
    }
}

/// `minfer-wgpu plan --json`: one object with exactly the documented keys (a consumer's
/// contract), each launch's keys and types, the same numbers as the library's plan; a profile
/// from a JSON file; an unknown profile, a zero token count, a bad backend or more sequences
/// than tokens refused with the value named.
fn plan_json_is_stable_and_bad_asks_are_named() {
    let path = write_sparse(&tmp(), LLAMA2_7B, true, 2);
    let run = |args: &[&str]| {
        let o = std::process::Command::new(crate::common::exe())
            .arg("plan")
            .arg(&path)
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr).to_string();
        (o.status.success(), String::from_utf8_lossy(&o.stdout).to_string(), err)
    };
    let (ok, out, err) = run(&["--tokens", "8", "--device", "h200", "--backend", "wgpu", "--json"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let keys = |v: &serde_json::Value| {
        let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
        k.sort();
        k
    };
    let sorted = |k: &[&str]| {
        let mut k: Vec<String> = k.iter().map(|s| s.to_string()).collect();
        k.sort();
        k
    };
    assert_eq!(
        keys(&v),
        sorted(&[
            "device",
            "backend",
            "tokens",
            "seqs",
            "depth",
            "launches",
            "est_us_total",
            "est_tokens_per_s",
            "roofline_tokens_per_s"
        ])
    );
    assert_eq!(
        (v["device"].as_str(), v["backend"].as_str()),
        (Some("h200"), Some("wgpu"))
    );
    assert_eq!((v["tokens"].as_u64(), v["seqs"].as_u64()), (Some(8), Some(8)));
    let launches = v["launches"].as_array().unwrap();
    let want = sorted(&[
        "kernel",
        "node",
        "op",
        "grid",
        "workgroups",
        "threads",
        "registers",
        "shared",
        "occupancy",
        "bytes_read",
        "bytes_written",
        "weight_bytes",
        "cache_bytes",
        "flops",
        "unit",
        "l1_wavefronts",
        "issue",
        "fill",
        "est_us",
    ]);
    for l in launches {
        assert_eq!(keys(l), want);
        for k in ["workgroups", "threads", "bytes_read", "bytes_written", "flops"] {
            assert!(l[k].is_u64(), "{k}: {l}");
        }
        assert!(l["est_us"].as_f64().unwrap() > 0.0);
        // wgpu: another compiler than NVRTC, so no register count and no occupancy.
        assert!(l["occupancy"].is_null() && l["registers"].is_null(), "{l}");
    }
    let lib = plan(&path, 8, GpuBackend::Wgpu, &DeviceProfile::find("h200").unwrap());
    assert_eq!(launches.len(), lib.launches.len());
    let total = v["est_us_total"].as_f64().unwrap();
    assert!((total - lib.est_us_total).abs() <= 1e-9 * total);

    // A profile of one's own: the H200's with half the bandwidth takes longer.
    let own: serde_json::Value = serde_json::from_str(include_str!("../../../src/backend/gpu/devices.json")).unwrap();
    let mut h = own
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "h200")
        .unwrap()
        .clone();
    h["name"] = "slow-h200".into();
    h["bandwidth_gbs"] = (h["bandwidth_gbs"].as_f64().unwrap() / 2.0).into();
    let file = tmp().join("slow-h200.json");
    std::fs::write(&file, h.to_string()).unwrap();
    let (ok, out, err) = run(&[
        "--tokens",
        "8",
        "--backend",
        "wgpu",
        "--json",
        "--device",
        file.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    let slow: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(slow["device"].as_str(), Some("slow-h200"));
    assert!(slow["est_us_total"].as_f64().unwrap() > total);
    assert!(slow["roofline_tokens_per_s"].as_f64().unwrap() < v["roofline_tokens_per_s"].as_f64().unwrap());

    for (args, named) in [
        (&["--device", "h900"][..], "h900"),
        (&["--tokens", "0"], "0"),
        (&["--backend", "metal"], "metal"),
        (&["--tokens", "4", "--seqs", "5"], "5"),
        (&["--tokens", "100000000"], "100000000"),
    ] {
        let (ok, _, err) = run(args);
        assert!(!ok && err.contains(named), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

/// The launches on an H200 of a Llama-2-7B and a Llama-3-8B step (Q4_0 and Q4_K_M; CUDA and
/// wgpu; (tokens, depth) as listed) that run on fewer workgroups than SMs while moving more
/// than 256 KB or taking more than twice the shortest launch.
fn starved_launches(steps: &[(usize, usize)]) -> Vec<String> {
    starved_launches_on(&[GpuBackend::Cuda, GpuBackend::Wgpu], steps, false)
}

/// The launches that leave an H200 part-empty in steps of (tokens, depth) — of as many
/// sequences as tokens where `decode`, else as `plan_at` has them — on `backends`.
fn starved_launches_on(backends: &[GpuBackend], steps: &[(usize, usize)], decode: bool) -> Vec<String> {
    let h200 = DeviceProfile::find("h200").unwrap();
    let mut findings = Vec::new();
    for shape in [LLAMA2_7B, LLAMA3_8B] {
        for q4_k_m in [false, true] {
            let path = write_sparse(&tmp(), shape, q4_k_m, 2);
            for &backend in backends {
                for &(tokens, depth) in steps {
                    let p = match decode {
                        true => plan_seqs(&path, tokens, tokens, depth, backend, &h200),
                        false => plan_at(&path, tokens, depth, backend, &h200),
                    };
                    let name = path.file_name().unwrap().to_string_lossy();
                    for s in roofline::starved(&p, &h200, 256_000) {
                        findings.push(format!("{name} {backend:?} {tokens} tokens at {depth}: {s}"));
                    }
                }
            }
        }
    }
    findings
}

fn assert_no_findings(mut findings: Vec<String>) {
    findings.sort();
    findings.dedup();
    assert!(
        findings.is_empty(),
        "{} findings:\n{}",
        findings.len(),
        findings.join("\n")
    );
}

/// The geometry check of decode: a step of one token and one of eight fill an H200, in an
/// empty cache and after 4,096 positions (rows split across workgroups, q8_K blocks in halves,
/// the matvecs a few rows a workgroup, the KV range split and its reduction in parts of heads).
fn decode_launches_fill_an_h200_at_1_and_8_tokens() {
    assert_no_findings(starved_launches(&[(1, 0), (8, 0), (1, 4096), (8, 4096)]));
}

/// Batched decode past the matvec's 8 tokens: 16, 32 and 64 sequences (and 32 after 4,096
/// positions) fill an H200 — on CUDA the tensor-core tiles 16 or 32 tokens wide, k split into
/// runs where the tiles are fewer than the SMs; on wgpu the matvec, every token in passes
/// (`VEC_WIDE_TOKENS`).
fn batched_decode_fills_an_h200() {
    assert_no_findings(starved_launches_on(
        &[GpuBackend::Cuda, GpuBackend::Wgpu],
        &[(16, 0), (32, 0), (64, 0), (32, 4096)],
        true,
    ));
}

/// The geometry check of prefill: a step of 512 tokens fills an H200 (a GQA K/V weight of 1,024
/// rows takes the tensor-core tiles 32 tokens wide: 16 × 16 workgroups); and, where NVRTC is here
/// to report registers, no kernel runs under 25 % theoretical occupancy on sm_90 without a
/// reason in the kernel table.
fn launches_fill_an_h200_at_512_tokens() {
    #[allow(unused_mut)]
    let mut findings = starved_launches(&[(512, 0)]);
    #[cfg(feature = "cuda")]
    match minfer::testing::cuda::source::resources("sm_90") {
        Ok(r) => {
            let h200 = DeviceProfile::find("h200").unwrap();
            findings.extend(roofline::low_occupancy(&h200, &r, 0.25));
        }
        Err(e) => eprintln!("occupancy not checked: {e}"),
    }
    assert_no_findings(findings);
}
