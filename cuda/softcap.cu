// softcap: y = cap · tanh(x / cap) (Gemma's final logit soft-capping), one element per thread.
// Body: unary_body in common.cuh.
//
// Params: n, cap (f32). Bindings: 1 x [n], 2 y [n]. Grid: ceil(n / 256) blocks folded into (x, y).
// Block: 256.

struct op_softcap {
    static __device__ __forceinline__ float op(float x, float cap) {
        // tanh saturates in f32 long before 15; the clamp keeps the argument small.
        return tanhf(fminf(fmaxf(x / cap, -15.0f), 15.0f)) * cap;
    }
};

extern "C" __global__ void __launch_bounds__(256) softcap(const Params p) {
    unary_body<op_softcap>(p);
}
