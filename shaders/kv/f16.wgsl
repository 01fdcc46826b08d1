// f16 KV cache: two halves per u32 (low half first), written with the CPU's round-to-nearest-
// even. Like the CPU (ggml's non-flash path), q and the softmax probabilities are rounded to
// f16 too.

alias KV = u32;
const QBLOCK: u32 = 1u;
const EPW: u32 = 2u;

fn kv_encode(a: f32, b: f32) -> u32 {
    return f16_bits(a) | (f16_bits(b) << 16u);
}

fn k_pair(i: u32) -> vec2<f32> {
    return f16x2(kc[i]);
}

fn v_at(i: u32) -> f32 {
    return f16x2(vc[i >> 1u])[i & 1u];
}

fn kv_round(x: f32) -> f32 {
    return round_f16(x);
}

fn kv_round_q(x: f32, amax: f32) -> f32 {
    return round_f16(x);
}

fn q_int(x: f32, amax: f32) -> f32 {
    return kv_round_q(x, amax);
}

fn q_scale(amax: f32) -> f32 {
    return 1.0;
}

fn k_int_pair(i: u32) -> vec2<f32> {
    return k_pair(i);
}

fn k_scale(i: u32) -> f32 {
    return 1.0;
}
