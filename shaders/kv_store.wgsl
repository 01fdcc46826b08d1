// kv_store (first half of the attention op): writes token t's K and V rows into the layer's
// cache at the token's cell (`store_cell`). One invocation per cache word; rows are whole
// words (K and V widths are multiples of EPW).

override WG: u32 = 64u;

// Params and bindings: kv_store_io.wgsl.

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear_id(gid, nwg, WG);
    let nk = p.n * p.kw / EPW;
    let nv = p.n * p.vw / EPW;
    if (i < nk) {
        let e = i * EPW;
        let t = e / p.kw;
        kc[(store_cell(t) * p.kw + e - t * p.kw) / EPW] = kv_encode(k_at(e), k_at(min(e + 1u, p.n * p.kw - 1u)));
    } else if (i < nk + nv) {
        let j = i - nk;
        let e = j * EPW;
        let t = e / p.vw;
        vc[(store_cell(t) * p.vw + e - t * p.vw) / EPW] = kv_encode(v[e], v[min(e + 1u, p.n * p.vw - 1u)]);
    }
}
