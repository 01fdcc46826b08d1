//! A graph as GPU work, once per shape and the same for every GPU backend: activation buffers
//! assigned by liveness (`backend::alloc`, as `cpu::compile` assigns them), and per node the
//! kernel launches — variant, parameter struct, the buffers bound in order, the workgroup
//! counts — from one function per op family: `matmul` (get_rows, quantize_act, the matmuls),
//! `norm`, `attention` (rope, kv_store, attention), `elementwise` (with slice), and here the output copy
//! and argmax. The wgpu backend turns a schedule into bind groups, the CUDA backend into launch
//! parameters; the kernels of both read the same words from the same bindings.

mod attention;
mod elementwise;
mod matmul;
mod moe;
mod norm;

pub use attention::ATTN_TOKENS;

use std::sync::Arc;

use super::kernels::{Kernel, Variant};
use super::params::{ArgmaxParams, AttentionParams, KernelParams, MatmulParams};
use crate::backend::alloc::Liveness;
use crate::backend::KvType;
use crate::model::graph::ROPE_FREQS;
use crate::model::{Graph, Model, Node, Op, Rope};
use crate::quant::QType;

/// Token counts up to this use `matmul_vec` (one workgroup per row and token); more use the
/// tiled `matmul`.
pub const VEC_MAX_TOKENS: usize = 2;

/// A resident weight as the schedule sees it: its rows, split into parts where a backend
/// cannot bind the whole tensor at once.
#[derive(Clone, Debug, PartialEq)]
pub struct WeightParts {
    pub name: Arc<str>,
    pub qtype: QType,
    pub row_len: usize,
    /// (first row, rows) per part; one part covering every row where nothing is split.
    pub parts: Vec<(usize, usize)>,
}

/// What a binding points at.
#[derive(Clone, Debug, PartialEq)]
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
#[derive(Clone, Debug, PartialEq)]
pub struct Launch {
    pub variant: Variant,
    /// The kernel's parameter struct (`gpu::params`) as words.
    pub params: [u32; 16],
    /// Bindings 1.. in order (binding 0 holds `params`).
    pub res: Vec<Res>,
    /// Workgroup counts (CUDA grid).
    pub groups: [u32; 3],
}

impl Launch {
    /// The multiply-adds this launch does, roughly, as (fixed, per position of context): what
    /// bounds the GPU work of one submit. The attention's share grows with the context, which
    /// only the step knows.
    pub fn work(&self) -> (u64, u64) {
        let groups: u64 = self.groups.iter().map(|&g| g as u64).product();
        match self.variant.kernel {
            Kernel::MatmulVec | Kernel::Matmul => {
                let p = MatmulParams::from_words(&self.params);
                (p.k as u64 * p.rows as u64 * p.n as u64, 0)
            }
            // One row of y per (token, slot): workgroup z.
            Kernel::MatmulVecId => {
                let p = MatmulParams::from_words(&self.params);
                (p.k as u64 * p.rows as u64 * self.groups[2] as u64, 0)
            }
            Kernel::Attention => {
                let p = AttentionParams::from_words(&self.params);
                (0, groups * (p.head_dim + p.head_dim_v) as u64)
            }
            k => (groups * k.threads() as u64, 0),
        }
    }
}

#[derive(Debug, PartialEq)]
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
    /// The buffer of every node (the key's kept node's is never reused).
    pub node_buf: Vec<usize>,
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

/// The state of one scheduling pass, shared by the op families.
struct Builder<'a> {
    g: &'a Graph,
    weight: &'a dyn Fn(&str) -> Option<Arc<WeightParts>>,
    kv: KvType,
    subgroups: bool,
    /// The device's limit on workgroups per grid dimension.
    maxg: u32,
    live: Liveness,
    /// Quantized activations for the matmuls (`quantize_act`): one scratch buffer, and which
    /// node's rows it holds in which format, so Q/K/V or gate/up quantize their input once.
    scratch: Option<usize>,
    scratch_holds: Option<(usize, QType)>,
    ropes: Vec<Rope>,
    stages: Vec<Stage>,
    /// The nodes reading each node.
    readers: Vec<Vec<usize>>,
    /// Nodes an earlier launch already computed, in the buffer given (an `Add` fused into the
    /// matmul before it).
    done_in: Vec<Option<usize>>,
}

impl Builder<'_> {
    /// The residual add a matmul's output can be accumulated into: `(add, residual)` where node
    /// `i`'s only reader is `add = i + residual` and the residual is dead after it, so the
    /// matmul writes `y += x · W` into the residual's buffer (one launch and one buffer fewer;
    /// bit for bit the same sum). Not where the matmul is the node the graph keeps.
    fn residual_add(&self, i: usize) -> Option<(usize, usize)> {
        let g = self.g;
        if !matches!(g.nodes[i].op, Op::Matmul { .. }) || g.key.keep == Some(i) || g.result == i {
            return None;
        }
        let &[a] = self.readers[i].as_slice() else {
            return None;
        };
        let Op::Add { a: x, b: y } = g.nodes[a].op else {
            return None;
        };
        let r = if x == i { y } else { x };
        let dead_after = self.live.last_use(r) == a && self.readers[r].iter().all(|&j| j < i || j == a);
        let kept = g.key.keep == Some(r) || g.result == r;
        (r != i && dead_after && !kept && g.nodes[r].width == g.nodes[i].width).then_some((a, r))
    }

    fn weight(&self, name: &str) -> Result<Arc<WeightParts>, String> {
        (self.weight)(name).ok_or_else(|| format!("{name} is not resident"))
    }

    /// The buffer of `node`'s `k`-th input.
    fn inp(&self, node: &Node, k: usize) -> Res {
        Res::Act(self.live.buf_of[node.op.inputs()[k]])
    }

    /// One invocation per element of `node`, `wg` per workgroup, folded into (x, y).
    fn linear(&self, node: &Node, wg: u64) -> [u32; 3] {
        fold(((node.rows * node.width) as u64).div_ceil(wg), self.maxg)
    }

    /// `Output`: the last `node.rows` rows of its input, copied.
    fn output(&self, node: &Node, x: usize, out: usize) -> Stage {
        let src = &self.g.nodes[x];
        Stage::Copy {
            src: self.live.buf_of[x],
            src_offset: ((src.rows - node.rows) * node.width * 4) as u64,
            dst: out,
            size: (node.rows * node.width * 4) as u64,
        }
    }
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
    let mut b = Builder {
        g,
        weight,
        kv,
        subgroups,
        maxg: max_groups,
        live: Liveness::new(g),
        scratch: None,
        scratch_holds: None,
        ropes: Vec::new(),
        stages: Vec::with_capacity(g.nodes.len()),
        readers: vec![Vec::new(); g.nodes.len()],
        done_in: vec![None; g.nodes.len()],
    };
    for (i, node) in g.nodes.iter().enumerate() {
        for j in node.op.inputs() {
            b.readers[j].push(i);
        }
    }
    for (i, node) in g.nodes.iter().enumerate() {
        if let Some(buf) = b.done_in[i] {
            b.live.place_at(g, i, buf);
            b.stages.push(Stage::Compute {
                kind: format!("{} (fused)", node.op.kind()),
                launches: Vec::new(),
            });
            continue;
        }
        let fused = b.residual_add(i);
        let out = match fused {
            Some((a, r)) => {
                let buf = b.live.buf_of[r];
                b.done_in[a] = Some(buf);
                b.live.place_at(g, i, buf)
            }
            None => b.live.place(g, i, (node.rows * node.width * 4) as u64),
        };
        let stage = match &node.op {
            Op::GetRows { .. } | Op::Matmul { .. } => b.matmul(node, out, fused.is_some())?,
            Op::RmsNorm { .. } | Op::HeadNorm { .. } | Op::HeadNormPlain { .. } => b.norm(i, node, out)?,
            Op::Rope { .. } | Op::Attention { .. } => b.attention(node, out)?,
            Op::AddBias { .. }
            | Op::Add { .. }
            | Op::Mul { .. }
            | Op::Swiglu { .. }
            | Op::Geglu { .. }
            | Op::Scale { .. }
            | Op::Softcap { .. }
            | Op::ScaleBy { .. }
            | Op::Slice { .. } => b.elementwise(node, out)?,
            Op::Output { x } => b.output(node, *x, out),
            Op::MoeRoute { .. }
            | Op::MatmulId { .. }
            | Op::AddBiasId { .. }
            | Op::MoeSum { .. }
            | Op::SwigluOai { .. }
            | Op::SigmoidGate { .. } => b.moe(node, out)?,
        };
        b.stages.push(stage);
    }
    let result = b.live.buf_of[g.result];
    let n_out = g.nodes[g.result].rows;
    let n_vocab = g.nodes[g.result].width;
    let argmax = Launch {
        variant: Variant::new(Kernel::Argmax),
        params: ArgmaxParams {
            n: n_vocab as u32,
            offset: ((n_out - 1) * n_vocab) as u32,
            ..Default::default()
        }
        .words(),
        res: vec![Res::Logits, Res::ArgmaxOut],
        groups: [1, 1, 1],
    };
    Ok(Schedule {
        stages: b.stages,
        act_bytes: b.live.sizes,
        n_tokens: g.key.n_tokens,
        ropes: b.ropes,
        node_buf: b.live.buf_of,
        result,
        result_bytes: (n_out * n_vocab * 4) as u64,
        argmax,
    })
}

/// The cos/sin table a `RopeTable` binding holds for tokens at positions `pos` (one per token,
/// `Step::pos`): `[n][n_rot / 2]` (cos, sin) pairs, computed by the CPU backend's own code (with
/// the model's frequency factors where the RoPE has them) so every backend rotates by the same
/// values. A temperature (`Rope::temp`, Q of Mistral 3) multiplies each token's pairs: the
/// rotation then scales by it (the CPU rounds the rotation and the scale apart).
pub fn rope_table(model: &Model, rope: &Rope, pos: &[u32]) -> crate::Result<Vec<f32>> {
    let factors = match rope.freq_factors {
        true => Some(model.weight(ROPE_FREQS)?.to_f32()?),
        false => None,
    };
    let mut table: Vec<f32> = Vec::with_capacity(pos.len() * rope.n_rot);
    let mut cs = Vec::new();
    for &p in pos {
        crate::backend::cpu::ops::rope_cache(p as usize, rope, factors.as_deref(), &mut cs);
        let f = rope.temp.map_or(1.0, |t| t.factor(p));
        table.extend(cs.iter().flat_map(|&(c, s)| [c * f, s * f]));
    }
    Ok(table)
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

    /// A matmul whose output only feeds a residual add accumulates into the residual's buffer
    /// and the add launches nothing; where the residual is read again after the add, or the
    /// matmul is the kept node, both run as they are.
    #[test]
    fn a_residual_add_is_fused_into_its_matmul_only_where_the_residual_dies() {
        let layout = |name: &str| {
            Some(Arc::new(WeightParts {
                name: name.into(),
                qtype: QType::F32,
                row_len: 64,
                parts: vec![(0, 64)],
            }))
        };
        let add = |a, b| node("add", Op::Add { a, b }, 64);
        let run = |nodes: Vec<Node>, keep: Option<usize>| {
            let mut key = crate::model::GraphKey::new(3, 3);
            key.keep = keep;
            let g = Graph {
                key,
                result: nodes.len() - 1,
                nodes,
            };
            let s = schedule(&g, &layout, KvType::F16, false, 65535).unwrap();
            let launches: Vec<Vec<(Kernel, u32, Vec<Res>)>> = s
                .stages
                .iter()
                .map(|st| match st {
                    Stage::Compute { launches, .. } => launches
                        .iter()
                        .map(|l| (l.variant.kernel, MatmulParams::from_words(&l.params).acc, l.res.clone()))
                        .collect(),
                    Stage::Copy { .. } => Vec::new(),
                })
                .collect();
            (launches, s.node_buf)
        };
        let emb = || node("emb", Op::GetRows { weight: "emb".into() }, 64);
        let pre = || node("pre", Op::Scale { x: 0, s: 0.5 }, 64);
        let (l, bufs) = run(vec![emb(), pre(), mm(1, "w", 64), add(2, 0), mm(3, "w2", 64)], None);
        assert_eq!(
            (l[2].len(), l[2][0].0),
            (1, Kernel::Matmul),
            "3 tokens: the tiled matmul"
        );
        assert_eq!(l[2][0].1, 1, "the matmul accumulates");
        assert_eq!(l[2][0].2[2], Res::Act(bufs[0]), "into the residual's buffer");
        assert!(l[3].is_empty(), "the add launches nothing");
        assert_eq!(bufs[3], bufs[0]);
        // Not fused: the residual read after the add, the matmul kept (traced), the matmul
        // reading the residual itself (it would overwrite its own input).
        for (nodes, keep, at) in [
            (vec![emb(), pre(), mm(1, "w", 64), add(2, 0), add(3, 0)], None, 2),
            (
                vec![emb(), pre(), mm(1, "w", 64), add(2, 0), mm(3, "w2", 64)],
                Some(2),
                2,
            ),
            (vec![emb(), mm(0, "w", 64), add(1, 0), mm(2, "w2", 64)], None, 1),
        ] {
            let (l, _) = run(nodes, keep);
            assert_eq!((l[at][0].1, l[at + 1].len()), (0, 1), "{keep:?} {at}");
        }
    }

    /// A KV-shared layer stores nothing and its attention binds the source layer's cache; the
    /// writing layer stores into and reads its own.
    #[test]
    fn a_kv_shared_layer_reads_its_source_cache_and_stores_nothing() {
        let layout = |name: &str| {
            Some(Arc::new(WeightParts {
                name: name.into(),
                qtype: QType::F32,
                row_len: 128,
                parts: vec![(0, 64)],
            }))
        };
        let attn = |layer, kv_from| crate::model::Attn {
            scale: 1.0,
            kv_from,
            ..crate::model::Attn::new(layer, 2, 1, 64)
        };
        let at = |a| Op::Attention {
            q: 0,
            k: 0,
            v: 0,
            attn: a,
        };
        let nodes = vec![
            node("emb", Op::GetRows { weight: "emb".into() }, 128),
            node("blk.0.attn", at(attn(0, None)), 128),
            node("blk.1.attn", at(attn(1, Some(0))), 128),
        ];
        let g = Graph {
            key: crate::model::GraphKey::new(3, 3),
            result: nodes.len() - 1,
            nodes,
        };
        let s = schedule(&g, &layout, KvType::F16, false, 65535).unwrap();
        let launches: Vec<Vec<(Kernel, Vec<Res>)>> = s.stages[1..]
            .iter()
            .map(|st| match st {
                Stage::Compute { launches, .. } => launches.iter().map(|l| (l.variant.kernel, l.res.clone())).collect(),
                Stage::Copy { .. } => Vec::new(),
            })
            .collect();
        let kinds = |i: usize| launches[i].iter().map(|l| l.0).collect::<Vec<_>>();
        assert_eq!(kinds(0), [Kernel::KvStore, Kernel::Attention]);
        assert_eq!(kinds(1), [Kernel::Attention]);
        assert_eq!(launches[0][0].1[3..5], [Res::Kc(0), Res::Vc(0)]);
        for l in [&launches[0][1], &launches[1][0]] {
            assert_eq!(l.1[2..4], [Res::Kc(0), Res::Vc(0)]);
        }
    }
}
