//! Every qtype's codecs against ggml's recorded bytes and floats.
//!
//! The vectors in `tests/data/quant` come from `tools/refgen/make_quant_vectors.py` calling
//! libggml-base at llama.cpp 0c1e570 (see shared/ref/README.md §5):
//! - `real_blocks.<TYPE>.json`: 8 blocks (from real GGUFs, or made by ggml's quantizer from
//!   `source.input_f32`) and ggml's dequantization of them;
//! - `quantize.<TYPE>.json`: `ggml_quantize_chunk(type, quantizer_input, 4 rows x 512,
//!   imatrix = NULL)` bytes and their dequantization.
//!
//! Every test walks `QType::ALL`, so a new table row is covered (or fails for lack of vectors).

use std::path::PathBuf;

use minfer::quant::QType;
use minfer::testing::{as_blocks, fp16_to_f32, BlockQ8_1, QK8_1};
use serde_json::Value;

use crate::common::{data_dir, hex_decode, read_json};

tests![
    every_type_has_vectors_and_every_file_a_type,
    real_blocks_dequantize_bit_exact,
    quantize_files_dequantize_bit_exact,
    quantize_matches_ggml_bytes,
    round_trip_nmse,
    f32_is_the_identity,
    q8_1_sum_field,
];

/// Types with no vectors in `tests/data/quant`, and why.
const NO_VECTORS: &[(QType, &str)] = &[
    (QType::F32, "the identity; checked bit for bit by `f32_is_the_identity`"),
    (
        QType::Q8_1,
        "activation format with no ggml to_float; checked by `q8_1_sum_field`",
    ),
];

/// ggml's spelling upper-cased, as the vector files are named (`Q4_K`, `IQ4_NL`, `BF16`).
fn file_name(prefix: &str, q: QType) -> PathBuf {
    data_dir()
        .join("quant")
        .join(format!("{prefix}.{}.json", q.name().to_uppercase()))
}

/// How many types have vector files (all but the exempt ones), for the coverage checks.
fn n_with_vectors() -> usize {
    QType::ALL.len() - NO_VECTORS.len()
}

/// Of those, how many have a quantizer (and so `quantize.<TYPE>.json`).
fn n_quantizable_with_vectors() -> usize {
    QType::ALL
        .iter()
        .filter(|q| !exempt(**q) && q.info().quant.is_some())
        .count()
}

fn exempt(q: QType) -> bool {
    NO_VECTORS.iter().any(|(t, _)| *t == q)
}

/// The vector file for `q`; panics (fails the test) when a non-exempt type has none.
fn vectors(prefix: &str, q: QType) -> Option<Value> {
    if exempt(q) {
        return None;
    }
    let path = file_name(prefix, q);
    assert!(path.is_file(), "{q}: no reference vectors at {}", path.display());
    let v = read_json(&path);
    assert_eq!(
        v["type"].as_str(),
        Some(q.name().to_uppercase().as_str()),
        "{}",
        path.display()
    );
    assert_eq!(v["ggml_type_id"].as_u64(), Some(q.ggml_id() as u64), "{q}: ggml id");
    assert_eq!(
        v["block_elems"].as_u64(),
        Some(q.block_elems() as u64),
        "{q}: block elems"
    );
    assert_eq!(
        v["block_bytes"].as_u64(),
        Some(q.block_bytes() as u64),
        "{q}: block bytes"
    );
    Some(v)
}

/// JSON numbers written from float32 values (exact as f64, so exact back as f32).
fn f32s(v: &Value) -> Vec<f32> {
    v.as_array()
        .expect("array of numbers")
        .iter()
        .map(|x| x.as_f64().expect("number") as f32)
        .collect()
}

fn f32s_from_hex(s: &str) -> Vec<f32> {
    hex_decode(s)
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Bit-identical floats (any NaN matches any NaN); panics at the first difference.
fn assert_same_f32(what: &str, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let same = g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan());
        assert!(
            same,
            "{what}: element {i}: got {g:e} ({:#010x}), ggml {w:e} ({:#010x})",
            g.to_bits(),
            w.to_bits()
        );
    }
}

/// The four 512-value rows of `quantizer_input.json`, exact.
fn quantizer_rows() -> Vec<Vec<f32>> {
    let v = read_json(&data_dir().join("quant/quantizer_input.json"));
    let rows: Vec<Vec<f32>> = v["input_f32_hex"]
        .as_array()
        .expect("input_f32_hex")
        .iter()
        .map(|h| f32s_from_hex(h.as_str().expect("hex string")))
        .collect();
    let n = v["n_per_row"].as_u64().expect("n_per_row") as usize;
    assert!(rows.iter().all(|r| r.len() == n));
    rows
}

fn sq_err(x: &[f32], y: &[f32]) -> f64 {
    x.iter().zip(y).map(|(a, b)| (*a as f64 - *b as f64).powi(2)).sum()
}

fn every_type_has_vectors_and_every_file_a_type() {
    for q in QType::ALL {
        if exempt(q) {
            continue;
        }
        assert!(
            file_name("real_blocks", q).is_file(),
            "{q}: missing real_blocks vectors"
        );
        if q.info().quant.is_some() {
            assert!(file_name("quantize", q).is_file(), "{q}: missing quantize vectors");
        }
    }
    for entry in std::fs::read_dir(data_dir().join("quant")).expect("tests/data/quant") {
        let name = entry.expect("dir entry").file_name().into_string().expect("utf-8 name");
        let Some(stem) = name.strip_suffix(".json") else {
            continue;
        };
        if stem == "quantizer_input" {
            continue;
        }
        let (_, ty) = stem.split_once('.').unwrap_or_else(|| panic!("unexpected file {name}"));
        let q = QType::from_name(ty).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(!exempt(q), "{name}: {q} is listed in NO_VECTORS but has vectors");
    }
}

fn real_blocks_dequantize_bit_exact() {
    let mut checked = 0;
    for q in QType::ALL {
        let Some(v) = vectors("real_blocks", q) else {
            continue;
        };
        checked += 1;
        let bytes: Vec<u8> = v["blocks_hex"]
            .as_array()
            .expect("blocks_hex")
            .iter()
            .flat_map(|h| hex_decode(h.as_str().expect("hex")))
            .collect();
        let n_blocks = v["n_blocks"].as_u64().expect("n_blocks") as usize;
        assert_eq!(bytes.len(), n_blocks * q.block_bytes(), "{q}");
        let got = q.dequantize_to_vec(&bytes).expect("dequantize");
        assert_same_f32(&format!("{q} real blocks"), &got, &f32s(&v["dequant_f32"]));

        // Blocks that ggml's quantizer made from recorded inputs: our quantizer must agree.
        if let Some(input) = v["source"].get("input_f32") {
            let ours = q.quantize_to_vec(&f32s(input)).expect("quantize");
            assert!(
                ours == bytes,
                "{q}: quantizing source.input_f32 differs from ggml's blocks"
            );
        }
    }
    assert_eq!(checked, n_with_vectors());
}

fn quantize_files_dequantize_bit_exact() {
    let mut checked = 0;
    for q in QType::ALL {
        if q.info().quant.is_none() {
            continue;
        }
        let Some(v) = vectors("quantize", q) else {
            continue;
        };
        checked += 1;
        let rows = v["rows_hex"].as_array().expect("rows_hex");
        let deq = v["dequant_f32"].as_array().expect("dequant_f32");
        assert_eq!(rows.len(), deq.len(), "{q}");
        for (r, (h, want)) in rows.iter().zip(deq).enumerate() {
            let got = q
                .dequantize_to_vec(&hex_decode(h.as_str().expect("hex")))
                .expect("dequantize");
            assert_same_f32(&format!("{q} quantize row {r}"), &got, &f32s(want));
        }
    }
    assert_eq!(checked, n_quantizable_with_vectors());
}

/// Blocks of a row allowed to differ from ggml's bytes. The ports keep ggml's float operation
/// order, so every type is expected bit-exact; a non-zero entry would record a measured tie.
fn allowed_mismatched_blocks(_q: QType) -> usize {
    0
}

fn quantize_matches_ggml_bytes() {
    let inputs = quantizer_rows();
    let mut failures = Vec::new();
    let mut checked = 0;
    for q in QType::ALL {
        if q.info().quant.is_none() {
            assert!(!file_name("quantize", q).is_file(), "{q}: vectors but no quantizer");
            continue;
        }
        let Some(v) = vectors("quantize", q) else {
            continue;
        };
        checked += 1;
        let rows = v["rows_hex"].as_array().expect("rows_hex");
        assert_eq!(rows.len(), inputs.len(), "{q}");
        let (bb, be) = (q.block_bytes(), q.block_elems());
        for (r, (x, h)) in inputs.iter().zip(rows).enumerate() {
            let want = hex_decode(h.as_str().expect("hex"));
            let ours = q.quantize_to_vec(x).expect("quantize");
            assert_eq!(ours.len(), want.len(), "{q} row {r}: row bytes");
            if ours == want {
                continue;
            }
            // Report each differing block with both encodings' errors on the input.
            let mut bad = 0;
            let (mut err_ours, mut err_ggml) = (0.0f64, 0.0f64);
            for (b, ((o, w), xb)) in ours.chunks(bb).zip(want.chunks(bb)).zip(x.chunks(be)).enumerate() {
                if o == w {
                    continue;
                }
                bad += 1;
                let (yo, yw) = (q.dequantize_to_vec(o).unwrap(), q.dequantize_to_vec(w).unwrap());
                let (eo, ew) = (sq_err(xb, &yo), sq_err(xb, &yw));
                err_ours += eo;
                err_ggml += ew;
                let rms = |e: f64| (e / be as f64).sqrt();
                eprintln!(
                    "{q} row {r} block {b}: bytes differ; rmse ours {:.6e}, ggml {:.6e}\n  ours {}\n  ggml {}",
                    rms(eo),
                    rms(ew),
                    hex(o),
                    hex(w)
                );
            }
            let ok = bad <= allowed_mismatched_blocks(q) && err_ours <= 1.01f64.powi(2) * err_ggml;
            if !ok {
                failures.push(format!("{q} row {r}: {bad} blocks differ"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "quantizers differ from ggml:\n{}",
        failures.join("\n")
    );
    assert_eq!(checked, n_quantizable_with_vectors());
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Normalised squared error `sum (x - y)^2 / sum x^2` of quantize → dequantize on N(0, 1)
/// data must stay under a per-type bound. A new type does not compile until its table row has one.
fn round_trip_nmse() {
    let n = 16 * 256;
    let x = normal_samples(n, 0x5eed);
    for q in QType::ALL {
        if q.info().quant.is_none() {
            continue;
        }
        let bytes = q.quantize_to_vec(&x).expect("quantize");
        let y = q.dequantize_to_vec(&bytes).expect("dequantize");
        let nmse = sq_err(&x, &y) / x.iter().map(|v| (*v as f64).powi(2)).sum::<f64>();
        // Measured when the row was added (the table's `nmse`); the bound is 1.5x.
        let measured = q.info().nmse;
        let bound = 1.5 * measured;
        eprintln!("{q}: nmse {nmse:.3e} (bound {bound:.1e})");
        assert!(nmse <= bound, "{q}: round-trip nmse {nmse:e} > {bound:e}");
    }
}

/// F32 has no vectors: quantize and dequantize must be the identity on bits, NaNs included.
fn f32_is_the_identity() {
    let x: Vec<f32> = [
        0.0f32,
        -0.0,
        1.5,
        f32::MIN_POSITIVE / 8.0,
        f32::INFINITY,
        f32::from_bits(0x7fa0_0001),
    ]
    .into_iter()
    .chain(normal_samples(64, 7))
    .collect();
    let bytes = QType::F32.quantize_to_vec(&x).unwrap();
    assert_eq!(bytes, x.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>());
    let y = QType::F32.dequantize_to_vec(&bytes).unwrap();
    assert!(x.iter().zip(&y).all(|(a, b)| a.to_bits() == b.to_bits()));
}

/// Q8_1 has no vectors: `s` must be `d * sum(qs)`, up to the f16 rounding of `d` and of `s`
/// (ggml rounds `sum * d` with the f32 `d`), and an all-zero block is all zero.
fn q8_1_sum_field() {
    let mut x = normal_samples(64 * QK8_1, 11);
    x[..QK8_1].fill(0.0);
    let bytes = QType::Q8_1.quantize_to_vec(&x).unwrap();
    let blocks: &[BlockQ8_1] = as_blocks(&bytes);
    assert_eq!(blocks.len(), 64);
    assert!(bytes[..36].iter().all(|&b| b == 0), "zero block");
    for (i, b) in blocks.iter().enumerate() {
        let sum: i32 = b.qs.iter().map(|&q| q as i32).sum();
        let (d, s) = (b.d(), b.s());
        let want = d * sum as f32;
        // Two f16 roundings (2^-11 relative each) plus f16 subnormal spacing.
        let tol = want.abs() * 2.0f32.powi(-10) + fp16_to_f32(1);
        assert!((s - want).abs() <= tol, "block {i}: s {s} vs d*sum {want}");
        assert!(
            b.qs.iter().any(|&q| q.unsigned_abs() == 127) || sum == 0,
            "block {i}: amax maps to ±127"
        );
    }
}

/// Deterministic N(0, 1) samples: xorshift64* and Box-Muller.
fn normal_samples(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut uniform = move || {
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        ((s.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    };
    (0..n)
        .map(|_| {
            let (u1, u2) = (uniform(), uniform());
            ((-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()) as f32
        })
        .collect()
}
