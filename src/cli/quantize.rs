//! `minfer-wgpu quantize IN OUT TYPE [--pure]`: llama-quantize's file types, mixes and layout
//! (`minfer::quantize`), with its per-tensor lines and totals.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use minfer::quantize::{quantize_file, FileType, Options};

#[derive(Args)]
pub struct QuantizeArgs {
    input: PathBuf,
    output: PathBuf,
    #[arg(value_name = "TYPE")]
    ty: String,
    /// Every quantizable weight TYPE, token_embd and output included (no per-tensor mix)
    #[arg(long)]
    pure: bool,
    /// Re-encode tensors that are already quantized
    #[arg(long = "allow-requantize")]
    allow_requantize: bool,
    #[arg(short = 't', long)]
    threads: Option<usize>,
}

pub fn run(a: QuantizeArgs) -> Result<()> {
    let opts = &Options {
        pure: a.pure,
        allow_requantize: a.allow_requantize,
        threads: a.threads.unwrap_or(0),
    };
    let (input, output) = (&a.input, &a.output);
    let ftype = FileType::parse(&a.ty)?;
    let t0 = std::time::Instant::now();
    let r = quantize_file(input, output, ftype, opts)?;
    for (i, p) in r.tensors.iter().enumerate() {
        let conv = if p.to == p.from {
            String::new()
        } else {
            format!(" -> {}", p.to)
        };
        eprintln!(
            "[{:4}/{:4}] {:<36} {:?} {}{conv}",
            i + 1,
            r.tensors.len(),
            p.name,
            p.shape,
            p.from
        );
    }
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    eprintln!(
        "quantize: {} -> {} ({}{}): {:.2} MiB -> {:.2} MiB in {:.1} s",
        input.display(),
        output.display(),
        ftype.name,
        if opts.pure { ", pure" } else { "" },
        mib(r.bytes_in),
        mib(r.bytes_out),
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}
