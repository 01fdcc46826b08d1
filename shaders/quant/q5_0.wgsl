// q5_0, 22 bytes / 32: d f16 | qh u32 | qs[16]. x = d·(q − 16); the fifth bit of element e is
// bit e of qh, the low four are nibbles as q4_0. ggml: dequantize_row_q5_0.

const QK: u32 = 32u;
const QB: u32 = 22u;

// Bit 4 of elements 8c..8c+8, as 0 or 16.
fn q5_high(qh: u32, c: u32) -> array<vec4<f32>, 2> {
    let s = vec4<u32>(0u, 1u, 2u, 3u) + 8u * c;
    let lo = vec4<f32>(((vec4<u32>(qh) >> s) & vec4<u32>(1u)) << vec4<u32>(4u));
    let hi = vec4<f32>(((vec4<u32>(qh) >> (s + 4u)) & vec4<u32>(1u)) << vec4<u32>(4u));
    return array<vec4<f32>, 2>(lo, hi);
}

fn dq8(b: u32, c: u32) -> array<vec4<f32>, 2> {
    let d = w_f16(b);
    let h = q5_high(w_u32(b + 2u), c);
    let o = b + 6u + (c & 1u) * 8u;
    let sh = (c >> 1u) * 4u;
    return array<vec4<f32>, 2>((w_nib4(o, sh) + h[0] - 16.0) * d, (w_nib4(o + 4u, sh) + h[1] - 16.0) * d);
}

// Bit 4 of elements 8c..8c+8 as bit 4 of their bytes.
fn q5_high_i8(qh: u32, c: u32) -> vec2<u32> {
    let h = qh >> (8u * c);
    return vec2<u32>(bits_to_bytes(h) << 4u, bits_to_bytes(h >> 4u) << 4u);
}

fn dq8i(b: u32, c: u32) -> QI8 {
    let h = q5_high_i8(w_u32(b + 2u), c);
    let o = b + 6u + (c & 1u) * 8u;
    let sh = (c >> 1u) * 4u;
    let q0 = ((w_u32(o) >> sh) & 0x0f0f0f0fu) | h.x;
    let q1 = ((w_u32(o + 4u) >> sh) & 0x0f0f0f0fu) | h.y;
    return QI8(vec2<u32>(offset_i8(q0, 16u), offset_i8(q1, 16u)), w_f16(b), 0.0);
}
