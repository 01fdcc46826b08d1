//! Unquantized element types: f32, f16, bf16 (one element per "block", little-endian).

use super::blocks::{bf16_to_f32, f32_to_bf16, f32_to_fp16, fp16_to_f32};

pub fn dequant_f32(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(4).zip(dst.iter_mut()) {
        *y = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    }
}

pub fn quant_f32(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.iter().zip(dst.chunks_exact_mut(4)) {
        b.copy_from_slice(&x.to_le_bytes());
    }
}

/// ggml: `ggml_fp16_to_fp32_row`.
pub fn dequant_f16(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(2).zip(dst.iter_mut()) {
        *y = fp16_to_f32(u16::from_le_bytes([b[0], b[1]]));
    }
}

/// ggml: `ggml_fp32_to_fp16_row` (`GGML_FP32_TO_FP16`: round to nearest even).
pub fn quant_f16(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.iter().zip(dst.chunks_exact_mut(2)) {
        b.copy_from_slice(&f32_to_fp16(*x).to_le_bytes());
    }
}

/// ggml: `ggml_bf16_to_fp32_row`.
pub fn dequant_bf16(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(2).zip(dst.iter_mut()) {
        *y = bf16_to_f32(u16::from_le_bytes([b[0], b[1]]));
    }
}

/// ggml: `ggml_fp32_to_bf16_row_ref` (round to nearest even, NaN quieted).
pub fn quant_bf16(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.iter().zip(dst.chunks_exact_mut(2)) {
        b.copy_from_slice(&f32_to_bf16(*x).to_le_bytes());
    }
}
