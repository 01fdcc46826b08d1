// matmul for prefill: y[t, row0 + r] = x[t, :] · W[r, :], tiled. A workgroup of 8 × 8
// invocations computes a 32-row × 32-token tile, each invocation a 4 × 4 block. Per 32-element
// step of k, the weight tile is dequantized once into workgroup memory (128 chunks of 8, two
// per invocation) and shared by all 32 tokens. Tiles hold vec4s along k, so an invocation reads
// 8 vec4s per 64 multiply-adds (workgroup-memory reads are the bottleneck on software
// rasterizers and a cost everywhere).
// For quantized weights x is quantize_act's output: the rounded activations, then (ACT_S, q4_1
// and q5_1) one q8_1 correction per 32-element block; per step (one block) each output adds
// its row's offset m times its token's correction.

const TM: u32 = 32u;
const TN: u32 = 32u;
const TK: u32 = 32u;
const LD: u32 = 9u; // vec4s per tile row: TK / 4 plus one of padding against bank conflicts

// matmul_params.wgsl, the head, declares p, w and y; x is read in this body's own form.
@group(0) @binding(2) var<storage, read> x: array<vec4<f32>>;

var<workgroup> ws: array<vec4<f32>, 288>; // [TM][LD]
var<workgroup> xs: array<vec4<f32>, 288>; // [TN][LD]
var<workgroup> wmin: array<f32, 32>; // ACT_S: the step's block offset per row
var<workgroup> xcor: array<f32, 32>; // ACT_S: the step's correction per token

fn dot4x4(a: vec4<f32>, b0: vec4<f32>, b1: vec4<f32>, b2: vec4<f32>, b3: vec4<f32>) -> vec4<f32> {
    return vec4<f32>(dot(a, b0), dot(a, b1), dot(a, b2), dot(a, b3));
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let m0 = wid.x * TM;
    let n0 = wid.y * TN;
    let tx = lid % 8u;
    let ty = lid / 8u;
    let cpb = QK / 8u;
    let rbytes = (p.k / QK) * QB;
    let k4 = p.k / 4u;
    // acc_i = row 4tx + i × tokens 4ty .. 4ty + 4
    var acc0 = vec4<f32>(0.0);
    var acc1 = vec4<f32>(0.0);
    var acc2 = vec4<f32>(0.0);
    var acc3 = vec4<f32>(0.0);
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
            ws[r * LD + 2u * c] = v[0];
            ws[r * LD + 2u * c + 1u] = v[1];
        }
        for (var i = 0u; i < 4u; i++) {
            let idx = lid + i * 64u;
            let t = idx / 8u;
            let q = idx % 8u;
            var v = vec4<f32>(0.0);
            if (n0 + t < p.n) {
                v = x[(n0 + t) * k4 + k0 / 4u + q];
            }
            xs[t * LD + q] = v;
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
        let wr = tx * 4u * LD;
        let xr = ty * 4u * LD;
        for (var q = 0u; q < TK / 4u; q++) {
            let b0 = xs[xr + q];
            let b1 = xs[xr + LD + q];
            let b2 = xs[xr + 2u * LD + q];
            let b3 = xs[xr + 3u * LD + q];
            acc0 += dot4x4(ws[wr + q], b0, b1, b2, b3);
            acc1 += dot4x4(ws[wr + LD + q], b0, b1, b2, b3);
            acc2 += dot4x4(ws[wr + 2u * LD + q], b0, b1, b2, b3);
            acc3 += dot4x4(ws[wr + 3u * LD + q], b0, b1, b2, b3);
        }
        if (ACT_S) {
            let xc = vec4<f32>(xcor[4u * ty], xcor[4u * ty + 1u], xcor[4u * ty + 2u], xcor[4u * ty + 3u]);
            acc0 += wmin[4u * tx] * xc;
            acc1 += wmin[4u * tx + 1u] * xc;
            acc2 += wmin[4u * tx + 2u] * xc;
            acc3 += wmin[4u * tx + 3u] * xc;
        }
        workgroupBarrier();
    }
    let r = m0 + tx * 4u;
    let t = n0 + ty * 4u;
    store4(r, t, acc0);
    store4(r + 1u, t, acc1);
    store4(r + 2u, t, acc2);
    store4(r + 3u, t, acc3);
}
