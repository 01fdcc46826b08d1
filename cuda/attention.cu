// attention (second half of the op; kv_store ran first): one block per (q head, token t) attends
// over its sequence's positions [lo, pos], lo = pos + 1 − window for sliding-window layers;
// position j is cache row step[step[5 + 2t] + j]. GQA: q head h reads kv head
// h / (n_head / n_head_kv). Two numerics, as the CPU has them:
// - default (ggml's non-flash path: mul_mat KQ, soft_max_ext, mul_mat KQV): pass 1 finds the
//   softmax max and sum (online per thread, then reduced across the block); pass 2 recomputes each
//   score, forms p = e^(s − max) / sum once, rounds it like the CPU (kv_round) and accumulates p·V
//   through a 64-position tile of p in shared memory. No score scratch buffer, so any context
//   length fits.
// - flash (ggml-cpu's flash_attn_ext_f16_one_chunk): one pass in position order with an online
//   softmax; the V accumulator is rounded to the cache type after every update (fused
//   multiply-adds as the CPU's mul_add), and divided by the sum at the end.
// Each thread scores the positions j ≡ tid (mod 64) of a tile, and owns output dimensions
// tid + 64a (a < 8, so head_dim_v ≤ 512).
//
// Params: n_head, n_head_kv, head_dim (even, ≤ 512), head_dim_v (≤ 512), scale (f32), window
// (0 = none), softcap (f32, 0 = none), n (tokens), flash (0 / 1), sinks (0 / 1),
// t0 (the launch's first token), n_rot (0, or the rope folded in: q is read rotated, as rope.cu
// would have written it; common.cuh's rope_value), neox.
// Bindings: 1 step (Step::words: [n, 0, 0, 0], (pos, 4 + 2n + off) per token, the cell lists),
// 2 q [n][n_head · head_dim], 3 kc, 4 vc (cache words, one row per cell),
// 5 o [n][n_head · head_dim_v], 6 sk [n_head] (read only with sinks),
// 7 qcs [n][n_rot / 2] (the folded rope's table; read only with n_rot > 0), 8 qy (with act =
// 1 + quantize_act's ACT, the output feeding a quantized matmul with blocks within a head: the
// block then rounds its head's output there as quantize_act would, the rounded values [n][k]
// then the q8_1 corrections; never written otherwise). Grid: (n_head, tokens of this launch). Block: 64.

template <class KV>
static __device__ __forceinline__ void attention_body(const Params& p) {
    constexpr u32 WG = 64;
    constexpr u32 MAX_HD = 512; // head_dim limit (q lives in shared memory); checked by the host
    __shared__ f4 qs4[MAX_HD / 4]; // the query, rounded (f4s for 16-byte reads in k_dot)
    __shared__ float qraw[KV::QBLOCK > 1 ? MAX_HD : 1];
    __shared__ float ps[WG];
    __shared__ float red[WG / 32];
    float* qs = reinterpret_cast<float*>(qs4);
    const u32* __restrict__ step = binding<const u32>(p, 1);
    const float* __restrict__ q = binding<const float>(p, 2);
    const u32* __restrict__ kc = binding<const u32>(p, 3);
    const u32* __restrict__ vc = binding<const u32>(p, 4);
    float* __restrict__ o = binding<float>(p, 5);
    const float* __restrict__ sk = binding<const float>(p, 6);
    const f2* __restrict__ qcs = binding<const f2>(p, 7);
    const AttentionParams& prm = params<AttentionParams>(p);
    const u32 n_head = prm.n_head, n_head_kv = prm.n_head_kv, hd = prm.head_dim, hdv = prm.head_dim_v;
    const float scale = prm.scale;
    const u32 window = prm.window;
    const float softcap = prm.softcap;
    const bool flash = prm.flash != 0;
    const bool sinks = prm.sinks != 0;
    const u32 h = blockIdx.x;
    const u32 t = blockIdx.y + prm.t0;
    const u32 tid = threadIdx.x;
    const u32 g = h / (n_head / n_head_kv);
    // The last position attended: the token's own, or in an encoder's step (step[1], the table
    // of Step::words(bidir)) its whole sequence's last.
    const u32 pos = step[1] != 0 ? step[step[1] + t] : step[4 + 2 * t];
    const u32* __restrict__ cells = step + step[5 + 2 * t]; // cache row of position j: cells[j]
    u32 lo = 0;
    if (window > 0 && pos + 1 > window) {
        lo = pos + 1 - window;
    }
    const u32 qb = (t * n_head + h) * hd;
    const u32 n_rot = prm.n_rot, neox = prm.neox;
    // Element d of the q head, rotated where a rope is folded in.
    auto q_at = [&](u32 d) -> float { return q_rotated(q, qcs, qb, d, t, n_rot, neox); };
    // q rounded as the CPU rounds it for the cache type: element-wise for f32 / f16, through the
    // |max| of its QBLOCK-element block for q8_0 (the raw q staged in shared memory first).
    if constexpr (KV::QBLOCK > 1) {
        for (u32 d = tid; d < hd; d += WG) {
            qraw[d] = q_at(d);
        }
        __syncthreads();
        for (u32 d = tid; d < hd; d += WG) {
            const u32 b0 = d / KV::QBLOCK * KV::QBLOCK;
            float amax = 0.0f;
            MF_UNROLL_N(8)
            for (u32 i = 0; i < KV::QBLOCK; i++) {
                amax = fmaxf(amax, fabsf(qraw[b0 + i]));
            }
            qs[d] = KV::kv_round_q(qraw[d], amax);
        }
    } else {
        for (u32 d = tid; d < hd; d += WG) {
            qs[d] = KV::kv_round_q(q_at(d), 0.0f);
        }
    }
    __syncthreads();

    const u32 kw = n_head_kv * hd;
    // Score of position j: q · K[cells[j], head g], scaled and soft-capped.
    auto score = [&](u32 j) -> float {
        float s = KV::k_dot(kc, (cells[j] * kw + g * hd) / 2, qs, hd);
        s *= scale;
        if (softcap > 0.0f) {
            s = tanhf(fminf(fmaxf(s / softcap, -15.0f), 15.0f)) * softcap;
        }
        return s;
    };

    float mx = 0.0f;
    float inv = 0.0f;
    if (!flash) {
        float m = -3.0e38f;
        float l = 0.0f;
        for (u32 j = lo + tid; j <= pos; j += WG) {
            const float s = score(j);
            const float mn = fmaxf(m, s);
            l = l * expf(m - mn) + expf(s - mn);
            m = mn;
        }
        mx = block_max<WG>(m, red);
        if (sinks) {
            mx = fmaxf(mx, sk[h]);
        }
        float sum = block_sum<WG>(l * expf(m - mx), red);
        if (sinks) {
            sum += expf(sk[h] - mx);
        }
        inv = 1.0f / sum;
    }

    const u32 vw = n_head_kv * hdv;
    float acc[8];
    MF_UNROLL
    for (u32 a = 0; a < 8; a++) {
        acc[a] = 0.0f;
    }
    float fm = -3.0e38f; // flash: running max and sum, the same in every thread
    float fsum = 0.0f;
    for (u32 base = lo; base <= pos; base += WG) {
        const u32 j = base + tid;
        float pj = 0.0f;
        if (j <= pos) {
            const float s = score(j);
            pj = flash ? s : KV::kv_round(expf(s - mx) * inv);
        }
        ps[tid] = pj;
        __syncthreads();
        const u32 cnt = umin32(WG, pos + 1 - base);
        if (flash) {
            for (u32 jj = 0; jj < cnt; jj++) {
                const float s = ps[jj];
                float ms = 1.0f;
                float vs = 1.0f;
                if (s > fm) {
                    ms = expf(fm - s);
                    fm = s;
                    MF_UNROLL
                    for (u32 a = 0; a < 8; a++) {
                        acc[a] = KV::kv_round(acc[a] * ms);
                    }
                } else {
                    vs = expf(s - fm);
                }
                const u32 vb = cells[base + jj] * vw + g * hdv;
                MF_UNROLL
                for (u32 a = 0; a < 8; a++) {
                    const u32 d = tid + a * WG;
                    if (d < hdv) {
                        acc[a] = KV::kv_round(fmaf(KV::v_at(vc, vb + d), vs, acc[a]));
                    }
                }
                fsum = fmaf(fsum, ms, vs);
            }
        } else {
            // acc[a] += Σ_jj p[jj]·V[base + jj, d], each acc[a] summed in jj order as attention.wgsl
            // sums it (the loops are swapped so the 8 V loads of one position are independent).
            const u32 vd = g * hdv + tid;
            for (u32 jj = 0; jj < cnt; jj++) {
                const float pj2 = ps[jj];
                const u32 vb = cells[base + jj] * vw + vd;
                MF_UNROLL
                for (u32 a = 0; a < 8; a++) {
                    if (tid + a * WG < hdv) {
                        acc[a] += pj2 * KV::v_at(vc, vb + a * WG);
                    }
                }
            }
        }
        __syncthreads();
    }
    if (flash && sinks) {
        const float s = sk[h];
        float ms = 1.0f;
        float vs = 1.0f;
        if (s > fm) {
            ms = expf(fm - s);
            MF_UNROLL
            for (u32 a = 0; a < 8; a++) {
                acc[a] *= ms;
            }
        } else {
            vs = expf(s - fm);
        }
        fsum = fmaf(fsum, ms, vs);
    }
    float f = 1.0f;
    if (flash) {
        f = fsum != 0.0f ? 1.0f / fsum : 0.0f;
    }
    const u32 ob = (t * n_head + h) * hdv;
    MF_UNROLL
    for (u32 a = 0; a < 8; a++) {
        const u32 d = tid + a * WG;
        if (d < hdv) {
            o[ob + d] = acc[a] * f;
        }
    }
    if (prm.act != 0) {
        // The head's output as written above, visible to the whole block.
        __syncthreads();
        float* __restrict__ qy = binding<float>(p, 8);
        const u32 act = prm.act - 1, qk = act == 2 ? 256 : 32;
        const u32 k = n_head * hdv;
        for (u32 b = tid; b < hdv / qk; b += WG) {
            const u32 e = ob + b * qk;
            quantize_block(act, o + e, qy, e, prm.n * k);
        }
    }
}

#define MF_ATTENTION(name)                                                                          \
    extern "C" __global__ void __launch_bounds__(64) attention_kv_##name(const Params p) { \
        attention_body<kv_##name>(p);                                                               \
    }
MF_KV_TYPES(MF_ATTENTION)
