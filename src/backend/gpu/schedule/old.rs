//! The schedule as one function, before the split into op families: kept while the test
//! below checks that both give the same launches.

use std::sync::Arc;

use super::*;
use crate::backend::gpu::kernels::act_qtype;
use crate::model::RopeMode;

const VEC_ROWS_PER_WG: u32 = 8;

fn words(v: &[u32]) -> [u32; 16] {
    let mut p = [0u32; 16];
    p[..v.len()].copy_from_slice(v);
    p
}

/// Schedules `g`. `weight` gives each resident weight's layout; `subgroups` picks the subgroup
/// variants (wgpu); `max_groups` is the device's limit on workgroups per grid dimension.
pub fn schedule_old(
    g: &Graph,
    weight: &dyn Fn(&str) -> Option<Arc<WeightParts>>,
    kv: KvType,
    subgroups: bool,
    max_groups: u32,
) -> Result<Schedule, String> {
    let maxg = max_groups;
    let n = g.n_tokens;
    let weight = |name: &str| weight(name).ok_or_else(|| format!("{name} is not resident"));

    // Liveness: a node's buffer returns to the pool after its last reader.
    let mut last_use = vec![0usize; g.nodes.len()];
    for (i, node) in g.nodes.iter().enumerate() {
        for j in node.op.inputs() {
            last_use[j] = i;
        }
    }
    last_use[g.result] = usize::MAX;
    let mut sizes: Vec<u64> = Vec::new();
    let mut free: Vec<usize> = Vec::new();
    let mut buf_of = vec![0usize; g.nodes.len()];

    // Quantized activations for the matmuls (`quantize_act`): one scratch buffer, and which
    // node's rows it holds in which format, so Q/K/V or gate/up quantize their input once.
    let mut scratch: Option<usize> = None;
    let mut scratch_holds: Option<(usize, QType)> = None;

    let mut ropes: Vec<Rope> = Vec::new();
    let mut stages: Vec<Stage> = Vec::with_capacity(g.nodes.len());
    for (i, node) in g.nodes.iter().enumerate() {
        let size = (node.rows * node.width * 4) as u64;
        let pick = free
            .iter()
            .enumerate()
            .filter(|(_, &b)| sizes[b] >= size)
            .min_by_key(|(_, &b)| sizes[b])
            .map(|(fi, _)| fi);
        let out = match pick {
            Some(fi) => free.swap_remove(fi),
            None => {
                sizes.push(size);
                sizes.len() - 1
            }
        };
        buf_of[i] = out;
        for j in node.op.inputs() {
            if last_use[j] == i && !free.contains(&buf_of[j]) && buf_of[j] != out {
                free.push(buf_of[j]);
            }
        }
        let inp = |k: usize| Res::Act(buf_of[node.op.inputs()[k]]);
        let rows = node.rows as u32;
        let width = node.width as u32;
        let elems = (node.rows * node.width) as u64;
        let linear = |wg: u64| fold(elems.div_ceil(wg), maxg);
        let mut d: Vec<Launch> = Vec::new();
        let mut kind = node.op.kind().to_string();
        match &node.op {
            Op::GetRows { weight: name } => {
                let w = weight(name)?;
                kind = format!("get_rows/{}", w.qtype);
                let k = w.row_len as u32;
                for (pi, &(row0, prows)) in w.parts.iter().enumerate() {
                    d.push(Launch {
                        variant: Variant::with_qtype(Kernel::GetRows, w.qtype),
                        params: words(&[k, prows as u32, row0 as u32, n as u32]),
                        res: vec![Res::Weight(w.clone(), pi), Res::Ids, Res::Act(out)],
                        groups: [(k / 8).div_ceil(64), n as u32, 1],
                    });
                }
            }
            Op::Matmul { weight: name, x } => {
                let w = weight(name)?;
                let vec = node.rows <= VEC_MAX_TOKENS;
                kind = format!("{}/{}", if vec { "matmul_vec" } else { "matmul" }, w.qtype);
                let (k, m) = (w.row_len as u32, node.width as u32);
                let mut xin = inp(0);
                if let Some(act) = act_qtype(w.qtype) {
                    let bytes = node.rows as u64 * act_bytes(w.row_len);
                    let sb = *scratch.get_or_insert_with(|| {
                        sizes.push(0);
                        sizes.len() - 1
                    });
                    sizes[sb] = sizes[sb].max(bytes);
                    if scratch_holds != Some((*x, act)) {
                        scratch_holds = Some((*x, act));
                        let blocks = (node.rows * w.row_len / act.block_elems()) as u64;
                        stages.push(Stage::Compute {
                            kind: format!("quantize_act/{act}"),
                            launches: vec![Launch {
                                variant: Variant::with_qtype(Kernel::QuantizeAct, act),
                                params: words(&[k, rows]),
                                res: vec![inp(0), Res::Act(sb)],
                                groups: fold(blocks.div_ceil(64), maxg),
                            }],
                        });
                    }
                    xin = Res::Act(sb);
                }
                for (pi, &(row0, prows)) in w.parts.iter().enumerate() {
                    let (pr, r0) = (prows as u32, row0 as u32);
                    let res = vec![Res::Weight(w.clone(), pi), xin.clone(), Res::Act(out)];
                    d.push(if vec {
                        let mut groups = fold(pr.div_ceil(VEC_ROWS_PER_WG) as u64, maxg);
                        groups[2] = rows;
                        Launch {
                            variant: Variant::with_qtype(Kernel::MatmulVec, w.qtype).subgroups(subgroups),
                            params: words(&[k, m, pr, r0, rows]),
                            res,
                            groups,
                        }
                    } else {
                        Launch {
                            variant: Variant::with_qtype(Kernel::Matmul, w.qtype),
                            params: words(&[k, m, pr, r0, rows]),
                            res,
                            groups: [pr.div_ceil(32), rows.div_ceil(32), 1],
                        }
                    });
                }
            }
            Op::AddBias { bias, .. } => {
                let w = weight(bias)?;
                d.push(Launch {
                    variant: Variant::with_qtype(Kernel::AddBias, w.qtype),
                    params: words(&[elems as u32, width]),
                    res: vec![Res::Weight(w, 0), inp(0), Res::Act(out)],
                    groups: linear(256),
                });
            }
            Op::RmsNorm { weight: name, eps, .. } | Op::HeadNorm { weight: name, eps, .. } => {
                // A head norm is an RMS norm over rows one head wide.
                let w = weight(name)?;
                let (nrows, nwidth) = match node.op {
                    Op::HeadNorm { head_dim, .. } => (rows * (width / head_dim as u32), head_dim as u32),
                    _ => (rows, width),
                };
                d.push(Launch {
                    variant: Variant::with_qtype(Kernel::RmsNorm, w.qtype).subgroups(subgroups),
                    params: words(&[nwidth, eps.to_bits(), nrows]),
                    res: vec![Res::Weight(w, 0), inp(0), Res::Act(out)],
                    groups: fold(nrows as u64, maxg),
                });
            }
            Op::Rope {
                n_heads,
                head_dim,
                rope,
                ..
            } => {
                let ri = match ropes.iter().position(|r| r == rope) {
                    Some(ri) => ri,
                    None => {
                        ropes.push(*rope);
                        ropes.len() - 1
                    }
                };
                let neox = u32::from(rope.mode == RopeMode::Neox);
                let hd = *head_dim as u32;
                d.push(Launch {
                    variant: Variant::new(Kernel::Rope),
                    params: words(&[*n_heads as u32, hd, rope.n_rot as u32, neox, rows]),
                    res: vec![Res::RopeTable(ri), inp(0), Res::Act(out)],
                    groups: [(hd / 2).div_ceil(64), *n_heads as u32, rows],
                });
            }
            Op::Attention {
                layer,
                n_head,
                n_head_kv,
                head_dim,
                head_dim_v,
                scale,
                window,
                softcap,
                flash,
                ..
            } => {
                let (kw, vw) = ((n_head_kv * head_dim) as u32, (n_head_kv * head_dim_v) as u32);
                // Elements per kv_store invocation: a word, or a pair of q8_0 blocks.
                let epw = match kv {
                    KvType::F32 => 1,
                    KvType::F16 => 2,
                    KvType::Q8_0 => 64,
                };
                d.push(Launch {
                    variant: Variant::with_kv(Kernel::KvStore, kv),
                    params: words(&[kw, vw, rows]),
                    res: vec![Res::Step, inp(1), inp(2), Res::Kc(*layer), Res::Vc(*layer)],
                    groups: fold(((rows * (kw + vw)) / epw).div_ceil(64) as u64, maxg),
                });
                d.push(Launch {
                    variant: Variant::with_kv(Kernel::Attention, kv).subgroups(subgroups),
                    params: words(&[
                        *n_head as u32,
                        *n_head_kv as u32,
                        *head_dim as u32,
                        *head_dim_v as u32,
                        scale.to_bits(),
                        window.unwrap_or(0) as u32,
                        softcap.unwrap_or(0.0).to_bits(),
                        rows,
                        u32::from(*flash),
                    ]),
                    res: vec![Res::Step, inp(0), Res::Kc(*layer), Res::Vc(*layer), Res::Act(out)],
                    groups: [*n_head as u32, rows, 1],
                });
            }
            Op::Add { .. } | Op::Mul { .. } | Op::Swiglu { .. } | Op::Geglu { .. } => {
                let kernel = match node.op {
                    Op::Add { .. } => Kernel::Add,
                    Op::Mul { .. } => Kernel::Mul,
                    Op::Swiglu { .. } => Kernel::Swiglu,
                    _ => Kernel::Geglu,
                };
                d.push(Launch {
                    variant: Variant::new(kernel),
                    params: words(&[elems as u32]),
                    res: vec![inp(0), inp(1), Res::Act(out)],
                    groups: linear(256),
                });
            }
            Op::Scale { s, .. } | Op::Softcap { cap: s, .. } => {
                let kernel = if matches!(node.op, Op::Scale { .. }) {
                    Kernel::Scale
                } else {
                    Kernel::Softcap
                };
                d.push(Launch {
                    variant: Variant::new(kernel),
                    params: words(&[elems as u32, s.to_bits()]),
                    res: vec![inp(0), Res::Act(out)],
                    groups: linear(256),
                });
            }
            Op::Output { x } => {
                let src = &g.nodes[*x];
                let skip = ((src.rows - node.rows) * node.width * 4) as u64;
                stages.push(Stage::Copy {
                    src: buf_of[*x],
                    src_offset: skip,
                    dst: out,
                    size,
                });
                continue;
            }
        }
        stages.push(Stage::Compute { kind, launches: d });
    }
    let result = buf_of[g.result];
    let n_out = g.nodes[g.result].rows;
    let n_vocab = g.nodes[g.result].width;
    let argmax = Launch {
        variant: Variant::new(Kernel::Argmax),
        params: words(&[n_vocab as u32, ((n_out - 1) * n_vocab) as u32]),
        res: vec![Res::Logits, Res::ArgmaxOut],
        groups: [1, 1, 1],
    };
    Ok(Schedule {
        stages,
        act_bytes: sizes,
        n_tokens: n,
        ropes,
        result,
        result_bytes: (n_out * n_vocab * 4) as u64,
        argmax,
    })
}

mod compare {
    use super::*;
    use crate::backend::gpu::kernels::WEIGHT_QTYPES;
    use crate::model::{Arch, HParams};

    fn hparams(arch: Arch) -> HParams {
        let rope = Rope {
            mode: if arch == Arch::Llama {
                RopeMode::Norm
            } else {
                RopeMode::Neox
            },
            n_rot: 32,
            base: 10000.0,
            freq_scale: 1.0,
        };
        HParams {
            n_vocab: 96,
            n_ctx_train: 256,
            n_embd: 64,
            n_layer: 3,
            n_head: 4,
            n_head_kv: 2,
            head_dim: 32,
            head_dim_v: 32,
            n_ff: 128,
            rms_eps: 1e-5,
            rope,
            rope_swa: Rope { base: 10.0, ..rope },
            sliding_window: (arch == Arch::Gemma3).then_some(4),
            swa_layers: vec![arch == Arch::Gemma3, false, arch == Arch::Gemma3],
            attn_scale: 0.125,
            attn_softcap: (arch == Arch::Gemma3).then_some(50.0),
            final_softcap: (arch == Arch::Gemma3).then_some(30.0),
            embd_scale: (arch == Arch::Gemma3).then_some(8.0),
            tied_output: arch != Arch::Llama,
        }
    }

    /// Each weight the graph names, with a qtype and part split chosen from `seed`.
    fn layouts(g: &Graph, seed: usize) -> std::collections::HashMap<String, Arc<WeightParts>> {
        let mut out = std::collections::HashMap::new();
        for (i, node) in g.nodes.iter().enumerate() {
            let (row_len, n_rows, matrix) = match &node.op {
                Op::Matmul { x, .. } => (g.nodes[*x].width, node.width, true),
                Op::GetRows { .. } => (node.width, 96, true),
                _ => (node.width, 1, false),
            };
            for name in node.op.weights() {
                let qtype = if matrix {
                    WEIGHT_QTYPES[(i + seed) % WEIGHT_QTYPES.len()]
                } else {
                    [QType::F32, QType::F16, QType::BF16][(i + seed) % 3]
                };
                // Every other matrix in two parts, as a backend splits a large one.
                let parts = if matrix && (i + seed) % 2 == 1 {
                    vec![(0, n_rows / 2), (n_rows / 2, n_rows - n_rows / 2)]
                } else {
                    vec![(0, n_rows)]
                };
                out.entry(name.to_string()).or_insert_with(|| {
                    Arc::new(WeightParts {
                        name: name.into(),
                        qtype,
                        row_len,
                        parts,
                    })
                });
            }
        }
        out
    }

    /// Every launch of the split schedule equals the one-function schedule's: each
    /// architecture's graph at decode, small and large prefill, every KV type, both
    /// reduction paths, flash on and off, and a grid limit small enough to fold.
    #[test]
    fn split_schedule_equals_the_one_function_schedule() {
        let mut checked = 0;
        for arch in Arch::ALL {
            let hp = hparams(arch);
            for (n_tokens, n_outputs) in [(1, 1), (2, 1), (7, 7), (40, 1), (70, 3)] {
                for flash in [false, true] {
                    let mut g = arch.build(crate::model::graph::Builder::new(&hp, n_tokens, n_outputs));
                    for node in &mut g.nodes {
                        if let Op::Attention { flash: f, .. } = &mut node.op {
                            *f = flash;
                        }
                    }
                    for seed in 0..2 {
                        let w = layouts(&g, seed);
                        let weight = |name: &str| w.get(name).cloned();
                        for kv in [KvType::F32, KvType::F16, KvType::Q8_0] {
                            for subgroups in [false, true] {
                                for maxg in [3, 65535] {
                                    let a = schedule(&g, &weight, kv, subgroups, maxg).unwrap();
                                    let b = schedule_old(&g, &weight, kv, subgroups, maxg).unwrap();
                                    assert_eq!(a.stages.len(), b.stages.len());
                                    for (i, (x, y)) in a.stages.iter().zip(&b.stages).enumerate() {
                                        assert_eq!(x, y, "{} stage {i}", arch.name());
                                    }
                                    assert_eq!(a.act_bytes, b.act_bytes);
                                    assert_eq!(a.n_tokens, b.n_tokens);
                                    assert_eq!(a.ropes, b.ropes);
                                    assert_eq!((a.result, a.result_bytes), (b.result, b.result_bytes));
                                    assert_eq!(a.argmax, b.argmax);
                                    checked += a.stages.len();
                                }
                            }
                        }
                    }
                }
            }
        }
        assert!(checked > 10_000, "{checked} stages");
    }
}
