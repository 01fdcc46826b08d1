// matmul.wgsl on 16 × 16 f16 cooperative matrices with f32 accumulators: the tensor cores' f16
// path as Vulkan offers it (VK_KHR_cooperative_matrix on NVIDIA, AMD and Intel GPUs), the
// prefill tiles of ggml-vulkan's coopmat matmul. Tiles of 64 rows × TN tokens, 128
// invocations, 64-element steps: per step the weights are dequantized into workgroup memory as
// halves and the tokens converted to halves beside them, each subgroup's loads along the rows
// (eight invocations take a row's eight chunks, sixteen a token's sixteen vec4s) so that a
// load of the subgroup touches four rows or two tokens, not eight. TN is 64 where that still gives the
// device's SMs a tile each, else 32 (`Variant::coop_f16_grid`, which rewrites the schedule's
// 32 × 32 grid); the tile reads it off its grid (y: the tokens over TN). At TN 64 subgroup s
// of the four (32 invocations each) takes rows 32 (s % 2) .. + 32 against tokens
// 32 (s / 2) .. + 32, four accumulators, each A and B operand loaded once for two
// multiply-adds; at TN 32 rows 16s .. + 16 against the 32 tokens, two. At the end the
// accumulators go to workgroup memory 32 tokens at a time, and each invocation stores 4 rows ×
// 4 tokens of them with matmul_store.wgsl's store4 (bias, residual). ACT_S (q4_1, q5_1): each
// invocation adds its outputs' per-block offset × correction in f32 registers, as matmul.wgsl
// does, before storing.
//
// The halves round the dequantized weights and the 8-bit activations' values (d · q); the
// products are exact in f32 and summed there, so the tile's error is that rounding. The matrix
// operations are coop16.wgsl's (the device's) or coop16_emu.wgsl's (the same operations in
// scalar code, for devices without them); each holds the entry point, which calls `tile`.
// Layout as matmul_coop.wgsl's: the weights [row][k] are the A operand (row-major), the tokens
// [token][k] the B operand read column-major, the result [token][row] is C stored column-major.
// Workgroup memory: 27.6 KB (`COOP16_SHARED_BYTES`).

const TM: u32 = 64u;
const TN: u32 = 64u; // the widest; a tile takes 64 or 32
const TK: u32 = 64u;
const NB: u32 = 2u; // 32-element blocks a step (ACT_S's offsets and corrections)
const S: u32 = 72u; // halves per tile row: TK and 8 of padding (rows 16-byte aligned)

// matmul_params.wgsl, the head, declares p, w and y; x is read in this body's own form.
@group(0) @binding(2) var<storage, read> x: array<vec4<f32>>;

var<workgroup> ws: array<f16, 4608>; // [TM][S]
var<workgroup> xs: array<f16, 4608>; // [TN][S]
var<workgroup> cs: array<f32, 2048>; // [32][TM]: the result, 32 tokens at a time
var<workgroup> wmin: array<f32, 128>; // ACT_S: [NB][TM] the step's block offsets per row
var<workgroup> xcor: array<f32, 128>; // ACT_S: [NB][TN] the step's corrections per token

// Workgroup `wid`'s tile of a grid of `nwg`; `lid` the invocation, `sg` its subgroup (lid / 32).
fn tile(wid: vec3<u32>, nwg: vec3<u32>, lid: u32, sg: u32) {
    let tn = select(32u, TN, nwg.y == (p.n + TN - 1u) / TN);
    let m0 = wid.x * TM;
    let n0 = wid.y * tn;
    let cpb = QK / 8u;
    let rbytes = (p.k / QK) * QB;
    let k4 = p.k / 4u;
    // Rows and tokens of accumulator c<i><j>: rows wr0 + 16i, tokens wt0 + 16j (at TN 32 only
    // c00 and c01).
    let wide = tn == TN;
    let wr0 = select(16u * sg, 32u * (sg % 2u), wide);
    let wt0 = select(0u, 32u * (sg / 2u), wide);
    // The accumulators start from zeros loaded from workgroup memory (a constructed matrix's
    // contents are not defined on every platform).
    for (var i = lid; i < 256u; i += 128u) {
        cs[i] = 0.0;
    }
    workgroupBarrier();
    let zero = coop_zero();
    var c00 = zero;
    var c01 = zero;
    var c10 = zero;
    var c11 = zero;
    // The store's (and ACT_S's) outputs: rows 4tx + i × tokens 32h + 4ty .. + 4 (h < tn / 32),
    // cor[4h + i].
    let tx = lid % 16u;
    let ty = lid / 16u;
    let halves = tn / 32u;
    var cor = array<vec4<f32>, 8>();
    for (var k0 = 0u; k0 < p.k; k0 += TK) {
        // Weights: row r, chunk c of its eight, four times; zeros past k (a last step of one
        // block) and past the rows.
        for (var i = 0u; i < 4u; i++) {
            let idx = lid + i * 128u;
            let r = idx / 8u;
            let c = idx % 8u;
            let gc = k0 / 8u + c;
            var v = array<vec4<f32>, 2>(vec4<f32>(0.0), vec4<f32>(0.0));
            if (m0 + r < p.rows && gc * 8u < p.k) {
                v = dq8((m0 + r) * rbytes + (gc / cpb) * QB, gc % cpb);
            }
            // The chunk's four pairs of halves, the row's (r % 4) first: the subgroup's four
            // rows (36 words, four banks, apart) × eight chunks then meet each bank once a store.
            let rot = r % 4u;
            var a = v[0];
            var b = v[1];
            if ((rot & 2u) != 0u) {
                let t = a;
                a = b;
                b = t;
            }
            if ((rot & 1u) != 0u) {
                let t = a;
                a = vec4<f32>(a.zw, b.xy);
                b = vec4<f32>(b.zw, t.xy);
            }
            let base = r * S + 8u * c;
            for (var j = 0u; j < 4u; j++) {
                let pr = select(select(a.xy, a.zw, j == 1u), select(b.xy, b.zw, j == 3u), j >= 2u);
                let e = 2u * ((j + rot) % 4u);
                ws[base + e] = f16(pr.x);
                ws[base + e + 1u] = f16(pr.y);
            }
        }
        // Tokens: token t, vec4 q of its sixteen, tn / 8 times.
        for (var i = 0u; i < tn / 8u; i++) {
            let idx = lid + i * 128u;
            let t = idx / 16u;
            let q = idx % 16u;
            var v = vec4<f32>(0.0);
            if (n0 + t < p.n && k0 + 4u * q < p.k) {
                v = x[(n0 + t) * k4 + k0 / 4u + q];
            }
            // Odd tokens store their second pair first: two tokens × sixteen vec4s then meet
            // each bank once a store.
            let odd = (t % 2u) == 1u;
            let e0 = select(0u, 2u, odd);
            let first = select(v.xy, v.zw, odd);
            let second = select(v.zw, v.xy, odd);
            xs[t * S + 4u * q + e0] = f16(first.x);
            xs[t * S + 4u * q + e0 + 1u] = f16(first.y);
            xs[t * S + 4u * q + 2u - e0] = f16(second.x);
            xs[t * S + 4u * q + 3u - e0] = f16(second.y);
        }
        if (ACT_S) {
            let i = lid % 64u;
            for (var b = 0u; b < NB; b++) {
                let kb = k0 + 32u * b; // QK is 32
                var v = 0.0;
                if (lid < 64u && m0 + i < p.rows && kb < p.k) {
                    v = qmin((m0 + i) * rbytes + (kb / QK) * QB);
                }
                if (lid >= 64u && n0 + i < p.n && kb < p.k) {
                    let ci = p.n * p.k + (n0 + i) * (p.k / QK) + kb / QK;
                    v = x[ci / 4u][ci % 4u];
                }
                if (lid < 64u) {
                    wmin[b * TM + i] = v;
                } else {
                    xcor[b * TN + i] = v;
                }
            }
        }
        workgroupBarrier();
        for (var kk = 0u; kk < TK; kk += 16u) {
            let a0 = coop_a(wr0 * S + kk);
            let b0 = coop_b(wt0 * S + kk);
            let b1 = coop_b((wt0 + 16u) * S + kk);
            c00 = coop_mma(a0, b0, c00);
            c01 = coop_mma(a0, b1, c01);
            if (wide) {
                let a1 = coop_a((wr0 + 16u) * S + kk);
                c10 = coop_mma(a1, b0, c10);
                c11 = coop_mma(a1, b1, c11);
            }
        }
        if (ACT_S) {
            for (var b = 0u; b < NB; b++) {
                for (var h = 0u; h < halves; h++) {
                    let t = b * TN + 32u * h + 4u * ty;
                    let xc = vec4<f32>(xcor[t], xcor[t + 1u], xcor[t + 2u], xcor[t + 3u]);
                    for (var i = 0u; i < 4u; i++) {
                        cor[4u * h + i] += wmin[b * TM + 4u * tx + i] * xc;
                    }
                }
            }
        }
        workgroupBarrier();
    }
    // Tokens 32h .. + 32 of the result: C (row r, token 32h + t) at cs[t · TM + r], column-major
    // with stride TM, from the subgroups that hold them (at TN 64 those of s / 2 = h).
    for (var h = 0u; h < halves; h++) {
        if (!wide) {
            coop_store(c00, wr0);
            coop_store(c01, 16u * TM + wr0);
        } else if (sg / 2u == h) {
            coop_store(c00, wr0);
            coop_store(c01, 16u * TM + wr0);
            coop_store(c10, wr0 + 16u);
            coop_store(c11, 16u * TM + wr0 + 16u);
        }
        workgroupBarrier();
        let t = 4u * ty;
        for (var i = 0u; i < 4u; i++) {
            let r = 4u * tx + i;
            let v = vec4<f32>(cs[t * TM + r], cs[(t + 1u) * TM + r], cs[(t + 2u) * TM + r], cs[(t + 3u) * TM + r]);
            store4(m0 + r, n0 + 32u * h + t, v + cor[4u * h + i]);
        }
        workgroupBarrier();
    }
}
