// matmul.wgsl for quantized weights, in 8-bit integers (llama.cpp's MMQ with integer dot products
// in place of its matrix units): the same 32-row × 32-token tiles, 8 × 8 invocations of 4 × 4
// outputs, 32 elements of k a step. Per step the weight tile is unpacked once into workgroup
// memory as signed bytes with each 8-element chunk's scale s and offset m (`dq8i`, 128 chunks,
// two per invocation), and the token tile is quantize_act's packed form (common.wgsl's
// `act_q_base`): 8 words, one scale d and the chunk sums Σ q_x per token. Each output adds
// d · Σ_chunks (s · Σ q_w q_x + m · Σ q_x), the integer sums the CPU's (dot4I8Packed), so it is
// the matvec's sum (matmul_vec_row_i8.wgsl) grouped by step. A quarter of matmul.wgsl's
// workgroup memory, and a word read per 4 products where matmul.wgsl reads a float per one.
// ACT_S (q4_1, q5_1): as matmul.wgsl, each output adds its row's offset m times its token's
// q8_1 correction per step.

const TM: u32 = 32u;
const TN: u32 = 32u;
const TK: u32 = 32u;

// matmul_params.wgsl, the head, declares p, w and y; x is read in this body's own form.
@group(0) @binding(2) var<storage, read> x: array<vec2<u32>>;

var<workgroup> wq: array<vec2<u32>, 128>; // [TM][4 chunks]: the weights as signed bytes
var<workgroup> wsm: array<vec2<f32>, 128>; // [TM][4]: (s, m)
var<workgroup> xq: array<vec2<u32>, 128>; // [TN][4]: the activations as signed bytes
var<workgroup> xsum: array<f32, 128>; // [TN][4]: Σ q_x of each chunk
var<workgroup> xd: array<f32, 32>; // [TN]: the step's scale per token
var<workgroup> wmin: array<f32, 32>; // ACT_S: the step's block offset per row
var<workgroup> xcor: array<f32, 32>; // ACT_S: the step's correction per token

// Float i of x (the corrections).
fn xf(i: u32) -> f32 {
    return bitcast<f32>(x[i / 2u][i % 2u]);
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let m0 = wid.x * TM;
    let n0 = wid.y * TN;
    let tx = lid % 8u;
    let ty = lid / 8u;
    let cpb = QK / 8u;
    let rbytes = (p.k / QK) * QB;
    // acc[i] = row 4tx + i × tokens 4ty .. 4ty + 4
    var acc = array<vec4<f32>, 4>();
    for (var k0 = 0u; k0 < p.k; k0 += TK) {
        for (var i = 0u; i < 2u; i++) {
            let idx = lid + i * 64u;
            let r = idx / 4u;
            let c = idx % 4u;
            var q = QI8(vec2<u32>(0u), 0.0, 0.0);
            if (m0 + r < p.rows) {
                let gc = k0 / 8u + c;
                q = dq8i((m0 + r) * rbytes + (gc / cpb) * QB, gc % cpb);
            }
            wq[idx] = q.q;
            wsm[idx] = vec2<f32>(q.s, q.m);
        }
        for (var i = 0u; i < 2u; i++) {
            let idx = lid + i * 64u;
            let t = idx / 4u;
            let c = idx % 4u;
            var v = vec2<u32>(0u);
            var d = 0.0;
            if (n0 + t < p.n) {
                let xr = act_row(p.n * p.k, p.k, n0 + t);
                v = x[xr.qb + k0 / 8u + c];
                d = xf(xr.db + k0 / 32u);
            }
            xq[idx] = v;
            xsum[idx] = f32(dot4I8Packed(0x01010101u, v.x) + dot4I8Packed(0x01010101u, v.y));
            if (c == 0u) {
                xd[t] = d;
            }
        }
        if (ACT_S) {
            let i = lid % 32u;
            var v = 0.0;
            if (lid < 32u && m0 + i < p.rows) {
                v = qmin((m0 + i) * rbytes + (k0 / QK) * QB);
            }
            if (lid >= 32u && n0 + i < p.n) {
                v = xf(act_row(p.n * p.k, p.k, n0 + i).cb + k0 / QK);
            }
            if (lid < 32u) {
                wmin[i] = v;
            } else {
                xcor[i] = v;
            }
        }
        workgroupBarrier();
        let xd4 = vec4<f32>(xd[4u * ty], xd[4u * ty + 1u], xd[4u * ty + 2u], xd[4u * ty + 3u]);
        for (var i = 0u; i < 4u; i++) {
            let r = 4u * tx + i;
            var s = vec4<f32>(0.0);
            for (var c = 0u; c < 4u; c++) {
                let a = wq[r * 4u + c];
                let sm = wsm[r * 4u + c];
                for (var j = 0u; j < 4u; j++) {
                    let ti = (4u * ty + j) * 4u + c;
                    let b = xq[ti];
                    let isum = dot4I8Packed(a.x, b.x) + dot4I8Packed(a.y, b.y);
                    s[j] += sm.x * f32(isum) + sm.y * xsum[ti];
                }
            }
            acc[i] += xd4 * s;
            if (ACT_S) {
                let xc = vec4<f32>(xcor[4u * ty], xcor[4u * ty + 1u], xcor[4u * ty + 2u], xcor[4u * ty + 3u]);
                acc[i] += wmin[r] * xc;
            }
        }
        workgroupBarrier();
    }
    let r = m0 + tx * 4u;
    let t = n0 + ty * 4u;
    for (var i = 0u; i < 4u; i++) {
        store4(r + i, t, acc[i]);
    }
}
