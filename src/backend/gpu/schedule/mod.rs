//! A graph as GPU work, once per shape and the same for every GPU backend: activation buffers
//! assigned by liveness (`backend::alloc`, as `cpu::compile` assigns them), and per node the
//! kernel launches — variant, parameter struct, the buffers bound in order, the workgroup
//! counts — from one function per op family: `matmul` (get_rows, quantize_act, the matmuls),
//! `pack` (the decode matmuls over one pack's weights as one launch), `norm`, `attention`
//! (rope, kv_store, attention), `elementwise` (with slice), and here the output copy and argmax. The wgpu backend turns a schedule into bind groups, the CUDA backend into launch
//! parameters; the kernels of both read the same words from the same bindings.

mod attention;
mod elementwise;
mod matmul;
mod moe;
mod norm;
mod pack;

pub use attention::{split_span, ATTN_TOKENS, SPLIT_SPAN};

use std::sync::Arc;

use super::kernels::Variant;
use super::params::{ArgmaxParams, KernelParams};
use super::shape::DeviceShape;
use super::table::Kernel;
use crate::backend::alloc::Liveness;
use crate::backend::KvType;
use crate::model::{Graph, Node, Op, Rope};
use crate::quant::QType;

/// Token counts up to this use `matmul_vec` (a workgroup per 4 rows, every token in it: a decode
/// step of up to 8 sequences reads each weight row once, as llama.cpp's MMVQ); more use the
/// tiled `matmul`.
pub const VEC_MAX_TOKENS: usize = 8;

/// Without matrix-unit tiles (`DeviceShape::matrix_tiles`), token counts up to this also use
/// `matmul_vec` where the 32 × 32 tiles would be fewer than the compute units (a batched decode
/// step against a 4,096-row weight is 128 tiles): every workgroup still reads its rows from
/// memory once, the later passes over them from the cache.
pub const VEC_WIDE_TOKENS: usize = 64;

/// The most slices `argmax` splits a row into (its second stage reduces them in one workgroup).
pub const ARGMAX_MAX_PARTS: u32 = 1024;

/// Bytes of the `Res::ArgmaxOut` buffer: the id, then a (value, id) pair per slice.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub const ARGMAX_OUT_BYTES: u64 = 4 + 8 * ARGMAX_MAX_PARTS as u64;

/// The slices `argmax` takes a row of `n` logits in: about 1,024 logits each (4 per invocation),
/// more where that leaves the device part-empty, never under 256 each; 1 (one workgroup, one
/// launch) for a row of one slice.
fn argmax_parts(n: usize, sms: u32) -> u32 {
    let most = n.div_ceil(256).min(ARGMAX_MAX_PARTS as usize) as u32;
    (n.div_ceil(1024) as u32).max(sms).min(most).max(1)
}

/// A resident weight as the schedule sees it: its rows, split into parts where a backend
/// cannot bind the whole tensor at once.
#[derive(Clone, Debug, PartialEq)]
pub struct WeightParts {
    pub name: Arc<str>,
    pub qtype: QType,
    pub row_len: usize,
    /// (first row, rows) per part; one part covering every row where nothing is split.
    pub parts: Vec<(usize, usize)>,
    /// Where the weight lies in a pack (`gpu::packs`), if it was uploaded in one.
    pub pack: Option<PackSlot>,
}

/// A pack member's place: the pack's first member, this one's index among the members, and
/// its byte offset from the first member's start.
#[derive(Clone, Debug, PartialEq)]
pub struct PackSlot {
    pub first: Arc<str>,
    pub index: usize,
    pub offset: u64,
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
    /// The whole pack whose first member this is: from its start to the end of the last.
    Pack(Arc<WeightParts>),
    /// The cos/sin table of the schedule's `ropes[i]`: `[n_tokens][n_rot / 2]` pairs.
    RopeTable(usize),
    /// Layer `l`'s K or V cache.
    Kc(usize),
    Vc(usize),
    /// The result (logits) buffer.
    Logits,
    /// The argmax id (one u32).
    ArgmaxOut,
    /// The split-KV attention's partial results (`attention_split` or `attention_tile` writes,
    /// `attention_reduce` reads): one buffer of `Schedule::split_bytes` every layer reuses.
    Split,
    /// A read-write binding the launch never touches (a fused step it does not take): a
    /// small buffer of its own, so it conflicts with no other binding.
    Unused,
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
    /// The steps it runs in.
    pub when: When,
}

/// Which steps a launch runs in. A step whose longest context reaches the backend's split span
/// (`split_span` of its SMs by default) takes the split-KV attention (`attention_split` or `attention_tile`,
/// then `attention_reduce`: `Long`) instead of the one-workgroup-per-head kernel (`Short`); every
/// other launch runs always. Both sets are in the plan, so a captured step stays fixed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum When {
    Always,
    Short,
    Long,
}

impl When {
    /// Whether the launch runs in a step that is `long` (its context reaches the split span).
    pub fn runs(self, long: bool) -> bool {
        match self {
            When::Always => true,
            When::Short => !long,
            When::Long => long,
        }
    }
}

impl Launch {
    /// The multiply-adds this launch does, roughly, as (fixed, per position of context): what
    /// bounds the GPU work of one submit. The attention's share grows with the context, which
    /// only the step knows.
    #[cfg(any(feature = "wgpu", feature = "cuda"))]
    pub fn work(&self) -> (u64, u64) {
        use super::params::{AttentionParams, AttentionTileParams, MatmulPackParams, MatmulParams};
        let groups: u64 = self.groups.iter().map(|&g| g as u64).product();
        match self.variant.kernel {
            Kernel::MatmulVec | Kernel::Matmul => {
                let p = MatmulParams::from_words(&self.params);
                (p.k as u64 * p.rows as u64 * p.n as u64, 0)
            }
            Kernel::MatmulVecPack => {
                let p = MatmulPackParams::from_words(&self.params);
                (p.k as u64 * (p.rows0 + p.rows1 + p.rows2) as u64 * p.n as u64, 0)
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
            // hg query heads per workgroup, the ranges together one context.
            Kernel::AttentionSplit => {
                let p = AttentionParams::from_words(&self.params);
                let heads = (self.groups[0] * p.hg * self.groups[2]) as u64;
                (0, heads * (p.head_dim + p.head_dim_v) as u64)
            }
            // hg query heads of tq tokens per workgroup.
            Kernel::AttentionTile => {
                let p = AttentionTileParams::from_words(&self.params);
                let heads = (self.groups[0] * p.hg * self.groups[2] * p.tq) as u64;
                (0, heads * (p.head_dim + p.head_dim_v) as u64)
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

// What a schedule holds beyond its stages is read by the GPU backends alone.
#[cfg_attr(not(any(feature = "wgpu", feature = "cuda")), allow(dead_code))]
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
    /// argmax of the last output row (greedy steps read back its 4 bytes): one launch, or the
    /// slices' and then their reduction's (`argmax_parts`).
    pub argmax: Vec<Launch>,
    /// Bytes of the `Res::Split` buffer (0 where no launch binds it).
    pub split_bytes: u64,
    /// The node each stage computes (a `quantize_act` stage: the node whose matmul reads it).
    pub stage_node: Vec<usize>,
}

/// Bytes per token of `quantize_act`'s output for rows of `k`: the rounded values, then (q8_1)
/// one correction per 32-element block, then the packed form the int8 matvec reads (a byte per
/// value and an f32 scale per 32-element block) from a 16-byte boundary, which the last 16
/// bytes leave room for (common.wgsl's `act_q_base`, common.cuh's).
pub fn act_bytes(k: usize) -> u64 {
    (k * 4 + k / 32 * 4 + k + k / 32 * 4 + 16) as u64
}

/// The index of activation format `a` among `quantize_act`'s (`ACT_QTYPES`): what a fused
/// rounding's `act` parameter holds, plus one.
fn act_index(a: QType) -> Result<u32, String> {
    crate::backend::gpu::kernels::ACT_QTYPES
        .iter()
        .position(|&q| q == a)
        .map(|i| i as u32)
        .ok_or_else(|| format!("{a}: no activation format"))
}

/// `n` workgroups as (x, y) with x within the per-dimension limit.
fn fold(n: u64, max: u32) -> [u32; 3] {
    let x = n.clamp(1, max as u64);
    [x as u32, n.div_ceil(x).max(1) as u32, 1]
}

/// The state of one scheduling pass, shared by the op families.
struct Pass<'a> {
    g: &'a Graph,
    weight: &'a dyn Fn(&str) -> Option<Arc<WeightParts>>,
    kv: KvType,
    subgroups: bool,
    /// The device the launches are sized for.
    shape: DeviceShape,
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
    /// Ropes folded into the attention reading them (its q, or the K its store writes), and RMS
    /// norms folded into the pack of matmuls reading them: the node computes nothing, shares
    /// its input's buffer, and the reader rotates or normalizes as it reads.
    folded: Vec<bool>,
    /// The largest `Res::Split` any attention needs.
    split_bytes: u64,
}

impl Pass<'_> {
    /// Whether node `i` is one the graph keeps (the result, or the key's traced node): its
    /// value must exist as it is, so it fuses into nothing.
    fn kept(&self, i: usize) -> bool {
        self.g.key.keep == Some(i) || self.g.result == i
    }

    /// The residual add a matmul's output can be accumulated into: `(add, residual)` where node
    /// `i`'s only reader is `add = i + residual` and the residual is dead after it, so the
    /// matmul writes `y += x · W` into the residual's buffer (one launch and one buffer fewer;
    /// bit for bit the same sum). Not where the matmul is the node the graph keeps.
    fn residual_add(&self, i: usize) -> Option<(usize, usize)> {
        let g = self.g;
        if !matches!(g.nodes[i].op, Op::Matmul { .. }) || self.kept(i) {
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
        let kept = self.kept(r);
        (r != i && dead_after && !kept && g.nodes[r].width == g.nodes[i].width).then_some((a, r))
    }

    /// The input of rope node `i` where the rope folds into its reader: its only reader is an attention taking it
    /// as q, or as the K it stores (not a KV-shared layer), with the rope's head width; it is
    /// not a kept node; and its input is read by nothing else (the input's buffer then stays
    /// live until the attention).
    fn folds_rope(&self, i: usize) -> Option<usize> {
        let g = self.g;
        let Op::Rope { x, head_dim, .. } = g.nodes[i].op else {
            return None;
        };
        let &[a] = self.readers[i].as_slice() else {
            return None;
        };
        let Op::Attention { q, k, attn, .. } = &g.nodes[a].op else {
            return None;
        };
        let role = (*q == i && *k != i) || (*k == i && *q != i && attn.kv_from.is_none());
        let kept = self.kept(i) || self.kept(x);
        (role && !kept && attn.head_dim == head_dim && self.readers[x] == [i]).then_some(x)
    }

    /// The index of `rope`'s table among the schedule's, added where new.
    fn rope_index(&mut self, rope: &Rope) -> usize {
        match self.ropes.iter().position(|r| r == rope) {
            Some(ri) => ri,
            None => {
                self.ropes.push(*rope);
                self.ropes.len() - 1
            }
        }
    }

    /// The bias add a matmul's output can take in its own store: `(add_bias, bias)` where node
    /// `i`'s only reader adds an f32 bias of its width (one part) to it, and the matmul is not a
    /// kept node. Bit for bit the same sum.
    fn bias_add(&self, i: usize) -> Option<(usize, Arc<WeightParts>)> {
        let g = self.g;
        if !matches!(g.nodes[i].op, Op::Matmul { .. }) || self.kept(i) {
            return None;
        }
        let &[a] = self.readers[i].as_slice() else {
            return None;
        };
        let Op::AddBias { x, bias } = &g.nodes[a].op else {
            return None;
        };
        let b = (self.weight)(bias)?;
        (*x == i && b.qtype == QType::F32 && b.row_len == g.nodes[i].width && b.parts.len() == 1).then_some((a, b))
    }

    fn weight(&self, name: &str) -> Result<Arc<WeightParts>, String> {
        (self.weight)(name).ok_or_else(|| format!("{name} is not resident"))
    }

    /// The buffer of `node`'s `k`-th input.
    fn inp(&self, node: &Node, k: usize) -> Res {
        Res::Act(self.live.buf_of[node.op.inputs()[k]])
    }

    /// One invocation per element of `node`, `kernel`'s threads per workgroup, folded into (x, y).
    fn linear(&self, node: &Node, kernel: Kernel) -> [u32; 3] {
        fold(
            ((node.rows * node.width) as u64).div_ceil(kernel.threads() as u64),
            self.maxg,
        )
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
/// variants (wgpu); `shape` is the device the launches are sized for.
pub fn schedule(
    g: &Graph,
    weight: &dyn Fn(&str) -> Option<Arc<WeightParts>>,
    kv: KvType,
    subgroups: bool,
    shape: &DeviceShape,
) -> Result<Schedule, String> {
    let mut b = Pass {
        g,
        weight,
        kv,
        subgroups,
        shape: *shape,
        maxg: shape.max_groups,
        live: Liveness::new(g),
        scratch: None,
        scratch_holds: None,
        ropes: Vec::new(),
        stages: Vec::with_capacity(g.nodes.len()),
        readers: vec![Vec::new(); g.nodes.len()],
        done_in: vec![None; g.nodes.len()],
        folded: vec![false; g.nodes.len()],
        split_bytes: 0,
    };
    for (i, node) in g.nodes.iter().enumerate() {
        for j in node.op.inputs() {
            b.readers[j].push(i);
        }
    }
    let mut stage_node = Vec::with_capacity(g.nodes.len());
    for (i, node) in g.nodes.iter().enumerate() {
        // The stages node i pushed (its quantize_act before its own) are its.
        stage_node.resize(b.stages.len(), i.saturating_sub(1));
        if let Some(buf) = b.done_in[i] {
            b.live.place_at(g, i, buf);
            b.stages.push(Stage::Compute {
                kind: format!("{} (fused)", node.op.kind()),
                launches: Vec::new(),
            });
            continue;
        }
        // A norm or rope its readers apply themselves: it shares its input's buffer.
        if let Some(x) = b.folds_norm(i).or_else(|| b.folds_rope(i)) {
            b.folded[i] = true;
            b.live.alias(i, x);
            b.stages.push(Stage::Compute {
                kind: format!("{} (fused)", node.op.kind()),
                launches: Vec::new(),
            });
            continue;
        }
        if let Some(run) = b.pack_run(i) {
            let stage = b.matmul_pack(&run)?;
            b.stages.push(stage);
            continue;
        }
        let fused = b.residual_add(i);
        let bias = fused.is_none().then(|| b.bias_add(i)).flatten();
        let out = match fused {
            Some((a, r)) => {
                let buf = b.live.buf_of[r];
                b.done_in[a] = Some(buf);
                b.live.place_at(g, i, buf)
            }
            None => b.live.place(g, i, (node.rows * node.width * 4) as u64),
        };
        if let Some((a, _)) = bias {
            b.done_in[a] = Some(out);
        }
        let stage = match &node.op {
            Op::GetRows { .. } | Op::Matmul { .. } => b.matmul(node, out, fused.is_some(), bias.map(|(_, w)| w))?,
            Op::RmsNorm { .. } | Op::HeadNorm { .. } | Op::HeadNormPlain { .. } => b.norm(i, node, out)?,
            Op::Rope { .. } | Op::Attention { .. } => b.attention(i, node, out)?,
            Op::AddBias { .. }
            | Op::Add { .. }
            | Op::Mul { .. }
            | Op::Swiglu { .. }
            | Op::Geglu { .. }
            | Op::Scale { .. }
            | Op::Softcap { .. }
            | Op::ScaleBy { .. }
            | Op::Slice { .. } => b.elementwise(i, node, out)?,
            Op::Output { x } => b.output(node, *x, out),
            Op::LayerNorm { .. } => b.layer_norm(node, out)?,
            Op::AddPosRows { .. } | Op::Gelu { .. } => b.elementwise(i, node, out)?,
            Op::MoeRoute { .. }
            | Op::MatmulId { .. }
            | Op::AddBiasId { .. }
            | Op::MoeSum { .. }
            | Op::SwigluOai { .. }
            | Op::SigmoidGate { .. } => b.moe(node, out)?,
        };
        b.stages.push(stage);
    }
    stage_node.resize(b.stages.len(), g.nodes.len().saturating_sub(1));
    let result = b.live.buf_of[g.result];
    let n_out = g.nodes[g.result].rows;
    let n_vocab = g.nodes[g.result].width;
    let parts = argmax_parts(n_vocab, shape.sms);
    let argmax = (0..if parts > 1 { 2 } else { 1 })
        .map(|stage| Launch {
            variant: Variant::new(Kernel::Argmax),
            params: ArgmaxParams {
                n: n_vocab as u32,
                offset: ((n_out - 1) * n_vocab) as u32,
                parts,
                stage,
            }
            .words(),
            res: vec![Res::Logits, Res::ArgmaxOut],
            groups: [if stage == 0 { parts.max(1) } else { 1 }, 1, 1],
            when: When::Always,
        })
        .collect();
    Ok(Schedule {
        stages: b.stages,
        act_bytes: b.live.sizes,
        n_tokens: g.key.n_tokens,
        ropes: b.ropes,
        node_buf: b.live.buf_of,
        result,
        result_bytes: (n_out * n_vocab * 4) as u64,
        argmax,
        split_bytes: b.split_bytes,
        stage_node,
    })
}

/// The cos/sin table a `RopeTable` binding holds for tokens at positions `pos` (one per token,
/// `Step::pos`): `[n][n_rot / 2]` (cos, sin) pairs, computed by the CPU backend's own code (with
/// the model's frequency factors where the RoPE has them) so every backend rotates by the same
/// values. A temperature (`Rope::temp`, Q of Mistral 3) multiplies each token's pairs: the
/// rotation then scales by it (the CPU rounds the rotation and the scale apart).
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub fn rope_table(model: &crate::Model, rope: &Rope, pos: &[u32]) -> crate::Result<Vec<f32>> {
    use crate::model::graph::ROPE_FREQS;
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
    use crate::backend::gpu::params::{AttentionParams, MatmulParams};
    use crate::model::Node;

    /// A step's token count that takes the tiled matmul (on a device without matrix tiles,
    /// as `sched`'s).
    const TILED: usize = VEC_WIDE_TOKENS + 1;

    /// A vocabulary row spreads over the device in slices of 256 or more logits; a short row
    /// is one workgroup's; the slices never pass what the reduction takes.
    #[test]
    fn argmax_splits_long_rows_over_the_device() {
        assert_eq!(argmax_parts(128_256, 132), 132, "Llama 3: one slice per SM");
        assert_eq!(argmax_parts(262_144, 132), 256, "Gemma 3: 1,024 logits a slice");
        assert_eq!(argmax_parts(32_000, 132), 125, "Llama 2: 256 logits a slice");
        assert_eq!(argmax_parts(3_000, 1), 3);
        assert_eq!(argmax_parts(256, 132), 1);
        assert_eq!(argmax_parts(0, 132), 1);
        assert_eq!(argmax_parts(1 << 30, 132), ARGMAX_MAX_PARTS);
    }

    pub(super) fn node(name: &str, op: Op, width: usize) -> Node {
        Node {
            name: name.into(),
            op,
            width,
            rows: 3,
        }
    }

    pub(super) fn mm(x: usize, weight: &str, width: usize) -> Node {
        node(
            weight,
            Op::Matmul {
                x,
                weight: weight.into(),
            },
            width,
        )
    }

    /// Every weight of one type and row length, in one part of `rows` rows.
    fn uniform(qtype: QType, row_len: usize, rows: usize) -> impl Fn(&str) -> Option<Arc<WeightParts>> {
        move |name| {
            Some(Arc::new(WeightParts {
                name: name.into(),
                qtype,
                row_len,
                parts: vec![(0, rows)],
                pack: None,
            }))
        }
    }

    /// `nodes` (the last one the result) scheduled for `n_tokens` tokens, keeping `keep`.
    pub(super) fn sched(
        mut nodes: Vec<Node>,
        n_tokens: usize,
        keep: Option<usize>,
        layout: &dyn Fn(&str) -> Option<Arc<WeightParts>>,
    ) -> Schedule {
        let mut key = crate::model::GraphKey::new(n_tokens, n_tokens);
        key.keep = keep;
        for n in &mut nodes {
            n.rows = n_tokens;
        }
        let g = Graph {
            key,
            result: nodes.len() - 1,
            nodes,
        };
        schedule(&g, layout, KvType::F16, false, &DeviceShape::portable(32)).unwrap()
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
                pack: None,
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
        let s = sched(nodes, TILED, None, &layout);
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
        let layout = uniform(QType::F32, 64, 64);
        let add = |a, b| node("add", Op::Add { a, b }, 64);
        let run = |nodes: Vec<Node>, keep: Option<usize>| {
            let s = sched(nodes, TILED, keep, &layout);
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
            "past VEC_MAX_TOKENS: the tiled matmul"
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

    /// A matmul whose only reader adds an f32 bias adds it in its own store, and the add
    /// launches nothing; where the matmul is the kept node both run.
    #[test]
    fn a_bias_add_is_fused_into_its_matmul() {
        let layout = uniform(QType::F32, 64, 64);
        let run = |keep: Option<usize>| {
            let nodes = vec![
                node("emb", Op::GetRows { weight: "emb".into() }, 64),
                mm(0, "w", 64),
                node("biased", Op::AddBias { x: 1, bias: "b".into() }, 64),
                mm(2, "w2", 64),
            ];
            sched(nodes, TILED, keep, &layout)
        };
        let launches = |s: &Schedule, i: usize| match &s.stages[i] {
            Stage::Compute { launches, .. } => launches.clone(),
            Stage::Copy { .. } => Vec::new(),
        };
        let s = run(None);
        let mm1 = &launches(&s, 1)[0];
        assert_eq!(MatmulParams::from_words(&mm1.params).bias, 1);
        assert!(matches!(&mm1.res[3], Res::Weight(w, 0) if &*w.name == "b"));
        assert!(launches(&s, 2).is_empty(), "the bias add launches nothing");
        assert_eq!(s.node_buf[2], s.node_buf[1]);
        assert_eq!(launches(&s, 3)[0].res[1], Res::Act(s.node_buf[2]));
        let s = run(Some(1));
        assert_eq!(MatmulParams::from_words(&launches(&s, 1)[0].params).bias, 0);
        assert_eq!(launches(&s, 2)[0].variant.kernel, Kernel::AddBias);
    }

    /// A rope read only by the attention folds into it (q) or into its store (K): the rope
    /// launches nothing and shares its input's buffer; the attention rounds its output for the
    /// quantized matmul after it, which then quantizes nothing itself. A kept rope is launched.
    #[test]
    fn ropes_fold_into_the_attention_which_rounds_for_the_next_matmul() {
        let layout = uniform(QType::Q4_1, 128, 128);
        let rope = Rope::new(crate::model::RopeMode::Neox, 32, 10000.0, 1.0);
        let ro = |x, n_heads| Op::Rope {
            x,
            n_heads,
            head_dim: 64,
            rope,
        };
        let nodes = || {
            vec![
                node("emb", Op::GetRows { weight: "emb".into() }, 128),
                mm(0, "wq", 128),
                mm(0, "wk", 64),
                mm(0, "wv", 64),
                node("qr", ro(1, 2), 128),
                node("kr", ro(2, 1), 64),
                node(
                    "attn",
                    Op::Attention {
                        q: 4,
                        k: 5,
                        v: 3,
                        attn: crate::model::Attn::new(0, 2, 1, 64),
                    },
                    128,
                ),
                mm(6, "wo", 128),
            ]
        };
        let run = |keep: Option<usize>| sched(nodes(), 1, keep, &layout);
        let launches = |s: &Schedule| -> Vec<Vec<Launch>> {
            s.stages
                .iter()
                .filter_map(|st| match st {
                    Stage::Compute { launches, kind } if !kind.starts_with("quantize_act") => Some(launches.clone()),
                    Stage::Compute { .. } => None,
                    Stage::Copy { .. } => Some(Vec::new()),
                })
                .collect()
        };
        let s = run(None);
        let l = launches(&s);
        assert!(l[4].is_empty() && l[5].is_empty(), "the ropes launch nothing");
        assert_eq!((s.node_buf[4], s.node_buf[5]), (s.node_buf[1], s.node_buf[2]));
        let (store, attend) = (&l[6][0], &l[6][1]);
        assert_eq!(store.variant.kernel, Kernel::KvStore);
        let sp = crate::backend::gpu::params::KvStoreParams::from_words(&store.params);
        assert_eq!((sp.n_rot, sp.neox, sp.head_dim), (32, 1, 64));
        assert_eq!(store.res[1], Res::Act(s.node_buf[2]), "K read from the matmul's buffer");
        assert!(matches!(store.res[5], Res::RopeTable(_)));
        let ap = AttentionParams::from_words(&attend.params);
        assert_eq!((ap.n_rot, ap.neox), (32, 1));
        assert_eq!(
            attend.res[1],
            Res::Act(s.node_buf[1]),
            "q read from the matmul's buffer"
        );
        assert!(matches!(attend.res[6], Res::RopeTable(_)));
        assert_eq!(ap.act, 2, "rounded to q8_1 for the q4_1 matmul");
        // One quantize_act (for the emb rows); the output matmul reads what the attention rounded.
        let qa = s
            .stages
            .iter()
            .filter(|st| matches!(st, Stage::Compute { kind, .. } if kind.starts_with("quantize_act")))
            .count();
        assert_eq!(qa, 1);
        assert_eq!(l[7][0].res[1], attend.res[7]);
        // Kept: the rope runs, and the attention reads its output as it is.
        let s = run(Some(4));
        let l = launches(&s);
        assert_eq!(l[4].len(), 1);
        assert!(l[5].is_empty());
        let ap = AttentionParams::from_words(&l[6][1].params);
        assert_eq!(ap.n_rot, 0);
        assert_eq!(l[6][1].res[1], Res::Act(s.node_buf[4]));
    }

    /// A KV-shared layer stores nothing and its attention binds the source layer's cache; the
    /// writing layer stores into and reads its own.
    #[test]
    fn a_kv_shared_layer_reads_its_source_cache_and_stores_nothing() {
        let layout = uniform(QType::F32, 128, 64);
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
        let s = sched(nodes, TILED, None, &layout);
        let launches: Vec<Vec<(Kernel, Vec<Res>)>> = s.stages[1..]
            .iter()
            .map(|st| match st {
                Stage::Compute { launches, .. } => launches.iter().map(|l| (l.variant.kernel, l.res.clone())).collect(),
                Stage::Copy { .. } => Vec::new(),
            })
            .collect();
        let kinds = |i: usize| launches[i].iter().map(|l| l.0).collect::<Vec<_>>();
        // The one-kernel attention and the split-KV pair (the step's context picks; a prefill
        // step's pair is the tiled one), after the store; each reads the source layer's cache.
        let both = [Kernel::Attention, Kernel::AttentionTile, Kernel::AttentionReduce];
        assert_eq!(kinds(0), [&[Kernel::KvStore][..], &both].concat());
        assert_eq!(kinds(1), both);
        assert_eq!(launches[0][0].1[3..5], [Res::Kc(0), Res::Vc(0)]);
        for l in [&launches[0][1], &launches[0][2], &launches[1][0], &launches[1][1]] {
            assert_eq!(l.1[2..4], [Res::Kc(0), Res::Vc(0)]);
        }
    }
}
