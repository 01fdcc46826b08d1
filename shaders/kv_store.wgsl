// kv_store (first half of the attention op): writes the step's K and V rows into the layer's
// cache at positions pos0 .. pos0 + n. One invocation per cache word.

override WG: u32 = 256u;

struct Params {
    kw: u32, // K row width (n_head_kv · head_dim)
    vw: u32,
    n: u32,
    _pad0: u32,
}

struct Step {
    pos0: u32,
    n: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<uniform> step: Step;
@group(0) @binding(2) var<storage, read> k: array<f32>;
@group(0) @binding(3) var<storage, read> v: array<f32>;
@group(0) @binding(4) var<storage, read_write> kc: array<KV>;
@group(0) @binding(5) var<storage, read_write> vc: array<KV>;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear_id(gid, nwg, WG);
    let nk = p.n * p.kw / EPW;
    let nv = p.n * p.vw / EPW;
    if (i < nk) {
        let e = i * EPW;
        kc[step.pos0 * p.kw / EPW + i] = kv_encode(k[e], k[min(e + 1u, p.n * p.kw - 1u)]);
    } else if (i < nk + nv) {
        let j = i - nk;
        let e = j * EPW;
        vc[step.pos0 * p.vw / EPW + j] = kv_encode(v[e], v[min(e + 1u, p.n * p.vw - 1u)]);
    }
}
