// add_pos_rows: y[t, i] = x[t, i] + w[pos_t, i], w a learned position table [n_pos][width]
// (f32), pos_t token t's position in the step (Step::words). BERT's absolute position
// embeddings. One element per thread; a position past the table (which the engine's limits
// never let through) adds nothing.
//
// Params: n (elements), width, n_pos. Bindings: 1 step, 2 w [n_pos][width], 3 x [n], 4 y [n].
// Grid: ceil(n / 256) blocks folded into (x, y). Block: 256.

struct AddPosRowsParams {
    u32 n;
    u32 width;
    u32 n_pos;
    u32 _pad0;
};

extern "C" __global__ void __launch_bounds__(256) add_pos_rows(const Params p) {
    constexpr u32 WG = 256;
    const u32* __restrict__ step = binding<const u32>(p, 1);
    const float* __restrict__ w = binding<const float>(p, 2);
    const float* __restrict__ x = binding<const float>(p, 3);
    float* __restrict__ y = binding<float>(p, 4);
    const AddPosRowsParams& prm = params<AddPosRowsParams>(p);
    const u32 i = linear_id<WG>();
    if (i >= prm.n) {
        return;
    }
    const u32 t = i / prm.width;
    const u32 pos = step[4 + 2 * t];
    float v = x[i];
    if (pos < prm.n_pos) {
        v += w[pos * prm.width + i % prm.width];
    }
    y[i] = v;
}
