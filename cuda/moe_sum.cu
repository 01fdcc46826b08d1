// moe_sum: y[t, i] = Σ_j w_j · x[t, j, i] over the k slots of token t, w_j = route[t][k + j],
// added in slot order as the CPU (llama.cpp's chain of adds) does.
//
// Params: n (output elements), width, k. Bindings: 1 x [tokens][k][width], 2 route [tokens][2k],
// 3 y [n]. Grid: ceil(n / 256) blocks folded into (x, y). Block: 256.

struct MoeSlotParams {
    u32 n, width, k, n_expert;
};

extern "C" __global__ void __launch_bounds__(256) moe_sum(const Params p) {
    const float* __restrict__ x = binding<const float>(p, 1);
    const float* __restrict__ route = binding<const float>(p, 2);
    float* __restrict__ y = binding<float>(p, 3);
    const MoeSlotParams& prm = params<MoeSlotParams>(p);
    const u32 i = linear_id<256>();
    if (i < prm.n) {
        const u32 t = i / prm.width, c = i % prm.width, k = prm.k;
        const float* xs = x + (unsigned long long)t * k * prm.width + c;
        const float* w = route + (unsigned long long)t * 2 * k + k;
        float s = mul_rn(xs[0], w[0]);
        for (u32 j = 1; j < k; j++) {
            s += mul_rn(xs[(unsigned long long)j * prm.width], w[j]);
        }
        y[i] = s;
    }
}
