// swiglu_oai, gpt-oss' clamped SwiGLU (ggml_swiglu_oai): g = min(gate, limit), u = clamp(up,
// -limit, limit), y = g / (1 + e^(-alpha g)) · (u + 1).

override WG: u32 = 256u;

struct Params {
    n: u32,
    alpha: f32,
    limit: f32,
    _pad0: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear_id(gid, nwg, WG);
    if (i < p.n) {
        let g = min(a[i], p.limit);
        let u = clamp(b[i], -p.limit, p.limit);
        y[i] = g / (1.0 + exp(p.alpha * -g)) * (u + 1.0);
    }
}
