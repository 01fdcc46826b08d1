//! A schedule (`backend::gpu::schedule`) made concrete on the device, once per graph shape: the
//! activation buffers, every launch's parameters in one uniform buffer, and every bind group.
//! A forward then only writes the step words, the token ids and the RoPE tables, and encodes
//! the recorded passes.

use std::sync::Arc;

use super::device::{Gpu, Pipeline};
use super::shaders::Coop;
use super::weights::WgpuWeights;
use crate::backend::gpu::schedule::{self, Launch, Res, Stage, When};
use crate::backend::gpu::shape::DeviceShape;
use crate::backend::gpu::table::Kernel;
use crate::backend::KvType;
use crate::model::{Graph, Rope};

/// Bytes of one dispatch's parameters (16 words); slots are `min_uniform_buffer_offset_alignment`
/// apart.
const PARAM_BYTES: u64 = 64;

pub struct Dispatch {
    pub pipeline: Arc<Pipeline>,
    pub bind_group: wgpu::BindGroup,
    pub groups: [u32; 3],
    /// `Launch::work`: multiply-adds, (fixed, per position of context).
    pub work: (u64, u64),
    /// The steps it runs in (`Launch::when`).
    pub when: When,
}

/// One node's GPU work (`encode` gathers the dispatches of consecutive nodes into compute
/// passes).
pub enum Item {
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
    pub items: Vec<Item>,
    pub acts: Vec<wgpu::Buffer>,
    /// The activation buffer of each node.
    pub node_buf: Vec<usize>,
    pub ids: wgpu::Buffer,
    /// (configuration, cos/sin table [n_tokens][n_rot / 2]) per distinct RoPE of the graph.
    pub ropes: Vec<(Rope, wgpu::Buffer)>,
    /// The logits node's buffer and size in bytes.
    pub result: usize,
    pub result_bytes: u64,
    pub readback: wgpu::Buffer,
    /// argmax of the last output row; its 4 bytes are read back for greedy steps.
    pub argmax: Vec<Dispatch>,
    pub argmax_out: wgpu::Buffer,
    pub argmax_readback: wgpu::Buffer,
    _params: wgpu::Buffer,
    _split: wgpu::Buffer,
}

/// The device-side state a plan binds to.
pub struct Targets<'a> {
    pub gpu: &'a Gpu,
    pub weights: &'a WgpuWeights,
    pub step: &'a wgpu::Buffer,
    pub kc: &'a [wgpu::Buffer],
    pub vc: &'a [wgpu::Buffer],
    pub kv: KvType,
    pub subgroups: bool,
    /// Shaders with wgpu's runtime checks.
    pub checked: bool,
    /// The int8 matmuls (`WgpuOptions::int8_matmul`).
    pub int8: bool,
    /// The prefill matmul on cooperative matrices (`WgpuContext::coop`).
    pub coop: super::shaders::Coop,
    /// The device as the schedule sees it.
    pub shape: &'a DeviceShape,
}

fn storage(gpu: &Gpu, label: &str, bytes: u64, extra: wgpu::BufferUsages) -> wgpu::Buffer {
    gpu.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some(label),
        size: bytes.div_ceil(16).max(1) * 16,
        usage: wgpu::BufferUsages::STORAGE | extra,
        mapped_at_creation: false,
    })
}

fn kv_layer(cache: &[wgpu::Buffer], l: usize) -> Result<&wgpu::Buffer, String> {
    cache.get(l).ok_or_else(|| format!("no KV cache for layer {l}"))
}

pub fn compile(t: &Targets, g: &Graph) -> Result<Plan, String> {
    let gpu = t.gpu;
    let s = schedule::schedule(
        g,
        &|name| t.weights.get(name).map(|w| w.layout.clone()),
        t.kv,
        t.subgroups,
        t.shape,
    )?;
    let n = s.n_tokens;

    // Buffers.
    let acts: Vec<wgpu::Buffer> = s
        .act_bytes
        .iter()
        .enumerate()
        .map(|(i, &b)| {
            storage(
                gpu,
                &format!("act{i}"),
                b,
                wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
            )
        })
        .collect();
    let ids = storage(gpu, "ids", (n * 4) as u64, wgpu::BufferUsages::COPY_DST);
    let rope_bufs: Vec<(Rope, wgpu::Buffer)> = s
        .ropes
        .iter()
        .map(|r| {
            (
                *r,
                storage(gpu, "rope", (n * r.n_rot / 2 * 8) as u64, wgpu::BufferUsages::COPY_DST),
            )
        })
        .collect();
    let argmax_out = storage(gpu, "argmax", schedule::ARGMAX_OUT_BYTES, wgpu::BufferUsages::COPY_SRC);
    let readback = gpu.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("logits readback"),
        size: s.result_bytes.max(4),
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let unused = gpu.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("unused"),
        size: 16,
        usage: wgpu::BufferUsages::STORAGE,
        mapped_at_creation: false,
    });
    let split = storage(gpu, "attention split", s.split_bytes, wgpu::BufferUsages::empty());
    let argmax_readback = gpu.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("argmax readback"),
        size: 4,
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let align = (gpu.limits.min_uniform_buffer_offset_alignment as u64).max(PARAM_BYTES);
    let n_launch = s
        .stages
        .iter()
        .map(|st| match st {
            Stage::Compute { launches, .. } => launches.len(),
            Stage::Copy { .. } => 0,
        })
        .sum::<usize>()
        + s.argmax.len();
    let mut bytes = vec![0u8; n_launch * align as usize];
    let params = gpu.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("params"),
        size: bytes.len() as u64,
        usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });

    // Bind groups.
    let mut slot = 0usize;
    let mut make = |l: &Launch, bytes: &mut Vec<u8>| -> Result<Dispatch, String> {
        // The f16 cooperative-matrix tiles: the matmul's are 64 rows × 64 or 32 tokens (the
        // schedule sizes 32 × 32 tiles), the attention's `COOP_ATTN_ROWS` rows where its head
        // sizes suit it (others keep the scalar tile).
        let (words, groups, coop) = match (t.coop.is_f16(), l.variant.kernel) {
            (true, Kernel::AttentionTile) => match l.variant.coop_attention_launch(&l.params, l.groups) {
                Some((words, groups)) => (words, groups, t.coop),
                None => (l.params, l.groups, Coop::Off),
            },
            (true, _) => (
                l.params,
                l.variant.coop_f16_grid(&l.params, t.shape.sms).unwrap_or(l.groups),
                t.coop,
            ),
            (false, _) => (l.params, l.groups, t.coop),
        };
        let off = slot as u64 * align;
        bytes[off as usize..off as usize + 64].copy_from_slice(bytemuck::cast_slice(&words));
        slot += 1;
        let pipeline = gpu.pipeline(l.variant, t.checked, t.int8, coop)?;
        let mut entries = vec![wgpu::BindGroupEntry {
            binding: 0,
            resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                buffer: &params,
                offset: off,
                size: wgpu::BufferSize::new(PARAM_BYTES),
            }),
        }];
        for (i, r) in l.res.iter().enumerate() {
            let resident = |w: &schedule::WeightParts| {
                t.weights
                    .get(&w.name)
                    .ok_or_else(|| format!("{} is not resident", w.name))
            };
            let resource = match r {
                Res::Weight(w, pi) => resident(w)?.parts[*pi].binding(),
                // From the first member to the buffer's end.
                Res::Pack(w) => {
                    let p = &resident(w)?.parts[0];
                    wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                        buffer: &p.buffer,
                        offset: p.offset,
                        size: None,
                    })
                }
                Res::Step => t.step.as_entire_binding(),
                Res::Ids => ids.as_entire_binding(),
                Res::Act(b) => acts[*b].as_entire_binding(),
                Res::RopeTable(ri) => rope_bufs[*ri].1.as_entire_binding(),
                Res::Kc(l) => kv_layer(t.kc, *l)?.as_entire_binding(),
                Res::Vc(l) => kv_layer(t.vc, *l)?.as_entire_binding(),
                Res::Logits => acts[s.result].as_entire_binding(),
                Res::ArgmaxOut => argmax_out.as_entire_binding(),
                Res::Unused => unused.as_entire_binding(),
                Res::Split => split.as_entire_binding(),
            };
            entries.push(wgpu::BindGroupEntry {
                binding: i as u32 + 1,
                resource,
            });
        }
        let bind_group = gpu.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some(&l.variant.name()),
            layout: &pipeline.layout,
            entries: &entries,
        });
        Ok(Dispatch {
            pipeline,
            bind_group,
            groups,
            work: l.work(),
            when: l.when,
        })
    };
    let mut items = Vec::with_capacity(s.stages.len());
    for st in &s.stages {
        items.push(match st {
            Stage::Copy {
                src,
                src_offset,
                dst,
                size,
            } => Item::Copy {
                src: *src,
                src_offset: *src_offset,
                dst: *dst,
                size: *size,
            },
            Stage::Compute { kind, launches } => Item::Compute {
                kind: kind.clone(),
                dispatches: launches
                    .iter()
                    .map(|l| make(l, &mut bytes))
                    .collect::<Result<Vec<_>, _>>()?,
            },
        });
    }
    let argmax = s
        .argmax
        .iter()
        .map(|l| make(l, &mut bytes))
        .collect::<Result<Vec<_>, _>>()?;
    gpu.queue.write_buffer(&params, 0, &bytes);
    Ok(Plan {
        items,
        acts,
        node_buf: s.node_buf.clone(),
        ids,
        ropes: rope_bufs,
        result: s.result,
        result_bytes: s.result_bytes,
        readback,
        argmax,
        argmax_out,
        argmax_readback,
        _params: params,
        _split: split,
    })
}
