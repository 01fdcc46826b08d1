//! `minfer-wgpu perplexity MODEL -f FILE`, printed as llama-perplexity prints it.

use std::io::Write;

use anyhow::Result;

use minfer::tokenizer::Tokenizer;
use minfer::Session;

pub fn run(session: &mut Session, tok: &Tokenizer, text: &str, n_ctx: usize, n_chunks: Option<usize>) -> Result<()> {
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
