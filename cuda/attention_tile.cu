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
// A row with no position in the range writes max −3e38 and sum 0 (attention_reduce skips it).
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
    auto row_lo = [&](u32 t) -> u32 {
        const u32 pos = step[4 + 2 * t];
        return window > 0 && pos + 1 > window ? pos + 1 - window : 0;
    };

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
        const u32 cells = step[5 + 2 * (tb + i0)];
        u32 i1 = i0 + 1;
        u32 jlo = row_lo(tb + i0);
        u32 jhi = step[4 + 2 * (tb + i0)] + 1;
        while (i1 < nt && step[5 + 2 * (tb + i1)] == cells) {
            jlo = umin32(jlo, row_lo(tb + i1));
            jhi = umax32(jhi, step[4 + 2 * (tb + i1)] + 1);
            i1++;
        }
        const u32* __restrict__ rows = step + cells;
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
                        if (jj < cnt && j >= row_lo(t) && j <= step[4 + 2 * t]) {
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
                    if (r < nr) {
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
