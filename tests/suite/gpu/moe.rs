//! The mixture-of-experts ops on the GPU backends against the CPU, op by op: routing (both
//! gatings, with and without renormalisation), the expert matmul for every weight qtype (x
//! shared by the slots and x per slot, expert rows not a multiple of the workgroup), expert
//! biases, gpt-oss' clamped SwiGLU, the weighted sum and the sigmoid-gated shared expert.

use minfer::model::{Gating, Op};
use minfer::quant::QType;
use minfer::testing::gpu::{act_qtype, WEIGHT_QTYPES};

use minfer::tensor::Tensor;

use super::{cpu, get_rows, gpus, graph, hparams, model, nmse, node, run_at, tensor};

tests![
    moe_ops_match_cpu_for_every_qtype,
    the_expert_matmul_reads_only_the_chosen_experts
];

const N_EXPERT: usize = 5;
const K: usize = 2;

fn moe_ops_match_cpu_for_every_qtype() {
    let t = "moe_ops_match_cpu_for_every_qtype";
    let gs = gpus(t, None);
    if gs.is_empty() {
        return;
    }
    let cpu = cpu();
    let m2 = 67;
    for q in WEIGHT_QTYPES {
        let (k, out) = if q.block_elems() == 256 { (512, 256) } else { (96, 64) };
        let experts = |name: &str, cols: usize, rows: usize, seed: u64| {
            let mut w = tensor(name, q, cols, rows * N_EXPERT, seed, 1.0);
            w.shape = vec![cols as u64, rows as u64, N_EXPERT as u64];
            w
        };
        let weights = vec![
            experts("w", k, out, q as u64 + 3),
            experts("w2", out, m2, q as u64 + 11),
            tensor("b", QType::F32, out, N_EXPERT, 5, 4.0),
            tensor("wg", QType::F32, k, 1, 9, 1.0),
            tensor("inp", QType::F32, k, 8, 7, 1.0),
            tensor("router", QType::F32, k, N_EXPERT, 13, 3.0),
        ];
        let mdl = model(hparams(m2, 1, 1, 64), weights.clone());
        let mdl_route = model(hparams(2 * K, 1, 1, 64), weights);
        for n in [1usize, 3, 5] {
            for (gating, norm) in [
                (Gating::Softmax, true),
                (Gating::Softmax, false),
                (Gating::SoftmaxSelected, false),
            ] {
                let route = Op::MoeRoute {
                    logits: 1,
                    k: K,
                    gating,
                    norm,
                };
                let nodes = vec![
                    get_rows("inp", k, n),
                    node(
                        "logits",
                        Op::Matmul {
                            x: 0,
                            weight: "router".into(),
                        },
                        N_EXPERT,
                        n,
                    ),
                    node("route", route.clone(), 2 * K, n),
                    node(
                        "up",
                        Op::MatmulId {
                            x: 0,
                            route: 2,
                            weight: "w".into(),
                        },
                        K * out,
                        n,
                    ),
                    node(
                        "up_b",
                        Op::AddBiasId {
                            x: 3,
                            route: 2,
                            bias: "b".into(),
                        },
                        K * out,
                        n,
                    ),
                    node(
                        "act",
                        Op::SwigluOai {
                            gate: 4,
                            up: 3,
                            alpha: 1.702,
                            limit: 7.0,
                        },
                        K * out,
                        n,
                    ),
                    node(
                        "down",
                        Op::MatmulId {
                            x: 5,
                            route: 2,
                            weight: "w2".into(),
                        },
                        K * m2,
                        n,
                    ),
                    node("sum", Op::MoeSum { x: 6, route: 2 }, m2, n),
                    node(
                        "g",
                        Op::Matmul {
                            x: 0,
                            weight: "wg".into(),
                        },
                        1,
                        n,
                    ),
                    node("gated", Op::SigmoidGate { x: 7, gate: 8 }, m2, n),
                ];
                let ids: Vec<u32> = (0..n as u32).map(|i| (i * 3 + 1) % (2 * K as u32)).collect();
                let want = run_at(&cpu, &mdl, &graph(nodes.clone()), &ids, 0);
                let route_graph = graph(nodes[..3].to_vec());
                let want_route = run_at(&cpu, &mdl_route, &route_graph, &ids, 0);
                let distinct: std::collections::BTreeSet<Vec<u32>> = want_route
                    .chunks_exact(2 * K)
                    .map(|r| r[..K].iter().map(|&e| e as u32).collect())
                    .collect();
                for b in &gs {
                    let l = &b.label;
                    let got_route = run_at(b.backend.as_ref(), &mdl_route, &route_graph, &ids, 0);
                    for (g, c) in got_route.chunks_exact(2 * K).zip(want_route.chunks_exact(2 * K)) {
                        assert_eq!(&g[..K], &c[..K], "{l}: {gating:?} norm {norm}: experts");
                        let e = nmse(&g[K..], &c[K..]);
                        assert!(e <= 1e-10, "{l}: {gating:?} norm {norm}: weights NMSE {e:.2e}");
                    }
                    let got = run_at(b.backend.as_ref(), &mdl, &graph(nodes.clone()), &ids, 0);
                    let e = nmse(&got, &want);
                    let bound = if act_qtype(q).is_some() { 1e-8 } else { 1e-10 };
                    assert!(
                        e <= bound,
                        "{l}: moe/{q} n={n} {gating:?}: NMSE {e:.2e} against the CPU"
                    );
                }
                if n == 5 {
                    assert!(distinct.len() > 1, "every token chose the same experts: {distinct:?}");
                }
            }
        }
        eprintln!("{q:<7} moe ops match the CPU");
    }
}

/// Decode reads only the chosen experts' rows: the experts no token chose are NaN, and every
/// backend's result is still finite and the CPU's.
fn the_expert_matmul_reads_only_the_chosen_experts() {
    let t = "the_expert_matmul_reads_only_the_chosen_experts";
    let gs = gpus(t, None);
    if gs.is_empty() {
        return;
    }
    let (n_in, n_out, n_expert, k, rows) = (64, 16, 8, 4, 16);
    let chosen = [1usize, 3, 4, 6];
    let mut w: Vec<f32> = (0..n_in * n_out * n_expert)
        .map(|i| ((i * 37) % 17) as f32 / 17.0 - 0.5)
        .collect();
    for e in (0..n_expert).filter(|e| !chosen.contains(e)) {
        w[e * n_in * n_out..(e + 1) * n_in * n_out].fill(f32::NAN);
    }
    let experts = Tensor::from_f32("w", &[n_in as u64, n_out as u64, n_expert as u64], &w);
    // Route rows: the chosen experts in a row-dependent order, then their weights.
    let route: Vec<f32> = (0..rows)
        .flat_map(|r| {
            let ids = (0..k).map(move |j| chosen[(r + j) % k] as f32);
            let ws = (0..k).map(move |j| 0.1 + 0.2 * j as f32);
            ids.chain(ws).collect::<Vec<_>>()
        })
        .collect();
    let rt = Tensor::from_f32("rt", &[2 * k as u64, rows as u64], &route);
    let mdl = model(
        hparams(n_out, 1, 1, 64),
        vec![experts, rt, tensor("inp", QType::F32, n_in, rows, 3, 1.0)],
    );
    let g = graph(vec![
        get_rows("inp", n_in, 3),
        get_rows("rt", 2 * k, 3),
        node(
            "mm",
            Op::MatmulId {
                x: 0,
                route: 1,
                weight: "w".into(),
            },
            k * n_out,
            3,
        ),
        node("sum", Op::MoeSum { x: 2, route: 1 }, n_out, 3),
    ]);
    let ids = [2u32, 9, 14];
    let want = run_at(&cpu(), &mdl, &g, &ids, 0);
    assert!(
        want.iter().all(|v| v.is_finite()),
        "cpu read an unchosen expert: {want:?}"
    );
    for b in &gs {
        let got = run_at(b.backend.as_ref(), &mdl, &g, &ids, 0);
        assert!(
            got.iter().all(|v| v.is_finite()),
            "{}: read an unchosen expert",
            b.label
        );
        let e = nmse(&got, &want);
        assert!(e <= 1e-10, "{}: NMSE {e:.2e} against the CPU", b.label);
    }
}
