// KV cache element access, one traits struct per cache type (kv_<name>, after KvType::name()):
// the CUDA counterpart of shaders/kv/*.wgsl. Both caches of a layer are arrays of 32-bit words
// (`u32`), one row of K (n_head_kv · head_dim elements) or V per position, laid out exactly as the
// CPU stores them. Interface:
//   EPW               elements per cache word (kv_store; q8_0 has a store of its own)
//   encode(a, b)      the word holding elements (a, b) (b unused when EPW = 1)
//   k_dot(kc, kb, q, hd)  Σ_d<hd/2 q[2d]·K[2(kb + d)] + q[2d + 1]·K[2(kb + d) + 1], summed in d
//                     order as attention.wgsl's score() does with k_pair; kb = first pair
//   v_at(vc, i)       element i of vc
//   kv_round(x)       what the CPU's attention rounds the probabilities to
//   QBLOCK, kv_round_q(x, amax)  what it rounds q to, given |max| of x's QBLOCK-element block
// k_dot's q is the head's query in shared memory, 16-byte aligned.

// f32 cache: one element per word.
struct kv_f32 {
    static constexpr u32 EPW = 1, QBLOCK = 1;
    static __device__ __forceinline__ u32 encode(float a, float) {
        return __float_as_uint(a);
    }
    static __device__ __forceinline__ float k_dot(const u32* __restrict__ kc, u32 kb, const float* q, u32 hd) {
        float s = 0.0f;
        const float* k = reinterpret_cast<const float*>(kc) + 2 * kb;
        if (hd % 4 == 0) {
            // The row starts on a multiple of 4 elements: 16-byte loads.
            const f4* k4 = reinterpret_cast<const f4*>(k);
            const f4* q4 = reinterpret_cast<const f4*>(q);
            for (u32 i = 0; i < hd / 4; i++) {
                const f4 kv = k4[i];
                const f4 qv = q4[i];
                s += qv.x * kv.x + qv.y * kv.y;
                s += qv.z * kv.z + qv.w * kv.w;
            }
        } else {
            for (u32 d = 0; d < hd / 2; d++) {
                s += q[2 * d] * k[2 * d] + q[2 * d + 1] * k[2 * d + 1];
            }
        }
        return s;
    }
    static __device__ __forceinline__ float v_at(const u32* __restrict__ vc, u32 i) {
        return __uint_as_float(vc[i]);
    }
    static __device__ __forceinline__ float kv_round(float x) {
        return x;
    }
    static __device__ __forceinline__ float kv_round_q(float x, float) {
        return x;
    }
};

// f16 cache: two halves per word, low half first, written with the CPU's round-to-nearest-even.
// Like the CPU (ggml's non-flash path), q and the softmax probabilities are rounded to f16 too.
struct kv_f16 {
    static constexpr u32 EPW = 2, QBLOCK = 1;
    static __device__ __forceinline__ u32 encode(float a, float b) {
        return f16_bits(a) | (f16_bits(b) << 16);
    }
    static __device__ __forceinline__ float k_dot(const u32* __restrict__ kc, u32 kb, const float* q, u32 hd) {
        float s = 0.0f;
        if (hd % 8 == 0) {
            // The row starts on a multiple of 8 elements: 16-byte loads of 4 pairs.
            const u4* k4 = reinterpret_cast<const u4*>(kc + kb);
            const f4* q4 = reinterpret_cast<const f4*>(q);
            for (u32 i = 0; i < hd / 8; i++) {
                const u4 kv = k4[i];
                const f4 qa = q4[2 * i];
                const f4 qb = q4[2 * i + 1];
                s += qa.x * f16_to_f32(kv.x & 0xffffu) + qa.y * f16_to_f32(kv.x >> 16);
                s += qa.z * f16_to_f32(kv.y & 0xffffu) + qa.w * f16_to_f32(kv.y >> 16);
                s += qb.x * f16_to_f32(kv.z & 0xffffu) + qb.y * f16_to_f32(kv.z >> 16);
                s += qb.z * f16_to_f32(kv.w & 0xffffu) + qb.w * f16_to_f32(kv.w >> 16);
            }
        } else {
            for (u32 d = 0; d < hd / 2; d++) {
                const u32 kv = kc[kb + d];
                s += q[2 * d] * f16_to_f32(kv & 0xffffu) + q[2 * d + 1] * f16_to_f32(kv >> 16);
            }
        }
        return s;
    }
    static __device__ __forceinline__ float v_at(const u32* __restrict__ vc, u32 i) {
        return f16_to_f32(reinterpret_cast<const u16*>(vc)[i]);
    }
    static __device__ __forceinline__ float kv_round(float x) {
        return round_f16(x);
    }
    static __device__ __forceinline__ float kv_round_q(float x, float) {
        return round_f16(x);
    }
};

// Rust's f32::round (halves away from zero), which is C's roundf; WGSL's round() goes to even.
[[maybe_unused]] static __device__ __forceinline__ float round_away(float x) {
    return roundf(x);
}

// q8_0 cache: rows of 34-byte blocks (d f16 | 32 × i8), x = d·q, exactly the CPU's bytes (written
// by kv_store_kv_q8_0). Like the CPU (ggml's vec_dot type for q8_0), q is itself quantized to q8_0
// per 32-element block before the dot products; probabilities are not rounded. Rows are whole
// blocks and heads start on block boundaries (head_dim % 32 == 0, which the host requires).
struct kv_q8_0 {
    static constexpr u32 QBLOCK = 32;
    static __device__ __forceinline__ float k_dot(const u32* __restrict__ kc, u32 kb, const float* q, u32 hd) {
        const u8* k = reinterpret_cast<const u8*>(kc);
        float s = 0.0f;
        const u32 blk0 = 2 * kb / 32;
        for (u32 bi = 0; bi < hd / 32; bi++) {
            const u32 base = (blk0 + bi) * 34;
            const float d = f16_to_f32(ld_u16(k, base));
            const float* qb = q + 32 * bi;
            MF_UNROLL
            for (u32 i = 0; i < 16; i++) {
                // elements 2i, 2i + 1 of the block, dequantized as k_pair does
                const u32 v = ld_u16(k, base + 2 + 2 * i);
                s += qb[2 * i] * (i8f(v) * d) + qb[2 * i + 1] * (i8f(v >> 8) * d);
            }
        }
        return s;
    }
    static __device__ __forceinline__ float v_at(const u32* __restrict__ vc, u32 i) {
        const u8* v = reinterpret_cast<const u8*>(vc);
        const u32 base = (i / 32) * 34;
        return i8f(v[base + 2 + i % 32]) * f16_to_f32(ld_u16(v, base));
    }
    static __device__ __forceinline__ float kv_round(float x) {
        return x;
    }
    // quantize_row_q8_0_ref then dequantize, for one element of a block whose |max| is amax.
    static __device__ __forceinline__ float kv_round_q(float x, float amax) {
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        return round_away(x * id) * f16_to_f32(f16_bits(d));
    }
};

// X(name) for each cache type: entry points <op>_kv_<name>, traits kv_<name>. (kv_store lists its
// entries itself: the f32 and f16 stores share a body, q8_0 has its own.)
#define MF_KV_TYPES(X) \
    X(f32)             \
    X(f16)             \
    X(q8_0)

// The parameters of attention.cu, attention_split.cu and attention_reduce.cu.
struct AttentionParams {
    u32 n_head, n_head_kv, head_dim, head_dim_v;
    float scale;
    u32 window;    // 0 = none
    float softcap; // 0 = none
    u32 n;         // tokens
    u32 flash;     // 0 / 1
    u32 sinks;     // 0 / 1
    u32 t0;        // the first token of this launch (blockIdx.y is t - t0)
    u32 n_rot;     // 0, or the rope folded into the attention (q read rotated)
    u32 neox;
    u32 act;       // 0, or 1 + quantize_act's ACT: o also rounded into binding 8
    u32 n_split;   // attention_split / attention_reduce: ranges of positions, at most
    u32 hg;        // attention_split: query heads per block, all of one KV head
};

// The parameters of attention_tile.cu.
struct AttentionTileParams {
    u32 n_head, n_head_kv, head_dim, head_dim_v;
    float scale;
    u32 window;    // 0 = none
    float softcap; // 0 = none
    u32 n;         // tokens
    u32 t0;        // the first token of this launch
    u32 n_rot;     // 0, or the rope folded into the attention (q read rotated)
    u32 neox;
    u32 n_split;   // ranges of a run's positions
    u32 hg;        // query heads per block, all of one KV head
    u32 tq;        // query tokens per block (a power of two)
    u32 kt;        // positions per K / V tile
    u32 _pad0;
};

// Element d of the q head at q[qb] of token t, rotated where a rope of n_rot dimensions is folded
// in (table qcs [n][n_rot / 2], common.cuh's rope_value): as attention.cu and attention_split.cu
// read the query.
[[maybe_unused]] static __device__ __forceinline__ float q_rotated(const float* __restrict__ q, const f2* __restrict__ qcs,
                                                                   u32 qb, u32 d, u32 t, u32 n_rot, u32 neox) {
    if (n_rot == 0) {
        return q[qb + d];
    }
    const f2 c = d < n_rot ? qcs[t * (n_rot / 2) + rope_pair(d, n_rot, neox)] : f2{1.0f, 0.0f};
    return rope_value(d, n_rot, neox, q[qb + d], q[qb + rope_partner(d, n_rot, neox)], c);
}

// Rounds qs[0 .. nq), the query heads the whole block has just loaded into shared memory, as the
// CPU rounds q for cache type KV (per QBLOCK-element block for q8_0): attention_split.cu and
// attention_tile.cu. Every thread calls it; each rounds at most A elements (nq ≤ A · WG).
template <class KV, u32 WG, u32 A>
static __device__ __forceinline__ void round_q(float* qs, u32 nq, u32 tid) {
    __syncthreads();
    float qr[A];
    MF_UNROLL
    for (u32 a = 0; a < A; a++) {
        const u32 i = tid + a * WG;
        if (i < nq) {
            float amax = 0.0f;
            if constexpr (KV::QBLOCK > 1) {
                const u32 b0 = i / KV::QBLOCK * KV::QBLOCK;
                for (u32 k = 0; k < KV::QBLOCK; k++) {
                    amax = fmaxf(amax, fabsf(qs[b0 + k]));
                }
            }
            qr[a] = KV::kv_round_q(qs[i], amax);
        }
    }
    __syncthreads();
    MF_UNROLL
    for (u32 a = 0; a < A; a++) {
        const u32 i = tid + a * WG;
        if (i < nq) {
            qs[i] = qr[a];
        }
    }
}

// The first position token t of `step` (step.rs's words) reads: 0, or where a sliding window of
// `window` positions starts.
[[maybe_unused]] static __device__ __forceinline__ u32 first_pos(const u32* __restrict__ step, u32 t, u32 window) {
    const u32 pos = step[4 + 2 * t];
    return window > 0 && pos + 1 > window ? pos + 1 - window : 0;
}

// A run of a tile's tokens (attention_tile.cu): tokens i0 .. i1 (of tb + 0 .. tb + nt) of one
// sequence — the same cell row, at `cells` in the step — and the positions [lo, hi) any of them
// reads.
struct TokenRun {
    u32 i1, cells, lo, hi;
};
[[maybe_unused]] static __device__ __forceinline__ TokenRun token_run(const u32* __restrict__ step, u32 tb, u32 i0,
                                                                      u32 nt, u32 window) {
    TokenRun r{i0 + 1, step[5 + 2 * (tb + i0)], first_pos(step, tb + i0, window), step[4 + 2 * (tb + i0)] + 1};
    while (r.i1 < nt && step[5 + 2 * (tb + r.i1)] == r.cells) {
        r.lo = umin32(r.lo, first_pos(step, tb + r.i1, window));
        r.hi = umax32(r.hi, step[4 + 2 * (tb + r.i1)] + 1);
        r.i1++;
    }
    return r;
}

// The positions one range of the split-KV attention takes (attention_split, attention_reduce):
// the span over n_split, rounded up to whole 64-position tiles; ranges past the span are empty.
[[maybe_unused]] static __device__ __forceinline__ u32 split_chunk(u32 span, u32 n_split) {
    return ((span + n_split - 1) / n_split + 63) / 64 * 64;
}
