//! The GPU backends against the CPU reference, through the public `Backend` trait: every op
//! in a two- or three-node graph, every weight qtype's matmul and get_rows, attention over
//! several steps, argmax readback, the gate's refusal with its fallback to the CPU; in
//! `translate`, every shader variant through naga (no GPU); in `cuda`, every CUDA kernel
//! through NVRTC (no GPU); in `models`, whole models; in `batch`, many sequences in one step
//! (interleaved cells, grown KV storage, batch invariance).
//!
//! The backends under test: wgpu on whatever adapter there is (llvmpipe in CI), and with the
//! `cuda` feature the CUDA backend on the CPU emulation of its kernels (`cuda/emu`) and on a
//! CUDA device where one exists.
//!
//! Tolerances: NMSE ≤ 1e-6 where both sides compute in f32 and round at the same places (every
//! op but matmul). Matmul against the CPU's: ≤ 1e-12 with float weights, ≤ 1e-9 with quantized
//! ones, whose activations both round to 8 bits first (one rounding that came out differently
//! would show as ~1e-8); against an f64 reference on unrounded activations: ≤ 1e-6 and ≤ 1e-4.
//! Without an adapter these tests are ignored with "no adapter" (a failure in CI).

use std::collections::HashMap;
use std::sync::Arc;

use minfer::backend::{self, Backend, KvType, Step};
use minfer::gguf::Metadata;
use minfer::model::{Arch, AttnTemp, Graph, HParams, Node, Op, Rope, RopeMode, Yarn};
use minfer::quant::QType;
use minfer::tensor::{Bytes, Tensor};
use minfer::testing::cpu::CpuBackend;
use minfer::testing::gpu::VEC_MAX_TOKENS;
use minfer::testing::gpu::{act_qtype, WEIGHT_QTYPES};
use minfer::testing::wgpu::{WgpuBackend, WgpuOptions};
use minfer::{load, Model};

use crate::common;

pub mod batch;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod geometry;
pub mod models;
pub mod moe;
pub mod translate;

tests![
    matmul_and_get_rows_every_qtype,
    tensor_core_tiles_of_every_width_match_cpu,
    f16_cooperative_tiles_match_cpu,
    f16_cooperative_probe_passes_and_catches_a_wrong_layout,
    pack_matmuls_every_qtype_match_cpu,
    norm_rope_elementwise_ops_match_cpu,
    attention_matches_cpu_over_steps,
    encoder_attention_matches_cpu,
    split_attention_matches_cpu_at_long_contexts,
    tiled_prefill_attention_matches_cpu,
    rope_yarn_freq_factors_temperature_match_cpu,
    attention_sinks_match_a_direct_computation_and_cpu,
    long_prefill_is_bounded_submits_and_matches_cpu,
    geglu_edges_match_cpu,
    argmax_readback_matches_logits,
    gate_refusal_falls_back_to_cpu_before_upload,
    gate_names_gemma4_shapes_the_kernels_cannot_take,
    subgroup_probe_sees_a_size_in_the_reported_range,
];

// ---- fixtures -----------------------------------------------------------------------------

/// The wgpu backend on whatever adapter exists (software included), or a skip.
pub fn gpu(test: &str, subgroups: bool, max_binding: Option<u64>) -> Option<WgpuBackend> {
    let opts = WgpuOptions {
        allow_software: true,
        subgroups,
        max_binding,
        checked: false,
        int8_matmul: true,
        coop_matmul: true,
    };
    match WgpuBackend::new(opts) {
        Ok(b) => Some(b),
        Err(r) => common::skip(test, &format!("no adapter ({r})")),
    }
}

/// A GPU backend under test, with a label for messages.
pub struct Gpu {
    pub label: String,
    pub backend: Arc<dyn Backend>,
    /// A second reduction path of a backend already listed (whole-model tests skip it).
    pub alt: bool,
    /// The CPU emulation of a GPU (too slow for real models).
    pub emulated: bool,
}

/// wgpu with both reduction paths where the adapter has subgroups, else the workgroup-memory
/// one; then CUDA (emulated, and a device where there is one). A skip when there is none.
pub fn gpus(test: &str, max_binding: Option<u64>) -> Vec<Gpu> {
    gpus_at(test, max_binding, minfer::testing::gpu::SPLIT_SPAN)
}

/// `gpus`, their decode steps taking the split-KV attention from `split_span` positions on.
pub fn gpus_at(test: &str, max_binding: Option<u64>, split_span: u32) -> Vec<Gpu> {
    let mut v = Vec::new();
    let gpu = |sg| gpu(test, sg, max_binding).map(|b| b.with_split_span(split_span));
    if let Some(b) = gpu(false) {
        let sg = gpu(true).filter(|b| b.uses_subgroups());
        v.push(Gpu {
            label: format!("{} (workgroup memory)", b.describe()),
            backend: Arc::new(b),
            alt: sg.is_some(),
            emulated: false,
        });
        if let Some(sg) = sg {
            // Sized for an H200's 132 compute units, not the adapter's few: rows split across
            // workgroups, q8_K blocks in halves, as on a big device.
            let sg = sg.with_compute_units(132);
            v.push(Gpu {
                label: format!("{} (subgroups, 132 compute units)", sg.describe()),
                backend: Arc::new(sg),
                alt: false,
                emulated: false,
            });
        }
    }
    #[cfg(feature = "cuda")]
    v.extend(cuda::backends_at(test, split_span));
    let labels: Vec<&str> = v.iter().map(|g| g.label.as_str()).collect();
    eprintln!("{test}: {}", labels.join(", "));
    v
}

/// `gpus`, then wgpu once more with the f32 matmuls for quantized weights
/// (`WgpuOptions::int8_matmul` off) and the emulated CUDA with its f32 prefill tiles, so every
/// reader of the 8-bit activations is held to the CPU.
pub fn gpus_and_f32_rows(test: &str, max_binding: Option<u64>) -> Vec<Gpu> {
    let mut v = gpus(test, max_binding);
    let opts = WgpuOptions {
        allow_software: true,
        subgroups: true,
        max_binding,
        checked: false,
        int8_matmul: false,
        coop_matmul: true,
    };
    if let (false, Ok(b)) = (v.is_empty(), WgpuBackend::new(opts)) {
        v.push(Gpu {
            label: format!("{} (f32 matmuls)", b.describe()),
            backend: Arc::new(b),
            alt: true,
            emulated: false,
        });
    }
    #[cfg(feature = "cuda")]
    if !v.is_empty() {
        v.extend(cuda::f32_tiles(test));
    }
    v
}

pub fn cpu() -> CpuBackend {
    CpuBackend::new(Some(2)).unwrap()
}

pub fn nmse(ours: &[f32], reference: &[f32]) -> f64 {
    assert_eq!(ours.len(), reference.len());
    let (mut num, mut den) = (0f64, 0f64);
    for (&a, &b) in ours.iter().zip(reference) {
        num += (a as f64 - b as f64).powi(2);
        den += (b as f64).powi(2);
    }
    num / den.max(1e-30)
}

/// Deterministic values in [-scale, scale).
fn values(seed: u64, n: usize, scale: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}

pub fn tensor(name: &str, qtype: QType, cols: usize, rows: usize, seed: u64, scale: f32) -> Tensor {
    tensor_of(name, qtype, cols, rows, &values(seed, cols * rows, scale))
}

fn tensor_of(name: &str, qtype: QType, cols: usize, rows: usize, v: &[f32]) -> Tensor {
    let data = qtype.quantize_to_vec(v).unwrap();
    Tensor {
        name: name.into(),
        qtype,
        shape: if rows == 1 {
            vec![cols as u64]
        } else {
            vec![cols as u64, rows as u64]
        },
        data: Bytes::from_vec(data),
        part: 0,
        file_offset: 0,
    }
}

pub fn hparams(n_vocab: usize, n_head: usize, n_head_kv: usize, head_dim: usize) -> HParams {
    let rope = Rope::new(RopeMode::Neox, head_dim, 10000.0, 1.0);
    HParams {
        n_vocab,
        n_ctx_train: 64,
        n_embd: n_head * head_dim,
        n_layer: 1,
        n_head,
        n_head_kv,
        head_dim,
        head_dim_v: head_dim,
        n_ff: 0,
        rms_eps: 1e-6,
        rope,
        rope_swa: rope,
        sliding_window: None,
        swa_layers: vec![false],
        attn_scale: 1.0 / (head_dim as f32).sqrt(),
        attn_softcap: None,
        final_softcap: None,
        embd_scale: None,
        tied_output: false,
        n_expert: 0,
        n_expert_used: 0,
        n_ff_exp: 0,
        n_ff_shexp: 0,
        drop_ffn: false,
        residual_scale: None,
        logit_scale: None,
        nope_layers: vec![false],
        layers: Vec::new(),
        kv_from: Vec::new(),
        n_embd_per_layer: 0,
        layer_out_scale: Vec::new(),
        norm_eps: 1e-5,
        pooling: None,
        normalize: true,
    }
}

pub fn model(hp: HParams, weights: Vec<Tensor>) -> Arc<Model> {
    Arc::new(Model {
        arch: Arch::from_name("llama").unwrap(),
        hparams: hp,
        metadata: Metadata::default(),
        weights: weights
            .into_iter()
            .map(|t| (t.name.clone(), t))
            .collect::<HashMap<_, _>>(),
        source: "test".into(),
        file_bytes: 0,
    })
}

pub fn node(name: &str, op: Op, width: usize, rows: usize) -> Node {
    Node {
        name: name.into(),
        op,
        width,
        rows,
    }
}

pub fn get_rows(table: &str, width: usize, n: usize) -> Node {
    node(table, Op::GetRows { weight: table.into() }, width, n)
}

/// `n` rows of table "inp" (width `k`) times weight "w" (`m` rows).
fn matmul_graph(k: usize, m: usize, n: usize) -> Graph {
    let mm = Op::Matmul {
        x: 0,
        weight: "w".into(),
    };
    graph(vec![get_rows("inp", k, n), node("mm", mm, m, n)])
}

pub fn graph(nodes: Vec<Node>) -> Graph {
    let result = nodes.len() - 1;
    Graph {
        key: minfer::model::GraphKey::new(nodes[0].rows, nodes[result].rows),
        nodes,
        result,
    }
}

/// One attention node over `n` tokens whose Q, K and V rows are the tables `tq`, `tk`, `tv`.
fn attention_graph(n: usize, attn: minfer::model::Attn) -> Graph {
    let (q, kv) = (attn.n_head * attn.head_dim, attn.n_head_kv * attn.head_dim);
    graph(vec![
        get_rows("tq", q, n),
        get_rows("tk", kv, n),
        get_rows("tv", attn.n_head_kv * attn.head_dim_v, n),
        node(
            "attn",
            Op::Attention { q: 0, k: 1, v: 2, attn },
            attn.n_head * attn.head_dim_v,
            n,
        ),
    ])
}

/// Every cache type with both numerics (default, flash).
fn kv_numerics() -> Vec<(KvType, bool)> {
    [KvType::F32, KvType::F16, KvType::Q8_0]
        .into_iter()
        .flat_map(|kv| [(kv, false), (kv, true)])
        .collect()
}

/// An attention-only model for the long-context tests: 64-row tables `tq`, `tk`, `tv` (random,
/// seeds `seed` ..= `seed + 2`), a sliding window, soft-capping and, with `sinks`, four heads'
/// sink logits; and its graph over `n` tokens with default or flash numerics.
fn attention_model(
    n_head: usize,
    n_kv: usize,
    hd: usize,
    window: Option<usize>,
    softcap: Option<f32>,
    sinks: bool,
    seed: u64,
) -> (Arc<Model>, impl Fn(usize, bool) -> Graph) {
    let mut hp = hparams(n_head * hd, n_head, n_kv, hd);
    hp.sliding_window = window;
    let rows = 64;
    let mut weights = vec![
        tensor("tq", QType::F32, n_head * hd, rows, seed, 3.0),
        tensor("tk", QType::F32, n_kv * hd, rows, seed + 1, 3.0),
        tensor("tv", QType::F32, n_kv * hd, rows, seed + 2, 1.0),
    ];
    if sinks {
        weights.push(tensor_of(
            "blk.0.attn_sinks.weight",
            QType::F32,
            n_head,
            1,
            &[-2.0, 0.5, 3.0, 8.0],
        ));
    }
    let scale = hp.attn_scale;
    let graph = move |n, flash| {
        attention_graph(
            n,
            minfer::model::Attn {
                scale,
                window,
                softcap,
                flash,
                sinks,
                ..minfer::model::Attn::new(0, n_head, n_kv, hd)
            },
        )
    };
    (model(hp, weights), graph)
}

// ---- ops ------------------------------------------------------------------------------------

/// `g` on a fresh context of `b` (at least 128 positions): tokens `ids` at `pos0`.
pub fn run_at(b: &dyn Backend, m: &Arc<Model>, g: &Graph, ids: &[u32], pos0: usize) -> Vec<f32> {
    let mut ctx = b.new_context(m, (pos0 + ids.len()).max(128), KvType::F32).unwrap();
    let mut out = Vec::new();
    ctx.forward(g, &Step::contiguous(ids, pos0), &mut out)
        .unwrap_or_else(|e| panic!("{}: {e}", b.name()));
    out
}

/// y = x · Wᵀ in f64 on the reference dequantization of W.
fn matmul_ref(x: &[f32], w: &Tensor, n: usize) -> Vec<f32> {
    let (k, m) = (w.row_len(), w.n_rows());
    let wf = w.to_f32().unwrap();
    let mut y = vec![0f32; n * m];
    for t in 0..n {
        for r in 0..m {
            let s: f64 = (0..k).map(|j| x[t * k + j] as f64 * wf[r * k + j] as f64).sum();
            y[t * m + r] = s as f32;
        }
    }
    y
}

/// Every weight qtype: matmul_vec (n = 1, 2, 8: one token, and every token of a step from one
/// read of each row; on wgpu also 9, `VEC_WIDE_TOKENS`) and the tiled matmul (n = 9 on CUDA's
/// tensor-core tiles, 70) on 71 rows (not
/// a multiple of any tile), with 8 KiB bindings so every weight is split into parts, on random
/// activations and on ties of the 8-bit rounding; and
/// get_rows of scattered ids, which must equal the CPU's dequantization.
fn matmul_and_get_rows_every_qtype() {
    let t = "matmul_and_get_rows_every_qtype";
    let gs = gpus_and_f32_rows(t, Some(8 << 10));
    if gs.is_empty() {
        return;
    }
    let cpu = cpu();
    let m = 71; // rows, and the vocabulary the token ids 0 .. n come from
    for q in WEIGHT_QTYPES {
        let k = if q.block_elems() == 256 { 512 } else { 96 };
        let w = tensor("w", q, k, m, q as u64 + 1, 1.0);
        let (mut worst_ref, mut worst_cpu) = (0f64, 0f64);
        for n in [1usize, 2, 8, 9, 70] {
            // Odd tokens are ties: with a block maximum of 127 the 8-bit scale is 1 and every
            // x.5 rounds to even, as the CPU rounds it.
            let mut inp = tensor("inp", QType::F32, k, n, 7, 1.0);
            let mut x = inp.to_f32().unwrap();
            for (t, row) in x.chunks_exact_mut(k).enumerate().filter(|(t, _)| t % 2 == 1) {
                for (j, v) in row.iter_mut().enumerate() {
                    *v = if j % 32 == 0 {
                        127.0
                    } else {
                        ((j * 7 + t) % 40) as f32 - 19.5
                    };
                }
            }
            inp.data = Bytes::from_vec(bytemuck::cast_slice(&x).to_vec());
            let mdl = model(hparams(m, 1, 1, 64), vec![w.clone(), inp]);
            let g = matmul_graph(k, m, n);
            let ids: Vec<u32> = (0..n as u32).collect();
            let want = matmul_ref(&x, &w, n);
            let want_cpu = run_at(&cpu, &mdl, &g, &ids, 0);
            for b in &gs {
                let got = run_at(b.backend.as_ref(), &mdl, &g, &ids, 0);
                // Against f64 on the random tokens only (a tie's rounding is half a unit).
                let random = |v: &[f32]| -> Vec<f32> { v.chunks_exact(m).step_by(2).flatten().copied().collect() };
                let (e_ref, e_cpu) = (nmse(&random(&got), &random(&want)), nmse(&got, &want_cpu));
                let l = &b.label;
                // Quantized weights meet activations rounded to 8 bits as the CPU rounds them
                // (quantize_act): the CPU's numbers to f32 summation order, and the f64
                // reference (on unrounded activations) to the size of the rounding.
                let (bound_ref, bound_cpu) = if act_qtype(q).is_some() {
                    (1e-4, 1e-9)
                } else {
                    (1e-6, 1e-12)
                };
                assert!(
                    e_ref <= bound_ref,
                    "{l}: matmul/{q} n={n}: NMSE {e_ref:.2e} against the f64 reference"
                );
                assert!(
                    e_cpu <= bound_cpu,
                    "{l}: matmul/{q} n={n}: NMSE {e_cpu:.2e} against the CPU"
                );
                worst_ref = worst_ref.max(e_ref);
                worst_cpu = worst_cpu.max(e_cpu);
            }
        }
        // get_rows: rows from every part, out of order.
        let ids: Vec<u32> = (0..9).map(|i| (i * 23 + 5) % m as u32).collect();
        // The result's width is the "vocabulary": k here, and every id is below it.
        let mdl_rows = model(hparams(k, 1, 1, 64), vec![w.clone()]);
        let g = graph(vec![get_rows("w", k, ids.len())]);
        let want = run_at(&cpu, &mdl_rows, &g, &ids, 0);
        let mut worst_rows = 0f64;
        for b in &gs {
            let e = nmse(&run_at(b.backend.as_ref(), &mdl_rows, &g, &ids, 0), &want);
            assert!(e <= 1e-12, "{}: get_rows/{q}: NMSE {e:.2e}", b.label);
            worst_rows = worst_rows.max(e);
        }
        eprintln!("{q:<7} matmul NMSE {worst_ref:.1e} vs f64, {worst_cpu:.1e} vs cpu; get_rows {worst_rows:.1e}");
    }
}

/// The CUDA tensor-core tiles at each of their widths (`MMA_COLS`; `Variant::mma_cols` picks one
/// from the tokens, the rows and the SMs), a block per tile and with tiles shared out in runs of
/// steps (stream-k, `mma_stream_k`): 520 rows (four whole 128-row tiles and 8 rows of a fifth)
/// against 9, 130 and 200 tokens, which on the emulation's 16 SMs (32 places) take tiles 16, 32
/// and 64 tokens wide, fewer tiles than places, and 520 tokens, whose 45 tiles leave 13 past the
/// round; with k a partial step (96: one step, a block a tile), whole steps (256, 1024) and
/// whole steps and a block (1,056), the longer ones cut into three runs or more (each path
/// asserted, so every one stays covered); for the formats that take the tile's different
/// paths: q4_0 (one scale a block), q4_1 (offsets and the q8_1 correction), and the K-quants,
/// whose integer sub-block scales each read in its own way (i8k): q2_K (16-element scales and
/// offsets), q3_K (signed 16-element scales), q4_K and q5_K (offsets), q6_K (signed 16-element
/// scales). Every backend runs them; each must match the CPU to f32 summation order.
fn tensor_core_tiles_of_every_width_match_cpu() {
    use minfer::testing::gpu::{KernelParams, MatmulParams, Variant, MMA_COLS, MMA_ROWS};
    let t = "tensor_core_tiles_of_every_width_match_cpu";
    let gs = gpus(t, None);
    if gs.is_empty() {
        return;
    }
    let (m, tokens, sms) = (520usize, [9usize, 130, 200, 520], 16);
    assert_ne!(m % MMA_ROWS as usize, 0, "a partial row tile");
    #[cfg(feature = "cuda")]
    assert_eq!(minfer::testing::cuda::emu::EMULATED_SHAPE.sms, sms);
    let cpu = cpu();
    let mut paths = std::collections::BTreeSet::new();
    let mut stream_k = 0; // the most runs a stream-k tile was cut into
    for q in [
        QType::Q4_0,
        QType::Q4_1,
        QType::Q2K,
        QType::Q3K,
        QType::Q4K,
        QType::Q5K,
        QType::Q6K,
    ] {
        let ks = if q.block_elems() == 256 {
            [256, 1024]
        } else {
            [96, 1056]
        };
        for k in ks {
            let w = tensor("w", q, k, m, q as u64 + 11, 1.0);
            for n in tokens {
                let p = MatmulParams {
                    k: k as u32,
                    rows: m as u32,
                    n: n as u32,
                    ..Default::default()
                };
                let v = Variant::with_qtype(minfer::testing::gpu::Kernel::Matmul, q);
                let launch = v.mma_launch(&p.words(), [1, 1, 1], sms).unwrap();
                let (cols, grid) = (launch.size, launch.grid);
                let shared = MatmulParams::from_words(&launch.params).sk_workers > 0;
                paths.insert((cols, shared));
                if shared {
                    stream_k = stream_k.max(launch.runs());
                }
                let inp = tensor("inp", QType::F32, k, n, 5 + n as u64, 1.0);
                let mdl = model(hparams(m.max(n), 1, 1, 64), vec![w.clone(), inp]);
                let g = matmul_graph(k, m, n);
                let ids: Vec<u32> = (0..n as u32).collect();
                let want = run_at(&cpu, &mdl, &g, &ids, 0);
                for b in &gs {
                    let e = nmse(&run_at(b.backend.as_ref(), &mdl, &g, &ids, 0), &want);
                    assert!(
                        e <= 1e-9,
                        "{}: matmul/{q} {m} rows × {n} tokens, k {k} ({cols} wide, grid {grid:?}, at most {} runs a tile): NMSE {e:.2e} against the CPU",
                        b.label,
                        launch.runs()
                    );
                }
            }
        }
    }
    for cols in MMA_COLS {
        assert!(
            paths.contains(&(cols, false)),
            "{cols} wide, a block a tile: not covered ({paths:?})"
        );
    }
    for cols in [MMA_COLS[0], MMA_COLS[MMA_COLS.len() - 1]] {
        assert!(
            paths.contains(&(cols, true)),
            "{cols} wide, stream-k: not covered ({paths:?})"
        );
    }
    assert!(
        stream_k >= 3,
        "stream-k tiles of three runs or more: not covered (at most {stream_k})"
    );
}

/// The prefill tile on 16 × 16 f16 cooperative matrices (`matmul_coop16.wgsl`): on the device's
/// where it has them, else on their scalar emulation (the tile's own loads, conversions,
/// offsets and store), for quantized weights with and without an offset and q8_1 corrections,
/// 2- and 4-bit K-quants, q8_0 and f16, on 200 rows (a partial row tile) at 65, 130 and 200
/// tokens (partial token tiles), against the CPU within the f16 yardstick: the halves round each
/// weight and activation to 11 bits, so a product errs by up to 2 · 2⁻¹¹ and the output's
/// NMSE stays under (2 · 2⁻¹¹)² < 1e-6. f32 and bf16 weights keep the f32 tile (≤ 1e-12).
fn f16_cooperative_tiles_match_cpu() {
    use minfer::testing::gpu::{KernelParams, MatmulParams, Variant};
    let t = "f16_cooperative_tiles_match_cpu";
    let Some(b) = gpu(t, true, None) else {
        return;
    };
    let desc = b.describe();
    let coop = b.with_coop_emulation().uses_coop();
    if !coop.is_f16() {
        common::skip::<()>(t, &format!("{desc}: neither f16 cooperative matrices nor f16 shaders"));
        return;
    }
    // The adapter's own SMs, and an H200's 132, under which these small grids take the
    // 32-token tiles.
    let sms = |b: &WgpuBackend| b.shape().sms;
    let gs: Vec<WgpuBackend> = [None, Some(132)]
        .into_iter()
        .filter_map(|n| {
            let b = gpu(t, true, None)?.with_coop_emulation();
            Some(match n {
                Some(n) => b.with_compute_units(n),
                None => b,
            })
        })
        .collect();
    let cpu = cpu();
    let m = 200usize;
    let mut worst = 0.0f64;
    let mut widths = std::collections::BTreeSet::new();
    for q in [
        QType::Q4_0,
        QType::Q4_1,
        QType::Q8_0,
        QType::Q2K,
        QType::Q4K,
        QType::Q6K,
        QType::F16,
        QType::F32,
    ] {
        let k = if q.block_elems() == 256 { 512 } else { 96 };
        let w = tensor("w", q, k, m, q as u64 + 31, 1.0);
        for n in [65usize, 130, 200] {
            let inp = tensor("inp", QType::F32, k, n, 7 + n as u64, 1.0);
            let mdl = model(hparams(m.max(n), 1, 1, 64), vec![w.clone(), inp]);
            let g = matmul_graph(k, m, n);
            let ids: Vec<u32> = (0..n as u32).collect();
            let want = run_at(&cpu, &mdl, &g, &ids, 0);
            for b in &gs {
                let p = MatmulParams {
                    k: k as u32,
                    rows: m as u32,
                    n: n as u32,
                    ..Default::default()
                };
                let v = Variant::with_qtype(minfer::testing::gpu::Kernel::Matmul, q);
                let width =
                    v.coop_f16_grid(&p.words(), sms(b))
                        .map(|g| if g[1] == (n as u32).div_ceil(64) { 64 } else { 32 });
                let label = format!(
                    "{} ({coop:?}, {} SMs, tiles {width:?} tokens wide)",
                    b.describe(),
                    sms(b)
                );
                let e = nmse(&run_at(b, &mdl, &g, &ids, 0), &want);
                let bound = if width.is_some() { 1e-6 } else { 1e-12 };
                assert!(
                    e <= bound,
                    "{label}: matmul/{q} {m} rows × {n} tokens, k {k}: NMSE {e:.2e} against the CPU (bound {bound:.0e})"
                );
                if let Some(w) = width {
                    widths.insert(w);
                    worst = worst.max(e);
                }
            }
        }
    }
    assert_eq!(widths.into_iter().collect::<Vec<_>>(), [32, 64], "tile widths covered");
    eprintln!("{t}: {coop:?}: worst NMSE {worst:.2e}");
}

/// The f16 cooperative-matrix probes, which decide whether a device's tiles may run, pass on
/// the matrices the tiles take here (the device's, or their emulation), and count the outputs
/// of a probe whose check reads C in the wrong layout (row-major) as wrong, and, for the
/// attention's, of one whose check reads P · V's B column-major.
fn f16_cooperative_probe_passes_and_catches_a_wrong_layout() {
    use minfer::testing::wgpu::{attention16_probe_source, coop16_probe_source, Coop};
    let t = "f16_cooperative_probe_passes_and_catches_a_wrong_layout";
    let Some(b) = gpu(t, true, None) else {
        return;
    };
    let b = b.with_coop_emulation();
    let emulated = match b.uses_coop() {
        Coop::F16x16 => false,
        Coop::F16x16Emulated => true,
        c => {
            common::skip::<()>(t, &format!("{}: {c:?}", b.describe()));
            return;
        }
    };
    let src = coop16_probe_source(emulated);
    assert_eq!(
        b.run_probe("f16 cooperative matrix probe", &src),
        Ok(0),
        "{}",
        b.describe()
    );
    let transposed = src.replace("av(e % TM, k) * bv(e / TM, k)", "av(e / TM, k) * bv(e % TM, k)");
    assert_ne!(transposed, src);
    let bad = b.run_probe("transposed probe", &transposed);
    assert!(
        matches!(bad, Ok(n) if n >= 512),
        "{}: the transposed check counted {bad:?}",
        b.describe()
    );
    let src = attention16_probe_source(emulated);
    assert_eq!(
        b.run_probe("f16 cooperative matrix attention probe", &src),
        Ok(0),
        "{}",
        b.describe()
    );
    let transposed = src.replace("hv(vb + k * st + e / 16u)", "hv(vb + e / 16u * st + k)");
    assert_ne!(transposed, src);
    let bad = b.run_probe("transposed attention probe", &transposed);
    assert!(
        matches!(bad, Ok(n) if n >= 512),
        "{}: the transposed attention check counted {bad:?}",
        b.describe()
    );
}

/// A layer's Q/K/V (with f32 biases) and gate/up are uploaded as packs and, in decode, run as
/// one `matmul_vec_pack` launch each, with the RMS norm before them folded in where they are its
/// only readers (one token's): for every weight qtype, 67 rows per member (workgroups straddle
/// members), at 1, 2 and 7 tokens (one launch reading each row once for every token) and 9 (the
/// tiled matmul reading each member as a view of the pack),
/// `swiglu(q + bq, k + bk) + v + bv` and `swiglu(gate, up)`, on x and on norm(x), match the CPU,
/// and the decode steps launch what the fusions leave.
fn pack_matmuls_every_qtype_match_cpu() {
    let t = "pack_matmuls_every_qtype_match_cpu";
    let gs = gpus_and_f32_rows(t, None);
    if gs.is_empty() {
        return;
    }
    let cpu = cpu();
    let m = 67;
    let mm = |name: &str, x: usize, n: usize| {
        let op = Op::Matmul {
            x,
            weight: format!("blk.0.{name}.weight"),
        };
        node(name, op, m, n)
    };
    let biased = |name: &str, x: usize, n: usize| {
        let op = Op::AddBias {
            x,
            bias: format!("blk.0.{name}.bias"),
        };
        node(name, op, m, n)
    };
    for q in WEIGHT_QTYPES {
        let k = if q.block_elems() == 256 { 512 } else { 96 };
        let mut weights = vec![
            tensor("inp", QType::F32, k, 9, 7, 1.0),
            tensor("norm", QType::F32, k, 1, 8, 1.0),
        ];
        for (i, name) in ["attn_q", "attn_k", "attn_v", "ffn_gate", "ffn_up"]
            .into_iter()
            .enumerate()
        {
            weights.push(tensor(
                &format!("blk.0.{name}.weight"),
                q,
                k,
                m,
                10 * q as u64 + i as u64,
                1.0,
            ));
            if i < 3 {
                weights.push(tensor(
                    &format!("blk.0.{name}.bias"),
                    QType::F32,
                    m,
                    1,
                    50 + i as u64,
                    0.5,
                ));
            }
        }
        let mdl = model(hparams(m, 1, 1, 64), weights);
        let quantized = act_qtype(q).is_some();
        let mut worst = 0f64;
        for (n, norm) in [1usize, 2, 7, 9].into_iter().flat_map(|n| [(n, false), (n, true)]) {
            // The matmuls' input: the rows as they are, or their RMS norm (node 1).
            let mut head = vec![get_rows("inp", k, n)];
            if norm {
                let op = Op::RmsNorm {
                    x: 0,
                    weight: "norm".into(),
                    eps: 1e-6,
                };
                head.push(node("norm", op, k, n));
            }
            let (x, o) = (head.len() - 1, head.len());
            let qkv = graph(
                head.iter()
                    .cloned()
                    .chain([
                        mm("attn_q", x, n),
                        mm("attn_k", x, n),
                        mm("attn_v", x, n),
                        biased("attn_q", o, n),
                        biased("attn_k", o + 1, n),
                        biased("attn_v", o + 2, n),
                        node("sw", Op::Swiglu { gate: o + 3, up: o + 4 }, m, n),
                        node("out", Op::Add { a: o + 6, b: o + 5 }, m, n),
                    ])
                    .collect(),
            );
            let ffn = graph(
                head.iter()
                    .cloned()
                    .chain([
                        mm("ffn_gate", x, n),
                        mm("ffn_up", x, n),
                        node("sw", Op::Swiglu { gate: o, up: o + 1 }, m, n),
                    ])
                    .collect(),
            );
            // Launches in decode: get_rows, quantize_act (quantized weights, no norm) or the
            // norm (folded into the pack at one token only), the pack (biases in its store),
            // then swiglu and add.
            let fused = |ops: u64| 1 + u64::from((quantized && !norm) || (norm && n > 1)) + 1 + ops;
            let ids: Vec<u32> = (0..n as u32).collect();
            for (g, what, launches) in [(&qkv, "q/k/v", fused(2)), (&ffn, "gate/up", fused(1))] {
                let want = run_at(&cpu, &mdl, g, &ids, 0);
                for b in &gs {
                    let mut ctx = b.backend.new_context(&mdl, 64, KvType::F32).unwrap();
                    let mut got = Vec::new();
                    ctx.forward(g, &Step::contiguous(&ids, 0), &mut got)
                        .unwrap_or_else(|e| panic!("{}: {e}", b.label));
                    let e = nmse(&got, &want);
                    let l = &b.label;
                    assert!(
                        e <= 1e-9,
                        "{l}: {what}/{q} n={n} norm={norm}: NMSE {e:.2e} against the CPU"
                    );
                    worst = worst.max(e);
                    if n <= VEC_MAX_TOKENS {
                        let d = ctx.submitted().map(|s| s.dispatches);
                        assert_eq!(d, Some(launches), "{l}: {what}/{q} n={n} norm={norm}: launches");
                    }
                }
            }
        }
        eprintln!("{q:<7} pack NMSE {worst:.1e} vs cpu");
    }
}

/// The subgroup probe (what decides the subgroup path on Metal) ran a kernel and saw a size
/// the adapter reports as possible; the subgroup path is taken only with 8 lanes or more.
fn subgroup_probe_sees_a_size_in_the_reported_range() {
    let t = "subgroup_probe_sees_a_size_in_the_reported_range";
    let Some(b) = gpu(t, true, None) else {
        return;
    };
    let d = b.describe();
    let Some(seen) = b.subgroup_seen() else {
        common::skip::<()>(t, &format!("{d}: no subgroups"));
        return;
    };
    // `... subgroups MIN–MAX`
    let tail = d.rsplit("subgroups ").next().unwrap();
    let range: String = tail.chars().take_while(|c| c.is_ascii_digit() || *c == '–').collect();
    let (lo, hi) = range.split_once('–').unwrap();
    let (lo, hi): (u32, u32) = (lo.parse().unwrap(), hi.parse().unwrap());
    assert!((lo..=hi).contains(&seen), "{d}: saw {seen}");
    assert!(seen.is_power_of_two(), "{d}: saw {seen}");
    if b.uses_subgroups() {
        assert!(seen >= 8, "{d}: the subgroup path with {seen}-lane subgroups");
    }
    eprintln!("{d}: subgroups of {seen} lanes seen");
}

/// Norms, RoPE and the element-wise ops on 5 tokens (f32 in, f32 out, same rounding):
/// NMSE ≤ 1e-6 against the CPU.
fn norm_rope_elementwise_ops_match_cpu() {
    let t = "norm_rope_elementwise_ops_match_cpu";
    let gs = gpus(t, None);
    if gs.is_empty() {
        return;
    }
    let cpu = cpu();
    let n = 5;
    let w = 192;
    let ids: Vec<u32> = (0..n as u32).map(|i| (i * 3 + 1) % 8).collect();
    let rope = |mode, n_rot| Rope::new(mode, n_rot, 10000.0, 0.5);
    let mut cases: Vec<(String, Vec<Tensor>, Op, usize)> = Vec::new();
    for q in [QType::F32, QType::F16, QType::BF16] {
        let v = tensor("v", q, w, 1, 3, 1.0);
        cases.push((
            format!("rms_norm/{q}"),
            vec![v.clone()],
            Op::RmsNorm {
                x: 0,
                weight: "v".into(),
                eps: 1e-5,
            },
            w,
        ));
        let hv = tensor("v", q, 64, 1, 4, 1.0);
        let op = Op::HeadNorm {
            x: 0,
            weight: "v".into(),
            eps: 1e-6,
            head_dim: 64,
        };
        cases.push((format!("head_norm/{q}"), vec![hv], op, w));
        cases.push((
            format!("add_bias/{q}"),
            vec![v],
            Op::AddBias { x: 0, bias: "v".into() },
            w,
        ));
        // One value for every element (Gemma 4's layer output scale).
        cases.push((
            format!("scale_by/{q}"),
            vec![tensor("v", q, 1, 1, 5, 1.0)],
            Op::ScaleBy {
                x: 0,
                weight: "v".into(),
            },
            w,
        ));
    }
    let op = Op::HeadNormPlain {
        x: 0,
        eps: 1e-6,
        head_dim: 64,
    };
    cases.push(("head_norm_plain".into(), vec![], op, w));
    // Columns 96..160 of each 192-wide row (one layer's slice of the per-layer inputs).
    cases.push(("slice".into(), vec![], Op::Slice { x: 0, col0: 96 }, 64));
    cases.push(("add".into(), vec![], Op::Add { a: 0, b: 1 }, w));
    cases.push(("mul".into(), vec![], Op::Mul { a: 0, b: 1 }, w));
    cases.push(("swiglu".into(), vec![], Op::Swiglu { gate: 0, up: 1 }, w));
    cases.push(("geglu".into(), vec![], Op::Geglu { gate: 0, up: 1 }, w));
    cases.push(("scale".into(), vec![], Op::Scale { x: 0, s: 0.7 }, w));
    cases.push(("softcap".into(), vec![], Op::Softcap { x: 0, cap: 2.0 }, w));
    // BERT's: LayerNorm with a bias, the exact GELU, learned positions (rows 0..64, at the
    // step's positions), a token-type table whose first row is the bias.
    cases.push((
        "layer_norm".into(),
        vec![
            tensor("v", QType::F32, w, 1, 3, 1.0),
            tensor("vb", QType::F32, w, 1, 6, 1.0),
        ],
        Op::LayerNorm {
            x: 0,
            weight: "v".into(),
            bias: "vb".into(),
            eps: 1e-12,
        },
        w,
    ));
    cases.push(("gelu".into(), vec![], Op::Gelu { x: 0 }, w));
    cases.push((
        "add_pos_rows".into(),
        vec![tensor("pos", QType::F32, w, 64, 7, 1.0)],
        Op::AddPosRows {
            x: 0,
            weight: "pos".into(),
        },
        w,
    ));
    cases.push((
        "add_bias/types".into(),
        vec![tensor("v", QType::F32, w, 2, 8, 1.0)],
        Op::AddBias { x: 0, bias: "v".into() },
        w,
    ));
    for (mode, n_rot) in [
        (RopeMode::Norm, 64),
        (RopeMode::Neox, 64),
        (RopeMode::Neox, 32),
        (RopeMode::Norm, 16),
    ] {
        let op = Op::Rope {
            x: 0,
            n_heads: 3,
            head_dim: 64,
            rope: rope(mode, n_rot),
        };
        cases.push((format!("rope/{mode:?}/{n_rot}"), vec![], op, w));
    }
    for (name, mut weights, op, width) in cases {
        weights.push(tensor("inp", QType::F32, w, 8, 11, 4.0));
        weights.push(tensor("inp2", QType::F32, w, 8, 12, 2.0));
        let two = op.inputs().len() == 2;
        let mut nodes = vec![get_rows("inp", w, n)];
        if two {
            nodes.push(get_rows("inp2", w, n));
        }
        nodes.push(node(&name, op, width, n));
        let g = graph(nodes);
        let mdl = model(hparams(width, 3, 3, 64), weights);
        // RoPE at a later position too: the angles come from the step's positions.
        for pos0 in [0, 37] {
            let want = run_at(&cpu, &mdl, &g, &ids, pos0);
            for b in &gs {
                let e = nmse(&run_at(b.backend.as_ref(), &mdl, &g, &ids, pos0), &want);
                assert!(e <= 1e-6, "{}: {name} at {pos0}: NMSE {e:.2e}", b.label);
            }
        }
    }
    // output: the last 2 of 5 rows.
    let mdl = model(hparams(w, 3, 3, 64), vec![tensor("inp", QType::F32, w, 8, 11, 1.0)]);
    let g = graph(vec![get_rows("inp", w, n), node("out", Op::Output { x: 0 }, w, 2)]);
    let want = run_at(&cpu, &mdl, &g, &ids, 0);
    for b in &gs {
        assert_eq!(
            run_at(b.backend.as_ref(), &mdl, &g, &ids, 0),
            want,
            "{}: output",
            b.label
        );
    }
}

/// Attention with its KV cache over a 7-token prefill and 3 decode steps: GQA, sliding window,
/// soft-capping, head_dim 64 and 128, f32 and f16 caches (the CPU rounds q and the
/// probabilities to f16 with an f16 cache, and q to q8_0 with a q8_0 cache; the shaders do the
/// same), default and flash numerics.
fn attention_matches_cpu_over_steps() {
    let t = "attention_matches_cpu_over_steps";
    let gs = gpus(t, None);
    if gs.is_empty() {
        return;
    }
    let cpu = cpu();
    for (n_head, n_kv, hd, window, softcap) in [
        (4, 2, 64, None, None),
        (4, 1, 128, Some(4), Some(20.0)),
        (2, 2, 64, Some(1), None),
    ] {
        let mut hp = hparams(n_head * hd, n_head, n_kv, hd);
        hp.sliding_window = window;
        let weights = vec![
            tensor("tq", QType::F32, n_head * hd, 16, 21, 3.0),
            tensor("tk", QType::F32, n_kv * hd, 16, 22, 3.0),
            tensor("tv", QType::F32, n_kv * hd, 16, 23, 1.0),
        ];
        let mdl = model(hp.clone(), weights);
        let attn = |n, flash| {
            attention_graph(
                n,
                minfer::model::Attn {
                    scale: hp.attn_scale,
                    window,
                    softcap,
                    flash,
                    ..minfer::model::Attn::new(0, n_head, n_kv, hd)
                },
            )
        };
        let steps: Vec<(usize, Vec<u32>)> = vec![(0, (0..7).collect()), (7, vec![9]), (8, vec![3]), (9, vec![15])];
        for (kv, flash) in [KvType::F32, KvType::F16, KvType::Q8_0]
            .into_iter()
            .flat_map(|kv| [(kv, false), (kv, true)])
        {
            let mut c = cpu.new_context(&mdl, 16, kv).unwrap();
            let mut gctx: Vec<_> = gs
                .iter()
                .map(|b| b.backend.new_context(&mdl, 16, kv).unwrap())
                .collect();
            let mut worst = 0f64;
            for (pos0, ids) in &steps {
                let g = attn(ids.len(), flash);
                let mut want = Vec::new();
                c.forward(&g, &Step::contiguous(ids, *pos0), &mut want).unwrap();
                for (b, ctx) in gs.iter().zip(&mut gctx) {
                    let mut got = Vec::new();
                    ctx.forward(&g, &Step::contiguous(ids, *pos0), &mut got).unwrap();
                    let e = nmse(&got, &want);
                    let what =
                        format!("{n_head}/{n_kv}×{hd} window {window:?} softcap {softcap:?} kv {kv:?} flash {flash}");
                    assert!(e <= 1e-6, "{}: attention {what} at {pos0}: NMSE {e:.2e}", b.label);
                    worst = worst.max(e);
                }
            }
            eprintln!("attention {n_head}/{n_kv}×{hd} window {window:?} softcap {softcap:?} kv {kv:?} flash {flash}: NMSE ≤ {worst:.1e}");
        }
    }
}

/// An encoder's attention (not causal): three sequences of 5, 1 and 70 tokens in one step, each
/// token over its whole sequence and nothing else, f32 and f16 caches, both numerics; and each
/// sequence alone gives its rows of the batch.
fn encoder_attention_matches_cpu() {
    let t = "encoder_attention_matches_cpu";
    let gs = gpus(t, None);
    if gs.is_empty() {
        return;
    }
    let cpu = cpu();
    let (n_head, n_kv, hd) = (4, 4, 32);
    let hp = hparams(n_head * hd, n_head, n_kv, hd);
    let weights = vec![
        tensor("tq", QType::F32, n_head * hd, 128, 31, 3.0),
        tensor("tk", QType::F32, n_kv * hd, 128, 32, 3.0),
        tensor("tv", QType::F32, n_kv * hd, 128, 33, 1.0),
    ];
    let mdl = model(hp.clone(), weights);
    let attn = |flash| minfer::model::Attn {
        scale: hp.attn_scale,
        causal: false,
        flash,
        ..minfer::model::Attn::new(0, n_head, n_kv, hd)
    };
    // 70 tokens: the CPU's tiled flash kernel (64 or more) as well as its one-chunk one.
    let lens = [5usize, 1, 70];
    // Sequence s's positions 0.. in cells from its offset on.
    let step_of = |which: &[usize]| {
        let mut st = Step::default();
        for &s in which {
            let off = st.cells.len() as u32;
            for p in 0..lens[s] {
                st.tokens.push(((s * 7 + p * 3) % 128) as u32);
                st.pos.push(p as u32);
                st.off.push(off);
                st.run.push(lens[s] as u32);
            }
            st.cells.extend((0..lens[s] as u32).map(|c| c + off));
        }
        st
    };
    let width = n_head * hd;
    for (kv, flash) in [KvType::F32, KvType::F16]
        .into_iter()
        .flat_map(|kv| [(kv, false), (kv, true)])
    {
        let attn = attn(flash);
        let all = step_of(&[0, 1, 2]);
        let g = attention_graph(all.len(), attn);
        let mut c = cpu.new_context(&mdl, 128, kv).unwrap();
        let mut want = Vec::new();
        c.forward(&g, &all, &mut want).unwrap();
        for b in &gs {
            let mut ctx = b.backend.new_context(&mdl, 128, kv).unwrap();
            let mut got = Vec::new();
            ctx.forward(&g, &all, &mut got).unwrap();
            let e = nmse(&got, &want);
            assert!(
                e <= 1e-6,
                "{}: encoder attention kv {kv:?} flash {flash}: NMSE {e:.2e}",
                b.label
            );
            // Sequence 2 alone: its rows of the batch.
            let alone = step_of(&[2]);
            let g2 = attention_graph(alone.len(), attn);
            let mut one = Vec::new();
            ctx.forward(&g2, &alone, &mut one).unwrap();
            let rows = &got[6 * width..];
            let e = nmse(&one, rows);
            assert!(
                e <= 1e-9,
                "{}: sequence 2 alone vs batched, kv {kv:?} flash {flash}: NMSE {e:.2e}",
                b.label
            );
        }
    }
}

/// The split-KV decode attention (`attention_split` + `attention_reduce`) against the CPU at
/// contexts of 1, 31, 1,000 and 5,000 positions: query heads packed per KV head (4 over 2 or 1;
/// 2 over 1), a sliding window shorter than the context, soft-capping, sinks, f32 / f16 / q8_0
/// caches and both numerics. The backends split from the first position, so every context takes it
/// (the store, the split and the reduce: three launches), each prefill before it runs the
/// one-kernel attention. The longest contexts run fewer cache types, and 5,000 runs on wgpu
/// only (the CUDA emulation would take minutes over its prefill).
fn split_attention_matches_cpu_at_long_contexts() {
    let t = "split_attention_matches_cpu_at_long_contexts";
    let gs = gpus_at(t, None, 1);
    if gs.is_empty() {
        return;
    }
    let cpu = cpu();
    let every = kv_numerics();
    for (ctx, n_head, n_kv, hd, window, softcap, sinks) in [
        (1, 4, 2, 64, None, None, false),
        (31, 4, 1, 128, Some(20), Some(20.0), true),
        (1000, 4, 2, 64, Some(700), None, false),
        (5000, 2, 1, 32, None, Some(30.0), false),
    ] {
        let rows = 64;
        let (mdl, attn) = attention_model(n_head, n_kv, hd, window, softcap, sinks, 41);
        let ids: Vec<u32> = (0..ctx as u32).map(|i| (i * 37 + 5) % rows as u32).collect();
        let cases = match ctx {
            1000 => &every[2..5],
            5000 => &every[2..3],
            _ => &every[..],
        };
        for &(kv, flash) in cases {
            let what = format!(
                "context {ctx}, {n_head}/{n_kv}×{hd}, window {window:?}, sinks {sinks}, kv {kv:?}, flash {flash}"
            );
            let run = |b: &dyn Backend, flash: bool| -> (Vec<f32>, Option<backend::Submitted>) {
                let mut c = b.new_context(&mdl, ctx, kv).unwrap();
                let mut out = Vec::new();
                if ctx > 1 {
                    c.forward(&attn(ctx - 1, flash), &Step::contiguous(&ids[..ctx - 1], 0), &mut out)
                        .unwrap_or_else(|e| panic!("{}: {what}: {e}", b.name()));
                }
                c.forward(&attn(1, flash), &Step::contiguous(&ids[ctx - 1..], ctx - 1), &mut out)
                    .unwrap_or_else(|e| panic!("{}: {what}: {e}", b.name()));
                (out, c.submitted())
            };
            let (want, _) = run(&cpu, flash);
            // The CPU's flash path rounds its accumulator to the cache type after every
            // position; the split kernel keeps f32. Its yardstick there is how far the CPU's
            // two paths lie apart (twice that), and 1e-6 where they agree closer.
            let tol = match flash {
                true => (2.0 * nmse(&run(&cpu, false).0, &want)).max(1e-6),
                false => 1e-6,
            };
            for g in gs.iter().filter(|g| ctx < 5000 || !g.emulated) {
                let (got, w) = run(g.backend.as_ref(), flash);
                let e = nmse(&got, &want);
                eprintln!("{t}: {}: {what}: NMSE {e:.1e} (at most {tol:.1e})", g.label);
                assert!(
                    e <= tol,
                    "{}: {what}: NMSE {e:.2e} against the CPU (at most {tol:.1e})",
                    g.label
                );
                // Three get_rows, then the store, the split and the reduce.
                let w = w.expect("a GPU backend says what it submitted");
                assert_eq!(w.dispatches, 6, "{}: {what}: {w:?}", g.label);
            }
        }
    }
}

/// The tiled prefill attention (`attention_tile` + `attention_reduce`) against the CPU on every
/// row of every step: a 31-token prefill (contexts 1 to 31), 1,000 positions reached by prefills
/// of 969 and 31 tokens, 5,000 by 4,900 and 100 (wgpu only: the CUDA emulation would take
/// minutes), and a step of three sequences of one pool whose runs cut across the query tiles
/// (A's next 5 tokens, B's one, C's first 20, A's 3 more). Query heads packed per KV head (4 over
/// 2 or 1; 2 over 1; 8 over 2 at 256 wide, two tokens a tile), sliding windows shorter than the
/// context, soft-capping, sinks, f32 / f16 / q8_0 caches and both numerics; the f16 and q8_0
/// caches also on wgpu's f16 cooperative-matrix tiles (or their emulation; 32 rows of 1 to 4
/// heads, 16 at 256 wide), whose probabilities (and q8_0's V) round to f16. The backends split
/// from the first position, so every step of three or more tokens takes the tiled pair: the
/// store, then a tile launch and a reduce per 256 tokens after the three get_rows.
fn tiled_prefill_attention_matches_cpu() {
    let t = "tiled_prefill_attention_matches_cpu";
    let mut gs = gpus_at(t, None, 1);
    if gs.is_empty() {
        return;
    }
    // wgpu once more on 16 × 16 f16 cooperative matrices (the device's, or their scalar
    // emulation), over the f16 and q8_0 caches, whose head sizes here it takes
    // (attention_tile_coop16.wgsl).
    let coop_at = gs.len();
    if let Some(b) = gpu(t, true, None).map(|b| b.with_split_span(1).with_coop_emulation()) {
        use minfer::testing::wgpu::Coop;
        let coop = b.uses_coop();
        if !coop.is_f16() {
            common::skip::<()>(
                t,
                &format!("{}: no f16 cooperative matrices nor f16 shaders", b.describe()),
            );
            return;
        }
        gs.push(Gpu {
            label: format!("{} ({coop:?})", b.describe()),
            backend: Arc::new(b),
            alt: true,
            emulated: coop == Coop::F16x16Emulated,
        });
    }
    let cpu = cpu();
    let every = kv_numerics();
    // (steps as (sequence, tokens) parts, heads, KV heads, head width, window, softcap, sinks,
    // cache types and numerics)
    type Case<'a> = (
        Vec<Vec<(usize, usize)>>,
        usize,
        usize,
        usize,
        Option<usize>,
        Option<f32>,
        bool,
        &'a [(KvType, bool)],
    );
    let cases: Vec<Case> = vec![
        (vec![vec![(0, 31)]], 4, 2, 64, None, None, false, &every[..]),
        (vec![vec![(0, 31)]], 4, 1, 128, Some(20), Some(20.0), true, &every[..]),
        (vec![vec![(0, 31)]], 8, 2, 256, Some(9), None, false, &every[..]),
        // The other head sizes with tensor-core entries: 80, 96 (f16 and q8_0 caches), 112.
        (vec![vec![(0, 50)]], 6, 2, 80, None, None, false, &every[2..4]),
        (
            vec![vec![(0, 3)], vec![(0, 40)]],
            4,
            4,
            96,
            Some(30),
            Some(25.0),
            false,
            &every[2..5],
        ),
        (vec![vec![(0, 70)]], 4, 1, 112, None, None, true, &every[3..4]),
        (
            vec![vec![(0, 969)], vec![(0, 31)]],
            4,
            2,
            64,
            Some(700),
            None,
            false,
            &every[2..5],
        ),
        (
            vec![vec![(0, 4900)], vec![(0, 100)]],
            2,
            1,
            32,
            None,
            Some(30.0),
            false,
            &every[2..3],
        ),
        (
            vec![vec![(0, 40)], vec![(1, 100)], vec![(0, 5), (1, 1), (2, 20), (0, 3)]],
            4,
            2,
            64,
            Some(24),
            None,
            true,
            &every[..],
        ),
    ];
    for (steps, n_head, n_kv, hd, window, softcap, sinks, kinds) in cases {
        let rows = 64;
        let (mdl, attn) = attention_model(n_head, n_kv, hd, window, softcap, sinks, 51);
        // Three sequences of one pool: A on the cells ≡ 0 mod 3, B ≡ 1, C ≡ 2 from the top down.
        let total: usize = steps.iter().flatten().map(|p| p.1).sum();
        let cells = 3 * total;
        let mut seqs = vec![
            batch::Seq::new((0..cells as u32).step_by(3)),
            batch::Seq::new((1..cells as u32).step_by(3)),
            batch::Seq::new((2..cells as u32).step_by(3).rev()),
        ];
        let built: Vec<Step> = steps
            .iter()
            .map(|parts| {
                let toks: Vec<(usize, u32)> = parts
                    .iter()
                    .flat_map(|&(q, c)| std::iter::repeat_n(q, c))
                    .enumerate()
                    .map(|(i, q)| (q, ((i * 37 + 11 * q + 5) % rows) as u32))
                    .collect();
                batch::step_of(&mut seqs, &toks)
            })
            .collect();
        let longest = total.min(5000);
        for &(kv, flash) in kinds {
            let what = format!(
                "steps {steps:?}, {n_head}/{n_kv}×{hd}, window {window:?}, sinks {sinks}, kv {kv:?}, flash {flash}"
            );
            let run = |b: &dyn Backend, flash: bool| -> Vec<(Vec<f32>, Option<backend::Submitted>)> {
                let mut c = b.new_context(&mdl, cells, kv).unwrap();
                built
                    .iter()
                    .map(|step| {
                        let mut out = Vec::new();
                        c.forward(&attn(step.len(), flash), step, &mut out)
                            .unwrap_or_else(|e| panic!("{}: {what}: {e}", b.name()));
                        (out, c.submitted())
                    })
                    .collect()
            };
            let want = run(&cpu, flash);
            // As in the split attention's test: the CPU's flash path rounds its accumulator to
            // the cache type after every position, the tiled kernel keeps f32.
            let tol = match flash {
                true => {
                    let other = run(&cpu, false);
                    let gap = want
                        .iter()
                        .zip(&other)
                        .map(|(a, b)| nmse(&b.0, &a.0))
                        .fold(0.0, f64::max);
                    (2.0 * gap).max(1e-6)
                }
                false => 1e-6,
            };
            let its_cache = |(i, _): &(usize, &Gpu)| *i < coop_at || kv != KvType::F32;
            for (_, g) in gs
                .iter()
                .enumerate()
                .filter(its_cache)
                .filter(|(_, g)| longest < 5000 || !g.emulated)
            {
                let got = run(g.backend.as_ref(), flash);
                for (i, ((got, w), (want, _))) in got.iter().zip(&want).enumerate() {
                    let e = nmse(got, want);
                    eprintln!("{t}: {}: {what}: step {i}: NMSE {e:.1e} (at most {tol:.1e})", g.label);
                    assert!(
                        e <= tol,
                        "{}: {what}: step {i}: NMSE {e:.2e} against the CPU (at most {tol:.1e})",
                        g.label
                    );
                    let n = built[i].len() as u64;
                    let w = w.as_ref().expect("a GPU backend says what it submitted");
                    let launches = n.div_ceil(minfer::testing::gpu::ATTN_TOKENS as u64);
                    assert_eq!(w.dispatches, 4 + 2 * launches, "{}: {what}: step {i}: {w:?}", g.label);
                }
            }
        }
    }
}

/// A 4,096-token prefill of one attention head (32 wide, an f32 cache): its queries run in
/// launches of `ATTN_TOKENS`, submitted in several bounded parts (the first forward of a
/// context is sized before any rate was seen), and match the CPU (NMSE ≤ 1e-6). wgpu only:
/// the CUDA emulation would take minutes.
fn long_prefill_is_bounded_submits_and_matches_cpu() {
    let t = "long_prefill_is_bounded_submits_and_matches_cpu";
    let gs: Vec<Gpu> = gpus(t, None)
        .into_iter()
        .filter(|g| g.backend.name() == "wgpu" && !g.alt)
        .collect();
    if gs.is_empty() {
        return;
    }
    let (n, hd) = (4096, 32);
    let hp = hparams(hd, 1, 1, hd);
    let weights = vec![
        tensor("tq", QType::F32, hd, 16, 31, 3.0),
        tensor("tk", QType::F32, hd, 16, 32, 3.0),
        tensor("tv", QType::F32, hd, 16, 33, 1.0),
    ];
    let mdl = model(hp.clone(), weights);
    let g = attention_graph(
        n,
        minfer::model::Attn {
            scale: hp.attn_scale,
            ..minfer::model::Attn::new(0, 1, 1, hd)
        },
    );
    let ids: Vec<u32> = (0..n as u32).map(|i| i * 7 % 16).collect();
    let step = Step::contiguous(&ids, 0);
    let mut want = Vec::new();
    cpu()
        .new_context(&mdl, n, KvType::F32)
        .unwrap()
        .forward(&g, &step, &mut want)
        .unwrap();
    for b in &gs {
        let mut ctx = b.backend.new_context(&mdl, n, KvType::F32).unwrap();
        let mut got = Vec::new();
        ctx.forward(&g, &step, &mut got).unwrap();
        let w = ctx.submitted().expect("a GPU backend says what it submitted");
        let launches = n.div_ceil(minfer::testing::gpu::ATTN_TOKENS as usize) as u64;
        assert!(w.dispatches > launches, "{}: {w:?}", b.label);
        assert!(w.submits >= 2, "{}: a {n}-token prefill in {w:?}", b.label);
        let e = nmse(&got, &want);
        assert!(e <= 1e-6, "{}: NMSE {e:.2e} against the CPU", b.label);
        eprintln!("{t}: {}: {w:?}, NMSE {e:.1e}", b.label);
    }
}

/// GEGLU at the edges of its table: NaN gates give NaN (as the CPU's f16 table does), ±inf and
/// ±10 take the limits, and values just inside them the table's f16-rounded GELU.
fn geglu_edges_match_cpu() {
    let t = "geglu_edges_match_cpu";
    let gs = gpus(t, None);
    if gs.is_empty() {
        return;
    }
    let w = 16;
    let gate = [
        f32::NAN,
        -f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        10.0,
        -10.0,
        9.99,
        -9.99,
        0.0,
        -0.0,
        1e-30,
        -3.0,
        0.5,
        65520.0,
        -7.25,
        2.0,
    ];
    let up: Vec<f32> = (0..w).map(|i| 1.5 - 0.25 * i as f32).collect();
    let mdl = model(
        hparams(w, 1, 1, 64),
        vec![
            tensor_of("inp", QType::F32, w, 1, &gate),
            tensor_of("inp2", QType::F32, w, 1, &up),
        ],
    );
    let g = graph(vec![
        get_rows("inp", w, 1),
        get_rows("inp2", w, 1),
        node("geglu", Op::Geglu { gate: 0, up: 1 }, w, 1),
    ]);
    let want = run_at(&cpu(), &mdl, &g, &[0], 0);
    for b in &gs {
        let got = run_at(b.backend.as_ref(), &mdl, &g, &[0], 0);
        for ((&x, &y), &g) in got.iter().zip(&want).zip(&gate) {
            let same = if y.is_nan() {
                x.is_nan()
            } else {
                x == y || (x - y).abs() <= 1e-3 * y.abs()
            };
            assert!(same, "{}: geglu({g}) = {x}, the CPU's {y}", b.label);
        }
    }
}

/// Greedy steps read back only the argmax id; it equals `logits::argmax` of the logits.
fn argmax_readback_matches_logits() {
    let t = "argmax_readback_matches_logits";
    let gs = gpus(t, None);
    let (k, m) = (64, 3000);
    let mdl = model(
        hparams(m, 1, 1, 64),
        vec![
            tensor("w", QType::Q8_0, k, m, 5, 1.0),
            tensor("inp", QType::F32, k, 3, 6, 1.0),
        ],
    );
    let g = graph(vec![
        get_rows("inp", k, 3),
        node(
            "mm",
            Op::Matmul {
                x: 0,
                weight: "w".into(),
            },
            m,
            3,
        ),
    ]);
    for b in &gs {
        let mut ctx = b.backend.new_context(&mdl, 16, KvType::F32).unwrap();
        let mut logits = Vec::new();
        let step = Step::contiguous(&[0, 1, 2], 0);
        ctx.forward(&g, &step, &mut logits).unwrap();
        let id = ctx.forward_argmax(&g, &step).unwrap();
        assert_eq!(id, minfer::testing::argmax(&logits[2 * m..]), "{}", b.label);
    }
    // Rows made to be hard: NaNs early in a thread's slice and in the reduction's partner slots,
    // ties (lowest id wins), a NaN at id 0 (the CPU's answer is then 0), all -inf.
    let mut rows: Vec<Vec<f32>> = Vec::new();
    let mut r = values(9, m, 1.0);
    for i in [1, 2, 255, 300, 511] {
        r[i] = f32::NAN;
    }
    r[700] = 5.0;
    r[2000] = 5.0;
    rows.push(r.clone());
    r[0] = f32::NAN;
    rows.push(r);
    rows.push(vec![f32::NEG_INFINITY; m]);
    let mut r = vec![f32::NAN; m];
    r[2999] = -1.0;
    rows.push(r);
    let table = Tensor {
        name: "tbl".into(),
        qtype: QType::F32,
        shape: vec![m as u64, rows.len() as u64],
        data: Bytes::from_vec(rows.iter().flatten().flat_map(|v| v.to_le_bytes()).collect()),
        part: 0,
        file_offset: 0,
    };
    let mdl = model(hparams(m, 1, 1, 64), vec![table]);
    let g = graph(vec![get_rows("tbl", m, 1)]);
    for b in &gs {
        let mut ctx = b.backend.new_context(&mdl, 16, KvType::F32).unwrap();
        for (i, row) in rows.iter().enumerate() {
            let id = ctx.forward_argmax(&g, &Step::contiguous(&[i as u32], 0)).unwrap();
            assert_eq!(id, minfer::testing::argmax(row), "{}: crafted row {i}", b.label);
        }
    }
}

/// The gate refuses before any upload and names what it cannot do; `select` then takes the CPU.
/// Forced here with a 256-byte binding limit, which no row of the model fits.
fn gate_refusal_falls_back_to_cpu_before_upload() {
    let t = "gate_refusal_falls_back_to_cpu_before_upload";
    let Some(root) = common::ref_dir(t) else {
        return;
    };
    let Some(b) = gpu(t, true, Some(256)) else {
        return;
    };
    let b = Arc::new(b);
    let mdl = load::open_model(root.join("random/gguf/llama-Q4_0.gguf")).unwrap();
    let cands: Vec<Arc<dyn Backend>> = vec![b.clone(), Arc::new(cpu())];
    let (chosen, log) = backend::select(cands, &mdl, KvType::F16, 64).unwrap();
    assert_eq!(chosen.name(), "cpu");
    assert_eq!(log.len(), 2, "{log:?}");
    let want = "wgpu: skipped — blk.0.attn_norm.weight: a row of 1024 bytes does not fit a 256-byte binding";
    assert_eq!(log[0], want, "the first tensor (by name) that cannot be hosted");
    assert!(log[1].starts_with("backend: cpu"), "{log:?}");
    assert_eq!(b.uploaded_bytes(), 0, "nothing may be uploaded before the gate decides");
    // A context whose cache layer passes 4 GiB would wrap the kernels' 32-bit indices: refused
    // by its numbers, one position fewer taken.
    let full = Arc::new(gpu(t, true, None).unwrap());
    let (kw, vw) = mdl.hparams.max_kv_widths();
    let most = u32::MAX as usize / (4 * kw.max(vw));
    assert!(full.check_context(&mdl, most, KvType::F32).is_ok());
    let cands: Vec<Arc<dyn Backend>> = vec![full.clone(), Arc::new(cpu())];
    let (chosen, log) = backend::select(cands, &mdl, KvType::F32, most + 1).unwrap();
    assert_eq!(chosen.name(), "cpu");
    let bytes = (most + 1) * 4 * kw.max(vw);
    let want = format!(
        "wgpu: skipped — a f32 KV cache layer of {} positions × {} elements is {bytes} bytes, past the wgpu kernels' 32-bit indexing (at most {most} positions)",
        most + 1,
        kw.max(vw)
    );
    assert_eq!(log[0], want);
    assert_eq!(full.uploaded_bytes(), 0);
    // A weight type without a kernel is refused by tensor name.
    let w = tensor("blk.0.ffn_down.weight", QType::Q8K, 256, 4, 1, 1.0);
    let m = model(hparams(4, 1, 1, 64), vec![w, tensor("inp", QType::F32, 256, 2, 2, 1.0)]);
    let g = graph(vec![
        get_rows("inp", 256, 1),
        node(
            "mm",
            Op::Matmul {
                x: 0,
                weight: "blk.0.ffn_down.weight".into(),
            },
            4,
            1,
        ),
    ]);
    let full = gpu(t, true, None).unwrap();
    let r = full.check(&m, &g, KvType::F16).unwrap_err();
    assert_eq!(r.0, "blk.0.ffn_down.weight is q8_K, no wgpu kernel");
    assert_eq!(full.uploaded_bytes(), 0);
}

/// RoPE with YaRN (Ministral 3's and gpt-oss's parameters), with frequency factors (one of them
/// 1e30, Gemma 4's "unrotated"), and with the attention temperature (floors every 4 positions,
/// crossed by both steps), on 5 tokens at positions 0 and 37: NMSE ≤ 1e-6 against the CPU.
fn rope_yarn_freq_factors_temperature_match_cpu() {
    let t = "rope_yarn_freq_factors_temperature_match_cpu";
    let gs = gpus(t, None);
    if gs.is_empty() {
        return;
    }
    let cpu = cpu();
    let (n, w) = (5, 192);
    let ids: Vec<u32> = (0..n as u32).map(|i| (i * 3 + 1) % 8).collect();
    let yarn = |n_ctx_orig: u32, attn_factor: f32| Yarn {
        ext_factor: 1.0,
        attn_factor,
        beta_fast: 32.0,
        beta_slow: 1.0,
        n_ctx_orig,
    };
    let mut ministral = Rope::new(RopeMode::Norm, 64, 1e6, 1.0 / 16.0);
    ministral.yarn = Some(yarn(16, 1.0 / (1.0 + 0.1 * 16f32.ln())));
    let mut gpt_oss = Rope::new(RopeMode::Neox, 64, 1.5e5, 1.0 / 32.0);
    gpt_oss.yarn = Some(yarn(256, 1.0));
    let mut ff = Rope::new(RopeMode::Neox, 64, 1e4, 1.0);
    ff.freq_factors = true;
    let mut ff_norm = Rope::new(RopeMode::Norm, 32, 1e4, 1.0);
    ff_norm.freq_factors = true;
    let mut temp = ministral;
    temp.temp = Some(AttnTemp { scale: 0.1, floor: 4 });
    let mut temp_plain = Rope::new(RopeMode::Neox, 64, 1e4, 1.0);
    temp_plain.temp = Some(AttnTemp { scale: 0.5, floor: 4 });
    for (name, rope) in [
        ("yarn/ministral3", ministral),
        ("yarn/gpt-oss", gpt_oss),
        ("freq_factors/neox", ff),
        ("freq_factors/norm/32", ff_norm),
        ("yarn+temperature", temp),
        ("temperature", temp_plain),
    ] {
        let mut factors = values(31, rope.n_rot / 2, 0.5)
            .iter()
            .map(|v| 1.0 + v)
            .collect::<Vec<f32>>();
        factors[3] = 1e30;
        let weights = vec![
            tensor("inp", QType::F32, w, 8, 11, 4.0),
            tensor_of("rope_freqs.weight", QType::F32, rope.n_rot / 2, 1, &factors),
        ];
        let op = Op::Rope {
            x: 0,
            n_heads: 3,
            head_dim: 64,
            rope,
        };
        let g = graph(vec![get_rows("inp", w, n), node(name, op, w, n)]);
        let mdl = model(hparams(w, 3, 3, 64), weights);
        for pos0 in [0, 37] {
            let want = run_at(&cpu, &mdl, &g, &ids, pos0);
            let input = run_at(&cpu, &mdl, &graph(vec![get_rows("inp", w, n)]), &ids, pos0);
            assert_ne!(want, input, "{name}: rotates");
            for b in &gs {
                let e = nmse(&run_at(b.backend.as_ref(), &mdl, &g, &ids, pos0), &want);
                assert!(e <= 1e-6, "{}: rope {name} at {pos0}: NMSE {e:.2e}", b.label);
            }
        }
    }
}

/// Attention sinks (gpt-oss): one logit per head in the softmax denominator, no value. Heads'
/// sinks below, near and far above their scores, so both branches of the flash correction run.
/// The CPU (both numerics, f32 cache) against a direct f64 computation: NMSE ≤ 1e-9; the GPUs
/// against the CPU over a 7-token prefill and 3 decode steps, every cache type: NMSE ≤ 1e-6;
/// and a sink of −∞ (CPU) or −1e30 (everywhere) gives exactly the attention without sinks.
fn attention_sinks_match_a_direct_computation_and_cpu() {
    let t = "attention_sinks_match_a_direct_computation_and_cpu";
    let gs = gpus(t, None);
    let cpu = cpu();
    let (n_head, n_kv, hd) = (4, 2, 64);
    let hp = hparams(n_head * hd, n_head, n_kv, hd);
    let (qv, kv_, vv) = (
        values(21, n_head * hd * 16, 3.0),
        values(22, n_kv * hd * 16, 3.0),
        values(23, n_kv * hd * 16, 1.0),
    );
    let base = vec![
        tensor_of("tq", QType::F32, n_head * hd, 16, &qv),
        tensor_of("tk", QType::F32, n_kv * hd, 16, &kv_),
        tensor_of("tv", QType::F32, n_kv * hd, 16, &vv),
    ];
    let with_sinks = |sk: &[f32]| {
        let mut w = base.clone();
        w.push(tensor_of("blk.0.attn_sinks.weight", QType::F32, n_head, 1, sk));
        model(hp.clone(), w)
    };
    let attn = |n, flash, sinks| {
        attention_graph(
            n,
            minfer::model::Attn {
                scale: hp.attn_scale,
                flash,
                sinks,
                ..minfer::model::Attn::new(0, n_head, n_kv, hd)
            },
        )
    };
    let sinks = [-2.0f32, 0.5, 3.0, 40.0];
    let mdl = with_sinks(&sinks);
    let ids: Vec<u32> = (0..7).map(|i| (i * 5 + 2) % 16).collect();
    // Direct: o[t, h] = Σ_j e^(s_j) v_j / (Σ_j e^(s_j) + e^(sink_h)), s_j = q_t·k_j·scale, j ≤ t.
    let mut direct = vec![0f32; ids.len() * n_head * hd];
    for (t, &it) in ids.iter().enumerate() {
        for h in 0..n_head {
            let g = h / (n_head / n_kv);
            let q = &qv[it as usize * n_head * hd + h * hd..][..hd];
            let s: Vec<f64> = ids[..=t]
                .iter()
                .map(|&j| {
                    let k = &kv_[j as usize * n_kv * hd + g * hd..][..hd];
                    q.iter().zip(k).map(|(&a, &b)| a as f64 * b as f64).sum::<f64>() * hp.attn_scale as f64
                })
                .collect();
            let m = s.iter().copied().fold(sinks[h] as f64, f64::max);
            let den: f64 = s.iter().map(|x| (x - m).exp()).sum::<f64>() + (sinks[h] as f64 - m).exp();
            for d in 0..hd {
                let num: f64 = ids[..=t]
                    .iter()
                    .zip(&s)
                    .map(|(&j, x)| (x - m).exp() * vv[j as usize * n_kv * hd + g * hd + d] as f64)
                    .sum();
                direct[(t * n_head + h) * hd + d] = (num / den) as f32;
            }
        }
    }
    for flash in [false, true] {
        let got = run_at(&cpu, &mdl, &attn(ids.len(), flash, true), &ids, 0);
        let e = nmse(&got, &direct);
        assert!(e <= 1e-9, "cpu flash {flash}: sinks vs direct NMSE {e:.2e}");
        let plain = run_at(&cpu, &mdl, &attn(ids.len(), flash, false), &ids, 0);
        assert!(nmse(&plain, &direct) > 1e-3, "the sinks change the output");
        for off in [f32::NEG_INFINITY, -1e30] {
            let none = run_at(&cpu, &with_sinks(&[off; 4]), &attn(ids.len(), flash, true), &ids, 0);
            assert_eq!(none, plain, "cpu flash {flash}: sink {off} is no sink");
        }
    }
    if gs.is_empty() {
        return;
    }
    let off = with_sinks(&[-1e30; 4]);
    let steps: Vec<(usize, Vec<u32>)> = vec![(0, ids.clone()), (7, vec![9]), (8, vec![3]), (9, vec![15])];
    for (kv, flash) in [KvType::F32, KvType::F16, KvType::Q8_0]
        .into_iter()
        .flat_map(|kv| [(kv, false), (kv, true)])
    {
        let mut c = cpu.new_context(&mdl, 16, kv).unwrap();
        let mut gctx: Vec<_> = gs
            .iter()
            .map(|b| b.backend.new_context(&mdl, 16, kv).unwrap())
            .collect();
        let mut goff: Vec<_> = gs
            .iter()
            .map(|b| b.backend.new_context(&off, 16, kv).unwrap())
            .collect();
        let mut gplain: Vec<_> = gs
            .iter()
            .map(|b| b.backend.new_context(&off, 16, kv).unwrap())
            .collect();
        for (pos0, ids) in &steps {
            let step = Step::contiguous(ids, *pos0);
            let mut want = Vec::new();
            c.forward(&attn(ids.len(), flash, true), &step, &mut want).unwrap();
            for (i, b) in gs.iter().enumerate() {
                let (mut got, mut no, mut plain) = (Vec::new(), Vec::new(), Vec::new());
                gctx[i].forward(&attn(ids.len(), flash, true), &step, &mut got).unwrap();
                goff[i].forward(&attn(ids.len(), flash, true), &step, &mut no).unwrap();
                gplain[i]
                    .forward(&attn(ids.len(), flash, false), &step, &mut plain)
                    .unwrap();
                let e = nmse(&got, &want);
                let what = format!("kv {kv:?} flash {flash} at {pos0}");
                assert!(e <= 1e-6, "{}: sinks {what}: NMSE {e:.2e}", b.label);
                assert_eq!(no, plain, "{}: sink -1e30 is no sink, {what}", b.label);
            }
        }
    }
}

/// The GPU gate (no adapter needed) takes a KV-shared layer that reads an earlier layer's
/// cache at that layer's widths, and refuses by name what the kernels cannot take: a scale
/// weight of more than one value, a slice past its row, a weightless norm over partial heads,
/// a shared layer whose source writes no cache or other heads, heads wider than the cache.
fn gate_names_gemma4_shapes_the_kernels_cannot_take() {
    use minfer::testing::gpu::check_graph;
    let (n, w) = (3, 128);
    let mut hp = hparams(w, 2, 1, 64);
    hp.n_layer = 2;
    hp.swa_layers = vec![false; 2];
    hp.nope_layers = vec![false; 2];
    hp.kv_from = vec![None, Some(0)];
    let mdl = model(
        hp,
        vec![
            tensor("inp", QType::F32, w, 8, 1, 1.0),
            tensor("s1", QType::F32, 1, 1, 2, 1.0),
            tensor("s2", QType::F32, 2, 1, 3, 1.0),
        ],
    );
    let attn = |layer, kv_from, n_head_kv| minfer::model::Attn {
        scale: 1.0,
        kv_from,
        ..minfer::model::Attn::new(layer, 2, n_head_kv, 64)
    };
    let at = |a: minfer::model::Attn| Op::Attention {
        q: 0,
        k: 0,
        v: 0,
        attn: a,
    };
    let check = |nodes: Vec<Node>| check_graph(&mdl, &graph(nodes), KvType::F16, "wgpu");
    let ok = vec![
        get_rows("inp", w, n),
        node("blk.0.attn", at(attn(0, None, 1)), w, n),
        node("blk.1.attn", at(attn(1, Some(0), 1)), w, n),
        node(
            "scaled",
            Op::ScaleBy {
                x: 2,
                weight: "s1".into(),
            },
            w,
            n,
        ),
        node("pe_in", Op::Slice { x: 3, col0: 64 }, 64, n),
        node(
            "v_norm",
            Op::HeadNormPlain {
                x: 3,
                eps: 1e-6,
                head_dim: 64,
            },
            w,
            n,
        ),
    ];
    check(ok).unwrap_or_else(|r| panic!("refused: {r}"));
    let refused = |nodes: Vec<Node>, want: &str| match check(nodes) {
        Ok(()) => panic!("accepted; wanted a refusal with {want:?}"),
        Err(r) => assert!(r.0.contains(want), "{r} (wanted {want:?})"),
    };
    let x = || get_rows("inp", w, n);
    refused(
        vec![
            x(),
            node(
                "scaled",
                Op::ScaleBy {
                    x: 0,
                    weight: "s2".into(),
                },
                w,
                n,
            ),
        ],
        "s2: 2 values for one scale",
    );
    refused(
        vec![x(), node("pe_in", Op::Slice { x: 0, col0: 96 }, 64, n)],
        "pe_in: columns 96..160 of a row of 128",
    );
    refused(
        vec![
            x(),
            node(
                "v_norm",
                Op::HeadNormPlain {
                    x: 0,
                    eps: 1e-6,
                    head_dim: 48,
                },
                w,
                n,
            ),
        ],
        "v_norm: width 128 is not whole heads of 48",
    );
    refused(
        vec![x(), node("blk.1.attn", at(attn(1, Some(0), 1)), w, n)],
        "blk.1.attn: reads the KV cache of layer 0, which no earlier layer writes",
    );
    refused(
        vec![x(), node("blk.0.attn", at(attn(0, None, 2)), w, n)],
        "blk.0.attn: K/V rows of 128/128 for a cache of 64/64",
    );
}
