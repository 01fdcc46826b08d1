// attention_split (prefills, and decode steps with a long context; kv_store ran first,
// attention_reduce follows): flash-decoding. Token t's positions [lo, pos] are cut into at most p.n_split ranges
// of whole 64-position tiles (split_chunk); workgroup
// (x, s, t) takes range s for the p.hg query heads x·hg .. x·hg + hg − 1, which all read one KV
// head, so each K and V row of the range is loaded once for all of them (GQA packing). One pass
// with an online softmax per head, in f32: per tile of 64 positions each invocation scores one
// position for every head, the tile's maximum rescales the running sum and accumulators, and
// each invocation accumulates p·V for its (head, dimension) pairs. The range's unnormalised
// output, its maximum and its sum go to `part` for attention_reduce, in the slot of the token's
// place u = t − t0 among the launch's tokens (workgroups z), the head and the range:
//   part[slot · (head_dim_v + 2) + d], then max, sum; slot = (u · n_head + h) · n_split + s
// A range past the end of the context writes max −3e38 and sum 0, which attention_reduce skips
// (attention_tile writes the same slots its own way). q is read (rotated where a rope is folded in) and rounded as the CPU rounds
// it for the cache type, as attention.wgsl does; the probabilities are not rounded (the CPU's
// default path rounds them to f16 with an f16 cache: the difference is within the attention
// tests' tolerance).

const WG: u32 = 64u;
const MAX_HG_D: u32 = 1024u; // hg · head_dim and hg · head_dim_v; the schedule keeps within it
const MAX_A: u32 = 16u; // (head, dimension) pairs per invocation: MAX_HG_D / WG
const MAX_QA: u32 = MAX_A;
const MAX_HG: u32 = 16u;

struct Params {
    n_head: u32,
    n_head_kv: u32,
    head_dim: u32,
    head_dim_v: u32,
    scale: f32,
    window: u32,  // 0 = none
    softcap: f32, // 0 = none
    n: u32,
    flash: u32,
    sinks: u32,
    t0: u32,
    n_rot: u32, // 0, or the rope folded into the attention (q read rotated; binding 6: its table)
    neox: u32,
    act: u32,
    n_split: u32,
    hg: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> step: array<u32>;
@group(0) @binding(2) var<storage, read> q: array<f32>;
@group(0) @binding(3) var<storage, read> kc: array<KV>;
@group(0) @binding(4) var<storage, read> vc: array<KV>;
@group(0) @binding(5) var<storage, read_write> part: array<f32>;
@group(0) @binding(6) var<storage, read> qcs: array<vec2<f32>>;

var<workgroup> qs: array<f32, MAX_HG_D>;
// hg × 64: the tile's scores, then its probabilities.
var<workgroup> ps: array<f32, MAX_HG_D>;
var<workgroup> mh: array<f32, MAX_HG>; // running maximum per head
var<workgroup> fh: array<f32, MAX_HG>; // this tile's rescale of the running sum and output
var<workgroup> lh: array<f32, MAX_HG>; // running sum

// Score of the key whose head starts at pair kb against the query at qs[qo]: scaled, capped.
fn score(kb: u32, qo: u32) -> f32 {
    var s = 0.0;
    for (var d = 0u; d < p.head_dim / 2u; d++) {
        let kp = k_pair(kb + d);
        s += qs[qo + 2u * d] * kp.x + qs[qo + 2u * d + 1u] * kp.y;
    }
    s *= p.scale;
    if (p.softcap > 0.0) {
        s = tanh(clamp(s / p.softcap, -15.0, 15.0)) * p.softcap;
    }
    return s;
}

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let t = wid.z + p.t0;
    let s = wid.y;
    let hg = p.hg;
    let h0 = wid.x * hg;
    let g = h0 / (p.n_head / p.n_head_kv);
    let pos = step[4u + 2u * t];
    let cells = step[5u + 2u * t]; // the sequence's row of position j is step[cells + j]
    var lo = 0u;
    if (p.window > 0u && pos + 1u > p.window) {
        lo = pos + 1u - p.window;
    }
    let hd = p.head_dim;
    let hdv = p.head_dim_v;
    let pb = (wid.z * p.n_head + h0) * p.n_split + s; // head h0 + hh's slot: pb + hh · n_split
    let chunk = split_chunk(pos + 1u - lo, p.n_split);
    let j0 = lo + s * chunk;
    if (j0 > pos) {
        if (lid < hg) {
            let mi = (pb + lid * p.n_split) * (hdv + 2u) + hdv;
            part[mi] = -3.0e38;
            part[mi + 1u] = 0.0;
        }
        return;
    }
    let j1 = min(j0 + chunk, pos + 1u);

    // The heads' queries, rounded per head as attention.wgsl rounds one.
    for (var i = lid; i < hg * hd; i += WG) {
        qs[i] = q_at((t * p.n_head + h0 + i / hd) * hd, i % hd, t);
    }
    round_q(hg * hd, lid);
    if (lid < hg) {
        mh[lid] = -3.0e38;
        lh[lid] = 0.0;
    }
    workgroupBarrier();

    let kw = p.n_head_kv * hd;
    let vw = p.n_head_kv * hdv;
    var acc: array<f32, MAX_A>;
    for (var base = j0; base < j1; base += WG) {
        let j = base + lid;
        if (j < j1) {
            let kb = (step[cells + j] * kw + g * hd) / 2u;
            for (var hh = 0u; hh < hg; hh++) {
                ps[hh * WG + lid] = score(kb, hh * hd);
            }
        } else {
            for (var hh = 0u; hh < hg; hh++) {
                ps[hh * WG + lid] = -3.0e38;
            }
        }
        workgroupBarrier();
        let cnt = min(WG, j1 - base);
        if (lid < hg) {
            var m = mh[lid];
            for (var jj = 0u; jj < cnt; jj++) {
                m = max(m, ps[lid * WG + jj]);
            }
            fh[lid] = exp(mh[lid] - m);
            mh[lid] = m;
        }
        workgroupBarrier();
        for (var i = lid; i < hg * WG; i += WG) {
            ps[i] = exp(ps[i] - mh[i / WG]);
        }
        workgroupBarrier();
        if (lid < hg) {
            var l = lh[lid] * fh[lid];
            for (var jj = 0u; jj < cnt; jj++) {
                l += ps[lid * WG + jj];
            }
            lh[lid] = l;
        }
        for (var a = 0u; a < MAX_A; a++) {
            let i = lid + a * WG;
            if (i < hg * hdv) {
                let hh = i / hdv;
                let vd = g * hdv + i % hdv;
                var sa = acc[a] * fh[hh];
                for (var jj = 0u; jj < cnt; jj++) {
                    sa += ps[hh * WG + jj] * v_at(step[cells + base + jj] * vw + vd);
                }
                acc[a] = sa;
            }
        }
        workgroupBarrier();
    }

    for (var a = 0u; a < MAX_A; a++) {
        let i = lid + a * WG;
        if (i < hg * hdv) {
            part[(pb + (i / hdv) * p.n_split) * (hdv + 2u) + i % hdv] = acc[a];
        }
    }
    if (lid < hg) {
        let mi = (pb + lid * p.n_split) * (hdv + 2u) + hdv;
        part[mi] = mh[lid];
        part[mi + 1u] = lh[lid];
    }
}
