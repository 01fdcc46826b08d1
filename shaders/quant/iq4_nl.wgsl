// iq4_nl, 18 bytes / 32: d f16 | qs[16]. x = d·kvalues[q]; nibbles as q4_0.
// ggml: dequantize_row_iq4_nl.

const QK: u32 = 32u;
const QB: u32 = 18u;

const IQ4NL: array<f32, 16> = array<f32, 16>(
    -127.0, -104.0, -83.0, -65.0, -49.0, -35.0, -22.0, -10.0, 1.0, 13.0, 25.0, 38.0, 53.0, 69.0, 89.0, 113.0);

fn iq4nl4(q: vec4<f32>, d: f32) -> vec4<f32> {
    let t = IQ4NL;
    return vec4<f32>(t[u32(q.x)], t[u32(q.y)], t[u32(q.z)], t[u32(q.w)]) * d;
}

fn dq8(b: u32, c: u32) -> array<vec4<f32>, 2> {
    let d = w_f16(b);
    let o = b + 2u + (c & 1u) * 8u;
    let sh = (c >> 1u) * 4u;
    return array<vec4<f32>, 2>(iq4nl4(w_nib4(o, sh), d), iq4nl4(w_nib4(o + 4u, sh), d));
}

const IQ4NL_I: array<i32, 16> = array<i32, 16>(-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113);

// The table values of the 4 nibbles (shift sh) of the bytes at o, as signed bytes.
fn iq4nl_i8(o: u32, sh: u32) -> u32 {
    let t = IQ4NL_I;
    let n = (w_u32(o) >> sh) & 0x0f0f0f0fu;
    return pack4xI8(vec4<i32>(t[n & 0xfu], t[(n >> 8u) & 0xfu], t[(n >> 16u) & 0xfu], t[n >> 24u]));
}

fn dq8i(b: u32, c: u32) -> QI8 {
    let o = b + 2u + (c & 1u) * 8u;
    let sh = (c >> 1u) * 4u;
    return QI8(vec2<u32>(iq4nl_i8(o, sh), iq4nl_i8(o + 4u, sh)), w_f16(b), 0.0);
}
