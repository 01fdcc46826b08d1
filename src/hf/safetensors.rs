//! The safetensors container: an 8-byte little-endian header length N, N bytes of JSON
//! (`{"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {…}}`), then the
//! data; offsets are relative to the data's start. Format: `huggingface/safetensors`, `README.md`.
//!
//! Everything in the header is checked before anything is sliced: the header length against a
//! cap and the file, each dtype, each offset pair against the data (ordered, inside, exactly
//! dtype × shape bytes long), and no two tensors overlapping. F32, F16 and BF16 become those
//! qtypes; U8 (the blocks and scales of MXFP4 checkpoints) is kept as raw bytes for the loader
//! to assemble; the bytes stay in the mapping.

use std::path::Path;
use std::sync::Arc;

use serde_json::Value as J;

use crate::error::{Error, Result};
use crate::quant::QType;
use crate::tensor::{Bytes, Tensor};

/// The reference implementation's cap (`MAX_HEADER_SIZE`, 100 MB).
pub const MAX_HEADER_BYTES: u64 = 100_000_000;
/// More dimensions than any weight has; a hostile header must not make us multiply 10⁶ of them.
const MAX_RANK: usize = 8;

/// One tensor's entry, checked. `shape` is as written (row-major, outermost first).
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    pub name: String,
    /// `None`: dtype U8, raw bytes ([`SafetensorsFile::raw_u8`]).
    pub qtype: Option<QType>,
    pub shape: Vec<u64>,
    /// Offsets into the data section.
    pub begin: u64,
    pub end: u64,
    /// An integer buffer some exports keep beside the weights (BERT's
    /// `embeddings.position_ids`): recomputable, never read.
    pub buffer: bool,
}

#[derive(Clone, Debug, Default)]
pub struct Header {
    /// Where the data starts in the file: 8 + N.
    pub data_offset: u64,
    /// In file order of their data.
    pub entries: Vec<Entry>,
    /// `__metadata__` (string → string).
    pub metadata: Vec<(String, String)>,
}

/// Parses and checks the header of a safetensors image of `buf.len()` bytes (`file` names it in
/// errors).
pub fn parse_header(buf: &[u8], file: &str) -> Result<Header> {
    let err = |offset: u64, what: String| Error::Format {
        file: file.to_string(),
        offset,
        what,
    };
    let len_bytes: [u8; 8] = buf
        .get(..8)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| err(0, format!("{} bytes is too short for the header length", buf.len())))?;
    let n = u64::from_le_bytes(len_bytes);
    let file_len = buf.len() as u64;
    if n > MAX_HEADER_BYTES {
        return Err(err(
            0,
            format!("header length {n} is over the {MAX_HEADER_BYTES}-byte cap"),
        ));
    }
    if n > file_len - 8 {
        return Err(err(
            0,
            format!("header length {n} runs past the end of the file ({file_len} bytes)"),
        ));
    }
    let data_offset = 8 + n;
    let json = &buf[8..data_offset as usize];
    let root: serde_json::Map<String, J> =
        serde_json::from_slice(json).map_err(|e| err(8, format!("header is not a JSON object: {e}")))?;
    let data_len = file_len - data_offset;

    let mut header = Header {
        data_offset,
        ..Default::default()
    };
    for (name, v) in root {
        if name == "__metadata__" {
            header.metadata = metadata(&v).map_err(|what| err(8, what))?;
            continue;
        }
        let e = entry(&name, &v, data_len).map_err(|what| err(8, format!("tensor '{name}': {what}")))?;
        header.entries.push(e);
    }
    header.entries.sort_by_key(|e| (e.begin, e.end));
    // Sorted by start, each non-empty tensor must end before the next one begins.
    let mut prev: Option<&Entry> = None;
    for e in header.entries.iter().filter(|e| e.end > e.begin) {
        if let Some(p) = prev {
            if e.begin < p.end {
                return Err(err(
                    data_offset + e.begin,
                    format!(
                        "tensors '{}' [{}, {}) and '{}' [{}, {}) overlap",
                        p.name, p.begin, p.end, e.name, e.begin, e.end
                    ),
                ));
            }
        }
        prev = Some(e);
    }
    Ok(header)
}

fn metadata(v: &J) -> std::result::Result<Vec<(String, String)>, String> {
    let obj = v
        .as_object()
        .ok_or_else(|| format!("__metadata__ is {}, not an object", kind(v)))?;
    obj.iter()
        .map(|(k, v)| match v {
            J::String(s) => Ok((k.clone(), s.clone())),
            other => Err(format!("__metadata__ '{k}' is {}, not a string", kind(other))),
        })
        .collect()
}

fn entry(name: &str, v: &J, data_len: u64) -> std::result::Result<Entry, String> {
    let obj = v
        .as_object()
        .ok_or_else(|| format!("entry is {}, not an object", kind(v)))?;
    let dtype = match obj.get("dtype") {
        Some(J::String(s)) => s.as_str(),
        Some(other) => return Err(format!("dtype is {}, not a string", kind(other))),
        None => return Err("no dtype".into()),
    };
    let buffer = matches!(dtype, "I64" | "I32") && name.ends_with("position_ids");
    let qtype = if dtype == "U8" || buffer {
        None
    } else {
        Some(dtype_qtype(dtype)?)
    };
    let shape: Vec<u64> = match obj.get("shape") {
        Some(J::Array(dims)) if dims.len() <= MAX_RANK => dims
            .iter()
            .map(|d| {
                d.as_u64()
                    .ok_or_else(|| format!("shape entry {d} is not a non-negative integer"))
            })
            .collect::<std::result::Result<_, _>>()?,
        Some(J::Array(dims)) => return Err(format!("rank {} is over the cap of {MAX_RANK}", dims.len())),
        Some(other) => return Err(format!("shape is {}, not an array", kind(other))),
        None => return Err("no shape".into()),
    };
    let (begin, end) = match obj.get("data_offsets") {
        Some(J::Array(o)) if o.len() == 2 => match (o[0].as_u64(), o[1].as_u64()) {
            (Some(b), Some(e)) => (b, e),
            _ => {
                return Err(format!(
                    "data_offsets {v} are not two non-negative integers",
                    v = J::Array(o.clone())
                ))
            }
        },
        Some(other) => return Err(format!("data_offsets {other} is not a pair")),
        None => return Err("no data_offsets".into()),
    };
    if begin > end {
        return Err(format!("data_offsets [{begin}, {end}] are reversed"));
    }
    if end > data_len {
        return Err(format!(
            "data_offsets [{begin}, {end}] lie outside the {data_len} bytes of data"
        ));
    }
    let n_elems = shape
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| format!("shape {shape:?} overflows"))?;
    let elem = match (buffer, dtype) {
        (true, "I64") => 8,
        (true, _) => 4,
        _ => qtype.map_or(1, |q| q.block_bytes()),
    };
    let want = n_elems
        .checked_mul(elem as u64)
        .ok_or_else(|| format!("shape {shape:?} overflows"))?;
    if want != end - begin {
        return Err(format!(
            "dtype {dtype} × shape {shape:?} is {want} bytes, but data_offsets [{begin}, {end}] hold {}",
            end - begin
        ));
    }
    Ok(Entry {
        name: name.to_string(),
        qtype,
        shape,
        begin,
        end,
        buffer,
    })
}

/// The safetensors dtypes we run. Others (integers, fp8, bool, …) are refused by name.
fn dtype_qtype(dtype: &str) -> std::result::Result<QType, String> {
    Ok(match dtype {
        "F32" => QType::F32,
        "F16" => QType::F16,
        "BF16" => QType::BF16,
        "F64" | "I64" | "U64" | "I32" | "U32" | "I16" | "U16" | "I8" | "BOOL" | "F8_E4M3" | "F8_E5M2" | "F8_E8M0"
        | "F4" | "F6_E2M3" | "F6_E3M2" | "C64" => {
            return Err(format!("dtype {dtype} is not supported (supported: F32, F16, BF16)"))
        }
        other => return Err(format!("unknown dtype '{other}'")),
    })
}

fn kind(v: &J) -> &'static str {
    match v {
        J::Null => "null",
        J::Bool(_) => "a bool",
        J::Number(_) => "a number",
        J::String(_) => "a string",
        J::Array(_) => "an array",
        J::Object(_) => "an object",
    }
}

/// One mapped safetensors file.
pub struct SafetensorsFile {
    pub size: u64,
    pub header: Header,
    bytes: Bytes,
}

impl SafetensorsFile {
    pub fn open(path: &Path) -> Result<SafetensorsFile> {
        let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
        let size = file.metadata().map_err(|e| Error::io(path, e))?.len();
        let name = path.display().to_string();
        if size < 8 {
            return Err(Error::Format {
                file: name,
                offset: 0,
                what: format!("{size} bytes is too short for the header length"),
            });
        }
        // SAFETY: read-only mapping; see `gguf::open_part` on files changed underneath us.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| Error::io(path, e))?;
        let buf: Arc<dyn AsRef<[u8]> + Send + Sync> = Arc::new(map);
        Self::from_buf(buf, &name)
    }

    /// A safetensors image already in memory (tests).
    pub fn from_bytes(bytes: Vec<u8>, name: &str) -> Result<SafetensorsFile> {
        Self::from_buf(Arc::new(bytes), name)
    }

    fn from_buf(buf: Arc<dyn AsRef<[u8]> + Send + Sync>, name: &str) -> Result<SafetensorsFile> {
        let header = parse_header((*buf).as_ref(), name)?;
        let bytes = Bytes::new(buf);
        Ok(SafetensorsFile {
            size: bytes.len() as u64,
            header,
            bytes,
        })
    }

    /// The tensors, named as in the file, shapes in ggml order (innermost first), bytes
    /// borrowed from the mapping. `part` is this file's index in a sharded set.
    pub fn tensors(&self, part: usize) -> Result<Vec<Tensor>> {
        self.header
            .entries
            .iter()
            .filter_map(|e| e.qtype.map(|q| (e, q)))
            .map(|(e, qtype)| {
                let file_offset = self.header.data_offset + e.begin;
                let data = self
                    .bytes
                    .slice(file_offset as usize, (e.end - e.begin) as usize)
                    .ok_or_else(|| Error::tensor(&e.name, "data outside its file"))?;
                Ok(Tensor {
                    name: e.name.clone(),
                    qtype,
                    shape: e.shape.iter().rev().copied().collect(),
                    data,
                    part,
                    file_offset,
                })
            })
            .collect()
    }

    /// The U8 tensors: (name, shape in ggml order, bytes borrowed from the mapping).
    pub fn raw_u8(&self) -> Result<Vec<(String, Vec<u64>, Bytes)>> {
        self.header
            .entries
            .iter()
            .filter(|e| e.qtype.is_none() && !e.buffer)
            .map(|e| {
                let data = self
                    .bytes
                    .slice((self.header.data_offset + e.begin) as usize, (e.end - e.begin) as usize)
                    .ok_or_else(|| Error::tensor(&e.name, "data outside its file"))?;
                Ok((e.name.clone(), e.shape.iter().rev().copied().collect(), data))
            })
            .collect()
    }
}
