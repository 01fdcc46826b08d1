// The query as the attention kernels read it (attention.wgsl, attention_split.wgsl,
// attention_tile.wgsl: their `p`, `q` and `qcs` bindings, their workgroup array `qs` and their
// MAX_QA), appended after their bodies.

// Element d of token t's q head at qb, rotated where a rope is folded in (common.wgsl).
fn q_at(qb: u32, d: u32, t: u32) -> f32 {
    if (p.n_rot == 0u) {
        return q[qb + d];
    }
    var c = vec2<f32>(1.0, 0.0);
    if (d < p.n_rot) {
        c = qcs[t * (p.n_rot / 2u) + rope_pair(d, p.n_rot, p.neox)];
    }
    return rope_value(d, p.n_rot, p.neox, q[qb + d], q[qb + rope_partner(d, p.n_rot, p.neox)], c);
}

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
