// scale_by: y[t, i] = x[t, i] · w[i % width], w a float weight vector (f32 / f16 / bf16); the
// graph's ScaleBy binds a [1] weight with width 1 (ggml_mul broadcasting one value; Gemma 4's
// layer_output_scale, cpu::mod's `ScaleBy`).

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
        y[i] = x[i] * dq1(i % p.width);
    }
}
