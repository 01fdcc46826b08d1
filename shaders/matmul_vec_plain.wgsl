// matmul_vec without experts: workgroup z is token z, its x row and its y row; a fused bias
// add reads b from binding 4.

@group(0) @binding(4) var<storage, read> bias: array<f32>;

fn bias_at(i: u32) -> f32 {
    return bias[i];
}

fn mv_rows(z: u32) -> vec3<u32> {
    return vec3<u32>(0u, z, z);
}
