//! A graph as GPU work, once per shape and the same for every GPU backend: activation buffers
//! assigned by liveness (as `cpu::compile` does), and per node the kernel launches — variant,
//! 16 parameter words, the buffers bound in order, the workgroup counts. The wgpu backend turns
//! a schedule into bind groups, the CUDA backend into launch parameters; the kernels of both
//! read the same words from the same bindings.

use std::sync::Arc;

use super::kernels::{act_qtype, Kernel, Variant};
use crate::backend::KvType;
use crate::model::{Graph, Op, Rope, RopeMode};
use crate::quant::QType;

/// Token counts up to this use `matmul_vec` (one workgroup per row and token); more use the
/// tiled `matmul`.
pub const VEC_MAX_TOKENS: usize = 2;

/// Rows per `matmul_vec` workgroup: 64 invocations, 8 per row.
const VEC_ROWS_PER_WG: u32 = 8;

/// A resident weight as the schedule sees it: its rows, split into parts where a backend
/// cannot bind the whole tensor at once.
#[derive(Clone, Debug)]
pub struct WeightParts {
    pub name: Arc<str>,
    pub qtype: QType,
    pub row_len: usize,
    /// (first row, rows) per part; one part covering every row where nothing is split.
    pub parts: Vec<(usize, usize)>,
}

/// What a binding points at.
#[derive(Clone, Debug)]
pub enum Res {
    /// `{pos0, n_tokens, 0, 0}`, written per forward.
    Step,
    /// The token ids.
    Ids,
    /// An activation buffer.
    Act(usize),
    /// Part `.1` of a weight.
    Weight(Arc<WeightParts>, usize),
    /// The cos/sin table of the schedule's `ropes[i]`: `[n_tokens][n_rot / 2]` pairs.
    RopeTable(usize),
    /// Layer `l`'s K or V cache.
    Kc(usize),
    Vc(usize),
    /// The result (logits) buffer.
    Logits,
    /// The argmax id (one u32).
    ArgmaxOut,
}

/// One kernel launch.
#[derive(Clone, Debug)]
pub struct Launch {
    pub variant: Variant,
    pub params: [u32; 16],
    /// Bindings 1.. in order (binding 0 holds `params`).
    pub res: Vec<Res>,
    /// Workgroup counts (CUDA grid).
    pub groups: [u32; 3],
}

pub enum Stage {
    /// One node's launches. `kind` groups the profile (`matmul/q4_1`, `attention`).
    Compute { kind: String, launches: Vec<Launch> },
    /// `Output`: the kept rows, copied.
    Copy {
        src: usize,
        src_offset: u64,
        dst: usize,
        size: u64,
    },
}

pub struct Schedule {
    pub stages: Vec<Stage>,
    /// Bytes of each activation buffer.
    pub act_bytes: Vec<u64>,
    pub n_tokens: usize,
    /// Every distinct RoPE of the graph; `Res::RopeTable(i)` is `ropes[i]`'s table.
    pub ropes: Vec<Rope>,
    /// The logits node's buffer and size in bytes.
    pub result: usize,
    pub result_bytes: u64,
    /// argmax of the last output row (greedy steps read back its 4 bytes).
    pub argmax: Launch,
}

/// Bytes per token of `quantize_act`'s output for rows of `k`: the rounded values, then (q8_1)
/// one correction per 32-element block.
pub fn act_bytes(k: usize) -> u64 {
    (k * 4 + k / 32 * 4) as u64
}

/// `n` workgroups as (x, y) with x within the per-dimension limit.
fn fold(n: u64, max: u32) -> [u32; 3] {
    let x = n.clamp(1, max as u64);
    [x as u32, n.div_ceil(x).max(1) as u32, 1]
}

fn words(v: &[u32]) -> [u32; 16] {
    let mut p = [0u32; 16];
    p[..v.len()].copy_from_slice(v);
    p
}

/// Schedules `g`. `weight` gives each resident weight's layout; `subgroups` picks the subgroup
/// variants (wgpu); `max_groups` is the device's limit on workgroups per grid dimension.
pub fn schedule(
    g: &Graph,
    weight: &dyn Fn(&str) -> Option<Arc<WeightParts>>,
    kv: KvType,
    subgroups: bool,
    max_groups: u32,
) -> Result<Schedule, String> {
    let maxg = max_groups;
    let n = g.key.n_tokens;
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

/// The cos/sin table a `RopeTable` binding holds for tokens at `pos0..pos0 + n`:
/// `[n][n_rot / 2]` (cos, sin) pairs, computed by the CPU backend's own code so every backend
/// rotates by the same values.
pub fn rope_table(rope: &Rope, pos0: usize, n: usize) -> Vec<f32> {
    let mut table: Vec<f32> = Vec::with_capacity(n * rope.n_rot);
    let mut cs = Vec::new();
    for i in 0..n {
        crate::backend::cpu::ops::rope_cache(pos0 + i, rope, &mut cs);
        table.extend(cs.iter().flat_map(|&(c, s)| [c, s]));
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Node;

    fn node(name: &str, op: Op, width: usize) -> Node {
        Node {
            name: name.into(),
            op,
            width,
            rows: 3,
        }
    }

    fn mm(x: usize, weight: &str, width: usize) -> Node {
        node(
            weight,
            Op::Matmul {
                x,
                weight: weight.into(),
            },
            width,
        )
    }

    /// Each matmul over quantized weights reads its input rounded by `quantize_act`, which runs
    /// once per (input, format): q4_K and q6_K share q8_K, q5_0 needs q8_0, f16 weights none.
    #[test]
    fn matmul_inputs_are_quantized_once_per_input_and_format() {
        let qtype = |name: &str| match name {
            "emb" | "w_f16" => QType::F16,
            "w_q4k" | "w_q4k2" => QType::Q4K,
            "w_q6k" => QType::Q6K,
            "w_q5_0" => QType::Q5_0,
            _ => QType::Q4_1,
        };
        let layout = |name: &str| {
            Some(Arc::new(WeightParts {
                name: name.into(),
                qtype: qtype(name),
                row_len: 512,
                parts: vec![(0, 512)],
            }))
        };
        let nodes = vec![
            node("emb", Op::GetRows { weight: "emb".into() }, 512),
            mm(0, "w_q4k", 512),
            mm(0, "w_q6k", 512),
            mm(0, "w_q5_0", 512),
            mm(0, "w_q4k2", 512),
            mm(0, "w_f16", 512),
            mm(5, "w_q4_1", 512),
        ];
        let g = Graph {
            key: crate::model::GraphKey::new(3, 3),
            result: nodes.len() - 1,
            nodes,
        };
        let s = schedule(&g, &layout, KvType::F16, false, 65535).unwrap();
        let (mut seen, mut inputs, mut scratch) = (Vec::new(), Vec::new(), None);
        for st in &s.stages {
            if let Stage::Compute { launches, .. } = st {
                for l in launches {
                    let buf = |i: usize| match l.res[i] {
                        Res::Act(b) => Some(b),
                        _ => None,
                    };
                    match l.variant.kernel {
                        Kernel::QuantizeAct => {
                            seen.push(l.variant.qtype.unwrap());
                            assert!(scratch.is_none() || scratch == buf(1), "one scratch buffer");
                            scratch = buf(1);
                        }
                        Kernel::Matmul => inputs.push(buf(1) == scratch),
                        _ => {}
                    }
                }
            }
        }
        assert_eq!(seen, [QType::Q8K, QType::Q8_0, QType::Q8K, QType::Q8_1]);
        // The quantized matmuls read the scratch, the f16 one its input.
        assert_eq!(inputs, [true, true, true, true, false, true]);
        assert!(s.act_bytes[scratch.unwrap()] >= 3 * act_bytes(512));
    }
}
