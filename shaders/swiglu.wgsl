// swiglu: y = silu(gate) · up, silu(g) = g / (1 + e^-g). ggml: ggml_vec_swiglu_f32.
// Body: binary.wgsl (a = gate, b = up).

fn op(gate: f32, up: f32) -> f32 {
    return gate / (1.0 + exp(-gate)) * up;
}
