// softcap: y = cap · tanh(x / cap) (Gemma's final logit soft-capping), one element per thread.
//
// Params: n, cap (f32). Bindings: 1 x [n], 2 y [n]. Grid: ceil(n / 256) blocks folded into (x, y).
// Block: 256.

static __device__ __forceinline__ void softcap_body(const Params& p) {
    constexpr u32 WG = 256;
    const float* __restrict__ x = binding<const float>(p, 1);
    float* __restrict__ y = binding<float>(p, 2);
    const float cap = param_f32(p, 1);
    const u32 i = linear_id<WG>();
    if (i < p.w[0]) {
        // tanh saturates in f32 long before 15; the clamp keeps the argument small.
        y[i] = tanhf(fminf(fmaxf(x[i] / cap, -15.0f), 15.0f)) * cap;
    }
}

extern "C" __global__ void __launch_bounds__(256) softcap(const Params p) {
    softcap_body(p);
}
