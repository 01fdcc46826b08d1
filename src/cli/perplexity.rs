//! `minfer-wgpu perplexity MODEL -f FILE`: computed exactly as llama.cpp's `llama-perplexity`
//! does — chunks of n_ctx tokens, a fresh cache per chunk, BOS written over each chunk's first
//! token when the model adds one, only the second half of each chunk scored.

use std::io::Write;

use anyhow::{bail, Context as _, Result};

use minfer::tokenizer::Tokenizer;
use minfer::Session;

pub struct Args {
    pub text: String,
    pub n_ctx: usize,
    pub n_chunks: Option<usize>,
}

pub fn run(session: &mut Session, tok: &Tokenizer, args: &Args) -> Result<()> {
    let n_ctx = args.n_ctx;
    if n_ctx < 8 || n_ctx > session.n_ctx() {
        bail!("perplexity context {n_ctx} must be in 8..={}", session.n_ctx());
    }
    let tokens = tok.encode(&args.text, true, false).context("tokenizing the text")?;
    let max_chunks = tokens.len() / n_ctx;
    if max_chunks == 0 {
        bail!(
            "the text is {} tokens; perplexity needs at least {} (2 × n_ctx / 2)",
            tokens.len(),
            n_ctx
        );
    }
    let n_chunks = args.n_chunks.map_or(max_chunks, |c| c.min(max_chunks));
    let first = n_ctx / 2;
    let n_vocab = session.n_vocab();
    eprintln!(
        "perplexity: {} tokens, {n_chunks} chunks of {n_ctx}, scoring positions {first}..{}",
        tokens.len(),
        n_ctx - 1
    );
    let (mut nll, mut nll2, mut count) = (0f64, 0f64, 0usize);
    for c in 0..n_chunks {
        let start = c * n_ctx;
        let mut chunk = tokens[start..start + n_ctx].to_vec();
        if tok.add_bos() {
            if let Some(bos) = tok.bos() {
                chunk[0] = bos;
            }
        }
        session.reset();
        let logits = session.eval(&chunk, true)?;
        for j in first..n_ctx - 1 {
            let row = &logits[j * n_vocab..(j + 1) * n_vocab];
            let target = chunk[j + 1] as usize;
            // llama.cpp's log_softmax: max-subtracted, sum in double.
            let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let sum: f64 = row.iter().map(|&v| ((v - max) as f64).exp()).sum();
            let lp = (row[target] - max) as f64 - sum.ln();
            nll -= lp;
            nll2 += lp * lp;
            count += 1;
        }
        let ppl = (nll / count as f64).exp();
        print!("[{}]{ppl:.4},", c + 1);
        std::io::stdout().flush().ok();
    }
    println!();
    let mean = nll / count as f64;
    let mut var = nll2 / count as f64 - mean * mean;
    var = if var > 0.0 {
        (var / (count as f64 - 1.0)).sqrt()
    } else {
        0.0
    };
    let ppl = mean.exp();
    println!("Final estimate: PPL = {ppl:.4} +/- {:.5}", var * ppl);
    Ok(())
}
