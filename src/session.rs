//! A session: one model on one backend, its KV pool and the graph cache.
//! `eval` appends tokens to the main sequence and returns logits; `decode` runs a batch of
//! tokens of many sequences in one forward.

use std::collections::HashMap;
use std::sync::Arc;

use crate::backend::{self, BackendChoice, BackendOptions, Context, KvLayout, KvType, Step};
use crate::error::{Error, Result};
use crate::kv::KvPool;
pub use crate::kv::SeqId;
use crate::model::{Graph, GraphKey, Model};

/// How a session is set up. `Default` is the built-in behaviour and reads nothing from the
/// environment; [`SessionOptions::from_env`] applies the `MINFER_*` overrides (as the CLI does).
#[derive(Clone, Debug)]
pub struct SessionOptions {
    /// Context size in tokens (0 = the model's training context, capped at 4096).
    pub n_ctx: usize,
    /// Tokens per forward during prefill.
    pub n_batch: usize,
    pub threads: Option<usize>,
    pub backend: BackendChoice,
    /// None = the auto policy (`KvType::auto`); `MINFER_CACHE_TYPE` through `from_env`.
    pub kv_type: Option<KvType>,
    /// CUDA device index (`--gpu N`); None = 0.
    pub gpu: Option<usize>,
    /// CPU ISA, wgpu and CUDA switches, profiling, the upload progress callback.
    pub backend_options: BackendOptions,
    /// Leave every FFN and expert tensor out (`Model::without_ffn`, `--no-ffn`): attention-only
    /// graphs for attention analysis. **The outputs are not the model's.**
    pub drop_ffn: bool,
}

impl Default for SessionOptions {
    fn default() -> Self {
        SessionOptions {
            n_ctx: 0,
            n_batch: 512,
            threads: None,
            backend: BackendChoice::Auto,
            kv_type: None,
            gpu: None,
            backend_options: BackendOptions::default(),
            drop_ffn: false,
        }
    }
}

impl SessionOptions {
    /// The defaults with the environment's overrides applied (`crate::overrides`): an error names
    /// a variable whose value does not parse.
    pub fn from_env() -> Result<SessionOptions> {
        Ok(SessionOptions::from_overrides(&crate::overrides::Overrides::from_env()?))
    }

    /// The defaults with `o` applied: the KV type (`MINFER_CACHE_TYPE`) and the backend switches.
    pub fn from_overrides(o: &crate::overrides::Overrides) -> SessionOptions {
        SessionOptions {
            kv_type: o.kv_type,
            backend_options: o.backend_options(),
            ..SessionOptions::default()
        }
    }
}

/// One node's value after a forward (`Session::trace`): `[rows, width]`, row-major.
#[derive(Clone, Debug)]
pub struct Trace {
    pub name: String,
    pub rows: usize,
    pub width: usize,
    pub values: Vec<f32>,
}

pub struct Session {
    pub model: Arc<Model>,
    ctx: Box<dyn Context>,
    graphs: HashMap<GraphKey, Arc<Graph>>,
    pool: KvPool,
    /// The sequence `eval`, `eval_argmax`, `trace`, `truncate` and `reset` work on.
    main: SeqId,
    n_batch: usize,
    pub kv_type: KvType,
    pub backend_name: &'static str,
    flash_attn: bool,
    /// What was decided at start-up and why (backend, KV type and size).
    pub log: Vec<String>,
}

/// Cells of KV storage a session starts with; it grows (doubling) as they fill.
const INITIAL_CELLS: usize = 256;

/// Tokens for one forward of many sequences ([`Session::decode`]): each token names its
/// sequence, its position there (the next after the sequence's cells and the batch's earlier
/// tokens of it) and whether its logits are wanted.
#[derive(Clone, Debug, Default)]
pub struct Batch {
    pub items: Vec<BatchToken>,
    /// Every token takes the attention numerics of a one-token forward, so its logits are
    /// the bits plain decoding gives it on the CPU (speculative verification).
    pub decode_numerics: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchToken {
    pub seq: SeqId,
    pub token: u32,
    pub pos: usize,
    pub logits: bool,
}

impl Batch {
    pub fn new() -> Batch {
        Batch::default()
    }

    pub fn push(&mut self, seq: SeqId, token: u32, pos: usize, logits: bool) {
        self.items.push(BatchToken {
            seq,
            token,
            pos,
            logits,
        });
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    pub fn clear(&mut self) {
        self.items.clear();
    }
}

/// The largest context a session takes (positions).
pub const MAX_CTX: usize = 1 << 20;

/// The memory the system can still give (Linux: `MemAvailable` of /proc/meminfo), in bytes.
fn available_memory() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kb: u64 = info
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}

impl Session {
    pub fn new(model: Arc<Model>, opts: &SessionOptions) -> Result<Session> {
        let cands = backend::candidates(opts.backend, opts.threads, opts.gpu, &opts.backend_options)?;
        Session::on(cands, model, opts)
    }

    /// A session on the first of `cands` whose gate takes the model (`opts.backend`,
    /// `threads`, `gpu` and `backend_options` are not consulted): for programs that build
    /// their own backends.
    /// Weight bytes the backend holds in its own memory (0 for the CPU, which reads the
    /// mapped file).
    pub fn resident_bytes(&self) -> u64 {
        self.ctx.resident_bytes()
    }

    pub fn on(cands: Vec<Arc<dyn backend::Backend>>, model: Arc<Model>, opts: &SessionOptions) -> Result<Session> {
        let mut dropped = None;
        let model = if opts.drop_ffn && !model.hparams.drop_ffn {
            let (m, d) = model.without_ffn()?;
            dropped = Some(d);
            Arc::new(m)
        } else {
            model
        };
        let kv_type = match opts.kv_type {
            Some(t) => t,
            None => KvType::auto(&model),
        };
        let n_ctx = if opts.n_ctx == 0 {
            model.hparams.n_ctx_train.min(4096)
        } else {
            opts.n_ctx
        };
        if n_ctx > MAX_CTX {
            return Err(Error::InvalidArgument(format!(
                "context size {n_ctx} is over the limit of {MAX_CTX} positions"
            )));
        }
        if opts.n_batch == 0 {
            return Err(Error::InvalidArgument("batch size 0".into()));
        }
        let full = KvLayout::new(&model, n_ctx, kv_type)?;
        let (backend, mut log) = backend::select(cands, &model, kv_type, n_ctx)?;
        // The cache grows with use, but the context asked for must fit when it is full: on the
        // CPU it lives in the machine's memory, so a context that cannot is refused now.
        let kv_full = full.model_bytes(&model.hparams) as u64;
        if backend.name() == "cpu" {
            if let Some(avail) = available_memory() {
                if kv_full > avail {
                    return Err(Error::InvalidArgument(format!(
                        "a context of {n_ctx} positions needs a {} KV cache of {:.1} GB; {:.1} GB of memory is available \
                         (use a smaller context, -c, or a smaller cache type, --cache-type)",
                        kv_type.name(),
                        kv_full as f64 / 1e9,
                        avail as f64 / 1e9
                    )));
                }
            }
        }
        let n_train = model.hparams.n_ctx_train;
        // (An embedding model's cells hold many inputs, each within the positions.)
        if n_train > 0 && n_ctx > n_train && model.hparams.pooling.is_none() {
            log.push(format!(
                "warning: a context of {n_ctx} positions is beyond the {n_train} the model was trained on; \
                 what it writes past them may degrade"
            ));
        }
        let cells = n_ctx.min(INITIAL_CELLS);
        let ctx = backend.new_context(&model, cells, kv_type)?;
        log.push(format!(
            "kv cache: {} × up to {} cells ({:.1} MB), {} allocated now ({:.1} MB), growing with use",
            kv_type.name(),
            n_ctx,
            full.bytes() as f64 / 1e6,
            cells,
            ctx.kv_bytes() as f64 / 1e6
        ));
        if let Some(d) = dropped {
            log.push(format!(
                "no-ffn: {} FFN/expert tensors ({:.1} MB) left out; attention-only graphs, so the outputs are not the model's",
                d.tensors,
                d.bytes as f64 / 1e6
            ));
        }
        let mut pool = KvPool::new(n_ctx, cells);
        let main = pool.add();
        Ok(Session {
            model,
            ctx,
            graphs: HashMap::new(),
            pool,
            main,
            n_batch: opts.n_batch,
            kv_type,
            backend_name: backend.name(),
            flash_attn: false,
            log,
        })
    }

    /// Tokens in the main sequence.
    pub fn n_past(&self) -> usize {
        self.pool.len(self.main).unwrap_or(0)
    }

    /// Most cells the session's sequences may hold together.
    pub fn n_ctx(&self) -> usize {
        self.pool.n_ctx()
    }

    pub fn n_vocab(&self) -> usize {
        self.model.hparams.n_vocab
    }

    pub fn n_batch(&self) -> usize {
        self.n_batch
    }

    /// Bytes of KV storage allocated now (it grows with use, up to `n_ctx` cells).
    pub fn kv_bytes(&self) -> usize {
        self.ctx.kv_bytes()
    }

    /// The pool's bookkeeping: cells used, free, allocated.
    pub fn kv(&self) -> &KvPool {
        &self.pool
    }

    /// The backend's per-op time table, where profiling was asked for
    /// (`BackendOptions::profile`) and the backend keeps one.
    pub fn profile_report(&self) -> Option<String> {
        self.ctx.profile_report()
    }

    /// Per-op time of the decode steps since the last `reset_profile`, where profiling was
    /// asked for and the backend keeps a profile.
    pub fn decode_profile(&self) -> Option<crate::backend::OpProfile> {
        self.ctx.decode_profile()
    }

    /// Likewise of the batched steps (a prompt's, several sequences').
    pub fn batch_profile(&self) -> Option<crate::backend::OpProfile> {
        self.ctx.batch_profile()
    }

    pub fn reset_profile(&mut self) {
        self.ctx.reset_profile()
    }

    /// What the last forward submitted to the GPU (dispatches, passes, submits); None on the
    /// CPU.
    pub fn submitted(&self) -> Option<crate::backend::Submitted> {
        self.ctx.submitted()
    }

    /// Forgets the main conversation (its cells return to the pool).
    pub fn reset(&mut self) {
        self.truncate(0);
    }

    /// Rewinds the main sequence to `n` tokens (keeps its cells for positions < n).
    pub fn truncate(&mut self, n: usize) {
        let _ = self.pool.truncate(self.main, n);
    }

    /// The main sequence's id (the one `eval` appends to).
    pub fn main_seq(&self) -> SeqId {
        self.main
    }

    /// A new, empty sequence sharing the session's KV pool.
    pub fn seq_new(&mut self) -> SeqId {
        self.pool.add()
    }

    /// A new sequence whose first `n` positions are `src`'s (the same cells: nothing is
    /// copied or evaluated again).
    pub fn seq_fork(&mut self, src: SeqId, n: usize) -> Result<SeqId> {
        self.pool.fork(src, n)
    }

    /// Drops a sequence; its cells are free at once unless another sequence shares them.
    pub fn seq_remove(&mut self, seq: SeqId) -> Result<()> {
        if seq == self.main {
            return self.pool.truncate(seq, 0);
        }
        self.pool.remove(seq)
    }

    /// Keeps the first `n` positions of `seq`.
    pub fn seq_truncate(&mut self, seq: SeqId, n: usize) -> Result<()> {
        self.pool.truncate(seq, n)
    }

    pub fn seq_len(&self, seq: SeqId) -> Result<usize> {
        self.pool.len(seq)
    }

    /// Switches attention to llama.cpp's flash-attention numerics (`--flash-attn`), which
    /// `llama-perplexity` and `llama-cli` use by default on the CPU.
    /// Graphs and plans are keyed by the option, so a switch takes effect at the next forward
    /// and switching back reuses what was built.
    pub fn set_flash_attn(&mut self, on: bool) {
        self.flash_attn = on;
    }

    pub fn flash_attn(&self) -> bool {
        self.flash_attn
    }

    fn graph_for(&mut self, key: GraphKey) -> Arc<Graph> {
        let model = &self.model;
        self.graphs
            .entry(key)
            .or_insert_with(|| Arc::new(model.graph(key)))
            .clone()
    }

    /// Checks `batch` and takes its cells: each sequence exists, its tokens follow on from its
    /// cells in batch order, it stays within the context, and the pool holds them all (the
    /// storage grows when it must). On error nothing has changed.
    fn take_cells(&mut self, batch: &[BatchToken]) -> Result<Vec<(SeqId, usize)>> {
        let mut counts: Vec<(SeqId, usize)> = Vec::new();
        for (i, b) in batch.iter().enumerate() {
            let have = self.pool.len(b.seq)?;
            let k = match counts.iter_mut().find(|(s, _)| *s == b.seq) {
                Some((_, k)) => k,
                None => {
                    counts.push((b.seq, 0));
                    &mut counts.last_mut().expect("just pushed").1
                }
            };
            if b.pos != have + *k {
                return Err(Error::InvalidArgument(format!(
                    "batch token {i} at position {} of sequence {}, which is at {}",
                    b.pos,
                    b.seq,
                    have + *k
                )));
            }
            *k += 1;
            if b.pos >= self.pool.n_ctx() {
                return Err(Error::ContextOverflow {
                    pos: b.pos,
                    n_ctx: self.pool.n_ctx(),
                });
            }
            if b.token as usize >= self.n_vocab() {
                return Err(Error::InvalidArgument(format!(
                    "token id {} is outside the vocabulary of {}",
                    b.token,
                    self.n_vocab()
                )));
            }
        }
        if let Some(cap) = self.pool.room(batch.len())? {
            self.ctx.grow_kv(cap)?;
            self.pool.grow(cap);
        }
        for &(s, k) in &counts {
            self.pool.append(s, k)?;
        }
        Ok(counts)
    }

    /// Lays `batch` (whose cells are taken) out as a step: tokens whose logits are wanted go
    /// last, in batch order, so the graph's last rows are theirs; a sequence's tokens after
    /// its first wanted one go with it, so each sequence keeps its order. Returns the step, its
    /// output count, and for each wanted token of `batch` its output row.
    fn lay_out(&self, batch: &[BatchToken], single: bool) -> (Step, usize, Vec<usize>) {
        let mut tail = vec![false; batch.len()];
        let mut seen: Vec<SeqId> = Vec::new();
        for (i, b) in batch.iter().enumerate() {
            if b.logits && !seen.contains(&b.seq) {
                seen.push(b.seq);
            }
            tail[i] = seen.contains(&b.seq);
        }
        let order: Vec<usize> = (0..batch.len())
            .filter(|&i| !tail[i])
            .chain((0..batch.len()).filter(|&i| tail[i]))
            .collect();
        let n_out = tail.iter().filter(|&&t| t).count();
        let first_out = batch.len() - n_out;
        let mut rows = Vec::new();
        for (r, &i) in order[first_out..].iter().enumerate() {
            if batch[i].logits {
                rows.push(r);
            }
        }
        let mut step = Step::default();
        let mut offs: Vec<(SeqId, u32, u32)> = Vec::new(); // seq, off, tokens in the step
        for &i in &order {
            let b = &batch[i];
            let off = match offs.iter_mut().find(|(s, _, _)| *s == b.seq) {
                Some(e) => {
                    e.2 += 1;
                    e.1
                }
                None => {
                    let off = step.cells.len() as u32;
                    step.cells.extend_from_slice(self.pool.cells(b.seq).unwrap_or(&[]));
                    offs.push((b.seq, off, 1));
                    off
                }
            };
            step.tokens.push(b.token);
            step.pos.push(b.pos as u32);
            step.off.push(off);
        }
        step.run = order
            .iter()
            .map(|&i| match single {
                true => 1,
                false => offs.iter().find(|e| e.0 == batch[i].seq).map_or(1, |e| e.2),
            })
            .collect();
        (step, n_out, rows)
    }

    /// One forward of `batch` (≤ `n_batch` tokens, cells taken). Returns the logits of its
    /// wanted tokens in batch order (`[n_wanted, n_vocab]`).
    fn forward_batch(&mut self, batch: &[BatchToken], single: bool) -> Result<Vec<f32>> {
        let (step, n_out, rows) = self.lay_out(batch, single);
        if n_out == 0 {
            // Nothing wanted: one logits row is still computed (the graph's shape).
            let g = self.graph_for(GraphKey::new(step.len(), 1).flash(self.flash_attn));
            let mut scratch = Vec::new();
            self.ctx.forward(&g, &step, &mut scratch)?;
            return Ok(Vec::new());
        }
        let g = self.graph_for(GraphKey::new(step.len(), n_out).flash(self.flash_attn));
        let mut logits = Vec::new();
        self.ctx.forward(&g, &step, &mut logits)?;
        if rows.len() == n_out {
            return Ok(logits);
        }
        // Logits, or an encoder's hidden states: the result's own width.
        let nv = g.nodes[g.result].width;
        let mut out = Vec::with_capacity(rows.len() * nv);
        for r in rows {
            out.extend_from_slice(&logits[r * nv..(r + 1) * nv]);
        }
        Ok(out)
    }

    /// Runs `batch`: every token of every sequence in it, in forwards of up to `n_batch`
    /// tokens, with each weight read once per forward for all of them. Returns the logits of
    /// the tokens whose `logits` is set, in batch order (`[n_wanted, n_vocab]`).
    /// On error the sequences are as they were.
    pub fn decode(&mut self, batch: &Batch) -> Result<Vec<f32>> {
        if batch.is_empty() {
            return Err(Error::InvalidArgument("no tokens to evaluate".into()));
        }
        let before: Vec<(SeqId, usize)> = batch
            .items
            .iter()
            .filter_map(|b| self.pool.len(b.seq).ok().map(|n| (b.seq, n)))
            .collect();
        let r = (|| {
            let mut out = Vec::new();
            for chunk in batch.items.chunks(self.n_batch) {
                self.take_cells(chunk)?;
                out.extend(self.forward_batch(chunk, batch.decode_numerics)?);
            }
            Ok(out)
        })();
        if r.is_err() {
            for (s, n) in before {
                let _ = self.pool.truncate(s, n);
            }
        }
        r
    }

    /// The main sequence's next `tokens` as batch entries, logits wanted for the last or all.
    fn main_batch(&self, tokens: &[u32], all_logits: bool) -> Vec<BatchToken> {
        let p0 = self.n_past();
        tokens
            .iter()
            .enumerate()
            .map(|(i, &t)| BatchToken {
                seq: self.main,
                token: t,
                pos: p0 + i,
                logits: all_logits || i + 1 == tokens.len(),
            })
            .collect()
    }

    /// Appends `tokens` in one forward, as `eval` does, and returns the value of the node named
    /// `name` in it (`blk.3.attn_out`, `result_norm`, …: the names `--dump-graph` shows, the
    /// same on every backend), so one backend's intermediate can be held against another's.
    pub fn trace(&mut self, tokens: &[u32], name: &str) -> Result<Trace> {
        if tokens.is_empty() {
            return Err(Error::InvalidArgument("no tokens to evaluate".into()));
        }
        let key = GraphKey::new(tokens.len(), 1).flash(self.flash_attn);
        let node = self
            .graph_for(key)
            .nodes
            .iter()
            .position(|n| n.name == name)
            .ok_or_else(|| Error::InvalidArgument(format!("no node named '{name}' in the graph (see --dump-graph)")))?;
        let g = self.graph_for(key.keep(Some(node)));
        let batch = self.main_batch(tokens, false);
        let before = self.n_past();
        self.take_cells(&batch)?;
        let (step, _, _) = self.lay_out(&batch, false);
        let mut logits = Vec::new();
        let r = self
            .ctx
            .forward(&g, &step, &mut logits)
            .and_then(|()| self.ctx.read_node(&g, node));
        let values = match r {
            Ok(v) => v,
            Err(e) => {
                self.truncate(before);
                return Err(e);
            }
        };
        let n = &g.nodes[node];
        Ok(Trace {
            name: n.name.clone(),
            rows: n.rows,
            width: n.width,
            values,
        })
    }

    /// Appends `tokens` and returns only the argmax of the last token's logits (lowest id on
    /// ties); a GPU backend reads back just that id.
    pub fn eval_argmax(&mut self, tokens: &[u32]) -> Result<u32> {
        let (head, last) = match tokens.len() {
            0 => return Err(Error::InvalidArgument("no tokens to evaluate".into())),
            n => tokens.split_at(n - n.min(self.n_batch)),
        };
        if self.n_past() + tokens.len() > self.n_ctx() {
            return Err(Error::ContextOverflow {
                pos: self.n_past() + tokens.len() - 1,
                n_ctx: self.n_ctx(),
            });
        }
        let before = self.n_past();
        if !head.is_empty() {
            self.eval(head, false)?;
        }
        let batch = Batch {
            items: self.main_batch(last, false),
            decode_numerics: false,
        };
        let r = self.decode_argmax(&batch);
        if r.is_err() {
            self.truncate(before);
        }
        r
    }

    /// [`Session::decode`] of one forward (at most `n_batch` tokens) whose last token alone
    /// wants logits, returning only their argmax (lowest id on ties): a GPU backend reads back
    /// just that id. On error the sequences are as they were.
    pub fn decode_argmax(&mut self, batch: &Batch) -> Result<u32> {
        let items = &batch.items;
        match items.split_last() {
            Some((last, rest)) if last.logits && !rest.iter().any(|b| b.logits) => {}
            _ => {
                return Err(Error::InvalidArgument(
                    "an argmax forward wants the logits of its last token alone".into(),
                ))
            }
        }
        if items.len() > self.n_batch {
            return Err(Error::InvalidArgument(format!(
                "an argmax forward of {} tokens, over the batch size {}",
                items.len(),
                self.n_batch
            )));
        }
        let before: Vec<(SeqId, usize)> = items
            .iter()
            .filter_map(|b| self.pool.len(b.seq).ok().map(|n| (b.seq, n)))
            .collect();
        let r = self.take_cells(items).and_then(|_| {
            let (step, _, _) = self.lay_out(items, batch.decode_numerics);
            let g = self.graph_for(GraphKey::new(step.len(), 1).flash(self.flash_attn));
            self.ctx.forward_argmax(&g, &step)
        });
        if r.is_err() {
            for (s, n) in before {
                let _ = self.pool.truncate(s, n);
            }
        }
        r
    }

    /// Appends `tokens` to the main sequence in one forward with every token's logits, each
    /// with the numerics it would get decoded alone: a speculative draft's verification, whose
    /// accepted tokens are then the bits plain decoding gives (`[n, n_vocab]`).
    pub fn eval_verify(&mut self, tokens: &[u32]) -> Result<Vec<f32>> {
        if tokens.is_empty() {
            return Err(Error::InvalidArgument("no tokens to evaluate".into()));
        }
        let batch = Batch {
            items: self.main_batch(tokens, true),
            decode_numerics: true,
        };
        self.decode(&batch)
    }

    /// Appends `tokens` to the main sequence, in batches of `n_batch`. Returns the logits of
    /// the last token (`[n_vocab]`), or of every token (`[n, n_vocab]`) when `all_logits`.
    pub fn eval(&mut self, tokens: &[u32], all_logits: bool) -> Result<Vec<f32>> {
        if tokens.is_empty() {
            return Err(Error::InvalidArgument("no tokens to evaluate".into()));
        }
        if self.n_past() + tokens.len() > self.n_ctx() {
            return Err(Error::ContextOverflow {
                pos: self.n_past() + tokens.len() - 1,
                n_ctx: self.n_ctx(),
            });
        }
        let batch = Batch {
            items: self.main_batch(tokens, all_logits),
            decode_numerics: false,
        };
        self.decode(&batch)
    }
}
