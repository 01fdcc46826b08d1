// matmul_vec, matmul for decode: y[t, row0 + r] = x[t, :] · W[r, :] for the rows of one weight
// part. A block of 64 threads takes 8 rows of one token: the 8 lanes of a row (a segment of 8
// consecutive threads, within one warp) stride over its 8-element chunks, and meet in a butterfly
// of shuffles over the segment.
//
// For quantized weights x is quantize_act's output: the activations already rounded to the CPU's
// 8-bit partner format, as floats d · q, then for q4_1 / q5_1 one q8_1 correction per 32-element
// block, which the block's offset m multiplies (act_s<Q>).
//
// Weights with integer values in 32-element blocks (q4_0, q4_1, q5_0, q5_1, q8_0) take int8 dot
// products (dp4a) where the device has them: the block recovers its token's 8-bit activations in
// shared memory (q = rint(x / d) with d = amax / 127: the same d and q that quantize_act rounded
// to, since its amax element is ±127 · d), and q8_1's f16 block sum s as the correction plus d · Σq;
// then each lane takes d_w · d_x · Σ q_w q_x per 8-element chunk. Rows up to MAX_K_I8 long; longer
// ones, other types and older devices take the f32 path.
//
// Params: k (row length), m (width of y: all rows of the weight), rows (rows in this part),
// row0 (first row of this part), n (rows of x); matmul_vec_id also ids, x_slot, n_expert.
// Bindings: 1 W (raw blocks), 2 x [n][k] (+ corrections), 3 y [n][m], 4 b [m] (with bias; id: the route). Grid: (x, y)
// folded over ceil(rows / 8) row groups, z = token (id: token × slot). Block: 64.

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 610
#define MF_DP4A 1
#else
#define MF_DP4A 0
#endif

// Longest row the int8 path takes: its 8-bit activations (and two floats per 32) live in shared
// memory, 18 KiB at this length.
#define MAX_K_I8 16384u

// The int8 path; `xq` etc. are the block's shared activations (whole rows, one token).
template <class Q>
static __device__ __forceinline__ float matmul_vec_i8(const Params& p, const float* __restrict__ xt,
                                                      const float* __restrict__ xc, u32 r, u32 wrow, u32 lane) {
    typedef i8w<Q> I;
    constexpr u32 WG = 64, TPR = 8;
    __shared__ int xq[MAX_K_I8 / 4];
    __shared__ float xd[MAX_K_I8 / 32];
    __shared__ float xs[MAX_K_I8 / 32];
    const u8* __restrict__ w = binding<const u8>(p, 1);
    const u32 k = params<MatmulParams>(p).k, rows = params<MatmulParams>(p).rows;
    // The 8-bit blocks back from x~ (the CPU's quantize_row_q8_0 / q8_1 on it gives them again):
    // one thread per 32-element block.
    for (u32 b = threadIdx.x; b < k / 32; b += WG) {
        const float* v = xt + 32 * b;
        float amax = 0.0f;
        for (u32 i = 0; i < 32; i++) {
            amax = fmaxf(amax, fabsf(v[i]));
        }
        const float d = amax / 127.0f;
        const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        int sum = 0;
        for (u32 j = 0; j < 8; j++) {
            u32 word = 0;
            for (u32 i = 0; i < 4; i++) {
                const int q = (int)rintf(mul_rn(v[4 * j + i], id));
                sum += q;
                word |= ((u32)q & 0xffu) << (8 * i);
            }
            xq[8 * b + j] = (int)word;
        }
        xd[b] = round_f16(d);
        xs[b] = I::MIN ? xc[b] + mul_rn(round_f16(d), (float)sum) : 0.0f;
    }
    __syncthreads();
    float acc = 0.0f;
    if (r < rows) {
        const u8* __restrict__ wr = w + (unsigned long long)wrow * ((k / 32) * Q::QB);
        MF_UNROLL_N(4)
        for (u32 c = lane; c < k / 8; c += TPR) {
            const u32 blk = c / 4, sub = c % 4;
            const u2 q = I::q(wr, blk * Q::QB, sub);
            const int xa = xq[8 * blk + 2 * sub], xb = xq[8 * blk + 2 * sub + 1];
            int si = __dp4a((int)q.x, xa, __dp4a((int)q.y, xb, 0));
            if (I::OFF != 0) {
                si -= I::OFF * __dp4a(0x01010101, xa, __dp4a(0x01010101, xb, 0));
            }
            acc += mul_rn(mul_rn(I::d(wr, blk * Q::QB), xd[blk]), (float)si);
            if (I::MIN && sub == 0) {
                acc += mul_rn(I::m(wr, blk * Q::QB), xs[blk]);
            }
        }
    }
    return acc;
}

// With ID (matmul_vec_id, ggml's MUL_MAT_ID for decode) block z is slot j = z % ids of token
// t = z / ids: its weight rows are its expert's (route[t][j], binding 4, as moe_route wrote it),
// its x row t (or z where x has a row per slot), its y row z.
template <class Q, bool ID>
static __device__ __forceinline__ void matmul_vec_body(const Params& p) {
    constexpr u32 WG = 64;
    constexpr u32 TPR = 8; // threads per row
    constexpr u32 CPB = Q::QK / 8; // chunks per block
    const u8* __restrict__ w = binding<const u8>(p, 1);
    const f4* __restrict__ x = binding<const f4>(p, 2);
    float* __restrict__ y = binding<float>(p, 3);
    const MatmulParams& prm = params<MatmulParams>(p);
    const u32 k = prm.k, m = prm.m, rows = prm.rows, row0 = prm.row0, n = prm.n;
    const u32 seg = threadIdx.x / TPR;
    const u32 lane = threadIdx.x % TPR;
    const u32 r = (blockIdx.x + blockIdx.y * gridDim.x) * (WG / TPR) + seg;
    u32 t = blockIdx.z, yrow = blockIdx.z, wrow = r;
    if constexpr (ID) {
        const float* __restrict__ route = binding<const float>(p, 4);
        const u32 ids = prm.ids, tok = blockIdx.z / ids;
        const u32 e = min((u32)route[tok * 2 * ids + blockIdx.z % ids], prm.n_expert - 1);
        wrow = e * rows + r;
        t = prm.x_slot ? blockIdx.z : tok;
    }
    const u32 nc = k / 8;
    const f4* __restrict__ xt = x + t * (k / 4);
    // q8_1 corrections of this token (act_s<Q> only).
    const float* __restrict__ xc = reinterpret_cast<const float*>(x) + (unsigned long long)n * k + t * (k / 32);
    float acc = 0.0f;
    if constexpr (MF_DP4A && i8w<Q>::INT8) {
        if (k <= MAX_K_I8) {
            // Uniform across the block: every thread takes this path and its barrier.
            const float s = seg_sum<TPR>(matmul_vec_i8<Q>(p, reinterpret_cast<const float*>(xt), xc, r, wrow, lane));
            if (r < rows && lane == 0) {
                store_y(p, y + yrow * m + row0 + r, s, row0 + r);
            }
            return;
        }
    }
    if (r < rows) {
        const u8* __restrict__ wr = w + (unsigned long long)wrow * ((k / Q::QK) * Q::QB);
        MF_UNROLL_N(4)
        for (u32 c = lane; c < nc; c += TPR) {
            const f4x2 v = Q::dq8(wr, (c / CPB) * Q::QB, c % CPB);
            acc += dot4(v.lo, xt[2 * c]) + dot4(v.hi, xt[2 * c + 1]);
            if (act_s<Q>::ON && c % CPB == 0) {
                acc += mul_rn(act_s<Q>::m(wr, (c / CPB) * Q::QB), xc[c / CPB]);
            }
        }
    }
    const float s = seg_sum<TPR>(acc);
    if (r < rows && lane == 0) {
        store_y(p, y + yrow * m + row0 + r, s, row0 + r);
    }
}

#ifdef MF_MATMUL_VEC_ID
#define MF_MATMUL_VEC(name)                                                                              \
    extern "C" __global__ void __launch_bounds__(64) matmul_vec_id_##name(const Params p) { \
        matmul_vec_body<qt_##name, true>(p);                                                             \
    }
#else
#define MF_MATMUL_VEC(name)                                                                          \
    extern "C" __global__ void __launch_bounds__(64) matmul_vec_##name(const Params p) { \
        matmul_vec_body<qt_##name, false>(p);                                                        \
    }
#endif
MF_MATRIX_QTYPES(MF_MATMUL_VEC)
