//! Many sequences in one step on the GPU backends: hand-built steps whose sequences own
//! interleaved and reversed cells of one pool, KV storage grown between forwards, and how far a
//! sequence's logits move when it shares a decode step with others (batch invariance).
//!
//! Tolerances: against the CPU on f32 weights, NMSE ≤ 1e-6 as `models::random_models_match_cpu`
//! (both sides in f32, rounding at the same places); a context against itself (grown or not):
//! bit for bit.

use std::sync::Arc;

use minfer::backend::{Backend, Context, KvType, Step};
use minfer::model::GraphKey;
use minfer::{load, Model};

use super::{cpu, gpu, gpus, nmse};
use crate::common;

tests![
    interleaved_sequences_match_cpu,
    grow_kv_keeps_every_cell,
    batch_invariance_measured,
    joining_and_leaving_keeps_greedy_tokens,
];

/// A sequence: the pool cells it owns in position order, and how many positions it holds.
pub(super) struct Seq {
    cells: Vec<u32>,
    len: usize,
}

impl Seq {
    pub(super) fn new(cells: impl IntoIterator<Item = u32>) -> Seq {
        Seq {
            cells: cells.into_iter().collect(),
            len: 0,
        }
    }
}

/// A step of `toks` (sequence, token id) in order, each token at its sequence's next position;
/// every sequence's cell list is laid out once, in order of first appearance.
pub(super) fn step_of(seqs: &mut [Seq], toks: &[(usize, u32)]) -> Step {
    let mut order: Vec<usize> = Vec::new();
    for &(s, _) in toks {
        if !order.contains(&s) {
            order.push(s);
        }
    }
    let mut cells = Vec::new();
    let mut off = vec![0u32; seqs.len()];
    for &s in &order {
        let count = toks.iter().filter(|&&(o, _)| o == s).count();
        off[s] = cells.len() as u32;
        cells.extend_from_slice(&seqs[s].cells[..seqs[s].len + count]);
    }
    let mut step = Step {
        cells,
        ..Step::default()
    };
    for &(s, tok) in toks {
        step.tokens.push(tok);
        step.pos.push(seqs[s].len as u32);
        step.off.push(off[s]);
        step.run.push(toks.iter().filter(|&&(o, _)| o == s).count() as u32);
        seqs[s].len += 1;
    }
    step
}

fn open(root: &std::path::Path, name: &str) -> Arc<Model> {
    Arc::new(load::open_model(root.join(format!("random/gguf/{name}.gguf"))).unwrap())
}

/// Token ids of the vocabulary, different per sequence and step.
fn tok(m: &Model, s: usize, i: usize) -> u32 {
    ((7 * i + 31 * s + 1) % m.hparams.n_vocab) as u32
}

fn forward(ctx: &mut dyn Context, m: &Model, step: &Step, n_out: usize, who: &str) -> Vec<f32> {
    let mut out = Vec::new();
    ctx.forward(&m.graph(GraphKey::new(step.len(), n_out)), step, &mut out)
        .unwrap_or_else(|e| panic!("{who}: {e}"));
    out
}

/// Three sequences of one 96-cell pool (A on cells ≡ 0 mod 3, B on ≡ 1, C on ≡ 2 from the top
/// down), prefilled together at different lengths, then decoded in shuffled orders and with
/// multi-token continuations, on every architecture's tiny f32 model: every step's logits match
/// the CPU's on the same step. A and C grow past gemma3's 16-position sliding window. wgpu also
/// runs with 16 KiB bindings, which splits the steps into sub-batches of a few tokens.
fn interleaved_sequences_match_cpu() {
    let t = "interleaved_sequences_match_cpu";
    let Some(root) = common::ref_dir(t) else {
        return;
    };
    let mut gs: Vec<(String, Arc<dyn Backend>)> = gpus(t, None).into_iter().map(|g| (g.label, g.backend)).collect();
    if gs.is_empty() {
        return;
    }
    if let Some(b) = gpu(t, true, Some(16 << 10)) {
        gs.push((format!("{} (16 KiB bindings)", b.describe()), Arc::new(b)));
    }
    let cpu = cpu();
    for arch in ["llama", "qwen2", "qwen3", "gemma3"] {
        let m = open(&root, &format!("{arch}-f32"));
        let seqs = || {
            vec![
                Seq::new((0..96).step_by(3)),
                Seq::new((1..96).step_by(3)),
                Seq::new((2..96).step_by(3).rev()),
            ]
        };
        // (tokens as (sequence, count), output rows)
        let plan: Vec<(Vec<(usize, usize)>, usize)> = vec![
            (vec![(0, 6), (1, 3), (2, 18)], 27),
            (vec![(2, 1), (0, 1), (1, 1)], 3),
            (vec![(1, 2), (0, 9)], 11),
            (vec![(0, 1), (2, 2)], 2),
            (vec![(0, 1)], 1),
            (vec![(0, 1)], 1),
            (vec![(1, 1), (2, 1)], 2),
        ];
        let mut steps = Vec::new();
        let mut s = seqs();
        for (i, (parts, n_out)) in plan.iter().enumerate() {
            let toks: Vec<(usize, u32)> = parts
                .iter()
                .flat_map(|&(q, c)| (0..c).map(move |j| (q, j)))
                .map(|(q, j)| (q, tok(&m, q, 10 * i + j)))
                .collect();
            steps.push((step_of(&mut s, &toks), *n_out));
        }
        let lens: Vec<usize> = s.iter().map(|q| q.len).collect();
        eprintln!(
            "{arch}: window {:?}, sequence lengths {lens:?}",
            m.hparams.sliding_window
        );
        let mut c = cpu.new_context(&m, 96, KvType::F16).unwrap();
        let want: Vec<Vec<f32>> = steps
            .iter()
            .map(|(st, n_out)| forward(c.as_mut(), &m, st, *n_out, "cpu"))
            .collect();
        for (label, b) in &gs {
            let mut ctx = b.new_context(&m, 96, KvType::F16).unwrap();
            let mut worst = 0f64;
            for (i, ((st, n_out), want)) in steps.iter().zip(&want).enumerate() {
                let got = forward(ctx.as_mut(), &m, st, *n_out, label);
                let e = nmse(&got, want);
                assert!(e <= 1e-6, "{label}: {arch} step {i}: NMSE {e:.2e}");
                worst = worst.max(e);
            }
            eprintln!("{arch} {label}: NMSE ≤ {worst:.1e}");
        }
    }
}

/// A context of 8 cells takes a 6-token prompt, grows to 40 cells and goes on (a 10-token
/// chunk, then single-token steps, which also outgrow the step buffer): every step's logits
/// equal, bit for bit, those of a context made with 40 cells, on the CPU and every GPU backend.
fn grow_kv_keeps_every_cell() {
    let t = "grow_kv_keeps_every_cell";
    let Some(root) = common::ref_dir(t) else {
        return;
    };
    let gs = gpus(t, None);
    if gs.is_empty() {
        return;
    }
    let mut backends: Vec<(String, Arc<dyn Backend>)> = vec![("cpu".into(), Arc::new(cpu()))];
    backends.extend(gs.iter().map(|g| (g.label.clone(), g.backend.clone())));
    for name in ["llama-f32", "gemma3-Q8_0"] {
        let m = open(&root, name);
        let ids: Vec<u32> = (0..20).map(|i| tok(&m, 0, i)).collect();
        let chunks: [(usize, usize); 6] = [(0, 6), (6, 16), (16, 17), (17, 18), (18, 19), (19, 20)];
        for (label, b) in &backends {
            let mut small = b.new_context(&m, 8, KvType::F16).unwrap();
            let mut whole = b.new_context(&m, 40, KvType::F16).unwrap();
            assert_eq!(small.kv_cells(), 8, "{label}");
            for (i, &(a, z)) in chunks.iter().enumerate() {
                if i == 1 {
                    small.grow_kv(40).unwrap_or_else(|e| panic!("{label}: grow: {e}"));
                    assert_eq!(small.kv_cells(), 40, "{label}");
                    assert_eq!(small.kv_bytes(), whole.kv_bytes(), "{label}");
                }
                let st = Step::contiguous(&ids[a..z], a);
                let n = z - a;
                let got = forward(small.as_mut(), &m, &st, n, label);
                let want = forward(whole.as_mut(), &m, &st, n, label);
                assert!(got == want, "{label}: {name}: tokens {a}..{z} differ after grow_kv");
            }
        }
    }
}

/// Sequence A decoded alone (one row) and as the second of four sequences in a step (four
/// rows), after the same prompt in the same cells: the GPU matmul takes `matmul_vec` for ≤ 2
/// rows and the tiled kernel above, whose sums differ in the last bits. Prints max |Δ| and NMSE
/// of A's logits per backend and model; asserts bit equality on the CPU (its matmul groups rows
/// by sequence, `cpu::matmul::Groups`) and,
/// on the GPU, NMSE ≤ 1e-6 with f32 weights and ≤ 5e-3 with quantized ones (where a last-bit
/// difference can tip an 8-bit activation rounding).
fn batch_invariance_measured() {
    let t = "batch_invariance_measured";
    let Some(root) = common::ref_dir(t) else {
        return;
    };
    let gs = gpus(t, None);
    if gs.is_empty() {
        return;
    }
    let mut backends: Vec<(String, Arc<dyn Backend>, bool)> = vec![("cpu".into(), Arc::new(cpu()), false)];
    backends.extend(gs.iter().map(|g| (g.label.clone(), g.backend.clone(), true)));
    for name in ["llama-f32", "gemma3-f32", "llama-Q4_K_M", "gemma3-Q4_K_M"] {
        let m = open(&root, name);
        let bound = if name.ends_with("f32") { 1e-6 } else { 5e-3 };
        for (label, b, gpu) in &backends {
            let mut alone = b.new_context(&m, 64, KvType::F16).unwrap();
            let mut shared = b.new_context(&m, 64, KvType::F16).unwrap();
            // A on cells 0..16 in both; B, C, D on 16.., 32.., 48.. of the shared pool.
            let mut sa = vec![Seq::new(0..16)];
            let mut ss: Vec<Seq> = (0..4).map(|q| Seq::new(16 * q..16 * (q + 1))).collect();
            let prompt: Vec<(usize, u32)> = (0..5).map(|i| (0, tok(&m, 0, i))).collect();
            let st = step_of(&mut sa, &prompt);
            forward(alone.as_mut(), &m, &st, 1, label);
            let st = step_of(&mut ss, &prompt);
            forward(shared.as_mut(), &m, &st, 1, label);
            for q in 1..4 {
                let p: Vec<(usize, u32)> = (0..3 + q).map(|i| (q, tok(&m, q, i))).collect();
                let st = step_of(&mut ss, &p);
                forward(shared.as_mut(), &m, &st, 1, label);
            }
            let (mut max_d, mut worst) = (0f32, 0f64);
            for i in 0..3 {
                let next = |q: usize| (q, tok(&m, q, 100 + i));
                let st = step_of(&mut sa, &[next(0)]);
                let one = forward(alone.as_mut(), &m, &st, 1, label);
                let st = step_of(&mut ss, &[next(1), next(0), next(2), next(3)]);
                let four = forward(shared.as_mut(), &m, &st, 4, label);
                let row = &four[one.len()..2 * one.len()];
                if !gpu {
                    assert!(row == one.as_slice(), "{label}: {name}: A's logits depend on its batch");
                }
                for (x, y) in row.iter().zip(&one) {
                    max_d = max_d.max((x - y).abs());
                }
                worst = worst.max(nmse(row, &one));
            }
            eprintln!("batch invariance {name:<14} {label}: max |Δ| {max_d:.3e}, NMSE {worst:.2e}");
            assert!(worst <= bound, "{label}: {name}: alone vs in 4: NMSE {worst:.2e}");
        }
    }
}

/// The CPU suite's join-and-leave pattern (`crate::batch::together`: four prompts joining at
/// different steps, one split over two, leaving after different numbers of tokens) through
/// `Session::decode` on every GPU backend and every architecture's tiny model: each sequence's
/// greedy tokens equal its run alone on the same backend, and its logits stay within NMSE 1e-3
/// of them or of the CPU's (which batching never changes): the GPU matmul's kernel depends on the
/// forward's rows (as measured above), and with q8_0 weights a last-bit difference can tip an
/// activation's 8-bit rounding either way. Such a tip is the decode kernel's as often as the
/// batched one's: measured on glm4 (CUDA emulation, tensor-core prefill tiles), a sequence alone
/// 1.4e-4 from the CPU at one step and batched 4.9e-15 from it, the same sequence batched 1.4e-4
/// from itself alone; everywhere else batched and alone agree to 1e-14 or to each other's tip.
/// Steps of up to `VEC_MAX_TOKENS` rows (on wgpu, without matrix tiles, `VEC_WIDE_TOKENS`) take
/// the matvec, whose columns are each summed as alone (decode steps agree bit for bit); a prompt
/// prefilled alone by the matvec and batched by the tiles (on the CUDA emulation, sequence 2's 8
/// tokens in a 20-row step) can tip on the tiles' side, away from both the matvec and the CPU:
/// measured 3.9e-4 (glm4) and 3.6e-4 (qwen2moe) where llvmpipe took the tiles there, greedy
/// tokens equal. The bound is 1e-3, a tip's size.
fn joining_and_leaving_keeps_greedy_tokens() {
    use minfer::backend::BackendChoice;
    use minfer::model::Arch;
    use minfer::quant::QType;
    use minfer::{Session, SessionOptions};

    let t = "joining_and_leaving_keeps_greedy_tokens";
    let gs = gpus(t, None);
    if gs.is_empty() {
        return;
    }
    let dir = crate::gguf::tempdir("gpu-batch-join");
    let ps = crate::batch::prompts();
    let (join, steps) = ([0, 1, 1, 4], [9, 6, 3, 5]);
    let cpu: Arc<dyn Backend> = Arc::new(cpu());
    let cpu_opts = SessionOptions {
        n_ctx: 128,
        backend: BackendChoice::Auto,
        kv_type: Some(KvType::F32),
        ..SessionOptions::default()
    };
    for arch in Arch::DECODERS {
        let path = crate::tiny::write_tiny(&dir, arch, QType::Q8_0, |_| {});
        let m = Arc::new(load::open_model(&path).unwrap());
        for g in &gs {
            let session = || {
                let opts = SessionOptions {
                    n_ctx: 128,
                    backend: BackendChoice::Auto,
                    kv_type: Some(KvType::F32),
                    ..SessionOptions::default()
                };
                Session::on(vec![g.backend.clone()], m.clone(), &opts).unwrap()
            };
            let mut s = session();
            let want: Vec<_> = ps
                .iter()
                .zip(steps)
                .map(|(p, k)| crate::batch::alone(&mut s, p, k))
                .collect();
            let mut s = session();
            let got = crate::batch::together(&mut s, &ps, &join, &steps);
            let mut c = Session::on(vec![cpu.clone()], m.clone(), &cpu_opts).unwrap();
            let on_cpu: Vec<_> = ps
                .iter()
                .zip(steps)
                .map(|(p, k)| crate::batch::alone(&mut c, p, k))
                .collect();
            let mut worst = 0f64;
            for i in 0..ps.len() {
                for (k, (a, b)) in got[i].iter().zip(&want[i]).enumerate() {
                    let (ta, tb) = (minfer::testing::argmax(a), minfer::testing::argmax(b));
                    assert_eq!(
                        ta,
                        tb,
                        "{} {}: sequence {i} step {k}: greedy token",
                        arch.name(),
                        g.label
                    );
                    worst = worst.max(nmse(a, b).min(nmse(a, &on_cpu[i][k])));
                }
            }
            eprintln!(
                "{} {}: batched vs alone or CPU NMSE ≤ {worst:.1e}",
                arch.name(),
                g.label
            );
            assert!(worst <= 1e-3, "{} {}: NMSE {worst:.2e}", arch.name(), g.label);
        }
    }
}
