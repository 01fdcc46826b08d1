//! Perplexity computed exactly as llama.cpp's `llama-perplexity` does: chunks of `n_ctx`
//! tokens, a fresh cache per chunk, BOS written over each chunk's first token when the model
//! adds one, only the second half of each chunk scored.

use crate::error::{Error, Result};
use crate::session::Session;
use crate::tokenizer::Tokenizer;

#[derive(Clone, Debug)]
pub struct Perplexity {
    pub ppl: f64,
    /// llama.cpp's error estimate (standard error of the mean NLL, times PPL).
    pub err: f64,
    /// Running PPL after each chunk.
    pub running: Vec<f64>,
    pub n_tokens: usize,
}

/// `on_chunk(i, running_ppl)` is called after each chunk (for progress output).
pub fn perplexity(
    session: &mut Session,
    tok: &Tokenizer,
    text: &str,
    n_ctx: usize,
    n_chunks: Option<usize>,
    mut on_chunk: impl FnMut(usize, f64),
) -> Result<Perplexity> {
    if n_ctx < 8 || n_ctx > session.n_ctx() {
        return Err(Error::InvalidArgument(format!(
            "perplexity context {n_ctx} must be in 8..={}",
            session.n_ctx()
        )));
    }
    let tokens = tok.encode(text, true, false)?;
    let max_chunks = tokens.len() / n_ctx;
    if max_chunks == 0 {
        return Err(Error::InvalidArgument(format!(
            "the text is {} tokens; perplexity with -c {n_ctx} needs at least {n_ctx}",
            tokens.len()
        )));
    }
    let n_chunks = n_chunks.map_or(max_chunks, |c| c.clamp(1, max_chunks));
    let first = n_ctx / 2;
    let n_vocab = session.n_vocab();
    let (mut nll, mut nll2, mut count) = (0f64, 0f64, 0usize);
    let mut running = Vec::with_capacity(n_chunks);
    for c in 0..n_chunks {
        let start = c * n_ctx;
        let mut chunk = tokens[start..start + n_ctx].to_vec();
        if let (true, Some(bos)) = (tok.add_bos(), tok.bos()) {
            chunk[0] = bos;
        }
        session.reset();
        let logits = session.eval(&chunk, true)?;
        for j in first..n_ctx - 1 {
            let row = &logits[j * n_vocab..(j + 1) * n_vocab];
            let target = chunk[j + 1] as usize;
            // llama.cpp's log-softmax: max-subtracted, the sum in double.
            let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let sum: f64 = row.iter().map(|&v| ((v - max) as f64).exp()).sum();
            let lp = (row[target] - max) as f64 - sum.ln();
            nll -= lp;
            nll2 += lp * lp;
            count += 1;
        }
        let ppl = (nll / count as f64).exp();
        running.push(ppl);
        on_chunk(c, ppl);
    }
    let mean = nll / count as f64;
    let var = nll2 / count as f64 - mean * mean;
    let sd = if var > 0.0 {
        (var / (count as f64 - 1.0)).sqrt()
    } else {
        0.0
    };
    let ppl = mean.exp();
    Ok(Perplexity {
        ppl,
        err: sd * ppl,
        running,
        n_tokens: tokens.len(),
    })
}
