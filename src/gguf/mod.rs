//! GGUF files: open (mmap, split parts), inspect, write.
//!
//! Opening reads only the header pages; each tensor's bytes stay in the mapping until a backend
//! asks for them.

mod reader;
mod value;
mod writer;

pub use reader::{parse_header, Header, RawTensorInfo, DEFAULT_ALIGNMENT, GGUF_MAGIC};
pub use value::{Metadata, Value, ValueType};
pub use writer::{encode_header, GgufWriter, TensorEntry};

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::tensor::{Bytes, Tensor};

/// One file of a (possibly split) model.
#[derive(Clone, Debug)]
pub struct Part {
    pub path: PathBuf,
    pub size: u64,
    pub data_offset: u64,
}

/// An opened GGUF model: metadata from part 0, the merged tensor index of all parts.
pub struct GgufFile {
    pub version: u32,
    pub metadata: Metadata,
    pub tensors: Vec<Tensor>,
    pub parts: Vec<Part>,
    pub alignment: u64,
    by_name: HashMap<String, usize>,
}

impl GgufFile {
    /// Opens a GGUF file. A file named `…-00001-of-0000N.gguf` (or whose metadata says
    /// `split.count > 1`) opens every part of the set.
    pub fn open(path: impl AsRef<Path>) -> Result<GgufFile> {
        let path = path.as_ref();
        let first = open_part(path)?;
        let count = split_count(&first.1.metadata, path)?;
        if count <= 1 {
            return Self::assemble(vec![first]);
        }
        let paths = split_paths(path, count)?;
        let mut first = Some(first);
        let mut parts = Vec::with_capacity(paths.len());
        for (i, p) in paths.iter().enumerate() {
            let part = match first.take_if(|_| p == path) {
                Some(part) => part,
                None => open_part(p)?,
            };
            let no = part.1.metadata.get_u64("split.no")?.unwrap_or(0);
            if no != i as u64 {
                return Err(Error::Split(format!("{}: split.no is {no}, expected {i}", p.display())));
            }
            parts.push(part);
        }
        Self::assemble(parts)
    }

    /// Reads a GGUF image already in memory (tests, fuzzing).
    pub fn from_bytes(bytes: Vec<u8>, name: &str) -> Result<GgufFile> {
        let buf: Arc<dyn AsRef<[u8]> + Send + Sync> = Arc::new(bytes);
        let header = parse_header((*buf).as_ref(), name)?;
        let size = (*buf).as_ref().len() as u64;
        Self::assemble(vec![(Bytes::new(buf), header, PathBuf::from(name), size)])
    }

    fn assemble(parts: Vec<(Bytes, Header, PathBuf, u64)>) -> Result<GgufFile> {
        let mut tensors = Vec::new();
        let mut by_name = HashMap::new();
        let mut out_parts = Vec::with_capacity(parts.len());
        let mut metadata = None;
        let (mut version, mut alignment) = (3, DEFAULT_ALIGNMENT);
        for (i, (bytes, header, path, size)) in parts.into_iter().enumerate() {
            for raw in &header.tensors {
                let file_offset = header.data_offset + raw.offset;
                // The reader checked offset + size against the part's length.
                let data = bytes
                    .slice(file_offset as usize, raw.n_bytes as usize)
                    .ok_or_else(|| Error::tensor(&raw.name, "data outside its file"))?;
                if by_name.insert(raw.name.clone(), tensors.len()).is_some() {
                    return Err(Error::Split(format!(
                        "tensor '{}' appears in more than one part ({})",
                        raw.name,
                        path.display()
                    )));
                }
                tensors.push(Tensor {
                    name: raw.name.clone(),
                    qtype: raw.qtype,
                    shape: raw.shape.clone(),
                    data,
                    part: i,
                    file_offset,
                });
            }
            out_parts.push(Part {
                path,
                size,
                data_offset: header.data_offset,
            });
            if i == 0 {
                version = header.version;
                alignment = header.alignment;
                metadata = Some(header.metadata);
            }
        }
        let metadata = metadata.unwrap_or_default();
        if let Some(expected) = metadata.get_u64("split.tensors.count")? {
            if expected != tensors.len() as u64 {
                return Err(Error::Split(format!(
                    "split.tensors.count says {expected} tensors, the parts hold {}",
                    tensors.len()
                )));
            }
        }
        Ok(GgufFile {
            version,
            metadata,
            tensors,
            parts: out_parts,
            alignment,
            by_name,
        })
    }

    pub fn tensor(&self, name: &str) -> Option<&Tensor> {
        self.by_name.get(name).map(|&i| &self.tensors[i])
    }

    pub fn architecture(&self) -> Result<&str> {
        self.metadata
            .get_str("general.architecture")?
            .ok_or_else(|| Error::metadata("general.architecture", "missing"))
    }

    /// Total size of all parts on disk.
    pub fn file_bytes(&self) -> u64 {
        self.parts.iter().map(|p| p.size).sum()
    }

    pub fn n_params(&self) -> u64 {
        self.tensors.iter().map(|t| t.n_elements()).sum()
    }
}

fn open_part(path: &Path) -> Result<(Bytes, Header, PathBuf, u64)> {
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let size = file.metadata().map_err(|e| Error::io(path, e))?.len();
    if size == 0 {
        return Err(Error::Format {
            file: path.display().to_string(),
            offset: 0,
            what: "empty file".into(),
        });
    }
    // SAFETY: the mapping is read-only; a file changed underneath us by another process is
    // outside what any mmap-based loader can defend against.
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| Error::io(path, e))?;
    let buf: Arc<dyn AsRef<[u8]> + Send + Sync> = Arc::new(map);
    let header = parse_header((*buf).as_ref(), &path.display().to_string())?;
    Ok((Bytes::new(buf), header, path.to_path_buf(), size))
}

fn split_count(md: &Metadata, path: &Path) -> Result<u64> {
    let from_md = md.get_u64("split.count")?;
    let from_name = parse_split_name(path).map(|(_, _, n)| n);
    Ok(from_md.or(from_name).unwrap_or(1))
}

/// `prefix-00002-of-00005.gguf` → (prefix, 2, 5).
pub fn parse_split_name(path: &Path) -> Option<(String, u64, u64)> {
    let name = path.file_name()?.to_str()?;
    let stem = name.strip_suffix(".gguf")?;
    let (rest, count) = stem.rsplit_once("-of-")?;
    let (prefix, no) = rest.rsplit_once('-')?;
    if no.len() != 5 || count.len() != 5 {
        return None;
    }
    Some((prefix.to_string(), no.parse().ok()?, count.parse().ok()?))
}

/// The path of part `i` (0-based) of `count`, in llama.cpp's `llama_split_path` spelling.
pub fn split_path(prefix: &Path, i: u64, count: u64) -> PathBuf {
    let mut s = prefix.as_os_str().to_owned();
    s.push(format!("-{:05}-of-{:05}.gguf", i + 1, count));
    PathBuf::from(s)
}

fn split_paths(path: &Path, count: u64) -> Result<Vec<PathBuf>> {
    let (prefix, _, n) = parse_split_name(path).ok_or_else(|| {
        Error::Split(format!(
            "{}: metadata says split.count = {count}, but the name is not PREFIX-0000i-of-0000N.gguf",
            path.display()
        ))
    })?;
    if n != count {
        return Err(Error::Split(format!(
            "{}: the name says {n} parts, split.count says {count}",
            path.display()
        )));
    }
    if count > 9999 {
        return Err(Error::Split(format!("split.count {count} is absurd")));
    }
    let dir = path.parent().unwrap_or(Path::new(""));
    let prefix = dir.join(prefix);
    let paths: Vec<PathBuf> = (0..count).map(|i| split_path(&prefix, i, count)).collect();
    for p in &paths {
        if !p.is_file() {
            return Err(Error::Split(format!("part {} of {count} is missing", p.display())));
        }
    }
    Ok(paths)
}
