// attention (second half of the op; kv_store ran first): one workgroup per (q head, token t)
// attends over its sequence's positions [lo, pos], lo = pos + 1 − window for sliding-window
// layers; position j is cache row step[step[5 + 2t] + j] (common.wgsl: the step's layout).
// GQA: q head h reads kv head h / (n_head / n_head_kv). Two numerics, as the CPU has them:
// - default (ggml's non-flash path: mul_mat KQ, soft_max_ext, mul_mat KQV): pass 1 finds the
//   softmax max and sum (online per invocation, then reduced); pass 2 recomputes each score,
//   forms p = e^(s − max) / sum once, rounds it like the CPU (kv_round) and accumulates p·V
//   through a WG-position tile of p in workgroup memory. No score scratch buffer, so any
//   context length fits.
// - flash (ggml-cpu's flash_attn_ext_f16_one_chunk): one pass in position order with an online
//   softmax; the V accumulator is rounded to the cache type after every update (fused
//   multiply-adds as the CPU's mul_add), and divided by the sum at the end.
// A rope of q folded in (p.n_rot > 0: the rope node computes nothing) rotates q as it is read.
// With p.act = 1 + quantize_act's ACT (the output feeding a quantized matmul, its blocks within a
// head) the workgroup then rounds its head's output as quantize_act would into binding 8
// (quantize_block.wgsl): the same values, one dispatch fewer; binding 8 is never written
// otherwise.
// Sinks (gpt-oss; p.sinks = 1): head h's logit sk[h] joins the softmax denominator with no value:
// the default path takes it into the max and adds e^(sk − max) to the sum (ggml soft_max), the
// flash path folds it in as one more online-softmax step after the last position.

override WG: u32 = 64u;

const MAX_HD: u32 = 512u; // head_dim limit (q lives in workgroup memory); checked by the gate
const MAX_QA: u32 = 8u; // q elements each invocation rounds: MAX_HD / 64

struct Params {
    n_head: u32,
    n_head_kv: u32,
    head_dim: u32,
    head_dim_v: u32,
    scale: f32,
    window: u32,  // 0 = none
    softcap: f32, // 0 = none
    n: u32,
    flash: u32,
    sinks: u32, // 1: binding 6 holds one logit per head
    t0: u32,    // the first token of this launch (workgroup y is t - t0)
    n_rot: u32, // 0, or the rope folded into the attention (q read rotated; binding 7: its table)
    neox: u32,
    act: u32,   // 0, or 1 + quantize_act's ACT: o also rounded into binding 8
    n_split: u32, // attention_split / attention_reduce only
    hg: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> step: array<u32>;
@group(0) @binding(2) var<storage, read> q: array<f32>;
@group(0) @binding(3) var<storage, read> kc: array<KV>;
@group(0) @binding(4) var<storage, read> vc: array<KV>;
@group(0) @binding(5) var<storage, read_write> o: array<f32>;
@group(0) @binding(6) var<storage, read> sk: array<f32>;
@group(0) @binding(7) var<storage, read> qcs: array<vec2<f32>>;
@group(0) @binding(8) var<storage, read_write> qy: array<u32>;

fn act_in(i: u32) -> f32 {
    return o[i];
}

fn act_out(i: u32, v: f32) {
    qy[i] = bitcast<u32>(v);
}

fn act_word(i: u32, v: u32) {
    qy[i] = v;
}

var<workgroup> qs: array<f32, MAX_HD>;
var<workgroup> ps: array<f32, 256>;

// Score of the key in cache row c: q · K[c, head g], scaled and soft-capped.
fn score(c: u32, g: u32) -> f32 {
    let kw = p.n_head_kv * p.head_dim;
    let kb = (c * kw + g * p.head_dim) / 2u;
    var s = 0.0;
    for (var d = 0u; d < p.head_dim / 2u; d++) {
        let kp = k_pair(kb + d);
        s += qs[2u * d] * kp.x + qs[2u * d + 1u] * kp.y;
    }
    s *= p.scale;
    if (p.softcap > 0.0) {
        s = tanh(clamp(s / p.softcap, -15.0, 15.0)) * p.softcap;
    }
    return s;
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, ln: Lanes) {
    let h = wid.x;
    let t = wid.y + p.t0;
    let lid = ln.lid;
    let g = h / (p.n_head / p.n_head_kv);
    // The last position attended: the token's own, or in an encoder's step (step[1], the table
    // of Step::words(bidir)) its whole sequence's last.
    var pos = step[4u + 2u * t];
    if (step[1] != 0u) {
        pos = step[step[1] + t];
    }
    let cells = step[5u + 2u * t]; // the sequence's row of position j is step[cells + j]
    var lo = 0u;
    if (p.window > 0u && pos + 1u > p.window) {
        lo = pos + 1u - p.window;
    }
    let hd = p.head_dim;
    let hdv = p.head_dim_v;
    let qb = (t * p.n_head + h) * hd;
    for (var d = lid; d < hd; d += WG) {
        qs[d] = q_at(qb, d, t);
    }
    // q rounded as the CPU rounds it for the cache type (per QBLOCK-element block for q8_0).
    round_q(hd, lid);
    workgroupBarrier();

    var mx = 0.0;
    var inv = 0.0;
    if (p.flash == 0u) {
        var m = -3.0e38;
        var l = 0.0;
        for (var j = lo + lid; j <= pos; j += WG) {
            let s = score(step[cells + j], g);
            let mn = max(m, s);
            l = l * exp(m - mn) + exp(s - mn);
            m = mn;
        }
        mx = wg_max(m, ln);
        if (p.sinks != 0u) {
            mx = max(mx, sk[h]);
        }
        var sum = wg_sum(l * exp(m - mx), ln);
        if (p.sinks != 0u) {
            sum += exp(sk[h] - mx);
        }
        inv = 1.0 / sum;
    }

    let vw = p.n_head_kv * hdv;
    var acc: array<f32, 8>;
    var fm = -3.0e38; // flash: running max and sum, the same in every invocation
    var fsum = 0.0;
    for (var base = lo; base <= pos; base += WG) {
        let j = base + lid;
        var pj = 0.0;
        if (j <= pos) {
            let s = score(step[cells + j], g);
            pj = select(kv_round(exp(s - mx) * inv), s, p.flash != 0u);
        }
        ps[lid] = pj;
        workgroupBarrier();
        let cnt = min(WG, pos + 1u - base);
        if (p.flash != 0u) {
            for (var jj = 0u; jj < cnt; jj++) {
                let s = ps[jj];
                var ms = 1.0;
                var vs = 1.0;
                if (s > fm) {
                    ms = exp(fm - s);
                    fm = s;
                    for (var a = 0u; a < 8u; a++) {
                        acc[a] = kv_round(acc[a] * ms);
                    }
                } else {
                    vs = exp(s - fm);
                }
                let vb = step[cells + base + jj] * vw + g * hdv;
                for (var a = 0u; a < 8u; a++) {
                    let d = lid + a * WG;
                    if (d < hdv) {
                        acc[a] = kv_round(fma(v_at(vb + d), vs, acc[a]));
                    }
                }
                fsum = fma(fsum, ms, vs);
            }
        } else {
            for (var a = 0u; a < 8u; a++) {
                let d = lid + a * WG;
                if (d < hdv) {
                    let vb = g * hdv + d;
                    var s = acc[a];
                    for (var jj = 0u; jj < cnt; jj++) {
                        s += ps[jj] * v_at(step[cells + base + jj] * vw + vb);
                    }
                    acc[a] = s;
                }
            }
        }
        workgroupBarrier();
    }
    if (p.flash != 0u && p.sinks != 0u) {
        let s = sk[h];
        var ms = 1.0;
        var vs = 1.0;
        if (s > fm) {
            ms = exp(fm - s);
            for (var a = 0u; a < 8u; a++) {
                acc[a] *= ms;
            }
        } else {
            vs = exp(s - fm);
        }
        fsum = fma(fsum, ms, vs);
    }
    var f = 1.0;
    if (p.flash != 0u) {
        f = select(0.0, 1.0 / fsum, fsum != 0.0);
    }
    let ob = (t * p.n_head + h) * hdv;
    for (var a = 0u; a < 8u; a++) {
        let d = lid + a * WG;
        if (d < hdv) {
            o[ob + d] = acc[a] * f;
        }
    }
    if (p.act != 0u) {
        // The head's output as written above, visible to the whole workgroup.
        storageBarrier();
        let act = p.act - 1u;
        let qk = select(32u, 256u, act == 2u);
        let k = p.n_head * hdv;
        for (var b = lid; b < hdv / qk; b += WG) {
            quantize_block(act, ob + b * qk, p.n * k);
        }
    }
}
