// q3_K, 110 bytes / 256: hmask[32] | qs[64] | scales[12] (16 × 6-bit, offset 32) | d f16.
// Element e = 128h + 32k + l: low = (qs[32h + l] >> 2k) & 3, minus 4 unless bit 4h + k of
// hmask[l] is set; group 8h + 2k + l/16. ggml: dequantize_row_q3_K.

const QK: u32 = 256u;
const QB: u32 = 110u;

// Group scale `is` (0..16) unpacked from the 12 bytes at s: 4 low bits from byte is % 8
// (high nibble for is >= 8), 2 high bits from byte 8 + is % 4.
fn q3k_scale(s: u32, is: u32) -> f32 {
    let lo = (w_u8(s + (is & 7u)) >> (4u * (is >> 3u))) & 0xfu;
    let hi = (w_u8(s + 8u + (is & 3u)) >> (2u * (is >> 2u))) & 3u;
    return f32(i32(lo | (hi << 4u)) - 32);
}

fn dq8(b: u32, c: u32) -> array<vec4<f32>, 2> {
    let h = c >> 4u;
    let k = (c >> 2u) & 3u;
    let l0 = (c & 3u) * 8u;
    let dl = w_f16(b + 108u) * q3k_scale(b + 96u, 8u * h + 2u * k + l0 / 16u);
    let o = b + 32u + 32u * h + l0;
    let s = 2u * k;
    let m = 4u * h + k;
    let q0 = vec4<f32>(unpack4xU8((w_u32(o) >> s) & 0x03030303u));
    let q1 = vec4<f32>(unpack4xU8((w_u32(o + 4u) >> s) & 0x03030303u));
    let h0 = vec4<f32>(unpack4xU8((w_u32(b + l0) >> m) & 0x01010101u));
    let h1 = vec4<f32>(unpack4xU8((w_u32(b + l0 + 4u) >> m) & 0x01010101u));
    return array<vec4<f32>, 2>(dl * (q0 - 4.0 + 4.0 * h0), dl * (q1 - 4.0 + 4.0 * h1));
}

fn dq8i(b: u32, c: u32) -> QI8 {
    let h = c >> 4u;
    let k = (c >> 2u) & 3u;
    let l0 = (c & 3u) * 8u;
    let o = b + 32u + 32u * h + l0;
    let s = 2u * k;
    let m = 4u * h + k;
    // low − 4 where the mask bit is clear: 0xfc added to a byte below 4, no carry.
    let h0 = (~(w_u32(b + l0) >> m)) & 0x01010101u;
    let h1 = (~(w_u32(b + l0 + 4u) >> m)) & 0x01010101u;
    let q = vec2<u32>(((w_u32(o) >> s) & 0x03030303u) | (h0 * 0xfcu), ((w_u32(o + 4u) >> s) & 0x03030303u) | (h1 * 0xfcu));
    return QI8(q, w_f16(b + 108u) * q3k_scale(b + 96u, 8u * h + 2u * k + l0 / 16u), 0.0);
}
