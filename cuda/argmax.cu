// argmax over one row of logits (greedy decoding reads back 4 bytes instead of the row): the
// CPU's `sampling::argmax`, exactly. Ties go to the lowest id and NaN never wins, except that a NaN
// at id 0 is the answer (the CPU starts from id 0 and nothing compares greater than NaN); an
// empty row gives 0. One block: each thread scans a strided slice of the row keeping its best
// (value, id), then a tree reduction in shared memory.
//
// Params: n (row length), offset (index of the row's first element in x). Bindings: 1 x,
// 2 out [1] (u32). Grid: 1. Block: 256.

struct ArgmaxParams {
    u32 n;      // row length
    u32 offset; // index of the row's first element in x
    u32 _pad0, _pad1;
};

static __device__ __forceinline__ void argmax_body(const Params& p) {
    constexpr u32 WG = 256;
    constexpr u32 NONE = 0xffffffffu;
    __shared__ float bv[WG];
    __shared__ u32 bi[WG];
    const float* __restrict__ x = binding<const float>(p, 1);
    u32* __restrict__ out = binding<u32>(p, 2);
    const ArgmaxParams& prm = params<ArgmaxParams>(p);
    const u32 n = prm.n, offset = prm.offset;
    const u32 tid = threadIdx.x;
    float best = 0.0f;
    u32 idx = NONE;
    for (u32 i = tid; i < n; i += WG) {
        const float v = x[offset + i];
        // ids rise, so a tie keeps the earlier one; NaN fails both tests
        if (v > best || (idx == NONE && v == v)) {
            best = v;
            idx = i;
        }
    }
    bv[tid] = best;
    bi[tid] = idx;
    __syncthreads();
    for (u32 s = WG / 2; s > 0; s >>= 1) {
        if (tid < s) {
            const float v = bv[tid + s];
            const u32 i = bi[tid + s];
            if (i != NONE && (bi[tid] == NONE || v > bv[tid] || (v == bv[tid] && i < bi[tid]))) {
                bv[tid] = v;
                bi[tid] = i;
            }
        }
        __syncthreads();
    }
    if (tid == 0) {
        const bool nan0 = n > 0 && x[offset] != x[offset];
        out[0] = (bi[0] == NONE || nan0) ? 0u : bi[0];
    }
}

extern "C" __global__ void __launch_bounds__(256) argmax(const Params p) {
    argmax_body(p);
}
