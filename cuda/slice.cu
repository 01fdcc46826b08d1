// slice: y[t, i] = x[t, col0 + i] for i < width, x rows of src_width (a ggml_view_2d made
// contiguous; Gemma 4's per-layer inputs, cpu::mod's `Slice`). One element per thread.
//
// Params: n (output elements), width, src_width, col0. Bindings: 1 x [n / width][src_width],
// 2 y [n]. Grid: ceil(n / 256) blocks folded into (x, y). Block: 256.

struct SliceParams {
    u32 n;
    u32 width;
    u32 src_width;
    u32 col0;
};

extern "C" __global__ void __launch_bounds__(256) slice(const Params p) {
    constexpr u32 WG = 256;
    const float* __restrict__ x = binding<const float>(p, 1);
    float* __restrict__ y = binding<float>(p, 2);
    const SliceParams& prm = params<SliceParams>(p);
    const u32 i = linear_id<WG>();
    if (i < prm.n) {
        const u32 t = i / prm.width;
        y[i] = x[t * prm.src_width + prm.col0 + i - t * prm.width];
    }
}
