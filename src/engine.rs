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
//!
//! Generation is the scheduler's ([`crate::sched`]): [`Engine::generate`] submits one request
//! and steps it to its end, so sampling, stop strings, constraints, speculation and prefix
//! reuse are the same here as in the server.

use std::path::Path;
use std::sync::{mpsc, Arc};

use crate::chat::{ChatMessage, ChatTemplate};
use crate::error::{Error, Result};
use crate::load::{self, Loaded};
use crate::model::Model;
use crate::sampling::TokenLogprob;
use crate::sched::{Event, Prompt, Request, Scheduler, SchedulerOptions};
use crate::session::{Session, SessionOptions};
use crate::tokenizer::Tokenizer;

pub use crate::sched::{GenerateOptions, Speculation, StopReason};

/// What the streaming callback wants next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    Continue,
    Stop,
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

/// The engine's scheduler: one sequence at a time, the last one kept so that the next call
/// evaluates only what its prompt adds.
const ONE_CONVERSATION: SchedulerOptions = SchedulerOptions {
    max_seqs: 1,
    step_tokens: 0,
    keep_finished: 1,
};

pub struct Engine {
    pub template: Option<ChatTemplate>,
    sched: Scheduler,
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
            Some(src) => Some(template_of(src, &tokenizer)?),
            None => None,
        };
        let session = Session::new(model, opts)?;
        let sched = Scheduler::new(session, Arc::new(tokenizer), ONE_CONVERSATION)?;
        Ok(Engine { template, sched })
    }

    /// Sets the draft model of `Speculation::Draft` (`--draft MODEL`): a smaller model of the
    /// same vocabulary, on its own session.
    pub fn set_draft(&mut self, session: Session) -> Result<()> {
        self.sched.set_draft(session)
    }

    /// The engine's session, draft model and chat template under a scheduler of `opts` (the
    /// cached conversation is let go).
    pub fn into_scheduler(self, opts: SchedulerOptions) -> Result<Scheduler> {
        self.sched.reconfigured(opts, self.template)
    }

    pub fn model(&self) -> &Arc<Model> {
        &self.session().model
    }

    pub fn session(&self) -> &Session {
        self.sched.session()
    }

    /// The session, for its main sequence and switches (`set_flash_attn`); the conversation's
    /// own sequence is the scheduler's.
    pub fn session_mut(&mut self) -> &mut Session {
        self.sched.session_mut()
    }

    pub fn tokenizer(&self) -> &Arc<Tokenizer> {
        self.sched.tokenizer()
    }

    /// Replaces the model's chat template (`--chat-template-file`).
    pub fn set_chat_template(&mut self, source: &str) -> Result<()> {
        self.template = Some(template_of(source, self.tokenizer())?);
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
        self.tokenizer().encode(text, add_special, parse_special)
    }

    pub fn count_tokens(&self, text: &str) -> Result<usize> {
        Ok(self.tokenize(text, true, true)?.len())
    }

    /// One vector per text from an embedding model (`crate::embed`): pooled and normalised as
    /// the model says; an input longer than the model's positions is an error naming it.
    pub fn embed(&mut self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        let ids = crate::embed::tokenize(self.session(), self.tokenizer(), texts, crate::embed::Overflow::Refuse)?;
        Ok(self.embed_tokens(&ids)?.into_iter().map(|e| e.vector).collect())
    }

    /// [`Engine::embed`] of inputs already tokenized (with their special tokens).
    pub fn embed_tokens(&mut self, inputs: &[Vec<u32>]) -> Result<Vec<crate::embed::Embedding>> {
        self.reset();
        crate::embed::embed_tokens(self.sched.session_mut(), inputs)
    }

    /// Forgets the cached conversation.
    pub fn reset(&mut self) {
        self.sched.forget();
        self.sched.session_mut().reset();
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
        let (tx, rx) = mpsc::channel();
        let req = Request {
            prompt: Prompt::Ids(prompt.to_vec()),
            opts: opts.clone(),
        };
        let id = self.sched.try_submit(req, move |e| tx.send(e).is_ok())?;
        let mut text = String::new();
        // Tokens reported, and how many there were when the callback asked to stop (a step
        // that confirms drafts reports several: those after the stop are not the caller's).
        let mut seen = 0;
        let mut stopped_at = None;
        loop {
            self.sched.step_or_fail();
            for e in rx.try_iter() {
                match e {
                    Event::Started { .. } => {}
                    Event::Token { text: piece, .. } => {
                        if stopped_at.is_some() {
                            continue;
                        }
                        seen += 1;
                        if !piece.is_empty() {
                            text.push_str(&piece);
                            if on_text(&piece) == Flow::Stop {
                                stopped_at = Some(seen);
                                self.sched.stop(id);
                            }
                        }
                    }
                    Event::Error(e) => return Err(Error::InvalidArgument(e)),
                    Event::Done(mut f) => {
                        let stop_reason = match stopped_at {
                            Some(n) => {
                                f.tokens.truncate(n);
                                f.logprobs.truncate(n);
                                StopReason::Callback
                            }
                            None => {
                                if !f.rest.is_empty() {
                                    text.push_str(&f.rest);
                                    on_text(&f.rest);
                                }
                                f.reason
                            }
                        };
                        let u = f.usage;
                        return Ok(Generation {
                            prompt_tokens: prompt.to_vec(),
                            tokens: f.tokens,
                            text,
                            stop_reason,
                            prompt_evaluated: u.prompt_tokens - u.cached_tokens,
                            prefill_secs: u.prefill_secs,
                            decode_secs: u.decode_secs,
                            drafted: u.drafted,
                            accepted: u.accepted,
                            logprobs: f.logprobs,
                        });
                    }
                }
            }
        }
    }
}

// The scheduler sits below the engine (it imports nothing from here), so the conversion from
// an engine is written here.
impl Scheduler {
    /// An engine's session, tokenizer, draft model and chat template under a scheduler (the
    /// engine's cached conversation is let go).
    pub fn from_engine(engine: Engine, opts: SchedulerOptions) -> Result<Scheduler> {
        engine.into_scheduler(opts)
    }
}

/// The chat template `source` with the tokenizer's BOS and EOS pieces.
fn template_of(source: &str, tok: &Tokenizer) -> Result<ChatTemplate> {
    let piece = |id: Option<u32>| id.and_then(|i| tok.token_str(i)).unwrap_or("").to_string();
    ChatTemplate::new(source, &piece(tok.bos()), &piece(tok.eos()))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::{Engine, Flow, GenerateOptions, StopReason};
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
}
