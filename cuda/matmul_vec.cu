// matmul_vec, matmul for decode: y[t, row0 + r] = x[t, :] · W[r, :] for the rows of one weight
// part. A block of 128 threads takes 4 rows of one token: the 32 lanes of a row (one warp) stride
// over its 8-element chunks (the f32 path) or its 32-element blocks (the int8 path), so each step
// of a warp reads consecutive bytes of the row (one q4_K / q6_K block, four q4_0 blocks; or four
// and sixteen), and meet in a butterfly of shuffles.
//
// For quantized weights x is quantize_act's output (act_q_base, common.cuh): the activations
// already rounded to the CPU's 8-bit partner format, as floats d · q, then for q4_1 / q5_1 one
// q8_1 correction per 32-element block, which the block's offset m multiplies (act_s<Q>), then
// the same q packed 4 to a word with d per 32-element block. Where the device has dp4a (sm_61 on)
// the rows multiply those bytes by the weights' (i8w<Q>, llama.cpp's MMVQ): per 32-element block
// d · Σ_halves (s · Σ q_w q_x + m · Σ q_x), the integer sums exactly the CPU's. Float weights, and older
// devices, take the f32 path over the floats.
//
// Params: k (row length), m (width of y: all rows of the weight), rows (rows in this part),
// row0 (first row of this part), n (rows of x); matmul_vec_id also ids, x_slot, n_expert.
// Bindings: 1 W (raw blocks), 2 x [n][k] (+ corrections, packed form), 3 y [n][m], 4 b [m] (with
// bias; id: the route). Grid: (x, y) folded over ceil(rows / 4) row groups; z: 1 (every token
// of the step, at most MV_COLS, in one block) or for id token × slot. Block: 128.

// One token's activations as the rows read them: its values, its q8_1 corrections, its packed q
// (a word pair per 8-element chunk) and its scales (one per 32 elements).
struct XRow {
    const float* __restrict__ x;
    const float* __restrict__ c;
    const u2* __restrict__ q;
    const float* __restrict__ d;
};

// One lane's share of x · the row at wr (null past the last row), rows of k.
// Threads per row: a warp.
#define MV_TPR 32u

// The int8 path takes a row 32 elements (one activation block, four chunks) a lane at a time, so
// each lane decodes a block's scales once for its four chunks rather than once a chunk (the
// decoding, not the bytes, bounded the matvec by the instructions it issued): blk_weights
// unpacks the four chunks, blk_dot gives one token's d-less sum over them,
// Σ_halves (s · Σ q_w q_x + m · Σ q_x), the integer sums exactly the CPU's.
template <class Q>
static __device__ __forceinline__ void blk_weights(const u8* __restrict__ wr, u32 u, QI8 (&wq)[4]) {
    constexpr u32 CPB = Q::QK / 8;
    MF_UNROLL
    for (u32 i = 0; i < 4; i++) {
        const u32 c = 4 * u + i;
        wq[i] = i8w<Q>::q(wr, (c / CPB) * Q::QB, c % CPB);
    }
}

template <class Q>
static __device__ __forceinline__ float blk_dot(const QI8 (&wq)[4], const u2* __restrict__ xq) {
    constexpr u32 NH = i8_halves<Q>::ON ? 2 : 1;
    float t = 0.0f;
    MF_UNROLL
    for (u32 h = 0; h < NH; h++) {
        int dot = 0, sum = 0;
        MF_UNROLL
        for (u32 i = h * 4 / NH; i < (h + 1) * 4 / NH; i++) {
            const u2 x = xq[i];
            dot = __dp4a((int)wq[i].q.x, (int)x.x, __dp4a((int)wq[i].q.y, (int)x.y, dot));
            if constexpr (i8_min<Q>::ON) {
                sum = __dp4a(0x01010101, (int)x.x, __dp4a(0x01010101, (int)x.y, sum));
            }
        }
        const QI8& w = wq[h * 4 / NH];
        t += mul_rn(w.s, (float)dot);
        if constexpr (i8_min<Q>::ON) {
            t += mul_rn(w.m, (float)sum);
        }
    }
    return t;
}

template <class Q>
static __device__ __forceinline__ float row_acc(const u8* __restrict__ wr, const XRow& xr, u32 k, u32 lane) {
    constexpr u32 TPR = MV_TPR;
    constexpr u32 CPB = Q::QK / 8; // chunks per block
    float acc = 0.0f;
    if (!wr) {
        return acc;
    }
    if constexpr (MF_DP4A && i8w<Q>::INT8) {
        MF_UNROLL_N(2)
        for (u32 u = lane; u < k / 32; u += TPR) {
            QI8 wq[4];
            blk_weights<Q>(wr, u, wq);
            acc += mul_rn(xr.d[u], blk_dot<Q>(wq, xr.q + 4 * u));
            if (act_s<Q>::ON && (4 * u) % CPB == 0) {
                acc += mul_rn(act_s<Q>::m(wr, (4 * u / CPB) * Q::QB), xr.c[4 * u / CPB]);
            }
        }
        return acc;
    }
    const f4* x4 = reinterpret_cast<const f4*>(xr.x);
    MF_UNROLL_N(4)
    for (u32 c = lane; c < k / 8; c += TPR) {
        const f4x2 v = Q::dq8(wr, (c / CPB) * Q::QB, c % CPB);
        acc += dot4(v.lo, x4[2 * c]) + dot4(v.hi, x4[2 * c + 1]);
        if (act_s<Q>::ON && c % CPB == 0) {
            acc += mul_rn(act_s<Q>::m(wr, (c / CPB) * Q::QB), xr.c[c / CPB]);
        }
    }
    return acc;
}

// Tokens one pass over a row takes (the schedule's VEC_PASS_COLS): a block takes every token of
// the step (up to the schedule's VEC_MAX_TOKENS, 8: llama.cpp's MMVQ_MAX_BATCH_SIZE) in passes of
// MV_COLS over its rows, the first reading them from memory and the others from the cache, so a
// decode step of eight sequences reads each weight row once for all of them. The accumulators
// are registers: more columns a pass would cost every launch, one token's included, occupancy
// (8 a pass: 108–127 registers, 25 % on sm_90).
#define MV_COLS 2u

// row_acc for tokens 0..nc (nc ≤ MV_COLS) of x at once: each chunk of the row decoded once, each
// token's sum kept apart with row_acc's arithmetic in row_acc's order (a token's result is the
// same whatever the other tokens of its step). xr is token 0's row; token j's lies j rows on.
template <class Q>
static __device__ __forceinline__ void row_acc_cols(const u8* __restrict__ wr, const XRow& xr, u32 k, u32 lane, u32 nc,
                                                    float acc[MV_COLS]) {
    constexpr u32 TPR = MV_TPR;
    constexpr u32 CPB = Q::QK / 8;
    for (u32 j = 0; j < MV_COLS; j++) {
        acc[j] = 0.0f;
    }
    if (!wr) {
        return;
    }
    if constexpr (MF_DP4A && i8w<Q>::INT8) {
        for (u32 u = lane; u < k / 32; u += TPR) {
            QI8 wq[4];
            blk_weights<Q>(wr, u, wq);
            const bool at_block = (4 * u) % CPB == 0;
            const float mc = act_s<Q>::ON && at_block ? act_s<Q>::m(wr, (4 * u / CPB) * Q::QB) : 0.0f;
#pragma unroll
            for (u32 j = 0; j < MV_COLS; j++) {
                if (j < nc) {
                    acc[j] += mul_rn(xr.d[u + j * (k / 32)], blk_dot<Q>(wq, xr.q + 4 * u + j * (k / 8)));
                    if (act_s<Q>::ON && at_block) {
                        acc[j] += mul_rn(mc, xr.c[4 * u / CPB + j * (k / 32)]);
                    }
                }
            }
        }
        return;
    }
    const f4* x4 = reinterpret_cast<const f4*>(xr.x);
    MF_UNROLL_N(2)
    for (u32 c = lane; c < k / 8; c += TPR) {
        const f4x2 v = Q::dq8(wr, (c / CPB) * Q::QB, c % CPB);
        const float mc = act_s<Q>::ON && c % CPB == 0 ? act_s<Q>::m(wr, (c / CPB) * Q::QB) : 0.0f;
#pragma unroll
        for (u32 j = 0; j < MV_COLS; j++) {
            if (j < nc) {
                acc[j] += dot4(v.lo, x4[2 * c + j * (k / 4)]) + dot4(v.hi, x4[2 * c + 1 + j * (k / 4)]);
                if (act_s<Q>::ON && c % CPB == 0) {
                    acc[j] += mul_rn(mc, xr.c[c / CPB + j * (k / 32)]);
                }
            }
        }
    }
}

// Token t's activations in quantize_act's layout at base (nk = n · k of them).
static __device__ __forceinline__ XRow act_row(const float* base, u32 t, u32 k, u32 nk) {
    const u32 qw = act_q_base(nk);
    return XRow{base + (unsigned long long)t * k, base + nk + t * (k / 32),
                reinterpret_cast<const u2*>(base + qw) + t * (k / 8), base + qw + nk / 4 + t * (k / 32)};
}

// With ID (matmul_vec_id, ggml's MUL_MAT_ID for decode) block z is slot j = z % ids of token
// t = z / ids: its weight rows are its expert's (route[t][j], binding 4, as moe_route wrote it),
// its x row t (or z where x has a row per slot), its y row z.
template <class Q, bool ID>
static __device__ __forceinline__ void matmul_vec_body(const Params& p) {
    constexpr u32 WG = 128;
    constexpr u32 TPR = MV_TPR;
    const MatmulParams& prm = params<MatmulParams>(p);
    const u32 k = prm.k, m = prm.m, rows = prm.rows, row0 = prm.row0;
    const u32 seg = threadIdx.x / TPR;
    const u32 lane = threadIdx.x % TPR;
    const u32 r = (blockIdx.x + blockIdx.y * gridDim.x) * (WG / TPR) + seg;
    // Without ID one block takes every token (z = 0); with ID block z is one (token, slot).
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
    const XRow xr = act_row(binding<const float>(p, 2), t, k, prm.n * k);
    if (ID || prm.n == 1) {
        // One token (row_acc_cols' arithmetic for it, without the other columns' registers).
        const float s = seg_sum<TPR>(row_acc<Q>(wr, xr, k, lane));
        if (r < rows && lane == 0) {
            store_y(p, binding<float>(p, 3) + yrow * m + row0 + r, s, row0 + r);
        }
    } else {
        // Every token of the step (n ≤ VEC_MAX_TOKENS, the schedule's bound), MV_COLS a pass.
        for (u32 j0 = 0; j0 < prm.n; j0 += MV_COLS) {
            const u32 nc = min(prm.n - j0, MV_COLS);
            float acc[MV_COLS];
            row_acc_cols<Q>(wr, act_row(binding<const float>(p, 2), j0, k, prm.n * k), k, lane, nc, acc);
#pragma unroll
            for (u32 j = 0; j < MV_COLS; j++) {
                if (j < nc) {
                    const float s = seg_sum<TPR>(acc[j]);
                    if (r < rows && lane == 0) {
                        store_y(p, binding<float>(p, 3) + (j0 + j) * m + row0 + r, s, row0 + r);
                    }
                }
            }
        }
    }
}

// matmul_vec_pack: the 2 or 3 weights of one pack (a layer's Q/K/V or gate/up in one upload
// buffer, members at byte offsets off1, off2 from binding 1) as one matrix of their rows in
// order; row r of member s goes to y_s (bindings 3, 5, 6), plus b_s[r] where the biases are
// fused (binding 4, their own pack). Each row is matmul_vec's: with n > 1 one block takes every
// token of the step (grid z = 1), else block z is token z.
// With norm = 1 (one token) an RMS norm of x is folded in: each block first normalizes its row into
// shared memory exactly as rms_norm does (the same sums in the same order, times the f32 weight
// at binding 7) and, for quantized weights (act = 1 + quantize_act's ACT), rounds it as
// quantize_act does; the rows then read it there. Rows up to MAX_NORM_K (checked by the schedule).
#define MAX_NORM_K 2048u

template <class Q>
static __device__ __forceinline__ void matmul_vec_pack_body(const Params& p) {
    constexpr u32 WG = 128;
    constexpr u32 TPR = MV_TPR;
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
    // The normalized row in quantize_act's layout (k values, a q8_1 correction per 32, the
    // packed form): act_q_base(MAX_NORM_K) + MAX_NORM_K / 4 + MAX_NORM_K / 32 floats.
    __shared__ __align__(16) float xs[(MAX_NORM_K + MAX_NORM_K / 32 + 3) / 4 * 4 + MAX_NORM_K / 4 + MAX_NORM_K / 32];
    __shared__ float red[WG / 32];
    const float* x = binding<const float>(p, 2);
    float* __restrict__ y = binding<float>(p, m == 0 ? 3 : m == 1 ? 5 : 6);
    if (prm.n > 1) {
        // Every token of the step (n ≤ VEC_MAX_TOKENS; a norm is folded only into one token's
        // launch), MV_COLS a pass as matmul_vec takes them, each as below.
        for (u32 j0 = 0; j0 < prm.n; j0 += MV_COLS) {
            const u32 nc = min(prm.n - j0, MV_COLS);
            float acc[MV_COLS];
            row_acc_cols<Q>(wr, act_row(x, j0, k, prm.n * k), k, lane, nc, acc);
#pragma unroll
            for (u32 j = 0; j < MV_COLS; j++) {
                if (j < nc) {
                    float s = seg_sum<TPR>(acc[j]);
                    if (live && lane == 0) {
                        if (prm.bias) {
                            s += binding<const float>(p, 4)[boff + rl];
                        }
                        y[(j0 + j) * rows + rl] = s;
                    }
                }
            }
        }
        return;
    }
    XRow xr = act_row(x, t, k, prm.n * k);
    if (prm.norm) {
        const float* __restrict__ nw = binding<const float>(p, 7);
        const float* xt = xr.x;
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
            // Rounded in place (the packed form lies past the values).
            quantize_row<WG>(prm.act - 1, xs, xs, 0, k, k);
            __syncthreads();
        }
        xr = act_row(xs, 0, k, k);
    }
    float s = seg_sum<TPR>(row_acc<Q>(wr, xr, k, lane));
    if (live && lane == 0) {
        if (prm.bias) {
            s += binding<const float>(p, 4)[boff + rl];
        }
        y[t * rows + rl] = s;
    }
}

#if defined(MF_MATMUL_VEC_PACK)
#define MF_MATMUL_VEC(name)                                                                       \
    extern "C" __global__ void __launch_bounds__(128) matmul_vec_pack_##name(const Params p) { \
        matmul_vec_pack_body<qt_##name>(p);                                                       \
    }
#elif defined(MF_MATMUL_VEC_ID)
#define MF_MATMUL_VEC(name)                                                                              \
    extern "C" __global__ void __launch_bounds__(128) matmul_vec_id_##name(const Params p) { \
        matmul_vec_body<qt_##name, true>(p);                                                             \
    }
#else
#define MF_MATMUL_VEC(name)                                                                          \
    extern "C" __global__ void __launch_bounds__(128) matmul_vec_##name(const Params p) { \
        matmul_vec_body<qt_##name, false>(p);                                                        \
    }
#endif
MF_MATRIX_QTYPES(MF_MATMUL_VEC)
