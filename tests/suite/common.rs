//! Where test fixtures live, and the rule for absent ones: a test whose data is missing returns
//! early and is counted as ignored, with the reason — except in CI (`CI=true`), where missing
//! references or models are a failure.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// `tests/data` in this checkout: small fixtures that always travel with the code.
pub fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data")
}

/// The `minfer-wgpu` binary: `$MINFER_BIN` where set (a suite carried away from the tree it
/// was built in, as the GPU kit does), else the one cargo built beside this suite.
pub fn exe() -> PathBuf {
    std::env::var_os("MINFER_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_minfer-wgpu")))
}

fn in_ci() -> bool {
    std::env::var("CI").map(|v| v == "true" || v == "1").unwrap_or(false)
}

/// Prints the skip and marks the running test ignored with `why` (or panics in CI); returns
/// `None`. The test is ignored even if it ran in part (say, one real model of two present).
pub fn skip<T>(test: &str, why: &str) -> Option<T> {
    if in_ci() {
        panic!("{test}: required in CI but missing: {why}");
    }
    eprintln!("skipped: {test}: {why}");
    crate::harness::note_skip(why);
    None
}

/// Whether `python3` is here and imports `modules` (a comma-separated list); else a skip saying
/// what to install.
pub fn python_with(test: &str, modules: &str, install: &str) -> bool {
    let ok = std::process::Command::new("python3")
        .args(["-c", &format!("import {modules}")])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        skip::<()>(test, &format!("python3 with {modules} is needed ({install})"));
    }
    ok
}

/// The llama.cpp reference tree (`$MINFER_REF_DIR`), or a skip.
pub fn ref_dir(test: &str) -> Option<PathBuf> {
    match std::env::var_os("MINFER_REF_DIR") {
        Some(d) if Path::new(&d).is_dir() => Some(PathBuf::from(d)),
        Some(d) => skip(
            test,
            &format!("MINFER_REF_DIR={} is not a directory", Path::new(&d).display()),
        ),
        None => skip(test, "MINFER_REF_DIR is not set"),
    }
}

/// A file under `$MINFER_REF_DIR`, or a skip.
pub fn ref_file(test: &str, rel: &str) -> Option<PathBuf> {
    let p = ref_dir(test)?.join(rel);
    if p.is_file() {
        Some(p)
    } else {
        skip(test, &format!("{} is missing", p.display()))
    }
}

/// Where `scripts/fetch-models` puts models (`$MINFER_MODELS_DIR`, else the user's
/// `~/.cache/minfer/models`), then this checkout's `./models`: the first that holds `name`
/// (a file or a model directory), else the first.
pub fn model_path(name: &str) -> PathBuf {
    let dirs: Vec<PathBuf> = minfer::testing::models_dir()
        .into_iter()
        .chain([Path::new(env!("CARGO_MANIFEST_DIR")).join("models")])
        .collect();
    dirs.iter()
        .map(|d| d.join(name))
        .find(|p| p.exists())
        .unwrap_or_else(|| dirs[0].join(name))
}

/// A real model fetched by `scripts/fetch-models` ([`model_path`]), or a skip.
pub fn real_model(test: &str, file: &str) -> Option<PathBuf> {
    let p = model_path(file);
    if p.is_file() {
        Some(p)
    } else {
        skip(test, &format!("{} is missing (run scripts/fetch-models)", p.display()))
    }
}

/// A quantized GGUF of `random/MANIFEST.json` by its file name (`gemma4-Q4_K_M.gguf`): the
/// shipped file, or one `quantize` recreated with the recorded sha256 (cached by sha256), or
/// a skip. See `quantize::quantized_gguf`.
pub fn quantized_ref(test: &str, file: &str) -> Option<PathBuf> {
    crate::quantize::quantized_gguf(test, file)
}

/// A random-weight reference GGUF (`NAME` without `.gguf`): the file in `random/gguf/` where
/// the pack ships it, else recreated by `quantize` (`quantized_ref`); `None` is a skip.
pub fn random_gguf(test: &str, root: &Path, name: &str) -> Option<PathBuf> {
    let shipped = root.join(format!("random/gguf/{name}.gguf"));
    if shipped.is_file() {
        return Some(shipped);
    }
    quantized_ref(test, &format!("{name}.gguf"))
}

pub fn read_json(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

pub fn hex_decode(s: &str) -> Vec<u8> {
    assert!(s.len().is_multiple_of(2), "odd hex length");
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

/// Reads a little-endian float32 `.npy` array (any shape) as a flat vector.
pub fn read_npy_f32(path: &Path) -> Vec<f32> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(&bytes[..6], b"\x93NUMPY", "{}: not an npy file", path.display());
    let (hlen, start) = if bytes[6] == 1 {
        (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10)
    } else {
        (
            u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
            12,
        )
    };
    let header = std::str::from_utf8(&bytes[start..start + hlen]).unwrap();
    assert!(header.contains("'<f4'"), "{}: not float32: {header}", path.display());
    assert!(header.contains("'fortran_order': False"), "{}", path.display());
    bytes[start + hlen..]
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}
