// add_bias_id (ggml_add_id): y[t, j, i] = x[t, j, i] + b[e][i] with e the expert of slot j of
// token t (route[t][j]); b [n_expert][width] a float weight (f32 / f16 / bf16).

override WG: u32 = 256u;

struct Params {
    n: u32,
    width: u32,
    k: u32,
    n_expert: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> w: array<u32>;
@group(0) @binding(2) var<storage, read> x: array<f32>;
@group(0) @binding(3) var<storage, read> route: array<f32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear_id(gid, nwg, WG);
    if (i < p.n) {
        let slot = i / p.width;
        let t = slot / p.k;
        let e = min(u32(route[t * 2u * p.k + slot % p.k]), p.n_expert - 1u);
        y[i] = x[i] + dq1(e * p.width + i % p.width);
    }
}
