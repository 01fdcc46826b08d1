// f16 weights: two halves per word, read with unpack2x16float (no shader-f16 feature needed).

const QK: u32 = 8u;
const QB: u32 = 16u;

fn dq8(b: u32, c: u32) -> array<vec4<f32>, 2> {
    let i = b >> 2u;
    let lo = vec4<f32>(unpack2x16float(w[i]), unpack2x16float(w[i + 1u]));
    let hi = vec4<f32>(unpack2x16float(w[i + 2u]), unpack2x16float(w[i + 3u]));
    return array<vec4<f32>, 2>(lo, hi);
}

fn dq1(i: u32) -> f32 {
    return unpack2x16float(w[i >> 1u])[i & 1u];
}
