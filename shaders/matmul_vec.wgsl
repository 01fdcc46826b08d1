// matmul for decode: y[t, row0 + r] = x[t, :] · W[r, :] for the rows of one weight part; with
// experts (matmul_vec_id, whose head supplies `mv_rows`), workgroup z is a (token, slot) and W
// the rows of the slot's expert.
// A workgroup of WG invocations takes WG / TPR rows of one token; the TPR invocations of a row
// stride over its 8-element chunks (`row_dot`, matmul_vec_row.wgsl), each step of a row reading
// 32 consecutive chunks (one q4_K / q6_K block, four q4_0 blocks), and meet in a segment
// reduction (subgroup butterflies where the adapter has subgroups, then workgroup memory across
// the subgroups of a row; workgroup memory otherwise).

override WG: u32 = 128u;
override TPR: u32 = 32u; // invocations per row

// matmul_params.wgsl, the head, declares p, w and y; x is read in this body's own form.
@group(0) @binding(2) var<storage, read> x: array<vec4<u32>>;

// x as the row readers see it (quantize_act's layout, common.wgsl): vec4 i of the values, the
// word pair i of the packed q, scale i.
fn xv(i: u32) -> vec4<f32> {
    return bitcast<vec4<f32>>(x[i]);
}

fn xq2(i: u32) -> vec2<u32> {
    let v = x[i / 2u];
    return select(v.xy, v.zw, (i & 1u) != 0u);
}

fn xd(i: u32) -> f32 {
    return bitcast<f32>(x[i / 4u][i % 4u]);
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, ln: Lanes) {
    let seg = seg_index(ln, TPR);
    let r = (wid.x + wid.y * nwg.x) * (WG / TPR) + seg.x;
    if (ALL_TOKENS && p.n > 1u) {
        // Every token of the step (p.n ≤ VEC_MAX_TOKENS, the schedule's bound), MV_COLS a pass.
        for (var j0 = 0u; j0 < p.n; j0 += MV_COLS) {
            let nc = min(p.n - j0, MV_COLS);
            var acc: array<f32, MV_COLS>;
            if (r < p.rows) {
                acc = row_dot_cols(r * (p.k / QK) * QB, j0, nc, seg.y);
            }
            for (var j = 0u; j < MV_COLS; j++) {
                if (j < nc) {
                    var s = seg_sum(acc[j], ln, TPR);
                    if (r < p.rows && seg.y == 0u) {
                        let yi = (j0 + j) * p.m + p.row0 + r;
                        if (p.bias != 0u) {
                            s += bias_at(p.row0 + r);
                        }
                        y[yi] = select(s, y[yi] + s, p.acc != 0u);
                    }
                }
            }
        }
        return;
    }
    // (first weight row, x row, y row) of workgroup z.
    let rows = mv_rows(wid.z);
    var acc = 0.0;
    if (r < p.rows) {
        let t = rows.y;
        acc = row_dot((rows.x + r) * (p.k / QK) * QB, act_row(p.n * p.k, p.k, t), seg.y);
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
