// Helpers every op may use.

// The step (binding `step: array<u32>` of the ops that need positions), written per forward as
// `Step::words()`: [n, 0, 0, 0], then (pos, 4 + 2n + off) per token, then the cell lists, so
// token t's position j lives in cell step[step[5 + 2t] + j].

// f32 -> IEEE half bits, round to nearest even: the CPU's `f32_to_fp16` (ggml's
// GGML_FP32_TO_FP16) in integer arithmetic, so the result does not depend on how a driver
// rounds `pack2x16float` or whether it flushes subnormals.
fn f16_bits(x: f32) -> u32 {
    let u = bitcast<u32>(x);
    let sign = (u >> 16u) & 0x8000u;
    let a = u & 0x7fffffffu;
    if (a >= 0x7f800000u) {
        return sign | select(0x7c00u, 0x7e00u, a > 0x7f800000u);
    }
    if (a >= 0x477ff000u) {
        return sign | 0x7c00u; // >= 65520 rounds to infinity
    }
    if (a >= 0x38800000u) {
        // normal half: rebias the exponent (127 - 15 = 112), round the 13 dropped bits
        let r = a + 0xfffu + ((a >> 13u) & 1u);
        return sign | ((r >> 13u) - 0x1c000u);
    }
    if (a < 0x33000000u) {
        return sign; // below 2^-25: rounds to zero
    }
    // subnormal half, in units of 2^-24
    let e = a >> 23u;
    let m = (a & 0x7fffffu) | 0x800000u;
    let sh = 126u - e;
    let q = m >> sh;
    let rem = m & ((1u << sh) - 1u);
    let half = 1u << (sh - 1u);
    let up = rem > half || (rem == half && (q & 1u) == 1u);
    return sign | (q + select(0u, 1u, up));
}

// IEEE half bits (low 16 bits of h) -> f32, exact, in integer arithmetic. `f16_to_f32` and
// `f16x2` (the module's f16 decode, shaders.rs) are this, or unpack2x16float where the adapter
// has it (DownlevelFlags::SHADER_F16_IN_F32, which some drivers lack) and a probe at device
// creation saw it decode every half exactly as this does: the two are then the same function.
fn f16_to_f32_sw(h: u32) -> f32 {
    let sign = (h & 0x8000u) << 16u;
    let e = (h >> 10u) & 0x1fu;
    let m = h & 0x3ffu;
    if (e == 0u) {
        let v = f32(m) * 5.9604644775390625e-8; // subnormal: m · 2^-24, a normal f32
        return select(v, -v, sign != 0u);
    }
    if (e == 31u) {
        return bitcast<f32>(sign | 0x7f800000u | (m << 13u));
    }
    return bitcast<f32>(sign | ((e + 112u) << 23u) | (m << 13u));
}

fn round_f16(x: f32) -> f32 {
    return f16_to_f32(f16_bits(x));
}

// Linear index of this invocation when a dispatch is folded into (x, y) workgroups.
fn linear_id(gid: vec3<u32>, nwg: vec3<u32>, wg: u32) -> u32 {
    return gid.x + gid.y * nwg.x * wg;
}

// RoPE applied where a value is read (a rope folded into the op reading its output), as
// rope.wgsl rotates: element d of a head_dim-wide head, n_rot of them rotated, pairs (i, i + n_rot
// / 2) with neox, (2i, 2i + 1) without. `rope_partner` is d's partner in the head (d itself past
// n_rot); `rope_value` the rotated value from d's and its partner's, with cs the step's table
// [token][n_rot / 2].
fn rope_partner(d: u32, n_rot: u32, neox: u32) -> u32 {
    if (d >= n_rot) {
        return d;
    }
    if (neox != 0u) {
        let half = n_rot / 2u;
        return select(d + half, d - half, d >= half);
    }
    return d ^ 1u;
}

fn rope_value(d: u32, n_rot: u32, neox: u32, xd: f32, xp: f32, c: vec2<f32>) -> f32 {
    if (d >= n_rot) {
        return xd;
    }
    let half = n_rot / 2u;
    let second = select((d & 1u) == 1u, d >= half, neox != 0u);
    if (second) {
        return xp * c.y + xd * c.x;
    }
    return xd * c.x - xp * c.y;
}

// The table entry of element d.
fn rope_pair(d: u32, n_rot: u32, neox: u32) -> u32 {
    return select(d / 2u, d % (n_rot / 2u), neox != 0u);
}

// The positions one range of the split-KV attention takes (attention_split, attention_reduce):
// the span over n_split, rounded up to whole 64-position tiles; ranges past the span are empty.
fn split_chunk(span: u32, n_split: u32) -> u32 {
    return ((span + n_split - 1u) / n_split + 63u) / 64u * 64u;
}

// Where quantize_act's output (for nk = n · k activations) keeps the packed 8-bit form, as
// u32 word indices: the values as floats (nk), the q8_1 corrections (nk / 32), then, from this
// 16-byte-aligned word, the 8-bit q as 4 bytes a word (nk / 4), then one f32 scale d per
// 32-element block (nk / 32; a q8_K block's d repeated 8 times). The int8 matvec reads these.
fn act_q_base(nk: u32) -> u32 {
    return (nk + nk / 32u + 3u) & ~3u;
}

// Token t's activations in that output, rows of k: xb its values (vec4 index), cb its first
// correction, qb its packed q (pairs of words: one pair per 8-element chunk), db its first scale.
struct XRow {
    xb: u32,
    cb: u32,
    qb: u32,
    db: u32,
}

fn act_row(nk: u32, k: u32, t: u32) -> XRow {
    let qw = act_q_base(nk);
    return XRow(t * (k / 4u), nk + t * (k / 32u), (qw + t * (k / 4u)) / 2u, qw + nk / 4u + t * (k / 32u));
}
