// Helpers every op may use: the kernel parameter block, f16 / bf16 conversions, small vector
// types, block and segment reductions, and the body of the element-wise binary ops. The CUDA
// counterpart of shaders/common.wgsl, shaders/reduce_*.wgsl and shaders/binary.wgsl.
//
// The engine compiles each op as one program made of common.cuh, quant.cuh, kv.cuh and the op's
// .cu file, concatenated in that order (NVRTC, no CUDA headers), so nothing here #includes
// anything. The same files also build for the CPU emulator (g++, one translation unit per op),
// hence: every function is `static __device__ __forceinline__` or a template, shared arrays have
// constant sizes, shuffles run in warp-uniform control flow with a full mask, and every thread of
// a block reaches every __syncthreads().
//
// Helpers have internal linkage and are always inlined; [[maybe_unused]] because each op uses
// only some of them.
//
// Numerics: NVRTC's defaults (no --use_fast_math, IEEE division and square root, no
// flush-to-zero) are assumed. Where the CPU reference rounds a product before adding it, the
// product is written mul_rn(a, b), which is never contracted into a fused multiply-add.

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;

// One dispatch's parameters: b[i] is the device address of WGSL binding i + 1, w[] the 16
// parameter words the host writes for the dispatch (WGSL binding 0), read through params<T>.
struct Params {
    unsigned long long b[8];
    unsigned int w[16];
};

// Programmatic dependent launch (sm_90 and later; the host launches with it there): a kernel
// may start while the one before it in the stream is still finishing, so before it touches
// memory it waits until the grids it depends on have completed and their writes are visible,
// and then lets the next kernel start launching (it too waits before touching memory). Every
// memory access goes through a pointer from `binding`, so `binding` does both; repeated, they
// cost nothing. Elsewhere (older GPUs, the emulator) nothing.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define MF_GRID_DEPENDENCIES() asm volatile("griddepcontrol.wait;\n\tgriddepcontrol.launch_dependents;" ::: "memory")
#else
#define MF_GRID_DEPENDENCIES()
#endif

// Binding `i` (as numbered in the WGSL, 1..8) as a pointer to T.
template <typename T>
static __device__ __forceinline__ T* binding(const Params& p, u32 i) {
    MF_GRID_DEPENDENCIES();
    return reinterpret_cast<T*>(p.b[i - 1]);
}

// Parameter words as kernel struct T: each op's parameters are a struct of u32 / float fields,
// named as the WGSL `struct Params` names them and in the order of the Rust struct of the same
// name (src/backend/gpu/params.rs; a test compares the three). The host writes T's bytes into w.
template <typename T>
static __device__ __forceinline__ const T& params(const Params& p) {
    static_assert(sizeof(T) <= sizeof(p.w) && alignof(T) == 4, "a params struct fits the 16 words");
    return *reinterpret_cast<const T*>(p.w);
}

// The params structs several op files share.
struct MatmulParams {
    u32 k;    // row length (elements)
    u32 m;    // width of y: all rows of the weight
    u32 rows; // rows in this part
    u32 row0; // first row of this part
    u32 n;    // rows of x: tokens (matmul_vec_id: tokens × slots where x is per slot)
    u32 ids;  // matmul_vec_id: slots per token; y has a row per slot (0: the plain matmuls)
    u32 x_slot;   // matmul_vec_id: 1 where x has a row per slot
    u32 n_expert; // matmul_vec_id: experts in the weight, `rows` rows each
    u32 acc;      // 1: y += x · W (a fused residual add; y holds the residual)
    u32 bias;     // 1: y = x · W + b (a fused bias add; binding 4 holds b; not with experts)
    u32 sk_tiles;   // matmul_mma: the last tiles, shared out in runs of steps (stream-k; 0: none)
    u32 sk_workers; // matmul_mma: the blocks that share them, after one block per other tile
};
struct MatmulPackParams {
    u32 k;                 // row length (elements), every member's
    u32 n;                 // rows of x (tokens)
    u32 rows0, rows1, rows2; // rows of each member (rows2 = 0 with two)
    u32 off1, off2;        // byte offsets of members 1 and 2 from member 0
    u32 bias;              // 1: binding 4 holds the members' biases
    u32 boff1, boff2;      // element offsets of biases 1 and 2 from bias 0
    u32 norm;              // 1: x is normalized first (an RMS norm folded in; binding 7 its weight)
    float eps;
    u32 act;               // 0, or 1 + quantize_act's ACT: the normalized row rounded
};

// A matmul's output element of weight row `row`: s, plus (a fused bias add) b[row], then
// (acc, a fused residual add) onto y. The bias binding is read only where p.bias is set.
static __device__ __forceinline__ void store_y(const Params& p, float* y, float s, u32 row) {
    const MatmulParams& prm = params<MatmulParams>(p);
    if (prm.bias) {
        s += binding<const float>(p, 4)[row];
    }
    *y = prm.acc ? *y + s : s;
}
struct BinaryParams {
    u32 n;
    u32 act; // 0, or 1 + quantize_act's ACT
    u32 _pad0, _pad1;
};
struct UnaryParams {
    u32 n;
    float s;
    u32 _pad0, _pad1;
};

// Loop unrolling hints; the CPU build ignores them.
#ifdef __CUDA_ARCH__
#define MF_PRAGMA(x) _Pragma(#x)
#define MF_UNROLL MF_PRAGMA(unroll)
#define MF_UNROLL_N(n) MF_PRAGMA(unroll n)
#else
#define MF_UNROLL
#define MF_UNROLL_N(n)
#endif

[[maybe_unused]] static __device__ __forceinline__ u32 umin32(u32 a, u32 b) {
    return a < b ? a : b;
}

[[maybe_unused]] static __device__ __forceinline__ u32 umax32(u32 a, u32 b) {
    return a > b ? a : b;
}

// ---- small vector types ------------------------------------------------------------------------

// Plain structs rather than CUDA's float4 / uint4, so the CPU build needs no vector types. The
// alignment lets the GPU load them with one 8- or 16-byte access.
struct alignas(16) f4 {
    float x, y, z, w;
};
struct alignas(8) f2 {
    float x, y;
};
struct alignas(16) u4 {
    u32 x, y, z, w;
};
struct alignas(8) u2 {
    u32 x, y;
};
// 8 consecutive elements: what a quant file's dq8 returns (WGSL: array<vec4<f32>, 2>).
struct f4x2 {
    f4 lo, hi;
};

[[maybe_unused]] static __device__ __forceinline__ float dot4(f4 a, f4 b) {
    return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w;
}

[[maybe_unused]] static __device__ __forceinline__ f4 scale4(f4 a, float s) {
    return f4{a.x * s, a.y * s, a.z * s, a.w * s};
}

// a * b rounded to f32 on its own (not fused with a following add).
[[maybe_unused]] static __device__ __forceinline__ float mul_rn(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}

// An integer sum c as a float, exact for |c| < 2^22 (an integer tile's sums: at most
// 32 · 128 · 128 a step), from I2F_BIAS + c: c's bits added to 1.5 · 2^23 form that float plus c,
// and a float subtraction takes the offset away again, where the conversion instruction runs at
// a quarter of the float rate. The tensor-core tiles start their sums from the bias
// (mma_s8_from), so the integer add costs nothing.
constexpr int I2F_BIAS = 0x4b400000;
[[maybe_unused]] static __device__ __forceinline__ float i2f_biased(int c) {
    return __int_as_float(c) - 12582912.0f;
}

// s·a − m per component, each product rounded before the subtraction (the CPU's `d * q - m`).
[[maybe_unused]] static __device__ __forceinline__ f4 mul_sub4(f4 a, float s, float m) {
    return f4{mul_rn(a.x, s) - m, mul_rn(a.y, s) - m, mul_rn(a.z, s) - m, mul_rn(a.w, s) - m};
}

// s·a + m per component, each product rounded before the addition (the CPU's `q * d + m`).
[[maybe_unused]] static __device__ __forceinline__ f4 mul_add4(f4 a, float s, float m) {
    return f4{mul_rn(a.x, s) + m, mul_rn(a.y, s) + m, mul_rn(a.z, s) + m, mul_rn(a.w, s) + m};
}

// ---- bytes to floats ---------------------------------------------------------------------------
// Small integers become floats through the 2^23 bias: 0x4b000000 | v is the float 2^23 + v, and
// subtracting 2^23 + off leaves v − off exactly (both operands are integers below 2^24). One
// bitwise op and one add per element, instead of an integer-to-float conversion (a quarter-rate
// instruction on most GPUs). Exact, so the results equal (float)(v − off).

// v − OFF for v < 2^23 (in practice a byte or a nibble).
template <u32 OFF>
static __device__ __forceinline__ float u2f(u32 v) {
    return __uint_as_float(0x4b000000u | v) - (8388608.0f + (float)OFF);
}

// The 4 bytes of q, low byte first, each minus OFF.
template <u32 OFF>
static __device__ __forceinline__ f4 u8x4(u32 q) {
    return f4{u2f<OFF>(q & 0xffu), u2f<OFF>((q >> 8) & 0xffu), u2f<OFF>((q >> 16) & 0xffu), u2f<OFF>(q >> 24)};
}

// The 4 bytes of q as signed bytes (flipping the top bit adds 128).
[[maybe_unused]] static __device__ __forceinline__ f4 i8x4(u32 q) {
    return u8x4<128>(q ^ 0x80808080u);
}

// A signed byte (the low 8 bits of v) as a float.
[[maybe_unused]] static __device__ __forceinline__ float i8f(u32 v) {
    return u2f<128>((v & 0xffu) ^ 0x80u);
}

// ---- f16 and bf16 ------------------------------------------------------------------------------

// f32 -> IEEE half bits, round to nearest even: the CPU's `f32_to_fp16` (ggml's
// GGML_FP32_TO_FP16) in integer arithmetic, ported from common.wgsl. NaN -> sign | 0x7e00.
[[maybe_unused]] static __device__ __forceinline__ u32 f16_bits_int(float x) {
    const u32 u = __float_as_uint(x);
    const u32 sign = (u >> 16) & 0x8000u;
    const u32 a = u & 0x7fffffffu;
    if (a >= 0x7f800000u) {
        return sign | (a > 0x7f800000u ? 0x7e00u : 0x7c00u);
    }
    if (a >= 0x477ff000u) {
        return sign | 0x7c00u; // >= 65520 rounds to infinity
    }
    if (a >= 0x38800000u) {
        // normal half: rebias the exponent (127 - 15 = 112), round the 13 dropped bits
        const u32 r = a + 0xfffu + ((a >> 13) & 1u);
        return sign | ((r >> 13) - 0x1c000u);
    }
    if (a < 0x33000000u) {
        return sign; // below 2^-25: rounds to zero
    }
    // subnormal half, in units of 2^-24
    const u32 e = a >> 23;
    const u32 m = (a & 0x7fffffu) | 0x800000u;
    const u32 sh = 126u - e;
    const u32 q = m >> sh;
    const u32 rem = m & ((1u << sh) - 1u);
    const u32 half = 1u << (sh - 1u);
    const bool up = rem > half || (rem == half && (q & 1u) == 1u);
    return sign | (q + (up ? 1u : 0u));
}

// IEEE half bits (low 16 bits of h) -> f32, exact (NaN payloads kept), ported from common.wgsl.
[[maybe_unused]] static __device__ __forceinline__ float f16_to_f32_int(u32 h) {
    const u32 sign = (h & 0x8000u) << 16;
    const u32 e = (h >> 10) & 0x1fu;
    const u32 m = h & 0x3ffu;
    if (e == 0u) {
        const float v = (float)m * 5.9604644775390625e-8f; // subnormal: m · 2^-24, a normal f32
        return sign != 0u ? -v : v;
    }
    if (e == 31u) {
        return __uint_as_float(sign | 0x7f800000u | (m << 13));
    }
    return __uint_as_float(sign | ((e + 112u) << 23) | (m << 13));
}

// The conversions the kernels use. On the GPU they are the hardware conversions, which are exact
// and round to nearest even just as the integer versions do; NaN results are mapped to the
// integer versions' bits, so every input gives the same bits either way. The CPU build uses the
// integer versions.
[[maybe_unused]] static __device__ __forceinline__ u32 f16_bits(float x) {
#ifdef __CUDA_ARCH__
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(x));
    const u32 nan = ((__float_as_uint(x) >> 16) & 0x8000u) | 0x7e00u;
    return x != x ? nan : (u32)h;
#else
    return f16_bits_int(x);
#endif
}

[[maybe_unused]] static __device__ __forceinline__ float f16_to_f32(u32 h) {
#ifdef __CUDA_ARCH__
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"((unsigned short)h));
    if ((h & 0x7fffu) > 0x7c00u) {
        f = __uint_as_float(((h & 0x8000u) << 16) | 0x7f800000u | ((h & 0x3ffu) << 13));
    }
    return f;
#else
    return f16_to_f32_int(h & 0xffffu);
#endif
}

[[maybe_unused]] static __device__ __forceinline__ float round_f16(float x) {
    return f16_to_f32(f16_bits(x));
}

// bf16 bits (low 16 bits of h) -> f32, exact: the high half of an f32.
[[maybe_unused]] static __device__ __forceinline__ float bf16_to_f32(u32 h) {
    return __uint_as_float(h << 16);
}

// ---- indexing ----------------------------------------------------------------------------------

// Linear index of this thread when a dispatch of WG-thread blocks is folded into (x, y) blocks
// (WGSL: gid.x + gid.y · nwg.x · WG).
template <u32 WG>
static __device__ __forceinline__ u32 linear_id() {
    return blockIdx.x * WG + threadIdx.x + blockIdx.y * gridDim.x * WG;
}

// ---- reductions --------------------------------------------------------------------------------
// Warps are 32 lanes. A block reduction reduces each warp with a butterfly of shuffles, writes
// one partial per warp to `red` (shared, BLOCK / 32 floats), and every thread adds the partials
// in warp order. All threads of the block must call these, in uniform control flow.

// The two reductions, as functors: MAX picks fmaxf over +.
template <bool MAX>
static __device__ __forceinline__ float combine(float a, float b) {
    return MAX ? fmaxf(a, b) : a + b;
}

template <bool MAX>
static __device__ __forceinline__ float warp_reduce(float v) {
    MF_UNROLL
    for (u32 m = 16; m > 0; m >>= 1) {
        v = combine<MAX>(v, __shfl_xor_sync(0xffffffffu, v, m));
    }
    return v;
}

template <u32 BLOCK, bool MAX>
static __device__ __forceinline__ float block_reduce(float v, float* red) {
    v = warp_reduce<MAX>(v);
    if (threadIdx.x % 32 == 0) {
        red[threadIdx.x / 32] = v;
    }
    __syncthreads();
    float t = red[0];
    MF_UNROLL
    for (u32 i = 1; i < BLOCK / 32; i++) {
        t = combine<MAX>(t, red[i]);
    }
    __syncthreads();
    return t;
}

template <u32 BLOCK>
static __device__ __forceinline__ float block_sum(float v, float* red) {
    return block_reduce<BLOCK, false>(v, red);
}

template <u32 BLOCK>
static __device__ __forceinline__ float block_max(float v, float* red) {
    return block_reduce<BLOCK, true>(v, red);
}

// Segments of TPR consecutive lanes (a power of two, at most 32): the sum over this thread's
// segment, valid in every lane of it. A butterfly of shuffles, no barrier; all lanes of the warp
// must call it.
template <u32 TPR>
static __device__ __forceinline__ float seg_sum(float v) {
    MF_UNROLL
    for (u32 m = TPR / 2; m > 0; m >>= 1) {
        v += __shfl_xor_sync(0xffffffffu, v, m);
    }
    return v;
}

// ---- element-wise binary ops -------------------------------------------------------------------
// The body shared by add, mul, swiglu and geglu (WGSL: binary.wgsl): y[i] = OP::op(a[i], b[i]),
// one element per thread. With act = 1 + quantize_act's ACT (a GLU feeding a quantized matmul)
// the 4 elements of one packed word per thread instead (a grid of n / 4 threads): their y, then
// the block rounded as quantize_act would into binding 4 (quantize_act's layout: quantize_word,
// defined below).
// Params: n, act. Bindings: 1 a, 2 b, 3 y, 4 qy (written only with act). Blocks of BINARY_WG
// threads, folded into (x, y).

static __device__ __forceinline__ void quantize_block(u32 act, const float* v, float* qy, u32 x0, u32 nk);
template <u32 WG>
static __device__ __forceinline__ void quantize_word(u32 act, const float v[4], bool valid, float* qy, u32 e0,
                                                     u32 nk);

// Threads per block of the binary kernels (the table's `BINARY_THREADS`, their entries'
// __launch_bounds__): 128, so a decode step's GLU (8 tokens of 11,008, a word of 4 per thread
// where it rounds) is 172 blocks, more than an H200's 132 SMs.
#define BINARY_WG 128u

template <class OP>
static __device__ __forceinline__ void binary_body(const Params& p) {
    constexpr u32 WG = BINARY_WG;
    const float* __restrict__ a = binding<const float>(p, 1);
    const float* __restrict__ b = binding<const float>(p, 2);
    float* __restrict__ y = binding<float>(p, 3);
    float* __restrict__ qy = binding<float>(p, 4);
    const BinaryParams& prm = params<BinaryParams>(p);
    const u32 i = linear_id<WG>();
    if (prm.act == 0) {
        if (i < prm.n) {
            y[i] = OP::op(a[i], b[i]);
        }
        return;
    }
    // Rounded: thread i takes the word of elements 4i..4i + 3 (quantize_word, every thread).
    const u32 e = 4 * i;
    const bool valid = e < prm.n;
    float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (valid) {
        for (u32 j = 0; j < 4; j++) {
            v[j] = OP::op(a[e + j], b[e + j]);
            y[e + j] = v[j];
        }
    }
    quantize_word<WG>(prm.act - 1, v, valid, qy, e, prm.n);
}

// ---- element-wise unary ops with a scalar --------------------------------------------------------
// The body shared by scale and softcap (WGSL: unary.wgsl): y[i] = OP::op(x[i], s), one element per
// thread. Params: n, s (f32). Bindings: 1 x, 2 y. Blocks of 256 threads, folded into (x, y).

template <class OP>
static __device__ __forceinline__ void unary_body(const Params& p) {
    constexpr u32 WG = 256;
    const float* __restrict__ x = binding<const float>(p, 1);
    float* __restrict__ y = binding<float>(p, 2);
    const UnaryParams& prm = params<UnaryParams>(p);
    const float s = prm.s;
    const u32 i = linear_id<WG>();
    if (i < prm.n) {
        y[i] = OP::op(x[i], s);
    }
}

// Where quantize_act's output for nk = n · k activations keeps the packed 8-bit form (WGSL:
// common.wgsl's act_q_base), as a word index: the values as floats (nk), the q8_1 corrections
// (nk / 32), then from this 16-byte-aligned word the q as 4 bytes a word (nk / 4), then one f32
// scale d per 32-element block (nk / 32; a q8_K block's d repeated 8 times).
static __device__ __forceinline__ u32 act_q_base(u32 nk) {
    return (nk + nk / 32 + 3) & ~3u;
}

// One block of a matmul's activations rounded as the CPU rounds them (quantize_act.cu's header
// gives the numerics; quantize_act.wgsl's quantize_block is the same, operation for operation):
// act 0 q8_0, 1 q8_1 (32 elements), 2 q8_K (256). v: the block's floats, elements x0.. of the nk
// that qy (quantize_act's layout) holds; x~ = d · q goes to qy[x0..], q8_1's correction to
// qy[nk + x0 / 32], the packed q and d after them (act_q_base). quantize_act and the fused
// writers round through this; v may be qy + x0 (rounded in place).
static __device__ __forceinline__ void quantize_block(u32 act, const float* v, float* qy, u32 x0, u32 nk) {
    const u32 qk = act == 2 ? 256 : 32;
    float* o = qy + x0;
    u32* qw = reinterpret_cast<u32*>(qy) + act_q_base(nk) + x0 / 4;
    float* dw = qy + act_q_base(nk) + nk / 4 + x0 / 32;
    float amax = 0.0f, mx = 0.0f;
    for (u32 i = 0; i < qk; i++) {
        if (fabsf(v[i]) > amax) {
            amax = fabsf(v[i]);
            mx = v[i];
        }
    }
    if (act == 2) {
        const float iscale = amax != 0.0f ? -127.0f / mx : 0.0f;
        const float d = amax != 0.0f ? 1.0f / iscale : 0.0f;
        for (u32 j = 0; j < qk / 4; j++) {
            u32 word = 0;
            for (u32 i = 0; i < 4; i++) {
                const float q = fminf(rintf(mul_rn(iscale, v[4 * j + i])), 127.0f);
                o[4 * j + i] = mul_rn(d, q);
                word |= ((u32)(int)q & 0xffu) << (8 * i);
            }
            qw[j] = word;
        }
        for (u32 j = 0; j < qk / 32; j++) {
            dw[j] = d;
        }
        return;
    }
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    const float d16 = round_f16(d);
    float sq = 0.0f;
    for (u32 j = 0; j < qk / 4; j++) {
        u32 word = 0;
        for (u32 i = 0; i < 4; i++) {
            const float q = rintf(mul_rn(v[4 * j + i], id));
            sq += q;
            o[4 * j + i] = mul_rn(d16, q);
            word |= ((u32)(int)q & 0xffu) << (8 * i);
        }
        qw[j] = word;
    }
    dw[0] = d16;
    if (act == 1) {
        qy[nk + x0 / 32] = round_f16(mul_rn(sq, d)) - mul_rn(d16, sq);
    }
}

// The same rounding with many threads per block, for the writers that spread a row over a whole
// block (rms_norm, quantize_act, the GLUs): each thread holds the 4 elements of one packed word, v,
// the first of them element e0 (a multiple of 4) of the nk that qy holds. The qk / 4 threads of a
// block (8 for q8_0 / q8_1, 64 for q8_K) are consecutive in the CUDA block and the first of them
// holds the block's first element; every thread of the CUDA block calls this (act uniform: q8_K
// joins its two warps through shared memory), `valid` false for the whole blocks past the data.
// The block's largest magnitude and the signed value that first holds it (quantize_block's serial
// choice) are reduced as one key, largest first: the magnitude's bits, then the complement of the
// element's index (the earlier wins a tie), then its sign. Σq of q8_1 is a sum of integers, exact
// in any order. The values written are quantize_block's, bit for bit (WGSL: quantize_word.wgsl).
// quantize_word_part writes only where `write` (valid words that another workgroup, holding the
// same block, does not write): a q8_K block split between two workgroups, each of which reads the
// whole block for its scale.
template <u32 WG>
static __device__ __forceinline__ void quantize_word_part(u32 act, const float v[4], bool valid, bool write, float* qy,
                                                          u32 e0, u32 nk) {
    static_assert(WG % 64 == 0, "whole q8_K blocks of 64 threads");
    __shared__ unsigned long long warp_key[WG / 32];
    unsigned long long key = 0;
    if (valid) {
        for (u32 i = 0; i < 4; i++) {
            const unsigned long long k = ((unsigned long long)__float_as_uint(fabsf(v[i])) << 32) |
                                         ((0x7fffffffu - (e0 + i)) << 1) | (v[i] < 0.0f ? 1u : 0u);
            key = k > key ? k : key;
        }
    }
    const u32 lanes = act == 2 ? 32 : 8;
    for (u32 o = lanes / 2; o > 0; o >>= 1) {
        const unsigned long long other = __shfl_xor_sync(0xffffffffu, key, o);
        key = other > key ? other : key;
    }
    if (act == 2) {
        // The block's two warps.
        const u32 warp = threadIdx.x / 32;
        if (threadIdx.x % 32 == 0) {
            warp_key[warp] = key;
        }
        __syncthreads();
        const unsigned long long other = warp_key[warp ^ 1];
        key = other > key ? other : key;
        __syncthreads(); // warp_key free for the next call
    }
    const float amax = __uint_as_float((u32)(key >> 32));
    const float mx = (key & 1) ? -amax : amax;
    float* o = qy + e0;
    u32* qw = reinterpret_cast<u32*>(qy) + act_q_base(nk) + e0 / 4;
    float* dw = qy + act_q_base(nk) + nk / 4 + e0 / 32;
    const bool first32 = e0 % 32 == 0;
    if (act == 2) {
        const float iscale = amax != 0.0f ? -127.0f / mx : 0.0f;
        const float d = amax != 0.0f ? 1.0f / iscale : 0.0f;
        u32 word = 0;
        for (u32 i = 0; i < 4; i++) {
            const float q = fminf(rintf(mul_rn(iscale, v[i])), 127.0f);
            if (write) {
                o[i] = mul_rn(d, q);
            }
            word |= ((u32)(int)q & 0xffu) << (8 * i);
        }
        if (write) {
            qw[0] = word;
            if (first32) {
                dw[0] = d;
            }
        }
        return;
    }
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    const float d16 = round_f16(d);
    float sq = 0.0f;
    u32 word = 0;
    for (u32 i = 0; i < 4; i++) {
        const float q = rintf(mul_rn(v[i], id));
        sq += q;
        if (write) {
            o[i] = mul_rn(d16, q);
        }
        word |= ((u32)(int)q & 0xffu) << (8 * i);
    }
    if (act == 1) {
        for (u32 m = 4; m > 0; m >>= 1) {
            sq += __shfl_xor_sync(0xffffffffu, sq, m);
        }
    }
    if (write) {
        qw[0] = word;
        if (first32) {
            dw[0] = d16;
            if (act == 1) {
                qy[nk + e0 / 32] = round_f16(mul_rn(sq, d)) - mul_rn(d16, sq);
            }
        }
    }
}

template <u32 WG>
static __device__ __forceinline__ void quantize_word(u32 act, const float v[4], bool valid, float* qy, u32 e0,
                                                     u32 nk) {
    quantize_word_part<WG>(act, v, valid, valid, qy, e0, nk);
}

// A row of len elements (whole blocks) at `row`, element x0 of the nk that qy holds, rounded a
// word per thread, WG words at a time (quantize_word); every thread of the block calls it. row
// may be qy + x0 (rounded in place: each thread reads its 4 values before it writes them).
template <u32 WG>
static __device__ __forceinline__ void quantize_row(u32 act, const float* row, float* qy, u32 x0, u32 len, u32 nk) {
    for (u32 c = 0; c < len; c += 4 * WG) {
        const u32 e = c + 4 * threadIdx.x;
        const bool valid = e < len;
        float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        if (valid) {
            for (u32 j = 0; j < 4; j++) {
                v[j] = row[e + j];
            }
        }
        quantize_word<WG>(act, v, valid, qy, x0 + e, nk);
    }
}

// ---- RoPE where a value is read ----------------------------------------------------------------
// A rope folded into the op that reads its output (kv_store's K, attention's q) rotates as
// rope.cu does: element d of a head, n_rot of them rotated, pairs (i, i + n_rot / 2) with neox,
// (2i, 2i + 1) without. rope_partner: d's partner in the head (d itself past n_rot); rope_pair:
// its entry of the step's table cs [token][n_rot / 2]; rope_value: the rotated value from d's
// and its partner's (WGSL: common.wgsl, the same operations).

[[maybe_unused]] static __device__ __forceinline__ u32 rope_partner(u32 d, u32 n_rot, u32 neox) {
    if (d >= n_rot) {
        return d;
    }
    if (neox != 0) {
        const u32 half = n_rot / 2;
        return d >= half ? d - half : d + half;
    }
    return d ^ 1u;
}

[[maybe_unused]] static __device__ __forceinline__ u32 rope_pair(u32 d, u32 n_rot, u32 neox) {
    return neox != 0 ? d % (n_rot / 2) : d / 2;
}

[[maybe_unused]] static __device__ __forceinline__ float rope_value(u32 d, u32 n_rot, u32 neox, float xd, float xp, f2 c) {
    if (d >= n_rot) {
        return xd;
    }
    const bool second = neox != 0 ? d >= n_rot / 2 : (d & 1u) == 1u;
    if (second) {
        return mul_rn(xp, c.y) + mul_rn(xd, c.x);
    }
    return mul_rn(xd, c.x) - mul_rn(xp, c.y);
}
