// head_norm: rms_norm over each head-wide slice of a row (Qwen3 / Gemma 3 Q and K norms),
// times w [head_dim]. One workgroup per (head, row).

override WG: u32 = 64u;

struct Params {
    head_dim: u32,
    n_heads: u32,
    eps: f32,
    _pad0: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> w: array<u32>;
@group(0) @binding(2) var<storage, read> x: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, ln: Lanes) {
    let base = (wid.y * p.n_heads + wid.x) * p.head_dim;
    var s = 0.0;
    for (var i = ln.lid; i < p.head_dim; i += WG) {
        let v = x[base + i];
        s += v * v;
    }
    let scale = 1.0 / sqrt(wg_sum(s, ln) / f32(p.head_dim) + p.eps);
    for (var i = ln.lid; i < p.head_dim; i += WG) {
        y[base + i] = (x[base + i] * scale) * dq1(i);
    }
}
