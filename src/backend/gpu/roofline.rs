//! One forward's launch table on a device profile, without the device (`minfer-wgpu plan`): the
//! schedule a GPU backend would run for a step of a given shape, each launch with its grid,
//! threads, registers and workgroup memory (where NVRTC reported them), the bytes it moves and
//! its arithmetic (`cost`), and the time a roofline of the profile gives it: the larger of
//! bytes ÷ bandwidth and operations ÷ the unit's peak, over the launch's fill of the device
//! (its workgroups ÷ the SMs times the workgroups one SM holds at once), and never under the
//! profile's shortest launch. What it shows before any GPU is at hand: a launch on one
//! workgroup, a kernel whose registers leave the SMs a quarter full.

use std::collections::HashMap;

use serde::Serialize;

use super::cost::{coop16_l1_wavefronts, cost, mma_issue, mma_l1_wavefronts, Cost, Paths, StepShape};
use super::kernels::Variant;
use super::params::{KernelParams, MatmulParams};
use super::schedule::{self, split_span, Launch, Stage};
use super::shape::{DeviceProfile, Resources, Unit};
use super::table::Kernel;
use crate::backend::KvType;
use crate::model::{GraphKey, Model};
use crate::quant::QType;

/// The GPU backend whose schedule is planned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum GpuBackend {
    Cuda,
    Wgpu,
}

impl GpuBackend {
    pub fn parse(s: &str) -> Result<GpuBackend, String> {
        match s {
            "cuda" => Ok(GpuBackend::Cuda),
            "wgpu" => Ok(GpuBackend::Wgpu),
            _ => Err(format!("backend '{s}': plan knows cuda and wgpu")),
        }
    }
}

/// What to plan.
#[derive(Clone, Debug)]
pub struct Ask {
    /// Tokens in the step, and the sequences they belong to (each with `tokens / seqs`).
    pub tokens: usize,
    pub seqs: usize,
    /// Positions each sequence has in the cache before the step.
    pub depth: usize,
    pub backend: GpuBackend,
    pub kv: KvType,
}

/// One launch of the table.
#[derive(Clone, Debug, Serialize)]
pub struct Planned {
    /// The kernel's entry (`matmul_vec_q4_K`, `matmul_mma64_q4_K`), as NVRTC's report names it.
    pub kernel: String,
    /// The node it computes (`blk.0.attn_q`), and the op kind (`matmul_vec/q4_K`).
    pub node: String,
    pub op: String,
    pub grid: [u32; 3],
    /// Workgroups in all, and threads in each.
    pub workgroups: u64,
    pub threads: u32,
    pub registers: Option<u32>,
    pub shared: Option<u32>,
    /// Theoretical occupancy (0–1) from the registers and workgroup memory; `None` unknown.
    pub occupancy: Option<f64>,
    pub bytes_read: u64,
    pub bytes_written: u64,
    /// Of `bytes_read`, the weights' and the KV cache's.
    pub weight_bytes: u64,
    pub cache_bytes: u64,
    pub flops: u64,
    pub unit: Option<Unit>,
    /// L1 wavefronts (`cost::mma_l1_wavefronts`, `cost::coop16_l1_wavefronts`), for the
    /// matrix tiles of the prefill matmul.
    pub l1_wavefronts: Option<u64>,
    /// Warp instructions issued (`cost::mma_issue`), for CUDA's tensor-core tiles: an SM issues
    /// four a clock (one a scheduler), whatever its units' peaks.
    pub issue: Option<u64>,
    /// Workgroups ÷ (SMs × workgroups one SM holds), at most 1.
    pub fill: f64,
    pub est_us: f64,
}

/// The table of one step.
#[derive(Clone, Debug, Serialize)]
pub struct Plan {
    pub device: String,
    pub backend: GpuBackend,
    pub tokens: usize,
    pub seqs: usize,
    pub depth: usize,
    pub launches: Vec<Planned>,
    pub est_us_total: f64,
    pub est_tokens_per_s: f64,
    /// The step's weight and cache bytes over the profile's bandwidth, in tokens per second.
    pub roofline_tokens_per_s: f64,
}

/// The launches of node stages for a step, in order, with the node each computes.
fn launches<'a>(
    s: &'a schedule::Schedule,
    g: &'a crate::model::Graph,
    long: bool,
) -> Vec<(&'a str, &'a str, &'a Launch)> {
    let mut out = Vec::new();
    for (i, st) in s.stages.iter().enumerate() {
        if let Stage::Compute { kind, launches } = st {
            // Stages are pushed per node, a quantize_act stage before its matmul's.
            let node = s
                .stage_node
                .get(i)
                .and_then(|&n| g.nodes.get(n))
                .map_or("", |n| n.name.as_str());
            for l in launches.iter().filter(|l| l.when.runs(long)) {
                out.push((node, kind.as_str(), l));
            }
        }
    }
    out
}

/// The most tokens `plan` takes in one step (a prompt is split into steps of a few hundred).
pub const MAX_STEP_TOKENS: usize = 1 << 16;

/// The plan of a step of `ask`'s shape for `model` on `profile`; `report` gives each kernel
/// entry's registers and workgroup memory for the profile's architecture (NVRTC), where known.
pub fn plan(
    model: &Model,
    ask: &Ask,
    profile: &DeviceProfile,
    report: Option<&HashMap<String, Resources>>,
) -> Result<Plan, String> {
    if ask.tokens > MAX_STEP_TOKENS {
        return Err(format!("{} tokens: a step holds at most {MAX_STEP_TOKENS}", ask.tokens));
    }
    if ask.tokens == 0 || ask.seqs == 0 || !ask.tokens.is_multiple_of(ask.seqs) {
        return Err(format!(
            "{} tokens cannot be {} sequences of equal length",
            ask.tokens, ask.seqs
        ));
    }
    // A decode step has every sequence's logits; a prompt its last token's.
    let outputs = if ask.seqs > 1 { ask.seqs } else { 1 };
    let g = model.graph(GraphKey::new(ask.tokens, outputs));
    let (max_binding, pad, subgroups) = match ask.backend {
        GpuBackend::Cuda => (None, crate::backend::gpu::CUDA_PAD, false),
        GpuBackend::Wgpu => (Some(profile.max_binding), crate::backend::gpu::WGPU_PAD, true),
    };
    let layouts = super::layouts(model, max_binding, pad)?;
    let sm = profile
        .arch
        .as_deref()
        .and_then(|a| a.strip_prefix("sm_")?.parse::<u32>().ok());
    let mma = ask.backend == GpuBackend::Cuda && sm.is_some_and(|a| a >= 80);
    // Vulkan on NVIDIA GPUs (Turing on) offers 16 × 16 f16 cooperative matrices.
    let coop_f16 = ask.backend == GpuBackend::Wgpu && sm.is_some_and(|a| a >= 75);
    let shape = super::shape::DeviceShape {
        matrix_tiles: mma,
        coop_f16,
        ..profile.shape()
    };
    let s = schedule::schedule(&g, &|name| layouts.get(name).cloned(), ask.kv, subgroups, &shape)?;
    let paths = Paths {
        int8: true,
        mma,
        coop_f16,
    };
    let step = StepShape {
        tokens: ask.tokens as u64,
        seqs: ask.seqs as u64,
        depth: ask.depth as u64,
    };
    let long = (ask.depth + ask.tokens / ask.seqs) as u32 >= split_span(profile.sms);
    let mut rows = Vec::new();
    let mut all = launches(&s, &g, long);
    all.extend(s.argmax.iter().map(|l| ("argmax", "argmax", l)));
    for (node, op, l) in all {
        let c = cost(l, step, ask.kv, paths);
        rows.push(planned(node, op, l, &c, profile, report, paths));
    }
    let est_us_total: f64 = rows.iter().map(|r| r.est_us).sum();
    let step_bytes: u64 = rows.iter().map(|r| r.weight_bytes + r.cache_bytes).sum();
    Ok(Plan {
        device: profile.name.clone(),
        backend: ask.backend,
        tokens: ask.tokens,
        seqs: ask.seqs,
        depth: ask.depth,
        est_tokens_per_s: ask.tokens as f64 / (est_us_total * 1e-6),
        roofline_tokens_per_s: ask.tokens as f64 / (step_bytes as f64 / (profile.bandwidth_gbs * 1e9)),
        launches: rows,
        est_us_total,
    })
}

fn planned(
    node: &str,
    op: &str,
    l: &Launch,
    c: &Cost,
    profile: &DeviceProfile,
    report: Option<&HashMap<String, Resources>>,
    paths: Paths,
) -> Planned {
    let v: &Variant = &l.variant;
    let tensor = v.mma_launch(&l.params, l.groups, profile.sms).filter(|_| paths.mma);
    let coop = v.coop_f16_grid(&l.params, profile.sms).filter(|_| paths.coop_f16);
    let coop_attention = v.coop_attention_launch(&l.params, l.groups).filter(|_| paths.coop_f16);
    let (kernel, grid, threads) = match (tensor, coop, coop_attention) {
        (Some(m), _, _) => (v.mma_entry(m.size).unwrap_or_else(|| v.entry()), m.grid, m.threads),
        (None, Some(g), _) => (v.entry(), g, super::kernels::COOP_THREADS),
        (None, None, Some((_, g))) => (format!("{}_coop16", v.entry()), g, super::kernels::COOP_THREADS),
        (None, None, None) => (v.entry(), l.groups, v.kernel.threads()),
    };
    let res = report.and_then(|r| r.get(&kernel));
    let workgroups: u64 = grid.iter().map(|&g| g as u64).product();
    let resident = profile.resident(threads, res).max(1) as u64;
    // A quarter of an SM's threads keep its share of the memory and units busy (their loads in
    // flight cover the latency); fewer, on fewer SMs or held back by registers, leave that
    // part of the device idle.
    let busy = profile.sms as f64 * (profile.threads_per_sm / 4) as f64;
    let concurrent = workgroups.min(profile.sms as u64 * resident) as f64 * threads as f64;
    let fill = (concurrent / busy).min(1.0);
    let bytes = (c.read() + c.written) as f64;
    let mem_s = bytes / (profile.bandwidth_gbs * 1e9);
    // The tensor-core and cooperative-matrix attention multiply on the f16 tensor cores.
    let unit = match (tensor.is_some() || coop_attention.is_some(), v.kernel) {
        (true, Kernel::AttentionTile) => Some(Unit::F16Tensor),
        _ => c.unit,
    };
    // The matrix tiles' loads and fragment reads through the L1, where the profile rates it:
    // CUDA's integer ones, wgpu's f16 ones (their width off the grid, as the tile reads it).
    let matmul = || {
        let p = MatmulParams::from_words(&l.params);
        (v.qtype.unwrap_or(QType::F32), p.k as u64, p.rows as u64, p.n as u64)
    };
    let l1_wavefronts = match (tensor, coop) {
        (Some(m), _) if v.kernel == Kernel::Matmul => {
            let (q, k, rows, n) = matmul();
            Some(mma_l1_wavefronts(q, k, rows, n, m.size as u64))
        }
        (None, Some(g)) => {
            let (q, k, rows, n) = matmul();
            let cols = n.div_ceil(g[1].max(1) as u64).next_power_of_two();
            Some(coop16_l1_wavefronts(q, k, rows, n, cols))
        }
        _ => None,
    };
    let l1_s = match (l1_wavefronts, profile.l1_gwavefronts) {
        (Some(w), Some(rate)) => w as f64 / (rate * 1e9),
        _ => 0.0,
    };
    // Their instructions, four a clock an SM (`l1_gwavefronts` is SMs × the clock).
    let issue = match tensor {
        Some(m) if v.kernel == Kernel::Matmul => {
            let (q, k, rows, n) = matmul();
            mma_issue(q, k, rows, n, m.size as u64)
        }
        _ => None,
    };
    let issue_s = match (issue, profile.l1_gwavefronts) {
        (Some(i), Some(rate)) => i as f64 / (4.0 * rate * 1e9),
        _ => 0.0,
    };
    let ops_s = unit
        .map_or(0.0, |u| c.flops as f64 / profile.peak(u))
        .max(c.epilogue as f64 / profile.peak(Unit::F32))
        .max(l1_s)
        .max(issue_s);
    // Workgroups past a whole number of rounds (SMs × the workgroups one holds) run as a last,
    // part-empty round: 300 workgroups on 264 places take two rounds of time, not 1.14.
    let rounds = workgroups as f64 / (profile.sms as u64 * resident) as f64;
    let tail = if rounds > 1.0 { rounds.ceil() / rounds } else { 1.0 };
    let est_us = (mem_s.max(ops_s) * 1e6 / fill.max(1e-9) * tail).max(profile.launch_us);
    Planned {
        kernel,
        node: node.to_string(),
        op: op.to_string(),
        grid,
        workgroups,
        threads,
        registers: res.map(|r| r.registers),
        shared: res.map(|r| r.shared),
        occupancy: res.map(|r| profile.occupancy(threads, r)),
        bytes_read: c.read(),
        bytes_written: c.written,
        weight_bytes: c.weights,
        cache_bytes: c.cache,
        flops: c.flops,
        unit,
        l1_wavefronts,
        issue,
        fill,
        est_us,
    }
}

/// Launches that leave the device part-empty: fewer workgroups than the profile has SMs, and
/// either more than `min_bytes` moved or a roofline time past four launches (a long row walked
/// by a few threads costs that however few bytes it moves).
pub fn starved(p: &Plan, profile: &DeviceProfile, min_bytes: u64) -> Vec<String> {
    p.launches
        .iter()
        .filter(|l| {
            let moved = l.bytes_read + l.bytes_written;
            l.workgroups < profile.sms as u64 && (moved > min_bytes || l.est_us > 4.0 * profile.launch_us)
        })
        .map(|l| {
            format!(
                "{} ({}, {}): {} workgroups, {} KB, {:.1} µs",
                l.kernel,
                l.node,
                l.op,
                l.workgroups,
                (l.bytes_read + l.bytes_written) / 1000,
                l.est_us
            )
        })
        .collect()
}

/// Every kernel entry under `min` theoretical occupancy on `profile` by `report`, at the threads
/// the kernel table gives it, whose row says no reason (`KernelInfo::low_occupancy`).
pub fn low_occupancy(profile: &DeviceProfile, report: &HashMap<String, Resources>, min: f64) -> Vec<String> {
    let mut out = Vec::new();
    for v in super::kernels::all_variants().into_iter().filter(|v| !v.subgroups) {
        let entries = std::iter::once((v.entry(), v.kernel.threads()))
            .chain(v.mma_entries().into_iter().map(|e| (e, v.mma_threads())));
        for (entry, threads) in entries {
            let Some(r) = report.get(&entry) else {
                continue;
            };
            let occ = profile.occupancy(threads, r);
            if occ < min && v.kernel.info().low_occupancy.is_none() {
                out.push(format!(
                    "{entry}: {:.0} % at {threads} threads ({} registers, {} B shared, {} B spilled)",
                    occ * 100.0,
                    r.registers,
                    r.shared,
                    r.spill
                ));
            }
        }
    }
    out.sort();
    out.dedup();
    out
}
