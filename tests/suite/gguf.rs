//! The GGUF container: writer ↔ reader round trips, split files, the real models' tensor tables
//! against gguf-py's dump, and a corpus of hostile files that must each give a clean error.

use std::path::Path;

use minfer::gguf::{GgufFile, GgufWriter, Value, ValueType};
use minfer::quant::QType;

use crate::common;

tests![
    writer_round_trip,
    split_file_reads_back_identical,
    hostile_headers_give_clean_errors,
    hostile_tensor_tables_give_clean_errors,
    truncation_at_every_offset_is_a_clean_error,
    real_models_match_the_gguf_py_summary,
    fuzz_regressions_fail_cleanly,
];

fn tiny_writer() -> GgufWriter {
    let mut w = GgufWriter::new();
    w.set("general.architecture", Value::String("llama".into()));
    w.set("general.name", Value::String("tiny".into()));
    w.set("llama.block_count", Value::U32(1));
    w.set(
        "tokenizer.ggml.tokens",
        Value::Array(
            ValueType::String,
            vec![Value::String("a".into()), Value::String("b".into())],
        ),
    );
    w.set(
        "nested",
        Value::Array(ValueType::Array, vec![Value::Array(ValueType::I8, vec![Value::I8(-3)])]),
    );
    w.set("f", Value::F64(0.25));
    let vals: Vec<f32> = (0..64 * 3).map(|i| (i as f32 * 0.37).sin()).collect();
    w.add_f32("a.weight", QType::Q4_0, &[64, 3], &vals).unwrap();
    w.add_f32("b.weight", QType::F16, &[64, 3], &vals).unwrap();
    w.add_f32("c.weight", QType::F32, &[7], &vals[..7]).unwrap();
    w.add_f32(
        "d.weight",
        QType::Q6K,
        &[256, 1],
        &(0..256).map(|i| i as f32 / 100.0).collect::<Vec<_>>(),
    )
    .unwrap();
    w
}

fn same_files(a: &GgufFile, b: &GgufFile) {
    let strip = |f: &GgufFile| -> Vec<(String, Value)> {
        f.metadata
            .iter()
            .filter(|(k, _)| !k.starts_with("split."))
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect()
    };
    assert_eq!(strip(a), strip(b));
    assert_eq!(a.tensors.len(), b.tensors.len());
    for t in &a.tensors {
        let u = b.tensor(&t.name).unwrap_or_else(|| panic!("{} missing", t.name));
        assert_eq!((t.qtype, &t.shape), (u.qtype, &u.shape), "{}", t.name);
        assert_eq!(t.bytes(), u.bytes(), "{}", t.name);
    }
}

fn writer_round_trip() {
    let w = tiny_writer();
    let f = GgufFile::from_bytes(w.to_bytes(), "tiny").unwrap();
    assert_eq!(f.architecture().unwrap(), "llama");
    assert_eq!(f.metadata.get("f"), Some(&Value::F64(0.25)));
    assert_eq!(f.metadata.get_u64("llama.block_count").unwrap(), Some(1));
    let a = f.tensor("a.weight").unwrap();
    assert_eq!(a.shape, vec![64, 3]);
    assert_eq!(a.bytes().len(), 3 * 2 * 18);
    // Dequantized Q4_0 is close to the input, f16 closer, f32 exact.
    let vals: Vec<f32> = (0..64 * 3).map(|i| (i as f32 * 0.37).sin()).collect();
    let q = a.to_f32().unwrap();
    assert!(q.iter().zip(&vals).all(|(a, b)| (a - b).abs() < 0.15));
    assert_eq!(f.tensor("c.weight").unwrap().to_f32().unwrap(), vals[..7].to_vec());
    for t in &f.tensors {
        assert_eq!(t.file_offset % 32, 0, "{} not aligned", t.name);
    }
}

fn split_file_reads_back_identical() {
    let dir = tempdir("split");
    let w = tiny_writer();
    let single = dir.join("tiny.gguf");
    w.write(&single).unwrap();
    let paths = w.write_split(&dir.join("tiny"), 3).unwrap();
    assert_eq!(paths.len(), 3);
    assert!(paths[0].ends_with("tiny-00001-of-00003.gguf"));
    let a = GgufFile::open(&single).unwrap();
    let b = GgufFile::open(&paths[0]).unwrap();
    assert_eq!(b.parts.len(), 3);
    same_files(&a, &b);
    // Opening any part opens the set.
    let c = GgufFile::open(&paths[2]).unwrap();
    same_files(&a, &c);
    // A missing part is an error naming it.
    std::fs::remove_file(&paths[1]).unwrap();
    let e = GgufFile::open(&paths[0])
        .err()
        .expect("missing part accepted")
        .to_string();
    assert!(e.contains("00002-of-00003") && e.contains("missing"), "{e}");
}

pub fn tempdir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("minfer-test-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

// --- hostile files -----------------------------------------------------------------------------

/// Raw header builder for hand-crafted (broken) files.
#[derive(Default)]
struct Raw(Vec<u8>);

impl Raw {
    fn header(version: u32, n_tensors: u64, n_kv: u64) -> Raw {
        let mut r = Raw::default();
        r.0.extend_from_slice(b"GGUF");
        r.u32(version).u64(n_tensors).u64(n_kv);
        r
    }
    fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn str(&mut self, s: &str) -> &mut Self {
        self.u64(s.len() as u64);
        self.0.extend_from_slice(s.as_bytes());
        self
    }
    fn kv_u32(&mut self, k: &str, v: u32) -> &mut Self {
        self.str(k).u32(4).u32(v)
    }
    fn tensor(&mut self, name: &str, dims: &[u64], ty: u32, off: u64) -> &mut Self {
        self.str(name).u32(dims.len() as u32);
        for &d in dims {
            self.u64(d);
        }
        self.u32(ty).u64(off)
    }
    fn pad_to(&mut self, align: usize) -> &mut Self {
        while !self.0.len().is_multiple_of(align) {
            self.0.push(0);
        }
        self
    }
    fn zeros(&mut self, n: usize) -> &mut Self {
        self.0.resize(self.0.len() + n, 0);
        self
    }
}

/// Parses `bytes` and expects an error whose message contains every one of `needles`.
fn expect_err(case: &str, bytes: Vec<u8>, needles: &[&str]) {
    let len = bytes.len();
    let r = std::panic::catch_unwind(|| GgufFile::from_bytes(bytes, case));
    let r = r.unwrap_or_else(|_| panic!("{case}: the parser panicked"));
    let msg = match r {
        Ok(_) => panic!("{case}: a hostile file ({len} bytes) was accepted"),
        Err(e) => e.to_string(),
    };
    for n in needles {
        assert!(msg.contains(n), "{case}: error {msg:?} does not mention {n:?}");
    }
}

fn hostile_headers_give_clean_errors() {
    let big = u64::MAX - 7;
    expect_err("empty", vec![], &["truncated", "magic"]);
    expect_err("bad magic", b"GGML\x03\0\0\0".to_vec(), &["bad magic"]);
    expect_err("version 1", Raw::header(1, 0, 0).0, &["version 1"]);
    expect_err("version 99", Raw::header(99, 0, 0).0, &["version 99"]);
    expect_err("big endian", Raw::header(3u32.swap_bytes(), 0, 0).0, &["big-endian"]);
    expect_err(
        "huge tensor count",
        Raw::header(3, big, 0).0,
        &["tensor count", &big.to_string()],
    );
    expect_err(
        "huge kv count",
        Raw::header(3, 0, big).0,
        &["metadata count", &big.to_string()],
    );
    let mut r = Raw::header(3, 0, 1);
    r.u64(big).zeros(16);
    expect_err("huge key length", r.0, &["metadata key length", "at byte 24"]);
    let mut r = Raw::header(3, 0, 1);
    r.str("k").u32(8).u64(big);
    expect_err("huge string", r.0, &["string length"]);
    let mut r = Raw::header(3, 0, 1);
    r.str("k").u32(9).u32(4).u64(big);
    expect_err("huge array", r.0, &["array length"]);
    let mut r2 = Raw::header(3, 0, 1);
    r2.str("k").u32(9);
    for _ in 0..100_000 {
        r2.u32(9).u64(1);
    }
    expect_err("nesting bomb", r2.0, &["nested deeper"]);
    let mut r = Raw::header(3, 0, 1);
    r.str("k").u32(13).u32(0);
    expect_err("unknown value type", r.0, &["unknown value type 13"]);
    let mut r = Raw::header(3, 0, 1);
    r.str("k").u32(7);
    r.0.push(2);
    expect_err("bool 2", r.0, &["bool value 2"]);
    let mut r = Raw::header(3, 0, 1);
    r.u64(2);
    r.0.extend_from_slice(&[0xff, 0xfe]);
    r.u32(4).u32(0);
    expect_err("invalid utf8", r.0, &["UTF-8"]);
    let mut r = Raw::header(3, 0, 2);
    r.kv_u32("a", 1).kv_u32("a", 2);
    expect_err("duplicate key", r.0, &["duplicate metadata key 'a'"]);
    let mut r = Raw::header(3, 0, 1);
    r.kv_u32("general.alignment", 3);
    expect_err("alignment 3", r.0, &["general.alignment 3"]);
    let mut r = Raw::header(3, 0, 1);
    r.kv_u32("general.alignment", 0);
    expect_err("alignment 0", r.0, &["general.alignment 0"]);
}

fn hostile_tensor_tables_give_clean_errors() {
    let one = |dims: &[u64], ty: u32, off: u64, data: usize| {
        let mut r = Raw::header(3, 1, 0);
        r.tensor("t", dims, ty, off).pad_to(32).zeros(data);
        r.0
    };
    expect_err("unknown qtype", one(&[32], 77, 0, 64), &["'t'", "ggml type id 77"]);
    expect_err("iq2_xxs unsupported", one(&[256], 16, 0, 256), &["ggml type id 16"]);
    expect_err("n_dims 0", one(&[], 0, 0, 0), &["n_dims 0"]);
    expect_err("n_dims 5", one(&[1, 1, 1, 1, 1], 0, 0, 4), &["n_dims 5"]);
    expect_err(
        "dims overflow",
        one(&[1 << 32, 1 << 32, 1 << 32], 0, 0, 0),
        &["overflows"],
    );
    expect_err("row not whole blocks", one(&[33, 2], 2, 0, 64), &["row length 33"]);
    expect_err("past the end", one(&[32], 0, 0, 100), &["'t'", "past the end"]);
    expect_err("offset past the end", one(&[8], 0, 1 << 40, 32), &["past the end"]);
    expect_err("misaligned", one(&[8], 0, 4, 64), &["not a multiple of the alignment"]);
    let mut r = Raw::header(3, 2, 0);
    r.tensor("a", &[16], 0, 0)
        .tensor("b", &[16], 0, 32)
        .pad_to(32)
        .zeros(128);
    expect_err("overlap", r.0, &["'a' and 'b' overlap"]);
    let mut r = Raw::header(3, 2, 0);
    r.tensor("a", &[8], 0, 0).tensor("a", &[8], 0, 32).pad_to(32).zeros(64);
    expect_err("duplicate tensor", r.0, &["duplicate tensor name 'a'"]);
}

/// Cutting a valid file anywhere — every header field, inside the data — is a clean error.
fn truncation_at_every_offset_is_a_clean_error() {
    let bytes = tiny_writer().to_bytes();
    let data_end = bytes.len();
    for cut in 0..data_end {
        let r = std::panic::catch_unwind(|| GgufFile::from_bytes(bytes[..cut].to_vec(), "cut"));
        match r {
            Err(_) => panic!("panic when cut at {cut}"),
            Ok(Ok(f)) => {
                // Only trailing padding after the last tensor may go missing harmlessly.
                let end = f
                    .tensors
                    .iter()
                    .map(|t| t.file_offset + t.data.len() as u64)
                    .max()
                    .unwrap_or(0);
                assert!(cut as u64 >= end, "cut at {cut} accepted though tensors end at {end}");
            }
            Ok(Err(_)) => {}
        }
    }
}

// --- the real models against gguf-py's dump -----------------------------------------------------

fn shape_pattern(name: &str) -> String {
    let mut parts: Vec<String> = name.split('.').map(str::to_string).collect();
    if parts.len() > 1 && parts[0] == "blk" && parts[1].parse::<u32>().is_ok() {
        parts[1] = "{N}".into();
    }
    parts.join(".")
}

fn check_against_summary(model: &Path, summary: &serde_json::Value) {
    let f = GgufFile::open(model).unwrap();
    assert_eq!(f.architecture().unwrap(), summary["architecture"].as_str().unwrap());
    assert_eq!(f.tensors.len() as u64, summary["n_tensors"].as_u64().unwrap());
    assert_eq!(f.file_bytes(), summary["size_bytes"].as_u64().unwrap());
    let mut counts = std::collections::BTreeMap::<String, u64>::new();
    for t in &f.tensors {
        *counts.entry(t.qtype.name().to_uppercase()).or_default() += 1;
    }
    let want: std::collections::BTreeMap<String, u64> = summary["tensor_types"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_u64().unwrap()))
        .collect();
    assert_eq!(counts, want);
    let patterns = summary["tensor_patterns"].as_object().unwrap();
    for t in &f.tensors {
        let p = &patterns[&shape_pattern(&t.name)];
        let shape: Vec<u64> = p["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_u64().unwrap())
            .collect();
        assert_eq!(t.shape, shape, "{}", t.name);
        let types = p["types"].as_object().unwrap();
        assert!(
            types.contains_key(&t.qtype.name().to_uppercase()),
            "{}: {}",
            t.name,
            t.qtype
        );
    }
    for (k, v) in summary["hparams"].as_object().unwrap() {
        let got = f
            .metadata
            .get(k)
            .unwrap_or_else(|| panic!("{k} missing"))
            .as_f64()
            .unwrap();
        assert!((got - v.as_f64().unwrap()).abs() <= 1e-9 * got.abs().max(1.0), "{k}");
    }
}

fn real_models_match_the_gguf_py_summary() {
    let Some(sum) = common::ref_file("real_models_match_the_gguf_py_summary", "gguf_summary_real.json") else {
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
        let Some(model) = common::real_model("real_models_match_the_gguf_py_summary", &file) else {
            continue;
        };
        check_against_summary(&model, entry);
    }
}

/// Inputs the fuzzer once found trouble with (`fuzz/regressions/`): each must now load or
/// fail quickly with an error — never panic, hang, or allocate for a count the file can't back.
fn fuzz_regressions_fail_cleanly() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/regressions/gguf_header");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let t = std::time::Instant::now();
        let bytes = std::fs::read(&path).unwrap();
        let r = std::panic::catch_unwind(|| {
            GgufFile::from_bytes(bytes, "regression").and_then(|f| minfer::Model::from_gguf(f, "regression".into()))
        });
        assert!(r.is_ok(), "{}: panicked", path.display());
        assert!(
            t.elapsed().as_secs_f64() < 2.0,
            "{}: took {:?}",
            path.display(),
            t.elapsed()
        );
        n += 1;
    }
    assert!(n > 0, "no regression inputs in {}", dir.display());
}
