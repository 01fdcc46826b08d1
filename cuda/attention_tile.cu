// attention_tile (prefill steps with a long context; kv_store ran first, attention_reduce
// follows): flash attention over a tile of query tokens, as shaders/attention_tile.wgsl. Block
// (x, s, z) takes the tq tokens u = z·tq .. of the launch (token t = t0 + u) and the hg query
// heads x·hg .. of one KV head: rows r = i·hg + hh, at most 64. Its tokens run in runs of one
// sequence (the same cell row); for each run it cuts the run's positions [min lo, max pos] into
// n_split ranges (split_chunk) and takes range s, kt positions at a time: the K rows go to shared
// memory once for all of the run's rows, every (row, position) pair is scored (masked outside
// the row's own [lo, pos]), each row's online softmax is updated, then the V rows replace the K
// rows and every (row, dimension) pair accumulates p·V; both products take RB rows per thread,
// so each element read from shared memory serves RB multiply-adds. Each row's unnormalised
// output, maximum and sum go to binding 5 in the slot of its (token, head, range), as attention_split writes:
//   part[slot · (head_dim_v + 2) + d], then max, sum; slot = (u · n_head + h) · n_split + s.
// A row with no position in the range writes max −3e38 and sum 0 alone (attention_reduce skips
// the slot and never reads its output), so ranges past a row's last position cost no traffic.
// q is read (rotated where a rope is folded in) and rounded for the cache type as attention.cu
// does; probabilities are not rounded.
//
// Params: AttentionTileParams (kv.cuh). Bindings: 1 step, 2 q, 3 kc, 4 vc, 5 part, 6 qcs (the
// folded rope's table). Grid: (n_head / hg, n_split, tiles). Block: 64. Shared memory is fixed
// (16,128 bytes): the host picks tq, hg and kt within it (schedule::tile_shape).

template <class KV>
static __device__ __forceinline__ void attention_tile_body(const Params& p) {
    constexpr u32 WG = 64;
    constexpr u32 MAX_QD = 2048; // rows × max(head_dim, head_dim_v)
    constexpr u32 MAX_KD = 1024; // kt × (max(head_dim, head_dim_v) + 1)
    constexpr u32 MAX_PS = 768;  // rows × kt
    constexpr u32 MAX_R = 64;    // rows
    constexpr u32 MAX_A = MAX_QD / WG;
    constexpr u32 RB = 4; // rows per thread in the products; blocks of RB rows fit MAX_QD too
    constexpr float MASKED = -3.0e38f;
    __shared__ float qs[MAX_QD]; // row r's query at r · head_dim
    // The K tile (position jj at jj · (head_dim + 1): rows on different banks), then the V tile
    // (at jj · head_dim_v).
    __shared__ float kvs[MAX_KD];
    __shared__ float ps[MAX_PS]; // rows × kt: the scores, then the probabilities
    __shared__ float mr[MAX_R], fr[MAX_R], lr[MAX_R];
    const u32* __restrict__ step = binding<const u32>(p, 1);
    const float* __restrict__ q = binding<const float>(p, 2);
    const u32* __restrict__ kc = binding<const u32>(p, 3);
    const u32* __restrict__ vc = binding<const u32>(p, 4);
    float* __restrict__ part = binding<float>(p, 5);
    const f2* __restrict__ qcs = binding<const f2>(p, 6);
    const AttentionTileParams& prm = params<AttentionTileParams>(p);
    const u32 n_head = prm.n_head, hd = prm.head_dim, hdv = prm.head_dim_v;
    const u32 n_split = prm.n_split, hg = prm.hg, kt = prm.kt, ks = hd + 1;
    const u32 tid = threadIdx.x;
    const u32 s = blockIdx.y;
    const u32 h0 = blockIdx.x * hg;
    const u32 g = h0 / (n_head / prm.n_head_kv);
    const u32 u0 = blockIdx.z * prm.tq;
    const u32 tb = prm.t0 + u0;
    const u32 nt = umin32(prm.tq, prm.n - tb);
    const u32 window = prm.window;
    // The first position token t reads.

    // The tile's queries, rounded per head as attention.cu rounds one.
    const u32 nq = nt * hg * hd;
    for (u32 i = tid; i < nq; i += WG) {
        const u32 r = i / hd;
        const u32 t = tb + r / hg;
        qs[i] = q_rotated(q, qcs, (t * n_head + h0 + r % hg) * hd, i % hd, t, prm.n_rot, prm.neox);
    }
    round_q<KV, WG, MAX_A>(qs, nq, tid);

    const u32 kw = prm.n_head_kv * hd, vw = prm.n_head_kv * hdv;
    const float scale = prm.scale, softcap = prm.softcap;
    for (u32 i0 = 0; i0 < nt;) {
        // The run: tokens i0 .. i1 of one sequence, and the positions any of them reads.
        const TokenRun run = token_run(step, tb, i0, nt, window);
        const u32 i1 = run.i1, jlo = run.lo, jhi = run.hi;
        const u32* __restrict__ rows = step + run.cells;
        const u32 r0 = i0 * hg, nr = (i1 - i0) * hg;
        const u32 nb = (nr + RB - 1) / RB; // blocks of RB rows
        const u32 chunk = split_chunk(jhi - jlo, n_split);
        const u32 j0 = jlo + s * chunk;
        const u32 j1 = umin32(j0 + chunk, jhi);
        if (tid < nr) {
            mr[tid] = MASKED;
            lr[tid] = 0.0f;
        }
        float acc[MAX_A];
        MF_UNROLL
        for (u32 a = 0; a < MAX_A; a++) {
            acc[a] = 0.0f;
        }
        __syncthreads();

        for (u32 base = j0; base < j1; base += kt) {
            const u32 cnt = umin32(kt, j1 - base);
            for (u32 e = tid; e < cnt * hd; e += WG) {
                const u32 jj = e / hd;
                // K elements are stored as V's are: v_at reads either cache.
                kvs[jj * ks + e % hd] = KV::v_at(kc, rows[base + jj] * kw + g * hd + e % hd);
            }
            __syncthreads();
            // Each thread scores RB rows against one position: every key element it reads
            // serves RB rows. (A row past nr reads row nr − 1 and is not written.)
            for (u32 e = tid; e < nb * kt; e += WG) {
                const u32 rb = e / kt * RB, jj = e % kt;
                const float* kv = kvs + jj * ks;
                const float* qv[RB];
                float sc[RB];
                MF_UNROLL
                for (u32 x = 0; x < RB; x++) {
                    qv[x] = qs + (r0 + umin32(rb + x, nr - 1)) * hd;
                    sc[x] = 0.0f;
                }
                for (u32 d = 0; d < hd; d += 2) {
                    const float k0 = kv[d], k1 = kv[d + 1];
                    MF_UNROLL
                    for (u32 x = 0; x < RB; x++) {
                        sc[x] += qv[x][d] * k0 + qv[x][d + 1] * k1;
                    }
                }
                const u32 j = base + jj;
                MF_UNROLL
                for (u32 x = 0; x < RB; x++) {
                    const u32 r = rb + x;
                    if (r < nr) {
                        const u32 t = tb + i0 + r / hg;
                        float v = MASKED;
                        if (jj < cnt && j >= first_pos(step, t, window) && j <= step[4 + 2 * t]) {
                            v = sc[x] * scale;
                            if (softcap > 0.0f) {
                                v = tanhf(fminf(fmaxf(v / softcap, -15.0f), 15.0f)) * softcap;
                            }
                        }
                        ps[r * kt + jj] = v;
                    }
                }
            }
            __syncthreads();
            if (tid < nr) {
                const float m0 = mr[tid];
                float m = m0;
                for (u32 jj = 0; jj < cnt; jj++) {
                    m = fmaxf(m, ps[tid * kt + jj]);
                }
                float l = 0.0f;
                for (u32 jj = 0; jj < cnt; jj++) {
                    const float sc = ps[tid * kt + jj];
                    const float pr = sc > MASKED ? expf(sc - m) : 0.0f;
                    ps[tid * kt + jj] = pr;
                    l += pr;
                }
                const float f = expf(m0 - m);
                fr[tid] = f;
                mr[tid] = m;
                lr[tid] = lr[tid] * f + l;
            }
            for (u32 e = tid; e < cnt * hdv; e += WG) {
                kvs[e] = KV::v_at(vc, rows[base + e / hdv] * vw + g * hdv + e % hdv);
            }
            __syncthreads();
            // Each thread accumulates RB rows of a dimension: every value it reads serves RB
            // rows.
            MF_UNROLL
            for (u32 a = 0; a < MAX_A / RB; a++) {
                const u32 i = tid + a * WG;
                if (i < nb * hdv) {
                    const u32 rb = i / hdv * RB, d = i % hdv;
                    MF_UNROLL
                    for (u32 x = 0; x < RB; x++) {
                        acc[a * RB + x] *= fr[umin32(rb + x, nr - 1)];
                    }
                    for (u32 jj = 0; jj < cnt; jj++) {
                        const float v = kvs[jj * hdv + d];
                        MF_UNROLL
                        for (u32 x = 0; x < RB; x++) {
                            acc[a * RB + x] += ps[umin32(rb + x, nr - 1) * kt + jj] * v;
                        }
                    }
                }
            }
            __syncthreads();
        }

        // Row r is token u0 + i0 + r / hg's head h0 + r % hg.
        MF_UNROLL
        for (u32 a = 0; a < MAX_A / RB; a++) {
            const u32 i = tid + a * WG;
            if (i < nb * hdv) {
                MF_UNROLL
                for (u32 x = 0; x < RB; x++) {
                    const u32 r = i / hdv * RB + x;
                    if (r < nr && lr[r] > 0.0f) {
                        const u32 slot = ((u0 + i0 + r / hg) * n_head + h0 + r % hg) * n_split + s;
                        part[slot * (hdv + 2) + i % hdv] = acc[a * RB + x];
                    }
                }
            }
        }
        if (tid < nr) {
            const u32 slot = ((u0 + i0 + tid / hg) * n_head + h0 + tid % hg) * n_split + s;
            part[slot * (hdv + 2) + hdv] = mr[tid];
            part[slot * (hdv + 2) + hdv + 1] = lr[tid];
        }
        __syncthreads();
        i0 = i1;
    }
}

#define MF_ATTENTION_TILE(name)                                                                   \
    extern "C" __global__ void __launch_bounds__(64) attention_tile_kv_##name(const Params p) { \
        attention_tile_body<kv_##name>(p);                                                        \
    }
MF_KV_TYPES(MF_ATTENTION_TILE)

// attention_tile_mma<HD>: attention_tile's work on the tensor cores (ggml-cuda's
// fattn-mma-f16), for an f16 or q8_0 cache with head_dim = head_dim_v = HD (a multiple of 16 up
// to 256: `MMA_HEAD_DIMS`; the host takes it there from sm_80 on, `Variant::mma_launch`, else
// attention_tile). The same grid and output protocol, with its own tile: R rows (tq · hg, the
// host rewrites tq) in 4 warps, 16 rows a warp, KT positions a step. Up to HD 128, R = 64 and
// KT = 32. Above it (DS = 2) the output dimensions of a warp's 16 rows would take more
// registers than a quarter of an SM can give each thread, so two warps share the rows (R = 32):
// each scores them in full and keeps half the dimensions of the output; with KT = 16 the tile
// stays in 48 KB of shared memory. The queries are rounded to f16 as the f32 kernel rounds them
// for this cache, so each score is the same sum of exact products (mma.sync m16n8k16 f16 → f32,
// mma_f16 in quant.cuh) in another order; the probabilities go to f16 for the product with V
// (the sum l adds the rounded ones, so the output stays a weighted mean), the one rounding the
// f32 kernel does not make.
// Per step the block stores the K tile as rows of half pairs and the V tile transposed (a row per
// dimension), both padded so a warp's fragment reads (8 rows × 4 words) fall in 32 banks. A warp
// scores its 16 rows against the KT positions (the Q fragments read from the staged queries each
// step: registers are for the 16 × HD output), updates each
// row's online softmax in registers (a row's values lie in the 4 lanes of a quad), turns the
// probabilities into the A fragments of P · V (the accumulator layout of two 8-position blocks is
// that of one 16-position A fragment) and adds P · V into its 16 × HD / DS output.
// A q8_0 cache (Q8; HD a multiple of 32) keeps the CPU's integer products: the queries are
// quantized to q8_0 as the f32 kernel rounds them and staged as bytes with a scale per 32, the K
// tile as the cache's bytes and scales, and each 32-dimension block's score is the exact integer
// sum of two mma.sync m16n8k16 s8, times the two scales, added in f32 (ggml's q8_0 · q8_0). The
// V tile is dequantized to f16 for P · V, one more rounding beside the probabilities'.
template <u32 HD, bool Q8>
static __device__ __forceinline__ void attention_tile_mma_body(const Params& p) {
    static_assert(HD % 16 == 0 && HD <= 256, "head sizes are multiples of 16 up to 256");
    static_assert(!Q8 || HD % 32 == 0, "a q8_0 cache's heads are whole blocks");
    constexpr u32 DS = HD > 128 ? 2 : 1; // warps sharing a warp's rows, each a part of the output
    constexpr u32 R = 64 / DS, KT = 32 / DS;
    constexpr u32 EPW = Q8 ? 4 : 2;       // elements per word of the staged queries and keys
    constexpr u32 QLD = HD / EPW + 4;     // words per row of the staged queries
    constexpr u32 KLD = HD / EPW + 4;     // words per K row
    constexpr u32 VLD = KT / 2 + 4;       // words per row of the transposed V (a dimension)
    constexpr u32 NK = HD / 16;           // 16-dimension chunks of a score
    constexpr u32 NQB = Q8 ? HD / 32 : 1; // q8_0 blocks of a head
    constexpr u32 NB = KT / 8;            // 8-position blocks of a step
    constexpr u32 ND = HD / DS / 8;       // 8-dimension blocks of a warp's part of the output
    constexpr float MASKED = -3.0e38f;
    __shared__ u32 qw[R * QLD];
    __shared__ u32 kw_s[KT * KLD];
    __shared__ u32 vt[HD * VLD];
    __shared__ float qd[Q8 ? R * NQB : 1]; // q8_0: the scale of each row's blocks
    __shared__ float kd[Q8 ? KT * NQB : 1]; // q8_0: the scale of each position's key blocks
    const u32* __restrict__ step = binding<const u32>(p, 1);
    const float* __restrict__ q = binding<const float>(p, 2);
    const u32* __restrict__ kc = binding<const u32>(p, 3);
    const u32* __restrict__ vc = binding<const u32>(p, 4);
    float* __restrict__ part = binding<float>(p, 5);
    const f2* __restrict__ qcs = binding<const f2>(p, 6);
    const AttentionTileParams& prm = params<AttentionTileParams>(p);
    const u32 n_head = prm.n_head, n_split = prm.n_split, hg = prm.hg;
    const u32 tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const u32 g = lane / 4, t4 = lane % 4;
    const u32 s = blockIdx.y;
    const u32 h0 = blockIdx.x * hg;
    const u32 kvh = h0 / (n_head / prm.n_head_kv);
    const u32 u0 = blockIdx.z * prm.tq;
    const u32 tb = prm.t0 + u0;
    if (tb >= prm.n) {
        return;
    }
    const u32 nt = umin32(prm.tq, prm.n - tb);
    const u32 window = prm.window;
    const u32 kwid = prm.n_head_kv * HD; // elements per cache row (K and V alike here)
    const float scale = prm.scale, softcap = prm.softcap;
    u16* qh = reinterpret_cast<u16*>(qw);
    u16* vth = reinterpret_cast<u16*>(vt);
    const u8* kb = reinterpret_cast<const u8*>(kc);
    const u8* vb = reinterpret_cast<const u8*>(vc);
    // This lane's rows in the tile: ra and ra + 8; its warp's part of the output: dimensions
    // db .. db + 8 · ND.
    const u32 ra = 16 * (warp / DS) + g, db = (warp % DS) * 8 * ND;

    for (u32 i0 = 0; i0 < nt;) {
        // The run: tokens i0 .. i1 of one sequence, and the positions any of them reads.
        const TokenRun run = token_run(step, tb, i0, nt, window);
        const u32 i1 = run.i1, jlo = run.lo, jhi = run.hi;
        const u32* __restrict__ rows = step + run.cells;
        const u32 nr = (i1 - i0) * hg;
        const u32 chunk = split_chunk(jhi - jlo, n_split);
        const u32 j0 = jlo + s * chunk;
        const u32 j1 = umin32(j0 + chunk, jhi);
        // The run's queries as f16, or as q8_0 bytes and scales (a thread a block); rows past nr
        // zero.
        if constexpr (Q8) {
            for (u32 e = tid; e < R * NQB; e += 128) {
                const u32 r = e / NQB, b = e % NQB;
                const u32 t = tb + i0 + r / hg;
                // Element i of the block (read twice: for |max|, then rounded).
                const u32 head = (t * n_head + h0 + r % hg) * HD;
                const auto qv = [&](u32 i) {
                    return r < nr ? q_rotated(q, qcs, head, 32 * b + i, t, prm.n_rot, prm.neox) : 0.0f;
                };
                float amax = 0.0f;
                for (u32 i = 0; i < 32; i++) {
                    amax = fmaxf(amax, fabsf(qv(i)));
                }
                // kv_q8_0::kv_round_q, keeping the bytes and the scale apart.
                const float d = amax / 127.0f;
                const float id = d != 0.0f ? 1.0f / d : 0.0f;
                for (u32 w = 0; w < 8; w++) {
                    u32 word = 0;
                    MF_UNROLL
                    for (u32 i = 0; i < 4; i++) {
                        word |= ((u32)(int)round_away(qv(4 * w + i) * id) & 0xffu) << (8 * i);
                    }
                    qw[r * QLD + 8 * b + w] = word;
                }
                qd[r * NQB + b] = f16_to_f32(f16_bits(d));
            }
        } else {
            for (u32 e = tid; e < R * HD; e += 128) {
                const u32 r = e / HD, d = e % HD;
                float v = 0.0f;
                if (r < nr) {
                    const u32 t = tb + i0 + r / hg;
                    v = q_rotated(q, qcs, (t * n_head + h0 + r % hg) * HD, d, t, prm.n_rot, prm.neox);
                }
                qh[r * 2 * QLD + d] = (u16)f16_bits(v);
            }
        }
        __syncthreads();
        // Each of the lane's two rows: its token's first and last position (none past nr).
        u32 lo[2], hi[2];
        MF_UNROLL
        for (u32 x = 0; x < 2; x++) {
            const u32 r = ra + 8 * x;
            const u32 t = tb + i0 + r / hg;
            lo[x] = r < nr ? first_pos(step, t, window) : 1;
            hi[x] = r < nr ? step[4 + 2 * t] : 0;
        }
        float m[2] = {MASKED, MASKED}, l[2] = {0.0f, 0.0f};
        float o[ND][4];
        MF_UNROLL
        for (u32 nb = 0; nb < ND; nb++) {
            MF_UNROLL
            for (u32 i = 0; i < 4; i++) {
                o[nb][i] = 0.0f;
            }
        }
        for (u32 base = j0; base < j1; base += KT) {
            const u32 cnt = umin32(KT, j1 - base);
            __syncthreads();
            if constexpr (Q8) {
                // Byte offsets of a position's blocks: whole 34-byte blocks from its head's first.
                const auto block_at = [&](u32 jj, u32 b) {
                    return ((rows[base + jj] * kwid + kvh * HD) / 32 + b) * 34;
                };
                for (u32 e = tid; e < KT * HD / 4; e += 128) {
                    const u32 jj = e / (HD / 4), wd = e % (HD / 4);
                    u32 kv = 0;
                    if (jj < cnt) {
                        const u32 at = block_at(jj, wd / 8) + 2 + 4 * (wd % 8);
                        kv = ld_u16(kb, at) | (ld_u16(kb, at + 2) << 16);
                    }
                    kw_s[jj * KLD + wd] = kv;
                }
                for (u32 e = tid; e < KT * NQB; e += 128) {
                    kd[e] = e / NQB < cnt ? f16_to_f32(ld_u16(kb, block_at(e / NQB, e % NQB))) : 0.0f;
                }
                for (u32 e = tid; e < KT * HD / 2; e += 128) {
                    const u32 jj = e / (HD / 2), wd = e % (HD / 2);
                    u32 v0 = 0, v1 = 0;
                    if (jj < cnt) {
                        const u32 at = block_at(jj, wd / 16);
                        const float d = f16_to_f32(ld_u16(vb, at));
                        const u32 pair = ld_u16(vb, at + 2 + 2 * (wd % 16));
                        v0 = f16_bits(i8f(pair) * d);
                        v1 = f16_bits(i8f(pair >> 8) * d);
                    }
                    vth[(2 * wd) * 2 * VLD + jj] = (u16)v0;
                    vth[(2 * wd + 1) * 2 * VLD + jj] = (u16)v1;
                }
            } else {
                for (u32 e = tid; e < KT * HD / 2; e += 128) {
                    const u32 jj = e / (HD / 2), wd = e % (HD / 2);
                    u32 kv = 0, vv = 0;
                    if (jj < cnt) {
                        const u32 at = (rows[base + jj] * kwid + kvh * HD) / 2 + wd;
                        kv = kc[at];
                        vv = vc[at];
                    }
                    kw_s[jj * KLD + wd] = kv;
                    vth[(2 * wd) * 2 * VLD + jj] = (u16)(vv & 0xffffu);
                    vth[(2 * wd + 1) * 2 * VLD + jj] = (u16)(vv >> 16);
                }
            }
            __syncthreads();
            // Scores: sc[j] is the 16 × 8 block of positions base + 8j ... (each Q fragment read
            // from shared memory once a step, for the step's NB blocks: registers go to o).
            float sc[NB][4];
            MF_UNROLL
            for (u32 j = 0; j < NB; j++) {
                MF_UNROLL
                for (u32 i = 0; i < 4; i++) {
                    sc[j][i] = 0.0f;
                }
            }
            if constexpr (Q8) {
                // Block b: words 8b .. 8b + 7 of a row, two 16-byte chunks. (Unrolled, the
                // blocks' loads would be hoisted past the registers a quarter SM gives.)
                MF_UNROLL_N(1)
                for (u32 b = 0; b < NQB; b++) {
                    const u32 a00 = qw[ra * QLD + 8 * b + t4], a01 = qw[(ra + 8) * QLD + 8 * b + t4];
                    const u32 a10 = qw[ra * QLD + 8 * b + 4 + t4], a11 = qw[(ra + 8) * QLD + 8 * b + 4 + t4];
                    const float d0 = qd[ra * NQB + b], d1 = qd[(ra + 8) * NQB + b];
                    MF_UNROLL
                    for (u32 j = 0; j < NB; j++) {
                        int acc[4] = {0, 0, 0, 0};
                        mma_s8(acc, a00, a01, kw_s[(8 * j + g) * KLD + 8 * b + t4]);
                        mma_s8(acc, a10, a11, kw_s[(8 * j + g) * KLD + 8 * b + 4 + t4]);
                        const float k0 = kd[(8 * j + 2 * t4) * NQB + b];
                        const float k1 = kd[(8 * j + 2 * t4 + 1) * NQB + b];
                        sc[j][0] += (float)acc[0] * (d0 * k0);
                        sc[j][1] += (float)acc[1] * (d0 * k1);
                        sc[j][2] += (float)acc[2] * (d1 * k0);
                        sc[j][3] += (float)acc[3] * (d1 * k1);
                    }
                }
            } else {
                MF_UNROLL
                for (u32 kk = 0; kk < NK; kk++) {
                    const u32 qa[4] = {qw[ra * QLD + 8 * kk + t4], qw[(ra + 8) * QLD + 8 * kk + t4],
                                       qw[ra * QLD + 8 * kk + 4 + t4], qw[(ra + 8) * QLD + 8 * kk + 4 + t4]};
                    MF_UNROLL
                    for (u32 j = 0; j < NB; j++) {
                        const u32 b0 = kw_s[(8 * j + g) * KLD + 8 * kk + t4];
                        const u32 b1 = kw_s[(8 * j + g) * KLD + 8 * kk + 4 + t4];
                        mma_f16(sc[j], qa, b0, b1);
                    }
                }
            }
            // Scale, cap and mask; each row's maximum over the step (its quad's lanes).
            float mx[2] = {MASKED, MASKED};
            MF_UNROLL
            for (u32 j = 0; j < NB; j++) {
                MF_UNROLL
                for (u32 i = 0; i < 4; i++) {
                    const u32 x = i / 2, jj = 8 * j + 2 * t4 + i % 2, pos = base + jj;
                    float v = MASKED;
                    if (jj < cnt && pos >= lo[x] && pos <= hi[x]) {
                        v = sc[j][i] * scale;
                        if (softcap > 0.0f) {
                            v = tanhf(fminf(fmaxf(v / softcap, -15.0f), 15.0f)) * softcap;
                        }
                    }
                    sc[j][i] = v;
                    mx[x] = fmaxf(mx[x], v);
                }
            }
            float f[2];
            MF_UNROLL
            for (u32 x = 0; x < 2; x++) {
                mx[x] = fmaxf(mx[x], __shfl_xor_sync(0xffffffffu, mx[x], 1));
                mx[x] = fmaxf(mx[x], __shfl_xor_sync(0xffffffffu, mx[x], 2));
                const float mn = fmaxf(m[x], mx[x]);
                f[x] = expf(m[x] - mn);
                m[x] = mn;
            }
            // Probabilities, rounded to f16, as P · V's A fragments; each row's sum of them.
            float ls[2] = {0.0f, 0.0f};
            u32 pa[KT / 16][4];
            MF_UNROLL
            for (u32 j = 0; j < NB; j++) {
                float pr[4];
                MF_UNROLL
                for (u32 i = 0; i < 4; i++) {
                    const u32 x = i / 2;
                    const u32 hbits = sc[j][i] > MASKED ? f16_bits(expf(sc[j][i] - m[x])) : 0u;
                    pr[i] = f16_to_f32(hbits);
                    ls[x] += pr[i];
                }
                // Block j is the low (even j) or high half of chunk j / 2's 16 positions.
                pa[j / 2][2 * (j % 2)] = f16_bits(pr[0]) | (f16_bits(pr[1]) << 16);
                pa[j / 2][2 * (j % 2) + 1] = f16_bits(pr[2]) | (f16_bits(pr[3]) << 16);
            }
            MF_UNROLL
            for (u32 x = 0; x < 2; x++) {
                ls[x] += __shfl_xor_sync(0xffffffffu, ls[x], 1);
                ls[x] += __shfl_xor_sync(0xffffffffu, ls[x], 2);
                l[x] = l[x] * f[x] + ls[x];
            }
            MF_UNROLL
            for (u32 nb = 0; nb < ND; nb++) {
                MF_UNROLL
                for (u32 i = 0; i < 4; i++) {
                    o[nb][i] *= f[i / 2];
                }
                MF_UNROLL
                for (u32 kc16 = 0; kc16 < KT / 16; kc16++) {
                    const u32 b0 = vt[(db + 8 * nb + g) * VLD + 8 * kc16 + t4];
                    const u32 b1 = vt[(db + 8 * nb + g) * VLD + 8 * kc16 + 4 + t4];
                    mma_f16(o[nb], pa[kc16], b0, b1);
                }
            }
        }

        // Row r is token u0 + i0 + r / hg's head h0 + r % hg.
        MF_UNROLL
        for (u32 x = 0; x < 2; x++) {
            const u32 r = ra + 8 * x;
            if (r < nr) {
                const u32 slot = ((u0 + i0 + r / hg) * n_head + h0 + r % hg) * n_split + s;
                float* out = part + (unsigned long long)slot * (HD + 2);
                if (l[x] > 0.0f) {
                    MF_UNROLL
                    for (u32 nb = 0; nb < ND; nb++) {
                        out[db + 8 * nb + 2 * t4] = o[nb][2 * x];
                        out[db + 8 * nb + 2 * t4 + 1] = o[nb][2 * x + 1];
                    }
                }
                // The warps sharing the rows hold the same maximum and sum.
                if (t4 == 0 && db == 0) {
                    out[HD] = m[x];
                    out[HD + 1] = l[x];
                }
            }
        }
        __syncthreads();
        i0 = i1;
    }
}

// The tensor-core entries for an f16 or q8_0 cache, one per head size (kernels.rs:
// Variant::mma_entry); where the device has no mma.sync, a trap (the host never launches them
// there). Four blocks an SM (128 registers a thread): a quarter of its threads.
#define MF_ATTENTION_TILE_MMA(HD, KV, Q8)                                                                   \
    extern "C" __global__ void __launch_bounds__(128, 4) attention_tile_mma##HD##_kv_##KV(const Params p) { \
        if constexpr (MF_MMA) {                                                                           \
            attention_tile_mma_body<HD, Q8>(p);                                                           \
        } else {                                                                                          \
            __trap();                                                                                     \
        }                                                                                                 \
    }
MF_ATTENTION_TILE_MMA(64, f16, false)
MF_ATTENTION_TILE_MMA(80, f16, false)
MF_ATTENTION_TILE_MMA(96, f16, false)
MF_ATTENTION_TILE_MMA(112, f16, false)
MF_ATTENTION_TILE_MMA(128, f16, false)
MF_ATTENTION_TILE_MMA(256, f16, false)
MF_ATTENTION_TILE_MMA(64, q8_0, true)
MF_ATTENTION_TILE_MMA(96, q8_0, true)
MF_ATTENTION_TILE_MMA(128, q8_0, true)
MF_ATTENTION_TILE_MMA(256, q8_0, true)
