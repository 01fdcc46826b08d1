// The matvecs' walk over a row (after matmul_vec_row.wgsl or its int8 twin, which give
// `chunk_w` and `chunk_terms`): the lane takes every TPR-th 8-element chunk, and the caller sums
// the segment.

// One lane's share of x · W[row] for the token at xr, the row's blocks from byte rb of `w`.
fn row_dot(rb: u32, xr: XRow, lane: u32) -> f32 {
    var acc = 0.0;
    for (var c = lane; c < p.k / 8u; c += TPR) {
        let t = chunk_terms(rb, chunk_w(rb, c), xr, c);
        acc += t.x;
        acc += t.y;
    }
    return acc;
}

// The most tokens row_dot_cols takes, one pass over the row (the schedule's VEC_PASS_COLS): a
// step's tokens (up to VEC_MAX_TOKENS) take passes of MV_COLS, the row read from memory once and
// from the cache after (more accumulators a pass would cost every launch occupancy).
const MV_COLS: u32 = 2u;

// row_dot for tokens t0.. (nc ≤ MV_COLS of them) at once: each chunk of the row decoded once,
// each token's sum kept apart with row_dot's arithmetic in row_dot's order (a token's result
// is the same whatever the other tokens of its step).
fn row_dot_cols(rb: u32, t0: u32, nc: u32, lane: u32) -> array<f32, MV_COLS> {
    var acc: array<f32, MV_COLS>;
    for (var c = lane; c < p.k / 8u; c += TPR) {
        let cw = chunk_w(rb, c);
        for (var j = 0u; j < MV_COLS; j++) {
            if (j < nc) {
                let t = chunk_terms(rb, cw, act_row(p.n * p.k, p.k, t0 + j), c);
                acc[j] += t.x;
                acc[j] += t.y;
            }
        }
    }
    return acc;
}
