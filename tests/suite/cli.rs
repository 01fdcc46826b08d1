//! The binary as users run it: `info --json` against gguf-py's dump, `tokenize`, greedy `run`,
//! `chat` over a pipe, and bad input — each a clear message and a non-zero exit, never a panic.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use crate::common;

tests![
    info_json_matches_the_gguf_py_summary,
    tokenize_prints_llama_cpp_ids,
    greedy_run_matches_llama_cpp_on_every_isa,
    chat_over_a_pipe_answers_and_resets,
    chat_at_a_terminal_edits_lines_and_recalls_history,
    bad_input_is_a_clear_error,
    trace_holds_one_node_against_the_first_backend,
    logits_out_holds_against_a_recorded_reference,
    bench_sweeps_depths_and_profiles_the_cpu,
    llama_style_negative_numbers_parse,
    gemma4_runs_from_a_text_prompt,
    default_model_is_found_from_any_directory,
];

const SMOL: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

fn bin() -> Command {
    let mut c = Command::new(crate::common::exe());
    c.env_remove("MINFER_MODEL")
        .env_remove("MINFER_CACHE_TYPE")
        .env_remove("MINFER_CPU_ISA");
    c
}

fn run(mut c: Command, stdin: Option<&[u8]>) -> Output {
    c.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = c.spawn().expect("spawn minfer-wgpu");
    if let Some(input) = stdin {
        child.stdin.take().unwrap().write_all(input).unwrap();
    } else {
        drop(child.stdin.take());
    }
    child.wait_with_output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).to_string()
}

/// A failure: non-zero exit, an `error:` line naming `needle`, and no panic.
fn expect_failure(o: &Output, needle: &str) {
    let e = stderr(o);
    assert!(!o.status.success(), "succeeded; stderr: {e}");
    assert!(!e.contains("panicked"), "panicked: {e}");
    assert!(e.contains(needle), "stderr does not mention {needle:?}: {e}");
}

fn info_json_matches_the_gguf_py_summary() {
    let t = "info_json_matches_the_gguf_py_summary";
    let Some(sum) = common::ref_file(t, "gguf_summary_real.json") else {
        return;
    };
    let sum = common::read_json(&sum);
    for entry in sum.as_array().unwrap() {
        let file = Path::new(entry["file"].as_str().unwrap())
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .to_string();
        let Some(model) = common::real_model(t, &file) else {
            return;
        };
        let mut c = bin();
        c.args(["info", "--json"]).arg(&model);
        let o = run(c, None);
        assert!(o.status.success(), "{}", stderr(&o));
        let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(j["architecture"], entry["architecture"]);
        assert_eq!(j["file_bytes"], entry["size_bytes"]);
        assert_eq!(j["backends"]["cpu"]["ok"], true);
        let tensors = j["tensors"].as_array().unwrap();
        assert_eq!(tensors.len() as u64, entry["n_tensors"].as_u64().unwrap());
        let mut counts = std::collections::BTreeMap::<String, u64>::new();
        for t in tensors {
            *counts.entry(t["qtype"].as_str().unwrap().to_uppercase()).or_default() += 1;
            let name = t["name"].as_str().unwrap();
            let mut parts: Vec<&str> = name.split('.').collect();
            if parts.len() > 1 && parts[0] == "blk" {
                parts[1] = "{N}";
            }
            let pat = &entry["tensor_patterns"][parts.join(".")];
            assert_eq!(t["shape"], pat["shape"], "{name}");
        }
        let want: std::collections::BTreeMap<String, u64> = entry["tensor_types"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), v.as_u64().unwrap()))
            .collect();
        assert_eq!(counts, want, "{file}");
        // Tokenizer arrays are summarised by length, the rest of the metadata is whole.
        assert_eq!(j["metadata"]["tokenizer.ggml.tokens"]["len"], entry["vocab_size"]);
        assert_eq!(j["metadata"]["general.architecture"], entry["architecture"]);
    }
}

fn tokenize_prints_llama_cpp_ids() {
    let Some(model) = common::real_model("tokenize_prints_llama_cpp_ids", SMOL) else {
        return;
    };
    let cases = common::read_json(&common::data_dir().join("tokenize/smollm2.tokenize.json"));
    for case in cases["cases"].as_array().unwrap().iter().take(8) {
        let text = case["text"].as_str().unwrap();
        let mut c = bin();
        c.args(["tokenize", "--json"]).arg(&model).arg("--").arg(text);
        let o = run(c, None);
        assert!(o.status.success(), "{}", stderr(&o));
        let ids: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(ids, case["ids"], "{text:?}");
    }
}

/// `run --raw --temp 0` gives llama.cpp's greedy tokens for the raw prompt, on the default
/// kernels and on the scalar fallback forced by `MINFER_CPU_ISA`.
fn greedy_run_matches_llama_cpp_on_every_isa() {
    let t = "greedy_run_matches_llama_cpp_on_every_isa";
    let Some(model) = common::real_model(t, SMOL) else {
        return;
    };
    let r = common::read_json(&common::data_dir().join("tokenize/real_prompts.json"));
    let case = r["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["case"] == "smollm2.p1_capital")
        .expect("p1 case")
        .clone();
    let want: Vec<u64> = case["greedy_ids"]
        .as_array()
        .unwrap()
        .iter()
        .take(8)
        .map(|v| v.as_u64().unwrap())
        .collect();
    for isa in [None, Some("scalar")] {
        let mut c = bin();
        c.args([
            "run",
            "--raw",
            "--temp",
            "0",
            "-n",
            "8",
            "--json",
            "--cache-type",
            "f16",
            "-t",
            "2",
        ])
        .arg(&model);
        c.arg(case["prompt_text"].as_str().unwrap());
        if let Some(isa) = isa {
            c.env("MINFER_CPU_ISA", isa);
        }
        let o = run(c, None);
        assert!(o.status.success(), "{isa:?}: {}", stderr(&o));
        let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let got: Vec<u64> = j["tokens"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect();
        assert_eq!(got, want, "{isa:?}");
        assert_eq!(j["prompt_tokens"], case["prompt_ids"]);
        if isa.is_some() {
            assert!(
                stderr(&o).contains("scalar"),
                "the log does not say the scalar kernels ran"
            );
        }
    }
}

fn chat_over_a_pipe_answers_and_resets() {
    let Some(model) = common::real_model("chat_over_a_pipe_answers_and_resets", SMOL) else {
        return;
    };
    let mut c = bin();
    c.args(["chat", "--temp", "0", "-n", "24"]).arg(&model);
    let o = run(
        c,
        Some(b"What is the capital of France? Answer in one sentence.\n/reset\n/exit\n"),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8(o.stdout.clone()).unwrap();
    assert!(out.contains("Paris"), "{out}");
    assert!(stderr(&o).contains("conversation reset"), "{}", stderr(&o));
}

/// `chat` at a terminal (a pseudo-terminal that `tests/python/chat_pty.py` types into): Left
/// arrows move into the line ("ello" becomes "Hello"), Up recalls it to be extended ("Hello
/// again"), Ctrl-C drops the line being typed, Ctrl-D leaves with status 0; the history file
/// in the user's data directory holds the two lines sent, and only them.
fn chat_at_a_terminal_edits_lines_and_recalls_history() {
    let t = "chat_at_a_terminal_edits_lines_and_recalls_history";
    let Some(model) = common::real_model(t, SMOL) else {
        return;
    };
    if !common::python_with(t, "pty", "python3's own, on Unix") {
        return;
    }
    let data = crate::gguf::tempdir("cli-chat-pty");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/chat_pty.py");
    let o = Command::new("python3")
        .arg(&script)
        .arg(common::exe())
        .arg(&model)
        .arg(&data)
        .env_remove("MINFER_MODEL")
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "chat's exit: {:?}\n{shown}\n{}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    let history =
        std::fs::read_to_string(data.join("minfer/chat_history")).unwrap_or_else(|e| panic!("history: {e}\n{shown}"));
    let lines: Vec<&str> = history.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(lines, ["Hello", "Hello again"], "{history:?}\n{shown}");
}

fn bad_input_is_a_clear_error() {
    let t = "bad_input_is_a_clear_error";
    let dir = crate::gguf::tempdir("cli-bad");
    // A missing model names the path; with none given, the error names the fetch command.
    let mut c = bin();
    c.args(["run", "/nonexistent/model.gguf", "hi"]);
    expect_failure(&run(c, None), "not found");
    let mut c = bin();
    c.current_dir(&dir)
        .env("HOME", &dir)
        .env_remove("XDG_CACHE_HOME")
        .env_remove("MINFER_MODELS_DIR");
    c.args(["run", "hello"]);
    expect_failure(&run(c, None), "scripts/fetch-models");
    // Not a GGUF file at all.
    let junk = dir.join("junk.gguf");
    std::fs::write(&junk, b"definitely not a model").unwrap();
    let mut c = bin();
    c.arg("info").arg(&junk);
    expect_failure(&run(c, None), "bad magic");

    let Some(model) = common::real_model(t, SMOL) else {
        return;
    };
    for (args, needle) in [
        (vec!["--cache-type", "q9_9"], "q9_9"),
        (vec!["--backend", "tpu"], "tpu"),
        (vec!["--temp", "nan"], "temperature"),
        (vec!["-n", "-5"], "'-5' is not a token count"),
        (vec!["--seed", "-2"], "'-2' is not a seed"),
        (vec!["--top-p", "1.5"], "top_p"),
        (vec!["-t", "0"], "thread count 0"),
    ] {
        let mut c = bin();
        c.arg("run").args(&args).arg(&model).arg("hi");
        expect_failure(&run(c, None), needle);
    }
    // Contexts: past the limit, past the memory (f32 K and V of 30 layers × 384 × 2^20
    // positions: 48 GB), and past the training length (a warning).
    let mut c = bin();
    c.args(["run", "-c", "100000000"]).arg(&model).arg("hi");
    expect_failure(&run(c, None), "over the limit of 1048576");
    let avail = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| {
        m.lines()
            .find_map(|l| l.strip_prefix("MemAvailable:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
    });
    if avail.is_some_and(|kb| kb * 1024 < 48_000_000_000) {
        let mut c = bin();
        c.args(["run", "--cache-type", "f32", "-c", "1048576"])
            .arg(&model)
            .arg("hi");
        expect_failure(&run(c, None), "GB of memory is available");
    }
    let mut c = bin();
    c.args(["run", "--raw", "-n", "1", "-c", "16384"]).arg(&model).arg("hi");
    let o = run(c, None);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("beyond the 8192"), "{}", stderr(&o));
    // A prompt longer than the context.
    let mut c = bin();
    c.args(["run", "--raw", "-c", "16"]).arg(&model).arg("word ".repeat(40));
    expect_failure(&run(c, None), "context");
    // Invalid UTF-8 on stdin.
    let mut c = bin();
    c.arg("run").arg(&model);
    expect_failure(&run(c, Some(b"caf\xe9 au lait")), "not valid UTF-8");
    // A chat template error.
    let tpl = dir.join("bad.jinja");
    std::fs::write(&tpl, "{{ raise_exception('no system role') }}").unwrap();
    let mut c = bin();
    c.arg("run").arg("--chat-template-file").arg(&tpl).arg(&model).arg("hi");
    expect_failure(&run(c, None), "no system role");
}

/// `trace MODEL NODE PROMPT --backend cpu,cpu --json`: the node's shape, identical values on the
/// two CPU sessions (NMSE 0); an unknown node is an error naming it.
fn trace_holds_one_node_against_the_first_backend() {
    let t = "trace_holds_one_node_against_the_first_backend";
    let Some(model) = common::real_model(t, SMOL) else {
        return;
    };
    let mut c = bin();
    c.args(["trace"]).arg(&model).args([
        "blk.3.ffn_out",
        "The capital of France is",
        "--backend",
        "cpu,cpu",
        "--json",
    ]);
    let o = run(c, None);
    assert!(o.status.success(), "{}", stderr(&o));
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    for j in &lines {
        assert_eq!(
            (j["node"].as_str(), j["rows"].as_u64(), j["width"].as_u64()),
            (Some("blk.3.ffn_out"), Some(5), Some(576))
        );
        assert_eq!(j["values"].as_array().unwrap().len(), 5 * 576);
        assert_eq!(j["nmse_vs_first"].as_f64(), Some(0.0));
    }
    let mut c = bin();
    c.args(["trace"])
        .arg(&model)
        .args(["blk.3.nope", "Hi", "--backend", "cpu"]);
    expect_failure(&run(c, None), "blk.3.nope");
}

/// `run --prompt-ids … --logits-out F.npy -n 0` writes every prompt position's logits, which
/// hold against transformers' recording for the same ids; bad ids are clear errors.
fn logits_out_holds_against_a_recorded_reference() {
    let t = "logits_out_holds_against_a_recorded_reference";
    let Some(root) = common::ref_dir(t) else {
        return;
    };
    let hf = common::read_json(&root.join("random/refs/qwen3moe.hf-fp32.json"));
    let prompt = crate::model::ids(&hf["prompt_ids"]);
    let ids: Vec<String> = prompt.iter().map(|i| i.to_string()).collect();
    let gguf = root.join("random/gguf/qwen3moe-f32.gguf");
    let dir = crate::gguf::tempdir("cli-logits-out");
    let out = dir.join("logits.npy");
    let mut c = bin();
    c.arg("run")
        .arg(&gguf)
        .args([
            "--prompt-ids",
            &ids.join(","),
            "-n",
            "0",
            "--backend",
            "cpu",
            "--cache-type",
            "f16",
        ])
        .arg("--logits-out")
        .arg(&out);
    let o = run(c, None);
    assert!(o.status.success(), "{}", stderr(&o));
    let raw = std::fs::read(&out).unwrap();
    let header = String::from_utf8_lossy(&raw[10..128.min(raw.len())]).to_string();
    assert!(
        header.contains(&format!("'shape': ({}, 1024)", prompt.len())),
        "{header}"
    );
    assert_eq!(
        (10 + u16::from_le_bytes([raw[8], raw[9]]) as usize) % 64,
        0,
        "header not 64-aligned"
    );
    let got = common::read_npy_f32(&out);
    let want = common::read_npy_f32(&root.join("random/refs/qwen3moe.hf-fp32.all_logits.npy"));
    assert_eq!(got.len(), prompt.len() * 1024);
    let (maxd, _) = crate::model::diff(&got, &want);
    assert!(maxd <= 5e-3, "max |Δ| {maxd} against transformers");
    for (bad, needle) in [("1,x,3", "'x' is not a token id"), ("1,5000", "token id 5000")] {
        let mut c = bin();
        c.arg("run").arg(&gguf).args(["--prompt-ids", bad, "-n", "0"]);
        expect_failure(&run(c, None), needle);
    }
    let mut c = bin();
    c.arg("run").arg(&gguf).args(["hello", "--prompt-ids", "1,2"]);
    expect_failure(&run(c, None), "not both");
}

/// `bench -d`: one llama-bench record per test × depth (`n_depth`), every one timed; the CPU
/// profile on stderr with its weight column; a depth past the model's context refused by value.
fn bench_sweeps_depths_and_profiles_the_cpu() {
    let t = "bench_sweeps_depths_and_profiles_the_cpu";
    let Some(root) = common::ref_dir(t) else {
        return;
    };
    let Some(model) = common::random_gguf(t, &root, "qwen3moe-Q4_K_M") else {
        return;
    };
    let mut c = bin();
    c.arg("bench").arg(&model);
    c.args([
        "-p",
        "16",
        "-n",
        "4",
        "-r",
        "2",
        "-t",
        "2",
        "-d",
        "0,40",
        "--json",
        "--profile",
    ]);
    let out = run(c, None);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "bench failed: {stderr}");
    let records: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let records = records.as_array().unwrap();
    let tests: Vec<(u64, u64, u64)> = records
        .iter()
        .map(|r| {
            assert!(r["avg_ts"].as_f64().unwrap() > 0.0, "{r}");
            assert_eq!(r["samples_ns"].as_array().unwrap().len(), 2, "{r}");
            (
                r["n_prompt"].as_u64().unwrap(),
                r["n_gen"].as_u64().unwrap(),
                r["n_depth"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(tests, [(16, 0, 0), (0, 4, 0), (16, 0, 40), (0, 4, 40)]);
    // Each record carries the profile of its own timed steps: a decode record's 2 runs of 4
    // tokens, a prompt record's 2 runs of one 16-token step (not the depth's context before
    // them): per op launches and µs, shares summing to 1.
    for r in records {
        let p = &r["profile"];
        if r["n_gen"] == 0 {
            assert_eq!((p["steps"].as_u64(), p["tokens"].as_u64()), (Some(2), Some(32)), "{r}");
            let us: f64 = p["ops"]
                .as_array()
                .unwrap()
                .iter()
                .map(|o| o["us_per_step"].as_f64().unwrap())
                .sum();
            assert!(
                (us - p["us_per_step"].as_f64().unwrap()).abs() < 1e-6 * us && us > 0.0,
                "{p}"
            );
            let attn = p["ops"]
                .as_array()
                .unwrap()
                .iter()
                .find(|o| o["op"] == "attention")
                .expect("attention timed");
            assert_eq!(attn["calls_per_step"].as_f64(), Some(2.0), "{p}: one per layer");
            continue;
        }
        assert_eq!((p["steps"].as_u64(), p["tokens"].as_u64()), (Some(8), Some(8)), "{p}");
        let ops = p["ops"].as_array().unwrap();
        let share: f64 = ops.iter().map(|o| o["share"].as_f64().unwrap()).sum();
        assert!((share - 1.0).abs() < 1e-9, "{p}");
        let us: f64 = ops.iter().map(|o| o["us_per_token"].as_f64().unwrap()).sum();
        assert!(
            (us - p["us_per_token"].as_f64().unwrap()).abs() < 1e-6 * us && us > 0.0,
            "{p}"
        );
        let attn = ops.iter().find(|o| o["op"] == "attention").expect("attention timed");
        assert_eq!(attn["calls_per_token"].as_f64(), Some(2.0), "{p}: one per layer");
    }
    for needle in [
        "cpu profile",
        "decode steps (1 token)",
        "batched steps",
        "weights KiB/tok",
        "matmul_id/q4_K",
    ] {
        assert!(stderr.contains(needle), "no '{needle}' in the profile:\n{stderr}");
    }
    // Every record says which attention numerics it timed; `--fa` is llama-bench's `-fa 1`.
    assert!(records.iter().all(|r| r["flash_attn"] == false), "{records:?}");
    let mut c = bin();
    c.arg("bench")
        .arg(&model)
        .args(["-p", "80", "-n", "0", "-r", "1", "--fa", "--json"]);
    let out = run(c, None);
    assert!(
        out.status.success(),
        "bench --fa failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let fa: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(fa[0]["flash_attn"], true, "{fa}");
    assert!(fa[0]["avg_ts"].as_f64().unwrap() > 0.0, "{fa}");
    let mut c = bin();
    c.arg("bench")
        .arg(&model)
        .args(["-p", "16", "-n", "0", "-r", "1", "-d", "600"]);
    expect_failure(&run(c, None), "-d 600");
}

/// llama.cpp's negative flags: `-n -1` generates until the context is full, `--temp -1` is
/// greedy, `--seed -1` a random seed.
fn llama_style_negative_numbers_parse() {
    let t = "llama_style_negative_numbers_parse";
    let Some(model) = common::real_model(t, SMOL) else {
        return;
    };
    let mut c = bin();
    c.args([
        "run",
        "--raw",
        "--json",
        "--ignore-eos",
        "-c",
        "40",
        "-n",
        "-1",
        "--temp",
        "-1",
        "--seed",
        "-1",
    ])
    .arg(&model)
    .arg("The capital of France is");
    let o = run(c, None);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let (prompt, gen) = (
        v["prompt_tokens"].as_array().unwrap().len(),
        v["tokens"].as_array().unwrap().len(),
    );
    // Until every one of the 40 cells holds a token; the last token generated is sampled from
    // the full context's logits and needs no cell.
    assert_eq!(prompt + gen, 41, "generated until the context of 40 was full: {v}");
    // Greedy: the same as --temp 0.
    let mut c = bin();
    c.args(["run", "--raw", "--json", "-n", "6", "--temp", "-1"])
        .arg(&model)
        .arg("The capital of France is");
    let a: serde_json::Value = serde_json::from_slice(&run(c, None).stdout).unwrap();
    let mut c = bin();
    c.args(["run", "--raw", "--json", "-n", "6", "--temp", "0"])
        .arg(&model)
        .arg("The capital of France is");
    let b: serde_json::Value = serde_json::from_slice(&run(c, None).stdout).unwrap();
    assert_eq!(a["tokens"], b["tokens"]);
}

/// A Gemma 4 GGUF takes text: `run --raw` on the random gemma4 file tokenizes the prompt as
/// llama-tokenize does and generates.
fn gemma4_runs_from_a_text_prompt() {
    let t = "gemma4_runs_from_a_text_prompt";
    let Some(model) = common::ref_file(t, "random/gguf/gemma4-f32.gguf") else {
        return;
    };
    let refs = common::read_json(&common::data_dir().join("tokenize/gemma4-random.tokenize.json"));
    let case = refs["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["text"] == "Hello world")
        .unwrap()
        .clone();
    let mut c = bin();
    c.args(["run", "--raw", "--json", "-n", "4", "--temp", "0"])
        .arg(&model)
        .arg("Hello world");
    let o = run(c, None);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["prompt_tokens"], case["ids"], "{v}");
    assert_eq!(v["tokens"].as_array().unwrap().len(), 4, "{v}");
}

/// `scripts/fetch-models` and the binary share one user-level models directory
/// (`$XDG_CACHE_HOME/minfer/models` here): from a directory that is not the checkout, the
/// fetcher finds the default model there and `run` with no model runs it.
fn default_model_is_found_from_any_directory() {
    let t = "default_model_is_found_from_any_directory";
    let Some(model) = common::real_model(t, SMOL) else {
        return;
    };
    let dir = crate::gguf::tempdir("cli-models-home");
    let cache = dir.join("cache");
    let models = cache.join("minfer").join("models");
    std::fs::create_dir_all(&models).unwrap();
    std::os::unix::fs::symlink(&model, models.join(SMOL)).unwrap();
    let fetch = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/fetch-models");
    let o = Command::new(&fetch)
        .arg("smollm2")
        .current_dir(&dir)
        .env("XDG_CACHE_HOME", &cache)
        .env_remove("MINFER_MODELS_DIR")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{said}{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        said.contains(&format!("{} already present", models.join(SMOL).display())),
        "{said}"
    );
    let mut c = bin();
    c.current_dir(&dir)
        .env("XDG_CACHE_HOME", &cache)
        .env_remove("MINFER_MODELS_DIR")
        .args(["run", "--raw", "-n", "2", "--temp", "0", "The capital of France is"]);
    let o = run(c, None);
    assert!(o.status.success(), "{}", stderr(&o));
    let _ = std::fs::remove_dir_all(&dir);
}
