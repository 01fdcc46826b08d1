//! `minfer-wgpu plan MODEL --tokens N [--device PROFILE] [--backend cuda|wgpu] [--json]`: the
//! launch table of one forward as a GPU backend would run it on a device profile, with the
//! roofline's time per launch (`backend::gpu::roofline`). Needs no GPU: the weights' bytes are
//! never read, so a file of the right shape is enough.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use clap::Args;

use minfer::backend::KvType;
use minfer::testing::gpu::roofline::{self, Ask, GpuBackend, Plan};
use minfer::testing::gpu::{DeviceProfile, Resources};

use super::flags::parse_kv;
use super::Base;

#[derive(Args)]
pub struct PlanArgs {
    model: PathBuf,
    /// Tokens in the step
    #[arg(long, default_value_t = 1)]
    tokens: usize,
    /// Sequences the tokens belong to, each with tokens / seqs of them and its own logits
    /// (default: every token its own sequence up to 8 tokens, a single prompt above)
    #[arg(long)]
    seqs: Option<usize>,
    /// Positions each sequence has in the cache before the step
    #[arg(short = 'd', long, default_value_t = 0)]
    depth: usize,
    /// A built-in device profile (h200, h100, a100, rtx4090, m3max) or a JSON file of one
    #[arg(long, default_value = "h200")]
    device: String,
    /// cuda or wgpu
    #[arg(long, default_value = "cuda")]
    backend: String,
    #[arg(long = "cache-type", value_name = "CACHE_TYPE", value_parser = parse_kv)]
    kv_type: Option<KvType>,
    /// One JSON object
    #[arg(long)]
    json: bool,
}

pub fn run(a: PlanArgs, base: &Base) -> Result<()> {
    let backend = GpuBackend::parse(&a.backend).map_err(anyhow::Error::msg)?;
    let seqs = a.seqs.unwrap_or(if a.tokens <= 8 { a.tokens } else { 1 });
    let ask = Ask {
        tokens: a.tokens,
        seqs,
        depth: a.depth,
        backend,
        kv: a.kv_type.or(base.env.kv_type).unwrap_or(KvType::F16),
    };
    show(&a.model, &ask, &a.device, a.json)
}

/// Each kernel entry's registers for `profile`'s architecture, where this build has NVRTC and
/// the profile names a CUDA architecture; else why not (printed, not fatal).
pub fn resources(profile: &DeviceProfile) -> std::result::Result<std::collections::HashMap<String, Resources>, String> {
    let Some(arch) = profile.arch.as_deref() else {
        return Err(format!("{}: not a CUDA device", profile.name));
    };
    #[cfg(feature = "cuda")]
    {
        minfer::testing::cuda::source::resources(arch)
    }
    #[cfg(not(feature = "cuda"))]
    {
        Err(format!(
            "{arch}: this build has no CUDA backend (--features cuda) to ask NVRTC"
        ))
    }
}

fn show(model: &Path, ask: &Ask, device: &str, json: bool) -> Result<()> {
    let profile = DeviceProfile::find(device).map_err(anyhow::Error::msg)?;
    let m = minfer::load::open_model(model)?;
    let report = match ask.backend {
        GpuBackend::Cuda => match resources(&profile) {
            Ok(r) => Some(r),
            Err(e) => {
                eprintln!("registers and occupancy unknown: {e}");
                None
            }
        },
        // Another compiler: NVRTC's registers are not the SPIR-V / MSL driver's.
        GpuBackend::Wgpu => None,
    };
    let p = roofline::plan(&m, ask, &profile, report.as_ref())
        .map_err(anyhow::Error::msg)
        .with_context(|| format!("planning {}", model.display()))?;
    if json {
        println!("{}", serde_json::to_string(&p)?);
        return Ok(());
    }
    print_table(&p, &profile);
    Ok(())
}

fn kb(b: u64) -> String {
    match b {
        b if b >= 10_000_000 => format!("{:.0} MB", b as f64 / 1e6),
        b if b >= 10_000 => format!("{:.0} KB", b as f64 / 1e3),
        b => format!("{b} B"),
    }
}

fn print_table(p: &Plan, profile: &DeviceProfile) {
    println!(
        "# {} on {} ({}): {} tokens in {} sequence{} after {} positions",
        format!("{:?}", p.backend).to_lowercase(),
        profile.name,
        profile.description,
        p.tokens,
        p.seqs,
        if p.seqs == 1 { "" } else { "s" },
        p.depth
    );
    println!();
    println!(
        "| # | kernel | node | grid | wg × threads | regs | smem | occ | read | written | GFLOP | fill | est µs |"
    );
    println!("|---:|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let opt = |v: Option<u32>| v.map_or("—".to_string(), |v| v.to_string());
    for (i, l) in p.launches.iter().enumerate() {
        println!(
            "| {i} | {} | {} | {}×{}×{} | {} × {} | {} | {} | {} | {} | {} | {:.3} | {:.2} | {:.1} |",
            l.kernel,
            l.node,
            l.grid[0],
            l.grid[1],
            l.grid[2],
            l.workgroups,
            l.threads,
            opt(l.registers),
            opt(l.shared),
            l.occupancy.map_or("—".to_string(), |o| format!("{:.0} %", o * 100.0)),
            kb(l.bytes_read),
            kb(l.bytes_written),
            l.flops as f64 / 1e9,
            l.fill,
            l.est_us
        );
    }
    // Per op kind, as `bench --profile` groups its measured times.
    let mut by_op: BTreeMap<&str, (usize, f64)> = BTreeMap::new();
    for l in &p.launches {
        let e = by_op.entry(l.op.as_str()).or_default();
        e.0 += 1;
        e.1 += l.est_us;
    }
    let mut ops: Vec<_> = by_op.into_iter().collect();
    ops.sort_by(|a, b| b.1 .1.total_cmp(&a.1 .1));
    println!();
    println!("| op | launches | est µs | share |");
    println!("|---|---:|---:|---:|");
    for (op, (n, us)) in ops {
        println!("| {op} | {n} | {us:.1} | {:.1} % |", 100.0 * us / p.est_us_total);
    }
    println!();
    println!(
        "predicted: {:.1} µs per step, {:.1} tokens/s; roofline (weights and cache at {} GB/s): {:.1} tokens/s ({:.0} % of it)",
        p.est_us_total,
        p.est_tokens_per_s,
        profile.bandwidth_gbs,
        p.roofline_tokens_per_s,
        100.0 * p.est_tokens_per_s / p.roofline_tokens_per_s
    );
    let under = roofline::starved(p, profile, 256_000);
    if !under.is_empty() {
        println!(
            "launches on fewer than {} workgroups that move > 256 KB or take > {} µs:",
            profile.sms,
            4.0 * profile.launch_us
        );
        for u in under {
            println!("  {u}");
        }
    }
}
