// matmul for prefill: y[t, row0 + r] = x[t, :] · W[r, :], tiled. A block of 64 threads (8 × 8)
// computes a 32-row × 32-token tile, each thread 4 rows × 4 tokens. Per 32-element step of k the
// weight tile is dequantized once into shared memory (128 chunks of 8, two per thread) and shared
// by all 32 tokens; the token tile is loaded beside it (256 f4s, four per thread). Tiles hold f4s
// along k with one f4 of padding per row.
//
// Thread (tx, ty) = (tid % 8, tid / 8) owns rows tx + 8i and tokens ty + 8j (i, j < 4): with the
// padded row stride of 9 f4s, the 8 threads of a quarter-warp then read 8 different weight rows
// from 8 different bank groups, and one token row by broadcast, so the 16-byte shared-memory reads
// are conflict-free; and consecutive threads store consecutive rows of y. (Which thread owns which
// outputs is internal to the block; each output is the same sum as in matmul.wgsl.)
//
// For quantized weights x is quantize_act's output (see matmul_vec.cu); with q4_1 / q5_1 weights
// each output adds its row's block offset m times its token's q8_1 correction per step (one block).
//
// Params: k (row length, a multiple of 32), m (width of y), rows (rows in this part), row0 (first
// row of this part), n (tokens). Bindings: 1 W (raw blocks), 2 x [n][k], 3 y [n][m],
// 4 b [m] (read only with bias: the fused bias add). acc: y +=; bias: + b (store_y).
// Grid: (ceil(rows / 32), ceil(n / 32)). Block: 64.

template <class Q>
static __device__ __forceinline__ void matmul_body(const Params& p) {
    constexpr u32 TM = 32; // rows per tile
    constexpr u32 TN = 32; // tokens per tile
    constexpr u32 TK = 32; // elements of k per step
    constexpr u32 LD = 9;  // f4s per tile row: TK / 4 plus one of padding
    constexpr u32 CPB = Q::QK / 8;
    __shared__ f4 ws[TM * LD];
    __shared__ f4 xs[TN * LD];
    __shared__ float wmin[TM]; // act_s<Q>: the step's block offset per row
    __shared__ float xcor[TN]; // act_s<Q>: the step's correction per token
    const u8* __restrict__ w = binding<const u8>(p, 1);
    const f4* __restrict__ x = binding<const f4>(p, 2);
    float* __restrict__ y = binding<float>(p, 3);
    const MatmulParams& prm = params<MatmulParams>(p);
    const u32 k = prm.k, m = prm.m, rows = prm.rows, row0 = prm.row0, n = prm.n;
    const u32 tid = threadIdx.x;
    const u32 m0 = blockIdx.x * TM;
    const u32 n0 = blockIdx.y * TN;
    const u32 tx = tid % 8;
    const u32 ty = tid / 8;
    const unsigned long long rbytes = (k / Q::QK) * Q::QB;
    const u32 k4 = k / 4;
    // acc[i][j]: row m0 + tx + 8i × token n0 + ty + 8j
    float acc[4][4];
    MF_UNROLL
    for (u32 i = 0; i < 4; i++) {
        MF_UNROLL
        for (u32 j = 0; j < 4; j++) {
            acc[i][j] = 0.0f;
        }
    }
    for (u32 k0 = 0; k0 < k; k0 += TK) {
        // Weight tile: row r, chunk c (of 4) per thread, twice.
        MF_UNROLL
        for (u32 i = 0; i < 2; i++) {
            const u32 idx = tid + i * 64;
            const u32 r = idx / 4;
            const u32 c = idx % 4;
            f4x2 v = {};
            if (m0 + r < rows) {
                const u32 gc = k0 / 8 + c;
                v = Q::dq8(w + (m0 + r) * rbytes, (gc / CPB) * Q::QB, gc % CPB);
            }
            ws[r * LD + 2 * c] = v.lo;
            ws[r * LD + 2 * c + 1] = v.hi;
        }
        // Token tile: token t, f4 q (of 8) per thread, four times.
        MF_UNROLL
        for (u32 i = 0; i < 4; i++) {
            const u32 idx = tid + i * 64;
            const u32 t = idx / 8;
            const u32 q = idx % 8;
            f4 v = {};
            if (n0 + t < n) {
                v = x[(n0 + t) * k4 + k0 / 4 + q];
            }
            xs[t * LD + q] = v;
        }
        if constexpr (act_s<Q>::ON) {
            const u32 i = tid % 32;
            if (tid < 32) {
                wmin[i] = m0 + i < rows ? act_s<Q>::m(w + (m0 + i) * rbytes, (k0 / Q::QK) * Q::QB) : 0.0f;
            } else {
                const float* xc = reinterpret_cast<const float*>(x) + (unsigned long long)n * k;
                xcor[i] = n0 + i < n ? xc[(n0 + i) * (k / Q::QK) + k0 / Q::QK] : 0.0f;
            }
        }
        __syncthreads();
        MF_UNROLL
        for (u32 q = 0; q < TK / 4; q++) {
            f4 a[4], b[4];
            MF_UNROLL
            for (u32 i = 0; i < 4; i++) {
                a[i] = ws[(tx + 8 * i) * LD + q];
                b[i] = xs[(ty + 8 * i) * LD + q];
            }
            MF_UNROLL
            for (u32 i = 0; i < 4; i++) {
                MF_UNROLL
                for (u32 j = 0; j < 4; j++) {
                    acc[i][j] += dot4(a[i], b[j]);
                }
            }
        }
        if constexpr (act_s<Q>::ON) {
            MF_UNROLL
            for (u32 i = 0; i < 4; i++) {
                MF_UNROLL
                for (u32 j = 0; j < 4; j++) {
                    acc[i][j] += mul_rn(wmin[tx + 8 * i], xcor[ty + 8 * j]);
                }
            }
        }
        __syncthreads();
    }
    MF_UNROLL
    for (u32 i = 0; i < 4; i++) {
        const u32 r = m0 + tx + 8 * i;
        MF_UNROLL
        for (u32 j = 0; j < 4; j++) {
            const u32 t = n0 + ty + 8 * j;
            if (r < rows && t < n) {
                store_y(p, y + t * m + row0 + r, acc[i][j], row0 + r);
            }
        }
    }
}

// matmul_mma: the same product over quantized weights in 8-bit integers on the tensor cores
// (llama.cpp's MMQ; the host takes it from sm_80 on, unless MINFER_INT8_MATMUL=0). Tiles of 64
// rows × TN tokens (TN 16, 32 or 64: `Variant::mma_launch` takes the widest that still gives
// every SM a tile), a block of 128 threads: warp w of the four takes rows 16w .. 16w + 15 against
// all TN tokens, one mma.sync m16n8k16 (mma_s8, quant.cuh) per 16 elements of k and 8 tokens.
//
// Per 32-element step each thread unpacks one row's half (two 8-element chunks, i8w<Q>) into
// shared memory as signed bytes with the half's scale s and offset m (the two chunks of a half
// share them in every format), and one token's half of quantize_act's packed q with its sum
// Σ q_x; the token's scale d per 32 comes beside it. Each output adds, per step,
// d · Σ_halves (s · Σ q_w q_x + m · Σ q_x) with the integer sums exactly the CPU's, as in the
// int8 matvec (matmul_vec.cu) and matmul_i8.wgsl. Where the two halves share s and m (all but
// the 16-element sub-blocks of q2_K, q3_K and q6_K: i8_halves<Q>) both halves' products go to one
// integer sum, and the step costs an output three float operations and an integer add:
// (s·d)·c (c through i2f_small: the float pipe's add, not the quarter-rate conversion) and,
// with offsets (i8_min<Q>), m·(d·Σ q_x), whose d·Σ q_x the token's loader computes once.
// The float work per output is what bounds a tile on the tensor cores (a warp's m16n8k16 is 512
// multiply-adds of 8 bits for 4 outputs a lane), so it is kept to this. q4_1 / q5_1 add the
// block offset times the q8_1 correction per step as matmul_body does. Rows of shared memory are
// 12 words (8 of data): the fragment reads of a warp (8 rows × 4 words) then fall in 32
// different banks; the per-token scales sit in rows of TN floats, read as pairs (a lane's two
// tokens are adjacent).
// Shared memory is double-buffered: while the warps multiply step i out of one buffer, each
// thread's global reads for step i + 1 are in flight into registers, which go to the other
// buffer after the products; one barrier per step.
//
// Split k (gridDim.z = S > 1, where the tiles alone would leave SMs idle: a decode step of a few
// dozen sequences, a small weight): block z takes the z-th of S equal runs of steps and writes
// its tile's sums to binding 5 (partials [S][n][rows]); the tile's last block to finish — a
// counter per tile in binding 6, zero between launches: that block puts it back — adds the S
// partials in the order z = 0 .. S − 1 and stores the outputs, so the result does not depend
// on which block finished last.
template <class Q, u32 TN>
static __device__ __forceinline__ void matmul_mma_body(const Params& p) {
    constexpr u32 TM = 64; // rows per tile
    constexpr u32 TK = 32; // elements of k per step
    constexpr u32 LD = 12; // words per tile row
    constexpr u32 NJ = TN / 8; // 8-token column blocks
    constexpr u32 CPB = Q::QK / 8;
    constexpr bool HALVES = i8_halves<Q>::ON;
    constexpr bool MIN = i8_min<Q>::ON;
    constexpr u32 NH = HALVES ? 2 : 1; // scales per row and step
    __shared__ u32 ws[2][TM * LD];
    __shared__ u32 xs[2][TN * LD];
    __shared__ float wsc[2][NH][TM];     // s per half (or step) and row
    __shared__ float wof[2][NH][TM];     // i8_min<Q>: m per half (or step) and row
    __shared__ float xds[2][NH][TN];     // i8_min<Q>: d · Σ q_x per half (or step) and token
    __shared__ float xd[2][TN];          // the step's scale per token
    __shared__ float wmin[2][TM];        // act_s<Q>: the step's block offset per row
    __shared__ float xcor[2][TM];        // act_s<Q>: the step's correction per token
    const u8* __restrict__ w = binding<const u8>(p, 1);
    const float* __restrict__ x = binding<const float>(p, 2);
    float* __restrict__ y = binding<float>(p, 3);
    const MatmulParams& prm = params<MatmulParams>(p);
    const u32 k = prm.k, m = prm.m, rows = prm.rows, row0 = prm.row0, n = prm.n;
    const u32 tid = threadIdx.x;
    const u32 m0 = blockIdx.x * TM;
    const u32 n0 = blockIdx.y * TN;
    const u32 wr0 = 16 * (tid / 32); // the warp's first row in the tile
    const u32 g = (tid % 32) / 4, tq = tid % 4;
    const u32 lr = tid / 2, lh = tid % 2; // the row (and token) and half this thread loads
    const unsigned long long rbytes = (k / Q::QK) * Q::QB;
    // quantize_act's packed q (a word pair per 8-element chunk) and scales (one per 32).
    const u32 qw = act_q_base(n * k);
    const u2* __restrict__ xq = reinterpret_cast<const u2*>(x + qw);
    const float* __restrict__ xdq = x + qw + n * k / 4;
    // This block's run of k: steps [s0, s1) of the k / TK.
    const u32 steps = k / TK, per = (steps + gridDim.z - 1) / gridDim.z;
    const u32 kb = min(steps, blockIdx.z * per) * TK, ke = min(steps, (blockIdx.z + 1) * per) * TK;

    // One thread's share of a step, from its global reads to its stores into shared memory.
    struct Loads {
        u2 w0, w1; // the row's half as bytes
        float s, m;
        u2 x0, x1; // the token's half
        float d;
        float c; // act_s<Q>: a row's block offset (threads 0–63) or a token's correction
    };
    auto load = [&](u32 k0) {
        Loads l = {};
        if (m0 + lr < rows) {
            const u8* wr = w + (m0 + lr) * rbytes;
            const u32 c0 = k0 / 8 + 2 * lh, c1 = c0 + 1;
            const QI8 a = i8w<Q>::q(wr, (c0 / CPB) * Q::QB, c0 % CPB);
            const QI8 b = i8w<Q>::q(wr, (c1 / CPB) * Q::QB, c1 % CPB);
            l.w0 = a.q, l.w1 = b.q;
            l.s = a.s, l.m = a.m;
        }
        if (lr < TN && n0 + lr < n) {
            const u32 t = n0 + lr;
            l.x0 = xq[t * (k / 8) + k0 / 8 + 2 * lh];
            l.x1 = xq[t * (k / 8) + k0 / 8 + 2 * lh + 1];
            l.d = xdq[t * (k / 32) + k0 / 32];
        }
        if constexpr (act_s<Q>::ON) {
            const u32 i = tid % 64;
            if (tid < 64) {
                l.c = m0 + i < rows ? act_s<Q>::m(w + (m0 + i) * rbytes, (k0 / Q::QK) * Q::QB) : 0.0f;
            } else {
                const float* xc = x + (unsigned long long)n * k;
                l.c = i < TN && n0 + i < n ? xc[(n0 + i) * (k / Q::QK) + k0 / Q::QK] : 0.0f;
            }
        }
        return l;
    };
    auto store = [&](const Loads& l, u32 b) {
        u32* d = ws[b] + lr * LD + 4 * lh;
        d[0] = l.w0.x, d[1] = l.w0.y, d[2] = l.w1.x, d[3] = l.w1.y;
        if (HALVES || lh == 0) {
            wsc[b][HALVES ? lh : 0][lr] = l.s;
            if constexpr (MIN) {
                wof[b][HALVES ? lh : 0][lr] = l.m;
            }
        }
        if (lr < TN) {
            u32* s = xs[b] + lr * LD + 4 * lh;
            s[0] = l.x0.x, s[1] = l.x0.y, s[2] = l.x1.x, s[3] = l.x1.y;
            if (lh == 0) {
                xd[b][lr] = l.d;
            }
        }
        if constexpr (MIN) {
            const int ones = 0x01010101;
            int sum = __dp4a(ones, (int)l.x0.x, __dp4a(ones, (int)l.x0.y, __dp4a(ones, (int)l.x1.x, __dp4a(ones, (int)l.x1.y, 0))));
            if constexpr (!HALVES) {
                sum += __shfl_xor_sync(0xffffffffu, sum, 1); // the other half's, one lane over
            }
            if (lr < TN && (HALVES || lh == 0)) {
                xds[b][HALVES ? lh : 0][lr] = mul_rn(l.d, (float)sum);
            }
        }
        if constexpr (act_s<Q>::ON) {
            if (tid < 64) {
                wmin[b][tid] = l.c;
            } else if (tid - 64 < TN) {
                xcor[b][tid - 64] = l.c;
            }
        }
    };

    // acc[j][i]: row m0 + wr0 + g + 8 (i / 2) × token n0 + 8j + 2tq + i % 2
    float acc[NJ][4];
    MF_UNROLL
    for (u32 j = 0; j < NJ; j++) {
        MF_UNROLL
        for (u32 i = 0; i < 4; i++) {
            acc[j][i] = 0.0f;
        }
    }
    const u32 r0 = wr0 + g; // this lane's rows in the tile: r0 and r0 + 8
    // acc[j][i]'s weight row and token.
    auto row_of = [&](u32 i) { return m0 + r0 + 8 * (i / 2); };
    auto token_of = [&](u32 j, u32 i) { return n0 + 8 * j + 2 * tq + i % 2; };
    if (kb < ke) {
        store(load(kb), 0);
    }
    __syncthreads();
    for (u32 k0 = kb, b = 0; k0 < ke; k0 += TK, b ^= 1) {
        const bool next = k0 + TK < ke;
        Loads l = {};
        if (next) {
            l = load(k0 + TK);
        }
        u32 a0[2], a1[2];
        MF_UNROLL
        for (u32 h = 0; h < 2; h++) {
            a0[h] = ws[b][r0 * LD + 4 * h + tq];
            a1[h] = ws[b][(r0 + 8) * LD + 4 * h + tq];
        }
        float sr[NH][2], mr[NH][2];
        MF_UNROLL
        for (u32 h = 0; h < NH; h++) {
            sr[h][0] = wsc[b][h][r0], sr[h][1] = wsc[b][h][r0 + 8];
            if constexpr (MIN) {
                mr[h][0] = wof[b][h][r0], mr[h][1] = wof[b][h][r0 + 8];
            }
        }
        MF_UNROLL
        for (u32 j = 0; j < NJ; j++) {
            const u32 t0 = 8 * j + 2 * tq; // this lane's tokens: t0 and t0 + 1
            int c[NH][4] = {};
            MF_UNROLL
            for (u32 h = 0; h < 2; h++) {
                mma_s8(c[HALVES ? h : 0], a0[h], a1[h], xs[b][(8 * j + g) * LD + 4 * h + tq]);
            }
            const f2 d = *reinterpret_cast<const f2*>(&xd[b][t0]);
            MF_UNROLL
            for (u32 h = 0; h < NH; h++) {
                f2 ds = {};
                if constexpr (MIN) {
                    ds = *reinterpret_cast<const f2*>(&xds[b][h][t0]);
                }
                MF_UNROLL
                for (u32 i = 0; i < 4; i++) {
                    const float dt = i % 2 ? d.y : d.x;
                    acc[j][i] = fmaf(mul_rn(sr[h][i / 2], dt), i2f_small(c[h][i]), acc[j][i]);
                    if constexpr (MIN) {
                        acc[j][i] = fmaf(mr[h][i / 2], i % 2 ? ds.y : ds.x, acc[j][i]);
                    }
                }
            }
            if constexpr (act_s<Q>::ON) {
                MF_UNROLL
                for (u32 i = 0; i < 4; i++) {
                    acc[j][i] = fmaf(wmin[b][r0 + 8 * (i / 2)], xcor[b][t0 + i % 2], acc[j][i]);
                }
            }
        }
        if (next) {
            store(l, b ^ 1);
        }
        __syncthreads();
    }
    if (gridDim.z > 1) {
        float* __restrict__ part = binding<float>(p, 5);
        u32* __restrict__ count = binding<u32>(p, 6);
        const u32 tile = blockIdx.y * gridDim.x + blockIdx.x;
        __shared__ u32 last;
        MF_UNROLL
        for (u32 j = 0; j < NJ; j++) {
            MF_UNROLL
            for (u32 i = 0; i < 4; i++) {
                const u32 r = row_of(i), t = token_of(j, i);
                if (r < rows && t < n) {
                    part[((unsigned long long)blockIdx.z * n + t) * rows + r] = acc[j][i];
                }
            }
        }
        // Every block's partials are out before its count says so; the last reads them after.
        __threadfence();
        __syncthreads();
        if (tid == 0) {
            last = atomicAdd(count + tile, 1u) == gridDim.z - 1;
        }
        __syncthreads();
        if (!last) {
            return;
        }
        __threadfence();
        MF_UNROLL
        for (u32 j = 0; j < NJ; j++) {
            MF_UNROLL
            for (u32 i = 0; i < 4; i++) {
                const u32 r = row_of(i), t = token_of(j, i);
                if (r < rows && t < n) {
                    float sum = 0.0f;
                    for (u32 z = 0; z < gridDim.z; z++) {
                        sum += __ldcg(part + ((unsigned long long)z * n + t) * rows + r);
                    }
                    acc[j][i] = sum;
                }
            }
        }
        if (tid == 0) {
            count[tile] = 0;
        }
    }
    MF_UNROLL
    for (u32 j = 0; j < NJ; j++) {
        MF_UNROLL
        for (u32 i = 0; i < 4; i++) {
            const u32 r = row_of(i), t = token_of(j, i);
            if (r < rows && t < n) {
                store_y(p, y + t * m + row0 + r, acc[j][i], row0 + r);
            }
        }
    }
}

// matmul_mma's entry for weights Q: where the tensor cores or Q's integer form are missing, a
// trap (the host never launches it there).
template <class Q, u32 TN>
static __device__ __forceinline__ void matmul_mma_entry(const Params& p) {
    if constexpr (MF_MMA && i8w<Q>::INT8) {
        matmul_mma_body<Q, TN>(p);
    } else {
        __trap();
    }
}

#define MF_MATMUL(name)                                                                          \
    extern "C" __global__ void __launch_bounds__(64) matmul_##name(const Params p) { \
        matmul_body<qt_##name>(p);                                                               \
    }
MF_MATRIX_QTYPES(MF_MATMUL)

// The tensor-core entries, one per token tile width (kernels.rs: MMA_COLS): matmul_mma<TN>_<qtype>.
#define MF_MATMUL_MMA(name)                                                                               \
    extern "C" __global__ void __launch_bounds__(128) matmul_mma16_##name(const Params p) { \
        matmul_mma_entry<qt_##name, 16>(p);                                                               \
    }                                                                                                     \
    extern "C" __global__ void __launch_bounds__(128) matmul_mma32_##name(const Params p) { \
        matmul_mma_entry<qt_##name, 32>(p);                                                               \
    }                                                                                                     \
    extern "C" __global__ void __launch_bounds__(128) matmul_mma64_##name(const Params p) { \
        matmul_mma_entry<qt_##name, 64>(p);                                                               \
    }
MF_MATRIX_QTYPES(MF_MATMUL_MMA)
