// The tiled matmuls' store (every body of the matmul kernel): row r of the part for tokens
// t .. t + 4, plus the fused bias (binding 4) or residual.

@group(0) @binding(4) var<storage, read> bias: array<f32>;

fn store4(r: u32, t: u32, v: vec4<f32>) {
    if (r >= p.rows) {
        return;
    }
    for (var j = 0u; j < 4u; j++) {
        if (t + j < p.n) {
            let yi = (t + j) * p.m + p.row0 + r;
            var s = v[j];
            if (p.bias != 0u) {
                s += bias[p.row0 + r];
            }
            y[yi] = select(s, y[yi] + s, p.acc != 0u);
        }
    }
}
