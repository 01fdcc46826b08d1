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
