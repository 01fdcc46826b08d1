// The body shared by the element-wise ops with one input and one scalar parameter:
// y[i] = op(x[i], s). Each op's file (scale.wgsl, softcap.wgsl) supplies `fn op` and is
// concatenated before it.

override WG: u32 = 256u;

struct Params {
    n: u32,
    s: f32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear_id(gid, nwg, WG);
    if (i < p.n) {
        y[i] = op(x[i], p.s);
    }
}
