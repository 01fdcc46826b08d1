//! `embed MODEL TEXT…`: one vector per text from an embedding model, one JSON array per line
//! (or one OpenAI-shaped JSON object with `--json`).

use std::io::{BufRead, Write};
use std::path::PathBuf;

use anyhow::{Context as _, Result};
use clap::Args;
use minfer::embed::{self, Overflow};
use minfer::engine::Engine;

use super::flags::EngineFlags;
use super::Base;

#[derive(Args)]
pub struct EmbedArgs {
    model: PathBuf,
    texts: Vec<String>,
    /// One JSON object {"data": [{"index", "embedding", "tokens"}], "usage"} instead
    #[arg(long)]
    json: bool,
    /// Cut texts longer than the model's positions (keeping the closing [SEP]) instead of
    /// refusing them
    #[arg(long)]
    truncate: bool,
    #[command(flatten)]
    engine: EngineFlags,
}

pub fn run(a: EmbedArgs, base: &Base) -> Result<()> {
    let texts = match a.texts.is_empty() {
        false => a.texts,
        // One text per line of stdin.
        true => std::io::stdin()
            .lock()
            .lines()
            .collect::<std::io::Result<Vec<String>>>()
            .context("reading texts from stdin")?
            .into_iter()
            .filter(|l| !l.trim().is_empty())
            .collect(),
    };
    if texts.is_empty() {
        anyhow::bail!("no text to embed (give TEXT arguments, or lines on stdin)");
    }
    let mut engine = Engine::load(&a.model, &a.engine.session(base))?;
    for line in &engine.session().log {
        eprintln!("{line}");
    }
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let overflow = if a.truncate {
        Overflow::Truncate
    } else {
        Overflow::Refuse
    };
    let ids = embed::tokenize(engine.session(), engine.tokenizer(), &refs, overflow)?;
    let out = engine.embed_tokens(&ids)?;
    let mut w = std::io::stdout().lock();
    if a.json {
        let data: Vec<_> = out
            .iter()
            .enumerate()
            .map(|(i, e)| serde_json::json!({"index": i, "embedding": e.vector, "tokens": e.n_tokens}))
            .collect();
        let tokens: usize = out.iter().map(|e| e.n_tokens).sum();
        let doc = serde_json::json!({
            "model": a.model.display().to_string(),
            "data": data,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        });
        writeln!(w, "{doc}")?;
    } else {
        for e in &out {
            writeln!(w, "{}", serde_json::to_string(&e.vector)?)?;
        }
    }
    Ok(())
}
