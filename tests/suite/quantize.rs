//! `quantize` against llama-quantize: every quantized GGUF of `random/MANIFEST.json`
//! (`llama-quantize --pure F32 OUT TYPE 2`, and gpt-oss's MXFP4_MOE without `--pure`) recreated
//! from its shipped f32 file with the recorded sha256, the per-tensor mixes against
//! llama-quantize's sha256 (`tests/data/quantize_mixes.json`), the CLI's errors; and
//! [`quantized_gguf`], which hands any recorded quantized file to other tests (shipped, or
//! recreated once into a cache keyed by its sha256).

use std::path::{Path, PathBuf};
use std::process::Command;

use minfer::quantize::{quantize_file, FileType, Options};

use crate::common;

tests![
    every_recorded_quantized_file_is_reproduced,
    mixes_match_llama_quantize,
    quantized_gguf_yields_recorded_files,
    cli_quantizes_and_refuses_bad_input,
    mxfp4_experts_match_ggml_and_the_hf_checkpoint,
    layout_types_and_fallbacks_of_a_written_file,
];

/// A `MANIFEST.json` entry made by llama-quantize: `<arch>-<TYPE>.gguf` from `<arch>-f32.gguf`.
struct Recorded {
    file: String,
    input: String,
    ty: String,
    sha256: String,
    size: u64,
    shipped: bool,
}

impl Recorded {
    /// `--pure` for all but MXFP4_MOE, as the references were made.
    fn options(&self) -> Options {
        Options {
            pure: self.ty != "MXFP4_MOE",
            threads: 2,
            ..Options::default()
        }
    }
}

/// The manifest's quantized files (f32 and f16 come from the converter, `mxfp4` from the HF
/// checkpoint: not llama-quantize's).
fn recorded(manifest: &Path) -> Vec<Recorded> {
    let m = common::read_json(manifest);
    let mut out = Vec::new();
    for f in m["files"].as_array().expect("files") {
        let file = f["model_file"].as_str().unwrap().to_string();
        let stem = file.strip_suffix(".gguf").unwrap();
        let (arch, ty) = stem.rsplit_once('-').unwrap();
        if matches!(ty, "f32" | "f16" | "mxfp4") {
            continue;
        }
        out.push(Recorded {
            input: format!("{arch}-f32.gguf"),
            ty: ty.to_string(),
            sha256: f["model_sha256"].as_str().unwrap().to_string(),
            size: f["model_size"].as_u64().unwrap(),
            shipped: f["shipped_in_gguf_dir"].as_bool().unwrap_or(false),
            file,
        });
    }
    out
}

fn cache_dir() -> PathBuf {
    let d = std::env::temp_dir().join("minfer-quantized-refs");
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Quantizes `r` into a private name, checks the sha256, then renames it into the cache
/// (tests running at once never see a half-written file).
fn recreate(gguf_dir: &Path, r: &Recorded) -> PathBuf {
    let dst = cache_dir().join(format!("{}.gguf", r.sha256));
    let tmp = cache_dir().join(format!(
        "{}.{}.{:?}.tmp",
        r.sha256,
        std::process::id(),
        std::thread::current().id()
    ));
    let ft = FileType::parse(&r.ty).unwrap();
    quantize_file(&gguf_dir.join(&r.input), &tmp, ft, &r.options()).unwrap_or_else(|e| panic!("{}: {e}", r.file));
    let bytes = std::fs::read(&tmp).unwrap();
    let got = sha256_hex(&bytes);
    if got != r.sha256 {
        let _ = std::fs::remove_file(&tmp);
        panic!("{}: quantize gave sha256 {got}, recorded {}", r.file, r.sha256);
    }
    std::fs::rename(&tmp, &dst).unwrap();
    dst
}

/// The path of a quantized reference GGUF named as in `random/MANIFEST.json`
/// (`gemma4-Q4_K_M.gguf`): the shipped file, or one recreated by `quantize` from its f32 file
/// (checked against the recorded sha256 once, then cached under the temp dir by sha256).
/// A skip where the reference data is missing or the file is not one llama-quantize made.
pub fn quantized_gguf(test: &str, file: &str) -> Option<PathBuf> {
    let manifest = common::ref_file(test, "random/MANIFEST.json")?;
    let gguf_dir = manifest.parent().unwrap().join("gguf");
    let Some(r) = recorded(&manifest).into_iter().find(|r| r.file == file) else {
        return common::skip(test, &format!("{file} is not a quantized file of random/MANIFEST.json"));
    };
    let shipped = gguf_dir.join(&r.file);
    if r.shipped && shipped.is_file() {
        return Some(shipped);
    }
    let cached = cache_dir().join(format!("{}.gguf", r.sha256));
    if std::fs::metadata(&cached).is_ok_and(|m| m.len() == r.size) {
        return Some(cached);
    }
    if !gguf_dir.join(&r.input).is_file() {
        return common::skip(test, &format!("{} is missing", gguf_dir.join(&r.input).display()));
    }
    Some(recreate(&gguf_dir, &r))
}

fn every_recorded_quantized_file_is_reproduced() {
    let t = "every_recorded_quantized_file_is_reproduced";
    let Some(manifest) = common::ref_file(t, "random/MANIFEST.json") else {
        return;
    };
    let gguf_dir = manifest.parent().unwrap().join("gguf");
    let all = recorded(&manifest);
    // Batch 1 (llama, qwen2, qwen3, gemma3: 10 types each) and batch 2 (11 archs).
    assert!(all.len() >= 70, "{} quantized files in the manifest", all.len());
    let mut bad = Vec::new();
    for r in &all {
        let tmp = cache_dir().join(format!("check.{}.{}", std::process::id(), r.file));
        let ft = FileType::parse(&r.ty).unwrap();
        quantize_file(&gguf_dir.join(&r.input), &tmp, ft, &r.options()).unwrap_or_else(|e| panic!("{}: {e}", r.file));
        let bytes = std::fs::read(&tmp).unwrap();
        let got = sha256_hex(&bytes);
        if got == r.sha256 && bytes.len() as u64 == r.size {
            if r.shipped {
                std::fs::remove_file(&tmp).unwrap();
            } else {
                // Seeds the cache `quantized_gguf` reads for files not shipped.
                std::fs::rename(&tmp, cache_dir().join(format!("{got}.gguf"))).unwrap();
            }
        } else {
            std::fs::remove_file(&tmp).unwrap();
            bad.push(format!("{}: {} bytes, sha256 {got}", r.file, bytes.len()));
        }
    }
    assert!(
        bad.is_empty(),
        "{} of {} differ from the recorded files:\n{}",
        bad.len(),
        all.len(),
        bad.join("\n")
    );
}

fn mixes_match_llama_quantize() {
    let t = "mixes_match_llama_quantize";
    let Some(dir) = common::ref_dir(t) else {
        return;
    };
    let data = common::read_json(&common::data_dir().join("quantize_mixes.json"));
    let cases = data["cases"].as_array().unwrap();
    let mut bad = Vec::new();
    for c in cases {
        let (input, ty) = (c["input"].as_str().unwrap(), c["type"].as_str().unwrap());
        let tmp = cache_dir().join(format!("mix.{}.{input}.{ty}", std::process::id()));
        let opts = Options {
            threads: 2,
            ..Options::default()
        };
        quantize_file(
            &dir.join("random/gguf").join(input),
            &tmp,
            FileType::parse(ty).unwrap(),
            &opts,
        )
        .unwrap_or_else(|e| panic!("{input} {ty}: {e}"));
        let got = sha256_hex(&std::fs::read(&tmp).unwrap());
        std::fs::remove_file(&tmp).unwrap();
        if got != c["sha256"].as_str().unwrap() {
            bad.push(format!("{input} {ty}"));
        }
    }
    assert!(cases.len() >= 50, "{} cases", cases.len());
    assert!(bad.is_empty(), "differ from llama-quantize: {bad:?}");
}

fn quantized_gguf_yields_recorded_files() {
    let t = "quantized_gguf_yields_recorded_files";
    // Not shipped (recreated, or from the cache), and shipped.
    for file in ["gemma4-Q4_K_M.gguf", "qwen2moe-Q8_0.gguf", "llama-Q4_0.gguf"] {
        let Some(p) = quantized_gguf(t, file) else {
            return;
        };
        let manifest = common::read_json(&common::ref_dir(t).unwrap().join("random/MANIFEST.json"));
        let want = manifest["files"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["model_file"] == file)
            .unwrap()["model_sha256"]
            .as_str()
            .unwrap()
            .to_string();
        assert_eq!(
            sha256_hex(&std::fs::read(&p).unwrap()),
            want,
            "{file} at {}",
            p.display()
        );
        // Opens as a model file with the recorded types.
        let g = minfer::gguf::GgufFile::open(&p).unwrap();
        assert!(g.tensors.iter().any(|t| t.qtype.is_quantized()), "{file}");
    }
}

fn bin() -> Command {
    Command::new(crate::common::exe())
}

fn cli_quantizes_and_refuses_bad_input() {
    let t = "cli_quantizes_and_refuses_bad_input";
    let Some(f32) = common::ref_file(t, "random/gguf/llama-f32.gguf") else {
        return;
    };
    let dir = cache_dir().join(format!("cli.{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("llama-Q4_0.gguf");

    // A good run: the recorded bytes (README section 4's table), no temporary file left.
    let o = bin()
        .arg("quantize")
        .arg(&f32)
        .arg(&out)
        .args(["q4_0", "--pure"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let bytes = std::fs::read(&out).unwrap();
    assert_eq!(
        sha256_hex(&bytes),
        "a54bfb3e7bafdf5395367bc6b21dfc3a86327cf2be66a9e9193dc3bcb271fd0f"
    );
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        1,
        "a temporary file was left behind"
    );

    let fails = |args: &[&std::ffi::OsStr], needle: &str| {
        let o = bin().arg("quantize").args(args).output().unwrap();
        let e = String::from_utf8_lossy(&o.stderr).to_string();
        assert!(!o.status.success(), "succeeded: {args:?}");
        assert!(!e.contains("panicked"), "{e}");
        assert!(e.contains(needle), "{args:?}: stderr does not mention {needle:?}: {e}");
    };
    let out2 = dir.join("x.gguf");
    // An unknown type names itself and the valid ones; nothing is written.
    fails(&[f32.as_os_str(), out2.as_os_str(), "Q4_9".as_ref()], "'Q4_9'");
    fails(&[f32.as_os_str(), out2.as_os_str(), "Q4_9".as_ref()], "Q4_K_M");
    assert!(!out2.exists());
    // A missing input names its path.
    let missing = dir.join("missing.gguf");
    fails(
        &[missing.as_os_str(), out2.as_os_str(), "Q8_0".as_ref()],
        "missing.gguf",
    );
    assert!(!out2.exists());
    // IN == OUT (also through another spelling of the path) is refused and IN is unchanged.
    let before = std::fs::read(&out).unwrap();
    fails(
        &[
            out.as_os_str(),
            out.as_os_str(),
            "Q8_0".as_ref(),
            "--allow-requantize".as_ref(),
        ],
        "refusing to overwrite",
    );
    let other = dir.join(".").join("llama-Q4_0.gguf");
    fails(
        &[
            out.as_os_str(),
            other.as_os_str(),
            "F16".as_ref(),
            "--allow-requantize".as_ref(),
        ],
        "refusing to overwrite",
    );
    assert_eq!(std::fs::read(&out).unwrap(), before);
    // Requantizing an already quantized file needs the flag, as in llama-quantize.
    fails(
        &[out.as_os_str(), out2.as_os_str(), "Q8_0".as_ref()],
        "--allow-requantize",
    );
    assert!(!out2.exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// MXFP4 both ways on gpt-oss's experts: the reference quantizer on `gpt-oss-f32`'s expert
/// tensors gives the bytes of the HF-converted `gpt-oss-mxfp4-mxfp4.gguf` (and of
/// llama-quantize's MXFP4_MOE file), and dequantizing them gives the values of the HF
/// checkpoint's `*_blocks`/`*_scales`, decoded here from their definition (E2M1 code ×
/// 2^(scale − 127)).
fn mxfp4_experts_match_ggml_and_the_hf_checkpoint() {
    use minfer::gguf::GgufFile;
    use minfer::quant::QType;
    let t = "mxfp4_experts_match_ggml_and_the_hf_checkpoint";
    let Some(dir) = common::ref_dir(t) else {
        return;
    };
    let Some(st) = common::ref_file(t, "random/hf/gpt-oss-mxfp4/model.safetensors") else {
        return;
    };
    let f32 = GgufFile::open(dir.join("random/gguf/gpt-oss-f32.gguf")).unwrap();
    let mx = GgufFile::open(dir.join("random/gguf/gpt-oss-mxfp4-mxfp4.gguf")).unwrap();
    let moe = GgufFile::open(dir.join("random/gguf/gpt-oss-MXFP4_MOE.gguf")).unwrap();
    let hf = std::fs::read(&st).unwrap();
    let n = u64::from_le_bytes(hf[..8].try_into().unwrap()) as usize;
    let header: serde_json::Value = serde_json::from_slice(&hf[8..8 + n]).unwrap();
    let hf_tensor = |name: &str| -> &[u8] {
        let o = header[name]["data_offsets"]
            .as_array()
            .unwrap_or_else(|| panic!("{name}"));
        let (a, b) = (o[0].as_u64().unwrap() as usize, o[1].as_u64().unwrap() as usize);
        &hf[8 + n + a..8 + n + b]
    };
    const FP4: [f64; 16] = [
        0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0,
    ];
    let mut checked = 0;
    for l in 0..2 {
        for (ggml, hf_name, stride, first) in [
            ("ffn_down_exps", "down_proj", 1, 0),
            ("ffn_gate_exps", "gate_up_proj", 2, 0),
            ("ffn_up_exps", "gate_up_proj", 2, 1),
        ] {
            let name = format!("blk.{l}.{ggml}.weight");
            let (src, want) = (f32.tensor(&name).unwrap(), mx.tensor(&name).unwrap());
            assert_eq!(want.qtype, QType::MXFP4, "{name}");
            let x: Vec<f32> = QType::F32.dequantize_to_vec(&src.data).unwrap();
            let q = QType::MXFP4.quantize_to_vec(&x).unwrap();
            assert!(
                q == *want.data,
                "{name}: quantize_row_mxfp4_ref differs from the converted GGUF"
            );
            assert!(
                q == *moe.tensor(&name).unwrap().data,
                "{name}: differs from llama-quantize's MXFP4_MOE"
            );

            // [in, out, E] in ggml order: E matrices of `out` rows of `cols` values.
            let (cols, rows, experts) = (want.shape[0] as usize, want.shape[1] as usize, want.shape[2] as usize);
            let got = QType::MXFP4.dequantize_to_vec(&want.data).unwrap();
            let blocks = hf_tensor(&format!("model.layers.{l}.mlp.experts.{hf_name}_blocks"));
            let scales = hf_tensor(&format!("model.layers.{l}.mlp.experts.{hf_name}_scales"));
            let hf_rows = rows * stride;
            for e in 0..experts {
                for r in 0..rows {
                    let hr = e * hf_rows + r * stride + first;
                    for c in 0..cols {
                        let byte = blocks[hr * cols / 2 + c / 2];
                        let code = if c % 2 == 0 { byte & 15 } else { byte >> 4 };
                        let scale = scales[hr * cols / 32 + c / 32] as i32;
                        let v = (FP4[code as usize] * 2f64.powi(scale - 127)) as f32;
                        let g = got[(e * rows + r) * cols + c];
                        assert!(g == v, "{name} expert {e} row {r} col {c}: {g} vs the checkpoint's {v}");
                        checked += 1;
                    }
                }
            }
        }
    }
    assert_eq!(checked, 2 * 3 * 4 * 256 * 256);
}

/// Without reference data: a small file through `quantize_file --pure Q4_K_M` gets
/// llama-quantize's order (by layer, `blk.10` after `blk.2`, then by name), its fallbacks
/// (rows of 64 → Q5_0, rows of 48 → F16), its exclusions (norms, routers, `[n, 1]` weights,
/// written `[n]`), row-by-row 3-D experts, and the file type last in the metadata.
fn layout_types_and_fallbacks_of_a_written_file() {
    use minfer::gguf::{GgufFile, GgufWriter, Value};
    use minfer::quant::QType;
    let dir = cache_dir().join(format!("layout.{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let vals = |n: usize, seed: u32| -> Vec<f32> {
        (0..n)
            .map(|i| ((i as u32).wrapping_mul(2654435761).wrapping_add(seed) % 2001) as f32 / 1000.0 - 1.0)
            .collect()
    };
    let mut w = GgufWriter::new();
    w.set("general.architecture", Value::String("llama".into()));
    w.set("general.file_type", Value::U32(0));
    w.set("llama.block_count", Value::U32(11));
    w.set("llama.expert_count", Value::U32(2));
    let tensors: &[(&str, &[u64])] = &[
        ("blk.10.attn_q.weight", &[256, 4]),
        ("blk.2.attn_q.weight", &[256, 4]),
        ("blk.2.attn_norm.weight", &[256]),
        ("blk.2.ffn_gate_inp.weight", &[256, 2]),
        ("blk.2.ffn_gate_inp_shexp.weight", &[256, 1]),
        ("blk.2.ffn_up_exps.weight", &[256, 3, 2]),
        ("blk.2.proj.weight", &[64, 4]),
        ("blk.2.odd.weight", &[48, 4]),
        ("token_embd.weight", &[256, 8]),
    ];
    for (i, (name, shape)) in tensors.iter().enumerate() {
        let n = shape.iter().product::<u64>() as usize;
        w.add_f32(name, QType::F32, shape, &vals(n, i as u32)).unwrap();
    }
    let input = dir.join("in.gguf");
    w.write(&input).unwrap();
    let out = dir.join("out.gguf");
    let opts = Options {
        pure: true,
        threads: 3,
        ..Options::default()
    };
    quantize_file(&input, &out, FileType::parse("Q4_K_M").unwrap(), &opts).unwrap();
    let g = GgufFile::open(&out).unwrap();
    let got: Vec<(&str, QType, Vec<u64>)> = g
        .tensors
        .iter()
        .map(|t| (t.name.as_str(), t.qtype, t.shape.clone()))
        .collect();
    let want: Vec<(&str, QType, Vec<u64>)> = vec![
        ("token_embd.weight", QType::Q4K, vec![256, 8]),
        ("blk.2.attn_norm.weight", QType::F32, vec![256]),
        ("blk.2.attn_q.weight", QType::Q4K, vec![256, 4]),
        ("blk.2.ffn_gate_inp.weight", QType::F32, vec![256, 2]),
        ("blk.2.ffn_gate_inp_shexp.weight", QType::F32, vec![256]),
        ("blk.2.ffn_up_exps.weight", QType::Q4K, vec![256, 3, 2]),
        ("blk.2.odd.weight", QType::F16, vec![48, 4]),
        ("blk.2.proj.weight", QType::Q5_0, vec![64, 4]),
        ("blk.10.attn_q.weight", QType::Q4K, vec![256, 4]),
    ];
    assert_eq!(got, want);
    // Each tensor holds its values in its type, 3-D experts row by row.
    let src = GgufFile::open(&input).unwrap();
    for t in &g.tensors {
        let x = QType::F32
            .dequantize_to_vec(&src.tensor(&t.name).unwrap().data)
            .unwrap();
        assert!(*t.data == *t.qtype.quantize_to_vec(&x).unwrap(), "{}", t.name);
    }
    let keys: Vec<&str> = g.metadata.iter().map(|(k, _)| k).collect();
    assert_eq!(keys.last(), Some(&"general.file_type"));
    assert_eq!(g.metadata.get_u64("general.file_type").unwrap(), Some(15));
    assert_eq!(g.metadata.get_u64("general.quantization_version").unwrap(), Some(2));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// SHA-256 (FIPS 180-4), for comparing files with the manifest's digests.
pub fn sha256_hex(data: &[u8]) -> String {
    const K: [u32; 64] = [
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98,
        0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
        0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8,
        0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
        0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819,
        0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
        0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
        0xc67178f2,
    ];
    let mut h: [u32; 8] = [
        0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
    ];
    let mut msg = data.to_vec();
    msg.push(0x80);
    while msg.len() % 64 != 56 {
        msg.push(0);
    }
    msg.extend_from_slice(&((data.len() as u64) * 8).to_be_bytes());
    for block in msg.chunks_exact(64) {
        let mut w = [0u32; 64];
        for (i, c) in block.chunks_exact(4).enumerate() {
            w[i] = u32::from_be_bytes([c[0], c[1], c[2], c[3]]);
        }
        for i in 16..64 {
            let s0 = w[i - 15].rotate_right(7) ^ w[i - 15].rotate_right(18) ^ (w[i - 15] >> 3);
            let s1 = w[i - 2].rotate_right(17) ^ w[i - 2].rotate_right(19) ^ (w[i - 2] >> 10);
            w[i] = w[i - 16].wrapping_add(s0).wrapping_add(w[i - 7]).wrapping_add(s1);
        }
        let mut v = h;
        for i in 0..64 {
            let s1 = v[4].rotate_right(6) ^ v[4].rotate_right(11) ^ v[4].rotate_right(25);
            let ch = (v[4] & v[5]) ^ (!v[4] & v[6]);
            let t1 = v[7]
                .wrapping_add(s1)
                .wrapping_add(ch)
                .wrapping_add(K[i])
                .wrapping_add(w[i]);
            let s0 = v[0].rotate_right(2) ^ v[0].rotate_right(13) ^ v[0].rotate_right(22);
            let maj = (v[0] & v[1]) ^ (v[0] & v[2]) ^ (v[1] & v[2]);
            let t2 = s0.wrapping_add(maj);
            v = [
                t1.wrapping_add(t2),
                v[0],
                v[1],
                v[2],
                v[3].wrapping_add(t1),
                v[4],
                v[5],
                v[6],
            ];
        }
        for (a, b) in h.iter_mut().zip(v) {
            *a = a.wrapping_add(b);
        }
    }
    h.iter().map(|x| format!("{x:08x}")).collect()
}
