// sigmoid_gate: y[t, i] = x[t, i] · σ(g[t]), one gate per row, σ(g) = silu(g) / g as llama.cpp's
// qwen2moe shared-expert gate computes it.

override WG: u32 = 256u;

struct Params {
    n: u32,
    width: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> g: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear_id(gid, nwg, WG);
    if (i < p.n) {
        let v = g[i / p.width];
        y[i] = x[i] * ((v / (1.0 + exp(-v))) / v);
    }
}
