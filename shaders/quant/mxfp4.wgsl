// mxfp4, 17 bytes / 32: e u8 (e8m0) | qs[16]. x = 2^(e − 128)·kvalues[q] (doubled e2m1 values
// with a halved scale); nibbles as q4_0. Blocks start at odd offsets. ggml: dequantize_row_mxfp4.

const QK: u32 = 32u;
const QB: u32 = 17u;

const MXFP4: array<f32, 16> = array<f32, 16>(
    0.0, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 0.0, -1.0, -2.0, -3.0, -4.0, -6.0, -8.0, -12.0);

fn mx4(q: vec4<f32>, d: f32) -> vec4<f32> {
    let t = MXFP4;
    return vec4<f32>(t[u32(q.x)], t[u32(q.y)], t[u32(q.z)], t[u32(q.w)]) * d;
}

// ggml_e8m0_to_fp32_half: e < 2 gives the subnormals 2^-128, 2^-127.
fn e8m0_half(e: u32) -> f32 {
    if (e < 2u) {
        return bitcast<f32>(0x00200000u << e);
    }
    return bitcast<f32>((e - 1u) << 23u);
}

fn dq8(b: u32, c: u32) -> array<vec4<f32>, 2> {
    let d = e8m0_half(w_u8(b));
    let o = b + 1u + (c & 1u) * 8u;
    let sh = (c >> 1u) * 4u;
    return array<vec4<f32>, 2>(mx4(w_nib4(o, sh), d), mx4(w_nib4(o + 4u, sh), d));
}

const MXFP4_I: array<i32, 16> = array<i32, 16>(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);

fn mx4_i8(o: u32, sh: u32) -> u32 {
    let t = MXFP4_I;
    let n = (w_u32(o) >> sh) & 0x0f0f0f0fu;
    return pack4xI8(vec4<i32>(t[n & 0xfu], t[(n >> 8u) & 0xfu], t[(n >> 16u) & 0xfu], t[n >> 24u]));
}

fn dq8i(b: u32, c: u32) -> QI8 {
    let o = b + 1u + (c & 1u) * 8u;
    let sh = (c >> 1u) * 4u;
    return QI8(vec2<u32>(mx4_i8(o, sh), mx4_i8(o + 4u, sh)), e8m0_half(w_u8(b)), 0.0);
}
