// The declarations both kv_store bodies share (kv_store.wgsl, kv_store_q8_0.wgsl): the first
// half of the attention op writes token t's K and V rows into the layer's cache at its cell,
// step[step[5 + 2t] + step[4 + 2t]]. `KV` is the cache file's word type. A rope of K folded into
// the store (the rope node computes nothing) is applied as K is read (`k_at`).

struct Params {
    kw: u32, // K row width (n_head_kv · head_dim)
    vw: u32,
    n: u32,
    head_dim: u32, // K's head width
    n_rot: u32,    // 0, or the rope folded into the store (K read rotated; binding 6: its table)
    neox: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> step: array<u32>;
@group(0) @binding(2) var<storage, read> k: array<f32>;
@group(0) @binding(3) var<storage, read> v: array<f32>;
@group(0) @binding(4) var<storage, read_write> kc: array<KV>;
@group(0) @binding(5) var<storage, read_write> vc: array<KV>;
@group(0) @binding(6) var<storage, read> cs: array<vec2<f32>>;

// Element e of K [n][kw] as the store writes it: rotated where a rope is folded in (p.n_rot > 0;
// common.wgsl's rope_value), else as it is. Token t = e / kw.
fn k_at(e: u32) -> f32 {
    if (p.n_rot == 0u) {
        return k[e];
    }
    let t = e / p.kw;
    let d = (e - t * p.kw) % p.head_dim;
    let xp = k[e - d + rope_partner(d, p.n_rot, p.neox)];
    var c = vec2<f32>(1.0, 0.0);
    if (d < p.n_rot) {
        c = cs[t * (p.n_rot / 2u) + rope_pair(d, p.n_rot, p.neox)];
    }
    return rope_value(d, p.n_rot, p.neox, k[e], xp, c);
}

// The cell token t writes (common.wgsl: the step's layout).
fn store_cell(t: u32) -> u32 {
    return step[step[5u + 2u * t] + step[4u + 2u * t]];
}
