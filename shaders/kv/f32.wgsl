// f32 KV cache: one element per word. KV-file interface (shaders/kv/*.wgsl), over the op's
// `kc` / `vc` bindings:
//   KV, EPW           word type and elements per word (kv_store.wgsl; q8_0 has its own store)
//   kv_encode(a, b)   the word holding elements (a, b) (b unused when EPW = 1)
//   k_pair(i)         elements 2i, 2i + 1 of kc;  v_at(i): element i of vc
//   kv_round(x)       what the CPU's attention rounds the probabilities to
//   QBLOCK, kv_round_q(x, amax)  what it rounds q to, given |max| of x's QBLOCK-block
//   q_int(x, amax), q_scale(amax), k_int_pair(i), k_scale(i)  the same as a value to multiply
//                     and its block's scale (an integer and d for q8_0, the value and 1 for
//                     f16): q's, and K's elements 2i, 2i + 1; the caches whose attention takes
//                     attention_tile_coop16.wgsl only

alias KV = f32;
const QBLOCK: u32 = 1u;
const EPW: u32 = 1u;

fn kv_encode(a: f32, b: f32) -> f32 {
    return a;
}

fn k_pair(i: u32) -> vec2<f32> {
    return vec2<f32>(kc[2u * i], kc[2u * i + 1u]);
}

fn v_at(i: u32) -> f32 {
    return vc[i];
}

fn kv_round(x: f32) -> f32 {
    return x;
}

fn kv_round_q(x: f32, amax: f32) -> f32 {
    return x;
}
