// add: y = a + b, element-wise (body: binary.wgsl).

fn op(a: f32, b: f32) -> f32 {
    return a + b;
}
