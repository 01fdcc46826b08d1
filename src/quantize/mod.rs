//! `llama-quantize` for GGUF files: the same tensor types, metadata, tensor order and
//! alignment, so that a file quantized here is byte-identical to llama.cpp's (every block
//! codec in [`crate::quant`] is byte-exact with ggml's `ggml_quantize_chunk` without an
//! importance matrix).
//!
//! What llama.cpp's `llama_model_quantize_impl` does, and so this does:
//! - metadata: every input key in order, minus `split.*`; then `general.quantization_version`
//!   (2) and `general.file_type` (the `llama_ftype`), moved to the end (ggml's `gguf_set_*`
//!   removes a key and appends it);
//! - tensors: ordered by layer (`blk.N.`, others first), then by name (the loader's
//!   `weights_map` order), each padded to 32 bytes;
//! - types: [`mix`] (2-D and 3-D weights only; `--pure` skips the per-tensor mixes, not the
//!   fallbacks for rows that are not whole blocks); 3-D expert tensors are quantized row by row
//!   like 2-D ones;
//! - shapes: trailing dimensions of 1 are dropped (`[256, 1]` is written `[256]`).

mod mix;

pub use mix::{allows_quantization, category, Category, ModelFacts};

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::gguf::{encode_header, GgufFile, Metadata, TensorEntry, Value, DEFAULT_ALIGNMENT};
use crate::quant::QType;
use crate::tensor::Tensor;

/// A `llama_ftype` llama-quantize accepts by name: its id (written as `general.file_type`) and
/// the type its weights default to.
#[derive(Debug, PartialEq, Eq)]
pub struct FileType {
    pub name: &'static str,
    pub id: u32,
    pub default: QType,
}

const fn ft(name: &'static str, id: u32, default: QType) -> FileType {
    FileType { name, id, default }
}

/// Every file type offered (names as llama-quantize spells them), in its list's order.
pub const FILE_TYPES: &[FileType] = &[
    ft("Q4_0", 2, QType::Q4_0),
    ft("Q4_1", 3, QType::Q4_1),
    ft("MXFP4_MOE", 38, QType::MXFP4),
    ft("Q5_0", 8, QType::Q5_0),
    ft("Q5_1", 9, QType::Q5_1),
    ft("Q2_K", 10, QType::Q2K),
    ft("Q3_K_S", 11, QType::Q3K),
    ft("Q3_K_M", 12, QType::Q3K),
    ft("Q3_K_L", 13, QType::Q3K),
    ft("IQ4_NL", 25, QType::IQ4NL),
    ft("Q4_K_S", 14, QType::Q4K),
    ft("Q4_K_M", 15, QType::Q4K),
    ft("Q5_K_S", 16, QType::Q5K),
    ft("Q5_K_M", 17, QType::Q5K),
    ft("Q6_K", 18, QType::Q6K),
    ft("Q8_0", 7, QType::Q8_0),
    ft("F16", 1, QType::F16),
    ft("BF16", 32, QType::BF16),
    ft("F32", 0, QType::F32),
];

/// llama-quantize's aliases: the plain K names mean their `_M` mix.
const ALIASES: &[(&str, &str)] = &[("Q3_K", "Q3_K_M"), ("Q4_K", "Q4_K_M"), ("Q5_K", "Q5_K_M")];

impl FileType {
    /// A name (any case, or an alias) or a `llama_ftype` number; an unknown one is an error
    /// listing the valid names.
    pub fn parse(s: &str) -> Result<&'static FileType> {
        let name = ALIASES
            .iter()
            .find(|(a, _)| a.eq_ignore_ascii_case(s))
            .map_or(s, |&(_, to)| to);
        let by_name = FILE_TYPES.iter().find(|f| f.name.eq_ignore_ascii_case(name));
        let by_id = || {
            s.parse::<u32>()
                .ok()
                .and_then(|id| FILE_TYPES.iter().find(|f| f.id == id))
        };
        by_name.or_else(by_id).ok_or_else(|| {
            let names: Vec<&str> = FILE_TYPES.iter().map(|f| f.name).collect();
            let aliases: Vec<&str> = ALIASES.iter().map(|a| a.0).collect();
            Error::InvalidArgument(format!(
                "unknown quantization type '{s}' (valid: {}; aliases {})",
                names.join(", "),
                aliases.join(", ")
            ))
        })
    }
}

#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Every quantizable weight the file type's default type (no per-tensor mix).
    pub pure: bool,
    /// Re-encode tensors that are already quantized (dequantized first), as
    /// `--allow-requantize`; otherwise such a tensor is an error.
    pub allow_requantize: bool,
    /// Worker threads (0 = all cores).
    pub threads: usize,
}

/// One output tensor: its type and size as the header states them.
#[derive(Clone, Debug)]
pub struct Planned {
    pub name: String,
    pub from: QType,
    pub to: QType,
    pub shape: Vec<u64>,
    pub n_bytes: u64,
}

/// What [`quantize_file`] wrote.
#[derive(Debug)]
pub struct Report {
    pub tensors: Vec<Planned>,
    pub bytes_in: u64,
    pub bytes_out: u64,
}

/// The hyperparameters the mixes read, from the file's metadata (the model need not be one
/// the engine runs).
pub fn model_facts(md: &Metadata) -> Result<ModelFacts> {
    let arch = md
        .get_str("general.architecture")?
        .ok_or_else(|| Error::metadata("general.architecture", "missing"))?
        .to_string();
    // A per-layer array gives layer 0's value, as `hparams.n_head()` does.
    let first = |key: &str| -> Result<Option<u64>> {
        let key = format!("{arch}.{key}");
        match md.get(&key) {
            Some(Value::Array(_, items)) => Ok(items.first().and_then(Value::as_u64)),
            Some(_) => md.get_u64(&key),
            None => Ok(None),
        }
    };
    let n_layer = md.get_u64(&format!("{arch}.block_count"))?.unwrap_or(0) as i64;
    let n_expert = md.get_u64(&format!("{arch}.expert_count"))?.unwrap_or(0) as i64;
    let n_head = first("attention.head_count")?.unwrap_or(0) as i64;
    let n_head_kv = first("attention.head_count_kv")?.map_or(n_head, |v| v as i64);
    let n_gqa = if n_head_kv == 0 { 0 } else { n_head / n_head_kv };
    let is_70b = arch == "llama" && n_layer == 80 && n_head != n_head_kv;
    Ok(ModelFacts {
        arch,
        n_layer,
        n_expert,
        n_gqa,
        is_70b,
    })
}

/// The loader's tensor order: by layer (names without `blk.N.` first), then by name.
fn file_order(tensors: &[Tensor]) -> Vec<&Tensor> {
    let mut v: Vec<&Tensor> = tensors.iter().collect();
    v.sort_by(|a, b| {
        let la = mix::block_of(&a.name).unwrap_or(-1);
        let lb = mix::block_of(&b.name).unwrap_or(-1);
        la.cmp(&lb).then_with(|| a.name.as_bytes().cmp(b.name.as_bytes()))
    });
    v
}

/// The output metadata: the input's keys (split keys dropped), then the quantization
/// version and file type appended.
fn output_metadata(md: &Metadata, ftype: &FileType) -> Metadata {
    let mut out = md.clone();
    for k in [
        "general.quantization_version",
        "general.file_type",
        "split.no",
        "split.count",
        "split.tensors.count",
    ] {
        out.remove(k);
    }
    out.insert("general.quantization_version", Value::U32(2));
    out.insert("general.file_type", Value::U32(ftype.id));
    out
}

/// Every tensor's output type, in output order.
pub fn plan(file: &GgufFile, ftype: &FileType, opts: &Options) -> Result<Vec<Planned>> {
    let facts = model_facts(&file.metadata)?;
    let order = file_order(&file.tensors);
    let mut mixer = mix::Mixer::new(&facts, ftype, opts.pure, order.iter().map(|t| t.name.as_str()));
    let mut out = Vec::with_capacity(order.len());
    for t in order {
        let to = mixer.target(&t.name, t.qtype, &t.shape)?;
        if to != t.qtype && t.qtype.is_quantized() && !opts.allow_requantize {
            return Err(Error::tensor(
                &t.name,
                format!("is {}: requantizing to {to} needs --allow-requantize", t.qtype),
            ));
        }
        if to != t.qtype && to.info().quant.is_none() {
            return Err(Error::Unsupported {
                qtype: to.name(),
                what: format!("quantization (tensor '{}')", t.name),
            });
        }
        let n = n_elements(&t.shape).ok_or_else(|| Error::tensor(&t.name, format!("shape {:?} overflows", t.shape)))?;
        let n_bytes = to
            .bytes_for(n)
            .ok_or_else(|| Error::tensor(&t.name, format!("{n} elements are not whole {to} blocks")))?;
        out.push(Planned {
            name: t.name.clone(),
            from: t.qtype,
            to,
            // `gguf_add_tensor` writes `ggml_n_dims` dimensions: trailing 1s are dropped.
            shape: t.shape[..mix::n_dims(&t.shape).min(t.shape.len())].to_vec(),
            n_bytes,
        });
    }
    Ok(out)
}

fn n_elements(shape: &[u64]) -> Option<u64> {
    shape.iter().try_fold(1u64, |a, &d| a.checked_mul(d))
}

/// Whether `a` and `b` name one file (`b` need not exist).
fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(x), Ok(y)) => x == y,
        _ => false,
    }
}

/// Quantizes `input` (a GGUF file, or the first part of a split set) into `output` as
/// `llama-quantize [--pure] input output TYPE` does. Writes a temporary file beside `output`
/// and renames it; refuses to write over an input file.
pub fn quantize_file(input: &Path, output: &Path, ftype: &FileType, opts: &Options) -> Result<Report> {
    let file = GgufFile::open(input)?;
    if let Some(p) = file.parts.iter().find(|p| same_file(&p.path, output)) {
        return Err(Error::InvalidArgument(format!(
            "the output {} is the input {}; refusing to overwrite it",
            output.display(),
            p.path.display()
        )));
    }
    let planned = plan(&file, ftype, opts)?;
    let md = output_metadata(&file.metadata, ftype);
    let alignment = match md.get_u64("general.alignment")? {
        Some(a) if a.is_power_of_two() => a,
        Some(a) => return Err(Error::metadata("general.alignment", format!("{a} is not a power of 2"))),
        None => DEFAULT_ALIGNMENT,
    };
    let entries: Vec<TensorEntry> = planned
        .iter()
        .map(|p| TensorEntry {
            name: &p.name,
            qtype: p.to,
            shape: &p.shape,
            n_bytes: p.n_bytes,
        })
        .collect();
    let header = encode_header(&md, &entries, alignment);

    let tmp = temp_path(output);
    let written = write_body(&file, &planned, &header, alignment, &tmp, opts);
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    std::fs::rename(&tmp, output).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        Error::io(output, e)
    })?;
    Ok(Report {
        bytes_in: planned
            .iter()
            .map(|p| n_elements(&p.shape).and_then(|n| p.from.bytes_for(n)).unwrap_or(0))
            .sum(),
        bytes_out: planned.iter().map(|p| p.n_bytes).sum(),
        tensors: planned,
    })
}

/// `OUT.partial` beside `OUT`.
fn temp_path(output: &Path) -> PathBuf {
    let mut s = output.as_os_str().to_owned();
    s.push(".partial");
    PathBuf::from(s)
}

fn write_body(
    file: &GgufFile,
    planned: &[Planned],
    header: &[u8],
    alignment: u64,
    tmp: &Path,
    opts: &Options,
) -> Result<()> {
    let f = std::fs::File::create(tmp).map_err(|e| Error::io(tmp, e))?;
    let mut w = std::io::BufWriter::new(f);
    let io = |e| Error::io(tmp, e);
    w.write_all(header).map_err(io)?;
    let threads = match opts.threads {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    };
    for p in planned {
        let t = file
            .tensor(&p.name)
            .ok_or_else(|| Error::MissingTensor(p.name.clone()))?;
        if p.to == p.from {
            w.write_all(&t.data).map_err(io)?;
        } else {
            let bytes = convert(t, p, threads)?;
            w.write_all(&bytes).map_err(io)?;
        }
        let pad = p.n_bytes.div_ceil(alignment) * alignment - p.n_bytes;
        w.write_all(&vec![0u8; pad as usize]).map_err(io)?;
    }
    let f = w.into_inner().map_err(|e| Error::io(tmp, e.into_error()))?;
    f.sync_all().map_err(io)
}

/// Rows per slab: bounds the f32 copy of one tensor to about 64 MiB.
const SLAB_ELEMS: usize = 16 << 20;

/// One tensor decoded to f32 and re-encoded as `p.to`, row by row (rows of 3-D expert tensors
/// are rows like any other), the rows split across `threads`.
fn convert(t: &Tensor, p: &Planned, threads: usize) -> Result<Vec<u8>> {
    let n_per_row = p.shape.first().copied().unwrap_or(1);
    // `plan` checked that the product fits.
    let n = n_elements(&p.shape).unwrap_or(0);
    if n == 0 {
        return Ok(Vec::new());
    }
    let rows_of = |q: QType| {
        q.bytes_for(n_per_row)
            .ok_or_else(|| Error::tensor(&t.name, format!("rows of {n_per_row} are not whole {q} blocks")))
    };
    let (row_in, row_out) = (rows_of(t.qtype)? as usize, rows_of(p.to)? as usize);
    let n_rows = (n / n_per_row) as usize;
    if row_in * n_rows != t.data.len() {
        return Err(Error::tensor(
            &t.name,
            format!("{} bytes, expected {}", t.data.len(), row_in * n_rows),
        ));
    }
    let n_per_row = n_per_row as usize;
    let mut out = vec![0u8; p.n_bytes as usize];
    let slab_rows = (SLAB_ELEMS / n_per_row).max(1);
    for (src, dst) in t
        .data
        .chunks(slab_rows * row_in)
        .zip(out.chunks_mut(slab_rows * row_out))
    {
        let rows = src.len() / row_in;
        let per = rows.div_ceil(threads.max(1)).max(1);
        let results: Vec<Result<()>> = std::thread::scope(|s| {
            let jobs: Vec<_> = src
                .chunks(per * row_in)
                .zip(dst.chunks_mut(per * row_out))
                .map(|(src, dst)| {
                    s.spawn(move || {
                        let x = t.qtype.dequantize_to_vec(src)?;
                        p.to.quantize(&x, dst)
                    })
                })
                .collect();
            jobs.into_iter()
                .map(|j| {
                    j.join()
                        .unwrap_or_else(|_| Err(Error::tensor(&t.name, "a quantizer thread panicked")))
                })
                .collect()
        });
        results.into_iter().collect::<Result<()>>()?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_type_names_aliases_and_errors() {
        assert_eq!(FileType::parse("q4_k_m").unwrap().id, 15);
        assert_eq!(FileType::parse("Q4_K").unwrap().name, "Q4_K_M");
        assert_eq!(FileType::parse("38").unwrap().name, "MXFP4_MOE");
        let e = FileType::parse("Q4_9").unwrap_err().to_string();
        assert!(
            e.contains("'Q4_9'") && e.contains("Q4_K_M") && e.contains("MXFP4_MOE"),
            "{e}"
        );
    }

    #[test]
    fn output_metadata_moves_version_and_type_to_the_end() {
        let mut md = Metadata::new();
        md.insert("general.architecture", Value::String("llama".into()));
        md.insert("general.file_type", Value::U32(0));
        md.insert("general.quantization_version", Value::U32(2));
        md.insert("llama.block_count", Value::U32(2));
        md.insert("split.count", Value::U16(1));
        let out = output_metadata(&md, FileType::parse("Q8_0").unwrap());
        let keys: Vec<&str> = out.iter().map(|(k, _)| k).collect();
        assert_eq!(
            keys,
            [
                "general.architecture",
                "llama.block_count",
                "general.quantization_version",
                "general.file_type"
            ]
        );
        assert_eq!(out.get_u64("general.file_type").unwrap(), Some(7));
    }
}
