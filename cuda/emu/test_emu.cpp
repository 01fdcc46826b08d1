// Self-tests of the CUDA emulation (emu.h, emu.cpp).
//
// This file has two halves, built as the engine's tests build real kernels (see build.sh):
//  - compiled with `-include cuda/emu/emu.h` (MINFER_CUDA_EMU defined), it is a kernel file:
//    small CUDA-style kernels, each `extern "C" __global__ void NAME(const Params p)`, linked
//    with emu.cpp into a shared library;
//  - compiled with -DMINFER_EMU_TEST_HOST, it is the host program: it loads that library with
//    dlopen, launches the kernels through the C ABI, and checks their results.

// Parameter block of every kernel: buffer addresses, then 32-bit words.
struct Params {
    unsigned long long b[8];
    unsigned int w[16];
};

#if defined(MINFER_CUDA_EMU)
// =============================================================================================
// Kernels.
// =============================================================================================

#include <stdexcept>

__device__ __forceinline__ unsigned linear_tid() {
    return threadIdx.x + threadIdx.y * blockDim.x + threadIdx.z * blockDim.x * blockDim.y;
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

// out[blockIdx.x] = sum of in[blockIdx.x * 256 ...][256] by a shared-memory tree; 256 threads.
extern "C" __global__ void __launch_bounds__(256) k_reduce_shared(const Params p) {
    const float* in = (const float*)p.b[0];
    float* out = (float*)p.b[1];
    __shared__ float s[256];
    const unsigned t = threadIdx.x;
    s[t] = in[blockIdx.x * 256 + t];
    __syncthreads();
    for (unsigned stride = 128; stride > 0; stride >>= 1) {
        if (t < stride) s[t] += s[t + stride];
        __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = s[0];
}

// out[i] = the warp's sum of in[], by an xor butterfly: every lane holds the total.
extern "C" __global__ void k_warp_butterfly(const Params p) {
    const float* in = (const float*)p.b[0];
    float* out = (float*)p.b[1];
    const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    out[i] = warp_sum(in[i]);
}

// 64 threads, two warps, each with its own shuffles: per thread, four results.
//   out[4i+0]: the warp's sum (xor butterfly)
//   out[4i+1]: lane 5's value (__shfl_sync broadcast)
//   out[4i+2]: the inclusive prefix sum over the warp (__shfl_up_sync scan)
//   out[4i+3]: the warp's maximum (__shfl_down_sync tree, broadcast from lane 0)
extern "C" __global__ void k_two_warps(const Params p) {
    const float* in = (const float*)p.b[0];
    float* out = (float*)p.b[1];
    const unsigned t = threadIdx.x, lane = t % 32;
    const float v = in[t];
    float scan = v;
    for (unsigned d = 1; d < 32; d <<= 1) {
        float up = __shfl_up_sync(0xffffffffu, scan, d);
        if (lane >= d) scan += up;
    }
    float mx = v;
    for (unsigned d = 16; d > 0; d >>= 1) mx = fmaxf(mx, __shfl_down_sync(0xffffffffu, mx, d));
    out[4 * t + 0] = warp_sum(v);
    out[4 * t + 1] = __shfl_sync(0xffffffffu, v, 5);
    out[4 * t + 2] = scan;
    out[4 * t + 3] = __shfl_sync(0xffffffffu, mx, 0);
}

// Edge lanes of shuffles, and segments (width < 32). w[0] = delta. Per thread (int):
//   out[8i+0] down by delta, [1] up by delta, [2] xor 1 within width 8, [3] down by delta within
//   width 8, [4] idx lane 3 within width 16, [5] int shuffle of a negative value, [6] unsigned,
//   [7] xor 16 (from a lane that may not exist in a partial warp).
extern "C" __global__ void k_shfl_edges(const Params p) {
    int* out = (int*)p.b[0];
    const unsigned delta = p.w[0];
    const unsigned t = threadIdx.x;
    const int v = 100 + (int)t;
    out[8 * t + 0] = __shfl_down_sync(0xffffffffu, v, delta);
    out[8 * t + 1] = __shfl_up_sync(0xffffffffu, v, delta);
    out[8 * t + 2] = __shfl_xor_sync(0xffffffffu, v, 1, 8);
    out[8 * t + 3] = __shfl_down_sync(0xffffffffu, v, delta, 8);
    out[8 * t + 4] = __shfl_sync(0xffffffffu, v, 3, 16);
    out[8 * t + 5] = __shfl_xor_sync(0xffffffffu, -v, 2);
    out[8 * t + 6] = (int)__shfl_xor_sync(0xffffffffu, 0xf0000000u + (unsigned)v, 4);
    out[8 * t + 7] = __shfl_xor_sync(0xffffffffu, v, 16);
}

// Votes and counted block barriers. Per thread (unsigned):
//   [0] ballot(lane odd), [1] all(lane < 40), [2] any(lane == 7), [3] activemask,
//   [4] __syncthreads_count(t % 3 == 0), [5] _and(t < n), [6] _or(t == n - 1),
//   [7] _and(t % 2 == 0), [8] __reduce_add_sync(lane)
extern "C" __global__ void k_votes(const Params p) {
    unsigned* out = (unsigned*)p.b[0];
    const unsigned t = linear_tid(), lane = t % 32, n = blockDim.x * blockDim.y * blockDim.z;
    unsigned* o = out + 9 * t;
    o[0] = __ballot_sync(0xffffffffu, lane & 1);
    o[1] = (unsigned)__all_sync(0xffffffffu, lane < 40);
    o[2] = (unsigned)__any_sync(0xffffffffu, lane == 7);
    o[3] = __activemask();
    o[4] = (unsigned)__syncthreads_count(t % 3 == 0);
    o[5] = (unsigned)__syncthreads_and(t < n);
    o[6] = (unsigned)__syncthreads_or(t == n - 1);
    o[7] = (unsigned)__syncthreads_and(t % 2 == 0);
    o[8] = __reduce_add_sync(0xffffffffu, lane);
}

// printf from a fiber's stack.
extern "C" __global__ void k_printf(const Params p) {
    if (threadIdx.x == 1 && blockIdx.x == 1)
        printf("  printf from thread (%u,%u,%u) of block (%u,%u,%u): %f %s\n", threadIdx.x,
               threadIdx.y, threadIdx.z, blockIdx.x, blockIdx.y, blockIdx.z, 1.5, "ok");
}

// Every thread of a 3-D grid of 3-D blocks writes its coordinates to its own element.
extern "C" __global__ void k_grid_index(const Params p) {
    uint4* out = (uint4*)p.b[0];
    const unsigned block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    const unsigned per_block = blockDim.x * blockDim.y * blockDim.z;
    const unsigned i = block * per_block + linear_tid();
    out[i] = make_uint4(blockIdx.x | blockIdx.y << 8 | blockIdx.z << 16,
                        threadIdx.x | threadIdx.y << 8 | threadIdx.z << 16,
                        gridDim.x | gridDim.y << 8 | gridDim.z << 16,
                        blockDim.x | blockDim.y << 8 | blockDim.z << 16);
}

// Deadlock: the even lanes wait at __syncthreads, the odd ones at __syncwarp; neither barrier
// can ever be released.
extern "C" __global__ void k_deadlock(const Params p) {
    unsigned* out = (unsigned*)p.b[0];
    if (threadIdx.x % 2 == 0)
        __syncthreads();
    else
        __syncwarp();
    out[threadIdx.x] = 1;
}

// Threads from w[0] on return at once; the others still synchronise and reduce: a barrier
// counts the threads that remain.
extern "C" __global__ void k_early_return(const Params p) {
    unsigned* out = (unsigned*)p.b[0];
    const unsigned n = p.w[0], t = threadIdx.x;
    __shared__ unsigned s[256];
    if (t >= n) return;
    s[t] = t + 1;
    __syncthreads();
    if (t == 0) {
        unsigned sum = 0;
        for (unsigned i = 0; i < n; ++i) sum += s[i];
        out[blockIdx.x] = sum;
    }
}

// out[i] = __dp4a over in_a[i], in_b[i], in_c[i], signed at 2i and unsigned at 2i+1.
extern "C" __global__ void k_dp4a(const Params p) {
    const unsigned* a = (const unsigned*)p.b[0];
    const unsigned* b = (const unsigned*)p.b[1];
    const unsigned* c = (const unsigned*)p.b[2];
    unsigned* out = (unsigned*)p.b[3];
    const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= p.w[0]) return;
    out[2 * i] = (unsigned)__dp4a((int)a[i], (int)b[i], (int)c[i]);
    out[2 * i + 1] = __dp4a(a[i], b[i], c[i]);
}

// One warp: D = A · B + A · B by two mma.sync m16n8k16 s8 steps, each lane gathering its
// fragments byte by byte from a (16 × 16, row-major) and b (16 × 8, B[k][n] at n * 16 + k) as the
// PTX ISA lays them out, and scattering its part of D to d (16 × 8 s32, row-major).
extern "C" __global__ void k_mma(const Params p) {
    const signed char* a = (const signed char*)p.b[0];
    const signed char* b = (const signed char*)p.b[1];
    int* out = (int*)p.b[2];
    const unsigned g = threadIdx.x / 4, t = threadIdx.x % 4;
    unsigned a0 = 0, a1 = 0, b0 = 0;
    for (unsigned i = 0; i < 4; ++i) {
        a0 |= (unsigned)(unsigned char)a[g * 16 + 4 * t + i] << (8 * i);
        a1 |= (unsigned)(unsigned char)a[(g + 8) * 16 + 4 * t + i] << (8 * i);
        b0 |= (unsigned)(unsigned char)b[g * 16 + 4 * t + i] << (8 * i);
    }
    int d[4] = {0, 0, 0, 0};
    minfer_emu::mma_s8_m16n8k16(d, a0, a1, b0);
    minfer_emu::mma_s8_m16n8k16(d, a0, a1, b0);
    for (unsigned i = 0; i < 4; ++i) out[(g + (i >= 2 ? 8 : 0)) * 8 + 2 * t + (i & 1)] = d[i];
}

// One warp: D = A · B (A 16 × K row-major, B as B[n][k] at n * K + k, K = w[0], 4 or 8) by
// mma_tf32x3_m16n8, each lane gathering its fragments as the PTX ISA lays them out for
// m16n8k4 / m16n8k8 .tf32 and splitting each float into its upper 19 bits and the rest; D to
// d (16 × 8, row-major).
extern "C" __global__ void k_mma_tf32(const Params p) {
    const float* a = (const float*)p.b[0];
    const float* b = (const float*)p.b[1];
    float* out = (float*)p.b[2];
    const unsigned K = p.w[0], g = threadIdx.x / 4, t = threadIdx.x % 4;
    auto split = [](float v, unsigned& h, unsigned& l) {
        h = __float_as_uint(v) & 0xffffe000u;
        l = __float_as_uint(v - __uint_as_float(h));
    };
    unsigned ah[4], al[4], bh[2], bl[2];
    for (unsigned i = 0; i < K / 2; ++i) {
        split(a[(g + 8 * (i % 2)) * K + t + 4 * (i / 2)], ah[i], al[i]);
    }
    for (unsigned i = 0; i < K / 4; ++i) {
        split(b[g * K + t + 4 * i], bh[i], bl[i]);
    }
    float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (K == 4) {
        minfer_emu::mma_tf32x3_m16n8<4>(d, (const unsigned(&)[2])ah, (const unsigned(&)[2])al,
                                        (const unsigned(&)[1])bh, (const unsigned(&)[1])bl);
    } else {
        minfer_emu::mma_tf32x3_m16n8<8>(d, (const unsigned(&)[4])ah, (const unsigned(&)[4])al,
                                        (const unsigned(&)[2])bh, (const unsigned(&)[2])bl);
    }
    for (unsigned i = 0; i < 4; ++i) out[(g + (i >= 2 ? 8 : 0)) * 8 + 2 * t + (i & 1)] = d[i];
}

// One warp: ldmatrix .x4, .x2 and .x1 from shared memory holding in[] (four 8 × 16-byte
// matrices, rows 36 words apart, matrix j's rows in reverse order), lane l passing the address
// of row 7 − l % 8 of matrix l / 8. out[8l .. 8l + 3]: the lane's four words; out[8l + 4, + 5]
// .x2's two; out[8l + 6] .x1's.
extern "C" __global__ void k_ldmatrix(const Params p) {
    const unsigned* in = (const unsigned*)p.b[0];
    unsigned* out = (unsigned*)p.b[1];
    __shared__ __align__(16) unsigned s[32 * 36];
    const unsigned l = threadIdx.x;
    for (unsigned i = 0; i < 36; ++i) s[l * 36 + i] = in[l * 36 + i];
    __syncwarp();
    const unsigned* row = s + (8 * (l / 8) + 7 - l % 8) * 36;
    unsigned r4[4], r2[2], r1[1];
    minfer_emu::ldmatrix(r4, row);
    minfer_emu::ldmatrix(r2, row);
    minfer_emu::ldmatrix(r1, row);
    for (unsigned j = 0; j < 4; ++j) out[8 * l + j] = r4[j];
    out[8 * l + 4] = r2[0];
    out[8 * l + 5] = r2[1];
    out[8 * l + 6] = r1[0];
}

// Atomics from every thread of every block (blocks run on several OS threads).
//   ctr[0] += 1 (int), ctr[1] += 2 (unsigned), fctr[0] += 0.5f, ctr[2] = max(global id),
//   ctr[3] = min(global id + 7), ctr[4]: ticket counter by atomicCAS loop, ctr[5] atomicInc
//   wrapping at 1000, ctr[6] atomicSub, ctr[7]/ctr[8] 64-bit add/atomicOr of bits.
extern "C" __global__ void k_atomics(const Params p) {
    int* ctr = (int*)p.b[0];
    float* fctr = (float*)p.b[1];
    unsigned long long* c64 = (unsigned long long*)p.b[2];
    const unsigned g = blockIdx.x * blockDim.x + threadIdx.x;
    atomicAdd(&ctr[0], 1);
    atomicAdd((unsigned*)&ctr[1], 2u);
    atomicAdd(&fctr[0], 0.5f);
    atomicMax(&ctr[2], (int)g);
    atomicMin((unsigned*)&ctr[3], g + 7);
    int old = ctr[4], seen;
    while ((seen = atomicCAS(&ctr[4], old, old + 1)) != old) old = seen;
    atomicInc((unsigned*)&ctr[5], 999u);
    atomicSub(&ctr[6], 3);
    atomicAdd(&c64[0], 1ull << 33);
    atomicOr(&c64[1], 1ull << (g % 64));
    __threadfence();
}

// One thread: integer and float intrinsics, written to out[] for the host to compare.
extern "C" __global__ void k_intrinsics(const Params p) {
    unsigned* o = (unsigned*)p.b[0];
    o[0] = __byte_perm(0x33221100u, 0x77665544u, 0x4173u);
    o[1] = __brev(0x00000001u);
    o[2] = __funnelshift_l(0x89abcdefu, 0x01234567u, 8);
    o[3] = __funnelshift_r(0x89abcdefu, 0x01234567u, 8);
    o[4] = (unsigned)__clz(0x00010000);
    o[5] = (unsigned)__ffs(0x00010000);
    o[6] = (unsigned)__popc(0xf0f0f0f1u);
    o[7] = __float_as_uint(__saturatef(1.5f)) ^ __float_as_uint(1.0f);
    o[8] = __float_as_uint(__saturatef(-2.0f));
    o[9] = (unsigned)__float2int_rn(2.5f);                   // ties to even: 2
    o[10] = (unsigned)__float2int_rn(-1e20f);                 // saturates: INT_MIN
    o[11] = (unsigned)min(-3, 5) + 10;                        // 7
    o[12] = max(3u, 7u);                                      // 7
    o[13] = (unsigned)(min(2.0f, -1.0f) + 10.0f);             // 9
    o[14] = (unsigned)max((long long)-5, (long long)-9) + 10; // 5
    o[15] = __float_as_uint(rsqrtf(4.0f));                    // 0.5
    o[16] = __umulhi(0x80000000u, 6u);                        // 3
    o[17] = (unsigned)__clz(0);                               // 32
    o[18] = __vsubss4(0x7f80017fu, 0x81017f80u);
    o[19] = __vcmpeq4(0x11223344u, 0x11003344u);
    o[20] = __vabsdiffu4(0x0010ff00u, 0x00200001u);
}

// f16 and bf16 conversions: in[i] (w[0] floats) to f16[i] and bf16[i] bits; and every f16 bit
// pattern to all[h].
extern "C" __global__ void k_half(const Params p) {
    const float* in = (const float*)p.b[0];
    unsigned short* f16 = (unsigned short*)p.b[1];
    unsigned short* bf16 = (unsigned short*)p.b[2];
    float* all = (float*)p.b[3];
    const unsigned stride = gridDim.x * blockDim.x;
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < p.w[0]; i += stride) {
        f16[i] = __half_as_ushort(__float2half_rn(in[i]));
        bf16[i] = __bfloat16_as_ushort(__float2bfloat16(in[i]));
    }
    for (unsigned h = blockIdx.x * blockDim.x + threadIdx.x; h < 65536; h += stride)
        all[h] = __half2float(__ushort_as_half((unsigned short)h));
}

// Kernel failures by thread w[0] of each block, after a barrier: __trap() (w[1] = 0), or a C++
// exception (w[1] = 1).
extern "C" __global__ void k_trap(const Params p) {
    __syncthreads();
    if (threadIdx.x == p.w[0]) {
        if (p.w[1]) throw std::runtime_error("boom");
        __trap();
    }
    __syncthreads();
}

// Partial masks: the low half-warp shuffles with mask 0xffff while the high half waits at a
// __syncwarp of its own, which the emulation refuses...
extern "C" __global__ void k_partial_mask(const Params p) {
    int* out = (int*)p.b[0];
    if (threadIdx.x < 16)
        out[threadIdx.x] = __shfl_xor_sync(0x0000ffffu, (int)threadIdx.x, 1);
    else
        __syncwarp(0xffff0000u);
}

// ...and accepts where the lanes left out have returned.
extern "C" __global__ void k_partial_exit(const Params p) {
    int* out = (int*)p.b[0];
    if (threadIdx.x >= 16) return;
    out[threadIdx.x] = __shfl_xor_sync(0x0000ffffu, (int)threadIdx.x, 1);
}

// A mix of everything for timing: per block of 256 threads, a warp sum per warp, then a block
// sum through shared memory, 8 times over.
extern "C" __global__ void k_bench(const Params p) {
    const float* in = (const float*)p.b[0];
    float* out = (float*)p.b[1];
    __shared__ float partial[8];
    const unsigned t = threadIdx.x;
    float acc = 0.0f;
    for (int rep = 0; rep < 8; ++rep) {
        float v = warp_sum(in[blockIdx.x * 256 + t] * (float)(rep + 1));
        if (t % 32 == 0) partial[t / 32] = v;
        __syncthreads();
        if (t < 32) {
            float w = t < 8 ? partial[t] : 0.0f;
            w = warp_sum(w);
            if (t == 0) acc += w;
        }
        __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = acc;
}

#elif defined(MINFER_EMU_TEST_HOST)
// =============================================================================================
// Host.
// =============================================================================================

#define MINFER_EMU_ABI_ONLY
#include "emu.h"

#include <dlfcn.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

// The C ABI, looked up in the library as the engine's tests do.
decltype(&minfer_emu_launch) emu_launch;
decltype(&minfer_emu_error) emu_error;
decltype(&minfer_emu_set_threads) emu_set_threads;
void* lib;

int failures = 0;

#define CHECK(cond, ...)                                                                        \
    do {                                                                                        \
        if (!(cond)) {                                                                          \
            std::printf("  FAILED at line %d: %s: ", __LINE__, #cond);                          \
            std::printf(__VA_ARGS__);                                                           \
            std::printf("\n");                                                                  \
            ++failures;                                                                         \
            return;                                                                             \
        }                                                                                       \
    } while (0)

void* kernel(const char* name) {
    void* k = dlsym(lib, name);
    if (!k) {
        std::fprintf(stderr, "kernel %s not found\n", name);
        std::exit(2);
    }
    return k;
}

template <class T>
unsigned long long addr(std::vector<T>& v) {
    return (unsigned long long)(uintptr_t)v.data();
}

int launch(const char* name, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
           unsigned bz, const Params& p) {
    const unsigned grid[3] = {gx, gy, gz}, block[3] = {bx, by, bz};
    return emu_launch(kernel(name), grid, block, &p);
}

void test_reduce_shared() {
    const unsigned blocks = 37;
    std::vector<float> in(blocks * 256), out(blocks, -1.0f);
    for (size_t i = 0; i < in.size(); ++i) in[i] = (float)(i % 97);
    Params p{};
    p.b[0] = addr(in);
    p.b[1] = addr(out);
    for (unsigned threads : {1u, 2u, 4u}) {
        emu_set_threads(threads);
        std::fill(out.begin(), out.end(), -1.0f);
        int rc = launch("k_reduce_shared", blocks, 1, 1, 256, 1, 1, p);
        CHECK(rc == MINFER_EMU_OK, "rc %d: %s", rc, emu_error());
        for (unsigned b = 0; b < blocks; ++b) {
            double want = 0;
            for (unsigned t = 0; t < 256; ++t) want += in[b * 256 + t];
            CHECK(out[b] == (float)want, "%u threads, block %u: %g, want %g", threads, b, out[b],
                  want);
        }
    }
    emu_set_threads(0);
}

void test_warp_butterfly() {
    const unsigned n = 4 * 96; // 4 blocks of 96 threads: 3 warps each
    std::vector<float> in(n), out(n);
    for (unsigned i = 0; i < n; ++i) in[i] = (float)(i * 7 % 13);
    Params p{};
    p.b[0] = addr(in);
    p.b[1] = addr(out);
    int rc = launch("k_warp_butterfly", 4, 1, 1, 96, 1, 1, p);
    CHECK(rc == MINFER_EMU_OK, "rc %d: %s", rc, emu_error());
    for (unsigned i = 0; i < n; ++i) {
        float want = 0;
        for (unsigned j = i / 32 * 32; j < i / 32 * 32 + 32; ++j) want += in[j];
        CHECK(out[i] == want, "thread %u: %g, want %g", i, out[i], want);
    }
}

void test_two_warps() {
    std::vector<float> in(64), out(4 * 64);
    for (unsigned i = 0; i < 64; ++i) in[i] = (float)((i * 37) % 64) - 20.0f;
    Params p{};
    p.b[0] = addr(in);
    p.b[1] = addr(out);
    int rc = launch("k_two_warps", 1, 1, 1, 64, 1, 1, p);
    CHECK(rc == MINFER_EMU_OK, "rc %d: %s", rc, emu_error());
    for (unsigned t = 0; t < 64; ++t) {
        const unsigned base = t / 32 * 32, lane = t % 32;
        float sum = 0, scan = 0, mx = -1e30f;
        for (unsigned l = 0; l < 32; ++l) {
            sum += in[base + l];
            if (l <= lane) scan += in[base + l];
            mx = std::max(mx, in[base + l]);
        }
        CHECK(out[4 * t] == sum, "thread %u sum %g, want %g", t, out[4 * t], sum);
        CHECK(out[4 * t + 1] == in[base + 5], "thread %u broadcast %g", t, out[4 * t + 1]);
        CHECK(out[4 * t + 2] == scan, "thread %u scan %g, want %g", t, out[4 * t + 2], scan);
        CHECK(out[4 * t + 3] == mx, "thread %u max %g, want %g", t, out[4 * t + 3], mx);
    }
}

void test_shfl_edges() {
    // 32 threads (one full warp) and 48 (a full warp and a partial one of 16 lanes).
    for (unsigned n : {32u, 48u}) {
        for (unsigned delta : {1u, 3u, 31u, 32u}) {
            std::vector<int> out(8 * n, -1);
            Params p{};
            p.b[0] = addr(out);
            p.w[0] = delta;
            int rc = launch("k_shfl_edges", 1, 1, 1, n, 1, 1, p);
            CHECK(rc == MINFER_EMU_OK, "rc %d: %s", rc, emu_error());
            for (unsigned t = 0; t < n; ++t) {
                const int lane = (int)(t % 32), base = (int)(t / 32 * 32);
                const int lanes = std::min(32, (int)n - base); // lanes of this warp that exist
                auto v = [&](int l) { return 100 + base + l; };
                auto exists = [&](int l) { return l >= 0 && l < lanes; };
                const int* o = &out[8 * t];
                int dn = lane + (int)delta, up = lane - (int)delta;
                CHECK(o[0] == (dn < 32 && exists(dn) ? v(dn) : v(lane)),
                      "n %u delta %u lane %d: down %d", n, delta, lane, o[0]);
                CHECK(o[1] == (up >= 0 ? v(up) : v(lane)), "n %u delta %u lane %d: up %d", n,
                      delta, lane, o[1]);
                int x8 = lane ^ 1;
                CHECK(o[2] == (exists(x8) ? v(x8) : v(lane)), "lane %d: xor1/8 %d", lane, o[2]);
                int d8 = lane + (int)delta;
                CHECK(o[3] == (d8 <= (lane | 7) && exists(d8) ? v(d8) : v(lane)),
                      "n %u delta %u lane %d: down/8 %d", n, delta, lane, o[3]);
                int i16 = (lane & ~15) | 3;
                CHECK(o[4] == (exists(i16) ? v(i16) : v(lane)), "lane %d: idx3/16 %d", lane,
                      o[4]);
                int x2 = lane ^ 2;
                CHECK(o[5] == -(exists(x2) ? v(x2) : v(lane)), "lane %d: neg %d", lane, o[5]);
                int x4 = lane ^ 4;
                CHECK(o[6] == (int)(0xf0000000u + (unsigned)(exists(x4) ? v(x4) : v(lane))),
                      "lane %d: unsigned %d", lane, o[6]);
                int x16 = lane ^ 16;
                CHECK(o[7] == (exists(x16) ? v(x16) : v(lane)), "n %u lane %d: xor16 %d", n,
                      lane, o[7]);
            }
        }
    }
}

void check_votes(unsigned bx, unsigned by, unsigned bz);

void test_votes() {
    // (40, 2, 1): 80 threads, warps of 32, 32 and 16 lanes; (32, 8, 4): the largest block.
    const unsigned shapes[][3] = {{40, 2, 1}, {32, 8, 4}, {1, 1, 1}};
    for (const auto& shape : shapes) check_votes(shape[0], shape[1], shape[2]);
}

void check_votes(unsigned bx, unsigned by, unsigned bz) {
    const unsigned n = bx * by * bz;
    std::vector<unsigned> out(9 * n);
    Params p{};
    p.b[0] = addr(out);
    int rc = launch("k_votes", 1, 1, 1, bx, by, bz, p);
    CHECK(rc == MINFER_EMU_OK, "(%u,%u,%u): rc %d: %s", bx, by, bz, rc, emu_error());
    unsigned count3 = 0;
    for (unsigned t = 0; t < n; ++t) count3 += t % 3 == 0;
    for (unsigned t = 0; t < n; ++t) {
        const unsigned lanes = std::min(32u, n - t / 32 * 32);
        const unsigned exist = lanes == 32 ? 0xffffffffu : (1u << lanes) - 1;
        const unsigned* o = &out[9 * t];
        CHECK(o[0] == (0xaaaaaaaau & exist), "thread %u ballot %08x", t, o[0]);
        CHECK(o[1] == 1, "thread %u all %u", t, o[1]);
        CHECK(o[2] == (lanes > 7), "thread %u any %u", t, o[2]);
        CHECK(o[3] == exist, "thread %u activemask %08x", t, o[3]);
        CHECK(o[4] == count3, "thread %u count %u, want %u", t, o[4], count3);
        CHECK(o[5] == 1 && o[6] == 1 && o[7] == (n == 1), "thread %u and/or %u %u %u", t, o[5],
              o[6], o[7]);
        CHECK(o[8] == lanes * (lanes - 1) / 2, "thread %u reduce_add %u", t, o[8]);
    }
}

void test_grid_index() {
    const unsigned g[3] = {3, 4, 5}, b[3] = {4, 2, 3};
    const unsigned per_block = b[0] * b[1] * b[2], blocks = g[0] * g[1] * g[2];
    std::vector<uint32_t> out(4 * per_block * blocks, 0xdeadbeef);
    Params p{};
    p.b[0] = addr(out);
    emu_set_threads(3);
    int rc = launch("k_grid_index", g[0], g[1], g[2], b[0], b[1], b[2], p);
    emu_set_threads(0);
    CHECK(rc == MINFER_EMU_OK, "rc %d: %s", rc, emu_error());
    for (unsigned bz = 0; bz < g[2]; ++bz)
        for (unsigned by = 0; by < g[1]; ++by)
            for (unsigned bx = 0; bx < g[0]; ++bx)
                for (unsigned tz = 0; tz < b[2]; ++tz)
                    for (unsigned ty = 0; ty < b[1]; ++ty)
                        for (unsigned tx = 0; tx < b[0]; ++tx) {
                            unsigned block = bx + g[0] * (by + g[1] * bz);
                            unsigned i = block * per_block + tx + b[0] * (ty + b[1] * tz);
                            const uint32_t* o = &out[4 * i];
                            CHECK(o[0] == (bx | by << 8 | bz << 16), "element %u blockIdx %x", i,
                                  o[0]);
                            CHECK(o[1] == (tx | ty << 8 | tz << 16), "element %u threadIdx %x", i,
                                  o[1]);
                            CHECK(o[2] == (3u | 4u << 8 | 5u << 16), "element %u gridDim %x", i,
                                  o[2]);
                            CHECK(o[3] == (4u | 2u << 8 | 3u << 16), "element %u blockDim %x", i,
                                  o[3]);
                        }
}

void test_deadlock() {
    std::vector<unsigned> out(256);
    Params p{};
    p.b[0] = addr(out);
    auto t0 = std::chrono::steady_clock::now();
    int rc = launch("k_deadlock", 2, 1, 1, 256, 1, 1, p);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    CHECK(rc == MINFER_EMU_ERR_DEADLOCK, "rc %d, want a deadlock", rc);
    CHECK(std::strstr(emu_error(), "deadlock in block (") != nullptr, "message: %s", emu_error());
    CHECK(s < 5.0, "took %.1f s", s);
    std::printf("  message: %s\n", emu_error());
    // The library still works afterwards, on the same OS threads.
    std::vector<float> in(256, 1.0f), sum(1);
    p.b[0] = addr(in);
    p.b[1] = addr(sum);
    rc = launch("k_reduce_shared", 1, 1, 1, 256, 1, 1, p);
    CHECK(rc == MINFER_EMU_OK && sum[0] == 256.0f, "after a deadlock: rc %d sum %g", rc, sum[0]);
    CHECK(emu_error()[0] == 0, "error not cleared: %s", emu_error());
}

void test_early_return() {
    for (unsigned n : {1u, 100u, 255u, 256u}) {
        std::vector<unsigned> out(3, 0);
        Params p{};
        p.b[0] = addr(out);
        p.w[0] = n;
        int rc = launch("k_early_return", 3, 1, 1, 256, 1, 1, p);
        CHECK(rc == MINFER_EMU_OK, "n %u: rc %d: %s", n, rc, emu_error());
        for (unsigned b = 0; b < 3; ++b)
            CHECK(out[b] == n * (n + 1) / 2, "n %u block %u: %u", n, b, out[b]);
    }
}

void test_dp4a() {
    const unsigned n = 1000;
    std::mt19937 rng(42);
    std::vector<uint32_t> a(n), b(n), c(n), out(2 * n);
    for (unsigned i = 0; i < n; ++i) {
        a[i] = rng();
        b[i] = rng();
        c[i] = i % 3 == 0 ? 0x7fffff00u + i : rng(); // some sums wrap
    }
    a[0] = 0x80808080u; // -128 * -128, four times
    b[0] = 0x80808080u;
    Params p{};
    p.b[0] = addr(a);
    p.b[1] = addr(b);
    p.b[2] = addr(c);
    p.b[3] = addr(out);
    p.w[0] = n;
    int rc = launch("k_dp4a", (n + 127) / 128, 1, 1, 128, 1, 1, p);
    CHECK(rc == MINFER_EMU_OK, "rc %d: %s", rc, emu_error());
    for (unsigned i = 0; i < n; ++i) {
        int64_t s = (int32_t)c[i];
        uint64_t u = c[i];
        for (int k = 0; k < 4; ++k) {
            s += (int64_t)(int8_t)(a[i] >> 8 * k) * (int8_t)(b[i] >> 8 * k);
            u += (uint64_t)(uint8_t)(a[i] >> 8 * k) * (uint8_t)(b[i] >> 8 * k);
        }
        CHECK(out[2 * i] == (uint32_t)s, "signed %u: %08x, want %08x", i, out[2 * i],
              (uint32_t)s);
        CHECK(out[2 * i + 1] == (uint32_t)u, "unsigned %u: %08x, want %08x", i, out[2 * i + 1],
              (uint32_t)u);
    }
}

void test_mma() {
    std::mt19937 rng(7);
    std::vector<int8_t> a(16 * 16), b(8 * 16);
    for (auto& v : a) v = (int8_t)rng();
    for (auto& v : b) v = (int8_t)rng();
    a[0] = -128; // -128 · -128 at D[0][0]
    b[0] = -128;
    std::vector<int32_t> out(16 * 8, 0);
    Params p{};
    p.b[0] = addr(a);
    p.b[1] = addr(b);
    p.b[2] = addr(out);
    int rc = launch("k_mma", 1, 1, 1, 32, 1, 1, p);
    CHECK(rc == MINFER_EMU_OK, "rc %d: %s", rc, emu_error());
    for (unsigned r = 0; r < 16; ++r)
        for (unsigned c = 0; c < 8; ++c) {
            int32_t s = 0;
            for (unsigned k = 0; k < 16; ++k) s += (int32_t)a[r * 16 + k] * b[c * 16 + k];
            CHECK(out[r * 8 + c] == 2 * s, "D[%u][%u]: %d, want %d", r, c, out[r * 8 + c], 2 * s);
        }
    // A partial warp cannot take part.
    rc = launch("k_mma", 1, 1, 1, 20, 1, 1, p);
    CHECK(rc == MINFER_EMU_ERR_KERNEL, "partial warp: rc %d", rc);
}

void test_mma_tf32() {
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (unsigned K : {4u, 8u}) {
        std::vector<float> a(16 * K), b(8 * K), out(16 * 8, 0.0f);
        for (auto& v : a) v = u(rng);
        for (auto& v : b) v = u(rng);
        Params p{};
        p.b[0] = addr(a);
        p.b[1] = addr(b);
        p.b[2] = addr(out);
        p.w[0] = K;
        int rc = launch("k_mma_tf32", 1, 1, 1, 32, 1, 1, p);
        CHECK(rc == MINFER_EMU_OK, "rc %d: %s", rc, emu_error());
        for (unsigned r = 0; r < 16; ++r)
            for (unsigned c = 0; c < 8; ++c) {
                double s = 0.0, mag = 0.0;
                for (unsigned k = 0; k < K; ++k) {
                    s += (double)a[r * K + k] * b[c * K + k];
                    mag += std::fabs((double)a[r * K + k] * b[c * K + k]);
                }
                // Three tf32 products leave out Al · Bl and the parts of Al, Bl past tf32:
                // a few 2^-22 of the magnitude.
                CHECK(std::fabs(out[r * 8 + c] - s) <= 1e-6 * mag, "K %u D[%u][%u]: %.9g, want %.9g", K, r,
                      c, out[r * 8 + c], s);
            }
    }
}

void test_ldmatrix() {
    std::vector<uint32_t> in(32 * 36), out(32 * 8, 0);
    for (uint32_t i = 0; i < in.size(); ++i) in[i] = 0x9e3779b9u * (i + 1);
    Params p{};
    p.b[0] = addr(in);
    p.b[1] = addr(out);
    int rc = launch("k_ldmatrix", 1, 1, 1, 32, 1, 1, p);
    CHECK(rc == MINFER_EMU_OK, "rc %d: %s", rc, emu_error());
    // Row i of matrix j is what lane 8j + i passed: shared row 8j + 7 − i.
    auto word = [&](unsigned j, unsigned lane) { return in[(8 * j + 7 - lane / 4) * 36 + lane % 4]; };
    for (unsigned l = 0; l < 32; ++l) {
        for (unsigned j = 0; j < 4; ++j) CHECK(out[8 * l + j] == word(j, l), "x4 lane %u matrix %u", l, j);
        for (unsigned j = 0; j < 2; ++j) CHECK(out[8 * l + 4 + j] == word(j, l), "x2 lane %u matrix %u", l, j);
        CHECK(out[8 * l + 6] == word(0, l), "x1 lane %u", l);
    }
}

void test_atomics() {
    const unsigned blocks = 64, threads = 128, total = blocks * threads;
    std::vector<int> ctr(9, 0);
    ctr[3] = 0x7fffffff;
    std::vector<float> f(1, 0.0f);
    std::vector<unsigned long long> c64(2, 0);
    Params p{};
    p.b[0] = addr(ctr);
    p.b[1] = addr(f);
    p.b[2] = addr(c64);
    emu_set_threads(4);
    int rc = launch("k_atomics", blocks, 1, 1, threads, 1, 1, p);
    emu_set_threads(0);
    CHECK(rc == MINFER_EMU_OK, "rc %d: %s", rc, emu_error());
    CHECK(ctr[0] == (int)total, "add %d", ctr[0]);
    CHECK((unsigned)ctr[1] == 2 * total, "unsigned add %u", (unsigned)ctr[1]);
    CHECK(f[0] == 0.5f * total, "float add %g", f[0]);
    CHECK(ctr[2] == (int)total - 1, "max %d", ctr[2]);
    CHECK(ctr[3] == 7, "min %d", ctr[3]);
    CHECK(ctr[4] == (int)total, "CAS loop %d", ctr[4]);
    CHECK(ctr[5] == (int)(total % 1000), "inc %d", ctr[5]);
    CHECK(ctr[6] == -3 * (int)total, "sub %d", ctr[6]);
    CHECK(c64[0] == (unsigned long long)total << 33, "64-bit add %llx", c64[0]);
    CHECK(c64[1] == ~0ull, "64-bit or %llx", c64[1]);
}

void test_intrinsics() {
    const uint32_t want[] = {0x44117733u, 0x80000000u, 0x23456789u, 0x6789abcdu, 15, 17, 17, 0,
                             0, 2, 0x80000000u, 7, 7, 9, 5, 0x3f000000u, 3, 32, 0x7f80827fu,
                             0xff00ffffu, 0x0010ff01u};
    const int n = sizeof want / sizeof want[0];
    std::vector<uint32_t> o(n, 0);
    Params p{};
    p.b[0] = addr(o);
    int rc = launch("k_intrinsics", 1, 1, 1, 1, 1, 1, p);
    CHECK(rc == MINFER_EMU_OK, "rc %d: %s", rc, emu_error());
    for (int i = 0; i < n; ++i) CHECK(o[i] == want[i], "o[%d] = %08x, want %08x", i, o[i], want[i]);
}

float f32(uint32_t x) {
    float f;
    std::memcpy(&f, &x, 4);
    return f;
}
uint32_t bits(float f) {
    uint32_t x;
    std::memcpy(&x, &f, 4);
    return x;
}

void test_half() {
    // Random bit patterns, and every float near the f16 and bf16 rounding boundaries.
    std::vector<float> in;
    std::mt19937 rng(7);
    for (int i = 0; i < 200000; ++i) in.push_back(f32(rng()));
    for (uint32_t e : {0x33000000u, 0x33800000u, 0x38000000u, 0x38800000u, 0x477fe000u,
                       0x477ff000u, 0x3f800000u, 0x7f800000u, 0x7f7fffffu, 0x00000001u})
        for (int d = -4100; d <= 4100; ++d) {
            in.push_back(f32(e + d));
            in.push_back(-f32(e + d));
        }
    const unsigned n = (unsigned)in.size();
    std::vector<uint16_t> f16(n), bf16(n);
    std::vector<float> all(65536);
    Params p{};
    p.b[0] = addr(in);
    p.b[1] = addr(f16);
    p.b[2] = addr(bf16);
    p.b[3] = addr(all);
    p.w[0] = n;
    int rc = launch("k_half", 16, 1, 1, 256, 1, 1, p);
    CHECK(rc == MINFER_EMU_OK, "rc %d: %s", rc, emu_error());
    for (unsigned i = 0; i < n; ++i) {
        const float x = in[i];
        // The compiler's _Float16 rounds to nearest even.
        _Float16 h = (_Float16)x;
        uint16_t want;
        std::memcpy(&want, &h, 2);
        const bool nan = x != x;
        CHECK(nan ? (f16[i] & 0x7c00) == 0x7c00 && (f16[i] & 0x3ff) : f16[i] == want,
              "f16(%a = %08x) = %04x, want %04x", x, bits(x), f16[i], want);
        const uint32_t xb = bits(x), lo = xb & 0xffff;
        uint32_t bw = xb >> 16;
        if (lo > 0x8000 || (lo == 0x8000 && (bw & 1))) bw += 1;
        CHECK(nan ? (bf16[i] & 0x7f80) == 0x7f80 && (bf16[i] & 0x7f) : bf16[i] == bw,
              "bf16(%08x) = %04x, want %04x", xb, bf16[i], bw);
    }
    for (uint32_t hb = 0; hb < 65536; ++hb) {
        _Float16 h;
        uint16_t h16 = (uint16_t)hb;
        std::memcpy(&h, &h16, 2);
        const float want = (float)h;
        CHECK(want != want ? all[hb] != all[hb] : bits(all[hb]) == bits(want),
              "f16 %04x -> %a, want %a", hb, all[hb], want);
    }
}

void test_errors() {
    Params p{};
    std::vector<int> out(32);
    p.b[0] = addr(out);
    int rc = launch("k_reduce_shared", 1, 1, 1, 1025, 1, 1, p);
    CHECK(rc == MINFER_EMU_ERR_CONFIG && std::strstr(emu_error(), "block"),
          "1025 threads: rc %d: %s", rc, emu_error());
    rc = launch("k_reduce_shared", 1, 1, 1, 32, 32, 2, p);
    CHECK(rc == MINFER_EMU_ERR_CONFIG, "2048 threads: rc %d", rc);
    rc = launch("k_reduce_shared", 0, 1, 1, 32, 1, 1, p);
    CHECK(rc == MINFER_EMU_ERR_CONFIG && std::strstr(emu_error(), "grid"),
          "empty grid: rc %d: %s", rc, emu_error());
    const unsigned g[3] = {1, 1, 1}, b[3] = {32, 1, 1};
    rc = emu_launch(nullptr, g, b, &p);
    CHECK(rc == MINFER_EMU_ERR_CONFIG, "null kernel: rc %d", rc);

    p.w[0] = 77;
    rc = launch("k_trap", 5, 1, 1, 128, 1, 1, p);
    CHECK(rc == MINFER_EMU_ERR_KERNEL && std::strstr(emu_error(), "__trap") &&
              std::strstr(emu_error(), "(77,0,0)"),
          "trap: rc %d: %s", rc, emu_error());
    std::printf("  message: %s\n", emu_error());
    p.w[0] = 3;
    p.w[1] = 1;
    rc = launch("k_trap", 5, 1, 1, 128, 1, 1, p);
    CHECK(rc == MINFER_EMU_ERR_KERNEL && std::strstr(emu_error(), "exception: boom"),
          "throw: rc %d: %s", rc, emu_error());
    std::printf("  message: %s\n", emu_error());
    rc = launch("k_partial_mask", 1, 1, 1, 32, 1, 1, p);
    CHECK(rc == MINFER_EMU_ERR_KERNEL && std::strstr(emu_error(), "partial masks"),
          "partial mask: rc %d: %s", rc, emu_error());
    std::printf("  message: %s\n", emu_error());
    // 16 threads: the mask covers the whole (partial) warp, which is fine.
    rc = launch("k_partial_mask", 1, 1, 1, 16, 1, 1, p);
    CHECK(rc == MINFER_EMU_OK && out[0] == 1 && out[1] == 0, "16 lanes, mask 0xffff: rc %d: %s", rc,
          emu_error());
    out.assign(32, -1);
    rc = launch("k_partial_exit", 1, 1, 1, 32, 1, 1, p);
    CHECK(rc == MINFER_EMU_OK && out[0] == 1 && out[1] == 0 && out[15] == 14 && out[16] == -1,
          "mask 0xffff after lanes 16-31 returned: rc %d: %s", rc, emu_error());
}

void test_concurrent_launches() {
    // Two host threads launching at once: launches are serialised, errors are per thread.
    std::vector<int> ok(2, 0);
    auto body = [&](int id) {
        std::vector<float> in(8 * 256, 1.0f), out(8);
        std::vector<unsigned> dl(64);
        for (int it = 0; it < 20; ++it) {
            Params p{};
            if (id == 1 && it % 5 == 0) {
                p.b[0] = addr(dl);
                if (launch("k_deadlock", 1, 1, 1, 64, 1, 1, p) != MINFER_EMU_ERR_DEADLOCK) return;
                if (!std::strstr(emu_error(), "deadlock")) return;
                continue;
            }
            p.b[0] = addr(in);
            p.b[1] = addr(out);
            if (launch("k_reduce_shared", 8, 1, 1, 256, 1, 1, p) != MINFER_EMU_OK) return;
            if (emu_error()[0] != 0) return;
            for (float v : out)
                if (v != 256.0f) return;
        }
        ok[id] = 1;
    };
    std::thread t0(body, 0), t1(body, 1);
    t0.join();
    t1.join();
    CHECK(ok[0] && ok[1], "thread results %d %d", ok[0], ok[1]);
}

void test_printf() {
    Params p{};
    std::fflush(stdout);
    int rc = launch("k_printf", 2, 1, 1, 64, 1, 1, p);
    std::fflush(stdout);
    CHECK(rc == MINFER_EMU_OK, "rc %d: %s", rc, emu_error());
}

void bench() {
    const unsigned blocks = 512;
    std::vector<float> in(blocks * 256, 1.0f), out(blocks);
    Params p{};
    p.b[0] = addr(in);
    p.b[1] = addr(out);
    launch("k_bench", blocks, 1, 1, 256, 1, 1, p); // warm up (stacks, threads)
    auto t0 = std::chrono::steady_clock::now();
    const int reps = 4;
    for (int r = 0; r < reps; ++r) {
        int rc = launch("k_bench", blocks, 1, 1, 256, 1, 1, p);
        CHECK(rc == MINFER_EMU_OK, "rc %d: %s", rc, emu_error());
    }
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    CHECK(out[0] == 256.0f * 36, "bench result %g", out[0]);
    // Per thread and repetition: 8 x (5 shuffles + 2 __syncthreads) + 8 x 5 shuffles (warp 0).
    std::printf("  %d launches of %u blocks x 256 threads: %.1f ms per launch, %.0f ns per "
                "thread per launch\n",
                reps, blocks, 1e3 * s / reps, 1e9 * s / reps / (blocks * 256.0));
}

} // namespace

// Usage: test_emu [library [name filter]]
int main(int argc, char** argv) {
    const char* path = argc > 1 ? argv[1] : "./libminfer_emu_test.so";
    lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        std::fprintf(stderr, "dlopen %s: %s\n", path, dlerror());
        return 2;
    }
    emu_launch = (decltype(emu_launch))dlsym(lib, "minfer_emu_launch");
    emu_error = (decltype(emu_error))dlsym(lib, "minfer_emu_error");
    emu_set_threads = (decltype(emu_set_threads))dlsym(lib, "minfer_emu_set_threads");
    if (!emu_launch || !emu_error || !emu_set_threads) {
        std::fprintf(stderr, "%s lacks the minfer_emu_ C ABI\n", path);
        return 2;
    }
    const struct {
        const char* name;
        void (*fn)();
    } tests[] = {
        {"shared-memory tree reduction, 256 threads, 1/2/4 OS threads", test_reduce_shared},
        {"warp-shuffle butterfly sum", test_warp_butterfly},
        {"two warps of shuffles in a block of 64", test_two_warps},
        {"shuffle edge lanes, segments, partial warp", test_shfl_edges},
        {"votes and counted block barriers, blocks of 80, 1024 and 1 threads", test_votes},
        {"3-D grid of 3-D blocks, every element", test_grid_index},
        {"deadlock is reported, not hung", test_deadlock},
        {"barriers after an early return", test_early_return},
        {"__dp4a against a reference", test_dp4a},
        {"mma.sync m16n8k16 s8 fragments against a reference", test_mma},
        {"mma.sync m16n8k4 / m16n8k8 tf32, three products, against a reference", test_mma_tf32},
        {"ldmatrix x4, x2, x1 lanes and rows", test_ldmatrix},
        {"atomics from 64 blocks on 4 OS threads", test_atomics},
        {"integer and float intrinsics", test_intrinsics},
        {"f16 and bf16 conversions", test_half},
        {"printf in a kernel", test_printf},
        {"launch and kernel errors", test_errors},
        {"concurrent launches from two host threads", test_concurrent_launches},
        {"timing", bench},
    };
    const char* only = argc > 2 ? argv[2] : nullptr; // runs the tests whose name has it
    for (const auto& t : tests) {
        if (only && !std::strstr(t.name, only)) continue;
        int before = failures;
        std::printf("%s\n", t.name);
        t.fn();
        std::printf("  %s\n", failures == before ? "ok" : "FAILED");
    }
    std::printf("%s: %d failure(s)\n", failures ? "FAILED" : "PASSED", failures);
    return failures ? 1 : 0;
}

#else
#error "build with -include cuda/emu/emu.h (kernels) or -DMINFER_EMU_TEST_HOST (host); see build.sh"
#endif
