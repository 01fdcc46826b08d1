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
    // acc[i] = rows 4tx + i × tokens 4ty .. 4ty + 4
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
            let s = r * LD + c * 8u;
            let lo = v[0];
            let hi = v[1];
            ws[s] = lo.x;
            ws[s + 1u] = lo.y;
            ws[s + 2u] = lo.z;
            ws[s + 3u] = lo.w;
            ws[s + 4u] = hi.x;
            ws[s + 5u] = hi.y;
            ws[s + 6u] = hi.z;
            ws[s + 7u] = hi.w;
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
        let wr = tx * 4u * LD;
        let xr = ty * 4u * LD;
        for (var kk = 0u; kk < TK; kk++) {
            let a = vec4<f32>(ws[wr + kk], ws[wr + LD + kk], ws[wr + 2u * LD + kk], ws[wr + 3u * LD + kk]);
            let b = vec4<f32>(xs[xr + kk], xs[xr + LD + kk], xs[xr + 2u * LD + kk], xs[xr + 3u * LD + kk]);
            acc0 += a.x * b;
            acc1 += a.y * b;
            acc2 += a.z * b;
            acc3 += a.w * b;
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

// Row r (of the part) for tokens t .. t + 4.
fn store4(r: u32, t: u32, v: vec4<f32>) {
    if (r >= p.rows) {
        return;
    }
    for (var j = 0u; j < 4u; j++) {
        if (t + j < p.n) {
            y[(t + j) * p.m + p.row0 + r] = v[j];
        }
    }
}
