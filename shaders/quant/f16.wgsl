// f16 weights: two halves per word, decoded with integer ops (no f16 feature needed).

const QK: u32 = 8u;
const QB: u32 = 16u;

fn dq8(b: u32, c: u32) -> array<vec4<f32>, 2> {
    let i = b >> 2u;
    let lo = vec4<f32>(f16x2(w[i]), f16x2(w[i + 1u]));
    let hi = vec4<f32>(f16x2(w[i + 2u]), f16x2(w[i + 3u]));
    return array<vec4<f32>, 2>(lo, hi);
}

fn dq1(i: u32) -> f32 {
    return f16x2(w[i >> 1u])[i & 1u];
}
