// moe_sum: y[t, i] = Σ_j w_j · x[t, j, i] over the k slots of token t, w_j = route[t][k + j],
// added in slot order as the CPU (llama.cpp's chain of adds) does.

override WG: u32 = 256u;

struct Params {
    n: u32,
    width: u32,
    k: u32,
    n_expert: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> route: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear_id(gid, nwg, WG);
    if (i < p.n) {
        let t = i / p.width;
        let c = i % p.width;
        let x0 = t * p.k * p.width + c;
        let w0 = t * 2u * p.k + p.k;
        var s = x[x0] * route[w0];
        for (var j = 1u; j < p.k; j++) {
            s += x[x0 + j * p.width] * route[w0 + j];
        }
        y[i] = s;
    }
}
