// q2_K, 84 bytes / 256: scales[16] (scale | min << 4) | qs[64] | d f16 | dmin f16.
// Element e = 128h + 32k + l: q = (qs[32h + l] >> 2k) & 3, group 8h + 2k + l/16,
// x = d·sc·q − dmin·m. ggml: dequantize_row_q2_K.

const QK: u32 = 256u;
const QB: u32 = 84u;

fn dq8(b: u32, c: u32) -> array<vec4<f32>, 2> {
    let h = c >> 4u;
    let k = (c >> 2u) & 3u;
    let l0 = (c & 3u) * 8u;
    let sc = w_u8(b + 8u * h + 2u * k + l0 / 16u);
    let dl = w_f16(b + 80u) * f32(sc & 0xfu);
    let ml = w_f16(b + 82u) * f32(sc >> 4u);
    let o = b + 16u + 32u * h + l0;
    let s = 2u * k;
    let q0 = vec4<f32>(unpack4xU8((w_u32(o) >> s) & 0x03030303u));
    let q1 = vec4<f32>(unpack4xU8((w_u32(o + 4u) >> s) & 0x03030303u));
    return array<vec4<f32>, 2>(dl * q0 - ml, dl * q1 - ml);
}

fn dq8i(b: u32, c: u32) -> QI8 {
    let h = c >> 4u;
    let k = (c >> 2u) & 3u;
    let l0 = (c & 3u) * 8u;
    let sc = w_u8(b + 8u * h + 2u * k + l0 / 16u);
    let o = b + 16u + 32u * h + l0;
    let s = 2u * k;
    let q = vec2<u32>((w_u32(o) >> s) & 0x03030303u, (w_u32(o + 4u) >> s) & 0x03030303u);
    return QI8(q, w_f16(b + 80u) * f32(sc & 0xfu), -(w_f16(b + 82u) * f32(sc >> 4u)));
}
