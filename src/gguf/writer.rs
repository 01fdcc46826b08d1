//! Writes GGUF v3 files, single or split (llama.cpp's `gguf-split` layout: every part carries
//! `split.no`, `split.count`, `split.tensors.count`; part 0 also carries all other metadata).

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::quant::QType;

use super::value::{Metadata, Value};
use super::{split_path, DEFAULT_ALIGNMENT, GGUF_MAGIC};

struct PendingTensor {
    name: String,
    qtype: QType,
    shape: Vec<u64>,
    data: Vec<u8>,
}

#[derive(Default)]
pub struct GgufWriter {
    pub metadata: Metadata,
    tensors: Vec<PendingTensor>,
    alignment: Option<u64>,
}

impl GgufWriter {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn set(&mut self, key: &str, value: Value) -> &mut Self {
        self.metadata.insert(key, value);
        self
    }

    pub fn set_alignment(&mut self, alignment: u64) -> &mut Self {
        self.alignment = Some(alignment);
        self.metadata.insert("general.alignment", Value::U32(alignment as u32));
        self
    }

    /// Adds a tensor whose bytes are already encoded as `qtype`. `shape` is in ggml order.
    pub fn add_raw(&mut self, name: &str, qtype: QType, shape: &[u64], data: Vec<u8>) -> Result<&mut Self> {
        let n: u64 = shape.iter().product();
        let want = qtype
            .bytes_for(n)
            .ok_or_else(|| Error::tensor(name, format!("{n} elements are not whole {qtype} blocks")))?;
        if want != data.len() as u64 {
            return Err(Error::tensor(
                name,
                format!("{} bytes given, {qtype} {shape:?} needs {want}", data.len()),
            ));
        }
        if shape.first().is_some_and(|&r| r % qtype.block_elems() as u64 != 0) {
            return Err(Error::tensor(
                name,
                format!("row length is not a multiple of the {qtype} block"),
            ));
        }
        self.tensors.push(PendingTensor {
            name: name.to_string(),
            qtype,
            shape: shape.to_vec(),
            data,
        });
        Ok(self)
    }

    /// Adds a tensor from f32 values, encoded with `qtype`'s reference quantizer.
    pub fn add_f32(&mut self, name: &str, qtype: QType, shape: &[u64], values: &[f32]) -> Result<&mut Self> {
        let data = qtype.quantize_to_vec(values)?;
        self.add_raw(name, qtype, shape, data)
    }

    fn alignment(&self) -> u64 {
        self.alignment.unwrap_or(DEFAULT_ALIGNMENT)
    }

    /// The whole file as bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let refs: Vec<&PendingTensor> = self.tensors.iter().collect();
        encode(&self.metadata, &refs, self.alignment())
    }

    pub fn write(&self, path: &Path) -> Result<()> {
        write_file(path, &self.to_bytes())
    }

    /// Writes `n_parts` files `prefix-0000i-of-0000N.gguf`, tensors spread evenly in order.
    /// Returns their paths.
    pub fn write_split(&self, prefix: &Path, n_parts: usize) -> Result<Vec<PathBuf>> {
        if n_parts == 0 || n_parts > self.tensors.len().max(1) {
            return Err(Error::InvalidArgument(format!(
                "cannot split {} tensors into {n_parts} parts",
                self.tensors.len()
            )));
        }
        let per = self.tensors.len().div_ceil(n_parts);
        let mut paths = Vec::with_capacity(n_parts);
        for i in 0..n_parts {
            let chunk: Vec<&PendingTensor> = self.tensors.iter().skip(i * per).take(per).collect();
            let mut md = if i == 0 { self.metadata.clone() } else { Metadata::new() };
            md.insert("split.no", Value::U16(i as u16));
            md.insert("split.count", Value::U16(n_parts as u16));
            md.insert("split.tensors.count", Value::I32(self.tensors.len() as i32));
            if i != 0 && self.alignment.is_some() {
                md.insert("general.alignment", Value::U32(self.alignment() as u32));
            }
            let path = split_path(prefix, i as u64, n_parts as u64);
            write_file(&path, &encode(&md, &chunk, self.alignment()))?;
            paths.push(path);
        }
        Ok(paths)
    }
}

/// Writes to a temporary file beside `path`, then renames: a failed write never leaves a
/// half-written model where a good one was.
fn write_file(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension("gguf.partial");
    let mut f = std::fs::File::create(&tmp).map_err(|e| Error::io(&tmp, e))?;
    f.write_all(bytes).map_err(|e| Error::io(&tmp, e))?;
    f.sync_all().map_err(|e| Error::io(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| Error::io(path, e))
}

fn encode(md: &Metadata, tensors: &[&PendingTensor], alignment: u64) -> Vec<u8> {
    let entries: Vec<TensorEntry> = tensors
        .iter()
        .map(|t| TensorEntry {
            name: &t.name,
            qtype: t.qtype,
            shape: &t.shape,
            n_bytes: t.data.len() as u64,
        })
        .collect();
    let mut out = encode_header(md, &entries, alignment);
    for t in tensors {
        out.extend_from_slice(&t.data);
        out.resize(out.len().div_ceil(alignment as usize) * alignment as usize, 0);
    }
    out
}

/// One tensor's entry in a GGUF header, for writers that stream the data after it.
pub struct TensorEntry<'a> {
    pub name: &'a str,
    pub qtype: QType,
    /// ggml order (`ne[0]` first).
    pub shape: &'a [u64],
    pub n_bytes: u64,
}

/// The header of a GGUF v3 file (magic, counts, metadata, tensor infos), zero-padded to
/// `alignment`: the tensors' bytes follow in order, each padded to `alignment`
/// (`gguf_get_meta_data` in ggml's layout).
pub fn encode_header(md: &Metadata, tensors: &[TensorEntry], alignment: u64) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&GGUF_MAGIC);
    out.extend_from_slice(&3u32.to_le_bytes());
    out.extend_from_slice(&(tensors.len() as u64).to_le_bytes());
    out.extend_from_slice(&(md.len() as u64).to_le_bytes());
    for (k, v) in md.iter() {
        put_str(&mut out, k);
        out.extend_from_slice(&(v.value_type() as u32).to_le_bytes());
        put_value(&mut out, v);
    }
    let align = |x: u64| x.div_ceil(alignment) * alignment;
    let mut offset = 0u64;
    for t in tensors {
        put_str(&mut out, t.name);
        out.extend_from_slice(&(t.shape.len() as u32).to_le_bytes());
        for d in t.shape {
            out.extend_from_slice(&d.to_le_bytes());
        }
        out.extend_from_slice(&t.qtype.ggml_id().to_le_bytes());
        out.extend_from_slice(&offset.to_le_bytes());
        offset = align(offset + t.n_bytes);
    }
    out.resize(align(out.len() as u64) as usize, 0);
    out
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn put_value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::U8(x) => out.push(*x),
        Value::I8(x) => out.push(*x as u8),
        Value::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::Bool(x) => out.push(*x as u8),
        Value::String(s) => put_str(out, s),
        Value::Array(t, items) => {
            out.extend_from_slice(&(*t as u32).to_le_bytes());
            out.extend_from_slice(&(items.len() as u64).to_le_bytes());
            for it in items {
                put_value(out, it);
            }
        }
        Value::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
    }
}
