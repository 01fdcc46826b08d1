// slice: y[t, i] = x[t, col0 + i] for i < width, x rows of src_width (a ggml_view_2d made
// contiguous; Gemma 4's per-layer inputs, cpu::mod's `Slice`). One element per invocation.

override WG: u32 = 256u;

struct Params {
    n: u32,
    width: u32,
    src_width: u32,
    col0: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear_id(gid, nwg, WG);
    if (i < p.n) {
        let t = i / p.width;
        y[i] = x[t * p.src_width + p.col0 + i - t * p.width];
    }
}
