// attention_reduce (after attention_split), as shaders/attention_reduce.wgsl: one block per (q
// head h, token t) combines the ranges attention_split wrote for it (by its place among the
// launch's tokens, blocks y; split_chunk gives how many ranges hold positions): with M the largest range maximum (and the sink logit with sinks),
// o = Σ_s e^(m_s − M)·o_s / Σ_s e^(m_s − M)·l_s, a sink adding e^(sk[h] − M) to the sum. With
// act = 1 + quantize_act's ACT the block then rounds its head's output into binding 5 as
// attention.cu does.
//
// Params: AttentionParams (kv.cuh). Bindings: 1 step, 2 part, 3 o [n][n_head · head_dim_v],
// 4 sk [n_head] (read only with sinks), 5 qy. Grid: (n_head, tokens). Block: 64.

extern "C" __global__ void __launch_bounds__(64) attention_reduce(const Params p) {
    constexpr u32 WG = 64;
    constexpr u32 MAX_SPLIT = 64; // the schedule's most ranges
    __shared__ float ws[MAX_SPLIT]; // e^(m_s − M) per range
    const u32* __restrict__ step = binding<const u32>(p, 1);
    const float* __restrict__ part = binding<const float>(p, 2);
    float* __restrict__ o = binding<float>(p, 3);
    const float* __restrict__ sk = binding<const float>(p, 4);
    const AttentionParams& prm = params<AttentionParams>(p);
    const u32 n_head = prm.n_head, hdv = prm.head_dim_v, n_split = prm.n_split;
    const u32 h = blockIdx.x;
    const u32 t = blockIdx.y + prm.t0;
    const u32 tid = threadIdx.x;
    const u32 pos = step[4 + 2 * t];
    u32 lo = 0;
    if (prm.window > 0 && pos + 1 > prm.window) {
        lo = pos + 1 - prm.window;
    }
    const u32 span = pos + 1 - lo;
    const u32 chunk = split_chunk(span, n_split);
    const u32 ns = (span + chunk - 1) / chunk;
    const u32 pb = (blockIdx.y * n_head + h) * n_split;
    const float* __restrict__ ml = part + gridDim.y * n_head * n_split * hdv;
    float m = -3.0e38f;
    for (u32 s = 0; s < ns; s++) {
        m = fmaxf(m, ml[2 * (pb + s)]);
    }
    if (prm.sinks != 0) {
        m = fmaxf(m, sk[h]);
    }
    if (tid < ns) {
        ws[tid] = expf(ml[2 * (pb + tid)] - m);
    }
    __syncthreads();
    float l = 0.0f;
    for (u32 s = 0; s < ns; s++) {
        l += ml[2 * (pb + s) + 1] * ws[s];
    }
    if (prm.sinks != 0) {
        l += expf(sk[h] - m);
    }
    const float inv = l != 0.0f ? 1.0f / l : 0.0f;
    const u32 ob = (t * n_head + h) * hdv;
    for (u32 d = tid; d < hdv; d += WG) {
        float acc = 0.0f;
        for (u32 s = 0; s < ns; s++) {
            acc += part[(pb + s) * hdv + d] * ws[s];
        }
        o[ob + d] = acc * inv;
    }
    if (prm.act != 0) {
        // The head's output as written above, visible to the whole block.
        __syncthreads();
        float* __restrict__ qy = binding<float>(p, 5);
        const u32 act = prm.act - 1, qk = act == 2 ? 256 : 32;
        const u32 k = n_head * hdv;
        for (u32 b = tid; b < hdv / qk; b += WG) {
            const u32 e = ob + b * qk;
            quantize_block(act, o + e, qy, e, prm.n * k);
        }
    }
}
