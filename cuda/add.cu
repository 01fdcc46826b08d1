// add: y = a + b, element-wise (body: binary_body in common.cuh).
//
// Params: n. Bindings: 1 a [n], 2 b [n], 3 y [n]. Grid: ceil(n / 256) blocks folded into (x, y).
// Block: 256.

struct op_add {
    static __device__ __forceinline__ float op(float a, float b) {
        return a + b;
    }
};

extern "C" __global__ void __launch_bounds__(128) add(const Params p) {
    binary_body<op_add>(p);
}
