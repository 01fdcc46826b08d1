// add_pos_rows: y[t, i] = x[t, i] + w[pos_t, i], w a learned position table [n_pos][width]
// (f32), pos_t token t's position in the step (common.wgsl: the step's layout). BERT's absolute
// position embeddings. One invocation per element; a position past the table (which the
// engine's limits never let through) adds nothing.

override WG: u32 = 256u;

struct Params {
    n: u32,
    width: u32,
    n_pos: u32,
    _pad0: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> step: array<u32>;
@group(0) @binding(2) var<storage, read> w: array<f32>;
@group(0) @binding(3) var<storage, read> x: array<f32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear_id(gid, nwg, WG);
    if (i >= p.n) {
        return;
    }
    let t = i / p.width;
    let pos = step[4u + 2u * t];
    var v = x[i];
    if (pos < p.n_pos) {
        v += w[pos * p.width + i % p.width];
    }
    y[i] = v;
}
