// matmul for decode: y[t, row0 + r] = x[t, :] · W[r, :] for the rows of one weight part; with
// experts (matmul_vec_id, whose head supplies `mv_rows`), workgroup z is a (token, slot) and W
// the rows of the slot's expert.
// A workgroup of WG invocations takes WG / TPR rows of one token; the TPR invocations of a row
// stride over its 8-element chunks and meet in a segment reduction (a subgroup butterfly where
// the adapter has subgroups, workgroup memory otherwise).
// For quantized weights x is quantize_act's output: the rounded activations, then (ACT_S, q4_1
// and q5_1) one q8_1 correction per 32-element block, which the block's offset m multiplies.

override WG: u32 = 64u;
override TPR: u32 = 8u; // invocations per row

struct Params {
    k: u32,        // row length (elements)
    m: u32,        // width of y (all rows of the weight; per slot with experts)
    rows: u32,     // rows in this part (per expert with experts)
    row0: u32,     // first row of this part
    n: u32,        // rows of x
    ids: u32,      // experts: slots per token (0 without)
    x_slot: u32,   // experts: 1 where x has one row per slot
    n_expert: u32, // experts: how many
    acc: u32,      // 1: y += x · W (a fused residual add; y holds the residual)
    bias: u32,     // 1: y = x · W + b (a fused bias add; the head's `bias_at`)
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> w: array<u32>;
@group(0) @binding(2) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, ln: Lanes) {
    let seg = seg_index(ln, TPR);
    let r = (wid.x + wid.y * nwg.x) * (WG / TPR) + seg.x;
    // (first weight row, x row, y row) of workgroup z.
    let rows = mv_rows(wid.z);
    let t = rows.y;
    let cpb = QK / 8u;
    let nc = p.k / 8u;
    let rb = (rows.x + r) * (p.k / QK) * QB;
    let xb = t * (p.k / 4u);
    var acc = 0.0;
    if (r < p.rows) {
        for (var c = seg.y; c < nc; c += TPR) {
            let v = dq8(rb + (c / cpb) * QB, c % cpb);
            acc += dot(v[0], x[xb + 2u * c]) + dot(v[1], x[xb + 2u * c + 1u]);
            if (ACT_S && c % cpb == 0u) {
                let ci = p.n * p.k + t * (p.k / QK) + c / cpb;
                acc += qmin(rb + (c / cpb) * QB) * x[ci / 4u][ci % 4u];
            }
        }
    }
    var s = seg_sum(acc, ln, TPR);
    if (r < p.rows && seg.y == 0u) {
        let yi = rows.z * p.m + p.row0 + r;
        if (p.bias != 0u) {
            s += bias_at(p.row0 + r);
        }
        y[yi] = select(s, y[yi] + s, p.acc != 0u);
    }
}
