//! A graph compiled for the device, once per shape: activation buffers assigned by liveness
//! (as `cpu::compile` does), every dispatch's parameters in one uniform buffer, and every bind
//! group created here. A forward then only writes the step uniform, the token ids and the RoPE
//! tables, and encodes the recorded passes.

use std::sync::Arc;

use super::device::{Gpu, Pipeline};
use super::registry::{GpuWeight, Registry};
use super::shaders::{Kernel, Variant};
use crate::backend::KvType;
use crate::model::{Graph, Op, Rope, RopeMode};

/// Token counts up to this use `matmul_vec` (one workgroup per row and token); more use the
/// tiled `matmul`.
pub const VEC_MAX_TOKENS: usize = 2;

/// Rows per `matmul_vec` workgroup: WG / TPR of `shaders/matmul_vec.wgsl` (64 / 8).
const VEC_ROWS_PER_WG: u32 = 8;

/// Bytes of one dispatch's parameters (16 words); slots are `min_uniform_buffer_offset_alignment`
/// apart.
const PARAM_BYTES: u64 = 64;

/// Where a binding points.
#[derive(Clone)]
enum Res {
    Step,
    Ids,
    Act(usize),
    Weight(Arc<GpuWeight>, usize),
    RopeTable(usize),
    Kc(usize),
    Vc(usize),
    Logits,
    ArgmaxOut,
}

struct Pending {
    variant: Variant,
    params: [u32; 16],
    res: Vec<Res>,
    groups: [u32; 3],
}

pub struct Dispatch {
    pub pipeline: Arc<Pipeline>,
    pub bind_group: wgpu::BindGroup,
    pub groups: [u32; 3],
}

pub enum Pass {
    /// One node's dispatches. `kind` groups the profile (`matmul/q4_1`, `attention`).
    Compute { kind: String, dispatches: Vec<Dispatch> },
    /// `Output`: the kept rows, copied.
    Copy {
        src: usize,
        src_offset: u64,
        dst: usize,
        size: u64,
    },
}

pub struct Plan {
    pub passes: Vec<Pass>,
    pub acts: Vec<wgpu::Buffer>,
    pub ids: wgpu::Buffer,
    /// (configuration, cos/sin table [n_tokens][n_rot / 2]) per distinct RoPE of the graph.
    pub ropes: Vec<(Rope, wgpu::Buffer)>,
    /// The logits node's buffer and size in bytes.
    pub result: usize,
    pub result_bytes: u64,
    pub readback: wgpu::Buffer,
    /// argmax of the last output row; its 4 bytes are read back for greedy steps.
    pub argmax: Dispatch,
    pub argmax_out: wgpu::Buffer,
    pub argmax_readback: wgpu::Buffer,
    _params: wgpu::Buffer,
}

/// The device-side state a plan binds to.
pub struct Targets<'a> {
    pub gpu: &'a Gpu,
    pub weights: &'a Registry,
    pub step: &'a wgpu::Buffer,
    pub kc: &'a [wgpu::Buffer],
    pub vc: &'a [wgpu::Buffer],
    pub kv: KvType,
    pub subgroups: bool,
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

fn storage(gpu: &Gpu, label: &str, bytes: u64, extra: wgpu::BufferUsages) -> wgpu::Buffer {
    gpu.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some(label),
        size: bytes.div_ceil(16).max(1) * 16,
        usage: wgpu::BufferUsages::STORAGE | extra,
        mapped_at_creation: false,
    })
}

pub fn compile(t: &Targets, g: &Graph) -> Result<Plan, String> {
    let gpu = t.gpu;
    let maxg = gpu.limits.max_compute_workgroups_per_dimension;
    let n = g.n_tokens;
    let weight = |name: &str| {
        t.weights
            .get(name)
            .cloned()
            .ok_or_else(|| format!("{name} is not resident"))
    };

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

    let mut ropes: Vec<Rope> = Vec::new();
    let mut pending: Vec<(String, Vec<Pending>)> = Vec::new();
    let mut copies: Vec<(usize, usize, u64, u64)> = Vec::new(); // (pass index, src, offset, size); dst = node buffer
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
        let mut d: Vec<Pending> = Vec::new();
        let mut kind = node.op.kind().to_string();
        match &node.op {
            Op::GetRows { weight: name } => {
                let w = weight(name)?;
                kind = format!("get_rows/{}", w.qtype);
                let k = w.row_len as u32;
                for (pi, part) in w.parts.iter().enumerate() {
                    d.push(Pending {
                        variant: Variant::with_qtype(Kernel::GetRows, w.qtype),
                        params: words(&[k, part.rows as u32, part.row0 as u32, n as u32]),
                        res: vec![Res::Weight(w.clone(), pi), Res::Ids, Res::Act(out)],
                        groups: [(k / 8).div_ceil(64), n as u32, 1],
                    });
                }
            }
            Op::Matmul { weight: name, .. } => {
                let w = weight(name)?;
                let kernel = if node.rows <= VEC_MAX_TOKENS {
                    "matmul_vec"
                } else {
                    "matmul"
                };
                kind = format!("{kernel}/{}", w.qtype);
                let (k, m) = (w.row_len as u32, node.width as u32);
                for (pi, part) in w.parts.iter().enumerate() {
                    let (pr, r0) = (part.rows as u32, part.row0 as u32);
                    let res = vec![Res::Weight(w.clone(), pi), inp(0), Res::Act(out)];
                    d.push(if node.rows <= VEC_MAX_TOKENS {
                        let mut groups = fold(pr.div_ceil(VEC_ROWS_PER_WG) as u64, maxg);
                        groups[2] = rows;
                        Pending {
                            variant: Variant::with_qtype(Kernel::MatmulVec, w.qtype).subgroups(t.subgroups),
                            params: words(&[k, m, pr, r0]),
                            res,
                            groups,
                        }
                    } else {
                        Pending {
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
                d.push(Pending {
                    variant: Variant::with_qtype(Kernel::AddBias, w.qtype),
                    params: words(&[elems as u32, width]),
                    res: vec![Res::Weight(w, 0), inp(0), Res::Act(out)],
                    groups: linear(256),
                });
            }
            Op::RmsNorm { weight: name, eps, .. } => {
                let w = weight(name)?;
                d.push(Pending {
                    variant: Variant::with_qtype(Kernel::RmsNorm, w.qtype).subgroups(t.subgroups),
                    params: words(&[width, eps.to_bits()]),
                    res: vec![Res::Weight(w, 0), inp(0), Res::Act(out)],
                    groups: [rows, 1, 1],
                });
            }
            Op::HeadNorm {
                weight: name,
                eps,
                head_dim,
                ..
            } => {
                let w = weight(name)?;
                let heads = width / *head_dim as u32;
                d.push(Pending {
                    variant: Variant::with_qtype(Kernel::HeadNorm, w.qtype).subgroups(t.subgroups),
                    params: words(&[*head_dim as u32, heads, eps.to_bits()]),
                    res: vec![Res::Weight(w, 0), inp(0), Res::Act(out)],
                    groups: [heads, rows, 1],
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
                d.push(Pending {
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
                let epw = match t.kv {
                    KvType::F32 => 1,
                    KvType::F16 => 2,
                    KvType::Q8_0 => 64,
                };
                d.push(Pending {
                    variant: Variant::with_kv(Kernel::KvStore, t.kv),
                    params: words(&[kw, vw, rows]),
                    res: vec![Res::Step, inp(1), inp(2), Res::Kc(*layer), Res::Vc(*layer)],
                    groups: fold(((rows * (kw + vw)) / epw).div_ceil(64) as u64, maxg),
                });
                d.push(Pending {
                    variant: Variant::with_kv(Kernel::Attention, t.kv).subgroups(t.subgroups),
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
                d.push(Pending {
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
                d.push(Pending {
                    variant: Variant::new(kernel),
                    params: words(&[elems as u32, s.to_bits()]),
                    res: vec![inp(0), Res::Act(out)],
                    groups: linear(256),
                });
            }
            Op::Output { x } => {
                let src = &g.nodes[*x];
                let skip = ((src.rows - node.rows) * node.width * 4) as u64;
                copies.push((pending.len(), buf_of[*x], skip, size));
            }
        }
        pending.push((kind, d));
    }
    let result = buf_of[g.result];
    let n_out = g.nodes[g.result].rows;
    let n_vocab = g.nodes[g.result].width;
    let result_bytes = (n_out * n_vocab * 4) as u64;
    let argmax = Pending {
        variant: Variant::new(Kernel::Argmax),
        params: words(&[n_vocab as u32, ((n_out - 1) * n_vocab) as u32]),
        res: vec![Res::Logits, Res::ArgmaxOut],
        groups: [1, 1, 1],
    };

    // Buffers.
    let acts: Vec<wgpu::Buffer> = sizes
        .iter()
        .enumerate()
        .map(|(i, &s)| {
            storage(
                gpu,
                &format!("act{i}"),
                s,
                wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
            )
        })
        .collect();
    let ids = storage(gpu, "ids", (n * 4) as u64, wgpu::BufferUsages::COPY_DST);
    let rope_bufs: Vec<(Rope, wgpu::Buffer)> = ropes
        .iter()
        .map(|r| {
            (
                *r,
                storage(gpu, "rope", (n * r.n_rot / 2 * 8) as u64, wgpu::BufferUsages::COPY_DST),
            )
        })
        .collect();
    let argmax_out = storage(gpu, "argmax", 4, wgpu::BufferUsages::COPY_SRC);
    let readback = gpu.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("logits readback"),
        size: result_bytes.max(4),
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let argmax_readback = gpu.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("argmax readback"),
        size: 4,
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let align = (gpu.limits.min_uniform_buffer_offset_alignment as u64).max(PARAM_BYTES);
    let n_disp = pending.iter().map(|(_, d)| d.len()).sum::<usize>() + 1;
    let mut bytes = vec![0u8; n_disp * align as usize];
    let params = gpu.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("params"),
        size: bytes.len() as u64,
        usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });

    // Bind groups.
    let mut slot = 0usize;
    let mut make = |p: Pending, bytes: &mut Vec<u8>| -> Result<Dispatch, String> {
        let off = slot as u64 * align;
        bytes[off as usize..off as usize + 64].copy_from_slice(bytemuck::cast_slice(&p.params));
        slot += 1;
        let pipeline = gpu.pipeline(p.variant)?;
        let mut entries = vec![wgpu::BindGroupEntry {
            binding: 0,
            resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                buffer: &params,
                offset: off,
                size: wgpu::BufferSize::new(PARAM_BYTES),
            }),
        }];
        for (i, r) in p.res.iter().enumerate() {
            let buffer = match r {
                Res::Step => t.step,
                Res::Ids => &ids,
                Res::Act(b) => &acts[*b],
                Res::Weight(w, pi) => &w.parts[*pi].buffer,
                Res::RopeTable(ri) => &rope_bufs[*ri].1,
                Res::Kc(l) => t.kc.get(*l).ok_or_else(|| format!("no KV cache for layer {l}"))?,
                Res::Vc(l) => t.vc.get(*l).ok_or_else(|| format!("no KV cache for layer {l}"))?,
                Res::Logits => &acts[result],
                Res::ArgmaxOut => &argmax_out,
            };
            entries.push(wgpu::BindGroupEntry {
                binding: i as u32 + 1,
                resource: buffer.as_entire_binding(),
            });
        }
        let bind_group = gpu.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some(&p.variant.name()),
            layout: &pipeline.layout,
            entries: &entries,
        });
        Ok(Dispatch {
            pipeline,
            bind_group,
            groups: p.groups,
        })
    };
    let mut passes = Vec::with_capacity(pending.len());
    let mut copies = copies.into_iter().peekable();
    for (pi, (kind, ds)) in pending.into_iter().enumerate() {
        if copies.peek().is_some_and(|c| c.0 == pi) {
            let (_, src, src_offset, size) = copies.next().unwrap_or_default();
            passes.push(Pass::Copy {
                src,
                src_offset,
                dst: buf_of[pi],
                size,
            });
            continue;
        }
        let dispatches = ds
            .into_iter()
            .map(|p| make(p, &mut bytes))
            .collect::<Result<Vec<_>, _>>()?;
        passes.push(Pass::Compute { kind, dispatches });
    }
    let argmax = make(argmax, &mut bytes)?;
    gpu.queue.write_buffer(&params, 0, &bytes);
    Ok(Plan {
        passes,
        acts,
        ids,
        ropes: rope_bufs,
        result,
        result_bytes,
        readback,
        argmax,
        argmax_out,
        argmax_readback,
        _params: params,
    })
}
