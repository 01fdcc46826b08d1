//! The GGUF header parser (v2 and v3). Works on a byte slice (the mmap'd file); every length,
//! count and offset is checked against the bytes that remain before anything is allocated.

use crate::error::{Error, Result};
use crate::quant::QType;

use super::value::{Metadata, Value, ValueType};

pub const GGUF_MAGIC: [u8; 4] = *b"GGUF";
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// `GGML_MAX_DIMS`.
pub const MAX_DIMS: u32 = 4;
/// Arrays nested deeper than this are refused (real files nest at most 1 deep).
pub const MAX_NESTING: u32 = 8;

/// A tensor descriptor as it stands in the header; `offset` is relative to the data section.
#[derive(Clone, Debug)]
pub struct RawTensorInfo {
    pub name: String,
    pub shape: Vec<u64>,
    pub qtype: QType,
    pub offset: u64,
    pub n_bytes: u64,
}

#[derive(Debug)]
pub struct Header {
    pub version: u32,
    pub metadata: Metadata,
    pub tensors: Vec<RawTensorInfo>,
    pub alignment: u64,
    /// Absolute file offset of the data section.
    pub data_offset: u64,
}

struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
    file: &'a str,
}

impl<'a> Cursor<'a> {
    fn err(&self, at: usize, what: impl Into<String>) -> Error {
        Error::Format {
            file: self.file.to_string(),
            offset: at as u64,
            what: what.into(),
        }
    }

    fn remaining(&self) -> u64 {
        (self.buf.len() - self.pos) as u64
    }

    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        if (n as u64) > self.remaining() {
            return Err(self.err(
                self.pos,
                format!(
                    "truncated: {what} needs {n} bytes, {} left in the file",
                    self.remaining()
                ),
            ));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N]> {
        let s = self.take(N, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    fn u32(&mut self, what: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    /// A count that must fit in the rest of the file at `min_size` bytes per item.
    fn count(&mut self, what: &str, min_size: u64) -> Result<u64> {
        let at = self.pos;
        let n = self.u64(what)?;
        if n.checked_mul(min_size).is_none_or(|b| b > self.remaining()) {
            return Err(self.err(
                at,
                format!(
                    "{what} {n} cannot fit in the {} bytes left in the file",
                    self.remaining()
                ),
            ));
        }
        Ok(n)
    }

    fn string(&mut self, what: &str) -> Result<String> {
        let at = self.pos;
        let len = self.count(&format!("{what} length"), 1)?;
        let bytes = self.take(len as usize, what)?;
        String::from_utf8(bytes.to_vec()).map_err(|e| self.err(at, format!("{what} is not valid UTF-8 ({e})")))
    }

    fn value(&mut self, ty: ValueType, depth: u32) -> Result<Value> {
        Ok(match ty {
            ValueType::U8 => Value::U8(self.array::<1>("u8")?[0]),
            ValueType::I8 => Value::I8(self.array::<1>("i8")?[0] as i8),
            ValueType::U16 => Value::U16(u16::from_le_bytes(self.array("u16")?)),
            ValueType::I16 => Value::I16(i16::from_le_bytes(self.array("i16")?)),
            ValueType::U32 => Value::U32(self.u32("u32")?),
            ValueType::I32 => Value::I32(i32::from_le_bytes(self.array("i32")?)),
            ValueType::F32 => Value::F32(f32::from_le_bytes(self.array("f32")?)),
            ValueType::U64 => Value::U64(self.u64("u64")?),
            ValueType::I64 => Value::I64(i64::from_le_bytes(self.array("i64")?)),
            ValueType::F64 => Value::F64(f64::from_le_bytes(self.array("f64")?)),
            ValueType::Bool => {
                let at = self.pos;
                match self.array::<1>("bool")?[0] {
                    0 => Value::Bool(false),
                    1 => Value::Bool(true),
                    b => return Err(self.err(at, format!("bool value {b} is neither 0 nor 1"))),
                }
            }
            ValueType::String => Value::String(self.string("string")?),
            ValueType::Array => {
                let at = self.pos;
                if depth >= MAX_NESTING {
                    return Err(self.err(at, format!("arrays nested deeper than {MAX_NESTING}")));
                }
                let id = self.u32("array element type")?;
                let elem =
                    ValueType::from_id(id).ok_or_else(|| self.err(at, format!("unknown array element type {id}")))?;
                let n = self.count("array length", elem.min_size())?;
                let mut items = Vec::with_capacity(n as usize);
                for _ in 0..n {
                    items.push(self.value(elem, depth + 1)?);
                }
                Value::Array(elem, items)
            }
        })
    }
}

/// Parses the header of one GGUF file (or part) held in `buf`. `file` names it in errors.
/// Checks every tensor's data lies inside `buf` and that no two tensors overlap.
pub fn parse_header(buf: &[u8], file: &str) -> Result<Header> {
    let mut c = Cursor { buf, pos: 0, file };
    let magic = c.array::<4>("magic")?;
    if magic != GGUF_MAGIC {
        return Err(c.err(0, format!("bad magic {magic:02x?}: not a GGUF file")));
    }
    let version = c.u32("version")?;
    match version {
        2 | 3 => {}
        1 => return Err(c.err(4, "GGUF version 1 is not supported (convert the file again)")),
        v if v.swap_bytes() == 2 || v.swap_bytes() == 3 => {
            return Err(c.err(4, "big-endian GGUF files are not supported"))
        }
        v => return Err(c.err(4, format!("unsupported GGUF version {v}"))),
    }
    // Each tensor descriptor needs at least 8 (name len) + 4 + 4 + 8 bytes.
    let n_tensors = c.count("tensor count", 24)?;
    let n_kv = c.count("metadata count", 12)?;

    let mut metadata = Metadata::new();
    for _ in 0..n_kv {
        let at = c.pos;
        let key = c.string("metadata key")?;
        let tid_at = c.pos;
        let tid = c.u32("metadata value type")?;
        let ty = ValueType::from_id(tid)
            .ok_or_else(|| c.err(tid_at, format!("metadata '{key}': unknown value type {tid}")))?;
        let value = c.value(ty, 0)?;
        if !metadata.insert(key.clone(), value) {
            return Err(c.err(at, format!("duplicate metadata key '{key}'")));
        }
    }

    let alignment = match metadata.get("general.alignment") {
        None => DEFAULT_ALIGNMENT,
        Some(v) => match v.as_u64() {
            Some(a) if a > 0 && a.is_power_of_two() && a <= 1 << 20 => a,
            _ => {
                return Err(c.err(
                    c.pos,
                    format!("general.alignment {} is not a power of two ≤ 1 MiB", v.display(1)),
                ))
            }
        },
    };

    let mut tensors = Vec::with_capacity(n_tensors as usize);
    let mut names = std::collections::HashSet::new();
    for _ in 0..n_tensors {
        let at = c.pos;
        let name = c.string("tensor name")?;
        let nd_at = c.pos;
        let n_dims = c.u32("tensor n_dims")?;
        if n_dims == 0 || n_dims > MAX_DIMS {
            return Err(c.err(
                nd_at,
                format!("tensor '{name}': n_dims {n_dims} is not in 1..={MAX_DIMS}"),
            ));
        }
        let mut shape = Vec::with_capacity(n_dims as usize);
        let mut n_elems: u64 = 1;
        for _ in 0..n_dims {
            let d_at = c.pos;
            let d = c.u64("tensor dim")?;
            n_elems = n_elems
                .checked_mul(d)
                .filter(|&n| n <= i64::MAX as u64)
                .ok_or_else(|| c.err(d_at, format!("tensor '{name}': element count overflows at dim {d}")))?;
            shape.push(d);
        }
        let t_at = c.pos;
        let tid = c.u32("tensor type")?;
        let qtype = QType::from_ggml_id(tid).ok_or_else(|| {
            c.err(
                t_at,
                format!("tensor '{name}': unknown or unsupported ggml type id {tid}"),
            )
        })?;
        if shape[0] % qtype.block_elems() as u64 != 0 {
            return Err(c.err(
                nd_at,
                format!(
                    "tensor '{name}': row length {} is not a multiple of the {} block size {}",
                    shape[0],
                    qtype,
                    qtype.block_elems()
                ),
            ));
        }
        let n_bytes = qtype
            .bytes_for(n_elems)
            .ok_or_else(|| c.err(nd_at, format!("tensor '{name}': byte size overflows")))?;
        let o_at = c.pos;
        let offset = c.u64("tensor offset")?;
        if offset % alignment != 0 {
            return Err(c.err(
                o_at,
                format!("tensor '{name}': data offset {offset} is not a multiple of the alignment {alignment}"),
            ));
        }
        if !names.insert(name.clone()) {
            return Err(c.err(at, format!("duplicate tensor name '{name}'")));
        }
        tensors.push(RawTensorInfo {
            name,
            shape,
            qtype,
            offset,
            n_bytes,
        });
    }

    let data_offset = (c.pos as u64).div_ceil(alignment) * alignment;
    let data_len = (buf.len() as u64).saturating_sub(data_offset);
    for t in &tensors {
        let end = t.offset.checked_add(t.n_bytes);
        if end.is_none_or(|e| e > data_len) {
            return Err(Error::Format {
                file: file.to_string(),
                offset: data_offset.saturating_add(t.offset),
                what: format!(
                    "tensor '{}' ({} bytes at data offset {}) runs past the end of the file ({} data bytes)",
                    t.name, t.n_bytes, t.offset, data_len
                ),
            });
        }
    }
    let mut by_offset: Vec<&RawTensorInfo> = tensors.iter().filter(|t| t.n_bytes > 0).collect();
    by_offset.sort_by_key(|t| t.offset);
    for w in by_offset.windows(2) {
        if w[0].offset + w[0].n_bytes > w[1].offset {
            return Err(Error::Format {
                file: file.to_string(),
                offset: data_offset + w[1].offset,
                what: format!("tensors '{}' and '{}' overlap", w[0].name, w[1].name),
            });
        }
    }

    Ok(Header {
        version,
        metadata,
        tensors,
        alignment,
        data_offset,
    })
}
