// The declarations both kv_store bodies share (kv_store.wgsl, kv_store_q8_0.wgsl): the first
// half of the attention op writes token t's K and V rows into the layer's cache at its cell,
// step[step[5 + 2t] + step[4 + 2t]]. `KV` is the cache file's word type.

struct Params {
    kw: u32, // K row width (n_head_kv · head_dim)
    vw: u32,
    n: u32,
    _pad0: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> step: array<u32>;
@group(0) @binding(2) var<storage, read> k: array<f32>;
@group(0) @binding(3) var<storage, read> v: array<f32>;
@group(0) @binding(4) var<storage, read_write> kc: array<KV>;
@group(0) @binding(5) var<storage, read_write> vc: array<KV>;

// The cell token t writes (common.wgsl: the step's layout).
fn store_cell(t: u32) -> u32 {
    return step[step[5u + 2u * t] + step[4u + 2u * t]];
}
