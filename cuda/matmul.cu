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

// f(acc[a][j][i], row, token) for each of a matmul_mma lane's outputs inside the matrix (row
// rows(a, i) < rows, token tokens(j, i) < n).
template <u32 NJ, class R, class T, class F>
static __device__ __forceinline__ void mma_outputs(float (&acc)[2][NJ][4], const R& rows_of, const T& tokens_of, u32 rows,
                                                   u32 n, const F& f) {
    MF_UNROLL
    for (u32 a = 0; a < 2; a++) {
        MF_UNROLL
        for (u32 j = 0; j < NJ; j++) {
            MF_UNROLL
            for (u32 i = 0; i < 4; i++) {
                const u32 r = rows_of(a, i), t = tokens_of(j, i);
                if (r < rows && t < n) {
                    f(acc[a][j][i], r, t);
                }
            }
        }
    }
}

// matmul_mma: the same product over quantized weights in 8-bit integers on the tensor cores
// (llama.cpp's MMQ; the host takes it from sm_80 on, unless MINFER_INT8_MATMUL=0). Tiles of 128
// rows × TN tokens (TN 16, 32 or 64: `Variant::mma_launch` takes the widest that still gives
// every SM a tile), a block of 256 threads: warp w of the eight takes rows 32 (w % 4) .. + 31
// against tokens (TN / 2)(w / 4) .. + TN / 2 − 1, two 16-row tiles against TN / 16 8-token
// blocks, so each fragment a lane reads from shared memory serves two or more products.
//
// A step is 128 elements of k (four 32-element blocks). Its loads are spread so that a warp's
// lanes read one stretch of memory: lanes 16h .. 16h + 15 take the 16 8-element chunks of one
// weight row (eight rows a thread), or of one token's packed q (TN / 16 tokens a thread), so
// a load instruction of the warp touches two rows' worth of consecutive bytes. (Reading a row's
// chunk per lane instead, 16 rows a load, made the L1 the limiter: a wavefront per row and
// load.) Each chunk is unpacked to signed bytes (i8w<Q>); each (row, block, half)'s scale s and
// offset m is read and decoded once, by a thread of its own (a scale item: two or four a
// thread), not by every chunk lane that shares it: that decoding was a third of the step's
// instructions. Each token's chunk comes with its block's scale d and, with offsets,
// d · Σ q_x over the block (or half), summed across the chunk's lanes with shuffles.
//
// Each output adds, per 32-element block, d · Σ_halves (s · Σ q_w q_x + m · Σ q_x) with the
// integer sums exactly the CPU's, as in the int8 matvec (matmul_vec.cu) and matmul_i8.wgsl.
// Where the two halves share s (all but the 16-element sub-blocks of q2_K, q3_K and q6_K:
// i8_halves<Q>) the block is one mma.sync m16n8k32 (mma_s8_k32_from) and its integer sum is
// scaled once, (s·d)·c (c through i2f_biased: the sums start from I2F_BIAS, and a float add
// makes c a float, not the quarter-rate conversion); else two m16n8k16 (mma_s8_from) whose
// sums are scaled d·(s0·c0 + s1·c1). That scaling takes three or five float instructions per
// output and block, most of what a step issues: a floor no tile shape moves, since every
// m16n8k32 adds one block to four outputs a lane. The K-quants (i8k<Q>) pass under it: their
// sub-block scales s are integers under one d per 256 elements, as their q8_K activations have
// one d there, so a step (half such a block) sums Σ_blocks s · c in integers, an IMAD per output
// and block (two with halves), and scales that once, (d_w · d_x) · Σ: the CPU's order too.
//
// The offsets' part, Σ_blocks m · (d · Σ q_x), is itself a product of a 128-row × KO matrix (m
// per row and block, or half: KO columns a step) by a KO × TN one (d · Σ q_x per block and
// token; q4_1 / q5_1 add their q8_1 correction there, which the same m multiplies), so it goes
// to the tensor cores too: in tf32, each side split in two (tf32_split) and multiplied in three
// products (mma_tf32x3), about f32's precision, into the same accumulators, once a step. Per
// output and block that saves the FFMA the scaling would take.
//
// Rows of shared memory are 36 words (32 of data); fragments are read with ldmatrix, eight
// 16-byte rows an instruction from 32 different banks. The per-block scales are laid out for
// the reads: a lane's two rows (r, r + 8) have theirs side by side, and its two tokens (t,
// t + 1) their d, so each takes one load a block; the offsets' tables hold (h, l) pairs, rows
// 132 (or TN + 4) pairs apart so that a warp's fragment reads meet each bank once a phase.
//
// A step's global reads go straight to shared memory, between the barriers that close the
// previous step's products and open this one's: no registers are held across the products for
// the next step (they would spill), and the block beside it on the SM multiplies meanwhile.
//
// Stream-k (sk_workers = G > 0, where the tiles would leave places idle: a last, part-empty
// round of blocks, or fewer tiles than places, as in a decode step of a few dozen sequences;
// `Variant::mma_stream_k`): the grid is one row of blocks, a block for each tile but the last
// sk_tiles, then G blocks that share those tiles' steps evenly, each taking runs of steps of
// the tiles its share crosses. A run of part of a tile writes its sums to binding 5 (partials
// [runs][n][rows]); the tile's last run to finish — a counter per tile in binding 6, zero
// between launches: that block puts it back — adds the partials in the order of the runs and
// stores the outputs, so the result does not depend on which block finished last.
template <class Q, u32 TN>
static __device__ __forceinline__ void matmul_mma_body(const Params& p) {
    constexpr u32 TM = 128;        // rows per tile
    constexpr u32 TK = 128;        // elements of k per step
    constexpr u32 NB = TK / 32;    // 32-element blocks per step
    constexpr u32 LD = TK / 4 + 4; // words per tile row
    constexpr u32 WN = TN / 2;     // tokens per warp
    constexpr u32 NJ = WN / 8;     // 8-token column blocks per warp
    constexpr u32 WL = TM / 16;    // weight chunks a thread loads per step
    constexpr u32 XL = TN / 16;    // token chunks a thread loads per step
    constexpr u32 CPB = Q::QK / 8;
    constexpr bool HALVES = i8_halves<Q>::ON;
    constexpr bool MIN = i8_min<Q>::ON;
    constexpr bool ACT = act_s<Q>::ON;
    constexpr bool KSI = i8k<Q>::ON; // integer sub-block scales under a d per step (the K-quants)
    static_assert(!ACT || MIN, "act_s<Q>'s offset is i8w<Q>'s m");
    static_assert(!KSI || TK * 2 == 256, "a step is half of every K-quant block");
    constexpr u32 NH = HALVES ? 2 : 1; // scales per row and block
    constexpr u32 KO = NB * NH;        // the offsets' columns a step (mma_tf32x3's K)
    // The rows' scales: per block, an entry for each row pair (r, r + 8) of a 16-row tile, so a
    // lane reads both its rows' in one load: [r, r + 8][half]. Blocks 4 · WE banks apart, so
    // that a warp's stores (four blocks of eight rows, r .. r + 3 and r + 8 .. r + 11) take the
    // fewest wavefronts their bytes need.
    constexpr u32 WE = 2 * NH;                 // floats an entry: 2 or 4
    constexpr u32 WB = (TM / 2) * WE + 4 * WE; // floats a block
    constexpr u32 XB = TN + 8;                 // the tokens' d: floats a block
    constexpr u32 WO = TM + 4, XO = TN + 4;    // the offsets' tables: pairs a column
    __shared__ __align__(16) u32 ws[TM * LD];
    __shared__ __align__(16) u32 xs[TN * LD];
    __shared__ __align__(16) float wsc[NB * WB];
    __shared__ __align__(16) float xsc[NB * XB];
    __shared__ __align__(16) f2 wo[MIN ? KO : 1][WO]; // m of row r, column c: wo[c][r], split
    __shared__ __align__(16) f2 xo[MIN ? KO : 1][XO]; // d · Σ q_x of token t, column c: xo[c][t], split
    __shared__ __align__(16) float wd[KSI ? TM : 2];  // i8k<Q>: the rows' d, rows r and r + 8 side by side
    const u8* __restrict__ w = binding<const u8>(p, 1);
    const float* __restrict__ x = binding<const float>(p, 2);
    float* __restrict__ y = binding<float>(p, 3);
    const MatmulParams& prm = params<MatmulParams>(p);
    const u32 k = prm.k, m = prm.m, rows = prm.rows, row0 = prm.row0, n = prm.n;
    const u32 tid = threadIdx.x;
    const u32 warp = tid / 32, lane = tid % 32, g = lane / 4, tq = tid % 4;
    const u32 wr0 = 32 * (warp % 4); // the warp's first row in the tile
    const u32 wt0 = WN * (warp / 4); // and first token
    const u32 lc = tid % 16, lr = tid / 16; // the chunk this thread loads, of rows (tokens) lr + 16i
    const u32 lb = lc / 4;                  // that chunk's block in the step
    const unsigned long long rbytes = (k / Q::QK) * Q::QB;
    // quantize_act's packed q (a word pair per 8-element chunk) and scales (one per 32).
    const u32 qw = act_q_base(n * k);
    const u2* __restrict__ xq = reinterpret_cast<const u2*>(x + qw);
    const float* __restrict__ xdq = x + qw + n * k / 4;
    const float* __restrict__ xc = x + (unsigned long long)n * k; // act_s<Q>: the corrections
    const u32 steps = (k + TK - 1) / TK, tiles_x = (rows + TM - 1) / TM;
    // The half (of the block) whose offset column lane lc stores.
    const bool s_lane = HALVES ? lc % 2 == 0 : lc % 4 == 0;
    const u32 s_half = HALVES ? (lc / 2) % 2 : 0;
    // Where row r's s of half h of block b sits.
    auto w_at = [&](u32 b, u32 h, u32 r) { return b * WB + ((r / 16) * 8 + r % 8) * WE + (r % 16) / 8 * NH + h; };
    auto wd_at = [&](u32 r) { return ((r / 16) * 8 + r % 8) * 2 + (r % 16) / 8; };

    // The scales are read once per row, block and half, by a thread of their own (scale items),
    // not by each of the chunk lanes that share them: NBH lanes side by side take a row's, so a
    // warp's load touches 32 / NBH rows, and rows r .. r + 3 with r + 8 .. r + 11, so its stores
    // spread over the banks. A chunk lane reads its quants alone (the compiler drops the scale
    // reads and arithmetic of i8w<Q>::q from it, and the quant reads from a scale item).
    constexpr u32 NBH = NB * NH;       // a row's scale items a step
    constexpr u32 SL = TM * NBH / 256; // a thread's: 2, or 4 with halves
    const u32 s_blk = (tid % NBH) / NH, s_hf = tid % NH;
    auto s_row = [&](u32 i) {
        const u32 p = tid / NBH + (256 / NBH) * i;
        return (p & ~12u) | ((p & 4u) << 1) | ((p & 8u) >> 1);
    };
    // The lane's reads, as constant offsets from bases that depend on the lane alone: ldmatrix
    // rows (A: lanes 8i .. 8i + 7 give rows 0 .. 7 of the 16-row tile's matrix i, rows 8 .. 15 for
    // odd i, the block's second 16 bytes for i ≥ 2; B: tokens 0 .. 7, bytes 16 .. 31 for odd i,
    // the next 8-token block for i ≥ 2), the scale entries of rows wr0 + g, + 8 and of tokens
    // wt0 + 2tq, + 1, and the offsets' fragments.
    const u32* const wa = ws + (wr0 + lane % 8 + 8 * ((lane / 8) % 2)) * LD + 4 * (lane / 16);
    const u32* const xa = xs + (wt0 + lane % 8 + 8 * (lane / 16)) * LD + 4 * ((lane / 8) % 2);
    // i8k<Q>: B by blocks instead, two a read (matrices: block 2p's two halves, then 2p + 1's).
    const u32* const xk = xs + (wt0 + lane % 8) * LD + 4 * ((lane / 8) % 2) + 8 * (lane / 16);
    const float* const wsa = wsc + w_at(0, 0, wr0 + g);
    const float* const xsa = xsc + wt0 + 2 * tq;
    const f2* const woa = &wo[0][0] + tq * WO + wr0 + g;
    const f2* const xoa = &xo[0][0] + tq * XO + wt0 + g;
    // Chunks past the matrix (rows, tokens, the end of k) are read at the last one there: their
    // products go to outputs never stored, or to blocks the step's products skip (and whose
    // offsets it stores as zeros).
    const u32 last_chunk = k / 8 - 1;

    // One thread's share of a step, from its global reads to its stores into shared memory.
    struct Loads {
        u2 w[WL]; // the rows' chunks as bytes
        float s[SL], m[SL]; // i8k<Q>: s holds the integer scale's bits
        float kd[SL];       // i8k<Q>: the row's d
        u2 x[XL];           // the tokens' chunks
        float d[XL];
        float xc[XL]; // act_s<Q>: the tokens' corrections
    };
    // Tile `tile` (row tiles first) over steps [kb, ke) of k: its outputs, or where `nrun` runs
    // share the tile (stream-k), run `run`'s partial sums, and for the last run to finish, the
    // sum of all of them in the order of the runs.
    __shared__ u32 last;
    auto tile_run = [&](u32 tile, u32 kb, u32 ke, u32 run, u32 nrun) {
        const u32 m0 = (tile % tiles_x) * TM, n0 = (tile / tiles_x) * TN;
        auto load = [&](u32 k0) {
            Loads l;
            const u32 gc = min(k0 / 8 + lc, last_chunk); // the chunk's index along the row
            MF_UNROLL
            for (u32 i = 0; i < WL; i++) {
                const u8* wr = w + min(m0 + lr + 16 * i, rows - 1) * rbytes;
                l.w[i] = i8w<Q>::q(wr, (gc / CPB) * Q::QB, gc % CPB).q;
            }
            // The scale item's first chunk: its block's, or its half's.
            const u32 sc = min(k0 / 8 + 4 * s_blk + 2 * s_hf, last_chunk);
            MF_UNROLL
            for (u32 i = 0; i < SL; i++) {
                const u8* wr = w + min(m0 + s_row(i), rows - 1) * rbytes;
                const QI8 a = i8w<Q>::q(wr, (sc / CPB) * Q::QB, sc % CPB);
                l.s[i] = a.s, l.m[i] = a.m;
                if constexpr (KSI) {
                    const KS ks = i8k<Q>::at(wr, (sc / CPB) * Q::QB, sc % CPB);
                    l.s[i] = __int_as_float(ks.s), l.kd[i] = ks.d;
                }
            }
            MF_UNROLL
            for (u32 i = 0; i < XL; i++) {
                const u32 t = min(n0 + lr + 16 * i, n - 1);
                l.x[i] = xq[t * (k / 8) + gc];
                l.d[i] = xdq[t * (k / 32) + gc / 4];
                if constexpr (ACT) {
                    l.xc[i] = xc[t * (k / Q::QK) + gc * 8 / Q::QK];
                }
            }
            return l;
        };
        auto store = [&](const Loads& l, u32 k0) {
            MF_UNROLL
            for (u32 i = 0; i < WL; i++) {
                const u32 r = lr + 16 * i;
                *reinterpret_cast<u2*>(ws + r * LD + 2 * lc) = l.w[i];
            }
            MF_UNROLL
            for (u32 i = 0; i < SL; i++) {
                const u32 r = s_row(i);
                wsc[w_at(s_blk, s_hf, r)] = l.s[i];
                if constexpr (KSI) {
                    if (tid % NBH == 0) { // the row's block 0 item: the step's d is the same for all
                        wd[wd_at(r)] = l.kd[i];
                    }
                }
                if constexpr (MIN) {
                    // Blocks past the step's end add nothing.
                    wo[s_blk * NH + s_hf][r] = tf32_split(k0 + 32 * s_blk < ke ? l.m[i] : 0.0f);
                }
            }
            MF_UNROLL
            for (u32 i = 0; i < XL; i++) {
                const u32 t = lr + 16 * i;
                *reinterpret_cast<u2*>(xs + t * LD + 2 * lc) = l.x[i];
                if (lc % 4 == 0) {
                    xsc[lb * XB + t] = l.d[i];
                }
                if constexpr (MIN) {
                    const int ones = 0x01010101;
                    int sum = __dp4a(ones, (int)l.x[i].x, __dp4a(ones, (int)l.x[i].y, 0));
                    sum += __shfl_xor_sync(0xffffffffu, sum, 1); // the half's other chunk
                    if constexpr (!HALVES) {
                        sum += __shfl_xor_sync(0xffffffffu, sum, 2); // the block's other half
                    }
                    float ds = mul_rn(l.d[i], (float)sum);
                    if constexpr (ACT) {
                        ds += l.xc[i];
                    }
                    if (s_lane) {
                        xo[lb * NH + s_half][t] = tf32_split(ds);
                    }
                }
            }
        };

        // acc[a][j][i]: row m0 + wr0 + 16a + g + 8 (i / 2) × token n0 + wt0 + 8j + 2tq + i % 2
        float acc[2][NJ][4] = {};
        auto row_of = [&](u32 a, u32 i) { return m0 + wr0 + 16 * a + g + 8 * (i / 2); };
        auto token_of = [&](u32 j, u32 i) { return n0 + wt0 + 8 * j + 2 * tq + i % 2; };
        for (u32 k0 = kb; k0 < ke; k0 += TK) {
            store(load(k0), k0);
            __syncthreads();
            if constexpr (KSI) {
                // The step's B fragments and tokens' d (the step lies within one 256-element
                // block: k is whole blocks, so one d a token); then each 16-row tile a in turn:
                // its A fragments and integer scales for the four blocks, and per token block the
                // blocks' sums Σ_b Σ_h s · c in integers, scaled once by the row's d and the token's.
                u32 bk[NJ][NB][2];
                f2 dx[NJ];
                MF_UNROLL
                for (u32 j = 0; j < NJ; j++) {
                    MF_UNROLL
                    for (u32 bp = 0; bp < NB; bp += 2) {
                        u32 v[4];
                        ldsm(v, xk + 8 * j * LD + 8 * bp);
                        bk[j][bp][0] = v[0], bk[j][bp][1] = v[1], bk[j][bp + 1][0] = v[2], bk[j][bp + 1][1] = v[3];
                    }
                    dx[j] = *reinterpret_cast<const f2*>(xsa + 8 * j); // block 0's: the step's
                }
                MF_UNROLL
                for (u32 a = 0; a < 2; a++) {
                    u32 af[NB][4];
                    int sc[NB][NH][2]; // [block][half][rows g, g + 8]
                    MF_UNROLL
                    for (u32 b = 0; b < NB; b++) {
                        ldsm(af[b], wa + 16 * a * LD + 8 * b);
                        const float* we = wsa + b * WB + 8 * a * WE;
                        if constexpr (WE == 4) {
                            const f4 e = *reinterpret_cast<const f4*>(we);
                            sc[b][0][0] = __float_as_int(e.x), sc[b][0][1] = __float_as_int(e.z);
                            sc[b][NH - 1][0] = __float_as_int(e.y), sc[b][NH - 1][1] = __float_as_int(e.w);
                        } else {
                            const f2 e = *reinterpret_cast<const f2*>(we);
                            sc[b][0][0] = __float_as_int(e.x), sc[b][0][1] = __float_as_int(e.y);
                        }
                    }
                    const f2 dw = *reinterpret_cast<const f2*>(wd + wd_at(wr0 + 16 * a + g));
                    MF_UNROLL
                    for (u32 j = 0; j < NJ; j++) {
                        int ci[4] = {0, 0, 0, 0};
                        MF_UNROLL
                        for (u32 b = 0; b < NB; b++) {
                            int c[NH][4];
                            if constexpr (HALVES) {
                                mma_s8_from(c[0], af[b][0], af[b][1], bk[j][b][0], 0);
                                mma_s8_from(c[NH - 1], af[b][2], af[b][3], bk[j][b][1], 0);
                            } else {
                                mma_s8_k32_from(c[0], af[b], bk[j][b][0], bk[j][b][1], 0);
                            }
                            MF_UNROLL
                            for (u32 i = 0; i < 4; i++) {
                                MF_UNROLL
                                for (u32 h = 0; h < NH; h++) {
                                    ci[i] += sc[b][h][i / 2] * c[h][i];
                                }
                            }
                        }
                        MF_UNROLL
                        for (u32 i = 0; i < 4; i++) {
                            const float dd = mul_rn(i / 2 ? dw.y : dw.x, i % 2 ? dx[j].y : dx[j].x);
                            acc[a][j][i] = fmaf(dd, (float)ci[i], acc[a][j][i]);
                        }
                    }
                }
            } else {
                MF_UNROLL
                for (u32 b = 0; b < NB; b++) {
                    if (k0 + 32 * b >= ke) {
                        break;
                    }
                    // The lane's A fragments (rows g, g + 8 of each 16-row tile; words tq, 4 + tq of
                    // the block), B fragments (tokens g of each 8-token block; the same words) and its
                    // rows' scales.
                    u32 af[2][4], bf[NJ][2];
                    f2 sm[2][NH];
                    MF_UNROLL
                    for (u32 a = 0; a < 2; a++) {
                        ldsm(af[a], wa + 16 * a * LD + 8 * b);
                        const float* we = wsa + b * WB + 8 * a * WE; // w_at(b, 0, r), rows r and r + 8
                        if constexpr (WE == 4) {
                            const f4 e = *reinterpret_cast<const f4*>(we);
                            sm[a][0] = f2{e.x, e.z}, sm[a][1] = f2{e.y, e.w};
                        } else {
                            sm[a][0] = *reinterpret_cast<const f2*>(we);
                        }
                    }
                    if constexpr (NJ == 1) {
                        ldsm(bf[0], xa + 8 * b);
                    } else {
                        MF_UNROLL
                        for (u32 j = 0; j < NJ; j += 2) {
                            u32 v[4];
                            ldsm(v, xa + 8 * j * LD + 8 * b);
                            bf[j][0] = v[0], bf[j][1] = v[1], bf[j + 1][0] = v[2], bf[j + 1][1] = v[3];
                        }
                    }
                    MF_UNROLL
                    for (u32 j = 0; j < NJ; j++) {
                        const f2 d = *reinterpret_cast<const f2*>(xsa + b * XB + 8 * j); // tokens t + 2tq, + 1
                        MF_UNROLL
                        for (u32 a = 0; a < 2; a++) {
                            int c[NH][4];
                            if constexpr (HALVES) {
                                mma_s8_from(c[0], af[a][0], af[a][1], bf[j][0], I2F_BIAS);
                                mma_s8_from(c[NH - 1], af[a][2], af[a][3], bf[j][1], I2F_BIAS);
                            } else {
                                mma_s8_k32_from(c[0], af[a], bf[j][0], bf[j][1], I2F_BIAS);
                            }
                            MF_UNROLL
                            for (u32 i = 0; i < 4; i++) {
                                const float dt = i % 2 ? d.y : d.x;
                                const float s0 = i / 2 ? sm[a][0].y : sm[a][0].x;
                                float& o = acc[a][j][i];
                                if constexpr (HALVES) {
                                    // d · (s0·c0 + s1·c1): the token's scale once for both halves.
                                    const float s1 = i / 2 ? sm[a][NH - 1].y : sm[a][NH - 1].x;
                                    const float h0 = mul_rn(s0, i2f_biased(c[0][i]));
                                    o = fmaf(dt, fmaf(s1, i2f_biased(c[NH - 1][i]), h0), o);
                                } else {
                                    o = fmaf(mul_rn(s0, dt), i2f_biased(c[0][i]), o);
                                }
                            }
                        }
                    }
                }
            }
            if constexpr (MIN) {
                // The offsets: rows g, g + 8 of each 16-row tile × columns tq (and tq + 4) ×
                // tokens g of each 8-token block.
                u32 oh[2][KO / 2], ol[2][KO / 2];
                MF_UNROLL
                for (u32 a = 0; a < 2; a++) {
                    MF_UNROLL
                    for (u32 c = 0; c < KO / 4; c++) {
                        const f2 e0 = woa[4 * c * WO + 16 * a], e1 = woa[4 * c * WO + 16 * a + 8];
                        oh[a][2 * c] = __float_as_uint(e0.x), ol[a][2 * c] = __float_as_uint(e0.y);
                        oh[a][2 * c + 1] = __float_as_uint(e1.x), ol[a][2 * c + 1] = __float_as_uint(e1.y);
                    }
                }
                MF_UNROLL
                for (u32 j = 0; j < NJ; j++) {
                    u32 ph[KO / 4], pl[KO / 4];
                    MF_UNROLL
                    for (u32 c = 0; c < KO / 4; c++) {
                        const f2 e = xoa[4 * c * XO + 8 * j];
                        ph[c] = __float_as_uint(e.x), pl[c] = __float_as_uint(e.y);
                    }
                    MF_UNROLL
                    for (u32 a = 0; a < 2; a++) {
                        mma_tf32x3<KO>(acc[a][j], oh[a], ol[a], ph, pl);
                    }
                }
            }
            __syncthreads();
        }
        if (nrun > 1) {
            float* __restrict__ part = binding<float>(p, 5);
            u32* __restrict__ count = binding<u32>(p, 6);
            mma_outputs(acc, row_of, token_of, rows, n, [&](float& o, u32 r, u32 t) { part[((unsigned long long)run * n + t) * rows + r] = o; });
            // Every block's partials are out before its count says so; the last reads them after.
            __threadfence();
            __syncthreads();
            if (tid == 0) {
                last = atomicAdd(count + tile, 1u) == nrun - 1;
            }
            __syncthreads();
            if (!last) {
                return;
            }
            __threadfence();
            mma_outputs(acc, row_of, token_of, rows, n, [&](float& o, u32 r, u32 t) {
                float sum = 0.0f;
                for (u32 z = 0; z < nrun; z++) {
                    sum += __ldcg(part + ((unsigned long long)z * n + t) * rows + r);
                }
                o = sum;
            });
            if (tid == 0) {
                count[tile] = 0;
            }
        }
        mma_outputs(acc, row_of, token_of, rows, n, [&](float& o, u32 r, u32 t) { store_y(p, y + t * m + row0 + r, o, row0 + r); });
    };

    // The block's runs, one call of tile_run (inlined once) each. Without stream-k: the whole
    // of tile (x, y). With it: a block for each of the first tiles, then sk_workers blocks that
    // share the last sk_tiles tiles' I = sk_tiles · steps steps: block w takes steps
    // [w·I/G, (w + 1)·I/G) of them, tile by tile, as runs of the tiles it crosses; a tile's runs
    // belong to the blocks whose shares hold its first and last step and every block between.
    // (The host keeps I · G within 32 bits.)
    const u32 dp = prm.sk_workers ? tiles_x * ((n + TN - 1) / TN) - prm.sk_tiles : 0;
    const bool sk = prm.sk_workers != 0 && blockIdx.x >= dp;
    const u32 I = prm.sk_tiles * steps, G = prm.sk_workers, wk = blockIdx.x - dp;
    auto owner = [&](u32 j) { return ((j + 1) * G + I - 1) / I - 1; }; // the block holding step j
    u32 i = sk ? wk * I / G : 0;
    const u32 e = sk ? (wk + 1) * I / G : 1;
    while (i < e) {
        u32 tile, kb, ke, run, nrun, took = 1;
        if (sk) {
            const u32 t = i / steps, s0 = i % steps, s1 = min(steps, s0 + (e - i));
            const u32 w0 = owner(t * steps);
            tile = dp + t, kb = s0 * TK, ke = min(k, s1 * TK);
            run = wk - w0, nrun = owner(t * steps + steps - 1) - w0 + 1, took = s1 - s0;
        } else {
            tile = blockIdx.y * tiles_x + blockIdx.x, kb = 0, ke = k, run = 0, nrun = 1;
        }
        tile_run(tile, kb, ke, run, nrun);
        i += took;
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
    extern "C" __global__ void __launch_bounds__(256, 2) matmul_mma16_##name(const Params p) { \
        matmul_mma_entry<qt_##name, 16>(p);                                                               \
    }                                                                                                     \
    extern "C" __global__ void __launch_bounds__(256, 2) matmul_mma32_##name(const Params p) { \
        matmul_mma_entry<qt_##name, 32>(p);                                                               \
    }                                                                                                     \
    extern "C" __global__ void __launch_bounds__(256, 2) matmul_mma64_##name(const Params p) { \
        matmul_mma_entry<qt_##name, 64>(p);                                                               \
    }
MF_MATRIX_QTYPES(MF_MATMUL_MMA)
