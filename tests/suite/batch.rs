//! Many sequences on one session: batch invariance (a sequence's logits are the bits it gets
//! alone, whatever shares its forwards), fork, truncate, a full pool, growth, and the
//! scheduler's continuous batching, cancellation and prefix reuse.

use std::path::Path;
use std::sync::Arc;

use minfer::backend::{BackendChoice, KvType};
use minfer::engine::{GenerateOptions, Speculation, StopReason};
use minfer::model::Arch;
use minfer::quant::QType;
use minfer::sampling::SamplerConfig;
use minfer::sched::{Event, Prompt, Request, Scheduler, SchedulerOptions};
use minfer::session::SeqId;
use minfer::testing::argmax;
use minfer::tokenizer::{Tokenizer, TokenizerSpec};
use minfer::{load, Batch, Error, Session, SessionOptions};

use crate::common;
use crate::tiny::write_tiny;

tests![
    joining_and_leaving_changes_no_bits_for_every_architecture,
    real_models_batched_equal_alone,
    fork_shares_a_prefix_evaluated_once,
    truncate_then_continue_equals_a_fresh_run,
    full_pool_is_an_error_that_hurts_nothing,
    storage_grows_with_use,
    scheduler_equals_alone_and_reuses_prefixes,
    cancel_frees_cells_at_once_and_changes_no_other_output,
    speculation_changes_no_token,
    scheduler_speculates_beside_plain_requests,
    engine_next_turn_evaluates_only_what_it_adds,
    scheduler_thread_answers_chats_as_the_engine_alone,
];

fn session_of(path: &Path, n_ctx: usize, kv: KvType) -> Session {
    let model = Arc::new(load::open_model(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())));
    let opts = SessionOptions {
        n_ctx,
        threads: Some(2),
        backend: BackendChoice::Cpu,
        kv_type: Some(kv),
        ..SessionOptions::default()
    };
    Session::new(model, &opts).unwrap()
}

/// A sequence alone: the prompt's last logits, then `steps` greedy steps' logits.
pub fn alone(s: &mut Session, prompt: &[u32], steps: usize) -> Vec<Vec<f32>> {
    s.reset();
    let mut out = vec![s.eval(prompt, false).unwrap()];
    for _ in 0..steps {
        let t = argmax(out.last().unwrap());
        out.push(s.eval(&[t], false).unwrap());
    }
    out
}

/// Sequence `i` joins at step `join[i]` (its prompt whole, or for sequence 0 in two chunks
/// over two steps), decodes greedily for `steps[i]` steps and leaves; every step is one
/// `decode` of whatever sequences are active. Returns each sequence's logits as `alone` does.
pub fn together(s: &mut Session, prompts: &[Vec<u32>], join: &[usize], steps: &[usize]) -> Vec<Vec<Vec<f32>>> {
    let n = prompts.len();
    let mut seqs: Vec<Option<SeqId>> = vec![None; n];
    let mut got: Vec<Vec<Vec<f32>>> = vec![Vec::new(); n];
    let mut fed = vec![0usize; n]; // prompt tokens in the cache
    let nv = s.n_vocab();
    for step in 0.. {
        if (0..n).all(|i| got[i].len() == steps[i] + 1) {
            break;
        }
        let mut b = Batch::new();
        let mut rows = Vec::new();
        for i in 0..n {
            if step < join[i] || got[i].len() == steps[i] + 1 {
                continue;
            }
            let seq = *seqs[i].get_or_insert_with(|| s.seq_new());
            let p = &prompts[i];
            if fed[i] < p.len() {
                // Sequence 0's prompt is split where it first joins: 4 tokens, then the rest.
                let k = if i == 0 && fed[i] == 0 { 4 } else { p.len() - fed[i] };
                for j in fed[i]..fed[i] + k {
                    b.push(seq, p[j], j, j + 1 == p.len());
                }
                fed[i] += k;
                if fed[i] == p.len() {
                    rows.push(i);
                }
            } else {
                let t = argmax(got[i].last().unwrap());
                let pos = s.seq_len(seq).unwrap();
                b.push(seq, t, pos, true);
                rows.push(i);
            }
        }
        if b.is_empty() {
            continue;
        }
        let logits = s.decode(&b).unwrap();
        assert_eq!(logits.len(), rows.len() * nv);
        for (r, &i) in rows.iter().enumerate() {
            got[i].push(logits[r * nv..(r + 1) * nv].to_vec());
            if got[i].len() == steps[i] + 1 {
                s.seq_remove(seqs[i].unwrap()).unwrap();
            }
        }
    }
    got
}

pub fn prompts() -> Vec<Vec<u32>> {
    vec![
        vec![1, 17, 5, 93, 42, 42, 8, 61, 3, 77, 20],
        vec![4, 9, 33, 2, 71],
        vec![88, 12, 12, 40, 6, 19, 55, 23],
        vec![7, 64, 30],
    ]
}

/// Four prompts of different lengths joining at different steps and leaving after different
/// numbers of tokens give, bit for bit, the logits each gets alone: every architecture
/// (gemma3's window of 4 crossed), f32 and f16 caches.
fn joining_and_leaving_changes_no_bits_for_every_architecture() {
    let dir = crate::gguf::tempdir("batch-inv");
    let ps = prompts();
    let (join, steps) = ([0, 1, 1, 4], [9, 6, 3, 5]);
    for arch in Arch::DECODERS {
        for (qtype, kv) in [(QType::Q8_0, KvType::F32), (QType::Q4K, KvType::F16)] {
            let path = write_tiny(&dir, arch, qtype, |_| {});
            let mut s = session_of(&path, 128, kv);
            let want: Vec<_> = ps.iter().zip(steps).map(|(p, k)| alone(&mut s, p, k)).collect();
            let mut s = session_of(&path, 128, kv);
            let got = together(&mut s, &ps, &join, &steps);
            for i in 0..ps.len() {
                for (k, (g, w)) in got[i].iter().zip(&want[i]).enumerate() {
                    assert!(
                        g == w,
                        "{} {qtype} kv {}: sequence {i} step {k} differs batched (max |Δ| {})",
                        arch.name(),
                        kv.name(),
                        crate::model::diff(g, w).0
                    );
                }
            }
            // Everything left: the main sequence holds nothing, the others were removed.
            assert_eq!(s.kv().used(), 0, "{}: cells still held", arch.name());
        }
    }
}

const SMOL: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// The same on the real models with real prompts: their K-quant, q5_0 and q8_0 matmuls take
/// sequences of 1 to 20 tokens per forward alongside others.
fn real_models_batched_equal_alone() {
    let t = "real_models_batched_equal_alone";
    for file in [SMOL, "gemma-3-270m-Q4_K_M.gguf", "qwen2.5-coder-0.5b-instruct.gguf"] {
        let Some(path) = common::real_model(t, file) else {
            continue;
        };
        let tok = load::open_tokenizer(&path).unwrap();
        let texts = [
            "The capital of France is",
            "def fibonacci(n):\n    if n < 2:\n        return n\n",
            "Once upon a time, in a small village by the sea, there lived",
            "1, 2, 3, 4,",
        ];
        let ps: Vec<Vec<u32>> = texts.iter().map(|x| tok.encode(x, true, false).unwrap()).collect();
        let (join, steps) = ([0, 2, 2, 5], [12, 8, 4, 6]);
        let mut s = session_of(&path, 256, KvType::F16);
        let want: Vec<_> = ps.iter().zip(steps).map(|(p, k)| alone(&mut s, p, k)).collect();
        let mut s = session_of(&path, 256, KvType::F16);
        let got = together(&mut s, &ps, &join, &steps);
        for i in 0..ps.len() {
            let gt: Vec<u32> = got[i].iter().map(|l| argmax(l)).collect();
            let wt: Vec<u32> = want[i].iter().map(|l| argmax(l)).collect();
            assert_eq!(gt, wt, "{file} prompt {i}: greedy tokens");
            for (k, (g, w)) in got[i].iter().zip(&want[i]).enumerate() {
                assert!(
                    g == w,
                    "{file} prompt {i} step {k}: max |Δ| {}",
                    crate::model::diff(g, w).0
                );
            }
        }
    }
}

fn tiny_path(tag: &str, arch: Arch) -> std::path::PathBuf {
    let dir = crate::gguf::tempdir(tag);
    write_tiny(&dir, arch, QType::Q8_0, |_| {})
}

fn seq_tokens(n: usize, salt: u32) -> Vec<u32> {
    (0..n as u32).map(|i| (i * 37 + salt * 11 + 5) % 96).collect()
}

/// Two sequences sharing a 200-token prefix: it is evaluated once (its cells shared), and each
/// continuation's logits are the unshared run's, bit for bit.
fn fork_shares_a_prefix_evaluated_once() {
    for arch in Arch::DECODERS {
        let path = tiny_path("batch-fork", arch);
        let prefix = seq_tokens(200, 1);
        let conts = [seq_tokens(5, 2), seq_tokens(7, 3)];
        let mut s = session_of(&path, 256, KvType::F32);
        let mut want = Vec::new();
        for c in &conts {
            s.reset();
            let all: Vec<u32> = prefix.iter().chain(c).copied().collect();
            let l = s.eval(&all, true).unwrap();
            want.push(l[prefix.len() * s.n_vocab()..].to_vec());
        }
        let mut s = session_of(&path, 256, KvType::F32);
        let a = s.main_seq();
        s.eval(&prefix, false).unwrap();
        let b = s.seq_fork(a, prefix.len()).unwrap();
        assert_eq!(s.kv().used(), 200, "{}: the fork copied cells", arch.name());
        let mut batch = Batch::new();
        for (seq, c) in [(a, &conts[0]), (b, &conts[1])] {
            for (j, &t) in c.iter().enumerate() {
                batch.push(seq, t, prefix.len() + j, true);
            }
        }
        let got = s.decode(&batch).unwrap();
        let split = conts[0].len() * s.n_vocab();
        assert!(got[..split] == want[0][..], "{}: first continuation", arch.name());
        assert!(got[split..] == want[1][..], "{}: forked continuation", arch.name());
        assert_eq!(s.kv().used(), 200 + 5 + 7, "{}: cells after both", arch.name());
    }
}

/// Truncating a sequence and evaluating other tokens equals a fresh run of those tokens; the
/// dropped cells are taken again.
fn truncate_then_continue_equals_a_fresh_run() {
    let path = tiny_path("batch-trunc", Arch::Gemma3);
    let (head, old, new) = (seq_tokens(12, 4), seq_tokens(9, 5), seq_tokens(6, 6));
    let mut s = session_of(&path, 64, KvType::F16);
    let fresh: Vec<u32> = head.iter().chain(&new).copied().collect();
    let want = s.eval(&fresh, true).unwrap();
    let mut s = session_of(&path, 64, KvType::F16);
    let x = s.seq_new();
    let _other = {
        let o = s.seq_new();
        let mut b = Batch::new();
        for (j, &t) in seq_tokens(10, 7).iter().enumerate() {
            b.push(o, t, j, false);
        }
        s.decode(&b).unwrap();
        o
    };
    let mut b = Batch::new();
    for (j, &t) in head.iter().chain(&old).enumerate() {
        b.push(x, t, j, false);
    }
    s.decode(&b).unwrap();
    let used = s.kv().used();
    s.seq_truncate(x, head.len()).unwrap();
    assert_eq!(s.kv().used(), used - old.len());
    let mut b = Batch::new();
    for (j, &t) in head.iter().enumerate() {
        // Positions must follow on: re-sending a held position is refused.
        b.push(x, t, j, false);
    }
    let e = s.decode(&b).unwrap_err().to_string();
    assert!(e.contains("position 0") && e.contains("at 12"), "{e}");
    let mut b = Batch::new();
    for (j, &t) in new.iter().enumerate() {
        b.push(x, t, head.len() + j, true);
    }
    let got = s.decode(&b).unwrap();
    assert!(got[..] == want[head.len() * s.n_vocab()..], "after truncate");
    assert_eq!(s.kv().used(), used - old.len() + new.len());
}

/// A batch the pool cannot hold is refused with the sizes; the sequences are as they were and
/// the next forward's logits are those of a run that never saw it.
fn full_pool_is_an_error_that_hurts_nothing() {
    let path = tiny_path("batch-full", Arch::Llama);
    let a_tokens = seq_tokens(20, 8);
    let mut want = session_of(&path, 32, KvType::F32);
    want.eval(&a_tokens, false).unwrap();
    let want = want.eval(&[3], false).unwrap();
    let mut s = session_of(&path, 32, KvType::F32);
    s.eval(&a_tokens, false).unwrap();
    let b = s.seq_new();
    let mut batch = Batch::new();
    for (j, &t) in seq_tokens(15, 9).iter().enumerate() {
        batch.push(b, t, j, true);
    }
    let e = s.decode(&batch).unwrap_err();
    assert!(
        matches!(
            e,
            Error::KvFull {
                need: 15,
                free: 12,
                n_ctx: 32
            }
        ),
        "{e}"
    );
    assert!(
        e.to_string().contains("15") && e.to_string().contains("12 of 32"),
        "{e}"
    );
    assert_eq!(s.seq_len(b).unwrap(), 0);
    assert_eq!(s.n_past(), 20);
    assert_eq!(s.eval(&[3], false).unwrap(), want, "after the refused batch");
    // One sequence past the context: the overflow names the position.
    let e = s.eval(&seq_tokens(12, 1), false).unwrap_err();
    assert!(matches!(e, Error::ContextOverflow { pos: 32, n_ctx: 32 }), "{e}");
}

/// Storage starts at 256 cells and doubles as cells are taken, up to the context.
fn storage_grows_with_use() {
    let path = tiny_path("batch-grow", Arch::Qwen2);
    let mut s = session_of(&path, 1024, KvType::F32);
    let per_cell = s.kv_bytes() / 256;
    assert_eq!(s.kv().capacity(), 256);
    let toks = seq_tokens(300, 10);
    // The same tokens in one forward: the storage grows before any cell is written.
    let want = {
        let mut big = session_of(&path, 1024, KvType::F32);
        let all = big.eval(&toks, true).unwrap();
        all[250 * big.n_vocab()..].to_vec()
    };
    s.eval(&toks[..250], false).unwrap();
    assert_eq!(s.kv().capacity(), 256);
    let got = s.eval(&toks[250..], true).unwrap();
    assert_eq!(s.kv().capacity(), 512);
    assert_eq!(s.kv_bytes(), 512 * per_cell);
    assert!(got == want, "logits across the growth");
}

/// Greedy to `max_tokens`, end-of-generation tokens masked (`ignore_eos`: the tiny models'
/// vocabulary has llama's default EOS id 2).
fn greedy(max_tokens: usize) -> GenerateOptions {
    GenerateOptions {
        max_tokens,
        sampler: SamplerConfig::greedy(),
        ignore_eos: true,
        ..GenerateOptions::default()
    }
}

/// The tiny models' vocabulary (`t0` … `t95`) as a SentencePiece tokenizer.
fn tiny_tokenizer_owned() -> Tokenizer {
    let spec = TokenizerSpec {
        model: "llama".into(),
        tokens: (0..96).map(|i| format!("t{i}")).collect(),
        ..TokenizerSpec::default()
    };
    Tokenizer::from_parts(spec).unwrap()
}

fn tiny_tokenizer() -> Arc<Tokenizer> {
    Arc::new(tiny_tokenizer_owned())
}

/// Greedy tokens of `prompt` alone, through the session, end-of-generation tokens masked.
fn alone_tokens(s: &mut Session, prompt: &[u32], n: usize) -> Vec<u32> {
    let eog = tiny_tokenizer().eog_ids();
    let pick = |l: &[f32]| {
        let mut l = l.to_vec();
        for &e in &eog {
            l[e as usize] = f32::NEG_INFINITY;
        }
        argmax(&l)
    };
    s.reset();
    let mut l = s.eval(prompt, false).unwrap();
    let mut out = vec![pick(&l)];
    while out.len() < n {
        l = s.eval(&[*out.last().unwrap()], false).unwrap();
        out.push(pick(&l));
    }
    out
}

fn scheduler(path: &Path, max_seqs: usize, step_tokens: usize) -> Scheduler {
    let s = session_of(path, 256, KvType::F32);
    let tok = tiny_tokenizer();
    Scheduler::new(
        s,
        tok,
        SchedulerOptions {
            max_seqs,
            step_tokens,
            keep_finished: 4,
        },
    )
    .unwrap()
}

/// Requests through the scheduler (three sequences at a time, a budget of 6 tokens a step so
/// prompts are chunked and requests wait) generate what each generates alone; a prompt that
/// extends a finished one reuses its cells.
fn scheduler_equals_alone_and_reuses_prefixes() {
    for arch in Arch::DECODERS {
        let path = tiny_path("sched", arch);
        let ps = prompts();
        let lens = [9, 6, 3, 5];
        let mut s = session_of(&path, 256, KvType::F32);
        let want: Vec<Vec<u32>> = ps.iter().zip(lens).map(|(p, n)| alone_tokens(&mut s, p, n)).collect();
        let mut sc = scheduler(&path, 3, 6);
        let handles: Vec<_> = ps
            .iter()
            .zip(lens)
            .map(|(p, n)| {
                sc.submit_channel(Request {
                    prompt: Prompt::Ids(p.clone()),
                    opts: greedy(n),
                })
            })
            .collect();
        sc.run_until_idle();
        for (i, h) in handles.into_iter().enumerate() {
            let (fin, _) = h.wait().unwrap();
            assert_eq!(fin.tokens, want[i], "{}: request {i}", arch.name());
            assert_eq!(fin.reason, StopReason::MaxTokens);
            assert_eq!(fin.usage.cached_tokens, 0);
        }
        // The second turn of request 0: its prompt, its reply and more.
        let mut turn: Vec<u32> = ps[0].iter().chain(&want[0]).copied().collect();
        turn.extend([11, 12, 13]);
        let want2 = alone_tokens(&mut s, &turn, 4);
        let h = sc.submit_channel(Request {
            prompt: Prompt::Ids(turn.clone()),
            opts: greedy(4),
        });
        sc.run_until_idle();
        let first = h.events.recv().unwrap();
        // The cache holds the prompt and all but the last reply token (never evaluated).
        let reused = ps[0].len() + want[0].len() - 1;
        assert_eq!(
            first,
            Event::Started {
                prompt_tokens: turn.len(),
                cached: reused
            },
            "{}",
            arch.name()
        );
        let (fin, _) = h.wait().unwrap();
        assert_eq!(fin.tokens, want2, "{}: second turn", arch.name());
        assert_eq!(fin.usage.cached_tokens, reused);
    }
}

/// A request cancelled mid-decode frees its cells when `cancel` returns; the others generate
/// what they would without it. Dropping a handle cancels at the next step.
fn cancel_frees_cells_at_once_and_changes_no_other_output() {
    let path = tiny_path("sched-cancel", Arch::Qwen3);
    let ps = prompts();
    let mut s = session_of(&path, 256, KvType::F32);
    let want: Vec<Vec<u32>> = ps.iter().map(|p| alone_tokens(&mut s, p, 8)).collect();
    let mut sc = Scheduler::new(
        session_of(&path, 256, KvType::F32),
        tiny_tokenizer(),
        SchedulerOptions {
            max_seqs: 4,
            step_tokens: 64,
            keep_finished: 0,
        },
    )
    .unwrap();
    let hs: Vec<_> = ps
        .iter()
        .map(|p| {
            sc.submit_channel(Request {
                prompt: Prompt::Ids(p.clone()),
                opts: greedy(8),
            })
        })
        .collect();
    for _ in 0..4 {
        sc.step();
    }
    let before = sc.session().kv().used();
    // Request 1 holds its prompt and three evaluated tokens.
    assert!(sc.cancel(hs[1].id));
    assert_eq!(sc.session().kv().used(), before - (ps[1].len() + 3));
    assert_eq!(sc.running(), 3);
    let mut hs = hs.into_iter();
    let (h0, h1, h2, h3) = (
        hs.next().unwrap(),
        hs.next().unwrap(),
        hs.next().unwrap(),
        hs.next().unwrap(),
    );
    drop(h3);
    sc.step();
    assert_eq!(sc.running(), 2, "a dropped handle cancels at the next step");
    sc.run_until_idle();
    assert_eq!(sc.session().kv().used(), 0);
    for (i, h) in [(0, h0), (2, h2)] {
        assert_eq!(h.wait().unwrap().0.tokens, want[i], "request {i}");
    }
    let events: Vec<Event> = h1.events.try_iter().collect();
    assert!(
        !events.iter().any(|e| matches!(e, Event::Done(_))),
        "the cancelled request got no Done"
    );
}

/// Generation of `prompt` under `spec` (and a draft session for `Speculation::Draft`).
fn generate(path: &Path, prompt: &[u32], opts: &GenerateOptions, draft: Option<&Path>) -> minfer::engine::Generation {
    engine(path, draft)
        .generate(prompt, opts, |_| minfer::engine::Flow::Continue)
        .unwrap()
}

/// An engine of `path` on the CPU, with `draft` as its draft model.
fn engine(path: &Path, draft: Option<&Path>) -> minfer::engine::Engine {
    let sopts = SessionOptions {
        n_ctx: 512,
        threads: Some(2),
        backend: BackendChoice::Cpu,
        ..SessionOptions::default()
    };
    let model = Arc::new(load::open_model(path).unwrap());
    let tok = match load::open_tokenizer(path) {
        Ok(t) => t,
        Err(_) => tiny_tokenizer_owned(),
    };
    let mut e = minfer::engine::Engine::from_model(model, tok, &sopts).unwrap();
    if let Some(d) = draft {
        let m = Arc::new(load::open_model(d).unwrap());
        e.set_draft(Session::new(m, &sopts).unwrap()).unwrap();
    }
    e
}

/// Speculative decoding changes no token: greedy, and sampled with a seed (each draft token is
/// checked by sampling the model's own distribution with the same random stream), with prompt
/// lookup and with a draft model (here the model itself, which drafts what it would say).
fn speculation_changes_no_token() {
    let t = "speculation_changes_no_token";
    let mut cases: Vec<(String, std::path::PathBuf, Vec<u32>)> = Vec::new();
    for (file, n) in [
        (SMOL, 40),
        ("gemma-3-270m-Q4_K_M.gguf", 24),
        ("qwen2.5-coder-0.5b-instruct.gguf", 24),
    ] {
        let Some(path) = common::real_model(t, file) else {
            continue;
        };
        let tok = load::open_tokenizer(&path).unwrap();
        let code =
            "def mean(values):\n    s = 0\n    for v in values:\n        s = s + v\n    return s / len(values)\n";
        let text = format!("Add a docstring to this function and change nothing else.\n\n{code}\n{code}");
        let ids = tok.encode(&text, true, false).unwrap();
        cases.push((format!("{file} ({n} tokens)"), path, ids));
    }
    let tiny = tiny_path("spec", Arch::Qwen2);
    let tiny_prompt: Vec<u32> = [seq_tokens(20, 3), seq_tokens(20, 3)].concat();
    cases.push(("tiny qwen2".into(), tiny, tiny_prompt));
    for (name, path, prompt) in &cases {
        let n = if name.starts_with("tiny") { 32 } else { 24 };
        for sampler in [
            SamplerConfig::greedy(),
            SamplerConfig {
                seed: Some(42),
                ..SamplerConfig::default()
            },
        ] {
            let base = GenerateOptions {
                max_tokens: n,
                sampler: sampler.clone(),
                ignore_eos: true,
                ..GenerateOptions::default()
            };
            let plain = generate(path, prompt, &base, None);
            for (spec, draft) in [
                (Speculation::Ngram { min_n: 1, max_n: 3 }, None),
                (Speculation::Draft, Some(path.as_path())),
            ] {
                let opts = GenerateOptions {
                    speculation: spec,
                    draft_max: 5,
                    ..base.clone()
                };
                let g = generate(path, prompt, &opts, draft);
                assert_eq!(
                    g.tokens, plain.tokens,
                    "{name}: {spec:?} at temperature {}",
                    sampler.temperature
                );
                assert!(g.drafted > 0, "{name}: {spec:?} drafted nothing");
                // (The draft does not mask end tokens, and the tiny vocabulary's EOS is often
                // its argmax: there the masked target rejects it.)
                if spec == Speculation::Draft && sampler.temperature == 0.0 && !name.starts_with("tiny") {
                    assert_eq!(g.accepted, g.drafted, "{name}: the model drafting for itself");
                }
            }
        }
    }
}

/// Requests that speculate (prompt lookup; the model as its own draft) beside plain ones, four
/// sequences at a time with prompts chunked by a budget of 6 tokens (a step that checks drafts
/// runs the chunks in a forward of their own): each greedy reply is the one it gets alone, and
/// the speculating ones drafted.
fn scheduler_speculates_beside_plain_requests() {
    let path = tiny_path("sched-spec", Arch::Qwen2);
    // Each prompt twice over, so that prompt lookup finds what follows.
    let ps: Vec<Vec<u32>> = prompts().into_iter().map(|p| [p.clone(), p].concat()).collect();
    let n = 16;
    let mut s = session_of(&path, 256, KvType::F32);
    let want: Vec<Vec<u32>> = ps.iter().map(|p| alone_tokens(&mut s, p, n)).collect();
    let mut sc = scheduler(&path, 4, 6);
    sc.set_draft(session_of(&path, 256, KvType::F32)).unwrap();
    let ngram = Speculation::Ngram { min_n: 1, max_n: 3 };
    let specs = [Speculation::Off, ngram, Speculation::Draft, ngram];
    let handles: Vec<_> = ps
        .iter()
        .zip(specs)
        .map(|(p, spec)| {
            sc.submit_channel(Request {
                prompt: Prompt::Ids(p.clone()),
                opts: GenerateOptions {
                    speculation: spec,
                    draft_max: 4,
                    ..greedy(n)
                },
            })
        })
        .collect();
    sc.run_until_idle();
    for (i, (h, spec)) in handles.into_iter().zip(specs).enumerate() {
        let (fin, _) = h.wait().unwrap();
        assert_eq!(fin.tokens, want[i], "request {i}: {spec:?}");
        assert_eq!(fin.reason, StopReason::MaxTokens);
        assert!(fin.usage.accepted <= fin.usage.drafted, "request {i}: {:?}", fin.usage);
        match spec {
            Speculation::Off => assert_eq!(fin.usage.drafted, 0),
            _ => assert!(fin.usage.drafted > 0, "request {i}: {spec:?} drafted nothing"),
        }
    }
    // Rejected drafts left no cells behind: the cells kept are each prompt and its reply but
    // the last token (the prompts share no prefix).
    let want_kept: usize = ps.iter().map(|p| p.len() + n - 1).sum();
    assert_eq!(sc.session().kv().used(), want_kept);
}

/// The engine keeps its conversation: a call whose prompt extends the last prompt and reply
/// evaluates only what it adds and answers as a fresh engine does; `reset` forgets it; a stop
/// from the callback ends generation at that token (drafts confirmed past it are not reported)
/// and keeps what was evaluated.
fn engine_next_turn_evaluates_only_what_it_adds() {
    use minfer::engine::Flow;

    let path = tiny_path("engine-turn", Arch::Llama);
    let p = [prompts()[0].clone(), prompts()[0].clone()].concat();
    let mut e = engine(&path, None);
    let g1 = e.generate(&p, &greedy(6), |_| Flow::Continue).unwrap();
    assert_eq!(g1.prompt_evaluated, p.len());
    let mut turn: Vec<u32> = p.iter().chain(&g1.tokens).copied().collect();
    turn.extend([11, 12, 13]);
    let g2 = e.generate(&turn, &greedy(5), |_| Flow::Continue).unwrap();
    // The cache holds the prompt and all but the last reply token (never evaluated).
    assert_eq!(g2.prompt_evaluated, turn.len() - (p.len() + 6 - 1));
    assert_eq!(g2.tokens, generate(&path, &turn, &greedy(5), None).tokens);
    e.reset();
    let g3 = e.generate(&turn, &greedy(5), |_| Flow::Continue).unwrap();
    assert_eq!((g3.prompt_evaluated, &g3.tokens), (turn.len(), &g2.tokens));

    let spec = GenerateOptions {
        speculation: Speculation::Ngram { min_n: 1, max_n: 3 },
        ..greedy(12)
    };
    let full = generate(&path, &p, &spec, None);
    let mut pieces = 0;
    let g4 = e
        .generate(&p, &spec, |_| {
            pieces += 1;
            if pieces == 3 {
                Flow::Stop
            } else {
                Flow::Continue
            }
        })
        .unwrap();
    assert_eq!(g4.stop_reason, StopReason::Callback);
    assert_eq!(pieces, 3, "the callback heard nothing after its stop");
    assert_eq!(g4.tokens, full.tokens[..3]);
    let mut next: Vec<u32> = p.iter().chain(&g4.tokens).copied().collect();
    next.push(40);
    let g5 = e.generate(&next, &greedy(2), |_| Flow::Continue).unwrap();
    assert!(
        g5.prompt_evaluated <= 2,
        "{} of {} evaluated",
        g5.prompt_evaluated,
        next.len()
    );
}

/// The desktop path: an engine turned into a scheduler on its own thread, three chat requests
/// submitted at once as messages; each greedy reply (tokens and text) is the engine's alone.
fn scheduler_thread_answers_chats_as_the_engine_alone() {
    use minfer::chat::ChatMessage;
    use minfer::engine::{Engine, Flow};

    let t = "scheduler_thread_answers_chats_as_the_engine_alone";
    let Some(path) = common::real_model(t, SMOL) else {
        return;
    };
    let sopts = SessionOptions {
        n_ctx: 1024,
        threads: Some(2),
        backend: BackendChoice::Cpu,
        ..SessionOptions::default()
    };
    let questions = [
        "What is the capital of France?",
        "Name three colours.",
        "Write a haiku about rain.",
    ];
    let opts = GenerateOptions {
        max_tokens: 24,
        sampler: SamplerConfig::greedy(),
        ..GenerateOptions::default()
    };
    let mut engine = Engine::load(&path, &sopts).unwrap();
    let mut want = Vec::new();
    for q in questions {
        let text = engine
            .apply_chat_template(&[ChatMessage::new("user", q)], true)
            .unwrap();
        let ids = engine.tokenize(&text, true, true).unwrap();
        engine.reset();
        want.push(engine.generate(&ids, &opts, |_| Flow::Continue).unwrap());
    }
    let sched = Scheduler::from_engine(engine, SchedulerOptions::default()).unwrap();
    let runner = sched.spawn();
    let handles: Vec<_> = questions
        .iter()
        .map(|q| {
            runner.submit(Request {
                prompt: Prompt::Messages(vec![ChatMessage::new("user", *q)]),
                opts: opts.clone(),
            })
        })
        .collect();
    for (h, w) in handles.into_iter().zip(&want) {
        let (fin, text) = h.wait().unwrap();
        assert_eq!(fin.tokens, w.tokens, "{:?}", w.text);
        assert_eq!(text, w.text);
        assert_eq!(fin.usage.prompt_tokens, w.prompt_tokens.len());
    }
    // A prompt that cannot fit is an error for that request alone.
    let h = runner.submit(Request {
        prompt: Prompt::Ids(vec![1; 2000]),
        opts: opts.clone(),
    });
    let e = h.wait().unwrap_err().to_string();
    assert!(e.contains("2000") && e.contains("1024"), "{e}");
}
