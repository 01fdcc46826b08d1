// attention_q.wgsl's rounding of a workgroup's queries (attention.wgsl, attention_split.wgsl,
// attention_tile.wgsl: their workgroup array `qs`, WG and MAX_QA).

// Rounds qs[0 .. nq), the query heads the whole workgroup has just loaded, as the CPU rounds q
// for the cache type (per QBLOCK-element block for q8_0). Every invocation calls it; each
// rounds at most MAX_QA elements, so nq ≤ MAX_QA · WG.
fn round_q(nq: u32, lid: u32) {
    workgroupBarrier();
    var qr: array<f32, MAX_QA>;
    for (var a = 0u; a < MAX_QA; a++) {
        let i = lid + a * WG;
        if (i < nq) {
            var amax = 0.0;
            if (QBLOCK > 1u) {
                let b0 = i / QBLOCK * QBLOCK;
                for (var k = 0u; k < QBLOCK; k++) {
                    amax = max(amax, abs(qs[b0 + k]));
                }
            }
            qr[a] = kv_round_q(qs[i], amax);
        }
    }
    workgroupBarrier();
    for (var a = 0u; a < MAX_QA; a++) {
        let i = lid + a * WG;
        if (i < nq) {
            qs[i] = qr[a];
        }
    }
}
