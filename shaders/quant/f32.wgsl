// f32 weights. Quant-file interface (every file in shaders/quant/ has it):
//   QK, QB              elements and bytes per block (float types: a virtual block of 8)
//   dq8(b, c)           elements 8c..8c+8 of the block starting at byte b of `w`
// Float types also have dq1(i), element i of `w` (norm weights, biases).

const QK: u32 = 8u;
const QB: u32 = 32u;

fn dq8(b: u32, c: u32) -> array<vec4<f32>, 2> {
    let i = b >> 2u;
    let lo = vec4<f32>(bitcast<f32>(w[i]), bitcast<f32>(w[i + 1u]), bitcast<f32>(w[i + 2u]), bitcast<f32>(w[i + 3u]));
    let hi = vec4<f32>(bitcast<f32>(w[i + 4u]), bitcast<f32>(w[i + 5u]), bitcast<f32>(w[i + 6u]), bitcast<f32>(w[i + 7u]));
    return array<vec4<f32>, 2>(lo, hi);
}

fn dq1(i: u32) -> f32 {
    return bitcast<f32>(w[i]);
}
