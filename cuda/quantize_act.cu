// quantize_act: a matmul's activations x [n][k] rounded to the 8-bit format the CPU backend pairs
// with the weight type and written back as floats, x~ = d · q (see quantize_act.wgsl, which this
// follows operation for operation):
//   q8_0 / q8_1  32-element blocks, d = amax / 127 kept as f16, q = rint(x · 127 / amax); q8_1 also
//                writes s − d16 · Σq per block after x~ (s = f16(d · Σq), which the offset of a
//                q4_1 / q5_1 block multiplies)
//   q8_K         256-element blocks, iscale = −127 / (signed value of largest magnitude),
//                q = min(rint(iscale · x), 127), d = 1 / iscale
// One thread per packed word of 4 elements, a block's threads in one CUDA block (quantize_word,
// common.cuh).
//
// The packed 8-bit form follows for the int8 matvec (act_q_base, common.cuh).
//
// Params: k (row length, whole blocks), n (tokens), split. Bindings: 1 x [n][k], 2 y [n][k] (+ [n][k / 32]
// corrections, then the packed form).
// Grid: ceil(n · k / 256) · split folded into (x, y). Block: 64 (one q8_K block). With split = 2
// (q8_K where a block each would leave SMs idle: a decode step of 8 tokens of 4,096 is 128 blocks)
// a block's two halves go to two CUDA blocks, consecutive: each reads the whole block for its
// scale (the same key, so the same bits) and writes its half (quantize_word_part).

struct QuantizeActParams {
    u32 k;     // row length (whole blocks)
    u32 n;     // tokens
    u32 split; // CUDA blocks per 256 elements: 1 (or 0), or 2
};

template <u32 ACT>
static __device__ __forceinline__ void quantize_act_body(const Params& p) {
    constexpr u32 WG = 64;
    const float* __restrict__ x = binding<const float>(p, 1);
    float* __restrict__ y = binding<float>(p, 2);
    const QuantizeActParams& prm = params<QuantizeActParams>(p);
    const u32 nk = prm.n * prm.k;
    const u32 split = max(prm.split, 1u);
    const u32 g = blockIdx.x + blockIdx.y * gridDim.x;
    const u32 e = 4 * ((g / split) * WG + threadIdx.x);
    // A spare block of a folded grid still takes part (its blocks all past the data).
    const bool valid = e < nk;
    float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (valid) {
        for (u32 j = 0; j < 4; j++) {
            v[j] = x[e + j];
        }
    }
    quantize_word_part<WG>(ACT, v, valid, valid && threadIdx.x * split / WG == g % split, y, e, nk);
}

extern "C" __global__ void __launch_bounds__(64) quantize_act_q8_0(const Params p) {
    quantize_act_body<0>(p);
}
extern "C" __global__ void __launch_bounds__(64) quantize_act_q8_1(const Params p) {
    quantize_act_body<1>(p);
}
extern "C" __global__ void __launch_bounds__(64) quantize_act_q8_K(const Params p) {
    quantize_act_body<2>(p);
}
