// The query as the attention kernels read it (attention.wgsl, attention_split.wgsl,
// attention_tile.wgsl, attention_tile_coop16.wgsl: their `p`, `q` and `qcs` bindings),
// appended after their bodies; attention_q_round.wgsl follows it for the first three.

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
