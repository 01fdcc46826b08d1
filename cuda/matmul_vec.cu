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

// The int8 path; `xq` etc. are the block's shared activations (whole rows, one token). `wr`: the
// row's blocks, null for a thread past the last row (it still joins the barrier).
template <class Q>
static __device__ __forceinline__ float matmul_vec_i8(const Params& p, const float* __restrict__ xt,
                                                      const float* __restrict__ xc, const u8* __restrict__ wr,
                                                      u32 lane) {
    typedef i8w<Q> I;
    constexpr u32 WG = 64, TPR = 8;
    __shared__ int xq[MAX_K_I8 / 4];
    __shared__ float xd[MAX_K_I8 / 32];
    __shared__ float xs[MAX_K_I8 / 32];
    // Every params struct of the matvecs starts with k.
    const u32 k = params<MatmulParams>(p).k;
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
    if (wr) {
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

// One lane's share of x · the row at wr (null past the last row), rows of k: xt the row's
// activations, xc (act_s<Q>) its q8_1 corrections. The int8 path where it applies, else the f32
// one. Called by every thread of the block (the int8 path has a barrier).
template <class Q>
static __device__ __forceinline__ float row_acc(const Params& p, const u8* __restrict__ wr, const float* xt,
                                                const float* xc, u32 k, u32 lane) {
    constexpr u32 TPR = 8;
    constexpr u32 CPB = Q::QK / 8; // chunks per block
    if constexpr (MF_DP4A && i8w<Q>::INT8) {
        if (k <= MAX_K_I8) {
            return matmul_vec_i8<Q>(p, xt, xc, wr, lane);
        }
    }
    const f4* x4 = reinterpret_cast<const f4*>(xt);
    float acc = 0.0f;
    if (wr) {
        MF_UNROLL_N(4)
        for (u32 c = lane; c < k / 8; c += TPR) {
            const f4x2 v = Q::dq8(wr, (c / CPB) * Q::QB, c % CPB);
            acc += dot4(v.lo, x4[2 * c]) + dot4(v.hi, x4[2 * c + 1]);
            if (act_s<Q>::ON && c % CPB == 0) {
                acc += mul_rn(act_s<Q>::m(wr, (c / CPB) * Q::QB), xc[c / CPB]);
            }
        }
    }
    return acc;
}

// Token t's activations (x [n][k]) and its q8_1 corrections (after all n rows).
static __device__ __forceinline__ const float* act_row(const Params& p, u32 t, u32 k) {
    return binding<const float>(p, 2) + (unsigned long long)t * k;
}

static __device__ __forceinline__ const float* act_cor(const Params& p, u32 t, u32 k, u32 n) {
    return binding<const float>(p, 2) + (unsigned long long)n * k + t * (k / 32);
}

// With ID (matmul_vec_id, ggml's MUL_MAT_ID for decode) block z is slot j = z % ids of token
// t = z / ids: its weight rows are its expert's (route[t][j], binding 4, as moe_route wrote it),
// its x row t (or z where x has a row per slot), its y row z.
template <class Q, bool ID>
static __device__ __forceinline__ void matmul_vec_body(const Params& p) {
    constexpr u32 WG = 64;
    constexpr u32 TPR = 8; // threads per row
    const MatmulParams& prm = params<MatmulParams>(p);
    const u32 k = prm.k, m = prm.m, rows = prm.rows, row0 = prm.row0;
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
    const u8* __restrict__ wr =
        r < rows ? binding<const u8>(p, 1) + (unsigned long long)wrow * ((k / Q::QK) * Q::QB) : nullptr;
    const float s = seg_sum<TPR>(row_acc<Q>(p, wr, act_row(p, t, k), act_cor(p, t, k, prm.n), k, lane));
    if (r < rows && lane == 0) {
        store_y(p, binding<float>(p, 3) + yrow * m + row0 + r, s, row0 + r);
    }
}

// matmul_vec_pack: the 2 or 3 weights of one pack (a layer's Q/K/V or gate/up in one upload
// buffer, members at byte offsets off1, off2 from binding 1) as one matrix of their rows in
// order; row r of member s goes to y_s (bindings 3, 5, 6), plus b_s[r] where the biases are
// fused (binding 4, their own pack). Each row is matmul_vec's.
// With norm = 1 an RMS norm of x is folded in: each block first normalizes its token's row into
// shared memory exactly as rms_norm does (the same sums in the same order, times the f32 weight
// at binding 7) and, for quantized weights (act = 1 + quantize_act's ACT), rounds it as
// quantize_act does; the rows then read it there. Rows up to MAX_NORM_K (checked by the schedule).
#define MAX_NORM_K 2048u

template <class Q>
static __device__ __forceinline__ void matmul_vec_pack_body(const Params& p) {
    constexpr u32 WG = 64;
    constexpr u32 TPR = 8;
    const MatmulPackParams& prm = params<MatmulPackParams>(p);
    const u32 k = prm.k;
    const u32 seg = threadIdx.x / TPR;
    const u32 lane = threadIdx.x % TPR;
    const u32 r = (blockIdx.x + blockIdx.y * gridDim.x) * (WG / TPR) + seg;
    const u32 t = blockIdx.z;
    // (member, its row, its rows, its byte offset, its bias's offset) of row r.
    u32 m = 0, rl = r, rows = prm.rows0, off = 0, boff = 0;
    if (rl >= prm.rows0) {
        m = 1, rl -= prm.rows0, rows = prm.rows1, off = prm.off1, boff = prm.boff1;
        if (rl >= prm.rows1) {
            m = 2, rl -= prm.rows1, rows = prm.rows2, off = prm.off2, boff = prm.boff2;
        }
    }
    const bool live = rl < rows;
    const u8* __restrict__ wr =
        live ? binding<const u8>(p, 1) + off + (unsigned long long)rl * ((k / Q::QK) * Q::QB) : nullptr;
    // The normalized row: k values, then a q8_1 correction per 32.
    __shared__ float xs[MAX_NORM_K + MAX_NORM_K / 32];
    __shared__ float red[WG / 32];
    const float* xt = act_row(p, t, k);
    const float* xc = act_cor(p, t, k, prm.n);
    if (prm.norm) {
        const float* __restrict__ nw = binding<const float>(p, 7);
        float ss = 0.0f;
        for (u32 i = threadIdx.x; i < k; i += WG) {
            const float v = xt[i];
            ss += v * v;
        }
        const float scale = 1.0f / sqrtf(block_sum<WG>(ss, red) / (float)k + prm.eps);
        for (u32 i = threadIdx.x; i < k; i += WG) {
            xs[i] = (xt[i] * scale) * nw[i];
        }
        __syncthreads();
        if (prm.act != 0) {
            const u32 act = prm.act - 1, qk = act == 2 ? 256 : 32;
            for (u32 b = threadIdx.x; b < k / qk; b += WG) {
                quantize_block(act, xs + b * qk, xs + b * qk, xs + k + b);
            }
            __syncthreads();
        }
        xt = xs;
        xc = xs + k;
    }
    float s = seg_sum<TPR>(row_acc<Q>(p, wr, xt, xc, k, lane));
    if (live && lane == 0) {
        if (prm.bias) {
            s += binding<const float>(p, 4)[boff + rl];
        }
        binding<float>(p, m == 0 ? 3 : m == 1 ? 5 : 6)[t * rows + rl] = s;
    }
}

#if defined(MF_MATMUL_VEC_PACK)
#define MF_MATMUL_VEC(name)                                                                       \
    extern "C" __global__ void __launch_bounds__(64) matmul_vec_pack_##name(const Params p) { \
        matmul_vec_pack_body<qt_##name>(p);                                                       \
    }
#elif defined(MF_MATMUL_VEC_ID)
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
