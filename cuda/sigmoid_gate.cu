// sigmoid_gate: y[t, i] = x[t, i] · σ(g[t]), one gate per row, σ(g) = silu(g) / g as llama.cpp's
// qwen2moe shared-expert gate computes it.
//
// Params: n, width. Bindings: 1 x [n], 2 g [n / width], 3 y [n]. Grid: ceil(n / 256) blocks
// folded into (x, y). Block: 256.

struct SigmoidGateParams {
    u32 n, width;
    u32 _pad0, _pad1;
};

extern "C" __global__ void __launch_bounds__(256) sigmoid_gate(const Params p) {
    const float* __restrict__ x = binding<const float>(p, 1);
    const float* __restrict__ g = binding<const float>(p, 2);
    float* __restrict__ y = binding<float>(p, 3);
    const SigmoidGateParams& prm = params<SigmoidGateParams>(p);
    const u32 i = linear_id<256>();
    if (i < prm.n) {
        const float v = g[i / prm.width];
        y[i] = mul_rn(x[i], (v / (1.0f + expf(-v))) / v);
    }
}
