// matmul for decode: y[t, row0 + r] = x[t, :] · W[r, :] for the rows of one weight part.
// A workgroup of WG invocations takes WG / TPR rows of one token; the TPR invocations of a row
// stride over its 8-element chunks and meet in a segment reduction (a subgroup butterfly where
// the adapter has subgroups, workgroup memory otherwise).

override WG: u32 = 64u;
override TPR: u32 = 8u; // invocations per row

struct Params {
    k: u32,    // row length (elements)
    m: u32,    // width of y (all rows of the weight)
    rows: u32, // rows in this part
    row0: u32, // first row of this part
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> w: array<u32>;
@group(0) @binding(2) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, ln: Lanes) {
    let seg = seg_index(ln, TPR);
    let r = (wid.x + wid.y * nwg.x) * (WG / TPR) + seg.x;
    let t = wid.z;
    let cpb = QK / 8u;
    let nc = p.k / 8u;
    let rb = r * (p.k / QK) * QB;
    let xb = t * (p.k / 4u);
    var acc = 0.0;
    if (r < p.rows) {
        for (var c = seg.y; c < nc; c += TPR) {
            let v = dq8(rb + (c / cpb) * QB, c % cpb);
            acc += dot(v[0], x[xb + 2u * c]) + dot(v[1], x[xb + 2u * c + 1u]);
        }
    }
    let s = seg_sum(acc, ln, TPR);
    if (r < p.rows && seg.y == 0u) {
        y[t * p.m + p.row0 + r] = s;
    }
}
