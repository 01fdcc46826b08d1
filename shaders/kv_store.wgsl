// kv_store (first half of the attention op): writes the step's K and V rows into the layer's
// cache at positions pos0 .. pos0 + n. One invocation per cache word.

override WG: u32 = 256u;

// Params and bindings: kv_store_io.wgsl.

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
