// The query as both attention kernels read it (attention.wgsl, attention_split.wgsl: their
// `p`, `q` and `qcs` bindings), appended after their bodies.

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
