// bf16 weights: the high half of an f32, exact.

const QK: u32 = 8u;
const QB: u32 = 16u;

fn bf2(u: u32) -> vec2<f32> {
    return vec2<f32>(bitcast<f32>(u << 16u), bitcast<f32>(u & 0xffff0000u));
}

fn dq8(b: u32, c: u32) -> array<vec4<f32>, 2> {
    let i = b >> 2u;
    return array<vec4<f32>, 2>(vec4<f32>(bf2(w[i]), bf2(w[i + 1u])), vec4<f32>(bf2(w[i + 2u]), bf2(w[i + 3u])));
}

fn dq1(i: u32) -> f32 {
    return bf2(w[i >> 1u])[i & 1u];
}
