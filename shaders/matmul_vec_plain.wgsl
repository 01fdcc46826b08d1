// matmul_vec without experts: workgroup z is token z, its x row and its y row.

fn mv_rows(z: u32) -> vec3<u32> {
    return vec3<u32>(0u, z, z);
}
