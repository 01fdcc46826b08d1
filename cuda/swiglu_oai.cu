// swiglu_oai, gpt-oss' clamped SwiGLU (ggml_swiglu_oai): g = min(gate, limit), u = clamp(up,
// -limit, limit), y = g / (1 + e^(-alpha g)) · (u + 1).
//
// Params: n, alpha, limit. Bindings: 1 gate [n], 2 up [n], 3 y [n]. Grid: ceil(n / 256) blocks
// folded into (x, y). Block: 256.

struct SwigluOaiParams {
    u32 n;
    float alpha, limit;
    u32 _pad0;
};

extern "C" __global__ void __launch_bounds__(256) swiglu_oai(const Params p) {
    const float* __restrict__ a = binding<const float>(p, 1);
    const float* __restrict__ b = binding<const float>(p, 2);
    float* __restrict__ y = binding<float>(p, 3);
    const SwigluOaiParams& prm = params<SwigluOaiParams>(p);
    const u32 i = linear_id<256>();
    if (i < prm.n) {
        const float g = fminf(a[i], prm.limit);
        const float u = fminf(fmaxf(b[i], -prm.limit), prm.limit);
        y[i] = g / (1.0f + expf(mul_rn(prm.alpha, -g))) * (u + 1.0f);
    }
}
