// layer_norm: y = (x − mean) / sqrt(var + eps) · w + b over each row (BERT's LayerNorm), w and b
// f32. One workgroup per row: the invocations stride over it and reduce twice across the
// workgroup, the sum for the mean, then the squared deviations for the variance.
// ggml: ggml_compute_forward_norm_f32 then ggml_mul and ggml_add (cpu::ops::layer_norm).

override WG: u32 = 256u;

struct Params {
    width: u32,
    eps: f32,
    rows: u32,
    _pad0: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> w: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read> x: array<f32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, ln: Lanes) {
    let row = wid.x + wid.y * nwg.x;
    if (row >= p.rows) {
        return; // a spare workgroup of the folded grid (uniform: the whole workgroup leaves)
    }
    let base = row * p.width;
    var s = 0.0;
    for (var i = ln.lid; i < p.width; i += WG) {
        s += x[base + i];
    }
    let mean = wg_sum(s, ln) / f32(p.width);
    var s2 = 0.0;
    for (var i = ln.lid; i < p.width; i += WG) {
        let d = x[base + i] - mean;
        s2 += d * d;
    }
    let scale = 1.0 / sqrt(wg_sum(s2, ln) / f32(p.width) + p.eps);
    for (var i = ln.lid; i < p.width; i += WG) {
        y[base + i] = (x[base + i] - mean) * scale * w[i] + b[i];
    }
}
