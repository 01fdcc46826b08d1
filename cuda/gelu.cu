// gelu: y = x · Φ(x) = x · (1 + erf(x / √2)) / 2, BERT's exact GELU, one element per thread.
// erf by Abramowitz and Stegun 7.1.26 (absolute error below 1.5e-7), the CPU's formula
// (cpu::ops::gelu) and the WGSL's. Body: unary_body in common.cuh.
//
// Params: n, s (unused). Bindings: 1 x [n], 2 y [n]. Grid: ceil(n / 256) blocks folded into
// (x, y). Block: 256.

struct op_gelu {
    static __device__ __forceinline__ float op(float x, float) {
        const float z = fabsf(x) * 0.70710678118654752f;
        const float t = 1.0f / (1.0f + 0.3275911f * z);
        const float poly =
            t * (0.254829592f + t * (-0.284496736f + t * (1.421413741f + t * (-1.453152027f + t * 1.061405429f))));
        const float e = 1.0f - poly * expf(-z * z);
        return 0.5f * x * (1.0f + (x < 0.0f ? -e : e));
    }
};

extern "C" __global__ void __launch_bounds__(256) gelu(const Params p) {
    unary_body<op_gelu>(p);
}
