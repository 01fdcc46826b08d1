// rms_norm: y = x / sqrt(mean(x²) + eps) · w over each row. One block per row: the threads stride
// over the row, sum their squares, and reduce across the block.
// Also the head norm (Qwen3 / Gemma 3 Q and K norms): rows one head wide, w [head_dim].
// ggml: ggml_compute_forward_rms_norm_f32 followed by ggml_mul. With plain = 1 no weight (Gemma 4's
// V norm, a bare ggml_rms_norm; cpu::ops::head_norm_plain): w is bound but never read.
//
// With act = 1 + quantize_act's ACT (the norm feeding quantized matmuls) the block then rounds its
// row as quantize_act would into binding 4 (quantize_word, a word per thread): the same values,
// one launch fewer.
// With slice > 0 a row is ceil(width / slice) blocks (llama.cpp's norm takes a row in one
// block of up to 1,024 threads; a decode step has one row, and one block is one SM of the
// device): each sums the whole row's squares (the same sums in the same order in every block,
// so the scale is the one-block scale, bit for bit; the row's re-reads come from L2), then writes
// and rounds its slice of whole activation blocks, or half of a q8_K block where whole blocks
// would be too few (8 tokens of 4,096: 256 blocks, not 128). 256 threads a block: a decode step's
// row of 4,096 is 16 elements each to sum.
//
// Params: width, eps (f32), rows, plain, act, slice. Bindings: 1 w [width] (f32 / f16 / bf16),
// 2 x [rows][width], 3 y [rows][width], 4 (act) quantize_act's output for the rows. Grid:
// rows · ceil(width / slice) (folded into (x, y)), a row's slices consecutive. Block: 256.

struct RmsNormParams {
    u32 width;
    float eps;
    u32 rows;
    u32 plain;
    u32 act;   // 0, or 1 + quantize_act's ACT
    u32 slice; // elements of a row per block (whole activation blocks, or 128: half a q8_K block); 0: the whole row
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
    const u32 slice = prm.slice == 0 ? width : prm.slice;
    const u32 slices = (width + slice - 1) / slice;
    const u32 g = blockIdx.x + blockIdx.y * gridDim.x;
    const u32 row = g / slices;
    if (row >= prm.rows) {
        return; // a spare block of the folded grid (the whole block leaves)
    }
    const u32 base = row * width;
    const u32 s0 = (g % slices) * slice, s1 = min(width, s0 + slice);
    float s = 0.0f;
    for (u32 i = threadIdx.x; i < width; i += WG) {
        const float v = x[base + i];
        s += v * v;
    }
    const float scale = 1.0f / sqrtf(block_sum<WG>(s, red) / (float)width + eps);
    if (prm.plain == 1) {
        for (u32 i = s0 + threadIdx.x; i < s1; i += WG) {
            y[base + i] = x[base + i] * scale;
        }
    } else {
        for (u32 i = s0 + threadIdx.x; i < s1; i += WG) {
            y[base + i] = (x[base + i] * scale) * Q::dq1(w, i);
        }
    }
    if (prm.act == 3 && slice < 256) {
        // Half a q8_K block (slice 128): the block's scale needs all of it, so the first 64
        // threads normalize the whole block again, as written above, value for value (its other
        // half is another block's to write), and the words of this slice are written.
        const u32 b0 = s0 / 256 * 256, e = b0 + 4 * threadIdx.x;
        const bool valid = threadIdx.x < 64;
        float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        if (valid) {
            for (u32 j = 0; j < 4; j++) {
                v[j] = prm.plain == 1 ? x[base + e + j] * scale : (x[base + e + j] * scale) * Q::dq1(w, e + j);
            }
        }
        quantize_word_part<WG>(2, v, valid, valid && e >= s0 && e < s1, binding<float>(p, 4), base + e,
                               prm.rows * width);
    } else if (prm.act != 0) {
        // The slice as written above, visible to the whole block; then rounded a word per
        // thread, WG words at a time (whole blocks: the slice is whole blocks).
        __syncthreads();
        quantize_row<WG>(prm.act - 1, y + base + s0, binding<float>(p, 4), base + s0, s1 - s0, prm.rows * width);
    }
}

#define MF_RMS_NORM(name)                                                                          \
    extern "C" __global__ void __launch_bounds__(256) rms_norm_##name(const Params p) { \
        rms_norm_body<qt_##name>(p);                                                               \
    }
MF_VECTOR_QTYPES(MF_RMS_NORM)
