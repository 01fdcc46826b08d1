// scale: y = s · x, one element per thread.
//
// Params: n, s (f32). Bindings: 1 x [n], 2 y [n]. Grid: ceil(n / 256) blocks folded into (x, y).
// Block: 256.

static __device__ __forceinline__ void scale_body(const Params& p) {
    constexpr u32 WG = 256;
    const float* __restrict__ x = binding<const float>(p, 1);
    float* __restrict__ y = binding<float>(p, 2);
    const u32 i = linear_id<WG>();
    if (i < p.w[0]) {
        y[i] = x[i] * param_f32(p, 1);
    }
}

extern "C" __global__ void __launch_bounds__(256) scale(const Params p) {
    scale_body(p);
}
