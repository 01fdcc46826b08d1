// swiglu: y = silu(gate) · up, silu(g) = g / (1 + e^-g). ggml: ggml_vec_swiglu_f32.
// Body: binary_body in common.cuh (a = gate, b = up).
//
// Params: n. Bindings: 1 gate [n], 2 up [n], 3 y [n]. Grid: ceil(n / 256) blocks folded into
// (x, y). Block: 256.

struct op_swiglu {
    static __device__ __forceinline__ float op(float gate, float up) {
        return gate / (1.0f + expf(-gate)) * up;
    }
};

extern "C" __global__ void __launch_bounds__(128) swiglu(const Params p) {
    binary_body<op_swiglu>(p);
}
