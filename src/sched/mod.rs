//! The scheduler: many requests on one session, with continuous batching. Every way to
//! generate — the engine's one conversation, `run`, `chat`, the server — goes through it.
//!
//! Every [`Scheduler::step`] is one forward (two when it checks drafts, below): the next token
//! of every running request, plus as much of the waiting prompts as the step's token budget
//! leaves (chunked prefill), so a long prompt never stalls the others' decoding for more than
//! one chunk. A request is admitted when a sequence is free and the pool can hold its prompt
//! and `max_tokens`; a prompt that shares a prefix with a running or recently finished sequence
//! forks it (or takes it over) and evaluates only the rest, reported as cached tokens. A
//! cancelled request lets go of its cells at once.
//!
//! A sequence's logits do not depend on what it is batched with: on the CPU they are the bits
//! it would get alone, given the same split of its own prompt (a prompt chunk is never cut to
//! a single token, so each chunk's numerics are those of a prompt batch).
//!
//! A request that speculates (`GenerateOptions::speculation`) has tokens drafted after its
//! pending one (prompt lookup or the draft model, [`crate::spec`]), evaluated in the same
//! forward as the others' decode tokens. Every token of that forward takes the numerics of a
//! one-token forward (`Batch::decode_numerics`), so a draft token confirmed has the bits plain
//! decoding gives it and greedy output is the same with or without speculation; the step's
//! prompt chunks, whose numerics are a prompt batch's, go in a second forward. Several
//! requests speculate side by side, but the draft model keeps one context: requests that take
//! turns with it each make it catch up from their common prefix.
//!
//! [`Scheduler::spawn`] runs one on its own thread for programs that submit from several
//! (desktop apps, the server); [`Handle`] streams a request's events and cancels it on drop.

mod request;
mod runner;
mod slot;
mod text;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Instant;

use crate::chat::ChatTemplate;
use crate::constrain::Constrainer;
use crate::error::{Error, Result};
use crate::kv::SeqId;
use crate::sampling::{Sampler, Shaper};
use crate::session::{Batch, Session};
use crate::spec::ModelDraft;
use crate::tokenizer::Tokenizer;

pub use request::{Event, Finished, GenerateOptions, Prompt, Request, RequestId, Speculation, StopReason, Usage};
pub use runner::{Handle, Runner, Ticket};
pub use text::TextStream;

use slot::{Outcome, Rows, Slot, SpecState};

#[derive(Clone, Debug)]
pub struct SchedulerOptions {
    /// Sequences decoding together (`--parallel`).
    pub max_seqs: usize,
    /// Tokens per step (decode tokens first, then prompt chunks); 0 = the session's `n_batch`.
    pub step_tokens: usize,
    /// Finished sequences kept for prefix reuse (the oldest go first when cells are needed).
    pub keep_finished: usize,
}

impl Default for SchedulerOptions {
    fn default() -> Self {
        SchedulerOptions {
            max_seqs: 4,
            step_tokens: 0,
            keep_finished: 4,
        }
    }
}

/// Where a request's events go; `false` back means the listener is gone (cancel it).
type Sink = Box<dyn FnMut(Event) -> bool + Send>;

struct Waiting {
    id: RequestId,
    /// The prompt as ids.
    prompt: Vec<u32>,
    req: Request,
    sampler: Sampler,
    shaper: Shaper,
    sink: Sink,
    cancel: Arc<AtomicBool>,
}

/// A finished sequence kept for prefix reuse.
struct Kept {
    seq: SeqId,
    tokens: Vec<u32>,
}

/// What one step did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StepReport {
    pub decoded: usize,
    pub prefilled: usize,
    pub running: usize,
    pub waiting: usize,
}

/// A running request's share of a forward: the tokens it put in and the logits rows it wants.
struct Put {
    id: RequestId,
    tokens: usize,
    rows: usize,
}

/// What a forward gave back: logits rows in batch order, or the argmax of its one row.
enum Forward {
    Logits(Vec<f32>),
    Argmax(u32),
}

pub struct Scheduler {
    session: Session,
    tokenizer: Arc<Tokenizer>,
    template: Option<ChatTemplate>,
    opts: SchedulerOptions,
    waiting: VecDeque<Waiting>,
    running: Vec<Slot>,
    kept: VecDeque<Kept>,
    next_id: RequestId,
    stats: Arc<Stats>,
    /// The tokenizer's environment for constraints, built on the first constrained request.
    constrainer: Option<Arc<Constrainer>>,
    /// The draft model of `Speculation::Draft`.
    draft: Option<ModelDraft>,
}

impl Scheduler {
    pub fn new(session: Session, tokenizer: Arc<Tokenizer>, opts: SchedulerOptions) -> Result<Scheduler> {
        if opts.max_seqs == 0 {
            return Err(Error::InvalidArgument("a scheduler of 0 sequences".into()));
        }
        Ok(Scheduler {
            session,
            tokenizer,
            template: None,
            opts,
            waiting: VecDeque::new(),
            running: Vec::new(),
            kept: VecDeque::new(),
            next_id: 1,
            stats: Arc::new(Stats::default()),
            constrainer: None,
            draft: None,
        })
    }

    /// The same session, draft model and constraint environment under new options, with a
    /// chat template for `Prompt::Messages` and `Prompt::Chat`; what was kept for prefix
    /// reuse is let go, the counters start afresh. Nothing may be running or waiting.
    pub(crate) fn reconfigured(mut self, opts: SchedulerOptions, template: Option<ChatTemplate>) -> Result<Scheduler> {
        if opts.max_seqs == 0 {
            return Err(Error::InvalidArgument("a scheduler of 0 sequences".into()));
        }
        debug_assert!(self.is_idle(), "reconfigured while requests are live");
        self.forget();
        self.session.reset();
        self.opts = opts;
        self.template = template;
        self.stats = Arc::new(Stats::default());
        Ok(self)
    }

    /// Sets the draft model of `Speculation::Draft` (`--draft MODEL`): a smaller model of the
    /// same vocabulary, on its own session.
    pub fn set_draft(&mut self, session: Session) -> Result<()> {
        self.draft = Some(ModelDraft::new(session, self.session.n_vocab())?);
        Ok(())
    }

    pub fn has_draft(&self) -> bool {
        self.draft.is_some()
    }

    /// The token ids of `p`.
    pub fn prompt_ids(&self, p: &Prompt) -> Result<Vec<u32>> {
        match p {
            Prompt::Ids(ids) => Ok(ids.clone()),
            Prompt::Text(t) => self.tokenizer.encode(t, true, true),
            Prompt::Messages(m) => self.tokenizer.encode(&self.template()?.render(m, true)?, true, true),
            Prompt::Chat(c) => self
                .tokenizer
                .encode(&self.template()?.render_chat(c, true)?, true, true),
        }
    }

    fn template(&self) -> Result<&ChatTemplate> {
        self.template
            .as_ref()
            .ok_or_else(|| Error::Template("this model has no chat template (send text or ids)".into()))
    }

    /// The counters `step` keeps.
    pub fn stats(&self) -> Arc<Stats> {
        self.stats.clone()
    }

    fn publish(&self) {
        let st = &self.stats;
        st.running.store(self.running.len() as u64, Ordering::Relaxed);
        st.waiting.store(self.waiting.len() as u64, Ordering::Relaxed);
        st.kv_cells_used
            .store(self.session.kv().used() as u64, Ordering::Relaxed);
        st.kv_cells_max.store(self.session.n_ctx() as u64, Ordering::Relaxed);
        st.kept.store(self.kept.len() as u64, Ordering::Relaxed);
        let kept_tokens: usize = self.kept.iter().map(|k| k.tokens.len()).sum();
        st.kept_tokens.store(kept_tokens as u64, Ordering::Relaxed);
    }

    pub fn session(&self) -> &Session {
        &self.session
    }

    /// The session, for work on its main sequence beside the scheduler's own (embeddings,
    /// logits dumps, switches such as flash attention).
    pub(crate) fn session_mut(&mut self) -> &mut Session {
        &mut self.session
    }

    pub fn tokenizer(&self) -> &Arc<Tokenizer> {
        &self.tokenizer
    }

    /// Requests admitted and not finished.
    pub fn running(&self) -> usize {
        self.running.len()
    }

    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    pub fn is_idle(&self) -> bool {
        self.running.is_empty() && self.waiting.is_empty()
    }

    /// Queues a request; `sink` receives its events (returning `false` cancels it).
    pub fn submit(&mut self, req: Request, sink: impl FnMut(Event) -> bool + Send + 'static) -> RequestId {
        self.submit_with(req, Box::new(sink), Arc::new(AtomicBool::new(false)))
    }

    /// Queues a request whose events come through the handle's channel; dropping the handle
    /// cancels it at the next step.
    pub fn submit_channel(&mut self, req: Request) -> Handle {
        let (tx, rx) = mpsc::channel();
        let cancel = Arc::new(AtomicBool::new(false));
        let id = self.submit_with(req, Box::new(move |e| tx.send(e).is_ok()), cancel.clone());
        Handle::new(id, rx, cancel)
    }

    /// Queues a request, or says why it cannot run (then `sink` hears nothing).
    pub fn try_submit(&mut self, req: Request, sink: impl FnMut(Event) -> bool + Send + 'static) -> Result<RequestId> {
        let id = self.next_id;
        self.next_id += 1;
        self.stats.requests.fetch_add(1, Ordering::Relaxed);
        let (prompt, sampler, shaper) = self.prepare(&req)?;
        self.waiting.push_back(Waiting {
            id,
            prompt,
            req,
            sampler,
            shaper,
            sink: Box::new(sink),
            cancel: Arc::new(AtomicBool::new(false)),
        });
        Ok(id)
    }

    fn submit_with(&mut self, req: Request, mut sink: Sink, cancel: Arc<AtomicBool>) -> RequestId {
        let id = self.next_id;
        self.next_id += 1;
        self.stats.requests.fetch_add(1, Ordering::Relaxed);
        match self.prepare(&req) {
            Ok((prompt, sampler, shaper)) => self.waiting.push_back(Waiting {
                id,
                prompt,
                req,
                sampler,
                shaper,
                sink,
                cancel,
            }),
            Err(e) => {
                sink(Event::Error(e.to_string()));
            }
        }
        id
    }

    /// A request's prompt ids, sampler and shaper, or why it cannot run.
    fn prepare(&mut self, req: &Request) -> Result<(Vec<u32>, Sampler, Shaper)> {
        let prompt = self.prompt_ids(&req.prompt)?;
        self.check(&prompt, &req.opts)?;
        let sampler = Sampler::new(req.opts.sampler.clone())?;
        let shaper = Shaper::new(
            req.opts.shaping(),
            &self.tokenizer,
            self.session.n_vocab(),
            &mut self.constrainer,
        )?;
        Ok((prompt, sampler, shaper))
    }

    /// Whether text can be generated after `prompt` with `opts`: the model generates text, the
    /// prompt is neither empty nor too long for the context, its ids are in the vocabulary,
    /// the sampling options hold, and draft speculation has a draft model.
    fn check(&self, prompt: &[u32], opts: &GenerateOptions) -> Result<()> {
        let model = &self.session.model;
        if model.hparams.pooling.is_some() {
            return Err(Error::InvalidArgument(format!(
                "{} is an embedding model ({}): it generates no text (use embed)",
                model.source,
                model.arch.name()
            )));
        }
        let n_ctx = self.session.n_ctx();
        if prompt.is_empty() {
            return Err(Error::InvalidArgument("empty prompt".into()));
        }
        if prompt.len() >= n_ctx {
            return Err(Error::InvalidArgument(format!(
                "the prompt is {} tokens, the context holds {n_ctx}: use a larger context (-c) or a shorter prompt",
                prompt.len()
            )));
        }
        let n_vocab = self.session.n_vocab();
        if let Some(&t) = prompt.iter().find(|&&t| t as usize >= n_vocab) {
            return Err(Error::InvalidArgument(format!(
                "token id {t} is outside the vocabulary of {n_vocab}"
            )));
        }
        opts.sampler.validate()?;
        if opts.speculation == Speculation::Draft && self.draft.is_none() {
            return Err(Error::InvalidArgument(
                "draft speculation without a draft model (set_draft, --draft)".into(),
            ));
        }
        Ok(())
    }

    /// Cancels a request, waiting or running; its cells are free when this returns.
    pub fn cancel(&mut self, id: RequestId) -> bool {
        if let Some(i) = self.waiting.iter().position(|w| w.id == id) {
            self.waiting.remove(i);
            return true;
        }
        if let Some(i) = self.running.iter().position(|s| s.id == id) {
            let s = self.running.remove(i);
            let _ = self.session.seq_remove(s.seq);
            self.stats.cancelled.fetch_add(1, Ordering::Relaxed);
            self.publish();
            return true;
        }
        false
    }

    /// Ends a running request where it is, as its listener asked (`StopReason::Callback`):
    /// its `Done` carries what it generated, its cells are kept for prefix reuse. False if it
    /// is not running.
    pub fn stop(&mut self, id: RequestId) -> bool {
        let Some(i) = self.running.iter().position(|s| s.id == id) else {
            return false;
        };
        let s = self.running.remove(i);
        self.finish(s, StopReason::Callback);
        self.publish();
        true
    }

    /// Lets go of the finished sequences kept for prefix reuse.
    pub fn forget(&mut self) {
        for k in std::mem::take(&mut self.kept) {
            let _ = self.session.seq_remove(k.seq);
        }
        self.publish();
    }

    /// Drops requests whose handle or sink went away.
    fn reap(&mut self) {
        self.waiting.retain(|w| !w.cancel.load(Ordering::Relaxed));
        let gone: Vec<RequestId> = self
            .running
            .iter()
            .filter(|s| s.cancel.load(Ordering::Relaxed))
            .map(|s| s.id)
            .collect();
        for id in gone {
            self.cancel(id);
        }
    }

    /// Cells free after every running request's reservation.
    fn unreserved(&self) -> usize {
        let n_ctx = self.session.n_ctx();
        let reserved: usize = self.running.iter().map(|s| s.reserve(n_ctx)).sum();
        self.session.kv().available().saturating_sub(reserved)
    }

    /// The longest shared prefix `prompt` finds among the running and kept sequences:
    /// (length, the running slot's or kept entry's index).
    fn best_prefix(&self, prompt: &[u32]) -> (usize, Option<usize>, Option<usize>) {
        let lcp = |a: &[u32]| a.iter().zip(prompt).take_while(|(x, y)| x == y).count();
        let mut best = (0, None, None);
        for (i, s) in self.running.iter().enumerate() {
            let n = lcp(&s.cached);
            if n > best.0 {
                best = (n, Some(i), None);
            }
        }
        for (i, k) in self.kept.iter().enumerate() {
            let n = lcp(&k.tokens);
            if n > best.0 {
                best = (n, None, Some(i));
            }
        }
        // At least one prompt token is evaluated, for its logits.
        best.0 = best.0.min(prompt.len() - 1);
        best
    }

    /// Admits waiting requests while a sequence is free and the pool can hold them.
    fn admit(&mut self) {
        let n_ctx = self.session.n_ctx();
        while self.running.len() < self.opts.max_seqs {
            let Some(w) = self.waiting.front() else { break };
            let (n, run_i, kept_i) = self.best_prefix(&w.prompt);
            let need = w.prompt.len().saturating_add(w.req.opts.max_tokens).min(n_ctx) - n;
            // Kept sequences give way when cells are short, oldest first, but not the one reused.
            let reused = kept_i.map(|i| self.kept[i].seq);
            while self.unreserved() < need {
                let Some(v) = self.kept.iter().position(|k| Some(k.seq) != reused) else {
                    break;
                };
                if let Some(k) = self.kept.remove(v) {
                    let _ = self.session.seq_remove(k.seq);
                }
            }
            if self.unreserved() < need && !self.running.is_empty() {
                break;
            }
            let mut w = self.waiting.pop_front().expect("front above");
            let seq = match (run_i, reused) {
                (Some(i), _) if n > 0 => self.session.seq_fork(self.running[i].seq, n),
                (_, Some(r)) if n > 0 => {
                    let i = self.kept.iter().position(|k| k.seq == r).expect("kept above");
                    let k = self.kept.remove(i).expect("index just found");
                    self.session.seq_truncate(k.seq, n).map(|()| k.seq)
                }
                _ => Ok(self.session.seq_new()),
            };
            let seq = match seq {
                Ok(s) => s,
                Err(e) => {
                    (w.sink)(Event::Error(e.to_string()));
                    continue;
                }
            };
            self.stats.cached_tokens.fetch_add(n as u64, Ordering::Relaxed);
            let alive = (w.sink)(Event::Started {
                prompt_tokens: w.prompt.len(),
                cached: n,
            });
            let slot = Slot {
                id: w.id,
                seq,
                cached: w.prompt[..n].to_vec(),
                reused: n,
                prompt: w.prompt,
                generated: Vec::new(),
                logprobs: Vec::new(),
                pending: None,
                drafts: Vec::new(),
                spec: SpecState::new(w.req.opts.draft_max),
                sampler: w.sampler,
                stream: TextStream::new(&w.req.opts.stop),
                opts: w.req.opts,
                shaper: w.shaper,
                sink: w.sink,
                cancel: w.cancel,
                admitted: Instant::now(),
                first_token: None,
            };
            if !alive {
                let _ = self.session.seq_remove(slot.seq);
                continue;
            }
            self.running.push(slot);
        }
    }

    /// One step: admit, one forward of every running request's next token (with its drafts,
    /// when it speculates) and prompt chunks up to the budget, then sampling. Returns what it
    /// did (all zero when idle).
    pub fn step(&mut self) -> StepReport {
        self.reap();
        self.admit();
        let budget = match self.opts.step_tokens {
            0 => self.session.n_batch(),
            n => n,
        };
        let n_ctx = self.session.n_ctx();
        let mut failed = Vec::new();
        for s in &mut self.running {
            match s.guess(self.draft.as_mut(), n_ctx) {
                Ok(g) => s.drafts = g,
                Err(e) => failed.push((s.id, e.to_string())),
            }
        }
        for (id, e) in failed {
            self.fail(id, e);
        }
        let mut batch = Batch::new();
        let mut put: Vec<Put> = Vec::new();
        for s in &self.running {
            if let Some(t) = s.pending {
                let p0 = s.cached.len();
                batch.push(s.seq, t, p0, true);
                for (j, &d) in s.drafts.iter().enumerate() {
                    batch.push(s.seq, d, p0 + 1 + j, true);
                }
                let n = 1 + s.drafts.len();
                put.push(Put {
                    id: s.id,
                    tokens: n,
                    rows: n,
                });
            }
        }
        // Drafts ride outside the budget (at most `draft_max` each); a step that checks any
        // runs its decode tokens with one-token numerics and its prompt chunks on their own.
        let decoding = put.len();
        let speculating = batch.len() > decoding;
        let mut chunks = Batch::new();
        let mut put_chunks: Vec<Put> = Vec::new();
        for s in &self.running {
            let left = budget.saturating_sub(decoding + chunks.len());
            let rest = s.prompt.len() - s.cached.len();
            if s.pending.is_some() || rest == 0 || left == 0 {
                continue;
            }
            let k = rest.min(left);
            // A chunk of one token would take single-token numerics; wait for a wider one.
            if k < rest && k < 2 {
                continue;
            }
            let p0 = s.cached.len();
            for (j, &t) in s.prompt[p0..p0 + k].iter().enumerate() {
                chunks.push(s.seq, t, p0 + j, p0 + j + 1 == s.prompt.len());
            }
            put_chunks.push(Put {
                id: s.id,
                tokens: k,
                rows: usize::from(p0 + k == s.prompt.len()),
            });
        }
        let prefilled = chunks.len();
        let decoded = batch.len();
        if batch.is_empty() && chunks.is_empty() {
            self.publish();
            return StepReport {
                running: self.running.len(),
                waiting: self.waiting.len(),
                ..StepReport::default()
            };
        }
        if speculating {
            batch.decode_numerics = true;
            self.forward(batch, put);
            if !chunks.is_empty() {
                self.forward(chunks, put_chunks);
            }
        } else {
            batch.items.extend(chunks.items);
            put.extend(put_chunks);
            self.forward(batch, put);
        }
        let st = &self.stats;
        st.steps.fetch_add(1, Ordering::Relaxed);
        st.prompt_tokens.fetch_add(prefilled as u64, Ordering::Relaxed);
        self.publish();
        StepReport {
            decoded,
            prefilled,
            running: self.running.len(),
            waiting: self.waiting.len(),
        }
    }

    /// Runs one forward and takes its results in; if it fails, its requests fail (the pool is
    /// as it was) and the others run on.
    fn forward(&mut self, batch: Batch, put: Vec<Put>) {
        if batch.is_empty() {
            return;
        }
        // Plain greedy decoding of one sequence reads back only the argmax.
        let argmax = batch.len() == 1
            && put.len() == 1
            && self
                .running
                .iter()
                .any(|s| s.id == put[0].id && s.pending.is_some() && s.argmax_only());
        let out = match argmax {
            true => self.session.decode_argmax(&batch).map(Forward::Argmax),
            false => self.session.decode(&batch).map(Forward::Logits),
        };
        match out {
            Ok(out) => self.absorb(&put, out),
            Err(e) => {
                for p in put {
                    self.fail(p.id, e.to_string());
                }
            }
        }
    }

    /// A running request fails: its cells go, its listener hears why.
    fn fail(&mut self, id: RequestId, why: String) {
        if let Some(i) = self.running.iter().position(|s| s.id == id) {
            let mut s = self.running.remove(i);
            let _ = self.session.seq_remove(s.seq);
            (s.sink)(Event::Error(why));
        }
    }

    /// Records what a forward evaluated and samples each wanted row.
    fn absorb(&mut self, put: &[Put], out: Forward) {
        let nv = self.session.n_vocab();
        let n_ctx = self.session.n_ctx();
        let mut row = 0;
        let mut ends: Vec<(RequestId, Outcome)> = Vec::new();
        for p in put {
            let rows = match &out {
                Forward::Logits(l) => Rows::Logits(&l[row * nv..(row + p.rows) * nv]),
                Forward::Argmax(t) => Rows::Argmax(*t),
            };
            row += p.rows;
            let Some(s) = self.running.iter_mut().find(|s| s.id == p.id) else {
                continue;
            };
            s.evaluated(p.tokens);
            if p.rows == 0 {
                continue;
            }
            let accepted = s.spec.accepted;
            let outcome = s.sample(rows, nv, n_ctx, &self.tokenizer, &self.stats);
            let st = &self.stats;
            st.draft_tokens.fetch_add(p.rows as u64 - 1, Ordering::Relaxed);
            st.draft_accepted
                .fetch_add((s.spec.accepted - accepted) as u64, Ordering::Relaxed);
            // The drafts after a miss: their cells go.
            if self.session.seq_len(s.seq).unwrap_or(0) > s.cached.len() {
                let _ = self.session.seq_truncate(s.seq, s.cached.len());
            }
            match outcome {
                Outcome::Running | Outcome::Gone => {}
                end => ends.push((s.id, end)),
            }
        }
        for (id, end) in ends {
            match end {
                Outcome::Done(reason) => {
                    if let Some(i) = self.running.iter().position(|s| s.id == id) {
                        let s = self.running.remove(i);
                        self.finish(s, reason);
                    }
                }
                // A matcher that failed: the request fails, its cells go.
                Outcome::Failed(e) => self.fail(id, e),
                Outcome::Running | Outcome::Gone => {}
            }
        }
        self.reap();
    }

    /// A running request's end: its `Done` (what it generated, the text held back, its usage),
    /// its cells kept for prefix reuse.
    fn finish(&mut self, mut s: Slot, reason: StopReason) {
        let now = Instant::now();
        let first = s.first_token.unwrap_or(now);
        let fin = Finished {
            reason,
            rest: s.stream.finish(),
            usage: Usage {
                prompt_tokens: s.prompt.len(),
                cached_tokens: s.reused,
                completion_tokens: s.generated.len(),
                prefill_secs: (first - s.admitted).as_secs_f64(),
                decode_secs: (now - first).as_secs_f64(),
                drafted: s.spec.drafted,
                accepted: s.spec.accepted,
            },
            tokens: std::mem::take(&mut s.generated),
            logprobs: std::mem::take(&mut s.logprobs),
        };
        (s.sink)(Event::Done(fin));
        self.keep(s.seq, s.cached);
    }

    /// Ends every request now (a server stopping past its grace period): each running one
    /// finishes where it is, with `StopReason::Callback` and what it generated so far, as a
    /// normal end; each waiting one fails with `why`.
    pub fn finish_all(&mut self, why: &str) {
        for mut w in std::mem::take(&mut self.waiting) {
            (w.sink)(Event::Error(why.to_string()));
        }
        for s in std::mem::take(&mut self.running) {
            self.finish(s, StopReason::Callback);
        }
        self.publish();
    }

    /// Keeps a finished sequence for prefix reuse, dropping the oldest beyond the limit.
    fn keep(&mut self, seq: SeqId, tokens: Vec<u32>) {
        if self.opts.keep_finished == 0 {
            let _ = self.session.seq_remove(seq);
            return;
        }
        self.kept.push_back(Kept { seq, tokens });
        while self.kept.len() > self.opts.keep_finished {
            if let Some(k) = self.kept.pop_front() {
                let _ = self.session.seq_remove(k.seq);
            }
        }
    }

    /// A step; if it could neither run nor admit anything, the head of the queue cannot fit
    /// and fails with the sizes.
    pub(crate) fn step_or_fail(&mut self) -> StepReport {
        let r = self.step();
        if r.decoded + r.prefilled == 0 && r.running == 0 && r.waiting > 0 {
            if let Some(mut w) = self.waiting.pop_front() {
                (w.sink)(Event::Error(
                    Error::KvFull {
                        need: w.prompt.len(),
                        free: self.session.kv().available(),
                        n_ctx: self.session.n_ctx(),
                    }
                    .to_string(),
                ));
            }
        }
        r
    }

    /// Steps until every request has finished.
    pub fn run_until_idle(&mut self) {
        while !self.is_idle() {
            self.step_or_fail();
        }
    }
}

/// What a scheduler is doing, for metrics: gauges as of the last step, counters since start.
#[derive(Debug, Default)]
pub struct Stats {
    pub running: AtomicU64,
    pub waiting: AtomicU64,
    pub kv_cells_used: AtomicU64,
    pub kv_cells_max: AtomicU64,
    /// Finished sequences kept for prefix reuse, and their tokens: with nothing running, the
    /// cells in use are at most `kept_tokens` (they may share cells).
    pub kept: AtomicU64,
    pub kept_tokens: AtomicU64,
    pub requests: AtomicU64,
    pub cancelled: AtomicU64,
    /// Prompt tokens evaluated, and those reused from cached cells instead.
    pub prompt_tokens: AtomicU64,
    pub cached_tokens: AtomicU64,
    pub generated_tokens: AtomicU64,
    /// Speculation: tokens drafted, and of those, accepted.
    pub draft_tokens: AtomicU64,
    pub draft_accepted: AtomicU64,
    pub steps: AtomicU64,
}
