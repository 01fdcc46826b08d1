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

#define MF_MATMUL(name)                                                                          \
    extern "C" __global__ void __launch_bounds__(64) matmul_##name(const Params p) { \
        matmul_body<qt_##name>(p);                                                               \
    }
MF_MATRIX_QTYPES(MF_MATMUL)
