//! A tensor as the loader hands it over: name, qtype, shape and raw bytes borrowed from the
//! mapped file. Nothing here copies or decodes weight data.

use std::sync::Arc;

use crate::quant::QType;

/// Shared, immutable bytes: a window into an mmap'd file (or an in-memory buffer the tests
/// build). Cloning is cheap; the mapping lives as long as any window into it.
#[derive(Clone)]
pub struct Bytes {
    buf: Arc<dyn AsRef<[u8]> + Send + Sync>,
    start: usize,
    len: usize,
}

impl Bytes {
    pub fn new(buf: Arc<dyn AsRef<[u8]> + Send + Sync>) -> Self {
        let len = (*buf).as_ref().len();
        Bytes { buf, start: 0, len }
    }

    pub fn from_vec(v: Vec<u8>) -> Self {
        Self::new(Arc::new(v))
    }

    /// A sub-window; `None` if it does not lie inside this one.
    pub fn slice(&self, start: usize, len: usize) -> Option<Bytes> {
        let end = start.checked_add(len)?;
        (end <= self.len).then(|| Bytes {
            buf: self.buf.clone(),
            start: self.start + start,
            len,
        })
    }

    pub fn as_slice(&self) -> &[u8] {
        &(*self.buf).as_ref()[self.start..self.start + self.len]
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl std::ops::Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl std::fmt::Debug for Bytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Bytes({} bytes)", self.len)
    }
}

/// One tensor. `shape` is in ggml order: `shape[0]` is the contiguous (row) dimension.
#[derive(Clone, Debug)]
pub struct Tensor {
    pub name: String,
    pub qtype: QType,
    pub shape: Vec<u64>,
    pub data: Bytes,
    /// Which file part holds it (0 for single files) and where its data starts in that part.
    pub part: usize,
    pub file_offset: u64,
}

impl Tensor {
    /// An F32 tensor holding `values` (`shape` in ggml order), in memory rather than a file.
    pub fn from_f32(name: &str, shape: &[u64], values: &[f32]) -> Tensor {
        Tensor {
            name: name.into(),
            qtype: QType::F32,
            shape: shape.to_vec(),
            data: Bytes::from_vec(bytemuck::cast_slice(values).to_vec()),
            part: 0,
            file_offset: 0,
        }
    }

    pub fn n_elements(&self) -> u64 {
        self.shape.iter().product()
    }

    /// Elements per row (`ne[0]`).
    pub fn row_len(&self) -> usize {
        self.shape.first().copied().unwrap_or(1) as usize
    }

    /// Number of rows (product of `ne[1..]`).
    pub fn n_rows(&self) -> usize {
        self.shape.iter().skip(1).product::<u64>() as usize
    }

    /// Bytes per row.
    pub fn row_bytes(&self) -> usize {
        self.row_len() / self.qtype.block_elems() * self.qtype.block_bytes()
    }

    pub fn bytes(&self) -> &[u8] {
        self.data.as_slice()
    }

    /// Decodes rows `[first, first + n)` into f32 (reference codec; used by tests and get_rows).
    pub fn dequantize_rows(&self, first: usize, n: usize, out: &mut [f32]) -> crate::Result<()> {
        let rb = self.row_bytes();
        let bytes = self
            .bytes()
            .get(first * rb..(first + n) * rb)
            .ok_or_else(|| crate::Error::tensor(&self.name, format!("rows {first}..{} out of range", first + n)))?;
        self.qtype.dequantize(bytes, out)
    }

    pub fn to_f32(&self) -> crate::Result<Vec<f32>> {
        self.qtype.dequantize_to_vec(self.bytes())
    }
}
