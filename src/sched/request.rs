//! A request and what it hears back: its prompt; what it asks of generation (limits,
//! sampling, stop strings, shaping, speculation); its events, why it ended and its usage.

use crate::chat::{Chat, ChatMessage};
use crate::constrain::ConstraintSpec;
use crate::error::{Error, Result};
use crate::sampling::TokenLogprob;
use crate::sampling::{SamplerConfig, ShapeOptions};

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
    /// (`GenerateOptions::logprobs`). An end-of-generation token has no `Token` event: it
    /// ends the request (`Finished::tokens` holds it).
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
    /// One per generated token when the request asked for log-probabilities.
    pub logprobs: Vec<TokenLogprob>,
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
    /// Speculation: tokens drafted, and of those, accepted.
    pub drafted: usize,
    pub accepted: usize,
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
    /// Most tokens drafted per verification (llama.cpp's `speculative.n_max`).
    pub draft_max: usize,
    /// A draft shorter than this is not verified (llama.cpp's `speculative.n_min`); 0 or 1:
    /// any draft is.
    pub draft_min: usize,
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
    /// The options the [`crate::sampling::Shaper`] reads.
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
            draft_min: 0,
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
    /// The scheduler's draft model (`Scheduler::set_draft`, `Engine::set_draft`).
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
    /// The listener asked to stop (the engine's callback; the server stopping).
    Callback,
    ContextFull,
}
