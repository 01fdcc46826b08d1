//! The qtype table and the reference (scalar) block codecs for every GGUF tensor type.
//!
//! One row per type in [`TABLE`]; everything else (ids, names, sizes, row sizes, the codecs)
//! derives from it. The scalar codecs here are the numerical reference every kernel is tested
//! against; they follow ggml's `ggml-quants.c` line by line.

mod blocks;
mod float;
mod iq;
mod kquants;
mod legacy;

pub use blocks::*;

use crate::error::{Error, Result};

/// A tensor storage type. Spelled as ggml does in strings (`q4_k`), CamelCase-ish here.
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum QType {
    F32,
    F16,
    BF16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q8_1,
    Q2K,
    Q3K,
    Q4K,
    Q5K,
    Q6K,
    Q8K,
    IQ4NL,
    MXFP4,
}

/// Decodes `n_blocks` whole blocks: `src.len() == n * block_bytes`, `dst.len() == n * block_elems`.
pub type DequantFn = fn(src: &[u8], dst: &mut [f32]);
/// Encodes whole blocks: `src.len() == n * block_elems`, `dst.len() == n * block_bytes`.
pub type QuantFn = fn(src: &[f32], dst: &mut [u8]);

pub struct QTypeInfo {
    pub qtype: QType,
    /// `enum ggml_type` value.
    pub ggml_id: u32,
    pub block_elems: usize,
    pub block_bytes: usize,
    /// ggml's spelling (`ggml_type_name`).
    pub name: &'static str,
    pub dequant: DequantFn,
    /// The reference quantizer (`quantize_row_*_ref`), where there is one.
    pub quant: Option<QuantFn>,
}

macro_rules! row {
    ($q:ident, $id:expr, $elems:expr, $bytes:expr, $name:expr, $deq:path, $quant:expr) => {
        QTypeInfo {
            qtype: QType::$q,
            ggml_id: $id,
            block_elems: $elems,
            block_bytes: $bytes,
            name: $name,
            dequant: $deq,
            quant: $quant,
        }
    };
}

/// The table. Block sizes are asserted against the `#[repr(C)]` structs in `blocks.rs`.
pub static TABLE: [QTypeInfo; 17] = [
    row!(F32, 0, 1, 4, "f32", float::dequant_f32, Some(float::quant_f32)),
    row!(F16, 1, 1, 2, "f16", float::dequant_f16, Some(float::quant_f16)),
    row!(BF16, 30, 1, 2, "bf16", float::dequant_bf16, Some(float::quant_bf16)),
    row!(Q4_0, 2, 32, 18, "q4_0", legacy::dequant_q4_0, Some(legacy::quant_q4_0)),
    row!(Q4_1, 3, 32, 20, "q4_1", legacy::dequant_q4_1, Some(legacy::quant_q4_1)),
    row!(Q5_0, 6, 32, 22, "q5_0", legacy::dequant_q5_0, Some(legacy::quant_q5_0)),
    row!(Q5_1, 7, 32, 24, "q5_1", legacy::dequant_q5_1, Some(legacy::quant_q5_1)),
    row!(Q8_0, 8, 32, 34, "q8_0", legacy::dequant_q8_0, Some(legacy::quant_q8_0)),
    row!(Q8_1, 9, 32, 36, "q8_1", legacy::dequant_q8_1, Some(legacy::quant_q8_1)),
    row!(
        Q2K,
        10,
        256,
        84,
        "q2_K",
        kquants::dequant_q2_k,
        Some(kquants::quant_q2_k)
    ),
    row!(
        Q3K,
        11,
        256,
        110,
        "q3_K",
        kquants::dequant_q3_k,
        Some(kquants::quant_q3_k)
    ),
    row!(
        Q4K,
        12,
        256,
        144,
        "q4_K",
        kquants::dequant_q4_k,
        Some(kquants::quant_q4_k)
    ),
    row!(
        Q5K,
        13,
        256,
        176,
        "q5_K",
        kquants::dequant_q5_k,
        Some(kquants::quant_q5_k)
    ),
    row!(
        Q6K,
        14,
        256,
        210,
        "q6_K",
        kquants::dequant_q6_k,
        Some(kquants::quant_q6_k)
    ),
    row!(
        Q8K,
        15,
        256,
        292,
        "q8_K",
        kquants::dequant_q8_k,
        Some(kquants::quant_q8_k)
    ),
    row!(IQ4NL, 20, 32, 18, "iq4_nl", iq::dequant_iq4_nl, Some(iq::quant_iq4_nl)),
    row!(MXFP4, 39, 32, 17, "mxfp4", iq::dequant_mxfp4, Some(iq::quant_mxfp4)),
];

impl QType {
    pub const ALL: [QType; 17] = {
        let mut all = [QType::F32; 17];
        let mut i = 0;
        while i < 17 {
            all[i] = TABLE[i].qtype;
            i += 1;
        }
        all
    };

    pub fn info(self) -> &'static QTypeInfo {
        // The table is in enum order (checked by a test), so this is an index.
        &TABLE[self as usize]
    }

    pub fn from_ggml_id(id: u32) -> Option<QType> {
        TABLE.iter().find(|r| r.ggml_id == id).map(|r| r.qtype)
    }

    /// Parses ggml's spelling, case-insensitively (`q4_k`, `Q4_K`, `bf16`).
    pub fn from_name(name: &str) -> Result<QType> {
        TABLE
            .iter()
            .find(|r| r.name.eq_ignore_ascii_case(name))
            .map(|r| r.qtype)
            .ok_or_else(|| Error::UnknownQTypeName(name.to_string()))
    }

    pub fn name(self) -> &'static str {
        self.info().name
    }
    pub fn ggml_id(self) -> u32 {
        self.info().ggml_id
    }
    pub fn block_elems(self) -> usize {
        self.info().block_elems
    }
    pub fn block_bytes(self) -> usize {
        self.info().block_bytes
    }
    pub fn is_quantized(self) -> bool {
        !matches!(self, QType::F32 | QType::F16 | QType::BF16)
    }

    /// Bytes taken by `n_elems` values, or `None` if `n_elems` is not a whole number of blocks
    /// or the size overflows.
    pub fn bytes_for(self, n_elems: u64) -> Option<u64> {
        let (be, bb) = (self.block_elems() as u64, self.block_bytes() as u64);
        if !n_elems.is_multiple_of(be) {
            return None;
        }
        (n_elems / be).checked_mul(bb)
    }

    /// Decodes a whole number of blocks into f32.
    pub fn dequantize(self, src: &[u8], dst: &mut [f32]) -> Result<()> {
        let info = self.info();
        let n = src.len() / info.block_bytes;
        if !src.len().is_multiple_of(info.block_bytes) || dst.len() != n * info.block_elems {
            return Err(Error::InvalidArgument(format!(
                "{}: {} bytes do not decode into {} values",
                info.name,
                src.len(),
                dst.len()
            )));
        }
        (info.dequant)(src, dst);
        Ok(())
    }

    /// Encodes a whole number of blocks with the reference quantizer.
    pub fn quantize(self, src: &[f32], dst: &mut [u8]) -> Result<()> {
        let info = self.info();
        let quant = info.quant.ok_or_else(|| Error::Unsupported {
            qtype: info.name,
            what: "quantization".into(),
        })?;
        let n = src.len() / info.block_elems;
        if !src.len().is_multiple_of(info.block_elems) || dst.len() != n * info.block_bytes {
            return Err(Error::InvalidArgument(format!(
                "{}: {} values do not encode into {} bytes",
                info.name,
                src.len(),
                dst.len()
            )));
        }
        quant(src, dst);
        Ok(())
    }

    /// Convenience: quantize into a new buffer.
    pub fn quantize_to_vec(self, src: &[f32]) -> Result<Vec<u8>> {
        let n = src.len() / self.block_elems();
        let mut out = vec![0u8; n * self.block_bytes()];
        self.quantize(src, &mut out)?;
        Ok(out)
    }

    /// Convenience: dequantize into a new buffer.
    pub fn dequantize_to_vec(self, src: &[u8]) -> Result<Vec<f32>> {
        let n = src.len() / self.block_bytes();
        let mut out = vec![0f32; n * self.block_elems()];
        self.dequantize(src, &mut out)?;
        Ok(out)
    }
}

impl std::fmt::Display for QType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_in_enum_order_and_ids_are_unique() {
        for (i, row) in TABLE.iter().enumerate() {
            assert_eq!(row.qtype as usize, i, "{}", row.name);
            assert_eq!(QType::from_ggml_id(row.ggml_id), Some(row.qtype));
            assert_eq!(QType::from_name(row.name).unwrap(), row.qtype);
        }
        assert!(QType::from_ggml_id(16).is_none()); // iq2_xxs: no codec here
        assert!(QType::from_name("q4_9").is_err());
    }

    #[test]
    fn bytes_for_checks_blocks_and_overflow() {
        assert_eq!(QType::Q4_0.bytes_for(64), Some(36));
        assert_eq!(QType::Q4_0.bytes_for(33), None);
        assert_eq!(QType::F32.bytes_for(u64::MAX), None);
    }
}
