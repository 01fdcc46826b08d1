// moe_route: expert routing, one thread per row of router logits [n_expert] (llama.cpp's
// build_moe_ffn head; the CPU's cpu::moe::route). Writes route[row] = the k chosen expert ids (as
// f32), best first (ties to the lower id), then their weights: softmax probabilities over all
// experts (gating 0) or a softmax over the k chosen logits (gating 1, gpt-oss), divided by their
// sum (at least 2^-14) where norm is set. At most 512 experts.
//
// Params: n_expert, k, rows, gating, norm. Bindings: 1 logits [rows][n_expert], 2 route
// [rows][2k]. Grid: ceil(rows / 64) blocks folded into (x, y). Block: 64.

struct MoeRouteParams {
    u32 n_expert, k, rows, gating, norm;
    u32 _pad0, _pad1, _pad2;
};

extern "C" __global__ void __launch_bounds__(64) moe_route(const Params p) {
    const float* __restrict__ logits = binding<const float>(p, 1);
    float* __restrict__ route = binding<float>(p, 2);
    const MoeRouteParams& prm = params<MoeRouteParams>(p);
    const u32 row = linear_id<64>();
    if (row >= prm.rows) {
        return;
    }
    const u32 ne = prm.n_expert, k = prm.k;
    const float* l = logits + (unsigned long long)row * ne;
    float* r = route + (unsigned long long)row * 2 * k;
    u32 taken[16] = {0};
    for (u32 j = 0; j < k; j++) {
        u32 best = 0;
        float bv = 0.0f;
        bool found = false;
        for (u32 e = 0; e < ne; e++) {
            const float v = l[e];
            if (!(taken[e / 32] & (1u << (e % 32))) && (!found || v > bv)) {
                best = e;
                bv = v;
                found = true;
            }
        }
        taken[best / 32] |= 1u << (best % 32);
        r[j] = (float)best;
        r[k + j] = bv;
    }
    const float mx = r[k];
    float sum = 0.0f;
    if (prm.gating == 0) {
        for (u32 e = 0; e < ne; e++) {
            sum += expf(l[e] - mx);
        }
    } else {
        for (u32 j = 0; j < k; j++) {
            sum += expf(r[k + j] - mx);
        }
    }
    const float inv = 1.0f / sum;
    float wsum = 0.0f;
    for (u32 j = 0; j < k; j++) {
        const float w = expf(r[k + j] - mx) * inv;
        r[k + j] = w;
        wsum += w;
    }
    if (prm.norm) {
        const float d = fmaxf(wsum, 6.103515625e-5f);
        for (u32 j = 0; j < k; j++) {
            r[k + j] = r[k + j] / d;
        }
    }
}
