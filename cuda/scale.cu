// scale: y = s · x, one element per thread. Body: unary_body in common.cuh.
//
// Params: n, s (f32). Bindings: 1 x [n], 2 y [n]. Grid: ceil(n / 256) blocks folded into (x, y).
// Block: 256.

struct op_scale {
    static __device__ __forceinline__ float op(float x, float s) { return x * s; }
};

extern "C" __global__ void __launch_bounds__(256) scale(const Params p) {
    unary_body<op_scale>(p);
}
