// get_rows: y[t, :] = W[ids[t], :] dequantized, for the ids that fall in this weight part (rows
// row0 .. row0 + rows). One thread per (8-element chunk, token).
//
// Params: k (row length), rows, row0, n (tokens). Bindings: 1 W (raw blocks), 2 ids [n] (u32),
// 3 y [n][k]. Grid: x = ceil(k / 8 / 32) chunk groups, y = token. Block: 32.

struct GetRowsParams {
    u32 k;    // row length
    u32 rows; // rows in this part
    u32 row0; // first row of this part
    u32 n;    // tokens
};

template <class Q>
static __device__ __forceinline__ void get_rows_body(const Params& p) {
    constexpr u32 WG = 32;
    constexpr u32 CPB = Q::QK / 8;
    const u8* __restrict__ w = binding<const u8>(p, 1);
    const u32* __restrict__ ids = binding<const u32>(p, 2);
    f4* __restrict__ y = binding<f4>(p, 3);
    const GetRowsParams& prm = params<GetRowsParams>(p);
    const u32 k = prm.k, rows = prm.rows, row0 = prm.row0, n = prm.n;
    const u32 c = blockIdx.x * WG + threadIdx.x;
    const u32 t = blockIdx.y;
    if (c >= k / 8 || t >= n) {
        return;
    }
    const u32 id = ids[t];
    if (id < row0 || id >= row0 + rows) {
        return;
    }
    const u8* __restrict__ wr = w + (unsigned long long)(id - row0) * ((k / Q::QK) * Q::QB);
    const f4x2 v = Q::dq8(wr, (c / CPB) * Q::QB, c % CPB);
    const u32 o = (t * k + c * 8) / 4;
    y[o] = v.lo;
    y[o + 1] = v.hi;
}

#define MF_GET_ROWS(name)                                                                          \
    extern "C" __global__ void __launch_bounds__(32) get_rows_##name(const Params p) { \
        get_rows_body<qt_##name>(p);                                                               \
    }
MF_MATRIX_QTYPES(MF_GET_ROWS)
