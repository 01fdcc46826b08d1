// add_bias: y[t, i] = x[t, i] + b[i], b a float weight vector (f32 / f16 / bf16). One element per
// thread. With MF_SCALE_BY defined the same kernel is scale_by: y[t, i] = x[t, i] · w[i % width]
// (the graph's ScaleBy binds a [1] weight with width 1: ggml_mul broadcasting one value, Gemma
// 4's layer_output_scale, cpu::mod's `ScaleBy`); the NVRTC program is that define and this file
// (the kernel table joins them), the emulator build includes it from scale_by.cu.
//
// Params: n (elements), width. Bindings: 1 b [width], 2 x [n], 3 y [n].
// Grid: ceil(n / 256) blocks folded into (x, y). Block: 256.

struct AddBiasParams {
    u32 n;     // elements
    u32 width; // row width (of b)
    u32 _pad0, _pad1;
};

#ifdef MF_SCALE_BY
#define MF_VEC_OP(x, w) ((x) * (w))
#define MF_VEC_ENTRY(name) scale_by_##name
#else
#define MF_VEC_OP(x, w) ((x) + (w))
#define MF_VEC_ENTRY(name) add_bias_##name
#endif

template <class Q>
static __device__ __forceinline__ void add_bias_body(const Params& p) {
    constexpr u32 WG = 256;
    const u8* __restrict__ b = binding<const u8>(p, 1);
    const float* __restrict__ x = binding<const float>(p, 2);
    float* __restrict__ y = binding<float>(p, 3);
    const AddBiasParams& prm = params<AddBiasParams>(p);
    const u32 n = prm.n, width = prm.width;
    const u32 i = linear_id<WG>();
    if (i < n) {
        y[i] = MF_VEC_OP(x[i], Q::dq1(b, i % width));
    }
}

#define MF_ADD_BIAS(name)                                                                          \
    extern "C" __global__ void __launch_bounds__(256) MF_VEC_ENTRY(name)(const Params p) {        \
        add_bias_body<qt_##name>(p);                                                               \
    }
MF_VECTOR_QTYPES(MF_ADD_BIAS)
