//! `minfer-wgpu perplexity MODEL -f FILE`, printed as llama-perplexity prints it.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context as _, Result};
use clap::Args;

use minfer::backend::{BackendChoice, KvType};
use minfer::tokenizer::Tokenizer;
use minfer::{Session, SessionOptions};

use super::flags::{parse_backend, parse_kv};
use super::Base;

#[derive(Args)]
pub struct PerplexityArgs {
    model: PathBuf,
    #[arg(short = 'f', long = "file")]
    file: PathBuf,
    /// Tokens per chunk
    #[arg(short = 'c', long = "ctx-size", default_value_t = 512)]
    ctx: usize,
    #[arg(short = 'b', long = "batch-size", default_value_t = 512)]
    batch: usize,
    #[arg(long)]
    chunks: Option<usize>,
    #[arg(short = 't', long)]
    threads: Option<usize>,
    #[arg(long = "cache-type", value_name = "CACHE_TYPE", value_parser = parse_kv)]
    kv_type: Option<KvType>,
    #[arg(long, default_value = "auto", value_parser = parse_backend)]
    backend: BackendChoice,
    /// Flash-attention numerics (llama-perplexity's default on the CPU)
    #[arg(long = "flash-attn")]
    flash_attn: bool,
}

pub fn run(a: PerplexityArgs, base: &Base) -> Result<()> {
    let file = &a.file;
    let text = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
    let text = String::from_utf8(text).map_err(|e| {
        anyhow::anyhow!(
            "{} is not valid UTF-8 (at byte {})",
            file.display(),
            e.utf8_error().valid_up_to()
        )
    })?;
    let minfer::load::Loaded {
        model: m,
        tokenizer: tok,
    } = minfer::load::open(&a.model)?;
    let m = Arc::new(m);
    let b = base.session();
    let opts = SessionOptions {
        n_ctx: a.ctx,
        n_batch: a.batch,
        threads: a.threads,
        backend: a.backend,
        kv_type: a.kv_type.or(b.kv_type),
        gpu: None,
        ..b
    };
    let mut session = Session::new(m, &opts)?;
    session.set_flash_attn(a.flash_attn);
    for line in &session.log {
        eprintln!("{line}");
    }
    report(&mut session, &tok, &text, a.ctx, a.chunks)?;
    super::print_profile(&session);
    Ok(())
}

/// The running estimate per chunk on stdout, then the final one.
fn report(session: &mut Session, tok: &Tokenizer, text: &str, n_ctx: usize, n_chunks: Option<usize>) -> Result<()> {
    let r = minfer::perplexity::perplexity(session, tok, text, n_ctx, n_chunks, |c, ppl| {
        print!("[{}]{ppl:.4},", c + 1);
        std::io::stdout().flush().ok();
    })?;
    println!();
    eprintln!(
        "perplexity: {} tokens, {} chunks of {n_ctx}",
        r.n_tokens,
        r.running.len()
    );
    println!("Final estimate: PPL = {:.4} +/- {:.5}", r.ppl, r.err);
    Ok(())
}
