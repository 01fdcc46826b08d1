// matmul_vec_row.wgsl for quantized weights, in 8-bit integers (llama.cpp's MMVQ): a chunk's
// share of x · W[row] (matmul_vec_loop.wgsl walks the chunks). The kernel reads quantize_act's
// packed form (common.wgsl's `act_q_base`) through `xq2` (the word pair of chunk i: 8 signed
// bytes) and `xd` (the scale of 32-element block i). Per chunk the weights come as signed
// bytes with a scale s and offset m (`dq8i`, the quant file), and the chunk adds
// d · (s · Σ q_w q_x + m · Σ q_x): the integer sums are exactly the CPU's, formed four products
// at a time by dot4I8Packed. Where the activations are q8_1 (ACT_S) each block's correction
// then takes m once more, as in the f32 reader.

alias ChunkW = QI8;

// Chunk c of the row at rb, as bytes with a scale and an offset.
fn chunk_w(rb: u32, c: u32) -> ChunkW {
    return dq8i(rb + (c / (QK / 8u)) * QB, c % (QK / 8u));
}

// Chunk c's two terms for the token at xr: its products, then (ACT_S, a block's first chunk)
// the block's correction times m (else 0), added in that order.
fn chunk_terms(rb: u32, wq: ChunkW, xr: XRow, c: u32) -> vec2<f32> {
    let cpb = QK / 8u;
    let xq = xq2(xr.qb + c);
    var t = wq.s * f32(dot4I8Packed(wq.q.x, xq.x) + dot4I8Packed(wq.q.y, xq.y));
    if (wq.m != 0.0) {
        t += wq.m * f32(dot4I8Packed(0x01010101u, xq.x) + dot4I8Packed(0x01010101u, xq.y));
    }
    var corr = 0.0;
    if (ACT_S && c % cpb == 0u) {
        let ci = xr.cb + c / cpb;
        corr = qmin(rb + (c / cpb) * QB) * xv(ci / 4u)[ci % 4u];
    }
    return vec2<f32>(xd(xr.db + c / 4u) * t, corr);
}
