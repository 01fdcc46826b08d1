//! A running request: its sequence, what it has generated, and the one decode step every
//! request takes — drafts to check (speculation), the sampling of a forward's rows, the checks
//! that end it (end of text, stop strings, a complete constraint, `max_tokens`, the context).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use super::{Event, GenerateOptions, RequestId, Sink, Speculation, Stats, StopReason, TextStream};
use crate::error::Result;
use crate::kv::SeqId;
use crate::sampling::{Sampler, Shaper, TokenLogprob};
use crate::spec::{ngram_draft, ModelDraft};
use crate::tokenizer::Tokenizer;

pub(super) struct Slot {
    pub(super) id: RequestId,
    pub(super) seq: SeqId,
    pub(super) prompt: Vec<u32>,
    /// The tokens whose K/V the sequence's cells hold, in order.
    pub(super) cached: Vec<u32>,
    pub(super) reused: usize,
    pub(super) generated: Vec<u32>,
    /// One per generated token when the request asked for them.
    pub(super) logprobs: Vec<TokenLogprob>,
    /// Sampled, not yet evaluated.
    pub(super) pending: Option<u32>,
    /// Drafted after `pending` and evaluated with it in this step's forward, not yet checked.
    pub(super) drafts: Vec<u32>,
    pub(super) spec: SpecState,
    pub(super) sampler: Sampler,
    pub(super) stream: TextStream,
    pub(super) opts: GenerateOptions,
    /// `ignore_eos`, `logit_bias`, the constraint and log-probabilities.
    pub(super) shaper: Shaper,
    pub(super) sink: Sink,
    pub(super) cancel: Arc<AtomicBool>,
    pub(super) admitted: Instant,
    pub(super) first_token: Option<Instant>,
}

/// A speculating request's draft length and counts. The length adapts: doubled after a draft
/// taken whole, cut to one past what was taken after a miss (long drafts pay off only while
/// the model keeps agreeing).
#[derive(Clone, Copy, Debug)]
pub(super) struct SpecState {
    k: usize,
    /// Draft tokens taken since the last verification.
    taken: usize,
    pub(super) drafted: usize,
    pub(super) accepted: usize,
}

impl SpecState {
    pub(super) fn new(draft_max: usize) -> SpecState {
        SpecState {
            k: draft_max.clamp(1, 4),
            taken: 0,
            drafted: 0,
            accepted: 0,
        }
    }

    /// A draft token checked against the sample at its place; `last`: the draft's last.
    fn record(&mut self, hit: bool, last: bool, draft_max: usize) {
        if hit {
            self.accepted += 1;
            self.taken += 1;
            if last {
                self.k = (self.k * 2).min(draft_max.max(1));
            }
        } else {
            self.k = (self.taken + 1).clamp(1, draft_max.max(1));
        }
    }
}

/// What a forward gives one slot: `[n, n_vocab]` logits, or the argmax of its one row where
/// plain greedy decoding read back only that.
#[derive(Clone, Copy)]
pub(super) enum Rows<'a> {
    Logits(&'a [f32]),
    Argmax(u32),
}

/// Where a slot stands after its rows are sampled.
pub(super) enum Outcome {
    Running,
    Done(StopReason),
    /// The listener is gone: cancelled at the next reap.
    Gone,
    Failed(String),
}

impl Slot {
    /// Cells this request may still take: the rest of its prompt and its tokens to come,
    /// within the context (drafts in flight stay inside: they are tokens to come).
    pub(super) fn reserve(&self, n_ctx: usize) -> usize {
        let total = self.prompt.len().saturating_add(self.opts.max_tokens).min(n_ctx);
        total.saturating_sub(self.cached.len())
    }

    /// Plain greedy: the token is the argmax, so a forward may read back only that.
    pub(super) fn argmax_only(&self) -> bool {
        let c = self.sampler.config();
        self.shaper.is_plain()
            && c.temperature <= 0.0
            && c.repeat_penalty == 1.0
            && c.presence_penalty == 0.0
            && c.frequency_penalty == 0.0
    }

    /// Drafts to check after the pending token in this step's forward: none unless the
    /// request speculates; at most the adaptive length, the tokens still wanted and the
    /// context's room.
    pub(super) fn guess(&mut self, draft: Option<&mut ModelDraft>, n_ctx: usize) -> Result<Vec<u32>> {
        if self.pending.is_none() || self.opts.speculation == Speculation::Off {
            return Ok(Vec::new());
        }
        let room = (self.opts.max_tokens.saturating_sub(self.generated.len()))
            .min(n_ctx.saturating_sub(self.cached.len() + 1));
        let k = self.spec.k.min(self.opts.draft_max).min(room);
        if k == 0 {
            return Ok(Vec::new());
        }
        // The generated tokens end with the pending one.
        let ctx: Vec<u32> = self.prompt.iter().chain(&self.generated).copied().collect();
        let guess = match (self.opts.speculation, draft) {
            (Speculation::Ngram { min_n, max_n }, _) => ngram_draft(&ctx, min_n, max_n, k),
            (Speculation::Draft, Some(d)) => d.draft(&ctx, k)?,
            _ => Vec::new(),
        };
        if guess.len() < self.opts.draft_min {
            return Ok(Vec::new());
        }
        self.spec.drafted += guess.len();
        self.spec.taken = 0;
        Ok(guess)
    }

    /// Records the tokens this step's forward evaluated: the pending one (its drafts are
    /// recorded as they are confirmed), or the next `k` of the prompt.
    pub(super) fn evaluated(&mut self, k: usize) {
        match self.pending.take() {
            Some(t) => self.cached.push(t),
            None => {
                let p0 = self.cached.len();
                self.cached.extend_from_slice(&self.prompt[p0..p0 + k]);
            }
        }
    }

    /// Samples this slot's rows of a forward: the first, then each next one while the token
    /// sampled is the draft token that row follows (exact speculative sampling, `crate::spec`).
    /// A miss leaves the sample pending; the drafts after it are not in `cached`, and their
    /// cells are the caller's to drop.
    pub(super) fn sample(
        &mut self,
        rows: Rows,
        n_vocab: usize,
        n_ctx: usize,
        tok: &Tokenizer,
        stats: &Stats,
    ) -> Outcome {
        let drafts = std::mem::take(&mut self.drafts);
        if self.opts.max_tokens == 0 {
            return Outcome::Done(StopReason::MaxTokens);
        }
        for r in 0..=drafts.len() {
            let row = match rows {
                Rows::Logits(l) => Rows::Logits(&l[r * n_vocab..(r + 1) * n_vocab]),
                a => a,
            };
            let (t, logprob) = match self.pick(row) {
                Ok(v) => v,
                Err(e) => return Outcome::Failed(e.to_string()),
            };
            let hit = drafts.get(r) == Some(&t);
            if r < drafts.len() {
                self.spec.record(hit, r + 1 == drafts.len(), self.opts.draft_max);
            }
            if let Some(end) = self.emit(t, logprob, tok, stats) {
                return end;
            }
            if hit {
                // The draft was right: its cells hold it, and the next row follows it.
                self.cached.push(t);
                continue;
            }
            if self.cached.len() >= n_ctx {
                return Outcome::Done(StopReason::ContextFull);
            }
            self.pending = Some(t);
            return Outcome::Running;
        }
        unreachable!("the last row has no draft to match")
    }

    /// The sampling step: the next token from a row of logits through the shaper (bans, bias,
    /// the constraint's mask, log-probabilities) and the sampler, or the argmax a plain greedy
    /// forward read back. The prompt is the penalty history; `emit` accepts each token.
    fn pick(&mut self, row: Rows) -> Result<(u32, Option<TokenLogprob>)> {
        match row {
            Rows::Argmax(t) => Ok((t, None)),
            Rows::Logits(l) => {
                let mut l = l.to_vec();
                self.shaper.pick(&mut self.sampler, &mut l, &self.prompt)
            }
        }
    }

    /// Commits a sampled token and sends its text; how the request ends here, if it does.
    fn emit(&mut self, t: u32, logprob: Option<TokenLogprob>, tok: &Tokenizer, stats: &Stats) -> Option<Outcome> {
        self.sampler.accept(t);
        self.first_token.get_or_insert_with(Instant::now);
        self.generated.push(t);
        self.logprobs.extend(logprob.clone());
        stats.generated_tokens.fetch_add(1, Ordering::Relaxed);
        if tok.is_eog(t) {
            return Some(Outcome::Done(StopReason::EndOfText));
        }
        let (text, stopped) = self.stream.push(tok, t);
        if !(self.sink)(Event::Token { id: t, text, logprob }) {
            self.cancel.store(true, Ordering::Relaxed);
            return Some(Outcome::Gone);
        }
        if stopped {
            Some(Outcome::Done(StopReason::StopString))
        } else if self.shaper.is_complete() {
            Some(Outcome::Done(StopReason::EndOfText))
        } else if self.generated.len() >= self.opts.max_tokens {
            Some(Outcome::Done(StopReason::MaxTokens))
        } else {
            None
        }
    }
}
