// q4_0, 18 bytes / 32: d f16 | qs[16]. x = d·(q − 8); element j is the low nibble of qs[j],
// element j + 16 the high one. ggml: dequantize_row_q4_0.

const QK: u32 = 32u;
const QB: u32 = 18u;

fn dq8(b: u32, c: u32) -> array<vec4<f32>, 2> {
    let d = w_f16(b);
    let o = b + 2u + (c & 1u) * 8u;
    let sh = (c >> 1u) * 4u;
    return array<vec4<f32>, 2>((w_nib4(o, sh) - 8.0) * d, (w_nib4(o + 4u, sh) - 8.0) * d);
}

fn dq8i(b: u32, c: u32) -> QI8 {
    let o = b + 2u + (c & 1u) * 8u;
    let sh = (c >> 1u) * 4u;
    let q = vec2<u32>(offset_i8((w_u32(o) >> sh) & 0x0f0f0f0fu, 8u), offset_i8((w_u32(o + 4u) >> sh) & 0x0f0f0f0fu, 8u));
    return QI8(q, w_f16(b), 0.0);
}
