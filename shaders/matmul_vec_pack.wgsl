// matmul for decode over the 2 or 3 weights of one pack (a layer's Q/K/V or gate/up, uploaded
// into one buffer, each member at an aligned byte offset): their rows taken in order as one
// matrix, row r of member s going to y_s (plus b_s[r] where the biases are fused: binding 4,
// their own pack). One launch where there were one per weight; each row is matmul_vec's, the
// same chunks summed in the same order: with p.n > 1 one workgroup takes every token of the step
// (grid z = 1, p.n ≤ VEC_MAX_TOKENS), else workgroup z is token z.
// With p.norm = 1 (one token) an RMS norm of x is folded in (Q/K/V after the attention norm,
// gate/up after the FFN norm): each workgroup first normalizes its row into workgroup memory exactly
// as rms_norm does (the same sums in the same order, times the f32 weight at binding 7) and, for
// quantized weights (p.act = 1 + quantize_act's ACT), rounds it as quantize_act does, packed
// form included (`xsq`); the rows then read it there. Rows up to MAX_NORM_K long (checked by the
// schedule).

override WG: u32 = 128u;
override TPR: u32 = 32u; // invocations per row

struct Params {
    k: u32,     // row length (elements)
    n: u32,     // rows of x
    rows0: u32, // rows of each member (rows2 = 0 with two)
    rows1: u32,
    rows2: u32,
    off1: u32,  // byte offsets of members 1 and 2 from member 0
    off2: u32,
    bias: u32,  // 1: add the members' biases
    boff1: u32, // element offsets of biases 1 and 2 from bias 0
    boff2: u32,
    norm: u32,  // 1: x normalized first (binding 7: the norm's weight)
    eps: f32,
    act: u32,   // 0, or 1 + quantize_act's ACT: the normalized row rounded
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> w: array<u32>;
@group(0) @binding(2) var<storage, read> x: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read_write> y0: array<f32>;
@group(0) @binding(4) var<storage, read> b: array<f32>;
@group(0) @binding(5) var<storage, read_write> y1: array<f32>;
@group(0) @binding(6) var<storage, read_write> y2: array<f32>;
@group(0) @binding(7) var<storage, read> nw: array<f32>;

const MAX_NORM_K: u32 = 2048u;

// The normalized (and rounded) row: MAX_NORM_K values, then a q8_1 correction per 32.
var<workgroup> xs: array<vec4<f32>, 528>;
// Its packed form: MAX_NORM_K / 4 words of q, then a scale per 32.
var<workgroup> xsq: array<u32, 576>;

// x as the row readers see it (quantize_act's layout, common.wgsl, or the normalized row):
// vec4 i of the values, the word pair i of the packed q, scale i.
fn xv(i: u32) -> vec4<f32> {
    if (p.norm != 0u) {
        return xs[i];
    }
    return bitcast<vec4<f32>>(x[i]);
}

fn xq2(i: u32) -> vec2<u32> {
    if (p.norm != 0u) {
        return vec2<u32>(xsq[2u * i], xsq[2u * i + 1u]);
    }
    let v = x[i / 2u];
    return select(v.xy, v.zw, (i & 1u) != 0u);
}

fn xd(i: u32) -> f32 {
    if (p.norm != 0u) {
        return bitcast<f32>(xsq[i]);
    }
    return bitcast<f32>(x[i / 4u][i % 4u]);
}

fn act_in(i: u32) -> f32 {
    return xs[i / 4u][i % 4u];
}

fn act_out(i: u32, v: f32) {
    xs[i / 4u][i % 4u] = v;
}

// quantize_word's packed words, for one row of k (nk = k): into xsq from its start.
fn act_word(i: u32, v: u32) {
    xsq[i - act_q_base(p.k)] = v;
}

// Token t's row normalized into xs as rms_norm computes it, then rounded in place as
// quantize_act rounds it (corrections after the row's k values).
fn norm_row(t: u32, ln: Lanes) {
    let xb = t * p.k;
    var s = 0.0;
    for (var i = ln.lid; i < p.k; i += WG) {
        let v = bitcast<f32>(x[(xb + i) / 4u][(xb + i) % 4u]);
        s += v * v;
    }
    let scale = 1.0 / sqrt(wg_sum(s, ln) / f32(p.k) + p.eps);
    for (var i = ln.lid; i < p.k; i += WG) {
        act_out(i, (bitcast<f32>(x[(xb + i) / 4u][(xb + i) % 4u]) * scale) * nw[i]);
    }
    workgroupBarrier();
    if (p.act != 0u) {
        // Rounded in place (the packed form goes to xsq).
        quantize_row(p.act - 1u, 0u, p.k, p.k, ln.lid);
        workgroupBarrier();
    }
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, ln: Lanes) {
    let seg = seg_index(ln, TPR);
    let r = (wid.x + wid.y * nwg.x) * (WG / TPR) + seg.x;
    let t = wid.z;
    // (member, its row, its byte offset, its bias's offset) of row r.
    var m = 0u;
    var rl = r;
    var off = 0u;
    var boff = 0u;
    if (rl >= p.rows0) {
        m = 1u;
        rl -= p.rows0;
        off = p.off1;
        boff = p.boff1;
        if (rl >= p.rows1) {
            m = 2u;
            rl -= p.rows1;
            off = p.off2;
            boff = p.boff2;
        }
    }
    let live = m < 2u || rl < p.rows2;
    let rb = off + rl * (p.k / QK) * QB;
    if (p.n > 1u) {
        // Every token of the step, MV_COLS a pass as matmul_vec takes them (never with a folded
        // norm).
        for (var j0 = 0u; j0 < p.n; j0 += MV_COLS) {
            let nc = min(p.n - j0, MV_COLS);
            var accs: array<f32, MV_COLS>;
            if (live) {
                accs = row_dot_cols(rb, j0, nc, seg.y);
            }
            for (var j = 0u; j < MV_COLS; j++) {
                if (j < nc) {
                    store(live && seg.y == 0u, m, j0 + j, rl, boff, seg_sum(accs[j], ln, TPR));
                }
            }
        }
        return;
    }
    // Where the row's values, (ACT_S) corrections and packed form are read.
    var xr = act_row(p.n * p.k, p.k, t);
    if (p.norm != 0u) {
        norm_row(t, ln);
        xr = XRow(0u, p.k, 0u, p.k / 4u);
    }
    var acc = 0.0;
    if (live) {
        acc = row_dot(rb, xr, seg.y);
    }
    store(live && seg.y == 0u, m, t, rl, boff, seg_sum(acc, ln, TPR));
}

// Where `own` (the row's first lane): member m's row rl of token t is s, plus its bias.
fn store(own: bool, m: u32, t: u32, rl: u32, boff: u32, s: f32) {
    if (!own) {
        return;
    }
    var v = s;
    if (p.bias != 0u) {
        v += b[boff + rl];
    }
    switch m {
        case 0u: {
            y0[t * p.rows0 + rl] = v;
        }
        case 1u: {
            y1[t * p.rows1 + rl] = v;
        }
        default: {
            y2[t * p.rows2 + rl] = v;
        }
    }
}
