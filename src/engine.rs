//! The library API a desktop app embeds: load a model, template a conversation, generate with
//! sampling and a streaming callback that can stop generation, count tokens.
//!
//! ```no_run
//! use minfer::engine::{Engine, GenerateOptions, Flow};
//! use minfer::chat::ChatMessage;
//!
//! # fn main() -> minfer::Result<()> {
//! let mut engine = Engine::load("models/SmolLM2-135M-Instruct.Q4_1.gguf", &Default::default())?;
//! let prompt = engine.apply_chat_template(&[ChatMessage::new("user", "Name a planet.")], true)?;
//! let ids = engine.tokenize(&prompt, true, true)?;
//! let opts = GenerateOptions { max_tokens: 32, ..Default::default() };
//! let out = engine.generate(&ids, &opts, |piece| {
//!     print!("{piece}");
//!     Flow::Continue
//! })?;
//! println!("\n{} tokens", out.tokens.len());
//! # Ok(())
//! # }
//! ```
//!
//! [`Engine::load`] opens the model and its tokenizer through [`crate::load`]; to hold them
//! before (or without) an engine, open them there:
//!
//! ```no_run
//! # fn main() -> minfer::Result<()> {
//! let minfer::load::Loaded { model, tokenizer } = minfer::load::open("Qwen/Qwen3-0.6B")?;
//! let engine = minfer::engine::Engine::from_model(model.into(), tokenizer, &Default::default())?;
//! # Ok(())
//! # }
//! ```

use std::collections::VecDeque;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use crate::chat::{ChatMessage, ChatTemplate};
use crate::constrain::{Constrainer, ConstraintSpec};
use crate::error::{Error, Result};
use crate::load::{self, Loaded};
use crate::model::Model;
use crate::sampling::{Sampler, SamplerConfig, ShapeOptions, Shaper, TokenLogprob};
use crate::session::{Session, SessionOptions};
use crate::spec::ModelDraft;
use crate::tokenizer::{Tokenizer, Utf8Stream};

/// What the streaming callback wants next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    Continue,
    Stop,
}

#[derive(Clone, Debug)]
pub struct GenerateOptions {
    pub max_tokens: usize,
    pub sampler: SamplerConfig,
    /// Generation ends before any of these strings; they are not part of the text.
    pub stop: Vec<String>,
    /// End-of-generation tokens (EOS, EOT, …) get no probability, so generation runs to
    /// `max_tokens` (or a stop string, the callback, a full context): llama.cpp's
    /// `--ignore-eos`, which biases every EOG token to -inf.
    pub ignore_eos: bool,
    /// Speculative decoding: where drafts come from (greedy output is the same without).
    pub speculation: Speculation,
    /// Most tokens drafted per verification forward.
    pub draft_max: usize,
    /// The output must follow this schema or grammar (see [`crate::constrain`]); generation
    /// ends when it is complete. Speculation stays on: every token, drafted or not, is the
    /// sampler's pick through the constraint's mask, so drafts are checked by the matcher.
    pub constraint: Option<ConstraintSpec>,
    /// Added to the token's logit before sampling; -100 (or less) bans it
    /// ([`crate::sampling::apply_bias`]).
    pub logit_bias: Vec<(u32, f32)>,
    /// Report each generated token's log-probability and this many most likely alternatives:
    /// the log-softmax of the model's logits after `ignore_eos`, `logit_bias` and the
    /// constraint's mask, before penalties, temperature and top-k/top-p/min-p.
    pub logprobs: Option<usize>,
}

impl GenerateOptions {
    /// The options the [`Shaper`] reads.
    pub fn shaping(&self) -> ShapeOptions<'_> {
        ShapeOptions {
            ignore_eos: self.ignore_eos,
            logit_bias: &self.logit_bias,
            constraint: self.constraint.as_ref(),
            logprobs: self.logprobs,
        }
    }
}

impl Default for GenerateOptions {
    fn default() -> Self {
        GenerateOptions {
            max_tokens: 256,
            sampler: SamplerConfig::default(),
            stop: Vec::new(),
            ignore_eos: false,
            speculation: Speculation::Off,
            draft_max: 8,
            constraint: None,
            logit_bias: Vec::new(),
            logprobs: None,
        }
    }
}

/// Where speculative drafts come from (see [`crate::spec`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Speculation {
    #[default]
    Off,
    /// Prompt lookup: what followed the context's last `min_n..=max_n` tokens earlier in it.
    Ngram { min_n: usize, max_n: usize },
    /// The engine's draft model (`Engine::set_draft`).
    Draft,
}

impl Speculation {
    /// `ngram` (lookup of 1 to 3 tokens) or `draft`; `off`/`none` for none.
    pub fn parse(s: &str) -> Result<Speculation> {
        match s.to_ascii_lowercase().as_str() {
            "off" | "none" => Ok(Speculation::Off),
            "ngram" => Ok(Speculation::Ngram { min_n: 1, max_n: 3 }),
            "draft" => Ok(Speculation::Draft),
            _ => Err(Error::InvalidArgument(format!(
                "speculation '{s}' (expected ngram, draft or off)"
            ))),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// An end-of-generation token, or a constraint complete (nothing may follow).
    EndOfText,
    MaxTokens,
    StopString,
    /// The callback asked to stop.
    Callback,
    ContextFull,
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct Generation {
    pub prompt_tokens: Vec<u32>,
    pub tokens: Vec<u32>,
    pub text: String,
    pub stop_reason: StopReason,
    /// Prompt tokens actually evaluated (those already in the cache are reused).
    pub prompt_evaluated: usize,
    pub prefill_secs: f64,
    pub decode_secs: f64,
    /// Speculation: tokens drafted, and of those, accepted.
    pub drafted: usize,
    pub accepted: usize,
    /// One per generated token when `GenerateOptions::logprobs` asked for them.
    pub logprobs: Vec<TokenLogprob>,
}

pub struct Engine {
    pub session: Session,
    pub tokenizer: Tokenizer,
    pub template: Option<ChatTemplate>,
    /// The tokens whose K/V the cache holds, in order.
    cached: Vec<u32>,
    /// The draft model of `Speculation::Draft`.
    draft: Option<ModelDraft>,
    /// The tokenizer's environment for constraints, built on the first constrained request.
    constrainer: Option<Arc<Constrainer>>,
}

impl Engine {
    /// `path`: a `.gguf` file, a Hugging Face model directory, or `org/name[@revision]` in the
    /// HF cache.
    pub fn load(path: impl AsRef<Path>, opts: &SessionOptions) -> Result<Engine> {
        let Loaded { model, tokenizer } = load::open(path)?;
        Engine::from_model(Arc::new(model), tokenizer, opts)
    }

    /// A model already opened (see [`crate::load`]) with its tokenizer; the chat template is
    /// the model's own (`tokenizer.chat_template`).
    pub fn from_model(model: Arc<Model>, tokenizer: Tokenizer, opts: &SessionOptions) -> Result<Engine> {
        let template = match model.metadata.get_str("tokenizer.chat_template")? {
            Some(src) => {
                let piece = |id: Option<u32>| id.and_then(|i| tokenizer.token_str(i)).unwrap_or("").to_string();
                Some(ChatTemplate::new(
                    src,
                    &piece(tokenizer.bos()),
                    &piece(tokenizer.eos()),
                )?)
            }
            None => None,
        };
        let session = Session::new(model, opts)?;
        Ok(Engine {
            session,
            tokenizer,
            template,
            cached: Vec::new(),
            draft: None,
            constrainer: None,
        })
    }

    /// Sets the draft model of `Speculation::Draft` (`--draft MODEL`): a smaller model of the
    /// same vocabulary, on its own session.
    pub fn set_draft(&mut self, session: Session) -> Result<()> {
        self.draft = Some(ModelDraft::new(session, self.session.n_vocab())?);
        Ok(())
    }

    /// The constraint environment built so far (a scheduler made from this engine keeps it).
    pub(crate) fn take_constrainer(mut self) -> (Option<Arc<Constrainer>>, Engine) {
        (self.constrainer.take(), self)
    }

    pub fn model(&self) -> &Arc<Model> {
        &self.session.model
    }

    /// Replaces the model's chat template (`--chat-template-file`).
    pub fn set_chat_template(&mut self, source: &str) -> Result<()> {
        let piece = |id: Option<u32>| id.and_then(|i| self.tokenizer.token_str(i)).unwrap_or("").to_string();
        let t = ChatTemplate::new(source, &piece(self.tokenizer.bos()), &piece(self.tokenizer.eos()))?;
        self.template = Some(t);
        Ok(())
    }

    /// Renders `messages` with the model's own template; an error if it has none.
    pub fn apply_chat_template(&self, messages: &[ChatMessage], add_generation_prompt: bool) -> Result<String> {
        self.template
            .as_ref()
            .ok_or_else(|| Error::Template("this model has no chat template (use a raw prompt)".into()))?
            .render(messages, add_generation_prompt)
    }

    pub fn tokenize(&self, text: &str, add_special: bool, parse_special: bool) -> Result<Vec<u32>> {
        self.tokenizer.encode(text, add_special, parse_special)
    }

    pub fn count_tokens(&self, text: &str) -> Result<usize> {
        Ok(self.tokenize(text, true, true)?.len())
    }

    /// One vector per text from an embedding model (`crate::embed`): pooled and normalised as
    /// the model says; an input longer than the model's positions is an error naming it.
    pub fn embed(&mut self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        let ids = crate::embed::tokenize(&self.session, &self.tokenizer, texts, crate::embed::Overflow::Refuse)?;
        Ok(self.embed_tokens(&ids)?.into_iter().map(|e| e.vector).collect())
    }

    /// [`Engine::embed`] of inputs already tokenized (with their special tokens).
    pub fn embed_tokens(&mut self, inputs: &[Vec<u32>]) -> Result<Vec<crate::embed::Embedding>> {
        self.reset();
        crate::embed::embed_tokens(&mut self.session, inputs)
    }

    /// Forgets the cached conversation.
    pub fn reset(&mut self) {
        self.cached.clear();
        self.session.reset();
    }

    /// Generates after `prompt`. Tokens already in the cache from an earlier call (the common
    /// prefix) are not evaluated again, so a chat that re-sends its history pays only for the
    /// new turn. `on_text` receives each complete UTF-8 piece as it is produced.
    pub fn generate(
        &mut self,
        prompt: &[u32],
        opts: &GenerateOptions,
        mut on_text: impl FnMut(&str) -> Flow,
    ) -> Result<Generation> {
        if prompt.is_empty() {
            return Err(Error::InvalidArgument("empty prompt".into()));
        }
        if self.model().hparams.pooling.is_some() {
            return Err(Error::InvalidArgument(format!(
                "{} is an embedding model ({}): it generates no text (use embed)",
                self.model().source,
                self.model().arch.name()
            )));
        }
        let n_ctx = self.session.n_ctx();
        if prompt.len() >= n_ctx {
            return Err(Error::InvalidArgument(format!(
                "the prompt is {} tokens, the context holds {n_ctx}: use a larger context (-c) or a shorter prompt",
                prompt.len()
            )));
        }
        let mut sampler = Sampler::new(opts.sampler.clone())?;
        let mut shaper = Shaper::new(
            opts.shaping(),
            &self.tokenizer,
            self.session.n_vocab(),
            &mut self.constrainer,
        )?;
        // Reuse the cached prefix; at least one prompt token is evaluated to get logits.
        let mut keep = self.cached.iter().zip(prompt).take_while(|(a, b)| a == b).count();
        keep = keep.min(prompt.len() - 1);
        self.session.truncate(keep);
        self.cached.truncate(keep);
        let t0 = Instant::now();
        let logits = self.session.eval(&prompt[keep..], false)?;
        self.cached.extend_from_slice(&prompt[keep..]);
        let prefill_secs = t0.elapsed().as_secs_f64();

        let t1 = Instant::now();
        let mut tokens = Vec::new();
        let mut text = String::new();
        let mut stream = TextStream::new(&opts.stop);
        let mut reason = StopReason::MaxTokens;
        // Plain greedy needs only the argmax: a GPU backend then reads back one id, not logits.
        // Masking end tokens needs the logits.
        let c = &opts.sampler;
        let argmax_only = shaper.is_plain()
            && c.temperature <= 0.0
            && c.repeat_penalty == 1.0
            && c.presence_penalty == 0.0
            && c.frequency_penalty == 0.0;
        let mut logprobs = Vec::new();
        if opts.speculation == Speculation::Draft && self.draft.is_none() {
            return Err(Error::InvalidArgument(
                "draft speculation without a draft model (Engine::set_draft, --draft)".into(),
            ));
        }
        let mut next_id: Option<u32> = None;
        // Logits rows not yet sampled (a verification forward gives one per draft token and
        // one after), and the drafts still to be checked against the samples.
        let mut rows: VecDeque<Vec<f32>> = VecDeque::from([logits]);
        let mut drafts: VecDeque<u32> = VecDeque::new();
        let (mut drafted, mut accepted) = (0, 0);
        // The draft length adapts: doubled after a draft taken whole, cut to one past what was
        // taken after a miss (long drafts pay off only while the model keeps agreeing).
        let mut k_cur = opts.draft_max.clamp(1, 4);
        let mut taken = 0;
        while tokens.len() < opts.max_tokens {
            // The prompt is the penalty history; `accept` appends each generated token to it.
            let next = match next_id.take() {
                Some(id) => id,
                None => {
                    let mut logits = rows.pop_front().unwrap_or_default();
                    let (t, lp) = shaper.pick(&mut sampler, &mut logits, prompt)?;
                    logprobs.extend(lp);
                    t
                }
            };
            sampler.accept(next);
            if let Some(d) = drafts.pop_front() {
                if d == next {
                    accepted += 1;
                    taken += 1;
                    if drafts.is_empty() {
                        k_cur = (k_cur * 2).min(opts.draft_max.max(1));
                    }
                } else {
                    k_cur = (taken + 1).clamp(1, opts.draft_max.max(1));
                    // The rest of the draft is wrong: its cells go.
                    let wrong = 1 + drafts.len();
                    let n = self.session.n_past() - wrong;
                    self.session.truncate(n);
                    self.cached.truncate(n);
                    drafts.clear();
                    rows.clear();
                }
            }
            if self.tokenizer.is_eog(next) {
                tokens.push(next);
                reason = StopReason::EndOfText;
                break;
            }
            tokens.push(next);
            let (piece, stopped) = stream.push(&self.tokenizer, next);
            if !piece.is_empty() {
                text.push_str(&piece);
                if on_text(&piece) == Flow::Stop {
                    reason = StopReason::Callback;
                    break;
                }
            }
            if stopped {
                reason = StopReason::StopString;
                break;
            }
            if shaper.is_complete() {
                reason = StopReason::EndOfText;
                break;
            }
            if !rows.is_empty() {
                // A drafted token was right: the logits after it are already here.
                continue;
            }
            if self.session.n_past() >= n_ctx {
                reason = StopReason::ContextFull;
                break;
            }
            // Drafts are limited by the tokens still wanted and the context's room.
            let room = (opts.max_tokens - tokens.len()).min(n_ctx - self.session.n_past() - 1);
            let k = k_cur.min(opts.draft_max).min(room);
            let guess = match opts.speculation {
                _ if k == 0 => Vec::new(),
                Speculation::Off => Vec::new(),
                Speculation::Ngram { min_n, max_n } => {
                    let ctx: Vec<u32> = prompt.iter().chain(&tokens).copied().collect();
                    crate::spec::ngram_draft(&ctx, min_n, max_n, k)
                }
                Speculation::Draft => {
                    let ctx: Vec<u32> = prompt.iter().chain(&tokens).copied().collect();
                    match self.draft.as_mut() {
                        Some(d) => d.draft(&ctx, k)?,
                        None => Vec::new(),
                    }
                }
            };
            if !guess.is_empty() {
                let mut ids = vec![next];
                ids.extend_from_slice(&guess);
                let all = self.session.eval_verify(&ids)?;
                let nv = self.session.n_vocab();
                rows.extend(all.chunks_exact(nv).map(<[f32]>::to_vec));
                drafts.extend(&guess);
                drafted += guess.len();
                taken = 0;
                self.cached.extend_from_slice(&ids);
                continue;
            }
            if argmax_only {
                next_id = Some(self.session.eval_argmax(&[next])?);
            } else {
                rows.push_back(self.session.eval(&[next], false)?);
            }
            self.cached.push(next);
        }
        if reason != StopReason::Callback {
            let rest = stream.finish();
            if !rest.is_empty() {
                text.push_str(&rest);
                on_text(&rest);
            }
        }
        Ok(Generation {
            prompt_tokens: prompt.to_vec(),
            tokens,
            text,
            stop_reason: reason,
            prompt_evaluated: prompt.len() - keep,
            prefill_secs,
            decode_secs: t1.elapsed().as_secs_f64(),
            drafted,
            accepted,
            logprobs,
        })
    }
}

/// Generated tokens to text: complete UTF-8 pieces, holding back any tail that might begin a
/// stop string; a stop string ends the text and is not part of it.
#[derive(Clone, Debug, Default)]
pub struct TextStream {
    utf8: Utf8Stream,
    /// Text that might begin a stop string.
    held: String,
    stop: Vec<String>,
    stopped: bool,
}

impl TextStream {
    pub fn new(stop: &[String]) -> TextStream {
        TextStream {
            stop: stop.iter().filter(|s| !s.is_empty()).cloned().collect(),
            ..TextStream::default()
        }
    }

    /// The text `id` makes safe to show, and whether a stop string has now ended the text
    /// (that piece is the last).
    pub fn push(&mut self, tok: &Tokenizer, id: u32) -> (String, bool) {
        if self.stopped {
            return (String::new(), true);
        }
        self.held.push_str(&self.utf8.push(&tok.piece(id, true)));
        if let Some(cut) = self.stop.iter().filter_map(|s| self.held.find(s.as_str())).min() {
            self.held.truncate(cut);
            self.stopped = true;
            return (std::mem::take(&mut self.held), true);
        }
        let safe = safe_prefix(&self.held, &self.stop);
        (self.held.drain(..safe).collect(), false)
    }

    /// What is still held back at the end of generation (a stop string cut off).
    pub fn finish(&mut self) -> String {
        if !self.stopped {
            self.held.push_str(&self.utf8.flush());
            if let Some(cut) = self.stop.iter().filter_map(|s| self.held.find(s.as_str())).min() {
                self.held.truncate(cut);
            }
        }
        std::mem::take(&mut self.held)
    }
}

/// Length of the longest prefix of `held` that cannot be the start of any stop string.
fn safe_prefix(held: &str, stops: &[String]) -> usize {
    let mut safe = held.len();
    for s in stops {
        for (i, _) in held.char_indices() {
            if i < safe && s.starts_with(&held[i..]) {
                safe = i;
                break;
            }
        }
    }
    safe
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::{safe_prefix, Engine, Flow, GenerateOptions, StopReason};
    use crate::backend::{BackendChoice, KvType};
    use crate::gguf::{GgufFile, GgufWriter, Value, ValueType};
    use crate::quant::QType;
    use crate::sampling::SamplerConfig;
    use crate::{Model, SessionOptions};

    /// A one-layer llama with f32 weights seeded by tensor name, a 32-token SentencePiece
    /// vocabulary, and `eos` as its end-of-sequence token.
    fn tiny_engine(eos: Option<u32>) -> Engine {
        const EMBD: u64 = 32;
        const FF: u64 = 64;
        const VOCAB: u64 = 32;
        let mut w = GgufWriter::new();
        w.set("general.architecture", Value::String("llama".into()));
        for (k, v) in [
            ("block_count", 1),
            ("context_length", 64),
            ("embedding_length", EMBD as u32),
            ("feed_forward_length", FF as u32),
            ("attention.head_count", 2),
            ("attention.head_count_kv", 1),
        ] {
            w.set(&format!("llama.{k}"), Value::U32(v));
        }
        w.set("llama.attention.layer_norm_rms_epsilon", Value::F32(1e-5));
        w.set("tokenizer.ggml.model", Value::String("llama".into()));
        let tokens = (0..VOCAB).map(|i| Value::String(format!("t{i}"))).collect();
        w.set("tokenizer.ggml.tokens", Value::Array(ValueType::String, tokens));
        if let Some(id) = eos {
            w.set("tokenizer.ggml.eos_token_id", Value::U32(id));
        }
        let seeded = |name: &str, n: u64| -> Vec<f32> {
            let mut s = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
                (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
            });
            (0..n)
                .map(|_| {
                    s ^= s << 13;
                    s ^= s >> 7;
                    s ^= s << 17;
                    (s >> 11) as f32 / (1u64 << 53) as f32 - 0.5
                })
                .collect()
        };
        let kv = EMBD / 2;
        for (name, shape) in [
            ("token_embd.weight", [EMBD, VOCAB]),
            ("output.weight", [EMBD, VOCAB]),
            ("blk.0.attn_q.weight", [EMBD, EMBD]),
            ("blk.0.attn_k.weight", [EMBD, kv]),
            ("blk.0.attn_v.weight", [EMBD, kv]),
            ("blk.0.attn_output.weight", [EMBD, EMBD]),
            ("blk.0.ffn_gate.weight", [EMBD, FF]),
            ("blk.0.ffn_up.weight", [EMBD, FF]),
            ("blk.0.ffn_down.weight", [FF, EMBD]),
        ] {
            w.add_f32(name, QType::F32, &shape, &seeded(name, shape[0] * shape[1]))
                .unwrap();
        }
        for name in ["output_norm.weight", "blk.0.attn_norm.weight", "blk.0.ffn_norm.weight"] {
            w.add_f32(name, QType::F32, &[EMBD], &[1.0; EMBD as usize]).unwrap();
        }
        let file = GgufFile::from_bytes(w.to_bytes(), "tiny.gguf").unwrap();
        let model = Arc::new(Model::from_gguf(file, "tiny.gguf".into()).unwrap());
        let tok = crate::tokenizer::Tokenizer::from_gguf(&model.metadata).unwrap();
        let opts = SessionOptions {
            n_ctx: 64,
            threads: Some(1),
            backend: BackendChoice::Cpu,
            kv_type: Some(KvType::F32),
            ..SessionOptions::default()
        };
        Engine::from_model(model, tok, &opts).unwrap()
    }

    /// `ignore_eos` generates exactly `max_tokens`, none of them the end token, where the same
    /// prompt otherwise ends at once; greedy and sampled alike.
    #[test]
    fn ignore_eos_generates_exactly_max_tokens() {
        let prompt = [1u32, 5, 7];
        let greedy = GenerateOptions {
            max_tokens: 12,
            sampler: SamplerConfig::greedy(),
            ..GenerateOptions::default()
        };
        let first = tiny_engine(None)
            .generate(&prompt, &greedy, |_| Flow::Continue)
            .unwrap()
            .tokens[0];
        // That first greedy token is now the end of sequence: generation stops on it.
        let mut e = tiny_engine(Some(first));
        let g = e.generate(&prompt, &greedy, |_| Flow::Continue).unwrap();
        assert_eq!(
            (g.tokens.as_slice(), g.stop_reason),
            (&[first][..], StopReason::EndOfText)
        );
        let sampled = GenerateOptions {
            sampler: SamplerConfig {
                temperature: 1.5,
                top_k: 0,
                top_p: 1.0,
                min_p: 0.0,
                seed: Some(7),
                ..SamplerConfig::default()
            },
            ..greedy.clone()
        };
        for opts in [greedy, sampled] {
            let opts = GenerateOptions {
                ignore_eos: true,
                ..opts
            };
            let g = e.generate(&prompt, &opts, |_| Flow::Continue).unwrap();
            assert_eq!(g.stop_reason, StopReason::MaxTokens);
            assert_eq!(g.tokens.len(), 12, "{:?}", g.tokens);
            assert!(!g.tokens.contains(&first), "{:?} holds the end token {first}", g.tokens);
        }
    }

    #[test]
    fn holds_back_possible_stop_prefixes() {
        let stops = vec!["</s>".to_string()];
        assert_eq!(safe_prefix("hello", &stops), 5);
        assert_eq!(safe_prefix("hello </", &stops), 6);
        assert_eq!(safe_prefix("hello <", &stops), 6);
        assert_eq!(safe_prefix("abc", &[]), 3);
    }
}
