// Helpers every op may use.

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

fn round_f16(x: f32) -> f32 {
    return unpack2x16float(f16_bits(x)).x;
}

// Linear index of this invocation when a dispatch is folded into (x, y) workgroups.
fn linear_id(gid: vec3<u32>, nwg: vec3<u32>, wg: u32) -> u32 {
    return gid.x + gid.y * nwg.x * wg;
}
