//! The scheduler: many requests on one session, with continuous batching.
//!
//! Every [`Scheduler::step`] is one forward: the next token of every running request, plus as
//! much of the waiting prompts as the step's token budget leaves (chunked prefill), so a long
//! prompt never stalls the others' decoding for more than one chunk. A request is admitted
//! when a sequence is free and the pool can hold its prompt and `max_tokens`; a prompt that
//! shares a prefix with a running or recently finished sequence forks it (or takes it over)
//! and evaluates only the rest, reported as cached tokens. A cancelled request lets go of its
//! cells at once.
//!
//! A sequence's logits do not depend on what it is batched with: on the CPU they are the bits
//! it would get alone, given the same split of its own prompt (a prompt chunk is never cut to
//! a single token, so each chunk's numerics are those of a prompt batch).
//!
//! [`Scheduler::spawn`] runs one on its own thread for programs that submit from several
//! (desktop apps, the server); [`Handle`] streams a request's events and cancels it on drop.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::time::Instant;

use crate::chat::{Chat, ChatMessage, ChatTemplate};
use crate::constrain::Constrainer;
use crate::engine::{Engine, GenerateOptions, StopReason, TextStream};
use crate::error::{Error, Result};
use crate::kv::SeqId;
use crate::sampling::{Sampler, Shaper, TokenLogprob};
use crate::session::{Batch, Session};
use crate::tokenizer::Tokenizer;

pub type RequestId = u64;

/// A prompt and how to continue it: max tokens, sampling with its own seed, stop strings.
#[derive(Clone, Debug)]
pub struct Request {
    pub prompt: Prompt,
    pub opts: GenerateOptions,
}

/// What a request continues: token ids, raw text (tokenized with the model's special
/// tokens), or a conversation rendered by the model's chat template (`Chat`: with tools and
/// extra template variables).
#[derive(Clone, Debug)]
pub enum Prompt {
    Ids(Vec<u32>),
    Text(String),
    Messages(Vec<ChatMessage>),
    Chat(Chat),
}

/// What a request hears, in order: `Started`, a `Token` per generated token, then `Done`
/// (or `Error`).
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// Admitted: `cached` of the prompt's tokens were already in the pool.
    Started {
        prompt_tokens: usize,
        cached: usize,
    },
    /// A generated token and the text it makes safe to show (empty while a character or a
    /// possible stop string is held back); its log-probability when the request asked
    /// (`GenerateOptions::logprobs`).
    Token {
        id: u32,
        text: String,
        logprob: Option<TokenLogprob>,
    },
    Done(Finished),
    /// The request failed (the others run on).
    Error(String),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Finished {
    pub reason: StopReason,
    pub tokens: Vec<u32>,
    /// Text held back until the end (after the last `Token`'s).
    pub rest: String,
    pub usage: Usage,
}

#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Usage {
    pub prompt_tokens: usize,
    /// Prompt tokens whose cells were reused rather than evaluated.
    pub cached_tokens: usize,
    pub completion_tokens: usize,
    /// From admission to the first token, and from there to the end.
    pub prefill_secs: f64,
    pub decode_secs: f64,
}

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

struct Slot {
    id: RequestId,
    seq: SeqId,
    prompt: Vec<u32>,
    /// The tokens whose K/V the sequence's cells hold, in order.
    cached: Vec<u32>,
    reused: usize,
    generated: Vec<u32>,
    /// Sampled, not yet evaluated.
    pending: Option<u32>,
    sampler: Sampler,
    stream: TextStream,
    opts: GenerateOptions,
    /// `ignore_eos`, `logit_bias`, the constraint and log-probabilities.
    shaper: Shaper,
    sink: Sink,
    cancel: Arc<AtomicBool>,
    admitted: Instant,
    first_token: Option<Instant>,
}

impl Slot {
    /// Cells this request may still take: the rest of its prompt and its tokens to come,
    /// within the context.
    fn reserve(&self, n_ctx: usize) -> usize {
        let total = (self.prompt.len() + self.opts.max_tokens).min(n_ctx);
        total.saturating_sub(self.cached.len())
    }
}

struct Waiting {
    id: RequestId,
    /// The prompt as ids.
    prompt: Vec<u32>,
    req: Request,
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
        })
    }

    /// An engine's session, tokenizer and chat template under a scheduler (the engine's
    /// cached conversation is let go).
    pub fn from_engine(engine: Engine, opts: SchedulerOptions) -> Result<Scheduler> {
        let (constrainer, engine) = engine.take_constrainer();
        let Engine {
            mut session,
            tokenizer,
            template,
            ..
        } = engine;
        session.reset();
        let mut s = Scheduler::new(session, Arc::new(tokenizer), opts)?;
        s.template = template;
        s.constrainer = constrainer;
        Ok(s)
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
        Handle { id, events: rx, cancel }
    }

    fn submit_with(&mut self, req: Request, mut sink: Sink, cancel: Arc<AtomicBool>) -> RequestId {
        let id = self.next_id;
        self.next_id += 1;
        self.stats.requests.fetch_add(1, Ordering::Relaxed);
        let n_ctx = self.session.n_ctx();
        let prompt = match self.prompt_ids(&req.prompt) {
            Ok(p) => p,
            Err(e) => {
                sink(Event::Error(e.to_string()));
                return id;
            }
        };
        let bad = if prompt.is_empty() {
            Some("empty prompt".to_string())
        } else if prompt.len() >= n_ctx {
            Some(format!(
                "the prompt is {} tokens, the context holds {n_ctx}",
                prompt.len()
            ))
        } else if let Some(&t) = prompt.iter().find(|&&t| t as usize >= self.session.n_vocab()) {
            Some(format!(
                "token id {t} is outside the vocabulary of {}",
                self.session.n_vocab()
            ))
        } else {
            req.opts.sampler.validate().err().map(|e| e.to_string())
        };
        let shaper = match bad {
            Some(why) => Err(why),
            None => Shaper::new(
                req.opts.shaping(),
                &self.tokenizer,
                self.session.n_vocab(),
                &mut self.constrainer,
            )
            .map_err(|e| e.to_string()),
        };
        match shaper {
            Err(why) => {
                sink(Event::Error(why));
            }
            Ok(shaper) => self.waiting.push_back(Waiting {
                id,
                prompt,
                req,
                shaper,
                sink,
                cancel,
            }),
        }
        id
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
            let need = (w.prompt.len() + w.req.opts.max_tokens).min(n_ctx) - n;
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
            let w = self.waiting.pop_front().expect("front above");
            let seq = match (run_i, reused) {
                (Some(i), _) if n > 0 => self.session.seq_fork(self.running[i].seq, n),
                (_, Some(r)) if n > 0 => {
                    let i = self.kept.iter().position(|k| k.seq == r).expect("kept above");
                    let k = self.kept.remove(i).expect("index just found");
                    self.session.seq_truncate(k.seq, n).map(|()| k.seq)
                }
                _ => Ok(self.session.seq_new()),
            };
            let mut w = w;
            let seq = match seq {
                Ok(s) => s,
                Err(e) => {
                    (w.sink)(Event::Error(e.to_string()));
                    continue;
                }
            };
            let sampler = match Sampler::new(w.req.opts.sampler.clone()) {
                Ok(s) => s,
                Err(e) => {
                    let _ = self.session.seq_remove(seq);
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
                pending: None,
                sampler,
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

    /// One step: admit, one forward of every running request's next token and prompt
    /// chunks up to the budget, then sampling. Returns what it did (all zero when idle).
    pub fn step(&mut self) -> StepReport {
        self.reap();
        self.admit();
        let budget = match self.opts.step_tokens {
            0 => self.session.n_batch(),
            n => n,
        };
        let mut batch = Batch::new();
        // Per slot: tokens it put in the batch, and whether its last one wants logits.
        let mut put: Vec<(usize, usize, bool)> = Vec::new();
        for (i, s) in self.running.iter().enumerate() {
            if let Some(t) = s.pending {
                batch.push(s.seq, t, s.cached.len(), true);
                put.push((i, 1, true));
            }
        }
        let mut prefilled = 0;
        for (i, s) in self.running.iter().enumerate() {
            let left = budget.saturating_sub(batch.len());
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
                batch.push(s.seq, t, p0 + j, p0 + j + 1 == s.prompt.len());
            }
            put.push((i, k, p0 + k == s.prompt.len()));
            prefilled += k;
        }
        let decoded = batch.len() - prefilled;
        if batch.is_empty() {
            self.publish();
            return StepReport {
                running: self.running.len(),
                waiting: self.waiting.len(),
                ..StepReport::default()
            };
        }
        match self.session.decode(&batch) {
            Ok(logits) => self.absorb(&put, logits),
            Err(e) => {
                // The batch's requests fail; the pool is as it was, the rest run on.
                let ids: Vec<RequestId> = put.iter().map(|&(i, _, _)| self.running[i].id).collect();
                for id in ids {
                    if let Some(i) = self.running.iter().position(|s| s.id == id) {
                        let mut s = self.running.remove(i);
                        let _ = self.session.seq_remove(s.seq);
                        (s.sink)(Event::Error(e.to_string()));
                    }
                }
            }
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

    /// Records what a forward evaluated and samples each wanted row.
    fn absorb(&mut self, put: &[(usize, usize, bool)], logits: Vec<f32>) {
        let nv = self.session.n_vocab();
        let n_ctx = self.session.n_ctx();
        let mut row = 0;
        let mut done: Vec<(usize, StopReason)> = Vec::new();
        let mut failed: Vec<(usize, String)> = Vec::new();
        for &(i, k, wants) in put {
            let s = &mut self.running[i];
            match s.pending.take() {
                Some(t) => s.cached.push(t),
                None => {
                    let p0 = s.cached.len();
                    s.cached.extend_from_slice(&s.prompt[p0..p0 + k]);
                }
            }
            if !wants {
                continue;
            }
            let mut l = logits[row * nv..(row + 1) * nv].to_vec();
            row += 1;
            if s.opts.max_tokens == 0 {
                done.push((i, StopReason::MaxTokens));
                continue;
            }
            let (t, logprob) = match s.shaper.pick(&mut s.sampler, &mut l, &s.prompt) {
                Ok(v) => v,
                Err(e) => {
                    failed.push((i, e.to_string()));
                    continue;
                }
            };
            s.sampler.accept(t);
            s.first_token.get_or_insert_with(Instant::now);
            s.generated.push(t);
            self.stats.generated_tokens.fetch_add(1, Ordering::Relaxed);
            if self.tokenizer.is_eog(t) {
                done.push((i, StopReason::EndOfText));
                continue;
            }
            let (text, stopped) = s.stream.push(&self.tokenizer, t);
            if !(s.sink)(Event::Token { id: t, text, logprob }) {
                s.cancel.store(true, Ordering::Relaxed);
                continue;
            }
            if stopped {
                done.push((i, StopReason::StopString));
            } else if s.shaper.is_complete() {
                done.push((i, StopReason::EndOfText));
            } else if s.generated.len() >= s.opts.max_tokens {
                done.push((i, StopReason::MaxTokens));
            } else if s.cached.len() >= n_ctx {
                done.push((i, StopReason::ContextFull));
            } else {
                s.pending = Some(t);
            }
        }
        // Highest index first, so the others stay where they are.
        let mut ends: Vec<(usize, std::result::Result<StopReason, String>)> = done
            .into_iter()
            .map(|(i, r)| (i, Ok(r)))
            .chain(failed.into_iter().map(|(i, e)| (i, Err(e))))
            .collect();
        ends.sort_by_key(|d| std::cmp::Reverse(d.0));
        for (i, end) in ends {
            let mut s = self.running.remove(i);
            match end {
                Ok(reason) => self.finish(s, reason),
                Err(e) => {
                    // A matcher that failed: the request fails, its cells go.
                    let _ = self.session.seq_remove(s.seq);
                    (s.sink)(Event::Error(e));
                }
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
            },
            tokens: std::mem::take(&mut s.generated),
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
    fn step_or_fail(&mut self) -> StepReport {
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

    /// Runs the scheduler on its own thread; submit from anywhere through the runner.
    pub fn spawn(mut self) -> Runner {
        let (tx, rx) = mpsc::channel::<Cmd>();
        let stats = self.stats.clone();
        let thread = std::thread::spawn(move || loop {
            let cmd = if self.is_idle() {
                match rx.recv() {
                    Ok(c) => Some(c),
                    Err(_) => return,
                }
            } else {
                match rx.try_recv() {
                    Ok(c) => Some(c),
                    Err(mpsc::TryRecvError::Empty) => None,
                    Err(mpsc::TryRecvError::Disconnected) => return,
                }
            };
            match cmd {
                Some(Cmd::Submit(req, sink, cancel)) => {
                    self.submit_with(*req, sink, cancel);
                    continue;
                }
                Some(Cmd::FinishAll(why)) => {
                    self.finish_all(&why);
                    continue;
                }
                None => {}
            }
            self.step_or_fail();
        });
        Runner {
            tx,
            thread: Some(thread),
            stats,
        }
    }
}

enum Cmd {
    Submit(Box<Request>, Sink, Arc<AtomicBool>),
    FinishAll(String),
}

/// A request's events, in order; dropping it cancels the request.
pub struct Handle {
    pub id: RequestId,
    pub events: Receiver<Event>,
    cancel: Arc<AtomicBool>,
}

impl Handle {
    pub fn cancel(&self) {
        self.cancel.store(true, Ordering::Relaxed);
    }

    /// Waits for the end: the tokens and text, or the error.
    pub fn wait(self) -> Result<(Finished, String)> {
        let mut text = String::new();
        for e in self.events.iter() {
            match e {
                Event::Token { text: t, .. } => text.push_str(&t),
                Event::Done(f) => {
                    text.push_str(&f.rest);
                    return Ok((f, text));
                }
                Event::Error(e) => return Err(Error::InvalidArgument(e)),
                Event::Started { .. } => {}
            }
        }
        Err(Error::InvalidArgument("the scheduler stopped".into()))
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.cancel();
    }
}

/// A scheduler on its own thread. Dropping it lets the thread finish what is queued and end.
pub struct Runner {
    tx: Sender<Cmd>,
    thread: Option<std::thread::JoinHandle<()>>,
    stats: Arc<Stats>,
}

/// A request's cancel switch from [`Runner::submit_sink`]: dropping it cancels the request at
/// the next step (a server drops it when the client goes away).
pub struct Ticket {
    cancel: Arc<AtomicBool>,
}

impl Ticket {
    pub fn cancel(&self) {
        self.cancel.store(true, Ordering::Relaxed);
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.cancel();
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
    pub steps: AtomicU64,
}

impl Runner {
    /// The scheduler's counters, updated every step.
    pub fn stats(&self) -> Arc<Stats> {
        self.stats.clone()
    }

    /// Queues a request whose events go to `sink` (on the scheduler's thread: it must not
    /// block); `false` back, or dropping the ticket, cancels it at the next step.
    pub fn submit_sink(&self, req: Request, sink: impl FnMut(Event) -> bool + Send + 'static) -> Ticket {
        let cancel = Arc::new(AtomicBool::new(false));
        if let Err(mpsc::SendError(Cmd::Submit(_, mut sink, _))) =
            self.tx.send(Cmd::Submit(Box::new(req), Box::new(sink), cancel.clone()))
        {
            sink(Event::Error("the scheduler stopped".into()));
        }
        Ticket { cancel }
    }

    pub fn submit(&self, req: Request) -> Handle {
        let (etx, rx) = mpsc::channel();
        let cancel = Arc::new(AtomicBool::new(false));
        let sink: Sink = Box::new(move |e| etx.send(e).is_ok());
        let id = NEXT_REMOTE.fetch_add(1, Ordering::Relaxed);
        if let Err(mpsc::SendError(Cmd::Submit(_, mut sink, _))) =
            self.tx.send(Cmd::Submit(Box::new(req), sink, cancel.clone()))
        {
            sink(Event::Error("the scheduler stopped".into()));
        }
        Handle { id, events: rx, cancel }
    }

    /// Ends every request at the scheduler's next turn ([`Scheduler::finish_all`]).
    pub fn finish_all(&self, why: &str) {
        let _ = self.tx.send(Cmd::FinishAll(why.to_string()));
    }
}

/// Handles from a runner number themselves (the scheduler's own ids stay inside its thread).
static NEXT_REMOTE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl Drop for Runner {
    fn drop(&mut self) {
        let (tx, _) = mpsc::channel();
        drop(std::mem::replace(&mut self.tx, tx));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
