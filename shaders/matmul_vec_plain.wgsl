// matmul_vec without experts: one workgroup takes every token of the step (p.n ≤ MV_COLS: ALL_TOKENS),
// reading each weight row once for all of them; a fused bias add reads b from binding 4.

const ALL_TOKENS: bool = true;

@group(0) @binding(4) var<storage, read> bias: array<f32>;

fn bias_at(i: u32) -> f32 {
    return bias[i];
}

fn mv_rows(z: u32) -> vec3<u32> {
    return vec3<u32>(0u, z, z);
}
