// geglu: y = gelu_tanh(gate) · up. Like ggml-cpu (GGML_GELU_FP16), gelu is evaluated at the
// f16-rounded input and its result rounded to f16; |g| >= 10 takes the exact limits.
// ggml: ggml_vec_geglu_f32. Body: binary.wgsl (a = gate, b = up).

fn gelu_tanh(x: f32) -> f32 {
    let t = 0.7978846 * x * (1.0 + 0.044715 * x * x);
    return 0.5 * x * (1.0 + tanh(clamp(t, -15.0, 15.0)));
}

fn op(gate: f32, up: f32) -> f32 {
    // A NaN gate gives NaN, as the CPU's table does. Tested by its bits: WGSL may assume no NaN
    // reaches a comparison.
    if ((bitcast<u32>(gate) & 0x7fffffffu) > 0x7f800000u) {
        return gate;
    }
    if (gate >= 10.0) {
        return gate * up;
    }
    if (gate > -10.0) {
        return round_f16(gelu_tanh(round_f16(gate))) * up;
    }
    return 0.0;
}
