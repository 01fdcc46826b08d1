// rms_norm: y = x / sqrt(mean(x²) + eps) · w over each row. One block per row: the threads stride
// over the row, sum their squares, and reduce across the block.
// Also the head norm (Qwen3 / Gemma 3 Q and K norms): rows one head wide, w [head_dim].
// ggml: ggml_compute_forward_rms_norm_f32 followed by ggml_mul. With plain = 1 no weight (Gemma 4's
// V norm, a bare ggml_rms_norm; cpu::ops::head_norm_plain): w is bound but never read.
//
// With act = 1 + quantize_act's ACT (the norm feeding quantized matmuls) the block then rounds its
// row as quantize_act would into binding 4 (quantize_word, a word per thread): the same values,
// one launch fewer. 256 threads a row: a decode step's one row of 4,096 is 16 elements each.
//
// Params: width, eps (f32), rows, plain, act. Bindings: 1 w [width] (f32 / f16 / bf16),
// 2 x [rows][width], 3 y [rows][width], 4 (act) quantize_act's output for the rows. Grid: rows
// (folded into (x, y)). Block: 256.

struct RmsNormParams {
    u32 width;
    float eps;
    u32 rows;
    u32 plain;
    u32 act; // 0, or 1 + quantize_act's ACT
};

template <class Q>
static __device__ __forceinline__ void rms_norm_body(const Params& p) {
    constexpr u32 WG = 256;
    __shared__ float red[WG / 32];
    const u8* __restrict__ w = binding<const u8>(p, 1);
    const float* __restrict__ x = binding<const float>(p, 2);
    float* __restrict__ y = binding<float>(p, 3);
    const RmsNormParams& prm = params<RmsNormParams>(p);
    const u32 width = prm.width;
    const float eps = prm.eps;
    const u32 row = blockIdx.x + blockIdx.y * gridDim.x;
    if (row >= prm.rows) {
        return; // a spare block of the folded grid (the whole block leaves)
    }
    const u32 base = row * width;
    float s = 0.0f;
    for (u32 i = threadIdx.x; i < width; i += WG) {
        const float v = x[base + i];
        s += v * v;
    }
    const float scale = 1.0f / sqrtf(block_sum<WG>(s, red) / (float)width + eps);
    if (prm.plain == 1) {
        for (u32 i = threadIdx.x; i < width; i += WG) {
            y[base + i] = x[base + i] * scale;
        }
    } else {
        for (u32 i = threadIdx.x; i < width; i += WG) {
            y[base + i] = (x[base + i] * scale) * Q::dq1(w, i);
        }
    }
    if (prm.act != 0) {
        // The row as written above, visible to the whole block; then rounded a word per thread,
        // WG words at a time (whole blocks: the row is whole blocks).
        __syncthreads();
        quantize_row<WG>(prm.act - 1, y + base, binding<float>(p, 4), base, width, prm.rows * width);
    }
}

#define MF_RMS_NORM(name)                                                                          \
    extern "C" __global__ void __launch_bounds__(256) rms_norm_##name(const Params p) { \
        rms_norm_body<qt_##name>(p);                                                               \
    }
MF_VECTOR_QTYPES(MF_RMS_NORM)
