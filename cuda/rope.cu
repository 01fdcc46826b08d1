// rope: rotates the first n_rot dimensions of every head at the step's positions; the others are
// copied. cos/sin come from a per-step table [n_tokens][n_rot / 2] of (cos, sin) pairs that the
// host fills with the CPU's own `rope_cache`, so every backend rotates by the same f32 angles.
// One thread per (pair of dimensions, head, token). ggml: ggml_compute_forward_rope_f32 (modes
// norm and neox); the products are rounded before the sums, as the CPU does.
//
// Params: n_heads, head_dim, n_rot, neox (0 / 1), n (tokens). Bindings: 1 cs [n][n_rot / 2]
// (f32 pairs), 2 x [n][n_heads · head_dim], 3 y (same shape).
// Grid: (ceil(head_dim / 2 / 64), n_heads, n). Block: 64.

struct RopeParams {
    u32 n_heads, head_dim, n_rot;
    u32 neox; // 0 / 1
    u32 n;    // tokens
    u32 _pad0, _pad1, _pad2;
};

static __device__ __forceinline__ void rope_body(const Params& p) {
    constexpr u32 WG = 64;
    const f2* __restrict__ cs = binding<const f2>(p, 1);
    const float* __restrict__ x = binding<const float>(p, 2);
    float* __restrict__ y = binding<float>(p, 3);
    const RopeParams& prm = params<RopeParams>(p);
    const u32 n_heads = prm.n_heads, head_dim = prm.head_dim, n_rot = prm.n_rot, neox = prm.neox, n = prm.n;
    const u32 i = blockIdx.x * WG + threadIdx.x; // pair index within the head
    const u32 h = blockIdx.y;
    const u32 t = blockIdx.z;
    const u32 half = n_rot / 2;
    if (i >= head_dim / 2 || h >= n_heads || t >= n) {
        return;
    }
    const u32 base = (t * n_heads + h) * head_dim;
    if (i >= half) {
        const u32 d = n_rot + 2 * (i - half);
        y[base + d] = x[base + d];
        y[base + d + 1] = x[base + d + 1];
        return;
    }
    const f2 c = cs[t * half + i];
    u32 i0 = base + 2 * i;
    u32 i1 = i0 + 1;
    if (neox != 0) {
        i0 = base + i;
        i1 = i0 + half;
    }
    const float x0 = x[i0];
    const float x1 = x[i1];
    y[i0] = mul_rn(x0, c.x) - mul_rn(x1, c.y);
    y[i1] = mul_rn(x0, c.y) + mul_rn(x1, c.x);
}

extern "C" __global__ void __launch_bounds__(64) rope(const Params p) {
    rope_body(p);
}
