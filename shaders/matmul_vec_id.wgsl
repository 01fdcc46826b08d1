// matmul_vec_id, ggml's MUL_MAT_ID for decode: workgroup z is slot j = z % ids of token
// t = z / ids; its weight rows are those of the slot's expert (route[t][j], as moe_route wrote
// it), its x row t (or z, where x has a row per slot), its y row z.

@group(0) @binding(4) var<storage, read> route: array<f32>;

const ALL_TOKENS: bool = false;

// Expert biases are their own op (add_bias_id); p.bias is 0 here.
fn bias_at(i: u32) -> f32 {
    return 0.0;
}

fn mv_rows(z: u32) -> vec3<u32> {
    let t = z / p.ids;
    let e = min(u32(route[t * 2u * p.ids + z % p.ids]), p.n_expert - 1u);
    return vec3<u32>(e * p.rows, select(t, z, p.x_slot != 0u), z);
}
