// argmax over one row of logits (greedy decoding reads back 4 bytes instead of the row): the
// CPU's `logits::argmax`, exactly. Ties go to the lowest id and NaN never wins, except that a NaN
// at id 0 is the answer (the CPU starts from id 0 and nothing compares greater than NaN); an
// empty row gives 0. A block's threads scan strided slices of its range keeping their best
// (value, id), then a tree reduction in shared memory.
// A long row (a vocabulary of 128K is 513 KB) is not one block's: with parts > 1, stage 0 runs
// `parts` blocks, block g over the g-th of `parts` equal slices, each writing its best as a
// (value bits, id) pair at out[1 + 2g] (id none where its slice is all NaN); stage 1, one block,
// reduces the pairs with the same rule (the lower id among equal values: slices are in id
// order) and writes the id. parts ≤ 1: one block, one stage, the row at once.
//
// Params: n (row length), offset (index of the row's first element in x), parts, stage.
// Bindings: 1 x, 2 out [1 + 2 · parts] (u32). Grid: parts at stage 0 (else 1). Block: 256.

struct ArgmaxParams {
    u32 n;      // row length
    u32 offset; // index of the row's first element in x
    u32 parts;  // slices of stage 0 (≤ 1: one block does all)
    u32 stage;  // 0: the slices (or the whole row), 1: their reduction
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
    const bool split = prm.parts > 1;
    float best = 0.0f;
    u32 idx = NONE;
    if (split && prm.stage == 1) {
        // The slices' bests, in id order.
        for (u32 g = tid; g < prm.parts; g += WG) {
            const float v = __uint_as_float(out[1 + 2 * g]);
            const u32 i = out[2 + 2 * g];
            if (i != NONE && (idx == NONE || v > best)) {
                best = v;
                idx = i;
            }
        }
    } else {
        const u32 chunk = split ? (n + prm.parts - 1) / prm.parts : n;
        const u32 i0 = split ? blockIdx.x * chunk : 0;
        const u32 i1 = min(n, i0 + chunk);
        for (u32 i = i0 + tid; i < i1; i += WG) {
            const float v = x[offset + i];
            // ids rise, so a tie keeps the earlier one; NaN fails both tests
            if (v > best || (idx == NONE && v == v)) {
                best = v;
                idx = i;
            }
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
        if (split && prm.stage == 0) {
            out[1 + 2 * blockIdx.x] = __float_as_uint(bv[0]);
            out[2 + 2 * blockIdx.x] = bi[0];
        } else {
            const bool nan0 = n > 0 && x[offset] != x[offset];
            out[0] = (bi[0] == NONE || nan0) ? 0u : bi[0];
        }
    }
}

extern "C" __global__ void __launch_bounds__(256) argmax(const Params p) {
    argmax_body(p);
}
