// add_bias_id (ggml_add_id): y[t, j, i] = x[t, j, i] + b[e][i] with e the expert of slot j of
// token t (route[t][j]); b [n_expert][width] a float weight vector (f32 / f16 / bf16).
//
// Params: n (elements), width, k (slots per token), n_expert. Bindings: 1 b, 2 x [n], 3 route
// [tokens][2k], 4 y [n]. Grid: ceil(n / 256) blocks folded into (x, y). Block: 256.

struct MoeSlotParams {
    u32 n, width, k, n_expert;
};

template <class Q>
static __device__ __forceinline__ void add_bias_id_body(const Params& p) {
    const u8* __restrict__ b = binding<const u8>(p, 1);
    const float* __restrict__ x = binding<const float>(p, 2);
    const float* __restrict__ route = binding<const float>(p, 3);
    float* __restrict__ y = binding<float>(p, 4);
    const MoeSlotParams& prm = params<MoeSlotParams>(p);
    const u32 i = linear_id<256>();
    if (i < prm.n) {
        const u32 slot = i / prm.width, t = slot / prm.k;
        const u32 e = min((u32)route[t * 2 * prm.k + slot % prm.k], prm.n_expert - 1);
        y[i] = x[i] + Q::dq1(b, e * prm.width + i % prm.width);
    }
}

#define MF_ADD_BIAS_ID(name)                                                                          \
    extern "C" __global__ void __launch_bounds__(256) add_bias_id_##name(const Params p) { \
        add_bias_id_body<qt_##name>(p);                                                               \
    }
MF_VECTOR_QTYPES(MF_ADD_BIAS_ID)
