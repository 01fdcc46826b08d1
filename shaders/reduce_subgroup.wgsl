// Workgroup reductions through subgroup operations (wgpu `Features::SUBGROUP`): one subgroup
// reduction, one barrier, then every invocation adds up the per-subgroup partials. The subgroup
// size (8 to 64 depending on the adapter, 8 on llvmpipe) comes from the builtins, never assumed.
// (wgpu enables the builtins with the device feature; naga rejects the `enable` directive.)
// The host takes this path only where subgroups have at least 8 lanes.

struct Lanes {
    @builtin(local_invocation_index) lid: u32,
    @builtin(subgroup_invocation_id) sg_lane: u32,
    @builtin(subgroup_id) sg_id: u32,
    @builtin(num_subgroups) n_sg: u32,
    @builtin(subgroup_size) sg_size: u32,
}

var<workgroup> red: array<f32, 256>;

fn wg_sum(v: f32, ln: Lanes) -> f32 {
    let s = subgroupAdd(v);
    if (ln.sg_lane == 0u) {
        red[ln.sg_id] = s;
    }
    workgroupBarrier();
    var t = 0.0;
    for (var i = 0u; i < ln.n_sg; i++) {
        t += red[i];
    }
    workgroupBarrier();
    return t;
}

fn wg_max(v: f32, ln: Lanes) -> f32 {
    let s = subgroupMax(v);
    if (ln.sg_lane == 0u) {
        red[ln.sg_id] = s;
    }
    workgroupBarrier();
    var t = red[0];
    for (var i = 1u; i < ln.n_sg; i++) {
        t = max(t, red[i]);
    }
    workgroupBarrier();
    return t;
}

// Segments of `tpr` lanes (a power of two dividing WG): a segment is `tpr` lanes of one subgroup
// where the subgroup holds it (the sum a butterfly of shuffles), else tpr / sg_size whole
// subgroups (each subgroup's butterfly, then their partials through workgroup memory).
// Segment and lane come from the subgroup builtins, so no assumption about how local indices map
// onto subgroups; every subgroup of a workgroup has the same size. Every invocation calls
// seg_sum (uniform: its barriers).
fn seg_index(ln: Lanes, tpr: u32) -> vec2<u32> {
    if (tpr <= ln.sg_size) {
        let per = ln.sg_size / tpr;
        return vec2<u32>(ln.sg_id * per + ln.sg_lane / tpr, ln.sg_lane % tpr);
    }
    let subs = tpr / ln.sg_size;
    return vec2<u32>(ln.sg_id / subs, (ln.sg_id % subs) * ln.sg_size + ln.sg_lane);
}

fn seg_sum(v: f32, ln: Lanes, tpr: u32) -> f32 {
    var s = v;
    for (var m = min(tpr, ln.sg_size) / 2u; m > 0u; m >>= 1u) {
        s += subgroupShuffleXor(s, m);
    }
    if (ln.sg_lane == 0u) {
        red[ln.sg_id] = s;
    }
    workgroupBarrier();
    if (tpr > ln.sg_size) {
        let subs = tpr / ln.sg_size;
        let first = ln.sg_id / subs * subs;
        s = 0.0;
        for (var i = 0u; i < subs; i++) {
            s += red[first + i];
        }
    }
    workgroupBarrier();
    return s;
}
