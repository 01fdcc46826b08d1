// kv_store (first half of the attention op): writes token t's K and V rows into the layer's
// cache at the token's cell, step[step[5 + 2t] + step[4 + 2t]] (the layout of Step::words).
// - f32 / f16 caches: one thread per cache word (EPW elements), K words first, then V words.
// - q8_0 cache: one thread per pair of q8_0 blocks (64 elements, 68 bytes = 17 whole words, so no
//   two threads share a word; the host requires K and V widths that are multiples of 64), K pairs
//   first, then V pairs; each block quantized as ggml's quantize_row_q8_0_ref, the CPU's bytes.
//
// - A rope of K folded into the store (n_rot > 0; the rope node computes nothing): K is read
//   rotated, as rope.cu would have written it (k_at; common.cuh's rope_value).
//
// Params: kw (K row width, n_head_kv · head_dim), vw (V row width), n (tokens), head_dim (K's),
// n_rot (0: K as it is), neox.
// Bindings: 1 step (Step::words: [n, 0, 0, 0], (pos, 4 + 2n + off) per token, the cell lists),
// 2 k [n][kw], 3 v [n][vw], 4 kc, 5 vc (cache words, one row per cell), 6 cs [n][n_rot / 2]
// (the folded rope's table; read only with n_rot > 0).
// Grid: ceil(n · (kw + vw) / EPW / 64) blocks (EPW = 64 for q8_0) folded into (x, y). Block: 64.

struct KvStoreParams {
    u32 kw; // K row width (n_head_kv · head_dim)
    u32 vw; // V row width
    u32 n;  // tokens
    u32 head_dim; // K's head width
    u32 n_rot;    // 0, or the rope folded into the store
    u32 neox;
    u32 _pad0, _pad1;
};

// Element e of K [n][kw] as the store writes it: rotated where a rope is folded in.
static __device__ __forceinline__ float k_at(const KvStoreParams& prm, const float* __restrict__ k,
                                             const f2* __restrict__ cs, u32 e) {
    if (prm.n_rot == 0) {
        return k[e];
    }
    const u32 t = e / prm.kw;
    const u32 d = (e - t * prm.kw) % prm.head_dim;
    const float xp = k[e - d + rope_partner(d, prm.n_rot, prm.neox)];
    const f2 c = d < prm.n_rot ? cs[t * (prm.n_rot / 2) + rope_pair(d, prm.n_rot, prm.neox)] : f2{1.0f, 0.0f};
    return rope_value(d, prm.n_rot, prm.neox, k[e], xp, c);
}

// The cell token t writes.
static __device__ __forceinline__ u32 store_cell(const u32* __restrict__ step, u32 t) {
    return step[step[5 + 2 * t] + step[4 + 2 * t]];
}

template <class KV>
static __device__ __forceinline__ void kv_store_body(const Params& p) {
    constexpr u32 WG = 64;
    constexpr u32 EPW = KV::EPW;
    const u32* __restrict__ step = binding<const u32>(p, 1);
    const float* __restrict__ k = binding<const float>(p, 2);
    const float* __restrict__ v = binding<const float>(p, 3);
    u32* __restrict__ kc = binding<u32>(p, 4);
    u32* __restrict__ vc = binding<u32>(p, 5);
    const f2* __restrict__ cs = binding<const f2>(p, 6);
    const KvStoreParams& prm = params<KvStoreParams>(p);
    const u32 kw = prm.kw, vw = prm.vw, n = prm.n;
    const u32 i = linear_id<WG>();
    const u32 nk = n * kw / EPW;
    const u32 nv = n * vw / EPW;
    if (i < nk) {
        const u32 e = i * EPW;
        const u32 t = e / kw;
        kc[(store_cell(step, t) * kw + e - t * kw) / EPW] =
            KV::encode(k_at(prm, k, cs, e), k_at(prm, k, cs, umin32(e + 1, n * kw - 1)));
    } else if (i < nk + nv) {
        const u32 j = i - nk;
        const u32 e = j * EPW;
        const u32 t = e / vw;
        vc[(store_cell(step, t) * vw + e - t * vw) / EPW] = KV::encode(v[e], v[umin32(e + 1, n * vw - 1)]);
    }
}

// Two q8_0 blocks of the 64 floats at src (16-byte aligned), as 17 little-endian words at dst.
static __device__ __forceinline__ void quant_pair_q8_0(const float* __restrict__ src, u32* __restrict__ dst) {
    u32 words[17];
    MF_UNROLL
    for (u32 j = 0; j < 17; j++) {
        words[j] = 0;
    }
    MF_UNROLL
    for (u32 b = 0; b < 2; b++) {
        float x[32];
        MF_UNROLL
        for (u32 e = 0; e < 8; e++) {
            const f4 v = reinterpret_cast<const f4*>(src)[8 * b + e];
            x[4 * e] = v.x;
            x[4 * e + 1] = v.y;
            x[4 * e + 2] = v.z;
            x[4 * e + 3] = v.w;
        }
        float amax = 0.0f;
        MF_UNROLL
        for (u32 i = 0; i < 32; i++) {
            amax = fmaxf(amax, fabsf(x[i]));
        }
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        const u32 dh = f16_bits(d);
        // byte o of the pair goes to word o / 4, bits 8 · (o % 4)
        const u32 o = 34 * b;
        words[o / 4] |= (dh & 0xffu) << (8 * (o % 4));
        words[(o + 1) / 4] |= (dh >> 8) << (8 * ((o + 1) % 4));
        MF_UNROLL
        for (u32 i = 0; i < 32; i++) {
            const u32 q = (u32)(int)round_away(x[i] * id) & 0xffu;
            words[(o + 2 + i) / 4] |= q << (8 * ((o + 2 + i) % 4));
        }
    }
    MF_UNROLL
    for (u32 j = 0; j < 17; j++) {
        dst[j] = words[j];
    }
}

static __device__ __forceinline__ void kv_store_q8_0_body(const Params& p) {
    constexpr u32 WG = 64;
    const u32* __restrict__ step = binding<const u32>(p, 1);
    const float* __restrict__ k = binding<const float>(p, 2);
    const float* __restrict__ v = binding<const float>(p, 3);
    u32* __restrict__ kc = binding<u32>(p, 4);
    u32* __restrict__ vc = binding<u32>(p, 5);
    const f2* __restrict__ cs = binding<const f2>(p, 6);
    const KvStoreParams& prm = params<KvStoreParams>(p);
    const u32 kw = prm.kw, vw = prm.vw, n = prm.n;
    const u32 i = linear_id<WG>();
    const u32 nk = n * kw / 64;
    const u32 nv = n * vw / 64;
    if (i < nk) {
        const u32 t = 64 * i / kw;
        f4 rot[16]; // the pair rotated, where a rope is folded in
        const float* src = k + 64 * i;
        if (prm.n_rot != 0) {
            float* r = reinterpret_cast<float*>(rot);
            for (u32 e = 0; e < 64; e++) {
                r[e] = k_at(prm, k, cs, 64 * i + e);
            }
            src = r;
        }
        quant_pair_q8_0(src, kc + store_cell(step, t) * (kw * 17 / 64) + 17 * (i - t * (kw / 64)));
    } else if (i < nk + nv) {
        const u32 j = i - nk;
        const u32 t = 64 * j / vw;
        quant_pair_q8_0(v + 64 * j, vc + store_cell(step, t) * (vw * 17 / 64) + 17 * (j - t * (vw / 64)));
    }
}

#define MF_KV_STORE(name)                                                                          \
    extern "C" __global__ void __launch_bounds__(64) kv_store_kv_##name(const Params p) { \
        kv_store_body<kv_##name>(p);                                                               \
    }
MF_KV_STORE(f32)
MF_KV_STORE(f16)

extern "C" __global__ void __launch_bounds__(64) kv_store_kv_q8_0(const Params p) {
    kv_store_q8_0_body(p);
}
