// moe_route: expert routing, one invocation per row of router logits [n_expert] (llama.cpp's
// build_moe_ffn head; the CPU's cpu::moe::route). Writes route[row] = the k chosen expert ids
// (as f32), best first (ties to the lower id), then their weights: softmax probabilities over
// all experts (gating 0) or a softmax over the k chosen logits (gating 1, gpt-oss), divided by
// their sum (at least 2^-14) where norm is set. At most 512 experts.

override WG: u32 = 64u;

struct Params {
    n_expert: u32,
    k: u32,
    rows: u32,
    gating: u32,
    norm: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> logits: array<f32>;
@group(0) @binding(2) var<storage, read_write> route: array<f32>;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let row = linear_id(gid, nwg, WG);
    if (row >= p.rows) {
        return;
    }
    let l0 = row * p.n_expert;
    let r0 = row * 2u * p.k;
    var taken: array<u32, 16>;
    for (var i = 0u; i < 16u; i++) {
        taken[i] = 0u;
    }
    // Selection of the k largest logits (softmax keeps their order).
    for (var j = 0u; j < p.k; j++) {
        var best = 0u;
        var bv = 0.0;
        var found = false;
        for (var e = 0u; e < p.n_expert; e++) {
            let v = logits[l0 + e];
            if ((taken[e / 32u] & (1u << (e % 32u))) == 0u && (!found || v > bv)) {
                best = e;
                bv = v;
                found = true;
            }
        }
        taken[best / 32u] |= 1u << (best % 32u);
        route[r0 + j] = f32(best);
        route[r0 + p.k + j] = bv;
    }
    // The first chosen logit is the maximum of either softmax.
    let mx = route[r0 + p.k];
    var sum = 0.0;
    if (p.gating == 0u) {
        for (var e = 0u; e < p.n_expert; e++) {
            sum += exp(logits[l0 + e] - mx);
        }
    } else {
        for (var j = 0u; j < p.k; j++) {
            sum += exp(route[r0 + p.k + j] - mx);
        }
    }
    let inv = 1.0 / sum;
    var wsum = 0.0;
    for (var j = 0u; j < p.k; j++) {
        let w = exp(route[r0 + p.k + j] - mx) * inv;
        route[r0 + p.k + j] = w;
        wsum += w;
    }
    if (p.norm != 0u) {
        let d = max(wsum, 6.103515625e-5);
        for (var j = 0u; j < p.k; j++) {
            route[r0 + p.k + j] = route[r0 + p.k + j] / d;
        }
    }
}
