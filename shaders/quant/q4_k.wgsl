// q4_K, 144 bytes / 256: d f16 | dmin f16 | scales[12] (8 × 6-bit scale and min) | qs[128].
// Element e = 64g + 32hi + l: nibble hi of qs[32g + l], group 2g + hi; x = d·sc·q − dmin·m.
// ggml: dequantize_row_q4_K, get_scale_min_k4.

const QK: u32 = 256u;
const QB: u32 = 144u;

fn dq8(b: u32, c: u32) -> array<vec4<f32>, 2> {
    let g = c >> 3u;
    let hi = (c >> 2u) & 1u;
    let l0 = (c & 3u) * 8u;
    let sm = scale_min_k4(b + 4u, 2u * g + hi);
    let d = w_f16(b) * sm.x;
    let m = w_f16(b + 2u) * sm.y;
    let o = b + 16u + 32u * g + l0;
    return array<vec4<f32>, 2>(d * w_nib4(o, 4u * hi) - m, d * w_nib4(o + 4u, 4u * hi) - m);
}

fn dq8i(b: u32, c: u32) -> QI8 {
    let g = c >> 3u;
    let hi = (c >> 2u) & 1u;
    let l0 = (c & 3u) * 8u;
    let sm = scale_min_k4(b + 4u, 2u * g + hi);
    let o = b + 16u + 32u * g + l0;
    let q = vec2<u32>((w_u32(o) >> (4u * hi)) & 0x0f0f0f0fu, (w_u32(o + 4u) >> (4u * hi)) & 0x0f0f0f0fu);
    return QI8(q, w_f16(b) * sm.x, -(w_f16(b + 2u) * sm.y));
}
