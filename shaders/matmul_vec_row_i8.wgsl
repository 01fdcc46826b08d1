// matmul_vec_row.wgsl for quantized weights, in 8-bit integers (llama.cpp's MMVQ): one segment
// lane's share of x · W[row], the row's blocks from byte rb of `w`, the lane taking every
// TPR-th 8-element chunk. The kernel reads quantize_act's packed form (common.wgsl's
// `act_q_base`) through `xq2` (the word pair of chunk i: 8 signed bytes) and `xd` (the scale of
// 32-element block i). Per chunk the weights come as signed bytes with a scale s and offset m
// (`dq8i`, the quant file), and the chunk adds d · (s · Σ q_w q_x + m · Σ q_x): the integer
// sums are exactly the CPU's, formed four products at a time by dot4I8Packed. Where the
// activations are q8_1 (ACT_S) each block's correction then takes m once more, as in the f32
// reader.

fn row_dot(rb: u32, xr: XRow, lane: u32) -> f32 {
    let cpb = QK / 8u;
    let nc = p.k / 8u;
    var acc = 0.0;
    for (var c = lane; c < nc; c += TPR) {
        let bw = rb + (c / cpb) * QB;
        let wq = dq8i(bw, c % cpb);
        let xq = xq2(xr.qb + c);
        var t = wq.s * f32(dot4I8Packed(wq.q.x, xq.x) + dot4I8Packed(wq.q.y, xq.y));
        if (wq.m != 0.0) {
            t += wq.m * f32(dot4I8Packed(0x01010101u, xq.x) + dot4I8Packed(0x01010101u, xq.y));
        }
        acc += xd(xr.db + c / 4u) * t;
        if (ACT_S && c % cpb == 0u) {
            let ci = xr.cb + c / cpb;
            acc += qmin(bw) * xv(ci / 4u)[ci % 4u];
        }
    }
    return acc;
}

// The most tokens row_dot_cols takes (the schedule's VEC_MAX_TOKENS).
const MV_COLS: u32 = 2u;

// row_dot for tokens t0.. (nc ≤ MV_COLS of them) at once: each chunk of the row decoded once, each
// token's sum kept apart with row_dot's arithmetic in row_dot's order (a token's result is the
// same whatever the other tokens of its step).
fn row_dot_cols(rb: u32, t0: u32, nc: u32, lane: u32) -> array<f32, MV_COLS> {
    let cpb = QK / 8u;
    let nch = p.k / 8u;
    var acc: array<f32, MV_COLS>;
    for (var c = lane; c < nch; c += TPR) {
        let bw = rb + (c / cpb) * QB;
        let wq = dq8i(bw, c % cpb);
        for (var j = 0u; j < MV_COLS; j++) {
            if (j < nc) {
                let xr = act_row(p.n * p.k, p.k, t0 + j);
                let xq = xq2(xr.qb + c);
                var t = wq.s * f32(dot4I8Packed(wq.q.x, xq.x) + dot4I8Packed(wq.q.y, xq.y));
                if (wq.m != 0.0) {
                    t += wq.m * f32(dot4I8Packed(0x01010101u, xq.x) + dot4I8Packed(0x01010101u, xq.y));
                }
                acc[j] += xd(xr.db + c / 4u) * t;
                if (ACT_S && c % cpb == 0u) {
                    let ci = xr.cb + c / cpb;
                    acc[j] += qmin(bw) * xv(ci / 4u)[ci % 4u];
                }
            }
        }
    }
    return acc;
}
