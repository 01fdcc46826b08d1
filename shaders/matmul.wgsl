// matmul for prefill: y[t, row0 + r] = x[t, :] · W[r, :], tiled. A workgroup of 8 × 8
// invocations computes a 32-row × 32-token tile, each invocation a 4 × 4 block; per 32-element
// step of k the weight tile is dequantized once into workgroup memory (128 chunks of 8, two per
// invocation) and shared by all 32 tokens.

const TM: u32 = 32u;
const TN: u32 = 32u;
const TK: u32 = 32u;
const LD: u32 = 33u; // padded row stride of the tiles: no bank conflicts on column reads

struct Params {
    k: u32,
    m: u32,
    rows: u32,
    row0: u32,
    n: u32, // tokens
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> w: array<u32>;
@group(0) @binding(2) var<storage, read> x: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;

var<workgroup> ws: array<f32, 1056>; // [TM][LD]
var<workgroup> xs: array<f32, 1056>; // [TN][LD]

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let m0 = wid.x * TM;
    let n0 = wid.y * TN;
    let tx = lid % 8u;
    let ty = lid / 8u;
    let cpb = QK / 8u;
    let rbytes = (p.k / QK) * QB;
    var acc: array<f32, 16>;
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
            let s = r * LD + c * 8u;
            for (var e = 0u; e < 4u; e++) {
                ws[s + e] = v[0][e];
                ws[s + 4u + e] = v[1][e];
            }
        }
        for (var i = 0u; i < 16u; i++) {
            let idx = lid + i * 64u;
            let t = idx / TK;
            let kk = idx % TK;
            var v = 0.0;
            if (n0 + t < p.n) {
                v = x[(n0 + t) * p.k + k0 + kk];
            }
            xs[t * LD + kk] = v;
        }
        workgroupBarrier();
        for (var kk = 0u; kk < TK; kk++) {
            var a: array<f32, 4>;
            var b: array<f32, 4>;
            for (var i = 0u; i < 4u; i++) {
                a[i] = ws[(tx * 4u + i) * LD + kk];
                b[i] = xs[(ty * 4u + i) * LD + kk];
            }
            for (var i = 0u; i < 4u; i++) {
                for (var j = 0u; j < 4u; j++) {
                    acc[i * 4u + j] += a[i] * b[j];
                }
            }
        }
        workgroupBarrier();
    }
    for (var i = 0u; i < 4u; i++) {
        for (var j = 0u; j < 4u; j++) {
            let r = m0 + tx * 4u + i;
            let t = n0 + ty * 4u + j;
            if (r < p.rows && t < p.n) {
                y[t * p.m + p.row0 + r] = acc[i * 4u + j];
            }
        }
    }
}
