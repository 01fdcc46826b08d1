//! `run`, `chat` and `tokenize`.

use std::io::{BufRead, IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::{bail, Context as _, Result};
use clap::Args;

use minfer::chat::ChatMessage;
use minfer::engine::{Engine, Flow, GenerateOptions, Speculation, StopReason};
use minfer::overrides::Overrides;
use minfer::sampling::SamplerConfig;
use minfer::SessionOptions;

use super::flags::{EngineFlags, SampleFlags};
use super::Base;

#[derive(Args)]
pub struct RunArgs {
    /// [MODEL] [PROMPT]
    args: Vec<String>,
    #[command(flatten)]
    engine: EngineFlags,
    #[command(flatten)]
    sample: SampleFlags,
    /// Skip the chat template; special tokens typed in the prompt are parsed
    #[arg(long)]
    raw: bool,
    /// Print one JSON object {"prompt_tokens", "tokens", "text"} instead of streaming
    #[arg(long)]
    json: bool,
    /// Write the decode graph to FILE (.json, else Graphviz dot)
    #[arg(long = "dump-graph")]
    dump_graph: Option<PathBuf>,
    /// The prompt as token ids (`1,2,3`): fed as given, no tokenizer, template or BOS
    #[arg(long = "prompt-ids", value_parser = parse_ids)]
    prompt_ids: Option<TokenIds>,
    /// Write the logits of every prompt position to FILE (.npy, float32 [n_prompt, n_vocab])
    /// before generating; with -n 0, only that
    #[arg(long = "logits-out")]
    logits_out: Option<PathBuf>,
}

#[derive(Args)]
pub struct ChatArgs {
    model: Option<PathBuf>,
    #[command(flatten)]
    engine: EngineFlags,
    #[command(flatten)]
    sample: SampleFlags,
}

#[derive(Args)]
pub struct TokenizeArgs {
    model: PathBuf,
    /// Print a JSON array of ids
    #[arg(long)]
    json: bool,
    /// Treat special tokens in the text as plain text
    #[arg(long = "no-special")]
    no_special: bool,
    text: String,
}

/// `--prompt-ids`: comma-separated token ids.
#[derive(Clone)]
struct TokenIds(Vec<u32>);

fn parse_ids(s: &str) -> std::result::Result<TokenIds, String> {
    let ids = s
        .split(',')
        .map(|t| {
            t.trim()
                .parse::<u32>()
                .map_err(|_| format!("'{}' is not a token id", t.trim()))
        })
        .collect::<std::result::Result<Vec<u32>, String>>()?;
    Ok(TokenIds(ids))
}

/// `run`: the prompt from the arguments, `--prompt-ids` or stdin.
pub fn run(a: RunArgs, base: &Base) -> Result<()> {
    let (model, prompt) = split_model_prompt(&a.args, &base.env)?;
    if let Some(f) = &a.dump_graph {
        super::dump_graph(&model, f)?;
    }
    let prompt = match (prompt, a.prompt_ids) {
        (Some(_), Some(_)) => bail!("give the prompt as text or as --prompt-ids, not both"),
        (Some(p), None) => Prompt::Text(p),
        (None, Some(ids)) => Prompt::Ids(ids.0),
        (None, None) => Prompt::Text(read_stdin_prompt()?),
    };
    let c = Config {
        logits_out: a.logits_out,
        ..a.sample.config(&a.engine, base, a.raw, a.json)?
    };
    generate(&model, &prompt, &c)
}

/// `chat`: MODEL defaults as for `run`.
pub fn chat(a: ChatArgs, base: &Base) -> Result<()> {
    let model = match a.model {
        Some(m) => m,
        None => default_model(&base.env)?,
    };
    converse(&model, &a.sample.config(&a.engine, base, false, false)?)
}

pub const DEFAULT_MODEL: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// The default model: `$MINFER_MODEL`, then `$MINFER_MODELS_DIR`, the user-level models
/// directory `scripts/fetch-models` fills (`~/.cache/minfer/models`), `./models/`, then the
/// user's cache directory itself.
pub fn default_model(env: &Overrides) -> Result<PathBuf> {
    let mut tried = Vec::new();
    if let Some(p) = &env.model {
        if p.is_file() {
            return Ok(p.clone());
        }
        tried.push(format!("$MINFER_MODEL={}", p.display()));
    }
    let mut dirs = Vec::new();
    if let Some(d) = &env.models_dir {
        dirs.push(d.clone());
    }
    if let Some(c) = minfer::testing::user_cache_dir() {
        dirs.push(c.join("minfer").join("models"));
    }
    dirs.push(PathBuf::from("models"));
    if let Some(c) = minfer::testing::user_cache_dir() {
        dirs.push(c.join("minfer"));
    }
    for d in dirs {
        let p = d.join(DEFAULT_MODEL);
        if p.is_file() {
            return Ok(p);
        }
        tried.push(p.display().to_string());
    }
    bail!(
        "no model given and the default model {DEFAULT_MODEL} was not found (tried: {}).\n\
         Fetch it with: scripts/fetch-models smollm2   (or pass a .gguf path)",
        tried.join(", ")
    )
}

/// `[MODEL] [PROMPT]`: a first argument that names a file or directory, ends in .gguf, or reads
/// as a Hugging Face `org/name[@revision]` is the model.
fn split_model_prompt(args: &[String], env: &Overrides) -> Result<(PathBuf, Option<String>)> {
    let looks_like_model =
        |s: &str| Path::new(s).exists() || s.ends_with(".gguf") || minfer::hf::HubName::parse(s).is_some();
    match args {
        [] => Ok((default_model(env)?, None)),
        [one] if looks_like_model(one) => Ok((check_model(one)?, None)),
        [one] => Ok((default_model(env)?, Some(one.clone()))),
        [m, p] => Ok((check_model(m)?, Some(p.clone()))),
        _ => bail!("expected at most two arguments, MODEL and PROMPT (quote the prompt)"),
    }
}

/// An existing path as given; a Hugging Face name as its snapshot directory in the cache.
fn check_model(s: &str) -> Result<PathBuf> {
    let p = PathBuf::from(s);
    if p.exists() {
        return Ok(p);
    }
    if minfer::hf::HubName::parse(s).is_some() && !s.ends_with(".gguf") {
        return Ok(minfer::load::resolve(&p)?.path().to_path_buf());
    }
    bail!("model '{s}' not found")
}

fn read_stdin_prompt() -> Result<String> {
    use std::io::IsTerminal;
    if std::io::stdin().is_terminal() {
        // Someone at a keyboard who gave no prompt: say what the wait is for.
        eprintln!("no prompt given: reading it from standard input (end it with Ctrl-D)");
    }
    let mut buf = Vec::new();
    std::io::stdin()
        .read_to_end(&mut buf)
        .context("reading the prompt from stdin")?;
    String::from_utf8(buf).map_err(|e| {
        anyhow::anyhow!(
            "the prompt on stdin is not valid UTF-8 (at byte {})",
            e.utf8_error().valid_up_to()
        )
    })
}

pub struct Config {
    pub session: SessionOptions,
    pub sampler: SamplerConfig,
    pub n_predict: usize,
    /// End-of-generation tokens are masked out: exactly `n_predict` tokens (`--ignore-eos`).
    pub ignore_eos: bool,
    pub system: Option<String>,
    pub raw: bool,
    pub json: bool,
    pub stop: Vec<String>,
    /// A Jinja chat template to use instead of the model's own.
    pub chat_template: Option<String>,
    pub flash_attn: bool,
    pub spec: Spec,
    /// `--json-schema` / `--grammar`.
    pub constraint: Option<minfer::constrain::ConstraintSpec>,
    /// `--logits-out`: every prompt position's logits, as .npy.
    pub logits_out: Option<PathBuf>,
}

/// Speculative decoding as asked (`--spec`, `--draft`, `--draft-max`, `--draft-min`).
#[derive(Clone, Debug)]
pub struct Spec {
    pub speculation: Speculation,
    /// The draft model of `--spec draft`.
    pub draft: Option<PathBuf>,
    pub draft_max: usize,
    pub draft_min: usize,
}

impl Spec {
    /// `--spec draft` has its draft model.
    pub fn check(&self) -> Result<()> {
        if self.speculation == Speculation::Draft && self.draft.is_none() {
            bail!("--spec draft needs a draft model (--draft MODEL)");
        }
        Ok(())
    }

    /// Puts the draft model (on a session of `opts`) under `engine`, where one was given.
    pub fn load_draft(&self, engine: &mut Engine, opts: &SessionOptions) -> Result<()> {
        self.check()?;
        if let Some(d) = &self.draft {
            let m = minfer::load::open_model(d).with_context(|| format!("loading the draft {}", d.display()))?;
            let s = minfer::Session::new(Arc::new(m), opts)?;
            eprintln!("draft: {} on {}", d.display(), s.backend_name);
            engine.set_draft(s)?;
        }
        Ok(())
    }

    /// `opts` with this speculation.
    pub fn options(&self, opts: GenerateOptions) -> GenerateOptions {
        GenerateOptions {
            speculation: self.speculation,
            draft_max: self.draft_max,
            draft_min: self.draft_min,
            ..opts
        }
    }
}

/// What `run` was given: text (templated unless `--raw`) or token ids (`--prompt-ids`).
enum Prompt {
    Text(String),
    Ids(Vec<u32>),
}

impl Config {
    /// The generation options the flags ask for.
    fn options(&self) -> GenerateOptions {
        self.spec.options(GenerateOptions {
            max_tokens: self.n_predict,
            sampler: self.sampler.clone(),
            stop: self.stop.clone(),
            ignore_eos: self.ignore_eos,
            constraint: self.constraint.clone(),
            ..GenerateOptions::default()
        })
    }
}

fn load(model: &Path, a: &Config) -> Result<Engine> {
    let t = std::time::Instant::now();
    let mut engine = Engine::load(model, &a.session).with_context(|| format!("loading {}", model.display()))?;
    engine.session_mut().set_flash_attn(a.flash_attn);
    prefault_with_progress(engine.model());
    if let Some(src) = &a.chat_template {
        engine.set_chat_template(src)?;
    }
    a.spec.load_draft(&mut engine, &a.session)?;
    let m = engine.model();
    eprintln!(
        "model: {} ({}, {} layers, {:.1} MB) loaded in {:.2}s",
        model.display(),
        m.arch.name(),
        m.hparams.n_layer,
        m.file_bytes as f64 / 1e6,
        t.elapsed().as_secs_f64()
    );
    for line in &engine.session().log {
        eprintln!("{line}");
    }
    Ok(engine)
}

/// Models this large get a progress bar while their pages are read in (on a terminal).
const PROGRESS_MIN_BYTES: u64 = 64 << 20;

fn prefault_with_progress(model: &minfer::Model) {
    let total = model.weight_bytes();
    if total < PROGRESS_MIN_BYTES || !std::io::stderr().is_terminal() {
        model.prefault(|_, _| {});
        return;
    }
    let bar = indicatif::ProgressBar::new(total);
    bar.set_style(
        indicatif::ProgressStyle::with_template("loading {bar:40} {bytes}/{total_bytes} {elapsed}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    model.prefault(|done, _| bar.set_position(done));
    bar.finish_and_clear();
}

fn generate(model: &Path, prompt: &Prompt, a: &Config) -> Result<()> {
    let mut engine = load(model, a)?;
    let ids = match prompt {
        Prompt::Text(text) => prompt_ids(&engine, text, a)?,
        Prompt::Ids(ids) => {
            let n_vocab = engine.session().n_vocab();
            if let Some(&bad) = ids.iter().find(|&&t| t as usize >= n_vocab) {
                bail!("--prompt-ids: token id {bad} is not below the vocabulary size {n_vocab}");
            }
            ids.clone()
        }
    };
    if let Some(path) = &a.logits_out {
        let logits = engine.session_mut().eval(&ids, true)?;
        write_npy_f32(path, &logits, ids.len(), engine.session().n_vocab())
            .with_context(|| format!("writing {}", path.display()))?;
        eprintln!(
            "logits: {} positions × {} written to {}",
            ids.len(),
            engine.session().n_vocab(),
            path.display()
        );
        if a.n_predict == 0 {
            return Ok(());
        }
        engine.reset();
    }
    let opts = a.options();
    let mut out = std::io::stdout();
    let json = a.json;
    let g = engine.generate(&ids, &opts, |piece| {
        if !json {
            let _ = out.write_all(piece.as_bytes());
            let _ = out.flush();
        }
        Flow::Continue
    })?;
    if json {
        let v = serde_json::json!({
            "prompt_tokens": g.prompt_tokens,
            "tokens": g.tokens,
            "text": g.text,
            "drafted": g.drafted,
            "accepted": g.accepted,
        });
        println!("{v}");
    } else {
        println!();
    }
    let n_gen = g.tokens.len();
    eprintln!(
        "prompt {} tokens, {:.1} t/s | generated {n_gen} tokens, {:.1} t/s | stop: {:?}",
        g.prompt_tokens.len(),
        g.prompt_evaluated as f64 / g.prefill_secs.max(1e-9),
        n_gen.saturating_sub(1) as f64 / g.decode_secs.max(1e-9),
        g.stop_reason
    );
    if g.drafted > 0 {
        eprintln!(
            "speculation: {} of {} drafted tokens accepted ({:.1} %)",
            g.accepted,
            g.drafted,
            100.0 * g.accepted as f64 / g.drafted as f64
        );
    }
    super::print_profile(engine.session());
    Ok(())
}

/// `chat`'s lines: at a terminal a line editor (arrow keys, Home/End, word motions) with the
/// history of earlier sessions (`$XDG_DATA_HOME/minfer/chat_history`, else
/// `~/.local/share/minfer/chat_history`; Up recalls); Ctrl-C clears the line being typed, Ctrl-D
/// at an empty line leaves. Piped, plain lines.
enum Input {
    Editor {
        ed: Box<rustyline::DefaultEditor>,
        history: Option<PathBuf>,
    },
    Lines(std::io::Lines<std::io::StdinLock<'static>>),
}

impl Input {
    fn open() -> Result<Input> {
        if !std::io::stdin().is_terminal() {
            return Ok(Input::Lines(std::io::stdin().lock().lines()));
        }
        let mut ed = Box::new(rustyline::DefaultEditor::new().context("starting the line editor")?);
        let history = minfer::testing::user_data_dir().map(|d| d.join("minfer").join("chat_history"));
        if let Some(h) = &history {
            // None yet on a first session.
            let _ = ed.load_history(h);
        }
        Ok(Input::Editor { ed, history })
    }

    /// The next line, or None at the end (Ctrl-D, end of input).
    fn next(&mut self) -> Result<Option<String>> {
        use rustyline::error::ReadlineError;
        match self {
            Input::Lines(lines) => lines.next().transpose().context("reading stdin"),
            Input::Editor { ed, history } => loop {
                match ed.readline("> ") {
                    Ok(line) => {
                        if !line.trim().is_empty() {
                            let _ = ed.add_history_entry(line.as_str());
                            if let Some(h) = history {
                                save_history(ed, h);
                            }
                        }
                        return Ok(Some(line));
                    }
                    // Ctrl-C at the prompt: the line is dropped, a fresh prompt follows.
                    Err(ReadlineError::Interrupted) => continue,
                    Err(ReadlineError::Eof) => {
                        eprintln!();
                        return Ok(None);
                    }
                    Err(e) => return Err(e).context("reading the terminal"),
                }
            },
        }
    }
}

/// Writes the history after each line, so a session that ends any way keeps it; a history
/// that cannot be written is said once per line, never fatal.
fn save_history(ed: &mut rustyline::DefaultEditor, path: &Path) {
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    if let Err(e) = ed.save_history(path) {
        eprintln!("(history not saved to {}: {e})", path.display());
    }
}

fn converse(model: &Path, a: &Config) -> Result<()> {
    let mut engine = load(model, a)?;
    if engine.template.is_none() {
        bail!("this model has no chat template; use `run --raw` instead");
    }
    let stop_flag = Arc::new(AtomicBool::new(false));
    {
        let f = stop_flag.clone();
        ctrlc::set_handler(move || f.store(true, Ordering::SeqCst)).context("installing the Ctrl-C handler")?;
    }
    let mut history: Vec<ChatMessage> = Vec::new();
    if let Some(s) = &a.system {
        history.push(ChatMessage::new("system", s.as_str()));
    }
    eprintln!("chat: /reset forgets the conversation, /exit (or Ctrl-D) quits, Ctrl-C stops an answer");
    let mut input = Input::open()?;
    loop {
        let Some(line) = input.next()? else { break };
        let line = line.trim();
        match line {
            "" => continue,
            "/exit" | "/quit" => break,
            "/reset" => {
                history.retain(|m| m.role == "system");
                engine.reset();
                eprintln!("(conversation reset)");
                continue;
            }
            _ => {}
        }
        history.push(ChatMessage::new("user", line));
        let text = engine.apply_chat_template(&history, true)?;
        let ids = engine.tokenize(&text, true, true)?;
        stop_flag.store(false, Ordering::SeqCst);
        let opts = a.options();
        let mut out = std::io::stdout();
        let g = engine.generate(&ids, &opts, |piece| {
            let _ = out.write_all(piece.as_bytes());
            let _ = out.flush();
            if stop_flag.load(Ordering::SeqCst) {
                Flow::Stop
            } else {
                Flow::Continue
            }
        });
        // A turn that cannot be answered (a conversation grown past the context) is dropped;
        // the conversation goes on.
        let g = match g {
            Ok(g) => g,
            Err(e) => {
                eprintln!("({e}; /reset to start over)");
                history.pop();
                continue;
            }
        };
        println!();
        match g.stop_reason {
            StopReason::Callback => eprintln!("(stopped)"),
            StopReason::ContextFull => {
                eprintln!("(the context is full: /reset to start over, or raise -c)")
            }
            _ => {}
        }
        history.push(ChatMessage::new("assistant", g.text.trim()));
    }
    super::print_profile(engine.session());
    Ok(())
}

pub fn tokenize(a: TokenizeArgs) -> Result<()> {
    // Only the tokenizer is read: no weights are mapped.
    let tok = minfer::load::open_tokenizer(&a.model)?;
    let ids = tok.encode(&a.text, true, !a.no_special)?;
    if a.json {
        println!("{}", serde_json::to_string(&ids)?);
    } else {
        for id in ids {
            let piece = tok.token_to_piece(id);
            println!("{id:>8} -> '{}'", String::from_utf8_lossy(&piece));
        }
    }
    Ok(())
}

/// A float32 `[rows, cols]` array as NumPy's `.npy` (format 1.0, little-endian, C order),
/// written to a temporary file first so a failed write leaves no half file at `path`.
fn write_npy_f32(path: &Path, data: &[f32], rows: usize, cols: usize) -> Result<()> {
    let mut header = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': ({rows}, {cols}), }}");
    // Magic, version and length take 10 bytes; the header ends in '\n' at a multiple of 64.
    let total = (10 + header.len() + 1).next_multiple_of(64);
    header.push_str(&" ".repeat(total - 10 - header.len() - 1));
    header.push('\n');
    let mut bytes = Vec::with_capacity(total + data.len() * 4);
    bytes.extend_from_slice(b"\x93NUMPY\x01\x00");
    bytes.extend_from_slice(&(header.len() as u16).to_le_bytes());
    bytes.extend_from_slice(header.as_bytes());
    bytes.extend(data.iter().flat_map(|v| v.to_le_bytes()));
    let tmp = path.with_extension("npy.partial");
    std::fs::write(&tmp, &bytes)?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}

/// The prompt's ids as `run` feeds them: the chat template applied unless `--raw` (or the
/// model has none), BOS as the model adds it.
fn prompt_ids(engine: &Engine, prompt: &str, a: &Config) -> Result<Vec<u32>> {
    Ok(if a.raw || engine.template.is_none() {
        if a.system.is_some() && !a.raw {
            bail!("--system needs a chat template, and this model has none");
        }
        engine.tokenize(prompt, true, true)?
    } else {
        let mut msgs = Vec::new();
        if let Some(s) = &a.system {
            msgs.push(ChatMessage::new("system", s.as_str()));
        }
        msgs.push(ChatMessage::new("user", prompt));
        let text = engine.apply_chat_template(&msgs, true)?;
        engine.tokenize(&text, true, true)?
    })
}
