//! Drafts for speculative decoding: guesses of the next tokens that the model then checks in
//! one forward (`Session::eval_verify`), keeping the longest prefix it agrees with.
//!
//! Two drafters: prompt lookup (`ngram`), which finds the context's last few tokens earlier in
//! the context and proposes what followed them there — free, and strong when the reply repeats
//! its input (code edits, quotes, summaries) — and a small draft model of the same vocabulary
//! decoding greedily on its own session.
//!
//! Both propose single tokens, so checking a draft by sampling the model's own distribution at
//! each position and keeping it while the samples equal it is exact speculative sampling: each
//! token is drawn from the model's distribution given the tokens before it, whatever the draft.

use crate::error::{Error, Result};
use crate::logits::argmax;
use crate::session::Session;

/// Prompt lookup: the tokens that followed the latest earlier occurrence of the context's last
/// `n` tokens (the longest `n` in `max_n..=min_n` that occurs), at most `k` of them.
pub fn ngram_draft(ctx: &[u32], min_n: usize, max_n: usize, k: usize) -> Vec<u32> {
    let len = ctx.len();
    for n in (min_n.max(1)..=max_n).rev() {
        if len <= n {
            continue;
        }
        let tail = &ctx[len - n..];
        // Latest start first; the match must end before the tail itself begins.
        for start in (0..len - n).rev() {
            if &ctx[start..start + n] == tail {
                let from = start + n;
                return ctx[from..(from + k).min(len)].to_vec();
            }
        }
    }
    Vec::new()
}

/// A draft model on its own session: it keeps the context it has evaluated and catches up by
/// the common prefix, then decodes `k` tokens greedily.
pub struct ModelDraft {
    pub session: Session,
    /// The tokens whose K/V the draft session holds.
    cached: Vec<u32>,
}

impl ModelDraft {
    /// A draft model for a target of `n_vocab` tokens: the vocabularies must be the same size.
    pub fn new(session: Session, n_vocab: usize) -> Result<ModelDraft> {
        if session.n_vocab() != n_vocab {
            return Err(Error::InvalidArgument(format!(
                "the draft model's vocabulary has {} tokens, the model's {n_vocab}",
                session.n_vocab()
            )));
        }
        Ok(ModelDraft {
            session,
            cached: Vec::new(),
        })
    }

    /// Up to `k` greedy tokens after `ctx` (fewer where the draft's context is full).
    pub fn draft(&mut self, ctx: &[u32], k: usize) -> Result<Vec<u32>> {
        let n_ctx = self.session.n_ctx();
        if ctx.is_empty() || ctx.len() + k > n_ctx {
            return Ok(Vec::new());
        }
        let keep = self.cached.iter().zip(ctx).take_while(|(a, b)| a == b).count();
        // At least one token is evaluated, for its logits.
        let keep = keep.min(ctx.len() - 1);
        self.session.truncate(keep);
        self.cached.truncate(keep);
        let mut logits = self.session.eval(&ctx[keep..], false)?;
        self.cached.extend_from_slice(&ctx[keep..]);
        let mut out = Vec::with_capacity(k);
        while out.len() < k {
            let t = argmax(&logits);
            out.push(t);
            if out.len() == k {
                break;
            }
            logits = self.session.eval(&[t], false)?;
            self.cached.push(t);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::ngram_draft;

    #[test]
    fn lookup_takes_the_latest_longest_match() {
        // "5 6" occurs twice before the tail; the later one is followed by 9 9.
        let ctx = [5, 6, 7, 8, 5, 6, 9, 9, 1, 5, 6];
        assert_eq!(ngram_draft(&ctx, 1, 3, 4), vec![9, 9, 1, 5]);
        assert_eq!(ngram_draft(&ctx, 1, 3, 1), vec![9]);
        // Nothing to find.
        assert!(ngram_draft(&[1, 2, 3], 1, 3, 4).is_empty());
        // A longer match wins over a later shorter one: "7 8 5" is found at 2.
        let ctx = [7, 8, 5, 4, 3, 8, 5, 0, 7, 8, 5];
        assert_eq!(ngram_draft(&ctx, 1, 3, 2), vec![4, 3]);
    }
}
