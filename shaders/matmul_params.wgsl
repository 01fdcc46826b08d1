// The matmuls' parameters (params.rs's MatmulParams) and the bindings every matmul body reads
// alike: the weight's raw blocks and y. x (binding 2) is each body's own, in the form it reads;
// binding 4 is the bias (matmul_store.wgsl, matmul_vec_plain.wgsl) or the experts' route
// (matmul_vec_id.wgsl).

struct Params {
    k: u32,        // row length (elements)
    m: u32,        // width of y (all rows of the weight; per slot with experts)
    rows: u32,     // rows in this part (per expert with experts)
    row0: u32,     // first row of this part
    n: u32,        // rows of x (tokens)
    ids: u32,      // experts: slots per token (0 without)
    x_slot: u32,   // experts: 1 where x has one row per slot
    n_expert: u32, // experts: how many
    acc: u32,      // 1: y += x · W (a fused residual add; y holds the residual)
    bias: u32,     // 1: y = x · W + b (a fused bias add)
    sk_tiles: u32,   // CUDA's tensor-core tiles only (stream-k); 0 here
    sk_workers: u32, // likewise
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> w: array<u32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
