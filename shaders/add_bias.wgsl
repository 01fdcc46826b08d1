// add_bias: y[t, i] = x[t, i] + b[i], b a float weight vector (f32 / f16 / bf16); scale_by with
// the head that makes `combine` a product (the kernel table joins them). `combine(x, w)` comes
// from the head.

override WG: u32 = 256u;

struct Params {
    n: u32,
    width: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> w: array<u32>;
@group(0) @binding(2) var<storage, read> x: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear_id(gid, nwg, WG);
    if (i < p.n) {
        y[i] = combine(x[i], dq1(i % p.width));
    }
}
