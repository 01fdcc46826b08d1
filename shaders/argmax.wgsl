// argmax over one row of logits (greedy decoding reads back 4 bytes instead of the row).
// Ties go to the lowest id, NaN never wins: the CPU's `sampling::argmax`.

const WGA: u32 = 256u;

struct Params {
    n: u32,
    offset: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<u32>;

var<workgroup> bv: array<f32, WGA>;
var<workgroup> bi: array<u32, WGA>;

@compute @workgroup_size(WGA)
fn main(@builtin(local_invocation_index) lid: u32) {
    var best = -3.4e38;
    var idx = 0xffffffffu;
    for (var i = lid; i < p.n; i += WGA) {
        let v = x[p.offset + i];
        if (v > best || idx == 0xffffffffu && !(v < best)) {
            best = v;
            idx = i;
        }
    }
    bv[lid] = best;
    bi[lid] = idx;
    workgroupBarrier();
    for (var s = WGA / 2u; s > 0u; s >>= 1u) {
        if (lid < s) {
            let v = bv[lid + s];
            let i = bi[lid + s];
            if (v > bv[lid] || (v == bv[lid] && i < bi[lid])) {
                bv[lid] = v;
                bi[lid] = i;
            }
        }
        workgroupBarrier();
    }
    if (lid == 0u) {
        out[0] = select(bi[0], 0u, bi[0] == 0xffffffffu);
    }
}
