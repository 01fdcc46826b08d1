// q5_K, 176 bytes / 256: d f16 | dmin f16 | scales[12] | qh[32] | qs[128]. As q4_K with a fifth
// bit: element 64g + 32hi + l has bit 2g + hi of qh[l]. ggml: dequantize_row_q5_K.

const QK: u32 = 256u;
const QB: u32 = 176u;

fn dq8(b: u32, c: u32) -> array<vec4<f32>, 2> {
    let g = c >> 3u;
    let hi = (c >> 2u) & 1u;
    let l0 = (c & 3u) * 8u;
    let j = 2u * g + hi;
    let sm = scale_min_k4(b + 4u, j);
    let d = w_f16(b) * sm.x;
    let m = w_f16(b + 2u) * sm.y;
    let o = b + 48u + 32u * g + l0;
    let h0 = 16.0 * vec4<f32>(unpack4xU8((w_u32(b + 16u + l0) >> j) & 0x01010101u));
    let h1 = 16.0 * vec4<f32>(unpack4xU8((w_u32(b + 20u + l0) >> j) & 0x01010101u));
    return array<vec4<f32>, 2>(d * (w_nib4(o, 4u * hi) + h0) - m, d * (w_nib4(o + 4u, 4u * hi) + h1) - m);
}

fn dq8i(b: u32, c: u32) -> QI8 {
    let g = c >> 3u;
    let hi = (c >> 2u) & 1u;
    let l0 = (c & 3u) * 8u;
    let j = 2u * g + hi;
    let sm = scale_min_k4(b + 4u, j);
    let o = b + 48u + 32u * g + l0;
    let h0 = ((w_u32(b + 16u + l0) >> j) & 0x01010101u) << 4u;
    let h1 = ((w_u32(b + 20u + l0) >> j) & 0x01010101u) << 4u;
    let q = vec2<u32>(((w_u32(o) >> (4u * hi)) & 0x0f0f0f0fu) | h0, ((w_u32(o + 4u) >> (4u * hi)) & 0x0f0f0f0fu) | h1);
    return QI8(q, w_f16(b) * sm.x, -(w_f16(b + 2u) * sm.y));
}
