// quantize_block.wgsl's rounding with many invocations per block, for the writers that spread a
// row over a whole workgroup (rms_norm, quantize_act, the GLUs): each invocation holds the 4
// elements of one packed word, v, the first of them element e0 (a multiple of 4) of the nk that
// the kernel's output holds, written through its `act_out` and `act_word`. The qk / 4 invocations
// of a block (8 for q8_0 / q8_1, 64 for q8_K) are consecutive in the workgroup (local index lid)
// and the first of them holds the block's first element; every invocation calls this in uniform
// control flow (act uniform), `valid` false for the whole blocks past the data. The block's
// largest magnitude and the signed value that first holds it (quantize_block's serial choice)
// are reduced as one key, largest first: the magnitude's bits, then the complement of the
// element's index (the earlier wins a tie), then its sign. Σq of q8_1 is a sum of integers,
// exact in any order. The values written are quantize_block's, bit for bit (CUDA: common.cuh's
// quantize_word). At most 256 invocations per workgroup.

var<workgroup> qkey_hi: array<u32, 256>;
var<workgroup> qkey_lo: array<u32, 256>;
var<workgroup> qsum: array<f32, 256>;

fn qkey_gt(ah: u32, al: u32, bh: u32, bl: u32) -> bool {
    return ah > bh || (ah == bh && al > bl);
}

fn quantize_word(act: u32, v: vec4<f32>, valid: bool, e0: u32, nk: u32, lid: u32) {
    quantize_word_part(act, v, valid, valid, e0, nk, lid);
}

// quantize_word writing only where `write` (valid words another workgroup, holding the same
// block, does not write): a q8_K block split between two workgroups, each of which reads the
// whole block for its scale.
fn quantize_word_part(act: u32, v: vec4<f32>, valid: bool, write: bool, e0: u32, nk: u32, lid: u32) {
    let seg = select(8u, 64u, act == 2u);
    var hi = 0u;
    var lo = 0u;
    if (valid) {
        for (var i = 0u; i < 4u; i++) {
            let h = bitcast<u32>(abs(v[i]));
            let l = ((0x7fffffffu - (e0 + i)) << 1u) | select(0u, 1u, v[i] < 0.0);
            if (qkey_gt(h, l, hi, lo)) {
                hi = h;
                lo = l;
            }
        }
    }
    qkey_hi[lid] = hi;
    qkey_lo[lid] = lo;
    workgroupBarrier();
    for (var s = seg / 2u; s > 0u; s >>= 1u) {
        if (lid % seg < s) {
            let h = qkey_hi[lid + s];
            let l = qkey_lo[lid + s];
            if (qkey_gt(h, l, qkey_hi[lid], qkey_lo[lid])) {
                qkey_hi[lid] = h;
                qkey_lo[lid] = l;
            }
        }
        workgroupBarrier();
    }
    let first = lid - lid % seg;
    let amax = bitcast<f32>(qkey_hi[first]);
    let mx = select(amax, -amax, (qkey_lo[first] & 1u) == 1u);
    // Every invocation has read the block's key before the next call writes the arrays.
    workgroupBarrier();
    let qw = act_q_base(nk) + e0 / 4u;
    let dw = act_q_base(nk) + nk / 4u + e0 / 32u;
    let first32 = e0 % 32u == 0u;
    if (act == 2u) {
        var d = 0.0;
        var iscale = 0.0;
        if (amax != 0.0) {
            iscale = -127.0 / mx;
            d = 1.0 / iscale;
        }
        var q = vec4<f32>();
        for (var i = 0u; i < 4u; i++) {
            q[i] = min(round(iscale * v[i]), 127.0);
        }
        if (write) {
            for (var i = 0u; i < 4u; i++) {
                act_out(e0 + i, d * q[i]);
            }
            act_word(qw, pack4xI8(vec4<i32>(q)));
            if (first32) {
                act_word(dw, bitcast<u32>(d));
            }
        }
        return;
    }
    let d = amax / 127.0;
    let id = select(0.0, 127.0 / amax, amax != 0.0);
    let d16 = round_f16(d);
    var q = vec4<f32>();
    var sq = 0.0;
    for (var i = 0u; i < 4u; i++) {
        q[i] = round(v[i] * id);
        sq += q[i];
    }
    if (act == 1u) {
        qsum[lid] = sq;
        workgroupBarrier();
        for (var s = seg / 2u; s > 0u; s >>= 1u) {
            if (lid % seg < s) {
                qsum[lid] += qsum[lid + s];
            }
            workgroupBarrier();
        }
        sq = qsum[first];
        workgroupBarrier();
    }
    if (write) {
        for (var i = 0u; i < 4u; i++) {
            act_out(e0 + i, d16 * q[i]);
        }
        act_word(qw, pack4xI8(vec4<i32>(q)));
        if (first32) {
            act_word(dw, bitcast<u32>(d16));
            if (act == 1u) {
                act_out(nk + e0 / 32u, round_f16(sq * d) - d16 * sq);
            }
        }
    }
}

// A row of len elements (whole blocks) from element x0 of the nk the output holds, read through
// the kernel's `act_in`, rounded a word per invocation, WG words at a time; every invocation
// calls it (uniform). In place where `act_in` reads the output: each invocation reads its 4
// values before any writes them.
fn quantize_row(act: u32, x0: u32, len: u32, nk: u32, lid: u32) {
    for (var c = 0u; c < len; c += 4u * WG) {
        let e = c + 4u * lid;
        let valid = e < len;
        var v = vec4<f32>();
        if (valid) {
            v = vec4<f32>(act_in(x0 + e), act_in(x0 + e + 1u), act_in(x0 + e + 2u), act_in(x0 + e + 3u));
        }
        quantize_word(act, v, valid, x0 + e, nk, lid);
    }
}
