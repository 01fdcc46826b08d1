// geglu: y = gelu_tanh(gate) · up. Like ggml-cpu (GGML_GELU_FP16), gelu is evaluated at the
// f16-rounded input and its result rounded to f16; |g| >= 10 takes the exact limits.
// ggml: ggml_vec_geglu_f32.

override WG: u32 = 256u;

struct Params {
    n: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> gate: array<f32>;
@group(0) @binding(2) var<storage, read> up: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;

fn gelu_tanh(x: f32) -> f32 {
    let t = 0.7978846 * x * (1.0 + 0.044715 * x * x);
    return 0.5 * x * (1.0 + tanh(clamp(t, -15.0, 15.0)));
}

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear_id(gid, nwg, WG);
    if (i < p.n) {
        let g = gate[i];
        var v = 0.0;
        if (g >= 10.0) {
            v = g * up[i];
        } else if (g > -10.0) {
            v = round_f16(gelu_tanh(round_f16(g))) * up[i];
        }
        y[i] = v;
    }
}
