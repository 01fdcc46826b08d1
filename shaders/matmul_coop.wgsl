// matmul.wgsl on cooperative matrices (wgpu's EXPERIMENTAL_COOPERATIVE_MATRIX: Metal's simdgroup
// matrices, and Vulkan's VK_KHR_cooperative_matrix where it offers 8 × 8 f32), the prefill tiles
// of llama.cpp's Metal backend. The same 32-row × 32-token tiles, grid and 32-element steps, the
// weights dequantized into workgroup memory and the tokens loaded beside them as in matmul.wgsl;
// the products are 8 × 8 × 8 matrix multiply-adds. Subgroup s of the two (32 invocations each:
// the device takes this kernel only where its subgroups are 32 wide) takes rows 16s .. 16s + 15
// against all 32 tokens, 2 × 4 accumulators. At the end the accumulators go to workgroup memory
// and each invocation stores a 4 × 4 block with matmul_store.wgsl's store4 (bias, residual).
// ACT_S (q4_1, q5_1): each invocation adds its outputs' per-step offset × correction in registers,
// as matmul.wgsl does, before storing.
//
// The tiles are f32 row-major with a padded stride S: the weights [row][k] are the A operand
// (coopLoadT, row-major), the tokens [token][k] the B operand read column-major (coopLoad: column
// t of B is token t's k-run), and the result [token][row] is C stored column-major.

const TM: u32 = 32u;
const TN: u32 = 32u;
const TK: u32 = 32u;
const S: u32 = 36u; // floats per tile row: TK and 4 of padding

// matmul_params.wgsl, the head, declares p, w and y; x is read in this body's own form.
@group(0) @binding(2) var<storage, read> x: array<vec4<f32>>;

var<workgroup> ws: array<f32, 1152>; // [TM][S]
var<workgroup> xs: array<f32, 1152>; // [TN][S]
var<workgroup> cs: array<f32, 1024>; // [TN][TM]: the result
var<workgroup> wmin: array<f32, 32>; // ACT_S: the step's block offset per row
var<workgroup> xcor: array<f32, 32>; // ACT_S: the step's correction per token

@compute @workgroup_size(64)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
    @builtin(subgroup_id) sg: u32,
) {
    let m0 = wid.x * TM;
    let n0 = wid.y * TN;
    let cpb = QK / 8u;
    let rbytes = (p.k / QK) * QB;
    let k4 = p.k / 4u;
    let wr0 = 16u * sg;
    // The accumulators start from zeros loaded from workgroup memory (a constructed matrix's
    // contents are not defined on every platform).
    cs[lid] = 0.0;
    workgroupBarrier();
    let zero = coopLoad<coop_mat8x8<f32, C>>(&cs[0], 8u);
    // c<i><j>: rows wr0 + 8i .. + 8 × tokens 8j .. 8j + 8
    var c00 = zero;
    var c01 = zero;
    var c02 = zero;
    var c03 = zero;
    var c10 = zero;
    var c11 = zero;
    var c12 = zero;
    var c13 = zero;
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
                ws[r * S + 8u * c + e] = v[0][e];
                ws[r * S + 8u * c + 4u + e] = v[1][e];
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
                xs[t * S + 4u * q + e] = v[e];
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
        for (var kk = 0u; kk < TK; kk += 8u) {
            let a0 = coopLoadT<coop_mat8x8<f32, A>>(&ws[wr0 * S + kk], S);
            let a1 = coopLoadT<coop_mat8x8<f32, A>>(&ws[(wr0 + 8u) * S + kk], S);
            let b0 = coopLoad<coop_mat8x8<f32, B>>(&xs[kk], S);
            let b1 = coopLoad<coop_mat8x8<f32, B>>(&xs[8u * S + kk], S);
            let b2 = coopLoad<coop_mat8x8<f32, B>>(&xs[16u * S + kk], S);
            let b3 = coopLoad<coop_mat8x8<f32, B>>(&xs[24u * S + kk], S);
            c00 = coopMultiplyAdd(a0, b0, c00);
            c01 = coopMultiplyAdd(a0, b1, c01);
            c02 = coopMultiplyAdd(a0, b2, c02);
            c03 = coopMultiplyAdd(a0, b3, c03);
            c10 = coopMultiplyAdd(a1, b0, c10);
            c11 = coopMultiplyAdd(a1, b1, c11);
            c12 = coopMultiplyAdd(a1, b2, c12);
            c13 = coopMultiplyAdd(a1, b3, c13);
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
    coopStore(c00, &cs[wr0], TM);
    coopStore(c01, &cs[8u * TM + wr0], TM);
    coopStore(c02, &cs[16u * TM + wr0], TM);
    coopStore(c03, &cs[24u * TM + wr0], TM);
    coopStore(c10, &cs[wr0 + 8u], TM);
    coopStore(c11, &cs[8u * TM + wr0 + 8u], TM);
    coopStore(c12, &cs[16u * TM + wr0 + 8u], TM);
    coopStore(c13, &cs[24u * TM + wr0 + 8u], TM);
    workgroupBarrier();
    for (var i = 0u; i < 4u; i++) {
        let r = 4u * tx + i;
        let t = 4u * ty;
        let v = vec4<f32>(cs[t * TM + r], cs[(t + 1u) * TM + r], cs[(t + 2u) * TM + r], cs[(t + 3u) * TM + r]);
        store4(m0 + r, n0 + t, v + cor[i]);
    }
}
