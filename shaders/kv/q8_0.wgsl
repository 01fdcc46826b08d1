// q8_0 KV cache: rows of 34-byte blocks (d f16 | 32 × i8), x = d·q, exactly the CPU's bytes
// (written by kv_store_q8_0.wgsl). Like the CPU (ggml's vec_dot type for q8_0), q is itself
// quantized to q8_0 per 32-element block before the dot products; probabilities are not rounded.

alias KV = u32;
const QBLOCK: u32 = 32u;

fn kc_u16(b: u32) -> u32 {
    return (kc[b >> 2u] >> ((b & 2u) * 8u)) & 0xffffu;
}

fn i8_of(u: u32) -> f32 {
    return f32(bitcast<i32>(u << 24u) >> 24u);
}

// Elements 2i, 2i + 1 of the K cache (one block: 2i is even).
fn k_pair(i: u32) -> vec2<f32> {
    let e = 2u * i;
    let base = (e / 32u) * 34u;
    let d = f16_to_f32(kc_u16(base));
    let q = kc_u16(base + 2u + e % 32u);
    return vec2<f32>(i8_of(q & 0xffu), i8_of(q >> 8u)) * d;
}

fn v_at(i: u32) -> f32 {
    let base = (i / 32u) * 34u;
    let d = f16_to_f32((vc[base >> 2u] >> ((base & 2u) * 8u)) & 0xffffu);
    let b = base + 2u + i % 32u;
    return i8_of((vc[b >> 2u] >> ((b & 3u) * 8u)) & 0xffu) * d;
}

fn kv_round(x: f32) -> f32 {
    return x;
}

// Rust's f32::round: halves away from zero (WGSL's round() goes to even).
fn round_away(x: f32) -> f32 {
    let t = trunc(x);
    return select(t, t + sign(x), abs(x - t) >= 0.5);
}

// quantize_row_q8_0_ref then dequantize, for one element of a block whose |max| is amax.
fn kv_round_q(x: f32, amax: f32) -> f32 {
    let d = amax / 127.0;
    let id = select(0.0, 1.0 / d, d != 0.0);
    return round_away(x * id) * f16_to_f32(f16_bits(d));
}

// kv_round_q's integer and scale apart: x ≈ q_int · q_scale.
fn q_int(x: f32, amax: f32) -> f32 {
    let d = amax / 127.0;
    let id = select(0.0, 1.0 / d, d != 0.0);
    return round_away(x * id);
}

fn q_scale(amax: f32) -> f32 {
    return f16_to_f32(f16_bits(amax / 127.0));
}

// k_pair's integers, and their block's scale.
fn k_int_pair(i: u32) -> vec2<f32> {
    let e = 2u * i;
    let q = kc_u16((e / 32u) * 34u + 2u + e % 32u);
    return vec2<f32>(i8_of(q & 0xffu), i8_of(q >> 8u));
}

fn k_scale(i: u32) -> f32 {
    return f16_to_f32(kc_u16((2u * i / 32u) * 34u));
}
