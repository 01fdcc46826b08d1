// The body shared by the element-wise binary ops: y[i] = op(a[i], b[i]). Each op's file
// (add.wgsl, mul.wgsl, swiglu.wgsl, geglu.wgsl) supplies `fn op` and is concatenated before it.
// With p.act = 1 + quantize_act's ACT (a GLU feeding a quantized matmul) each invocation takes
// the 4 elements of one packed word (a grid of n / 4 invocations): it writes their y, then the
// workgroup rounds them as quantize_act would into binding 4 (quantize_word.wgsl), the rounded
// values then the q8_1 corrections after all n values: the same values, one dispatch fewer.
// Binding 4 is never written with p.act = 0.

override WG: u32 = 128u;

struct Params {
    n: u32,
    act: u32, // 0, or 1 + quantize_act's ACT
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
@group(0) @binding(4) var<storage, read_write> qy: array<u32>;

fn act_in(i: u32) -> f32 {
    return y[i];
}

fn act_out(i: u32, v: f32) {
    qy[i] = bitcast<u32>(v);
}

fn act_word(i: u32, v: u32) {
    qy[i] = v;
}

@compute @workgroup_size(WG)
fn main(
    @builtin(global_invocation_id) gid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let i = linear_id(gid, nwg, WG);
    if (p.act == 0u) {
        if (i < p.n) {
            y[i] = op(a[i], b[i]);
        }
        return;
    }
    // Rounded: invocation i takes the word of elements 4i..4i + 3.
    let e = 4u * i;
    let valid = e < p.n;
    var v = vec4<f32>();
    if (valid) {
        for (var j = 0u; j < 4u; j++) {
            v[j] = op(a[e + j], b[e + j]);
            y[e + j] = v[j];
        }
    }
    quantize_word(p.act - 1u, v, valid, e, p.n, lid);
}
