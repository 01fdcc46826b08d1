//! Constrained decoding: a JSON schema, any JSON object, a regex or a Lark grammar restricts
//! which tokens may come next, on llguidance (the library llama.cpp uses for the same).
//!
//! A [`Constrainer`] is the model's token environment — every token's bytes, control tokens
//! marked with llguidance's `0xff` prefix, the end-of-generation tokens as its EOS set — built
//! once per tokenizer and shared (`Arc`): for a 150k vocabulary the trie and its bias slices
//! are not free. A [`Constraint`] is one request's matcher over it: [`Constraint::mask`] sets
//! every token the grammar cannot take next to -inf (end-of-generation only where the grammar
//! may stop), [`Constraint::accept`] advances it by the sampled token, and
//! [`Constraint::is_complete`] says that nothing may follow, so generation ends.
//!
//! JSON output is compact-but-spaced (`{"a": 1, "b": [2, 3]}`) unless the schema says
//! otherwise in its own `x-guidance` options: with free whitespace a small model can emit
//! newlines forever.

use std::sync::{Arc, OnceLock};

use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::{ApproximateTokEnv, SimpleVob, TokEnv, TokRxInfo, TokTrie};
use llguidance::{Matcher, ParserFactory};
use serde_json::{json, Value};

use crate::error::{Error, Result};
use crate::tokenizer::Tokenizer;

/// What a constrained request's output must be.
#[derive(Clone, Debug, PartialEq)]
pub enum ConstraintSpec {
    /// Any JSON object (OpenAI's `json_object`, Ollama's `"format": "json"`).
    JsonObject,
    /// A document valid against this JSON schema; `$ref`s inside it resolve, remote ones don't.
    JsonSchema(Value),
    /// Text matching this regex (whole output).
    Regex(String),
    /// Text in this Lark grammar (llguidance's dialect).
    Lark(String),
}

/// The JSON layout llguidance is told to use when the schema does not choose one.
fn json_layout() -> Value {
    json!({"whitespace_flexible": false, "item_separator": ", ", "key_separator": ": "})
}

impl ConstraintSpec {
    fn grammar(&self) -> Result<TopLevelGrammar> {
        Ok(match self {
            ConstraintSpec::JsonObject => {
                TopLevelGrammar::from_json_schema(json!({"type": "object", "x-guidance": json_layout()}))
            }
            ConstraintSpec::JsonSchema(schema) => {
                let mut schema = schema.clone();
                match &mut schema {
                    Value::Object(m) => {
                        m.entry("x-guidance").or_insert_with(json_layout);
                    }
                    // `true` is the schema of every document; `false` of none.
                    Value::Bool(_) => {}
                    other => {
                        return Err(Error::Constraint(format!(
                            "a JSON schema is an object or a boolean, not {}",
                            short(other)
                        )))
                    }
                }
                TopLevelGrammar::from_json_schema(schema)
            }
            ConstraintSpec::Regex(rx) => TopLevelGrammar::from_regex(rx),
            ConstraintSpec::Lark(g) => {
                if g.trim().is_empty() {
                    return Err(Error::Constraint("empty Lark grammar".into()));
                }
                TopLevelGrammar::from_lark(g.clone())
            }
        })
    }

    /// Compiles the spec against a one-byte vocabulary: a bad schema, regex or grammar is an
    /// error here, before any model is involved (the server answers 400 with it).
    pub fn check(&self) -> Result<()> {
        static BYTES: OnceLock<std::result::Result<ParserFactory, String>> = OnceLock::new();
        let factory = BYTES
            .get_or_init(|| factory(&ApproximateTokEnv::single_byte_env()).map_err(|e| e.to_string()))
            .as_ref()
            .map_err(|e| Error::Constraint(e.clone()))?;
        compile(factory, self).map(drop)
    }
}

/// The start of a JSON value, for messages.
fn short(v: &Value) -> String {
    let s = v.to_string();
    match s.char_indices().nth(60) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s,
    }
}

fn factory(env: &TokEnv) -> Result<ParserFactory> {
    let mut f = ParserFactory::new_simple(env).map_err(|e| Error::Constraint(e.to_string()))?;
    // llguidance logs warnings to stderr by default; its errors reach us as values.
    f.set_stderr_log_level(0);
    Ok(f)
}

fn compile(factory: &ParserFactory, spec: &ConstraintSpec) -> Result<Matcher> {
    let grammar = spec.grammar()?;
    // The matcher turns its own panics into errors; compiling is guarded here the same way,
    // so that no schema can take down the thread it is compiled on.
    let parser = llguidance::panic_utils::catch_unwind(std::panic::AssertUnwindSafe(|| factory.create_parser(grammar)))
        .map_err(|e| Error::Constraint(e.to_string()))?;
    let m = Matcher::new(Ok(parser));
    match m.get_error() {
        Some(e) => Err(Error::Constraint(e)),
        None => Ok(m),
    }
}

/// A tokenizer's token environment for llguidance, shared by all of its constraints.
pub struct Constrainer {
    factory: ParserFactory,
}

impl std::fmt::Debug for Constrainer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Constrainer")
            .field("n_vocab", &self.factory.tok_env().tok_trie().vocab_size())
            .finish()
    }
}

impl Constrainer {
    /// Every token's bytes as its text decodes (control tokens: `0xff` + their text, as
    /// llama.cpp's llguidance glue does), EOS and every end-of-generation token as the EOS set.
    pub fn new(tok: &Tokenizer) -> Result<Arc<Constrainer>> {
        let n = tok.n_vocab();
        let eog = tok.eog_ids();
        let Some(&first_eog) = tok.eos().as_ref().or(eog.first()) else {
            return Err(Error::Constraint(
                "the tokenizer has no end-of-generation token to end a constrained output".into(),
            ));
        };
        let words: Vec<Vec<u8>> = (0..n as u32)
            .map(|id| {
                let plain = tok.piece(id, false);
                if !plain.is_empty() {
                    return plain.into_owned();
                }
                let special = tok.piece(id, true);
                if special.is_empty() {
                    return Vec::new();
                }
                let mut w = Vec::with_capacity(special.len() + 1);
                w.push(TokTrie::SPECIAL_TOKEN_MARKER);
                w.extend_from_slice(&special);
                w
            })
            .collect();
        let n32 = u32::try_from(n).map_err(|_| Error::Constraint(format!("a vocabulary of {n} tokens")))?;
        let info = TokRxInfo {
            tok_bos: tok.bos(),
            tok_end_of_turn: tok.eot(),
            ..TokRxInfo::new(n32, first_eog)
        };
        let mut eos: Vec<u32> = vec![first_eog];
        eos.extend(eog.iter().filter(|&&e| e != first_eog));
        let trie = TokTrie::from(&info, &words).with_eos_tokens(&eos);
        // Tokenization (for forced tokens only) is the trie's greedy one: masks never need ours.
        let env: TokEnv = Arc::new(ApproximateTokEnv::new(trie));
        Ok(Arc::new(Constrainer {
            factory: factory(&env)?,
        }))
    }

    /// A fresh matcher for `spec`; a bad schema or grammar is an error naming what is wrong.
    pub fn constraint(&self, spec: &ConstraintSpec) -> Result<Constraint> {
        Ok(Constraint {
            matcher: compile(&self.factory, spec)?,
        })
    }
}

/// One request's grammar state.
pub struct Constraint {
    matcher: Matcher,
}

impl std::fmt::Debug for Constraint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Constraint")
            .field("complete", &self.is_complete())
            .finish()
    }
}

impl Constraint {
    /// The tokens allowed next (a set over the tokenizer's vocabulary).
    fn allowed(&mut self) -> Result<SimpleVob> {
        let m = self
            .matcher
            .compute_mask()
            .map_err(|e| Error::Constraint(e.to_string()))?;
        if m.is_zero() {
            return Err(Error::Constraint("no token can continue the output".into()));
        }
        Ok(m)
    }

    /// Sets the logits (n_vocab; rows past the tokenizer's vocabulary included) of every token
    /// the grammar does not allow next to -inf.
    pub fn mask(&mut self, logits: &mut [f32]) -> Result<()> {
        let allowed = self.allowed()?;
        let n = allowed.len();
        for (i, l) in logits.iter_mut().enumerate() {
            if i >= n || !allowed.get(i) {
                *l = f32::NEG_INFINITY;
            }
        }
        Ok(())
    }

    /// Advances by the sampled token (an end-of-generation token ends the matcher too).
    pub fn accept(&mut self, id: u32) -> Result<()> {
        self.matcher
            .consume_token(id)
            .map_err(|e| Error::Constraint(format!("token {id}: {e}")))
    }

    /// Nothing may follow: the grammar is complete (or failed, which `mask` reports).
    pub fn is_complete(&self) -> bool {
        self.matcher.is_stopped()
    }
}

#[cfg(test)]
mod tests;
