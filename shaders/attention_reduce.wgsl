// attention_reduce (after attention_split or attention_tile): one workgroup per (q head h, token
// t) combines the p.n_split slots written for them (by the token's place among the launch's
// tokens, workgroups y), skipping those whose sum is 0 (no position in that range): with M the
// largest maximum (and the sink logit, p.sinks = 1), o = Σ_s e^(m_s − M)·o_s / Σ_s e^(m_s − M)·l_s,
// the sink adding e^(sk[h] − M) to the sum (ggml soft_max's sinks). With p.act = 1 +
// quantize_act's ACT the workgroup then rounds its head's output into binding 5 as attention.wgsl
// does. A head's dims may be split between parts (workgroups x = n_head · parts, a head's parts
// consecutive): each computes the weights again and combines its head_dim_v / parts dims;
// rounding, the whole activation blocks its dims lie in, writing its own words
// (attention_reduce.cu's header).

const WG: u32 = 64u;
const MAX_SPLIT: u32 = 64u; // the schedule's most ranges

struct Params {
    n_head: u32,
    n_head_kv: u32,
    head_dim: u32,
    head_dim_v: u32,
    scale: f32,
    window: u32,
    softcap: f32,
    n: u32,
    flash: u32,
    sinks: u32, // 1: binding 4 holds one logit per head
    t0: u32,
    n_rot: u32,
    neox: u32,
    act: u32,   // 0, or 1 + quantize_act's ACT: o also rounded into binding 5
    n_split: u32,
    hg: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> step: array<u32>;
@group(0) @binding(2) var<storage, read> part: array<f32>;
@group(0) @binding(3) var<storage, read_write> o: array<f32>;
@group(0) @binding(4) var<storage, read> sk: array<f32>;
@group(0) @binding(5) var<storage, read_write> qy: array<u32>;

fn act_in(i: u32) -> f32 {
    return o[i];
}

fn act_out(i: u32, v: f32) {
    qy[i] = bitcast<u32>(v);
}

fn act_word(i: u32, v: u32) {
    qy[i] = v;
}

var<workgroup> ws: array<f32, MAX_SPLIT>; // e^(m_s − M) per range

// Σ_s e^(m_s − M)·o_s for dim d of the slots from sb, in range order.
fn combine(sb: u32, hdv: u32, d: u32) -> f32 {
    var acc = 0.0;
    for (var s = 0u; s < p.n_split; s++) {
        if (ws[s] > 0.0) {
            acc += part[(sb + s) * (hdv + 2u) + d] * ws[s];
        }
    }
    return acc;
}

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let parts = nwg.x / p.n_head;
    let h = wid.x / parts;
    let hdv = p.head_dim_v;
    let chunk = hdv / parts;
    let d0 = wid.x % parts * chunk;
    let d1 = d0 + chunk;
    let t = wid.y + p.t0;
    let sb = (wid.y * p.n_head + h) * p.n_split; // range s's slot: sb + s
    var m = -3.0e38;
    for (var s = 0u; s < p.n_split; s++) {
        let mi = (sb + s) * (hdv + 2u) + hdv;
        if (part[mi + 1u] > 0.0) {
            m = max(m, part[mi]);
        }
    }
    if (p.sinks != 0u) {
        m = max(m, sk[h]);
    }
    if (lid < p.n_split) {
        let mi = (sb + lid) * (hdv + 2u) + hdv;
        ws[lid] = select(0.0, exp(part[mi] - m), part[mi + 1u] > 0.0);
    }
    workgroupBarrier();
    var l = 0.0;
    for (var s = 0u; s < p.n_split; s++) {
        if (ws[s] > 0.0) {
            l += part[(sb + s) * (hdv + 2u) + hdv + 1u] * ws[s];
        }
    }
    if (p.sinks != 0u) {
        l += exp(sk[h] - m);
    }
    let inv = select(0.0, 1.0 / l, l != 0.0);
    let ob = (t * p.n_head + h) * hdv;
    if (p.act == 0u) {
        for (var d = d0 + lid; d < d1; d += WG) {
            o[ob + d] = combine(sb, hdv, d) * inv;
        }
        return;
    }
    // The activation blocks that hold d0..d1, a word of 4 an invocation; this part's dims
    // written.
    let act = p.act - 1u;
    let qk = select(32u, 256u, act == 2u);
    let b0 = d0 / qk * qk;
    let b1 = (d1 + qk - 1u) / qk * qk;
    for (var c = b0; c < b1; c += 4u * WG) {
        let e = c + 4u * lid;
        let valid = e < b1;
        let mine = valid && e >= d0 && e < d1;
        var v = vec4<f32>();
        if (valid) {
            for (var j = 0u; j < 4u; j++) {
                v[j] = combine(sb, hdv, e + j) * inv;
                if (mine) {
                    o[ob + e + j] = v[j];
                }
            }
        }
        quantize_word_part(act, v, valid, mine, ob + e, p.n * p.n_head * hdv, lid);
    }
}
