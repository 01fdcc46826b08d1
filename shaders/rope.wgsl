// rope: rotates the first n_rot dimensions of every head at the step's positions; the others
// are copied. cos/sin come from a per-step table [n_tokens][n_rot / 2] that the host fills with
// the CPU's own `rope_cache`, so every backend rotates by the same f32 angles (and GPU sin/cos
// of large arguments never enter). ggml: ggml_compute_forward_rope_f32 (modes norm and neox).

override WG: u32 = 64u;

struct Params {
    n_heads: u32,
    head_dim: u32,
    n_rot: u32,
    neox: u32,
    n: u32, // tokens
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> cs: array<vec2<f32>>;
@group(0) @binding(2) var<storage, read> x: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x; // pair index within the head
    let h = gid.y;
    let t = gid.z;
    let half = p.n_rot / 2u;
    if (i >= p.head_dim / 2u || h >= p.n_heads || t >= p.n) {
        return;
    }
    let base = (t * p.n_heads + h) * p.head_dim;
    if (i >= half) {
        let d = p.n_rot + 2u * (i - half);
        y[base + d] = x[base + d];
        y[base + d + 1u] = x[base + d + 1u];
        return;
    }
    let c = cs[t * half + i];
    var i0 = base + 2u * i;
    var i1 = i0 + 1u;
    if (p.neox != 0u) {
        i0 = base + i;
        i1 = i0 + half;
    }
    let x0 = x[i0];
    let x1 = x[i1];
    y[i0] = x0 * c.x - x1 * c.y;
    y[i1] = x0 * c.y + x1 * c.x;
}
