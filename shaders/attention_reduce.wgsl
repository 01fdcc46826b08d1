// attention_reduce (after attention_split or attention_tile): one workgroup per (q head h, token
// t) combines the p.n_split slots written for them (by the token's place among the launch's
// tokens, workgroups y), skipping those whose sum is 0 (no position in that range): with M the
// largest maximum (and the sink logit, p.sinks = 1), o = Σ_s e^(m_s − M)·o_s / Σ_s e^(m_s − M)·l_s,
// the sink adding e^(sk[h] − M) to the sum (ggml soft_max's sinks). With p.act = 1 +
// quantize_act's ACT the workgroup then rounds its head's output into binding 5 as attention.wgsl
// does.

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

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let h = wid.x;
    let t = wid.y + p.t0;
    let hdv = p.head_dim_v;
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
    for (var d = lid; d < hdv; d += WG) {
        var acc = 0.0;
        for (var s = 0u; s < p.n_split; s++) {
            if (ws[s] > 0.0) {
                acc += part[(sb + s) * (hdv + 2u) + d] * ws[s];
            }
        }
        o[ob + d] = acc * inv;
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
