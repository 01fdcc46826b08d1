// geglu: y = gelu_tanh(gate) · up. Like ggml-cpu (GGML_GELU_FP16, a table indexed by the f16 bits
// of the input), gelu is evaluated at the f16-rounded input and its result rounded to f16;
// |gate| >= 10 takes the exact limits. ggml: ggml_vec_geglu_f32. Body: binary_body in
// common.cuh (a = gate, b = up).
//
// Params: n. Bindings: 1 gate [n], 2 up [n], 3 y [n]. Grid: ceil(n / 256) blocks folded into
// (x, y). Block: 256.

struct op_geglu {
    // ggml_gelu_f32 (the CPU's gelu_tanh); products rounded as the CPU rounds them.
    static __device__ __forceinline__ float gelu_tanh(float x) {
        const float t = mul_rn(0.7978846f, x) * (1.0f + mul_rn(mul_rn(0.044715f, x), x));
        return mul_rn(0.5f, x) * (1.0f + tanhf(fminf(fmaxf(t, -15.0f), 15.0f)));
    }
    static __device__ __forceinline__ float op(float gate, float up) {
        if (isnan(gate)) {
            return gate; // NaN, as the CPU's table gives
        }
        if (gate >= 10.0f) {
            return gate * up;
        }
        if (gate > -10.0f) {
            return round_f16(gelu_tanh(round_f16(gate))) * up;
        }
        return 0.0f;
    }
};

extern "C" __global__ void __launch_bounds__(128) geglu(const Params p) {
    binary_body<op_geglu>(p);
}
