// One segment lane's share of x · W[row] for the matvec kernels, the row's blocks starting at
// byte rb of `w` (matmul_vec_loop.wgsl walks the chunks): here in f32, a chunk's weights
// dequantized. The kernel reads x through `xv` (vec4 i of its activations): the row's values
// from vec4 xb; for quantized weights quantize_act's output, then (ACT_S) one q8_1 correction
// per 32-element block from element cb, which the block's offset m multiplies.

alias ChunkW = array<vec4<f32>, 2>;

// Chunk c of the row at rb, dequantized.
fn chunk_w(rb: u32, c: u32) -> ChunkW {
    return dq8(rb + (c / (QK / 8u)) * QB, c % (QK / 8u));
}

// Chunk c's two terms for the token at xr: its products, then (ACT_S, a block's first chunk)
// the block's correction times m (else 0), added in that order.
fn chunk_terms(rb: u32, v: ChunkW, xr: XRow, c: u32) -> vec2<f32> {
    let cpb = QK / 8u;
    var corr = 0.0;
    if (ACT_S && c % cpb == 0u) {
        let ci = xr.cb + c / cpb;
        corr = qmin(rb + (c / cpb) * QB) * xv(ci / 4u)[ci % 4u];
    }
    return vec2<f32>(dot(v[0], xv(xr.xb + 2u * c)) + dot(v[1], xv(xr.xb + 2u * c + 1u)), corr);
}
