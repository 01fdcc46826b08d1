// quantize_act: a matmul's activations x [n][k] rounded to the 8-bit format the CPU backend
// pairs with the weight type, then written back as floats, x̃ = d · q. A matmul over x̃ and
// the weights multiplies the same values as the CPU's integer dot products, so the two differ
// only by f32 summation order instead of by the rounding of the activations.
// - q8_0 / q8_1 (ACT 0 / 1; 32-element blocks): ggml-cpu's x86 quantize_row_q8_0 / q8_1:
//   d = amax / 127 kept as f16, q = round-to-even(x · 127 / amax).
// - q8_1 also has s = f16(d · Σq), the term a q4_1 / q5_1 block's offset m multiplies. The
//   floats give m · d16 · Σq instead, so each block's difference s − d16 · Σq follows x̃:
//   y[n · k + block] (the matmul adds m times it).
// - q8_K (ACT 2; 256-element blocks): quantize_row_q8_K_ref: iscale = −127 / (the signed value
//   of largest magnitude), q = min(round-to-even(iscale · x), 127), d = 1 / iscale.
// One invocation per packed word of 4 elements, a block's invocations in one workgroup
// (quantize_word.wgsl). Params: k (row length, whole blocks), n (tokens), split: with 2 (q8_K where
// a block each would leave compute units idle) a block's two halves go to two consecutive
// workgroups, each reading the whole block for its scale and writing its half
// (quantize_act.cu's header).

override WG: u32 = 64u;
override ACT: u32 = 0u;

struct Params {
    k: u32,
    n: u32,
    split: u32, // workgroups per 256 elements: 1 (or 0), or 2
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<u32>;

fn act_in(i: u32) -> f32 {
    return x[i];
}

fn act_out(i: u32, v: f32) {
    y[i] = bitcast<u32>(v);
}

fn act_word(i: u32, v: u32) {
    y[i] = v;
}

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let nk = p.n * p.k;
    let split = max(p.split, 1u);
    let g = wid.x + wid.y * nwg.x;
    let e = 4u * ((g / split) * WG + lid);
    // A spare workgroup of a folded grid still takes part (its blocks all past the data).
    let valid = e < nk;
    var v = vec4<f32>();
    if (valid) {
        v = vec4<f32>(x[e], x[e + 1u], x[e + 2u], x[e + 3u]);
    }
    quantize_word_part(ACT, v, valid, valid && lid * split / WG == g % split, e, nk, lid);
}
