// attention_reduce (after attention_split or attention_tile), as shaders/attention_reduce.wgsl:
// one block per (q head h, token t) combines the n_split slots written for it (by its place
// among the launch's tokens, blocks y), skipping those whose sum is 0 (no position in that
// range): with M the largest maximum (and the sink logit with sinks),
// o = Σ_s e^(m_s − M)·o_s / Σ_s e^(m_s − M)·l_s, a sink adding e^(sk[h] − M) to the sum. With
// act = 1 + quantize_act's ACT the block then rounds its head's output into binding 5 as
// attention.cu does.
//
// A head's dims may be split between `parts` blocks (grid x = n_head · parts, a head's parts
// consecutive), so a decode step of one token is more blocks than its heads: each part computes
// the weights again (a few floats per range) and combines its head_dim_v / parts dims. Rounding,
// a part computes the whole activation blocks its dims lie in (a q8_0 block of 32 across two
// parts of 16) and writes its own words (quantize_word_part).
//
// Params: AttentionParams (kv.cuh). Bindings: 1 step, 2 part, 3 o [n][n_head · head_dim_v],
// 4 sk [n_head] (read only with sinks), 5 qy. Grid: (n_head · parts, tokens). Block: 64.

// Σ_s e^(m_s − M)·o_s for dim d, in range order.
static __device__ __forceinline__ float combine(const float* __restrict__ part, const float* ws, u32 sb, u32 stride,
                                                u32 n_split, u32 d) {
    float acc = 0.0f;
    for (u32 s = 0; s < n_split; s++) {
        if (ws[s] > 0.0f) {
            acc += part[(sb + s) * stride + d] * ws[s];
        }
    }
    return acc;
}

extern "C" __global__ void __launch_bounds__(64) attention_reduce(const Params p) {
    constexpr u32 WG = 64;
    constexpr u32 MAX_SPLIT = 64; // the schedule's most ranges
    __shared__ float ws[MAX_SPLIT]; // e^(m_s − M) per range
    const float* __restrict__ part = binding<const float>(p, 2);
    float* __restrict__ o = binding<float>(p, 3);
    const float* __restrict__ sk = binding<const float>(p, 4);
    const AttentionParams& prm = params<AttentionParams>(p);
    const u32 n_head = prm.n_head, hdv = prm.head_dim_v, n_split = prm.n_split;
    const u32 parts = gridDim.x / n_head;
    const u32 h = blockIdx.x / parts;
    const u32 chunk = hdv / parts, d0 = blockIdx.x % parts * chunk, d1 = d0 + chunk;
    const u32 t = blockIdx.y + prm.t0;
    const u32 tid = threadIdx.x;
    const u32 sb = (blockIdx.y * n_head + h) * n_split; // range s's slot: sb + s
    const u32 stride = hdv + 2;
    float m = -3.0e38f;
    for (u32 s = 0; s < n_split; s++) {
        const float* ml = part + (sb + s) * stride + hdv;
        if (ml[1] > 0.0f) {
            m = fmaxf(m, ml[0]);
        }
    }
    if (prm.sinks != 0) {
        m = fmaxf(m, sk[h]);
    }
    if (tid < n_split) {
        const float* ml = part + (sb + tid) * stride + hdv;
        ws[tid] = ml[1] > 0.0f ? expf(ml[0] - m) : 0.0f;
    }
    __syncthreads();
    float l = 0.0f;
    for (u32 s = 0; s < n_split; s++) {
        if (ws[s] > 0.0f) {
            l += part[(sb + s) * stride + hdv + 1] * ws[s];
        }
    }
    if (prm.sinks != 0) {
        l += expf(sk[h] - m);
    }
    const float inv = l != 0.0f ? 1.0f / l : 0.0f;
    const u32 ob = (t * n_head + h) * hdv;
    if (prm.act == 0) {
        for (u32 d = d0 + tid; d < d1; d += WG) {
            o[ob + d] = combine(part, ws, sb, stride, n_split, d) * inv;
        }
        return;
    }
    // The activation blocks that hold d0..d1, a word of 4 a thread; this part's dims written.
    float* __restrict__ qy = binding<float>(p, 5);
    const u32 act = prm.act - 1, qk = act == 2 ? 256 : 32;
    const u32 b0 = d0 / qk * qk, b1 = (d1 + qk - 1) / qk * qk;
    for (u32 c = b0; c < b1; c += 4 * WG) {
        const u32 e = c + 4 * tid;
        const bool valid = e < b1, mine = valid && e >= d0 && e < d1;
        float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        if (valid) {
            for (u32 j = 0; j < 4; j++) {
                v[j] = combine(part, ws, sb, stride, n_split, e + j) * inv;
                if (mine) {
                    o[ob + e + j] = v[j];
                }
            }
        }
        quantize_word_part<WG>(act, v, valid, mine, qy, ob + e, prm.n * n_head * hdv);
    }
}
