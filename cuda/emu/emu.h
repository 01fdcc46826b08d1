// CPU emulation of the CUDA C++ device dialect the kernels of cuda/ are written in.
//
// Force-included first (`g++ -include cuda/emu/emu.h -x c++ cuda/<op>.cu`), this header turns a
// kernel file into ordinary C++17: the CUDA qualifiers disappear, `__shared__` variables become
// per-OS-thread statics, and the built-in variables, barriers, warp operations and intrinsics
// are provided here and in emu.cpp, whose launcher runs a kernel over a grid (see
// minfer_emu_launch below and README.md).
//
// Execution model: one OS thread runs one block at a time, each CUDA thread of the block being a
// cooperative fiber that runs until it reaches a barrier (__syncthreads, __syncwarp, a shuffle
// or vote) or returns. So `static thread_local` storage is per-block shared memory, plain loads
// and stores between the threads of a block need no atomics, and a warp operation is "write my
// lane's value, wait for the warp, read the others'".
//
// Never define __CUDA_ARCH__ or __CUDACC_RTC__ here: kernels guard inline PTX with them.
// MINFER_CUDA_EMU tells a kernel it runs under this emulation.
//
// A host program that only calls the launcher defines MINFER_EMU_ABI_ONLY before including this
// header: it then declares the C ABI alone.

#ifndef MINFER_CUDA_EMU_H
#define MINFER_CUDA_EMU_H

// ---------------------------------------------------------------------------------------------
// C ABI of the launcher (emu.cpp).
// ---------------------------------------------------------------------------------------------

extern "C" {
// Error codes of minfer_emu_launch.
enum {
    MINFER_EMU_OK = 0,
    MINFER_EMU_ERR_CONFIG = 1,   // invalid launch: null kernel, empty or oversized grid or block
    MINFER_EMU_ERR_DEADLOCK = 2, // the threads of a block wait at barriers none can release
    MINFER_EMU_ERR_KERNEL = 3,   // the kernel threw, trapped, or used an unsupported warp mask
    MINFER_EMU_ERR_SYSTEM = 4,   // out of memory for fiber stacks, thread creation failed
};

// Runs `kernel` (an `extern "C" void NAME(const Params p)` of 128-byte Params) over a grid of
// grid[0..3] blocks of block[0..3] threads, as CUDA would, and returns MINFER_EMU_OK or an error
// code whose message minfer_emu_error() returns. Launches are serialised process-wide.
int minfer_emu_launch(void* kernel, const unsigned grid[3], const unsigned block[3],
                      const void* params);
// The message of the calling thread's last failed launch ("" if none).
const char* minfer_emu_error(void);
// OS threads that run blocks (0: std::thread::hardware_concurrency()); applies to later launches.
void minfer_emu_set_threads(unsigned n);
}

#ifndef MINFER_EMU_ABI_ONLY
// The rest is the device dialect.

#define MINFER_CUDA_EMU 1

#include <cassert>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <type_traits>
// The C++ wrappers of the C headers also bring the float overloads (`sqrt(float)`, `abs`,
// `isnan`...) into the global namespace, where CUDA device code finds them unqualified.
#include <math.h>
#include <stdlib.h>

// ---------------------------------------------------------------------------------------------
// Qualifiers.
// ---------------------------------------------------------------------------------------------

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __launch_bounds__(...)
#define __grid_constant__
// Per-block shared memory: one OS thread runs one block at a time (see the top of this file).
// `extern __shared__` (dynamic shared memory) is therefore a compile error, by design.
#define __shared__ static thread_local
// Constant memory is ordinary read-only data; `inline` (a C++17 inline variable) lets a header
// define a table once for all the kernel files linked together, and composes with `static`.
#define __constant__ inline
#define __managed__
#define __align__(n) __attribute__((aligned(n)))
// Not `__noinline__`: libstdc++ spells the GCC attribute that way, and redefining it would break
// standard headers included after this one.

// ---------------------------------------------------------------------------------------------
// Built-in types and variables.
// ---------------------------------------------------------------------------------------------

// The vector types, with CUDA's alignments, and their make_ functions.
#define MINFER_EMU_VECTOR_TYPES(N, T, A2, A4)                                                 \
    struct N##1 { T x; };                                                                      \
    struct __attribute__((aligned(A2))) N##2 { T x, y; };                                      \
    struct N##3 { T x, y, z; };                                                                \
    struct __attribute__((aligned(A4))) N##4 { T x, y, z, w; };                                \
    inline N##1 make_##N##1(T x) { return N##1{x}; }                                           \
    inline N##2 make_##N##2(T x, T y) { return N##2{x, y}; }                                   \
    inline N##3 make_##N##3(T x, T y, T z) { return N##3{x, y, z}; }                           \
    inline N##4 make_##N##4(T x, T y, T z, T w) { return N##4{x, y, z, w}; }

MINFER_EMU_VECTOR_TYPES(char, signed char, 2, 4)
MINFER_EMU_VECTOR_TYPES(uchar, unsigned char, 2, 4)
MINFER_EMU_VECTOR_TYPES(short, short, 4, 8)
MINFER_EMU_VECTOR_TYPES(ushort, unsigned short, 4, 8)
MINFER_EMU_VECTOR_TYPES(int, int, 8, 16)
MINFER_EMU_VECTOR_TYPES(uint, unsigned int, 8, 16)
MINFER_EMU_VECTOR_TYPES(long, long, 2 * sizeof(long), 16)
MINFER_EMU_VECTOR_TYPES(ulong, unsigned long, 2 * sizeof(long), 16)
MINFER_EMU_VECTOR_TYPES(longlong, long long, 16, 16)
MINFER_EMU_VECTOR_TYPES(ulonglong, unsigned long long, 16, 16)
MINFER_EMU_VECTOR_TYPES(float, float, 8, 16)
MINFER_EMU_VECTOR_TYPES(double, double, 16, 16)
#undef MINFER_EMU_VECTOR_TYPES

struct dim3 {
    unsigned int x, y, z;
    constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1)
        : x(vx), y(vy), z(vz) {}
    constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
    constexpr operator uint3() const { return uint3{x, y, z}; }
};

// The emulation's own symbols stay inside the shared library: direct calls, no interposition.
#define MINFER_EMU_INTERNAL __attribute__((visibility("hidden")))

// Set by the launcher for the fiber it resumes (threadIdx) and the block it runs (the others).
// `__thread`, not `thread_local`: trivially initialised, so accesses need no TLS wrapper call.
extern __thread MINFER_EMU_INTERNAL uint3 threadIdx;
extern __thread MINFER_EMU_INTERNAL uint3 blockIdx;
extern __thread MINFER_EMU_INTERNAL dim3 blockDim;
extern __thread MINFER_EMU_INTERNAL dim3 gridDim;
constexpr int warpSize = 32;

// ---------------------------------------------------------------------------------------------
// Barriers and warp exchange (emu.cpp).
// ---------------------------------------------------------------------------------------------

namespace minfer_emu {

// What a warp exchange returns: every lane's 64-bit value as written for this exchange, the
// lanes that took part (those that exist and have not returned), and the caller's lane.
struct WarpView {
    const unsigned long long* slot; // slot[lane]: valid where `present` has the lane's bit
    unsigned present;
    unsigned lane;
};

// Writes `bits` to the caller's exchange slot, waits until every live lane of the warp has
// done the same, and returns the slots. `mask` must cover the warp's live lanes once the lanes
// that return have returned (partial masks are not emulated: the launch fails with
// MINFER_EMU_ERR_KERNEL). The view stays valid until the caller's next warp operation.
MINFER_EMU_INTERNAL WarpView warp_exchange(unsigned mask, unsigned long long bits);
// The lanes of the caller's warp that exist and have not returned; no synchronisation.
MINFER_EMU_INTERNAL unsigned active_lanes();
// Block barrier; every live thread adds `pred != 0` to the counts it returns (for
// __syncthreads_count/_and/_or): `count` of the threads that arrived, how many had it set.
struct BlockVote {
    unsigned arrived;
    unsigned count;
};
MINFER_EMU_INTERNAL BlockVote sync_block(int pred);
// Aborts the launch with MINFER_EMU_ERR_KERNEL and `what` as the message (never returns).
[[noreturn]] MINFER_EMU_INTERNAL void fail(const char* what);

template <class T>
inline unsigned long long to_bits(T v) {
    static_assert(std::is_trivially_copyable<T>::value && sizeof(T) <= 8,
                  "warp operations take trivially copyable values of at most 8 bytes");
    unsigned long long bits = 0;
    std::memcpy(&bits, &v, sizeof(T));
    return bits;
}

template <class T>
inline T from_bits(unsigned long long bits) {
    T v;
    std::memcpy(&v, &bits, sizeof(T));
    return v;
}

// Lane `src`'s value of the exchange, or `own` where `src` is outside the warp or took no part
// (a lane of a partial last warp that does not exist, or one that has returned).
template <class T>
inline T lane_value(const WarpView& v, int src, T own) {
    if (src < 0 || src >= 32 || !(v.present >> src & 1u)) return own;
    return from_bits<T>(v.slot[src]);
}

} // namespace minfer_emu

inline void __syncthreads() { minfer_emu::sync_block(0); }
inline int __syncthreads_count(int pred) { return (int)minfer_emu::sync_block(pred).count; }
inline int __syncthreads_and(int pred) {
    minfer_emu::BlockVote v = minfer_emu::sync_block(pred);
    return v.count == v.arrived;
}
inline int __syncthreads_or(int pred) { return minfer_emu::sync_block(pred).count != 0; }
inline void __syncwarp(unsigned mask = 0xffffffffu) { minfer_emu::warp_exchange(mask, 0); }
inline unsigned __activemask() { return minfer_emu::active_lanes(); }

// Shuffles. `width` (a power of two up to 32) splits the warp into segments as in CUDA: the
// source lane is taken within the caller's segment (idx), and a source beyond the segment
// (down, xor) or before it (up) yields the caller's own value.
template <class T>
inline T __shfl_sync(unsigned mask, T var, int srcLane, int width = warpSize) {
    minfer_emu::WarpView v = minfer_emu::warp_exchange(mask, minfer_emu::to_bits(var));
    int src = (int)(v.lane & ~(unsigned)(width - 1)) | (srcLane & (width - 1));
    return minfer_emu::lane_value(v, src, var);
}

template <class T>
inline T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = warpSize) {
    minfer_emu::WarpView v = minfer_emu::warp_exchange(mask, minfer_emu::to_bits(var));
    int first = (int)(v.lane & ~(unsigned)(width - 1));
    int src = (int)v.lane - (int)delta;
    return src < first ? var : minfer_emu::lane_value(v, src, var);
}

template <class T>
inline T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = warpSize) {
    minfer_emu::WarpView v = minfer_emu::warp_exchange(mask, minfer_emu::to_bits(var));
    int last = (int)(v.lane | (unsigned)(width - 1));
    long long src = (long long)v.lane + delta;
    return src > last ? var : minfer_emu::lane_value(v, (int)src, var);
}

template <class T>
inline T __shfl_xor_sync(unsigned mask, T var, int laneMask, int width = warpSize) {
    minfer_emu::WarpView v = minfer_emu::warp_exchange(mask, minfer_emu::to_bits(var));
    int last = (int)(v.lane | (unsigned)(width - 1));
    int src = (int)v.lane ^ laneMask;
    return src > last ? var : minfer_emu::lane_value(v, src, var);
}

// Votes over the lanes that take part.
inline unsigned __ballot_sync(unsigned mask, int pred) {
    minfer_emu::WarpView v = minfer_emu::warp_exchange(mask, pred != 0);
    unsigned ballot = 0;
    for (unsigned l = 0; l < 32; ++l)
        if ((v.present >> l & 1u) && v.slot[l]) ballot |= 1u << l;
    return ballot;
}
inline int __all_sync(unsigned mask, int pred) {
    minfer_emu::WarpView v = minfer_emu::warp_exchange(mask, pred != 0);
    for (unsigned l = 0; l < 32; ++l)
        if ((v.present >> l & 1u) && !v.slot[l]) return 0;
    return 1;
}
inline int __any_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) != 0; }

// The lanes holding the same value as the caller (__match_any_sync), or all lanes if every lane
// holds the same value, else 0 (__match_all_sync, which also sets *pred).
template <class T>
inline unsigned __match_any_sync(unsigned mask, T value) {
    minfer_emu::WarpView v = minfer_emu::warp_exchange(mask, minfer_emu::to_bits(value));
    unsigned m = 0;
    for (unsigned l = 0; l < 32; ++l)
        if ((v.present >> l & 1u) && v.slot[l] == v.slot[v.lane]) m |= 1u << l;
    return m;
}
template <class T>
inline unsigned __match_all_sync(unsigned mask, T value, int* pred) {
    unsigned m = __match_any_sync(mask, value);
    unsigned all = minfer_emu::active_lanes();
    *pred = m == all;
    return m == all ? m : 0u;
}

// Warp reductions (sm_80).
#define MINFER_EMU_WARP_REDUCE(NAME, T, INIT, OP)                                             \
    inline T NAME(unsigned mask, T value) {                                                    \
        minfer_emu::WarpView v = minfer_emu::warp_exchange(mask, minfer_emu::to_bits(value)); \
        T acc = INIT;                                                                          \
        for (unsigned l = 0; l < 32; ++l)                                                      \
            if (v.present >> l & 1u) {                                                         \
                T x = minfer_emu::from_bits<T>(v.slot[l]);                                     \
                acc = OP;                                                                      \
            }                                                                                  \
        return acc;                                                                            \
    }
MINFER_EMU_WARP_REDUCE(__reduce_add_sync, unsigned, 0u, acc + x)
MINFER_EMU_WARP_REDUCE(__reduce_add_sync, int, 0, (int)((unsigned)acc + (unsigned)x))
MINFER_EMU_WARP_REDUCE(__reduce_min_sync, unsigned, 0xffffffffu, x < acc ? x : acc)
MINFER_EMU_WARP_REDUCE(__reduce_min_sync, int, 0x7fffffff, x < acc ? x : acc)
MINFER_EMU_WARP_REDUCE(__reduce_max_sync, unsigned, 0u, x > acc ? x : acc)
MINFER_EMU_WARP_REDUCE(__reduce_max_sync, int, (-0x7fffffff - 1), x > acc ? x : acc)
MINFER_EMU_WARP_REDUCE(__reduce_and_sync, unsigned, 0xffffffffu, acc & x)
MINFER_EMU_WARP_REDUCE(__reduce_or_sync, unsigned, 0u, acc | x)
MINFER_EMU_WARP_REDUCE(__reduce_xor_sync, unsigned, 0u, acc ^ x)
#undef MINFER_EMU_WARP_REDUCE

// ---------------------------------------------------------------------------------------------
// Memory: fences, atomics, cache-hinted loads and stores.
// ---------------------------------------------------------------------------------------------

// Blocks on different OS threads are really concurrent: fences and atomics are real ones.
// (Sequentially consistent: on x86-64 a locked read-modify-write costs the same either way.)
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_system() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_block() { __atomic_signal_fence(__ATOMIC_SEQ_CST); }

#define MINFER_EMU_ATOMIC_RMW(NAME, BUILTIN, T)                                                \
    inline T NAME(T* address, T val) { return BUILTIN(address, val, __ATOMIC_SEQ_CST); }
MINFER_EMU_ATOMIC_RMW(atomicAdd, __atomic_fetch_add, int)
MINFER_EMU_ATOMIC_RMW(atomicAdd, __atomic_fetch_add, unsigned int)
MINFER_EMU_ATOMIC_RMW(atomicAdd, __atomic_fetch_add, unsigned long long)
MINFER_EMU_ATOMIC_RMW(atomicSub, __atomic_fetch_sub, int)
MINFER_EMU_ATOMIC_RMW(atomicSub, __atomic_fetch_sub, unsigned int)
MINFER_EMU_ATOMIC_RMW(atomicExch, __atomic_exchange_n, int)
MINFER_EMU_ATOMIC_RMW(atomicExch, __atomic_exchange_n, unsigned int)
MINFER_EMU_ATOMIC_RMW(atomicExch, __atomic_exchange_n, unsigned long long)
MINFER_EMU_ATOMIC_RMW(atomicAnd, __atomic_fetch_and, int)
MINFER_EMU_ATOMIC_RMW(atomicAnd, __atomic_fetch_and, unsigned int)
MINFER_EMU_ATOMIC_RMW(atomicAnd, __atomic_fetch_and, unsigned long long)
MINFER_EMU_ATOMIC_RMW(atomicOr, __atomic_fetch_or, int)
MINFER_EMU_ATOMIC_RMW(atomicOr, __atomic_fetch_or, unsigned int)
MINFER_EMU_ATOMIC_RMW(atomicOr, __atomic_fetch_or, unsigned long long)
MINFER_EMU_ATOMIC_RMW(atomicXor, __atomic_fetch_xor, int)
MINFER_EMU_ATOMIC_RMW(atomicXor, __atomic_fetch_xor, unsigned int)
MINFER_EMU_ATOMIC_RMW(atomicXor, __atomic_fetch_xor, unsigned long long)
#undef MINFER_EMU_ATOMIC_RMW

namespace minfer_emu {
// Atomically replaces *address by f(*address) with a compare-and-swap loop on its bit pattern;
// returns the old value.
template <class T, class F>
inline T atomic_update(T* address, F f) {
    using Bits = typename std::conditional<sizeof(T) == 4, unsigned, unsigned long long>::type;
    static_assert(sizeof(T) == sizeof(Bits), "4- or 8-byte atomics only");
    Bits* p = reinterpret_cast<Bits*>(address);
    Bits old = __atomic_load_n(p, __ATOMIC_RELAXED);
    for (;;) {
        T cur;
        std::memcpy(&cur, &old, sizeof(T));
        T next = f(cur);
        Bits want;
        std::memcpy(&want, &next, sizeof(T));
        if (__atomic_compare_exchange_n(p, &old, want, true, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED))
            return cur;
    }
}
} // namespace minfer_emu

inline float atomicAdd(float* address, float val) {
    return minfer_emu::atomic_update(address, [val](float x) { return x + val; });
}
inline double atomicAdd(double* address, double val) {
    return minfer_emu::atomic_update(address, [val](double x) { return x + val; });
}
inline float atomicExch(float* address, float val) {
    return minfer_emu::atomic_update(address, [val](float) { return val; });
}
#define MINFER_EMU_ATOMIC_MINMAX(T)                                                           \
    inline T atomicMin(T* address, T val) {                                                    \
        return minfer_emu::atomic_update(address, [val](T x) { return val < x ? val : x; });   \
    }                                                                                          \
    inline T atomicMax(T* address, T val) {                                                    \
        return minfer_emu::atomic_update(address, [val](T x) { return val > x ? val : x; });   \
    }
MINFER_EMU_ATOMIC_MINMAX(int)
MINFER_EMU_ATOMIC_MINMAX(unsigned int)
MINFER_EMU_ATOMIC_MINMAX(long long)
MINFER_EMU_ATOMIC_MINMAX(unsigned long long)
#undef MINFER_EMU_ATOMIC_MINMAX
// ((old >= val) ? 0 : old + 1) and (((old == 0) || (old > val)) ? val : old - 1), as in CUDA.
inline unsigned atomicInc(unsigned* address, unsigned val) {
    return minfer_emu::atomic_update(address, [val](unsigned x) { return x >= val ? 0u : x + 1; });
}
inline unsigned atomicDec(unsigned* address, unsigned val) {
    return minfer_emu::atomic_update(address,
                                     [val](unsigned x) { return x == 0 || x > val ? val : x - 1; });
}
#define MINFER_EMU_ATOMIC_CAS(T)                                                              \
    inline T atomicCAS(T* address, T compare, T val) {                                         \
        __atomic_compare_exchange_n(address, &compare, val, false, __ATOMIC_SEQ_CST,           \
                                    __ATOMIC_SEQ_CST);                                         \
        return compare; /* the old value either way */                                        \
    }
MINFER_EMU_ATOMIC_CAS(int)
MINFER_EMU_ATOMIC_CAS(unsigned int)
MINFER_EMU_ATOMIC_CAS(unsigned long long)
MINFER_EMU_ATOMIC_CAS(unsigned short)
#undef MINFER_EMU_ATOMIC_CAS

// Cache-hinted loads and stores are plain ones here.
template <class T> inline T __ldg(const T* p) { return *p; }
template <class T> inline T __ldca(const T* p) { return *p; }
template <class T> inline T __ldcg(const T* p) { return *p; }
template <class T> inline T __ldcs(const T* p) { return *p; }
template <class T> inline T __ldlu(const T* p) { return *p; }
template <class T> inline T __ldcv(const T* p) { return *p; }
template <class T> inline void __stwb(T* p, T v) { *p = v; }
template <class T> inline void __stcg(T* p, T v) { *p = v; }
template <class T> inline void __stcs(T* p, T v) { *p = v; }
template <class T> inline void __stwt(T* p, T v) { *p = v; }

// ---------------------------------------------------------------------------------------------
// Integer intrinsics.
// ---------------------------------------------------------------------------------------------

// Four 8-bit products (signed or unsigned lanes) summed into c, wrapping like the hardware.
inline int __dp4a(int a, int b, int c) {
    unsigned acc = (unsigned)c;
    for (int i = 0; i < 32; i += 8)
        acc += (unsigned)((int)(signed char)(a >> i) * (int)(signed char)(b >> i));
    return (int)acc;
}
inline unsigned __dp4a(unsigned a, unsigned b, unsigned c) {
    for (int i = 0; i < 32; i += 8) c += ((a >> i) & 0xffu) * ((b >> i) & 0xffu);
    return c;
}
inline int __dp4a(char4 a, char4 b, int c) {
    int ia, ib;
    std::memcpy(&ia, &a, 4);
    std::memcpy(&ib, &b, 4);
    return __dp4a(ia, ib, c);
}
inline unsigned __dp4a(uchar4 a, uchar4 b, unsigned c) {
    unsigned ua, ub;
    std::memcpy(&ua, &a, 4);
    std::memcpy(&ub, &b, 4);
    return __dp4a(ua, ub, c);
}

// ---------------------------------------------------------------------------------------------
// Warp matrix products.
// ---------------------------------------------------------------------------------------------

namespace minfer_emu {

// mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32: D (16 × 8, s32) += A (16 × 16, s8) · B
// (16 × 8, s8) over the whole warp, each lane holding the fragments PTX assigns it. With
// g = lane / 4 and t = lane % 4: a0 holds A[g][4t .. 4t + 3], a1 A[g + 8][4t .. 4t + 3] (element
// i in byte i); b0 holds B[4t .. 4t + 3][g]; d[0], d[1] are D[g][2t], D[g][2t + 1] and d[2], d[3]
// the same columns of row g + 8. The whole warp must take part.
inline void mma_s8_m16n8k16(int (&d)[4], unsigned a0, unsigned a1, unsigned b0) {
    WarpView va = warp_exchange(0xffffffffu, (unsigned long long)a1 << 32 | a0);
    if (va.present != 0xffffffffu) fail("mma.sync needs all 32 lanes of the warp");
    unsigned long long a[32];
    std::memcpy(a, va.slot, sizeof a);
    WarpView vb = warp_exchange(0xffffffffu, b0);
    const unsigned g = vb.lane / 4, t = vb.lane % 4;
    for (unsigned i = 0; i < 4; ++i) {
        const unsigned row = g + (i >= 2 ? 8u : 0u), col = 2 * t + (i & 1u);
        unsigned acc = (unsigned)d[i];
        for (unsigned kk = 0; kk < 16; ++kk) {
            const unsigned long long aw = a[(row % 8) * 4 + kk / 4];
            const unsigned ar = row >= 8 ? (unsigned)(aw >> 32) : (unsigned)aw;
            const unsigned br = (unsigned)vb.slot[col * 4 + kk / 4];
            const int av = (signed char)(ar >> (8 * (kk % 4)));
            const int bv = (signed char)(br >> (8 * (kk % 4)));
            acc += (unsigned)(av * bv);
        }
        d[i] = (int)acc;
    }
}

// mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32: D (16 × 8, f32) += A (16 × 16, f16) · B
// (16 × 8, f16). With g = lane / 4 and t = lane % 4: a[0] holds A[g][2t .. 2t + 1], a[1]
// A[g + 8][2t ..], a[2] A[g][2t + 8 ..], a[3] A[g + 8][2t + 8 ..] (the lower column in the low
// half); b0 holds B[2t .. 2t + 1][g], b1 B[2t + 8 .. 2t + 9][g]; d as for mma_s8_m16n8k16. The
// products are exact in f32 and added in k order (the hardware's order is unspecified).
inline float f16_bits_to_f32(unsigned short h);
inline void mma_f16_m16n8k16(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    unsigned long long lo = (unsigned long long)a[1] << 32 | a[0];
    unsigned long long hi = (unsigned long long)a[3] << 32 | a[2];
    WarpView va = warp_exchange(0xffffffffu, lo);
    if (va.present != 0xffffffffu) fail("mma.sync needs all 32 lanes of the warp");
    unsigned long long al[32];
    std::memcpy(al, va.slot, sizeof al);
    WarpView vh = warp_exchange(0xffffffffu, hi);
    unsigned long long ah[32];
    std::memcpy(ah, vh.slot, sizeof ah);
    WarpView vb = warp_exchange(0xffffffffu, (unsigned long long)b1 << 32 | b0);
    const unsigned g = vb.lane / 4, t = vb.lane % 4;
    // A[row][k] and B[k][col] as floats.
    auto a_at = [&](unsigned row, unsigned k) {
        const unsigned owner = (row % 8) * 4 + (k % 8) / 2;
        const unsigned long long w = k >= 8 ? ah[owner] : al[owner];
        const unsigned word = row >= 8 ? (unsigned)(w >> 32) : (unsigned)w;
        return f16_bits_to_f32((unsigned short)(word >> (16 * (k % 2))));
    };
    auto b_at = [&](unsigned k, unsigned col) {
        const unsigned long long w = vb.slot[col * 4 + (k % 8) / 2];
        const unsigned word = k >= 8 ? (unsigned)(w >> 32) : (unsigned)w;
        return f16_bits_to_f32((unsigned short)(word >> (16 * (k % 2))));
    };
    for (unsigned i = 0; i < 4; ++i) {
        const unsigned row = g + (i >= 2 ? 8u : 0u), col = 2 * t + (i & 1u);
        float acc = d[i];
        for (unsigned k = 0; k < 16; ++k) {
            acc += a_at(row, k) * b_at(k, col);
        }
        d[i] = acc;
    }
}


// The tf32 value the tensor cores read from a float's bits: its upper 19 (sign, exponent, ten
// fraction bits); the lower 13 are ignored.
inline float tf32_of(unsigned w) {
    w &= 0xffffe000u;
    float x;
    std::memcpy(&x, &w, 4);
    return x;
}

// Three mma.sync.aligned.m16n8k{K}.row.col.f32.tf32.tf32.f32 (K 4 or 8) in turn: D (16 × 8,
// f32) += Al · Bh, then Ah · Bl, then Ah · Bh, where A = Ah + Al (16 × K) and B = Bh + Bl (K × 8)
// are floats split into tf32 parts. With g = lane / 4 and t = lane % 4: ah[0], al[0] hold
// A[g][t], [1] A[g + 8][t], and for K 8 [2] A[g][t + 4], [3] A[g + 8][t + 4]; bh[0], bl[0] hold
// B[t][g], for K 8 [1] B[t + 4][g]; d as for mma_s8_m16n8k16. Each input is read as tf32
// (tf32_of), so the products are exact in f32; each product's terms are added to D in k order
// (the hardware's order within one instruction is unspecified).
template <unsigned K>
inline void mma_tf32x3_m16n8(float (&d)[4], const unsigned (&ah)[K / 2], const unsigned (&al)[K / 2],
                             const unsigned (&bh)[K / 4], const unsigned (&bl)[K / 4]) {
    static_assert(K == 4 || K == 8, "m16n8k4 or m16n8k8");
    // a[i][lane]: (hi, lo) of the lane's fragment register i; b[i][lane] likewise.
    unsigned long long a[K / 2][32], b[K / 4][32];
    unsigned lane = 0;
    for (unsigned i = 0; i < K / 2; ++i) {
        WarpView v = warp_exchange(0xffffffffu, (unsigned long long)al[i] << 32 | ah[i]);
        if (v.present != 0xffffffffu) fail("mma.sync needs all 32 lanes of the warp");
        std::memcpy(a[i], v.slot, sizeof a[i]);
        lane = v.lane;
    }
    for (unsigned i = 0; i < K / 4; ++i) {
        WarpView v = warp_exchange(0xffffffffu, (unsigned long long)bl[i] << 32 | bh[i]);
        std::memcpy(b[i], v.slot, sizeof b[i]);
    }
    const unsigned g = lane / 4, t = lane % 4;
    // A[row][k] and B[k][col], part p (0: hi, 1: lo).
    auto a_at = [&](unsigned row, unsigned k, unsigned p) {
        const unsigned long long w = a[(row >= 8 ? 1u : 0u) + (k >= 4 ? 2u : 0u)][(row % 8) * 4 + k % 4];
        return tf32_of((unsigned)(w >> (32 * p)));
    };
    auto b_at = [&](unsigned k, unsigned col, unsigned p) {
        const unsigned long long w = b[k / 4][col * 4 + k % 4];
        return tf32_of((unsigned)(w >> (32 * p)));
    };
    static const unsigned parts[3][2] = {{1, 0}, {0, 1}, {0, 0}};
    for (unsigned i = 0; i < 4; ++i) {
        const unsigned row = g + (i >= 2 ? 8u : 0u), col = 2 * t + (i & 1u);
        float acc = d[i];
        for (const auto& pp : parts) {
            for (unsigned k = 0; k < K; ++k) {
                acc += a_at(row, k, pp[0]) * b_at(k, col, pp[1]);
            }
        }
        d[i] = acc;
    }
}

// ldmatrix.sync.aligned.m8n8.x{N}.shared.b16 (N 1, 2 or 4): N matrices of 8 rows × 16 bytes;
// row i of matrix j starts at the address lane 8j + i passes (`row`). Each lane receives, for
// each matrix j, the 4-byte word lane % 4 of its row lane / 4 in r[j]. The whole warp must take
// part.
template <unsigned N>
inline void ldmatrix(unsigned (&r)[N], const void* row) {
    static_assert(N == 1 || N == 2 || N == 4, "ldmatrix takes 1, 2 or 4 matrices");
    WarpView v = warp_exchange(0xffffffffu, (unsigned long long)(uintptr_t)row);
    if (v.present != 0xffffffffu) fail("ldmatrix needs all 32 lanes of the warp");
    for (unsigned j = 0; j < N; ++j) {
        const unsigned char* at = (const unsigned char*)(uintptr_t)v.slot[8 * j + v.lane / 4];
        if ((uintptr_t)at % 16 != 0) fail("ldmatrix rows must be 16-byte aligned");
        std::memcpy(&r[j], at + 4 * (v.lane % 4), 4);
    }
}

} // namespace minfer_emu

inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned)x); }
inline int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll((unsigned long long)x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline unsigned __brev(unsigned x) {
    x = (x >> 1 & 0x55555555u) | (x & 0x55555555u) << 1;
    x = (x >> 2 & 0x33333333u) | (x & 0x33333333u) << 2;
    x = (x >> 4 & 0x0f0f0f0fu) | (x & 0x0f0f0f0fu) << 4;
    return __builtin_bswap32(x);
}
inline unsigned long long __brevll(unsigned long long x) {
    return (unsigned long long)__brev((unsigned)x) << 32 | __brev((unsigned)(x >> 32));
}
// Byte n of the result is byte (s >> 4n) & 7 of the 8-byte value y:x.
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
    unsigned long long v = (unsigned long long)y << 32 | x;
    unsigned r = 0;
    for (int n = 0; n < 4; ++n) r |= (unsigned)(v >> (8 * ((s >> (4 * n)) & 7)) & 0xffu) << (8 * n);
    return r;
}
// hi:lo shifted left (right) by shift & 31, or by min(shift, 32) for the _c forms: the high
// (low) 32 bits.
inline unsigned __funnelshift_l(unsigned lo, unsigned hi, unsigned shift) {
    return (unsigned)(((unsigned long long)hi << 32 | lo) << (shift & 31) >> 32);
}
inline unsigned __funnelshift_lc(unsigned lo, unsigned hi, unsigned shift) {
    return (unsigned)(((unsigned long long)hi << 32 | lo) << (shift < 32 ? shift : 32) >> 32);
}
inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned shift) {
    return (unsigned)(((unsigned long long)hi << 32 | lo) >> (shift & 31));
}
inline unsigned __funnelshift_rc(unsigned lo, unsigned hi, unsigned shift) {
    return (unsigned)(((unsigned long long)hi << 32 | lo) >> (shift < 32 ? shift : 32));
}
inline int __mulhi(int a, int b) { return (int)((long long)a * b >> 32); }
inline unsigned __umulhi(unsigned a, unsigned b) {
    return (unsigned)((unsigned long long)a * b >> 32);
}
inline long long __mul64hi(long long a, long long b) { return (long long)((__int128)a * b >> 64); }
inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
    return (unsigned long long)((unsigned __int128)a * b >> 64);
}
inline int __mul24(int a, int b) {
    return (int)((unsigned)((a << 8) >> 8) * (unsigned)((b << 8) >> 8));
}
inline unsigned __umul24(unsigned a, unsigned b) { return (a & 0xffffffu) * (b & 0xffffffu); }

// SIMD video intrinsics over the four bytes of a word (ss: signed saturating, us: unsigned
// saturating; comparisons give 0xff per true byte).
namespace minfer_emu {
template <class F>
inline unsigned bytewise(unsigned a, unsigned b, F f) {
    unsigned r = 0;
    for (int i = 0; i < 32; i += 8) r |= ((unsigned)f(a >> i & 0xffu, b >> i & 0xffu) & 0xffu) << i;
    return r;
}
inline int sbyte(unsigned x) { return (int)(signed char)x; }
inline int sat_s8(int x) { return x < -128 ? -128 : x > 127 ? 127 : x; }
inline int sat_u8(int x) { return x < 0 ? 0 : x > 255 ? 255 : x; }
} // namespace minfer_emu
#define MINFER_EMU_VOP4(NAME, EXPR)                                                           \
    inline unsigned NAME(unsigned a, unsigned b) {                                             \
        using namespace minfer_emu;                                                            \
        return bytewise(a, b, [](unsigned x, unsigned y) { return (unsigned)(EXPR); });        \
    }
MINFER_EMU_VOP4(__vadd4, x + y)
MINFER_EMU_VOP4(__vsub4, x - y)
MINFER_EMU_VOP4(__vaddss4, sat_s8(sbyte(x) + sbyte(y)))
MINFER_EMU_VOP4(__vsubss4, sat_s8(sbyte(x) - sbyte(y)))
MINFER_EMU_VOP4(__vaddus4, sat_u8((int)x + (int)y))
MINFER_EMU_VOP4(__vsubus4, sat_u8((int)x - (int)y))
MINFER_EMU_VOP4(__vmaxs4, sbyte(x) > sbyte(y) ? x : y)
MINFER_EMU_VOP4(__vmins4, sbyte(x) < sbyte(y) ? x : y)
MINFER_EMU_VOP4(__vmaxu4, x > y ? x : y)
MINFER_EMU_VOP4(__vminu4, x < y ? x : y)
MINFER_EMU_VOP4(__vcmpeq4, x == y ? 0xffu : 0u)
MINFER_EMU_VOP4(__vcmpne4, x != y ? 0xffu : 0u)
MINFER_EMU_VOP4(__vabsdiffs4, sbyte(x) > sbyte(y) ? sbyte(x) - sbyte(y) : sbyte(y) - sbyte(x))
MINFER_EMU_VOP4(__vabsdiffu4, x > y ? x - y : y - x)
#undef MINFER_EMU_VOP4

// min and max as CUDA declares them for device code: unqualified, and over mixed signedness
// the unsigned type wins.
#define MINFER_EMU_MINMAX(R, A, B)                                                            \
    inline R min(A a, B b) { return (R)a < (R)b ? (R)a : (R)b; }                               \
    inline R max(A a, B b) { return (R)a > (R)b ? (R)a : (R)b; }
MINFER_EMU_MINMAX(int, int, int)
MINFER_EMU_MINMAX(unsigned int, unsigned int, unsigned int)
MINFER_EMU_MINMAX(unsigned int, int, unsigned int)
MINFER_EMU_MINMAX(unsigned int, unsigned int, int)
MINFER_EMU_MINMAX(long, long, long)
MINFER_EMU_MINMAX(unsigned long, unsigned long, unsigned long)
MINFER_EMU_MINMAX(unsigned long, long, unsigned long)
MINFER_EMU_MINMAX(unsigned long, unsigned long, long)
MINFER_EMU_MINMAX(long long, long long, long long)
MINFER_EMU_MINMAX(unsigned long long, unsigned long long, unsigned long long)
MINFER_EMU_MINMAX(unsigned long long, long long, unsigned long long)
MINFER_EMU_MINMAX(unsigned long long, unsigned long long, long long)
#undef MINFER_EMU_MINMAX
inline float min(float a, float b) { return fminf(a, b); }
inline float max(float a, float b) { return fmaxf(a, b); }
inline double min(double a, double b) { return fmin(a, b); }
inline double max(double a, double b) { return fmax(a, b); }
inline double min(float a, double b) { return fmin(a, b); }
inline double max(float a, double b) { return fmax(a, b); }
inline double min(double a, float b) { return fmin(a, b); }
inline double max(double a, float b) { return fmax(a, b); }
inline unsigned umin(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned umax(unsigned a, unsigned b) { return a > b ? a : b; }
inline unsigned long long ullmin(unsigned long long a, unsigned long long b) {
    return a < b ? a : b;
}
inline unsigned long long ullmax(unsigned long long a, unsigned long long b) {
    return a > b ? a : b;
}
inline long long llmin(long long a, long long b) { return a < b ? a : b; }
inline long long llmax(long long a, long long b) { return a > b ? a : b; }

// ---------------------------------------------------------------------------------------------
// Floating-point intrinsics. The fast-math forms are computed exactly (more precisely than the
// hardware's approximations): tolerances written for the GPU hold here too.
// ---------------------------------------------------------------------------------------------

inline int __float_as_int(float x) { int i; std::memcpy(&i, &x, 4); return i; }
inline unsigned __float_as_uint(float x) { unsigned u; std::memcpy(&u, &x, 4); return u; }
inline float __int_as_float(int i) { float x; std::memcpy(&x, &i, 4); return x; }
inline float __uint_as_float(unsigned u) { float x; std::memcpy(&x, &u, 4); return x; }
inline long long __double_as_longlong(double x) { long long i; std::memcpy(&i, &x, 8); return i; }
inline double __longlong_as_double(long long i) { double x; std::memcpy(&x, &i, 8); return x; }

inline float __expf(float x) { return expf(x); }
inline float __exp10f(float x) { return exp10f(x); }
inline float __logf(float x) { return logf(x); }
inline float __log2f(float x) { return log2f(x); }
inline float __log10f(float x) { return log10f(x); }
inline float __powf(float x, float y) { return powf(x, y); }
inline float __sinf(float x) { return sinf(x); }
inline float __cosf(float x) { return cosf(x); }
inline float __tanf(float x) { return tanf(x); }
inline void __sincosf(float x, float* s, float* c) { *s = sinf(x); *c = cosf(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return sqrtf(x); }
inline float __frsqrt_rn(float x) { return 1.0f / sqrtf(x); }
inline float __saturatef(float x) { return x >= 1.0f ? 1.0f : x > 0.0f ? x : 0.0f; } // NaN -> 0
// CUDA's reciprocal roots, under other names: C23 adds rsqrt/rsqrtf to <math.h> with C linkage,
// which a C++ definition here would conflict with.
inline float minfer_emu_rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double minfer_emu_rsqrt(double x) { return 1.0 / sqrt(x); }
inline float minfer_emu_rcbrtf(float x) { return 1.0f / cbrtf(x); }
#define rsqrtf minfer_emu_rsqrtf
#define rsqrt minfer_emu_rsqrt
#define rcbrtf minfer_emu_rcbrtf

// Float to integer conversions saturate, and NaN converts to 0, as on the hardware.
namespace minfer_emu {
template <class I>
inline I saturate_to(double x) {
    if (x != x) return 0;
    if (x <= (double)std::numeric_limits<I>::min()) return std::numeric_limits<I>::min();
    if (x >= (double)std::numeric_limits<I>::max()) return std::numeric_limits<I>::max();
    return (I)x;
}
} // namespace minfer_emu
inline int __float2int_rn(float x) { return minfer_emu::saturate_to<int>(nearbyint((double)x)); }
inline int __float2int_rz(float x) { return minfer_emu::saturate_to<int>(trunc((double)x)); }
inline int __float2int_rd(float x) { return minfer_emu::saturate_to<int>(floor((double)x)); }
inline int __float2int_ru(float x) { return minfer_emu::saturate_to<int>(ceil((double)x)); }
inline unsigned __float2uint_rn(float x) {
    return minfer_emu::saturate_to<unsigned>(nearbyint((double)x));
}
inline unsigned __float2uint_rz(float x) {
    return minfer_emu::saturate_to<unsigned>(trunc((double)x));
}
inline unsigned __float2uint_rd(float x) {
    return minfer_emu::saturate_to<unsigned>(floor((double)x));
}
inline unsigned __float2uint_ru(float x) {
    return minfer_emu::saturate_to<unsigned>(ceil((double)x));
}
inline float __int2float_rn(int x) { return (float)x; }
inline float __uint2float_rn(unsigned x) { return (float)x; }

// ---------------------------------------------------------------------------------------------
// Half precision: the storage types of cuda_fp16.h / cuda_bf16.h and their conversions (round to
// nearest even), for kernels that read f16/bf16 data. Arithmetic goes through float: the types
// convert implicitly to and from it. (Kernels include those headers only outside the emulation:
// `#ifndef MINFER_CUDA_EMU`.)
// ---------------------------------------------------------------------------------------------

namespace minfer_emu {
inline unsigned short f32_to_f16_bits(float f) {
    unsigned x;
    std::memcpy(&x, &f, 4);
    const unsigned sign = x >> 16 & 0x8000u;
    x &= 0x7fffffffu;
    if (x >= 0x7f800000u) return (unsigned short)(sign | (x > 0x7f800000u ? 0x7e00u : 0x7c00u));
    if (x >= 0x477ff000u) return (unsigned short)(sign | 0x7c00u); // rounds past 65504: inf
    if (x < 0x38800000u) {                                          // below 2^-14: subnormal
        if (x < 0x33000000u) return (unsigned short)sign;           // at most 2^-25: zero
        const unsigned e = x >> 23, m = (x & 0x7fffffu) | 0x800000u, shift = 126 - e;
        unsigned h = m >> shift;
        const unsigned rem = m & ((1u << shift) - 1), tie = 1u << (shift - 1);
        if (rem > tie || (rem == tie && (h & 1))) h++;
        return (unsigned short)(sign | h);
    }
    unsigned h = (x - 0x38000000u) >> 13; // rebias the exponent from 127 to 15
    const unsigned rem = x & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) h++; // a carry may reach inf: right
    return (unsigned short)(sign | h);
}
inline float f16_bits_to_f32(unsigned short h) {
    const unsigned sign = (unsigned)(h & 0x8000u) << 16, e = h >> 10 & 0x1fu, m = h & 0x3ffu;
    unsigned x;
    if (e == 0) {
        const float v = (float)m * 5.9604644775390625e-8f; // m * 2^-24, exact
        return sign ? -v : v;
    }
    x = sign | (e == 31 ? 0x7f800000u | m << 13 : (e + 112) << 23 | m << 13);
    float f;
    std::memcpy(&f, &x, 4);
    return f;
}
inline unsigned short f32_to_bf16_bits(float f) {
    unsigned x;
    std::memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (unsigned short)(x >> 16 | 0x40u); // quiet NaN
    return (unsigned short)((x + 0x7fffu + (x >> 16 & 1)) >> 16);
}
inline float bf16_bits_to_f32(unsigned short h) {
    const unsigned x = (unsigned)h << 16;
    float f;
    std::memcpy(&f, &x, 4);
    return f;
}
} // namespace minfer_emu

struct __align__(2) __half {
    unsigned short __x;
    __half() = default;
    __half(float f) : __x(minfer_emu::f32_to_f16_bits(f)) {}
    operator float() const { return minfer_emu::f16_bits_to_f32(__x); }
};
struct __align__(4) __half2 {
    __half x, y;
};
struct __align__(2) __nv_bfloat16 {
    unsigned short __x;
    __nv_bfloat16() = default;
    __nv_bfloat16(float f) : __x(minfer_emu::f32_to_bf16_bits(f)) {}
    operator float() const { return minfer_emu::bf16_bits_to_f32(__x); }
};
struct __align__(4) __nv_bfloat162 {
    __nv_bfloat16 x, y;
};

inline float __half2float(__half h) { return minfer_emu::f16_bits_to_f32(h.__x); }
inline __half __float2half(float f) { return __half(f); }
inline __half __float2half_rn(float f) { return __half(f); }
inline unsigned short __half_as_ushort(__half h) { return h.__x; }
inline __half __ushort_as_half(unsigned short u) { __half h; h.__x = u; return h; }
inline short __half_as_short(__half h) { return (short)h.__x; }
inline __half __short_as_half(short s) { return __ushort_as_half((unsigned short)s); }
inline float2 __half22float2(__half2 h) {
    return make_float2(__half2float(h.x), __half2float(h.y));
}
inline __half2 __floats2half2_rn(float a, float b) { return __half2{__half(a), __half(b)}; }
inline __half2 __float22half2_rn(float2 f) { return __floats2half2_rn(f.x, f.y); }
inline __half2 __halves2half2(__half a, __half b) { return __half2{a, b}; }
inline __half __low2half(__half2 h) { return h.x; }
inline __half __high2half(__half2 h) { return h.y; }
inline float __low2float(__half2 h) { return __half2float(h.x); }
inline float __high2float(__half2 h) { return __half2float(h.y); }
inline float __bfloat162float(__nv_bfloat16 h) { return minfer_emu::bf16_bits_to_f32(h.__x); }
inline __nv_bfloat16 __float2bfloat16(float f) { return __nv_bfloat16(f); }
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16(f); }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.__x; }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) {
    __nv_bfloat16 h;
    h.__x = u;
    return h;
}
inline float2 __bfloat1622float2(__nv_bfloat162 h) {
    return make_float2(__bfloat162float(h.x), __bfloat162float(h.y));
}

// ---------------------------------------------------------------------------------------------
// Control.
// ---------------------------------------------------------------------------------------------

// Aborts the launch (MINFER_EMU_ERR_KERNEL), as __trap aborts a kernel on the GPU.
inline void __trap() { minfer_emu::fail("__trap() called"); }
inline void __brkpt() { minfer_emu::fail("__brkpt() called"); }
inline void __nanosleep(unsigned) {}

#endif // MINFER_EMU_ABI_ONLY
#endif // MINFER_CUDA_EMU_H
