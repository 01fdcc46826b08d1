// Workgroup reductions through workgroup memory: the path that needs no optional feature.
// Every op that reduces declares `override WG: u32` (a power of two, at most 256) and takes a
// `Lanes` argument; all invocations of the workgroup must call these in uniform control flow.

struct Lanes {
    @builtin(local_invocation_index) lid: u32,
}

var<workgroup> red: array<f32, 256>;

fn wg_sum(v: f32, ln: Lanes) -> f32 {
    red[ln.lid] = v;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if (ln.lid < s) {
            red[ln.lid] += red[ln.lid + s];
        }
        workgroupBarrier();
    }
    let r = red[0];
    workgroupBarrier();
    return r;
}

fn wg_max(v: f32, ln: Lanes) -> f32 {
    red[ln.lid] = v;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if (ln.lid < s) {
            red[ln.lid] = max(red[ln.lid], red[ln.lid + s]);
        }
        workgroupBarrier();
    }
    let r = red[0];
    workgroupBarrier();
    return r;
}

// Segments of `tpr` consecutive invocations (a power of two dividing WG) each reduce their own
// sum: the (segment, lane) of this invocation, and the segment's sum (valid in lane 0).
fn seg_index(ln: Lanes, tpr: u32) -> vec2<u32> {
    return vec2<u32>(ln.lid / tpr, ln.lid % tpr);
}

fn seg_sum(v: f32, ln: Lanes, tpr: u32) -> f32 {
    red[ln.lid] = v;
    workgroupBarrier();
    for (var s = tpr / 2u; s > 0u; s >>= 1u) {
        if (ln.lid % tpr < s) {
            red[ln.lid] += red[ln.lid + s];
        }
        workgroupBarrier();
    }
    let r = red[ln.lid];
    workgroupBarrier();
    return r;
}
