// attention_tile.wgsl's and attention_tile_coop16.wgsl's parameters (AttentionTileParams),
// bindings and the first position a token reads: the head of both bodies, after the KV file.

struct Params {
    n_head: u32,
    n_head_kv: u32,
    head_dim: u32,
    head_dim_v: u32,
    scale: f32,
    window: u32,  // 0 = none
    softcap: f32, // 0 = none
    n: u32,
    t0: u32,
    n_rot: u32, // 0, or the rope folded into the attention (q read rotated; binding 6: its table)
    neox: u32,
    n_split: u32,
    hg: u32,
    tq: u32,
    kt: u32,
    _pad0: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> step: array<u32>;
@group(0) @binding(2) var<storage, read> q: array<f32>;
@group(0) @binding(3) var<storage, read> kc: array<KV>;
@group(0) @binding(4) var<storage, read> vc: array<KV>;
@group(0) @binding(5) var<storage, read_write> part: array<f32>;
@group(0) @binding(6) var<storage, read> qcs: array<vec2<f32>>;

// The first position token t reads.
fn row_lo(t: u32) -> u32 {
    let pos = step[4u + 2u * t];
    if (p.window > 0u && pos + 1u > p.window) {
        return pos + 1u - p.window;
    }
    return 0u;
}
