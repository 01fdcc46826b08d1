// matmul.wgsl on 16 × 16 f16 cooperative matrices with f32 accumulators: the tensor cores' f16
// path as Vulkan offers it (VK_KHR_cooperative_matrix on NVIDIA, AMD and Intel GPUs), the
// prefill tiles of ggml-vulkan's coopmat matmul. The same 32-row × 32-token tiles, grid and
// 32-element steps as matmul.wgsl: per step the weights are dequantized into workgroup memory
// as halves and the tokens converted to halves beside them; subgroup s of the two (32
// invocations each) takes rows 16s .. 16s + 15 against all 32 tokens, two accumulators, two
// 16-deep multiply-adds each. At the end the accumulators go to workgroup memory and each
// invocation stores a 4 × 4 block with matmul_store.wgsl's store4 (bias, residual).
// ACT_S (q4_1, q5_1): each invocation adds its outputs' per-step offset × correction in f32
// registers, as matmul.wgsl does, before storing.
//
// The halves round the dequantized weights and the 8-bit activations' values (d · q); the
// products are exact in f32 and summed there, so the tile's error is that rounding. The matrix
// operations are coop16.wgsl's (the device's) or coop16_emu.wgsl's (the same operations in
// scalar code, for devices without them); each holds the entry point, which calls `tile`.
// Layout as matmul_coop.wgsl's: the weights [row][k] are the A operand (row-major), the tokens
// [token][k] the B operand read column-major, the result [token][row] is C stored column-major.

const TM: u32 = 32u;
const TN: u32 = 32u;
const TK: u32 = 32u;
const S: u32 = 40u; // halves per tile row: TK and 8 of padding (rows 16-byte aligned)

struct Params {
    k: u32,
    m: u32,
    rows: u32,
    row0: u32,
    n: u32, // tokens
    ids: u32,      // unused here (matmul_vec_id's)
    x_slot: u32,   // unused here
    n_expert: u32, // unused here
    acc: u32,      // 1: y += x · W (a fused residual add; y holds the residual)
    bias: u32,     // 1: y = x · W + b (a fused bias add; binding 4 holds b)
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> w: array<u32>;
@group(0) @binding(2) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
@group(0) @binding(4) var<storage, read> bias: array<f32>;

var<workgroup> ws: array<f16, 1280>; // [TM][S]
var<workgroup> xs: array<f16, 1280>; // [TN][S]
var<workgroup> cs: array<f32, 1024>; // [TN][TM]: the result
var<workgroup> wmin: array<f32, 32>; // ACT_S: the step's block offset per row
var<workgroup> xcor: array<f32, 32>; // ACT_S: the step's correction per token

// Workgroup `wid`'s tile; `lid` the invocation, `sg` its subgroup (lid / 32).
fn tile(wid: vec3<u32>, lid: u32, sg: u32) {
    let m0 = wid.x * TM;
    let n0 = wid.y * TN;
    let cpb = QK / 8u;
    let rbytes = (p.k / QK) * QB;
    let k4 = p.k / 4u;
    let wr0 = 16u * sg;
    // The accumulators start from zeros loaded from workgroup memory (a constructed matrix's
    // contents are not defined on every platform).
    for (var i = lid; i < 256u; i += 64u) {
        cs[i] = 0.0;
    }
    workgroupBarrier();
    let zero = coop_zero();
    // c<j>: rows wr0 .. wr0 + 16 × tokens 16j .. 16j + 16
    var c0 = zero;
    var c1 = zero;
    // ACT_S: rows 4tx + i × tokens 4ty .. 4ty + 4, as matmul.wgsl's accumulators
    let tx = lid % 8u;
    let ty = lid / 8u;
    var cor = array<vec4<f32>, 4>();
    for (var k0 = 0u; k0 < p.k; k0 += TK) {
        for (var i = 0u; i < 2u; i++) {
            let idx = lid + i * 64u;
            let r = idx / 4u;
            let c = idx % 4u;
            var v = array<vec4<f32>, 2>(vec4<f32>(0.0), vec4<f32>(0.0));
            if (m0 + r < p.rows) {
                let gc = k0 / 8u + c;
                v = dq8((m0 + r) * rbytes + (gc / cpb) * QB, gc % cpb);
            }
            for (var e = 0u; e < 4u; e++) {
                ws[r * S + 8u * c + e] = f16(v[0][e]);
                ws[r * S + 8u * c + 4u + e] = f16(v[1][e]);
            }
        }
        for (var i = 0u; i < 4u; i++) {
            let idx = lid + i * 64u;
            let t = idx / 8u;
            let q = idx % 8u;
            var v = vec4<f32>(0.0);
            if (n0 + t < p.n) {
                v = x[(n0 + t) * k4 + k0 / 4u + q];
            }
            for (var e = 0u; e < 4u; e++) {
                xs[t * S + 4u * q + e] = f16(v[e]);
            }
        }
        if (ACT_S) {
            let i = lid % 32u;
            var v = 0.0;
            if (lid < 32u && m0 + i < p.rows) {
                v = qmin((m0 + i) * rbytes + (k0 / QK) * QB);
            }
            if (lid >= 32u && n0 + i < p.n) {
                let ci = p.n * p.k + (n0 + i) * (p.k / QK) + k0 / QK;
                v = x[ci / 4u][ci % 4u];
            }
            if (lid < 32u) {
                wmin[i] = v;
            } else {
                xcor[i] = v;
            }
        }
        workgroupBarrier();
        for (var kk = 0u; kk < TK; kk += 16u) {
            let a = coop_a(wr0 * S + kk);
            c0 = coop_mma(a, coop_b(kk), c0);
            c1 = coop_mma(a, coop_b(16u * S + kk), c1);
        }
        if (ACT_S) {
            let xc = vec4<f32>(xcor[4u * ty], xcor[4u * ty + 1u], xcor[4u * ty + 2u], xcor[4u * ty + 3u]);
            for (var i = 0u; i < 4u; i++) {
                cor[i] += wmin[4u * tx + i] * xc;
            }
        }
        workgroupBarrier();
    }
    // C (row r, token t) at cs[t · TM + r]: column-major with stride TM.
    coop_store(c0, wr0);
    coop_store(c1, 16u * TM + wr0);
    workgroupBarrier();
    for (var i = 0u; i < 4u; i++) {
        let r = 4u * tx + i;
        let t = 4u * ty;
        let v = vec4<f32>(cs[t * TM + r], cs[(t + 1u) * TM + r], cs[(t + 2u) * TM + r], cs[(t + 3u) * TM + r]);
        store4(m0 + r, n0 + t, v + cor[i]);
    }
}
