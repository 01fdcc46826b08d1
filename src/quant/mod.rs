//! The qtype table and the reference (scalar) block codecs for every GGUF tensor type.
//!
//! One row per type in [`TABLE`]; everything else derives from it: the enum, [`QType::COUNT`]
//! and [`QType::ALL`], ids, names, sizes, row sizes, the codecs, each weight type's activation
//! partner ([`QTypeInfo::act`], read by the CPU dot products and the GPU matmuls alike), which
//! backends read it as weights ([`Role`]: the GPU kernel lists, the CUDA X-macro lists and the
//! wgpu quant file lookup filter on it) and the round-trip error the quant tests bound
//! ([`QTypeInfo::nmse`]). The scalar codecs here are the numerical reference every kernel is
//! tested against; they follow ggml's `ggml-quants.c` line by line.
//!
//! Adding a weight qtype (here `q4_2`, read by every backend) touches these files:
//! 1. its row in [`TABLE`] (this file): ggml id, block elements and bytes, ggml's name, the
//!    activation partner (ggml's `vec_dot_type`), role `Weight`, and its round-trip nmse (start
//!    with 1.0; `cargo test --test suite quant::round_trip_nmse -- --nocapture` prints it);
//! 2. its codec: the `#[repr(C)]` block struct and size assertion in `blocks.rs`, the reference
//!    dequant/quant in `legacy.rs` (or `kquants.rs`, `iq.rs`, a new file for a new family), and
//!    its vectors `tests/data/quant/{real_blocks,quantize}.Q4_2.json` (from ggml);
//! 3. the CPU: its scalar dot in `src/backend/cpu/dot/scalar.rs` (`DOT` must be in table order:
//!    checked at compile time), and its x86 dot in `src/backend/cpu/dot/avx2/mod.rs`
//!    (`instantiate!`, which avx512 compiles again; a test checks that x86 covers every weight
//!    type). A neon kernel is optional: types without one take the scalar dot;
//! 4. wgpu: `shaders/quant/q4_2.wgsl`, and its name in the file table of
//!    `src/backend/wgpu/shaders.rs` (tested against the table and the folder);
//! 5. CUDA: its `qt_q4_2` traits in `cuda/quant.cuh` (and, with a q8_1 partner, an `act_s`
//!    specialisation there, as the WGSL file defines `qmin`).
//!
//! Everything else derives from the row: `QType::ALL` and every per-qtype array's size, the
//! GPU gate, the activation format each matmul quantizes to on every backend, the GPU variants
//! and the CUDA `MF_MATRIX_QTYPES` list of entry points (generated), the NVRTC, naga and op
//! tests, the quant tests. A missing piece is a compile error or a failing test naming the type.
//! A type only the CPU reads has role `CpuWeight` and skips steps 4 and 5.

pub(crate) mod blocks;
mod float;
mod iq;
mod kquants;
mod legacy;

pub(crate) use blocks::*;

use crate::error::{Error, Result};

/// Decodes `n_blocks` whole blocks: `src.len() == n * block_bytes`, `dst.len() == n * block_elems`.
pub type DequantFn = fn(src: &[u8], dst: &mut [f32]);
/// Encodes whole blocks: `src.len() == n * block_elems`, `dst.len() == n * block_bytes`.
pub type QuantFn = fn(src: &[f32], dst: &mut [u8]);

/// What a qtype is for, and which backends' kernels read it as weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Weights every backend reads: the CPU dot products and the GPU kernels (wgpu, CUDA).
    Weight,
    /// Weights only the CPU reads; the GPU gates refuse them.
    CpuWeight,
    /// An activation format only (ggml quantizes activations to it; no model stores weights in
    /// it). The CPU gate refuses it as a weight.
    Activation,
}

pub struct QTypeInfo {
    pub qtype: QType,
    /// `enum ggml_type` value.
    pub ggml_id: u32,
    pub block_elems: usize,
    pub block_bytes: usize,
    /// ggml's spelling (`ggml_type_name`).
    pub name: &'static str,
    /// The format a matmul rounds its activations to before it meets weights of this type:
    /// ggml's `vec_dot_type` (q8_0, q8_1 or q8_K), so that every backend multiplies the same
    /// activation values. f32 for float weights (ggml rounds them to f16/bf16; the weight row
    /// is the memory traffic either way, and f32 keeps the product exact). q8_1 and q8_K, which
    /// ggml only uses as activations, get q8_0 and q8_K so that every type has a CPU kernel.
    pub act: QType,
    pub role: Role,
    /// Normalised squared error `Σ(x - y)² / Σx²` of quantize → dequantize with the reference
    /// codec on N(0, 1) samples (16 × 256 of them, measured when the row was added); the quant
    /// tests bound it at 1.5×.
    pub nmse: f64,
    pub dequant: DequantFn,
    /// The reference quantizer (`quantize_row_*_ref`), where there is one.
    pub quant: Option<QuantFn>,
}

/// Defines [`QType`] (variants in row order), [`QType::COUNT`], [`QType::ALL`] and [`TABLE`]
/// from one list of rows, so that a variant cannot lack a row nor the table a variant.
macro_rules! qtypes {
    ($($q:ident = $id:literal, $elems:literal, $bytes:literal, $name:literal, $act:ident, $role:ident,
        $nmse:literal, $deq:path, $quant:expr;)*) => {
        /// A tensor storage type. Spelled as ggml does in strings (`q4_k`), CamelCase-ish here.
        #[allow(non_camel_case_types)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum QType {
            $($q,)*
        }

        impl QType {
            /// The number of qtypes: the length of every per-qtype array.
            pub const COUNT: usize = [$(QType::$q),*].len();
            /// Every qtype, in table order.
            pub const ALL: [QType; QType::COUNT] = [$(QType::$q),*];
        }

        /// The table, in enum order. Block sizes are asserted against the `#[repr(C)]` structs
        /// in `blocks.rs`.
        pub static TABLE: [QTypeInfo; QType::COUNT] = [$(QTypeInfo {
            qtype: QType::$q,
            ggml_id: $id,
            block_elems: $elems,
            block_bytes: $bytes,
            name: $name,
            act: QType::$act,
            role: Role::$role,
            nmse: $nmse,
            dequant: $deq,
            quant: $quant,
        },)*];
    };
}

qtypes! {
//  type    ggml elems bytes name     act   role        nmse     dequant, quant
    F32   =  0,   1,   4, "f32",    F32,  Weight,     0.0,     float::dequant_f32, Some(float::quant_f32);
    F16   =  1,   1,   2, "f16",    F32,  Weight,     4.24e-8, float::dequant_f16, Some(float::quant_f16);
    BF16  = 30,   1,   2, "bf16",   F32,  Weight,     2.75e-6, float::dequant_bf16, Some(float::quant_bf16);
    Q4_0  =  2,  32,  18, "q4_0",   Q8_0, Weight,     7.51e-3, legacy::dequant_q4_0, Some(legacy::quant_q4_0);
    Q4_1  =  3,  32,  20, "q4_1",   Q8_1, Weight,     6.26e-3, legacy::dequant_q4_1, Some(legacy::quant_q4_1);
    Q5_0  =  6,  32,  22, "q5_0",   Q8_0, Weight,     1.83e-3, legacy::dequant_q5_0, Some(legacy::quant_q5_0);
    Q5_1  =  7,  32,  24, "q5_1",   Q8_1, Weight,     1.48e-3, legacy::dequant_q5_1, Some(legacy::quant_q5_1);
    Q8_0  =  8,  32,  34, "q8_0",   Q8_0, Weight,     2.86e-5, legacy::dequant_q8_0, Some(legacy::quant_q8_0);
    Q8_1  =  9,  32,  36, "q8_1",   Q8_0, Activation, 2.86e-5, legacy::dequant_q8_1, Some(legacy::quant_q8_1);
    Q2K   = 10, 256,  84, "q2_K",   Q8K,  Weight,     8.95e-2, kquants::dequant_q2_k, Some(kquants::quant_q2_k);
    Q3K   = 11, 256, 110, "q3_K",   Q8K,  Weight,     2.31e-2, kquants::dequant_q3_k, Some(kquants::quant_q3_k);
    Q4K   = 12, 256, 144, "q4_K",   Q8K,  Weight,     5.03e-3, kquants::dequant_q4_k, Some(kquants::quant_q4_k);
    Q5K   = 13, 256, 176, "q5_K",   Q8K,  Weight,     1.31e-3, kquants::dequant_q5_k, Some(kquants::quant_q5_k);
    Q6K   = 14, 256, 210, "q6_K",   Q8K,  Weight,     3.22e-4, kquants::dequant_q6_k, Some(kquants::quant_q6_k);
    Q8K   = 15, 256, 292, "q8_K",   Q8K,  Activation, 4.90e-5, kquants::dequant_q8_k, Some(kquants::quant_q8_k);
    IQ4NL = 20,  32,  18, "iq4_nl", Q8_0, Weight,     5.87e-3, iq::dequant_iq4_nl, Some(iq::quant_iq4_nl);
    MXFP4 = 39,  32,  17, "mxfp4",  Q8_0, Weight,     1.34e-2, iq::dequant_mxfp4, Some(iq::quant_mxfp4);
}

/// Declares a `const` array of the qtypes whose rows satisfy a predicate, in table order:
/// `qtype_list!(pub const GPU = |r| matches!(r.role, Role::Weight););`. Evaluated at compile
/// time, so a list derived from the table is still a plain array.
macro_rules! qtype_list {
    ($(#[$m:meta])* $vis:vis const $name:ident = |$r:ident| $pred:expr;) => {
        $(#[$m])*
        $vis const $name: [$crate::quant::QType; $crate::quant::qtype_list!(@pick $r $pred).1] =
            $crate::quant::prefix($crate::quant::qtype_list!(@pick $r $pred).0);
    };
    // (the selected qtypes at the front of a full-size array, how many)
    (@pick $r:ident $pred:expr) => {{
        let mut out = $crate::quant::QType::ALL;
        let (mut n, mut i) = (0, 0);
        while i < $crate::quant::QType::COUNT {
            let $r = &$crate::quant::TABLE[i];
            if $pred {
                out[n] = $r.qtype;
                n += 1;
            }
            i += 1;
        }
        (out, n)
    }};
}
pub(crate) use qtype_list;

/// The first `N` entries of `all` (for [`qtype_list!`]).
#[doc(hidden)]
pub const fn prefix<const N: usize>(all: [QType; QType::COUNT]) -> [QType; N] {
    let mut out = [QType::F32; N];
    let mut i = 0;
    while i < N {
        out[i] = all[i];
        i += 1;
    }
    out
}

impl QType {
    pub const fn info(self) -> &'static QTypeInfo {
        // The table is in enum order (both come from one list), so this is an index.
        &TABLE[self as usize]
    }

    /// The activation format dot products pair with weights of this type ([`QTypeInfo::act`]).
    pub const fn act(self) -> QType {
        self.info().act
    }

    pub const fn role(self) -> Role {
        self.info().role
    }

    /// Whether models may store weights in this type (the CPU reads every one).
    pub const fn is_weight(self) -> bool {
        !matches!(self.role(), Role::Activation)
    }

    /// Whether the GPU kernels (wgpu and CUDA) read weights of this type.
    pub const fn has_gpu_kernel(self) -> bool {
        matches!(self.role(), Role::Weight)
    }

    /// Whether some type of role `role` takes its activations in this format.
    pub const fn is_act_of(self, role: Role) -> bool {
        let mut i = 0;
        while i < QType::COUNT {
            if TABLE[i].act as usize == self as usize && TABLE[i].role as usize == role as usize {
                return true;
            }
            i += 1;
        }
        false
    }

    /// Every weight type ([`QType::is_weight`]), in table order.
    pub fn weights() -> impl Iterator<Item = QType> {
        QType::ALL.into_iter().filter(|q| q.is_weight())
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
    /// Packed blocks rather than one float per element (f32, f16, bf16).
    pub const fn is_quantized(self) -> bool {
        self.info().block_elems > 1
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

    /// Float types take f32 activations and quantized ones an 8-bit block format; a type the
    /// GPU kernels read is a weight type; the derived lists agree with the rows.
    #[test]
    fn roles_and_activation_partners_are_consistent() {
        assert_eq!(QType::ALL.len(), TABLE.len());
        for r in &TABLE {
            let q = r.qtype;
            assert_eq!(q.is_quantized(), r.act != QType::F32, "{q} → {}", r.act);
            assert!(!q.has_gpu_kernel() || q.is_weight(), "{q}");
            assert_eq!(QType::weights().any(|w| w == q), q.is_weight(), "{q}");
        }
    }

    #[test]
    fn bytes_for_checks_blocks_and_overflow() {
        assert_eq!(QType::Q4_0.bytes_for(64), Some(36));
        assert_eq!(QType::Q4_0.bytes_for(33), None);
        assert_eq!(QType::F32.bytes_for(u64::MAX), None);
    }
}
