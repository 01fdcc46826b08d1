// q4_1, 20 bytes / 32: d f16 | m f16 | qs[16]. x = d·q + m; nibbles as q4_0.
// ggml: dequantize_row_q4_1.

const QK: u32 = 32u;
const QB: u32 = 20u;

fn dq8(b: u32, c: u32) -> array<vec4<f32>, 2> {
    let d = w_f16(b);
    let m = w_f16(b + 2u);
    let o = b + 4u + (c & 1u) * 8u;
    let sh = (c >> 1u) * 4u;
    return array<vec4<f32>, 2>(w_nib4(o, sh) * d + m, w_nib4(o + 4u, sh) * d + m);
}

// The offset m every element of the block carries; a matmul adds m times quantize_act's q8_1
// correction per block (ACT_S).
fn qmin(b: u32) -> f32 {
    return w_f16(b + 2u);
}

fn dq8i(b: u32, c: u32) -> QI8 {
    let o = b + 4u + (c & 1u) * 8u;
    let sh = (c >> 1u) * 4u;
    let q = vec2<u32>((w_u32(o) >> sh) & 0x0f0f0f0fu, (w_u32(o + 4u) >> sh) & 0x0f0f0f0fu);
    return QI8(q, w_f16(b), w_f16(b + 2u));
}
