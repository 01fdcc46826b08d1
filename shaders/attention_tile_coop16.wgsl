// attention_tile.wgsl over an f16 or q8_0 cache on 16 × 16 f16 cooperative matrices with f32
// accumulators: the scores and the probabilities' products with V on the tensor cores, as
// ggml-cuda's fattn-mma-f16 takes them. The same launch (grid, parameters, `part` slots) as
// attention_tile.wgsl, but for its shape: workgroup (x, s, z) of 128 invocations (four
// subgroups of 32) takes the p.tq tokens u = z·tq .. of the launch and the p.hg query heads
// x·hg .. of one KV head, rows r = i·hg + hh: at most tr = 32 for heads up to 128 wide
// (multiples of 16; of 32 for q8_0), 16 for wider ones up to 256 (multiples of 64; of 128);
// K's and V's the same (`Variant::coop_attention_tq`). Per kt positions of a run (kt = tr):
//   the K tile goes to workgroup memory as halves (the cache's own bits, or q8_0's integers
//   beside their blocks' scales), and subgroup g multiplies 16 rows of Q by 16 positions of K:
//   at tr 32 rows 16 (g % 2) .. by positions 16 (g / 2) .. over the whole head, storing its
//   16 × 16 scores as f32; at tr 16 all of them over a quarter of the head, storing its partial
//   scores for the rows to add. Over q8_0, q is quantized to q8_0 as the CPU quantizes it, and
//   each 32-element block's integer sums (exact) are scaled by both blocks' scales apart;
//   each of the tr rows is scaled, soft-capped and masked, its running maximum and sum updated,
//   and its probabilities rounded to halves (as the CPU rounds them for an f16 cache) while the
//   V tile (q8_0's values rounded to halves) replaces the K tile;
//   subgroup g multiplies its rows' probabilities (16 × kt) by V's columns 16c .. + 16 for the
//   chunks c ≡ g / 2 (mod 2) at tr 32 (its rows'), c ≡ g (mod 4) at tr 16, and each of its
//   invocations adds the 8 elements it owns of each product (through workgroup memory) to its
//   accumulators, rescaled by the row's factor.
// The rows of a tile outside the run (tokens of another sequence) score but take no
// probability. Over an f16 cache Q is rounded to halves as the CPU rounds it, and K and V are
// the cache's halves; products are exact in f32 and summed there. Over q8_0 the scores are the
// CPU's, and the rounding of the probabilities and of V to halves is the tile's error. The matrix operations are attention_coop16.wgsl's
// (the device's) or attention_coop16_emu.wgsl's (the same operations in scalar code), which
// hold the entry point; each calls `tile`. Workgroup memory: 25,472 bytes.

const TR: u32 = 32u; // rows (tokens × heads) per tile, at most
const KT: u32 = 32u; // positions per step, at most
const MAX_HD: u32 = 128u; // the widest head of 32-row tiles (16-row ones take twice it)
const MAX_ST: u32 = MAX_HD + 8u; // halves per Q, K or V row at 32 rows (or 16 of twice it)
const PS: u32 = KT + 8u; // halves per probability row
const KOFF: u32 = TR * MAX_ST; // the K, then V, tile in hs
const POFF: u32 = KOFF + KT * MAX_ST; // the probabilities in hs
const MAX_CI: u32 = 4u; // V chunks per subgroup: 8 of 16 over 2 subgroups, or 16 over 4
const MASKED: f32 = -3.0e38;

// attention_tile_head.wgsl, the head, declares Params, the bindings and row_lo.

// Q (row r at r · st), the K or V tile (position jj at KOFF + jj · st), the probabilities
// (row r at POFF + r · PS); st = head_dim + 8 keeps every row 16-byte aligned and a subgroup's
// rows on different banks.
var<workgroup> hs: array<f16, 9984>;
// The scores (row r, position jj at jj · tr + r; at tr 16 subgroup g's quarter of them at
// 256 g + jj · 16 + r, the rows adding them up in the first quarter's place), then each
// subgroup's 16 × 16 product with V (row r, dimension d at 256 g + 16 d + r).
var<workgroup> fs: array<f32, 1024>;
var<workgroup> qd: array<f32, 128>; // q8_0: Q's block scales (row r's block b at r · nb + b)
var<workgroup> kd: array<f32, 128>; // q8_0: K's block scales (position jj's at jj · nb + b)
var<workgroup> mr: array<f32, 32>; // running maximum per row
var<workgroup> fr: array<f32, 32>; // this step's rescale of the row's sum and output
var<workgroup> lr: array<f32, 32>; // running sum

// Workgroup `wid`; `lid` the invocation, `sg` its subgroup, `lane` its index there.
fn tile(wid: vec3<u32>, lid: u32, sg: u32, lane: u32) {
    let s = wid.y;
    let hg = p.hg;
    let h0 = wid.x * hg;
    let g = h0 / (p.n_head / p.n_head_kv);
    let u0 = wid.z * p.tq;
    let tb = p.t0 + u0;
    let nt = min(p.tq, p.n - tb);
    let hd = p.head_dim;
    let st = hd + 8u;
    let wide = hd > MAX_HD;
    let tr = select(TR, TR / 2u, wide);
    let kt = tr;
    let nch = hd / 16u; // V chunks of 16 dimensions
    let cs = select(2u, 4u, wide); // subgroups that share a row's chunks
    let nci = (nch + cs - 1u) / cs; // those of a subgroup (a short last round repeats one)
    let c0 = select(sg / 2u, sg, wide); // the subgroup's first chunk
    let rb = select(16u * (sg % 2u), 0u, wide); // its rows
    let pb = select(16u * (sg / 2u), 0u, wide); // its positions in the scores
    let dq = select(hd, hd / 4u, wide); // its part of the head in the scores
    let sq = select(0u, 256u * sg, wide); // where its scores go

    // The tile's queries, rounded as the CPU rounds q for the cache type: per QBLOCK-element
    // block the values to multiply as halves (f16's, or q8_0's integers) and the block's scale
    // (q8_0); rows past the tile's zeros.
    let nb = hd / QBLOCK;
    for (var b = lid; b < tr * nb; b += 128u) {
        let r = b / nb;
        let d0 = b % nb * QBLOCK;
        let live = r < nt * hg;
        let t = tb + r / hg;
        let qb = (t * p.n_head + h0 + r % hg) * hd;
        var amax = 0.0;
        if (QBLOCK > 1u && live) {
            for (var k = 0u; k < QBLOCK; k++) {
                amax = max(amax, abs(q_at(qb, d0 + k, t)));
            }
        }
        for (var k = 0u; k < QBLOCK; k++) {
            var v = 0.0;
            if (live) {
                v = q_int(q_at(qb, d0 + k, t), amax);
            }
            hs[r * st + d0 + k] = f16(v);
        }
        if (QBLOCK > 1u) {
            qd[b] = select(0.0, q_scale(amax), live);
        }
    }
    for (var i = lid; i < 1024u; i += 128u) {
        fs[i] = 0.0;
    }
    workgroupBarrier();
    // Accumulators start from zeros loaded from workgroup memory (a constructed matrix's
    // contents are not defined on every platform).
    let zero = coop_zero();

    let kw = p.n_head_kv * hd / 2u;
    var i0 = 0u;
    while (i0 < nt) {
        // The run: tokens i0 .. i1 of one sequence (rows r0 .. r1), and the positions any of
        // them reads.
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
        let r1 = i1 * hg;
        let chunk = split_chunk(jhi - jlo, p.n_split);
        let j0 = jlo + s * chunk;
        let j1 = min(j0 + chunk, jhi);
        // The next run's stores to hs and fs wait for every reader of the last one's.
        workgroupBarrier();
        if (lid < TR) {
            mr[lid] = MASKED;
            lr[lid] = 0.0;
        }
        // Element i of chunk ci: row rb + e % 16, dimension 16 (c0 + cs · ci) + e / 16, with
        // e = lane + 32 i.
        var acc: array<f32, 8u * MAX_CI>;

        for (var base = j0; base < j1; base += kt) {
            let cnt = min(kt, j1 - base);
            // The K tile, its pairs of halves as the cache holds them, or q8_0's integers and
            // their blocks' scales (zeros past cnt).
            for (var e = lid; e < kt * (hd / 2u); e += 128u) {
                let jj = e / (hd / 2u);
                let d = e % (hd / 2u);
                let first = QBLOCK > 1u && 2u * d % QBLOCK == 0u; // a q8_0 block's first pair
                var kp = vec2<f16>(0.0h, 0.0h);
                var ks = 0.0;
                if (jj < cnt) {
                    let i = step[cells + base + jj] * kw + g * (hd / 2u) + d;
                    kp = vec2<f16>(k_int_pair(i));
                    if (first) {
                        ks = k_scale(i);
                    }
                }
                hs[KOFF + jj * st + 2u * d] = kp.x;
                hs[KOFF + jj * st + 2u * d + 1u] = kp.y;
                if (first) {
                    kd[jj * nb + 2u * d / QBLOCK] = ks;
                }
            }
            workgroupBarrier();
            if (QBLOCK == 1u) {
                var sc = zero;
                for (var k = 0u; k < dq; k += 16u) {
                    let d0 = sq / 256u * dq + k;
                    sc = coop_mma(coop_a(rb * st + d0, st), coop_b(KOFF + pb * st + d0, st), sc);
                }
                coop_store(sc, sq + pb * tr + rb, tr);
            } else {
                // Per block the integer sums, scaled by both blocks' scales as the CPU's q8_0
                // dot product scales them (through workgroup memory), added up in block order.
                var sa: array<f32, 8>;
                for (var k = 0u; k < dq; k += QBLOCK) {
                    let d0 = sq / 256u * dq + k;
                    var c = zero;
                    for (var kk = 0u; kk < QBLOCK; kk += 16u) {
                        c = coop_mma(coop_a(rb * st + d0 + kk, st), coop_b(KOFF + pb * st + d0 + kk, st), c);
                    }
                    coop_store(c, 256u * sg, 16u);
                    workgroupBarrier();
                    for (var i = 0u; i < 8u; i++) {
                        let e = lane + 32u * i;
                        let w = qd[(rb + e % 16u) * nb + d0 / QBLOCK] * kd[(pb + e / 16u) * nb + d0 / QBLOCK];
                        sa[i] += fs[256u * sg + e] * w;
                    }
                    workgroupBarrier();
                }
                for (var i = 0u; i < 8u; i++) {
                    let e = lane + 32u * i;
                    fs[sq + (pb + e / 16u) * tr + rb + e % 16u] = sa[i];
                }
            }
            workgroupBarrier();
            if (lid < tr) {
                let r = lid;
                let run = r >= r0 && r < r1;
                let m0 = mr[r];
                var m = m0;
                if (run) {
                    let t = tb + r / hg;
                    let lo = row_lo(t);
                    let pos = step[4u + 2u * t];
                    for (var jj = 0u; jj < cnt; jj++) {
                        let j = base + jj;
                        var v = MASKED;
                        if (j >= lo && j <= pos) {
                            v = fs[jj * tr + r];
                            if (wide) {
                                v += fs[256u + jj * tr + r] + fs[512u + jj * tr + r] + fs[768u + jj * tr + r];
                            }
                            v *= p.scale;
                            if (p.softcap > 0.0) {
                                v = tanh(clamp(v / p.softcap, -15.0, 15.0)) * p.softcap;
                            }
                        }
                        fs[jj * tr + r] = v;
                        m = max(m, v);
                    }
                }
                var l = 0.0;
                for (var jj = 0u; jj < kt; jj++) {
                    var pr = 0.0;
                    if (run && jj < cnt) {
                        let v = fs[jj * tr + r];
                        if (v > MASKED) {
                            pr = round_f16(exp(v - m));
                        }
                    }
                    hs[POFF + r * PS + jj] = f16(pr);
                    l += pr;
                }
                let f = select(1.0, exp(m0 - m), run);
                fr[r] = f;
                mr[r] = m;
                lr[r] = lr[r] * f + l;
            }
            // The V tile over the K tile, as halves (q8_0's values rounded to them; zeros past
            // cnt, whose probabilities are zero too).
            for (var e = lid; e < kt * (hd / 2u); e += 128u) {
                let jj = e / (hd / 2u);
                let d = e % (hd / 2u);
                var vp = vec2<f16>(0.0h, 0.0h);
                if (jj < cnt) {
                    let i = step[cells + base + jj] * kw + g * (hd / 2u) + d;
                    if (QBLOCK == 1u) {
                        vp = vec2<f16>(f16x2(vc[i]));
                    } else {
                        vp = vec2<f16>(vec2<f32>(round_f16(v_at(2u * i)), round_f16(v_at(2u * i + 1u))));
                    }
                }
                hs[KOFF + jj * st + 2u * d] = vp.x;
                hs[KOFF + jj * st + 2u * d + 1u] = vp.y;
            }
            workgroupBarrier();
            for (var i = 0u; i < 8u; i++) {
                let f = fr[rb + (lane + 32u * i) % 16u];
                for (var ci = 0u; ci < MAX_CI; ci++) {
                    acc[8u * ci + i] *= f;
                }
            }
            for (var ci = 0u; ci < MAX_CI; ci++) {
                if (ci < nci) {
                    let c = min(c0 + cs * ci, nch - 1u);
                    var o = zero;
                    for (var k0 = 0u; k0 < kt; k0 += 16u) {
                        o = coop_mma(coop_a(POFF + rb * PS + k0, PS), coop_bt(KOFF + k0 * st + 16u * c, st), o);
                    }
                    coop_store(o, 256u * sg, 16u);
                    workgroupBarrier();
                    if (c0 + cs * ci < nch) {
                        for (var i = 0u; i < 8u; i++) {
                            acc[8u * ci + i] += fs[256u * sg + lane + 32u * i];
                        }
                    }
                    workgroupBarrier();
                }
            }
        }

        // Row r is token u0 + r / hg's head h0 + r % hg.
        for (var ci = 0u; ci < nci; ci++) {
            let c = c0 + cs * ci;
            for (var i = 0u; i < 8u; i++) {
                let e = lane + 32u * i;
                let r = rb + e % 16u;
                if (c < nch && r >= r0 && r < r1 && lr[r] > 0.0) {
                    let slot = ((u0 + r / hg) * p.n_head + h0 + r % hg) * p.n_split + s;
                    part[slot * (hd + 2u) + 16u * c + e / 16u] = acc[8u * ci + i];
                }
            }
        }
        if (lid >= r0 && lid < r1) {
            let slot = ((u0 + lid / hg) * p.n_head + h0 + lid % hg) * p.n_split + s;
            part[slot * (hd + 2u) + hd] = mr[lid];
            part[slot * (hd + 2u) + hd + 1u] = lr[lid];
        }
        i0 = i1;
    }
}
