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
