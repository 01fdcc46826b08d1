// layer_norm: y = (x − mean) / sqrt(var + eps) · w + b over each row (BERT's LayerNorm), w and b
// f32. One block per row: the threads stride over it and reduce twice across the block, the sum
// for the mean, then the squared deviations for the variance.
// ggml: ggml_compute_forward_norm_f32 then ggml_mul and ggml_add (cpu::ops::layer_norm).
//
// Params: width, eps (f32), rows. Bindings: 1 w [width], 2 b [width], 3 x [rows][width],
// 4 y [rows][width]. Grid: rows (folded into (x, y)). Block: 256.

struct LayerNormParams {
    u32 width;
    float eps;
    u32 rows;
    u32 _pad0;
};

extern "C" __global__ void __launch_bounds__(256) layer_norm(const Params p) {
    constexpr u32 WG = 256;
    __shared__ float red[WG / 32];
    const float* __restrict__ w = binding<const float>(p, 1);
    const float* __restrict__ b = binding<const float>(p, 2);
    const float* __restrict__ x = binding<const float>(p, 3);
    float* __restrict__ y = binding<float>(p, 4);
    const LayerNormParams& prm = params<LayerNormParams>(p);
    const u32 width = prm.width;
    const u32 row = blockIdx.x + blockIdx.y * gridDim.x;
    if (row >= prm.rows) {
        return; // a spare block of the folded grid (the whole block leaves)
    }
    const u32 base = row * width;
    float s = 0.0f;
    for (u32 i = threadIdx.x; i < width; i += WG) {
        s += x[base + i];
    }
    const float mean = block_sum<WG>(s, red) / (float)width;
    float s2 = 0.0f;
    for (u32 i = threadIdx.x; i < width; i += WG) {
        const float d = x[base + i] - mean;
        s2 += d * d;
    }
    const float scale = 1.0f / sqrtf(block_sum<WG>(s2, red) / (float)width + prm.eps);
    for (u32 i = threadIdx.x; i < width; i += WG) {
        y[base + i] = (x[base + i] - mean) * scale * w[i] + b[i];
    }
}
