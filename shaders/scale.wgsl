// scale: y = s · x (body: unary.wgsl).

fn op(x: f32, s: f32) -> f32 {
    return x * s;
}
