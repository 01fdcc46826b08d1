// softcap: y = cap · tanh(x / cap), Gemma's final logit soft-capping (body: unary.wgsl, s = cap).

fn op(x: f32, cap: f32) -> f32 {
    // tanh saturates in f32 long before 15; the clamp keeps exp-based tanh from inf/inf.
    return tanh(clamp(x / cap, -15.0, 15.0)) * cap;
}
