// get_rows: y[t, :] = W[ids[t], :] dequantized, for the ids that fall in this weight part
// (rows row0 .. row0 + rows). One invocation per (8-element chunk, token).

override WG: u32 = 32u;

struct Params {
    k: u32,
    rows: u32,
    row0: u32,
    n: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> w: array<u32>;
@group(0) @binding(2) var<storage, read> ids: array<u32>;
@group(0) @binding(3) var<storage, read_write> y: array<vec4<f32>>;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let c = gid.x;
    let t = gid.y;
    if (c >= p.k / 8u || t >= p.n) {
        return;
    }
    let id = ids[t];
    if (id < p.row0 || id >= p.row0 + p.rows) {
        return;
    }
    let cpb = QK / 8u;
    let v = dq8((id - p.row0) * (p.k / QK) * QB + (c / cpb) * QB, c % cpb);
    let o = (t * p.k + c * 8u) / 4u;
    y[o] = v[0];
    y[o + 1u] = v[1];
}
