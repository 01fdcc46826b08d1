//! The crate's modules import one another without a cycle. The graph is made of the `crate::X`
//! paths among the top-level modules (each `src/X.rs` and `src/X/`; `super::` stays inside a
//! module); a path that closes a loop fails the test, which names each edge of the loop and the
//! files that make it.
//!
//! The layers as they stand, each module importing only from layers below it:
//!
//! ```text
//! 11  testing                       internals the binary, the suite and the benches reach
//! 10  engine                        the one-conversation API, a face over the scheduler
//!  9  sched                         continuous batching over a session: every decode loop
//!  8  spec, embed, perplexity       drafts, embeddings, perplexity: each over a session
//!  7  session                       a model on a backend, its KV pool and graph cache
//!  6  overrides, load, sampling     MINFER_* parsed; MODEL opened; samplers and shaping
//!  5  backend, hf, constrain        the backends and gate; HF directories; constrained output
//!  4  model, tokenizer, quantize    architectures and graphs; tokenizers; GGUF → GGUF
//!  3  gguf                          the container
//!  2  tensor                        a named, typed window into the file
//!  1  quant, env, kv, chat          the qtype table; the environment; KV cells; templates
//!  0  error, logits, toolcall       the error type; the greedy pick; tool-call parsing
//! ```
//!
//! `cli` belongs to the binary and reaches the library by name (`minfer::…`), so it has no edge
//! here. Among the loaders the edges are fixed further (`load.rs`'s header).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// This file's own module: its fixtures spell crate paths that import nothing.
const SELF: &str = "module_graph_tests";

/// `(from, to)` → the files (relative to `src/`) whose code names `crate::to`.
type Edges = BTreeMap<(String, String), BTreeSet<String>>;

/// The top-level crate modules named by `crate::…` paths in `code` (comments dropped; each
/// item of a `crate::{a::…, b}` group counts; `$crate::` in a macro counts too).
fn crate_refs(code: &str) -> BTreeSet<String> {
    let code: String = code
        .lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n");
    let is_ident = |c: char| c.is_alphanumeric() || c == '_';
    let ident = |s: &str| -> String { s.chars().take_while(|&c| is_ident(c)).collect() };
    let mut out = BTreeSet::new();
    let mut rest = code.as_str();
    while let Some(i) = rest.find("crate::") {
        // `some_crate::` is another crate's path.
        let part_of_name = rest[..i].chars().next_back().is_some_and(is_ident);
        rest = &rest[i + "crate::".len()..];
        if part_of_name {
            continue;
        }
        let Some(group) = rest.strip_prefix('{') else {
            out.insert(ident(rest));
            continue;
        };
        // The first identifier of each item at the group's top level.
        let (mut depth, mut start) = (0, true);
        for (j, c) in group.char_indices() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => break,
                '}' => depth -= 1,
                ',' if depth == 0 => start = true,
                c if start && depth == 0 && !c.is_whitespace() => {
                    out.insert(ident(&group[j..]));
                    start = false;
                }
                _ => {}
            }
        }
    }
    out.retain(|m| !m.is_empty());
    out
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Every top-level module of `src/` with its files (`main.rs` and `lib.rs` are the crates'
/// roots, not modules).
fn modules(src: &Path) -> BTreeMap<String, Vec<PathBuf>> {
    let mut out: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    for e in std::fs::read_dir(src).unwrap() {
        let p = e.unwrap().path();
        let Some(stem) = p.file_stem().and_then(|s| s.to_str()).map(str::to_string) else {
            continue;
        };
        if p.is_dir() {
            rust_files(&p, out.entry(stem).or_default());
        } else if p.extension().is_some_and(|x| x == "rs") && !["main", "lib", SELF].contains(&stem.as_str()) {
            out.entry(stem).or_default().push(p);
        }
    }
    out
}

/// The edges among `modules`, each with the files that make it.
fn edges(src: &Path, modules: &BTreeMap<String, Vec<PathBuf>>) -> Edges {
    let mut edges = Edges::new();
    for (from, files) in modules {
        for f in files {
            let code = std::fs::read_to_string(f).unwrap();
            for to in crate_refs(&code) {
                if to != *from && modules.contains_key(&to) {
                    let file = f.strip_prefix(src).unwrap_or(f).display().to_string();
                    edges.entry((from.clone(), to)).or_default().insert(file);
                }
            }
        }
    }
    edges
}

/// A cycle of `edges` as its modules in order (the last imports the first), if there is one.
fn find_cycle(edges: &Edges) -> Option<Vec<String>> {
    let mut next: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (from, to) in edges.keys() {
        next.entry(from).or_default().push(to);
    }
    /// Depth first from `m`; `path` is the walk from the root, `done` the modules whose every
    /// import was explored without a loop.
    fn walk<'a>(
        m: &'a str,
        next: &BTreeMap<&'a str, Vec<&'a str>>,
        path: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|&p| p == m) {
            return Some(path[i..].iter().map(|s| s.to_string()).collect());
        }
        if done.contains(m) {
            return None;
        }
        path.push(m);
        for &to in next.get(m).into_iter().flatten() {
            if let Some(cycle) = walk(to, next, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(m);
        None
    }
    let mut done = BTreeSet::new();
    next.keys().find_map(|&m| walk(m, &next, &mut Vec::new(), &mut done))
}

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn crate_refs_reads_paths_and_groups() {
    let code = "use crate::error::{Error, Result};\nuse crate::{\n    gguf::{Metadata, Value},\n    model,\n};\n\
                let t = crate::tokenizer::Tokenizer::from_gguf(md); // crate::hf in a comment\n\
                /// [`crate::load`]\n\
                $crate::quant::QType::Q4K; minijinja_crate::value\n";
    let got: Vec<String> = crate_refs(code).into_iter().collect();
    assert_eq!(got, ["error", "gguf", "model", "quant", "tokenizer"]);
}

#[test]
fn find_cycle_names_the_loop() {
    let edges = |pairs: &[(&str, &str)]| -> Edges {
        pairs
            .iter()
            .map(|(a, b)| ((a.to_string(), b.to_string()), BTreeSet::new()))
            .collect()
    };
    assert_eq!(find_cycle(&edges(&[("a", "b"), ("b", "c"), ("a", "c")])), None);
    let cycle = find_cycle(&edges(&[("a", "b"), ("b", "c"), ("c", "b"), ("c", "d")]));
    assert_eq!(cycle, Some(vec!["b".to_string(), "c".to_string()]));
}

/// The whole crate's import graph has no cycle.
#[test]
fn module_graph_has_no_cycle() {
    let src = src_dir();
    let modules = modules(&src);
    for m in ["error", "backend", "engine", "sched"] {
        assert!(modules.contains_key(m), "no source for module {m}");
    }
    let edges = edges(&src, &modules);
    if let Some(cycle) = find_cycle(&edges) {
        let steps: Vec<String> = cycle
            .iter()
            .zip(cycle.iter().cycle().skip(1))
            .map(|(from, to)| {
                let files = &edges[&(from.clone(), to.clone())];
                format!(
                    "{from} → {to} ({})",
                    files.iter().cloned().collect::<Vec<_>>().join(", ")
                )
            })
            .collect();
        panic!("import cycle:\n  {}", steps.join("\n  "));
    }
}

/// The loaders whose imports must stay acyclic, and the edges allowed among them (the graph in
/// `load.rs`'s header).
const LOADERS: [&str; 4] = ["load", "hf", "model", "tokenizer"];
const LOADER_EDGES: [(&str, &str); 5] = [
    ("load", "hf"),
    ("load", "model"),
    ("load", "tokenizer"),
    ("hf", "model"),
    ("hf", "tokenizer"),
];

/// The import graph among the loaders has only the edges `load.rs`'s header draws, so no cycle.
#[test]
fn loaders_import_graph_has_no_cycle() {
    let src = src_dir();
    let modules = modules(&src);
    for m in LOADERS {
        assert!(modules.contains_key(m), "no source for module {m}");
    }
    let bad: Vec<String> = edges(&src, &modules)
        .iter()
        .filter(|((from, to), _)| LOADERS.contains(&from.as_str()) && LOADERS.contains(&to.as_str()))
        .filter(|((from, to), _)| !LOADER_EDGES.iter().any(|(a, b)| a == from && b == to))
        .flat_map(|((from, to), files)| files.iter().map(move |file| format!("{from} → {to} ({file})")))
        .collect();
    assert!(bad.is_empty(), "imports outside the allowed graph: {bad:?}");

    // The allowed graph itself is acyclic: repeatedly drop modules nothing allowed imports.
    let mut left: Vec<&str> = LOADERS.to_vec();
    while let Some(i) = left
        .iter()
        .position(|m| !LOADER_EDGES.iter().any(|(a, b)| b == m && left.contains(a)))
    {
        left.remove(i);
    }
    assert!(left.is_empty(), "cycle among {left:?}");
}
