// matmul_vec, matmul for decode: y[t, row0 + r] = x[t, :] · W[r, :] for the rows of one weight
// part. A block of 64 threads takes 8 rows of one token: the 8 lanes of a row (a segment of 8
// consecutive threads, within one warp) stride over its 8-element chunks, and meet in a butterfly
// of shuffles over the segment.
//
// Params: k (row length), m (width of y: all rows of the weight), rows (rows in this part),
// row0 (first row of this part). Bindings: 1 W (raw blocks), 2 x [n][k], 3 y [n][m].
// Grid: (x, y) folded over ceil(rows / 8) row groups, z = token. Block: 64.

template <class Q>
static __device__ __forceinline__ void matmul_vec_body(const Params& p) {
    constexpr u32 WG = 64;
    constexpr u32 TPR = 8; // threads per row
    constexpr u32 CPB = Q::QK / 8; // chunks per block
    const u8* __restrict__ w = binding<const u8>(p, 1);
    const f4* __restrict__ x = binding<const f4>(p, 2);
    float* __restrict__ y = binding<float>(p, 3);
    const u32 k = p.w[0], m = p.w[1], rows = p.w[2], row0 = p.w[3];
    const u32 seg = threadIdx.x / TPR;
    const u32 lane = threadIdx.x % TPR;
    const u32 r = (blockIdx.x + blockIdx.y * gridDim.x) * (WG / TPR) + seg;
    const u32 t = blockIdx.z;
    const u32 nc = k / 8;
    const f4* __restrict__ xt = x + t * (k / 4);
    float acc = 0.0f;
    if (r < rows) {
        const u8* __restrict__ wr = w + (unsigned long long)r * ((k / Q::QK) * Q::QB);
        MF_UNROLL_N(4)
        for (u32 c = lane; c < nc; c += TPR) {
            const f4x2 v = Q::dq8(wr, (c / CPB) * Q::QB, c % CPB);
            acc += dot4(v.lo, xt[2 * c]) + dot4(v.hi, xt[2 * c + 1]);
        }
    }
    const float s = seg_sum<TPR>(acc);
    if (r < rows && lane == 0) {
        y[t * m + row0 + r] = s;
    }
}

#define MF_MATMUL_VEC(name)                                                                          \
    extern "C" __global__ void __launch_bounds__(64) matmul_vec_##name(const Params p) { \
        matmul_vec_body<qt_##name>(p);                                                               \
    }
MF_MATRIX_QTYPES(MF_MATMUL_VEC)
