// attention_split (prefills, and decode steps with a long context; kv_store ran first,
// attention_reduce follows): flash-decoding, as shaders/attention_split.wgsl. Token t's positions [lo, pos] are cut
// into at most n_split ranges of whole 64-position tiles (split_chunk); block (x, s, t) takes
// range s for the hg query heads x·hg .. x·hg + hg − 1, which all read one KV head, so each K and
// V row of the range is loaded once for all of them. One pass with an online softmax per head in
// f32; the range's unnormalised output, maximum and sum go to binding 5 in the slot of the
// token's place u = t − t0 among the launch's tokens (blocks z), the head and the range:
//   part[slot · (head_dim_v + 2) + d], then max, sum; slot = (u · n_head + h) · n_split + s.
// A range past the end of the context writes max −3e38 and sum 0, which attention_reduce skips.
// q is read (rotated where a rope is folded
// in) and rounded for the cache type as attention.cu does; probabilities are not rounded.
//
// Params: AttentionParams (kv.cuh), with n_split and hg. Bindings: 1 step, 2 q, 3 kc, 4 vc,
// 5 part, 6 qcs (the folded rope's table). Grid: (n_head / hg, n_split, tokens). Block: 64.

template <class KV>
static __device__ __forceinline__ void attention_split_body(const Params& p) {
    constexpr u32 WG = 64;
    constexpr u32 MAX_HG_D = 1024; // hg · head_dim and hg · head_dim_v; the schedule keeps within it
    constexpr u32 MAX_A = MAX_HG_D / WG;
    constexpr u32 MAX_HG = 16;
    __shared__ f4 qs4[MAX_HG_D / 4]; // the heads' queries, rounded (f4s for k_dot's 16-byte reads)
    __shared__ float ps[MAX_HG_D];   // hg × 64: the tile's scores, then its probabilities
    __shared__ float mh[MAX_HG], fh[MAX_HG], lh[MAX_HG];
    float* qs = reinterpret_cast<float*>(qs4);
    const u32* __restrict__ step = binding<const u32>(p, 1);
    const float* __restrict__ q = binding<const float>(p, 2);
    const u32* __restrict__ kc = binding<const u32>(p, 3);
    const u32* __restrict__ vc = binding<const u32>(p, 4);
    float* __restrict__ part = binding<float>(p, 5);
    const f2* __restrict__ qcs = binding<const f2>(p, 6);
    const AttentionParams& prm = params<AttentionParams>(p);
    const u32 n_head = prm.n_head, n_head_kv = prm.n_head_kv, hd = prm.head_dim, hdv = prm.head_dim_v;
    const u32 n_split = prm.n_split, hg = prm.hg;
    const u32 t = blockIdx.z + prm.t0;
    const u32 s = blockIdx.y;
    const u32 tid = threadIdx.x;
    const u32 h0 = blockIdx.x * hg;
    const u32 g = h0 / (n_head / n_head_kv);
    const u32 pos = step[4 + 2 * t];
    const u32* __restrict__ cells = step + step[5 + 2 * t];
    u32 lo = 0;
    if (prm.window > 0 && pos + 1 > prm.window) {
        lo = pos + 1 - prm.window;
    }
    const u32 pb = (blockIdx.z * n_head + h0) * n_split + s; // head h0 + hh's slot: pb + hh · n_split
    const u32 chunk = split_chunk(pos + 1 - lo, n_split);
    const u32 j0 = lo + s * chunk;
    if (j0 > pos) {
        if (tid < hg) {
            const u32 mi = (pb + tid * n_split) * (hdv + 2) + hdv;
            part[mi] = -3.0e38f;
            part[mi + 1] = 0.0f;
        }
        return;
    }
    const u32 j1 = umin32(j0 + chunk, pos + 1);
    const u32 n_rot = prm.n_rot, neox = prm.neox;
    for (u32 i = tid; i < hg * hd; i += WG) {
        qs[i] = q_rotated(q, qcs, (t * n_head + h0 + i / hd) * hd, i % hd, t, n_rot, neox);
    }
    round_q<KV, WG, MAX_A>(qs, hg * hd, tid);
    if (tid < hg) {
        mh[tid] = -3.0e38f;
        lh[tid] = 0.0f;
    }
    __syncthreads();

    const u32 kw = n_head_kv * hd, vw = n_head_kv * hdv;
    const float scale = prm.scale, softcap = prm.softcap;
    float acc[MAX_A];
    MF_UNROLL
    for (u32 a = 0; a < MAX_A; a++) {
        acc[a] = 0.0f;
    }
    for (u32 base = j0; base < j1; base += WG) {
        const u32 j = base + tid;
        if (j < j1) {
            const u32 kb = (cells[j] * kw + g * hd) / 2;
            for (u32 hh = 0; hh < hg; hh++) {
                float sc = KV::k_dot(kc, kb, qs + hh * hd, hd) * scale;
                if (softcap > 0.0f) {
                    sc = tanhf(fminf(fmaxf(sc / softcap, -15.0f), 15.0f)) * softcap;
                }
                ps[hh * WG + tid] = sc;
            }
        } else {
            for (u32 hh = 0; hh < hg; hh++) {
                ps[hh * WG + tid] = -3.0e38f;
            }
        }
        __syncthreads();
        const u32 cnt = umin32(WG, j1 - base);
        if (tid < hg) {
            float m = mh[tid];
            for (u32 jj = 0; jj < cnt; jj++) {
                m = fmaxf(m, ps[tid * WG + jj]);
            }
            fh[tid] = expf(mh[tid] - m);
            mh[tid] = m;
        }
        __syncthreads();
        for (u32 i = tid; i < hg * WG; i += WG) {
            ps[i] = expf(ps[i] - mh[i / WG]);
        }
        __syncthreads();
        if (tid < hg) {
            float l = lh[tid] * fh[tid];
            for (u32 jj = 0; jj < cnt; jj++) {
                l += ps[tid * WG + jj];
            }
            lh[tid] = l;
        }
        MF_UNROLL
        for (u32 a = 0; a < MAX_A; a++) {
            const u32 i = tid + a * WG;
            if (i < hg * hdv) {
                const u32 hh = i / hdv;
                const u32 vd = g * hdv + i % hdv;
                float sa = acc[a] * fh[hh];
                for (u32 jj = 0; jj < cnt; jj++) {
                    sa += ps[hh * WG + jj] * KV::v_at(vc, cells[base + jj] * vw + vd);
                }
                acc[a] = sa;
            }
        }
        __syncthreads();
    }

    MF_UNROLL
    for (u32 a = 0; a < MAX_A; a++) {
        const u32 i = tid + a * WG;
        if (i < hg * hdv) {
            part[(pb + (i / hdv) * n_split) * (hdv + 2) + i % hdv] = acc[a];
        }
    }
    if (tid < hg) {
        const u32 mi = (pb + tid * n_split) * (hdv + 2) + hdv;
        part[mi] = mh[tid];
        part[mi + 1] = lh[tid];
    }
}

#define MF_ATTENTION_SPLIT(name)                                                                   \
    extern "C" __global__ void __launch_bounds__(64) attention_split_kv_##name(const Params p) { \
        attention_split_body<kv_##name>(p);                                                        \
    }
MF_KV_TYPES(MF_ATTENTION_SPLIT)
