// scale_by: y[t, i] = x[t, i] · w[i % width], w a float weight vector (f32 / f16 / bf16); the
// graph's ScaleBy binds a [1] weight with width 1 (ggml_mul broadcasting one value; Gemma 4's
// layer_output_scale, cpu::mod's `ScaleBy`). One element per thread.
//
// Params: n (elements), width. Bindings: 1 w [width], 2 x [n], 3 y [n].
// Grid: ceil(n / 256) blocks folded into (x, y). Block: 256.

struct AddBiasParams {
    u32 n;     // elements
    u32 width; // row width (of w)
    u32 _pad0, _pad1;
};

template <class Q>
static __device__ __forceinline__ void scale_by_body(const Params& p) {
    constexpr u32 WG = 256;
    const u8* __restrict__ w = binding<const u8>(p, 1);
    const float* __restrict__ x = binding<const float>(p, 2);
    float* __restrict__ y = binding<float>(p, 3);
    const AddBiasParams& prm = params<AddBiasParams>(p);
    const u32 n = prm.n, width = prm.width;
    const u32 i = linear_id<WG>();
    if (i < n) {
        y[i] = x[i] * Q::dq1(w, i % width);
    }
}

#define MF_SCALE_BY(name)                                                                          \
    extern "C" __global__ void __launch_bounds__(256) scale_by_##name(const Params p) { \
        scale_by_body<qt_##name>(p);                                                               \
    }
MF_VECTOR_QTYPES(MF_SCALE_BY)
