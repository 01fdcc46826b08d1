// One segment lane's share of x · W[row] for the matvec kernels, the row's blocks starting at
// byte rb of `w`: the lane takes every TPR-th 8-element chunk, and the caller sums the segment.
// The kernel reads x through `xv` (vec4 i of its activations): the row's values from vec4 xb;
// for quantized weights quantize_act's output, then (ACT_S) one q8_1 correction per 32-element
// block from element cb, which the block's offset m multiplies.

fn row_dot(rb: u32, xr: XRow, lane: u32) -> f32 {
    let cpb = QK / 8u;
    let nc = p.k / 8u;
    var acc = 0.0;
    for (var c = lane; c < nc; c += TPR) {
        let v = dq8(rb + (c / cpb) * QB, c % cpb);
        acc += dot(v[0], xv(xr.xb + 2u * c)) + dot(v[1], xv(xr.xb + 2u * c + 1u));
        if (ACT_S && c % cpb == 0u) {
            let ci = xr.cb + c / cpb;
            acc += qmin(rb + (c / cpb) * QB) * xv(ci / 4u)[ci % 4u];
        }
    }
    return acc;
}

// The most tokens row_dot_cols takes (the schedule's VEC_MAX_TOKENS).
const MV_COLS: u32 = 2u;

// row_dot for tokens t0.. (nc ≤ MV_COLS of them) at once: each chunk of the row dequantized once, each
// token's sum kept apart with row_dot's arithmetic in row_dot's order (a token's result is the
// same whatever the other tokens of its step).
fn row_dot_cols(rb: u32, t0: u32, nc: u32, lane: u32) -> array<f32, MV_COLS> {
    let cpb = QK / 8u;
    let nch = p.k / 8u;
    var acc: array<f32, MV_COLS>;
    for (var c = lane; c < nch; c += TPR) {
        let v = dq8(rb + (c / cpb) * QB, c % cpb);
        for (var j = 0u; j < MV_COLS; j++) {
            if (j < nc) {
                let xr = act_row(p.n * p.k, p.k, t0 + j);
                acc[j] += dot(v[0], xv(xr.xb + 2u * c)) + dot(v[1], xv(xr.xb + 2u * c + 1u));
                if (ACT_S && c % cpb == 0u) {
                    let ci = xr.cb + c / cpb;
                    acc[j] += qmin(rb + (c / cpb) * QB) * xv(ci / 4u)[ci % 4u];
                }
            }
        }
    }
    return acc;
}
