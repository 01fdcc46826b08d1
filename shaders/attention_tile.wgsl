// attention_tile (prefill steps with a long context; kv_store ran first, attention_reduce
// follows): flash attention over a tile of query tokens. Workgroup (x, s, z) takes the p.tq
// tokens u = z·tq .. of the launch (token t = t0 + u) and the p.hg query heads x·hg .. of one
// KV head: rows r = i·hg + hh of (token, head), at most 64. Its tokens run in runs of one
// sequence (the same cell row step[5 + 2t]); for each run it cuts the run's positions
// [min lo, max pos] into p.n_split ranges of whole 64-position tiles (split_chunk) and takes
// range s, p.kt positions at a time: the K rows go to workgroup memory once for all of the
// run's rows, every (row, position) pair is scored (masked outside the row's own [lo, pos]),
// the online softmax of each row is updated, then the V rows replace the K rows and every
// (row, dimension) pair accumulates p·V. So K and V are read once per tile of rows, not once
// per row. Both products take RB rows per invocation, so each element read from workgroup
// memory serves RB multiply-adds. Each row's unnormalised output, maximum and sum go to `part`
// in the slot of its (token, head, range), as attention_split writes its own:
//   part[slot · (head_dim_v + 2) + d], then max, sum; slot = (u · n_head + h) · n_split + s
// A row that has no position in the range writes max −3e38 and sum 0 alone: attention_reduce
// skips the slot and never reads its output. q is read (rotated where a rope is folded in) and rounded as the CPU rounds it for the
// cache type; the probabilities are not rounded (as attention_split).
// Workgroup memory is fixed (16,128 bytes): the host picks tq, hg and kt within MAX_QD, MAX_KD
// and MAX_PS (schedule::tile_shape).

const WG: u32 = 64u;
const MAX_QD: u32 = 2048u; // rows × max(head_dim, head_dim_v)
const MAX_KD: u32 = 1024u; // kt × (max(head_dim, head_dim_v) + 1): a K, then a V, tile
const MAX_PS: u32 = 768u; // rows × kt
const MAX_R: u32 = 64u; // rows
const MAX_A: u32 = 32u; // (row, dimension) pairs per invocation: MAX_QD / WG
const RB: u32 = 4u; // rows per invocation in the products; blocks of RB rows fit MAX_QD too
const MAX_QA: u32 = MAX_A;
const MASKED: f32 = -3.0e38;

// attention_tile_head.wgsl, the head, declares Params, the bindings and row_lo.

var<workgroup> qs: array<f32, MAX_QD>; // row r's query at r · head_dim
// The K tile (position jj at jj · (head_dim + 1): the odd stride keeps a warp's rows on
// different banks), then the V tile (at jj · head_dim_v).
var<workgroup> kvs: array<f32, MAX_KD>;
var<workgroup> ps: array<f32, MAX_PS>; // rows × kt: the scores, then the probabilities
var<workgroup> mr: array<f32, MAX_R>; // running maximum per row
var<workgroup> fr: array<f32, MAX_R>; // this tile's rescale of the row's sum and output
var<workgroup> lr: array<f32, MAX_R>; // running sum

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let s = wid.y;
    let hg = p.hg;
    let h0 = wid.x * hg;
    let g = h0 / (p.n_head / p.n_head_kv);
    let u0 = wid.z * p.tq;
    let tb = p.t0 + u0;
    let nt = min(p.tq, p.n - tb);
    let hd = p.head_dim;
    let hdv = p.head_dim_v;
    let kt = p.kt;
    let ks = hd + 1u;

    // The tile's queries, rounded per head as attention.wgsl rounds one.
    let nq = nt * hg * hd;
    for (var i = lid; i < nq; i += WG) {
        let r = i / hd;
        let t = tb + r / hg;
        qs[i] = q_at((t * p.n_head + h0 + r % hg) * hd, i % hd, t);
    }
    round_q(nq, lid);

    let kw = p.n_head_kv * hd;
    let vw = p.n_head_kv * hdv;
    var i0 = 0u;
    while (i0 < nt) {
        // The run: tokens i0 .. i1 of one sequence, and the positions any of them reads.
        let cells = step[5u + 2u * (tb + i0)];
        var i1 = i0 + 1u;
        var jlo = row_lo(tb + i0);
        var jhi = step[4u + 2u * (tb + i0)] + 1u;
        while (i1 < nt && step[5u + 2u * (tb + i1)] == cells) {
            jlo = min(jlo, row_lo(tb + i1));
            jhi = max(jhi, step[4u + 2u * (tb + i1)] + 1u);
            i1++;
        }
        let r0 = i0 * hg;
        let nr = (i1 - i0) * hg;
        let nb = (nr + RB - 1u) / RB; // blocks of RB rows
        let chunk = split_chunk(jhi - jlo, p.n_split);
        let j0 = jlo + s * chunk;
        let j1 = min(j0 + chunk, jhi);
        if (lid < nr) {
            mr[lid] = MASKED;
            lr[lid] = 0.0;
        }
        var acc: array<f32, MAX_A>;
        workgroupBarrier();

        for (var base = j0; base < j1; base += kt) {
            let cnt = min(kt, j1 - base);
            for (var e = lid; e < cnt * (hd / 2u); e += WG) {
                let jj = e / (hd / 2u);
                let d = e % (hd / 2u);
                let kp = k_pair((step[cells + base + jj] * kw + g * hd) / 2u + d);
                kvs[jj * ks + 2u * d] = kp.x;
                kvs[jj * ks + 2u * d + 1u] = kp.y;
            }
            workgroupBarrier();
            // Each invocation scores RB rows against one position: every key element it reads
            // serves RB rows. (A row past nr reads row nr − 1 and is not written.)
            for (var e = lid; e < nb * kt; e += WG) {
                let rb = e / kt * RB;
                let jj = e % kt;
                let ko = jj * ks;
                var sc: array<f32, RB>;
                for (var d = 0u; d < hd; d += 2u) {
                    let k0 = kvs[ko + d];
                    let k1 = kvs[ko + d + 1u];
                    for (var x = 0u; x < RB; x++) {
                        let qo = (r0 + min(rb + x, nr - 1u)) * hd + d;
                        sc[x] += qs[qo] * k0 + qs[qo + 1u] * k1;
                    }
                }
                let j = base + jj;
                for (var x = 0u; x < RB; x++) {
                    let r = rb + x;
                    if (r < nr) {
                        let t = tb + i0 + r / hg;
                        var v = MASKED;
                        if (jj < cnt && j >= row_lo(t) && j <= step[4u + 2u * t]) {
                            v = sc[x] * p.scale;
                            if (p.softcap > 0.0) {
                                v = tanh(clamp(v / p.softcap, -15.0, 15.0)) * p.softcap;
                            }
                        }
                        ps[r * kt + jj] = v;
                    }
                }
            }
            workgroupBarrier();
            if (lid < nr) {
                let m0 = mr[lid];
                var m = m0;
                for (var jj = 0u; jj < cnt; jj++) {
                    m = max(m, ps[lid * kt + jj]);
                }
                var l = 0.0;
                for (var jj = 0u; jj < cnt; jj++) {
                    let sc = ps[lid * kt + jj];
                    let pr = select(0.0, exp(sc - m), sc > MASKED);
                    ps[lid * kt + jj] = pr;
                    l += pr;
                }
                let f = exp(m0 - m);
                fr[lid] = f;
                mr[lid] = m;
                lr[lid] = lr[lid] * f + l;
            }
            for (var e = lid; e < cnt * hdv; e += WG) {
                let jj = e / hdv;
                kvs[e] = v_at(step[cells + base + jj] * vw + g * hdv + e % hdv);
            }
            workgroupBarrier();
            // Each invocation accumulates RB rows of a dimension: every value it reads serves RB
            // rows.
            for (var a = 0u; a < MAX_A / RB; a++) {
                let i = lid + a * WG;
                if (i < nb * hdv) {
                    let rb = i / hdv * RB;
                    let d = i % hdv;
                    for (var x = 0u; x < RB; x++) {
                        acc[a * RB + x] *= fr[min(rb + x, nr - 1u)];
                    }
                    for (var jj = 0u; jj < cnt; jj++) {
                        let v = kvs[jj * hdv + d];
                        for (var x = 0u; x < RB; x++) {
                            acc[a * RB + x] += ps[min(rb + x, nr - 1u) * kt + jj] * v;
                        }
                    }
                }
            }
            workgroupBarrier();
        }

        // Row r is token u0 + i0 + r / hg's head h0 + r % hg.
        for (var a = 0u; a < MAX_A / RB; a++) {
            let i = lid + a * WG;
            if (i < nb * hdv) {
                for (var x = 0u; x < RB; x++) {
                    let r = i / hdv * RB + x;
                    if (r < nr && lr[r] > 0.0) {
                        let slot = ((u0 + i0 + r / hg) * p.n_head + h0 + r % hg) * p.n_split + s;
                        part[slot * (hdv + 2u) + i % hdv] = acc[a * RB + x];
                    }
                }
            }
        }
        if (lid < nr) {
            let slot = ((u0 + i0 + lid / hg) * p.n_head + h0 + lid % hg) * p.n_split + s;
            part[slot * (hdv + 2u) + hdv] = mr[lid];
            part[slot * (hdv + 2u) + hdv + 1u] = lr[lid];
        }
        workgroupBarrier();
        i0 = i1;
    }
}
