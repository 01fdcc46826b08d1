//! Embeddings: one vector per input from an embedding model — an encoder (BERT family), or a
//! decoder whose file gives a pooling type (Qwen3-Embedding: the last token) — as
//! sentence-transformers computes it: every token's hidden state, pooled over the sequence as
//! the model says (`HParams::pooling`: mean, `[CLS]` or last token), then scaled to unit length
//! where the model's pipeline normalises (`HParams::normalize`).
//!
//! Inputs of different lengths go through the session's batch machinery together: each is a
//! sequence of its own, whole in one forward from position 0, attending only to itself, so an
//! input's vector does not depend on what else was in its batch.

use crate::error::{Error, Result};
use crate::model::Pooling;
use crate::session::{Batch, Session};
use crate::tokenizer::Tokenizer;

/// What to do with an input longer than the model's positions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Overflow {
    /// An error naming the input, its length and the limit.
    #[default]
    Refuse,
    /// Keep the first tokens, and the closing `[SEP]` where the tokenizer adds one (Ollama's
    /// `truncate`, sentence-transformers' behaviour).
    Truncate,
}

/// One input's vector and the tokens it was computed from.
#[derive(Clone, Debug, PartialEq)]
pub struct Embedding {
    pub vector: Vec<f32>,
    pub n_tokens: usize,
}

/// The pooling of an embedding model, or an error naming why `session`'s model is not one.
pub fn pooling(session: &Session) -> Result<Pooling> {
    let m = &session.model;
    m.hparams.pooling.ok_or_else(|| {
        Error::InvalidArgument(format!(
            "{} is a {} text generation model, not an embedding model (embeddings come from encoders \
             such as bert, or decoders whose file gives a pooling type, as Qwen3-Embedding's)",
            m.source,
            m.arch.name()
        ))
    })
}

/// The most tokens one input may have: the model's positions, and what one forward holds.
pub fn max_tokens(session: &Session) -> usize {
    session.model.hparams.n_ctx_train.min(forward_tokens(session))
}

/// The most tokens of whole inputs one forward takes: the session's batch and its cells.
fn forward_tokens(session: &Session) -> usize {
    session.n_ctx().min(session.n_batch())
}

/// Tokenizes `texts` as the model's tokenizer does for embedding (`[CLS] … [SEP]`), applying
/// `overflow` to inputs past [`max_tokens`].
pub fn tokenize(session: &Session, tokenizer: &Tokenizer, texts: &[&str], overflow: Overflow) -> Result<Vec<Vec<u32>>> {
    let limit = max_tokens(session);
    texts
        .iter()
        .map(|t| {
            let mut ids = tokenizer.encode(t, true, false)?;
            if ids.len() > limit && overflow == Overflow::Truncate {
                let tail = ids.last().copied().filter(|_| tokenizer.add_eos());
                ids.truncate(limit);
                if let (Some(sep), Some(last)) = (tail, ids.last_mut()) {
                    *last = sep;
                }
            }
            Ok(ids)
        })
        .collect()
}

/// The vectors of `inputs` (token ids, each with its special tokens), in order.
pub fn embed_tokens(session: &mut Session, inputs: &[Vec<u32>]) -> Result<Vec<Embedding>> {
    let pooling = pooling(session)?;
    let normalize = session.model.hparams.normalize;
    let limit = max_tokens(session);
    let n_vocab = session.n_vocab();
    for (i, ids) in inputs.iter().enumerate() {
        if ids.is_empty() {
            return Err(Error::InvalidArgument(format!("input {i} has no tokens")));
        }
        if ids.len() > limit {
            return Err(Error::InvalidArgument(format!(
                "input {i} is {} tokens; the model takes at most {limit} per input",
                ids.len()
            )));
        }
        if let Some(&bad) = ids.iter().find(|&&t| t as usize >= n_vocab) {
            return Err(Error::InvalidArgument(format!(
                "input {i}: token id {bad} is outside the vocabulary of {n_vocab}"
            )));
        }
    }
    // Forwards of whole inputs, as many as fit in one.
    let budget = forward_tokens(session);
    let mut out = Vec::with_capacity(inputs.len());
    let mut start = 0;
    while start < inputs.len() {
        let mut end = start;
        let mut total = 0;
        while end < inputs.len() && (end == start || total + inputs[end].len() <= budget) {
            total += inputs[end].len();
            end += 1;
        }
        out.extend(forward(session, &inputs[start..end], pooling, normalize)?);
        start = end;
    }
    Ok(out)
}

/// One forward of `inputs` (fitting in it together), each in a fresh sequence.
fn forward(session: &mut Session, inputs: &[Vec<u32>], pooling: Pooling, normalize: bool) -> Result<Vec<Embedding>> {
    let seqs: Vec<_> = inputs.iter().map(|_| session.seq_new()).collect();
    let mut batch = Batch::new();
    for (ids, &seq) in inputs.iter().zip(&seqs) {
        for (pos, &t) in ids.iter().enumerate() {
            batch.push(seq, t, pos, true);
        }
    }
    let r = session.decode(&batch);
    for &s in &seqs {
        let _ = session.seq_remove(s);
    }
    let hidden = r?;
    let width = session.model.hparams.n_embd;
    let mut out = Vec::with_capacity(inputs.len());
    let mut row = 0;
    for ids in inputs {
        let rows = &hidden[row * width..(row + ids.len()) * width];
        row += ids.len();
        let mut v = pool(rows, width, pooling);
        if normalize {
            l2_normalize(&mut v);
        }
        out.push(Embedding {
            vector: v,
            n_tokens: ids.len(),
        });
    }
    Ok(out)
}

/// One vector from a sequence's `[n, width]` hidden states.
pub fn pool(rows: &[f32], width: usize, pooling: Pooling) -> Vec<f32> {
    let n = rows.len() / width.max(1);
    match pooling {
        Pooling::Cls => rows[..width].to_vec(),
        Pooling::Last => rows[(n - 1) * width..].to_vec(),
        Pooling::Mean => {
            let mut sum = vec![0f64; width];
            for r in rows.chunks_exact(width) {
                sum.iter_mut().zip(r).for_each(|(s, &x)| *s += x as f64);
            }
            sum.iter().map(|&s| (s / n as f64) as f32).collect()
        }
    }
}

/// v / max(‖v‖, 1e-12), as `torch.nn.functional.normalize`.
pub fn l2_normalize(v: &mut [f32]) {
    let norm = v
        .iter()
        .map(|&x| (x as f64) * (x as f64))
        .sum::<f64>()
        .sqrt()
        .max(1e-12);
    v.iter_mut().for_each(|x| *x = (*x as f64 / norm) as f32);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pools_mean_cls_last_and_normalizes() {
        let rows = [1.0, 2.0, 3.0, 6.0, 5.0, 10.0];
        assert_eq!(pool(&rows, 2, Pooling::Mean), vec![3.0, 6.0]);
        assert_eq!(pool(&rows, 2, Pooling::Cls), vec![1.0, 2.0]);
        assert_eq!(pool(&rows, 2, Pooling::Last), vec![5.0, 10.0]);
        let mut v = vec![3.0, 4.0];
        l2_normalize(&mut v);
        assert_eq!(v, vec![0.6, 0.8]);
        let mut zero = vec![0.0, 0.0];
        l2_normalize(&mut zero);
        assert_eq!(zero, vec![0.0, 0.0]);
    }
}
