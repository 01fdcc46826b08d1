// q8_0, 34 bytes / 32: d f16 | qs[32] i8. x = d·q. ggml: dequantize_row_q8_0.

const QK: u32 = 32u;
const QB: u32 = 34u;

fn dq8(b: u32, c: u32) -> array<vec4<f32>, 2> {
    let d = w_f16(b);
    let o = b + 2u + c * 8u;
    return array<vec4<f32>, 2>(vec4<f32>(unpack4xI8(w_u32(o))) * d, vec4<f32>(unpack4xI8(w_u32(o + 4u))) * d);
}

fn dq8i(b: u32, c: u32) -> QI8 {
    let o = b + 2u + c * 8u;
    return QI8(vec2<u32>(w_u32(o), w_u32(o + 4u)), w_f16(b), 0.0);
}
