// head_norm: rms_norm over each head-wide slice of a row (Qwen3 / Gemma 3 Q and K norms), times
// w [head_dim]. One block per (head, row).
//
// Params: head_dim, n_heads, eps (f32). Bindings: 1 w [head_dim] (f32 / f16 / bf16),
// 2 x [rows][n_heads · head_dim], 3 y (same shape). Grid: (n_heads, rows). Block: 64.

template <class Q>
static __device__ __forceinline__ void head_norm_body(const Params& p) {
    constexpr u32 WG = 64;
    __shared__ float red[WG / 32];
    const u8* __restrict__ w = binding<const u8>(p, 1);
    const float* __restrict__ x = binding<const float>(p, 2);
    float* __restrict__ y = binding<float>(p, 3);
    const u32 head_dim = p.w[0], n_heads = p.w[1];
    const float eps = param_f32(p, 2);
    const u32 base = (blockIdx.y * n_heads + blockIdx.x) * head_dim;
    float s = 0.0f;
    for (u32 i = threadIdx.x; i < head_dim; i += WG) {
        const float v = x[base + i];
        s += v * v;
    }
    const float scale = 1.0f / sqrtf(block_sum<WG>(s, red) / (float)head_dim + eps);
    for (u32 i = threadIdx.x; i < head_dim; i += WG) {
        y[base + i] = (x[base + i] * scale) * Q::dq1(w, i);
    }
}

#define MF_HEAD_NORM(name)                                                                          \
    extern "C" __global__ void __launch_bounds__(64) head_norm_##name(const Params p) { \
        head_norm_body<qt_##name>(p);                                                               \
    }
MF_VECTOR_QTYPES(MF_HEAD_NORM)
