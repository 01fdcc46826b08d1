// add_bias: y[t, i] = x[t, i] + b[i], b a float weight vector (f32 / f16 / bf16). One element per
// thread.
//
// Params: n (elements), width. Bindings: 1 b [width], 2 x [n], 3 y [n].
// Grid: ceil(n / 256) blocks folded into (x, y). Block: 256.

struct AddBiasParams {
    u32 n;     // elements
    u32 width; // row width (of b)
    u32 _pad0, _pad1;
};

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
        y[i] = x[i] + Q::dq1(b, i % width);
    }
}

#define MF_ADD_BIAS(name)                                                                          \
    extern "C" __global__ void __launch_bounds__(256) add_bias_##name(const Params p) { \
        add_bias_body<qt_##name>(p);                                                               \
    }
MF_VECTOR_QTYPES(MF_ADD_BIAS)
