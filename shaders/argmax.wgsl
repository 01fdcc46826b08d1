// argmax over one row of logits (greedy decoding reads back 4 bytes instead of the row).
// Ties go to the lowest id and NaN never wins (but a NaN at id 0, where the CPU starts): the
// CPU's `logits::argmax`, exactly. A long row is not one workgroup's: with p.parts > 1, stage 0
// runs p.parts workgroups, each over one of p.parts equal slices, writing its best as a (value
// bits, id) pair at out[1 + 2g]; stage 1, one workgroup, reduces the pairs (argmax.cu's header).

const WGA: u32 = 256u;

struct Params {
    n: u32,
    offset: u32,
    parts: u32, // slices of stage 0 (≤ 1: one workgroup does all)
    stage: u32, // 0: the slices (or the whole row), 1: their reduction
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<u32>;

var<workgroup> bv: array<f32, WGA>;
var<workgroup> bi: array<u32, WGA>;

// By its bits: WGSL lets a compiler assume floats are never NaN, so `v != v` may fold away.
fn is_nan(v: f32) -> bool {
    return (bitcast<u32>(v) & 0x7fffffffu) > 0x7f800000u;
}

@compute @workgroup_size(WGA)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let none = 0xffffffffu;
    let split = p.parts > 1u;
    var best = 0.0;
    var idx = none;
    if (split && p.stage == 1u) {
        // The slices' bests, in id order.
        for (var g = lid; g < p.parts; g += WGA) {
            let v = bitcast<f32>(out[1u + 2u * g]);
            let i = out[2u + 2u * g];
            if (i != none && (idx == none || v > best)) {
                best = v;
                idx = i;
            }
        }
    } else {
        let chunk = select(p.n, (p.n + p.parts - 1u) / p.parts, split);
        let i0 = select(0u, wid.x * chunk, split);
        let i1 = min(p.n, i0 + chunk);
        for (var i = i0 + lid; i < i1; i += WGA) {
            let v = x[p.offset + i];
            // ids rise, so a tie keeps the earlier one; a NaN is never taken.
            if (!is_nan(v) && (idx == none || v > best)) {
                best = v;
                idx = i;
            }
        }
    }
    bv[lid] = best;
    bi[lid] = idx;
    workgroupBarrier();
    for (var s = WGA / 2u; s > 0u; s >>= 1u) {
        if (lid < s) {
            let v = bv[lid + s];
            let i = bi[lid + s];
            if (i != none && (bi[lid] == none || v > bv[lid] || (v == bv[lid] && i < bi[lid]))) {
                bv[lid] = v;
                bi[lid] = i;
            }
        }
        workgroupBarrier();
    }
    if (lid == 0u) {
        if (split && p.stage == 0u) {
            out[1u + 2u * wid.x] = bitcast<u32>(bv[0]);
            out[2u + 2u * wid.x] = bi[0];
        } else {
            // The CPU starts from id 0, and nothing compares greater than a NaN there.
            let nan0 = p.n > 0u && is_nan(x[p.offset]);
            out[0] = select(bi[0], 0u, bi[0] == none || nan0);
        }
    }
}
