//! A session: one model on one backend, a KV cache and the graph cache.
//! `eval` appends tokens at the current position and returns logits.

use std::collections::HashMap;
use std::sync::Arc;

use crate::backend::{self, BackendChoice, BackendOptions, Context, KvType};
use crate::error::{Error, Result};
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
        }
    }
}

impl SessionOptions {
    /// The defaults with the environment's overrides applied (`crate::env`): an error names
    /// a variable whose value does not parse.
    pub fn from_env() -> Result<SessionOptions> {
        Ok(SessionOptions::from_overrides(&crate::env::Overrides::from_env()?))
    }

    /// The defaults with `o` applied: the KV type (`MINFER_CACHE_TYPE`) and the backend switches.
    pub fn from_overrides(o: &crate::env::Overrides) -> SessionOptions {
        SessionOptions {
            kv_type: o.cache_type,
            backend_options: BackendOptions::from_overrides(o),
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
    n_past: usize,
    n_batch: usize,
    pub kv_type: KvType,
    pub backend_name: &'static str,
    flash_attn: bool,
    /// What was decided at start-up and why (backend, KV type and size).
    pub log: Vec<String>,
}

impl Session {
    pub fn new(model: Arc<Model>, opts: &SessionOptions) -> Result<Session> {
        let cands = backend::candidates(opts.backend, opts.threads, opts.gpu, &opts.backend_options)?;
        Session::on(cands, model, opts)
    }

    /// A session on the first of `cands` whose gate takes the model (`opts.backend`,
    /// `threads`, `gpu` and `backend_options` are not consulted): for programs that build
    /// their own backends.
    pub fn on(cands: Vec<Arc<dyn backend::Backend>>, model: Arc<Model>, opts: &SessionOptions) -> Result<Session> {
        let kv_type = match opts.kv_type {
            Some(t) => t,
            None => KvType::auto(&model),
        };
        let n_ctx = if opts.n_ctx == 0 {
            model.hparams.n_ctx_train.min(4096)
        } else {
            opts.n_ctx
        };
        if n_ctx > 1 << 20 {
            return Err(Error::InvalidArgument(format!("context size {n_ctx} is too large")));
        }
        if opts.n_batch == 0 {
            return Err(Error::InvalidArgument("batch size 0".into()));
        }
        let (backend, mut log) = backend::select(cands, &model, kv_type)?;
        let ctx = backend.new_context(&model, n_ctx, kv_type)?;
        log.push(format!(
            "kv cache: {} × {} positions, {:.1} MB",
            kv_type.name(),
            n_ctx,
            ctx.kv_bytes() as f64 / 1e6
        ));
        Ok(Session {
            model,
            ctx,
            graphs: HashMap::new(),
            n_past: 0,
            n_batch: opts.n_batch,
            kv_type,
            backend_name: backend.name(),
            flash_attn: false,
            log,
        })
    }

    pub fn n_past(&self) -> usize {
        self.n_past
    }

    pub fn n_ctx(&self) -> usize {
        self.ctx.n_ctx()
    }

    pub fn n_vocab(&self) -> usize {
        self.model.hparams.n_vocab
    }

    /// The backend's per-op time table, where profiling was asked for
    /// (`BackendOptions::profile`) and the backend keeps one.
    pub fn profile_report(&self) -> Option<String> {
        self.ctx.profile_report()
    }

    /// Forgets the conversation (the cache is overwritten from position 0).
    pub fn reset(&mut self) {
        self.n_past = 0;
    }

    /// Rewinds to `n` tokens (keeps the cache for positions < n).
    pub fn truncate(&mut self, n: usize) {
        self.n_past = self.n_past.min(n);
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

    /// The position after `n` more tokens, or the overflow it would be.
    fn room_for(&self, n: usize) -> Result<usize> {
        let end = self.n_past + n;
        if end > self.n_ctx() {
            return Err(Error::ContextOverflow {
                pos: end - 1,
                n_ctx: self.n_ctx(),
            });
        }
        Ok(end)
    }

    /// The graph for `n_tokens` inputs and `n_outputs` logit rows under the session's options.
    fn graph(&mut self, n_tokens: usize, n_outputs: usize) -> Arc<Graph> {
        self.graph_for(GraphKey::new(n_tokens, n_outputs).flash(self.flash_attn))
    }

    fn graph_for(&mut self, key: GraphKey) -> Arc<Graph> {
        let model = &self.model;
        self.graphs
            .entry(key)
            .or_insert_with(|| Arc::new(model.graph(key)))
            .clone()
    }

    /// Appends `tokens` in one forward, as `eval` does, and returns the value of the node named
    /// `name` in it (`blk.3.attn_out`, `result_norm`, …: the names `--dump-graph` shows, the
    /// same on every backend), so one backend's intermediate can be held against another's.
    pub fn trace(&mut self, tokens: &[u32], name: &str) -> Result<Trace> {
        if tokens.is_empty() {
            return Err(Error::InvalidArgument("no tokens to evaluate".into()));
        }
        let end = self.room_for(tokens.len())?;
        let key = GraphKey::new(tokens.len(), 1).flash(self.flash_attn);
        let node = self
            .graph_for(key)
            .nodes
            .iter()
            .position(|n| n.name == name)
            .ok_or_else(|| Error::InvalidArgument(format!("no node named '{name}' in the graph (see --dump-graph)")))?;
        let g = self.graph_for(key.keep(Some(node)));
        let mut logits = Vec::new();
        self.ctx.forward(&g, tokens, self.n_past, &mut logits)?;
        self.n_past = end;
        let values = self.ctx.read_node(&g, node)?;
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
        if !head.is_empty() {
            self.eval(head, false)?;
        }
        self.room_for(last.len())?;
        let g = self.graph(last.len(), 1);
        let id = self.ctx.forward_argmax(&g, last, self.n_past)?;
        self.n_past += last.len();
        Ok(id)
    }

    /// Appends `tokens` at the current position, in batches of `n_batch`. Returns the logits
    /// of the last token (`[n_vocab]`), or of every token (`[n, n_vocab]`) when `all_logits`.
    pub fn eval(&mut self, tokens: &[u32], all_logits: bool) -> Result<Vec<f32>> {
        if tokens.is_empty() {
            return Err(Error::InvalidArgument("no tokens to evaluate".into()));
        }
        self.room_for(tokens.len())?;
        let mut result = Vec::new();
        let mut logits = Vec::new();
        for chunk in tokens.chunks(self.n_batch) {
            let n_out = if all_logits { chunk.len() } else { 1 };
            let g = self.graph(chunk.len(), n_out);
            self.ctx.forward(&g, chunk, self.n_past, &mut logits)?;
            self.n_past += chunk.len();
            if all_logits {
                result.extend_from_slice(&logits);
            }
        }
        Ok(if all_logits { result } else { logits })
    }
}
