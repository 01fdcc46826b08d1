// q6_K, 210 bytes / 256: ql[128] | qh[64] | scales[16] i8 | d f16.
// Element e = 128h + 32k + l: q = nibble (k >> 1) of ql[64h + 32(k & 1) + l] | ((qh[32h + l]
// >> 2k) & 3) << 4, x = d·scales[8h + 2k + l/16]·(q − 32). ggml: dequantize_row_q6_K.

const QK: u32 = 256u;
const QB: u32 = 210u;

// dl · (q − 32), from the integer form: q − 32 is exact in f32, so these are the same products.
fn dq8(b: u32, c: u32) -> array<vec4<f32>, 2> {
    let q = dq8i(b, c);
    return array<vec4<f32>, 2>(q.s * vec4<f32>(unpack4xI8(q.q.x)), q.s * vec4<f32>(unpack4xI8(q.q.y)));
}

fn dq8i(b: u32, c: u32) -> QI8 {
    let h = c >> 4u;
    let k = (c >> 2u) & 3u;
    let l0 = (c & 3u) * 8u;
    let ol = b + 64u * h + 32u * (k & 1u) + l0;
    let oh = b + 128u + 32u * h + l0;
    let sl = 4u * (k >> 1u);
    let sh = 2u * k;
    let q0 = ((w_u32(ol) >> sl) & 0x0f0f0f0fu) | (((w_u32(oh) >> sh) & 0x03030303u) << 4u);
    let q1 = ((w_u32(ol + 4u) >> sl) & 0x0f0f0f0fu) | (((w_u32(oh + 4u) >> sh) & 0x03030303u) << 4u);
    let s = w_f16(b + 208u) * f32(w_i8(b + 192u + 8u * h + 2u * k + l0 / 16u));
    return QI8(vec2<u32>(offset_i8(q0, 32u), offset_i8(q1, 32u)), s, 0.0);
}
