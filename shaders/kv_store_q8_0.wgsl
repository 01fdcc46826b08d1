// kv_store for a q8_0 cache (first half of the attention op): writes token t's K and V rows at
// the token's cell (`store_cell`) as q8_0 blocks, each invocation a pair of blocks (68 bytes =
// 17 whole words, so no two invocations share a word; the gate requires K and V widths that are
// multiples of 64).
// ggml: quantize_row_q8_0_ref.

override WG: u32 = 64u;

// Params and bindings: kv_store_io.wgsl.

// Two q8_0 blocks of x as 17 little-endian words.
fn quant_pair(x: array<f32, 64>) -> array<u32, 17> {
    var bytes: array<u32, 68>;
    for (var b = 0u; b < 2u; b++) {
        var amax = 0.0;
        for (var i = 0u; i < 32u; i++) {
            amax = max(amax, abs(x[32u * b + i]));
        }
        let d = amax / 127.0;
        let id = select(0.0, 1.0 / d, d != 0.0);
        let dh = f16_bits(d);
        bytes[34u * b] = dh & 0xffu;
        bytes[34u * b + 1u] = dh >> 8u;
        for (var i = 0u; i < 32u; i++) {
            bytes[34u * b + 2u + i] = bitcast<u32>(i32(round_away(x[32u * b + i] * id))) & 0xffu;
        }
    }
    var words: array<u32, 17>;
    for (var j = 0u; j < 17u; j++) {
        words[j] = bytes[4u * j] | (bytes[4u * j + 1u] << 8u) | (bytes[4u * j + 2u] << 16u) | (bytes[4u * j + 3u] << 24u);
    }
    return words;
}

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear_id(gid, nwg, WG);
    let nk = p.n * p.kw / 64u;
    let nv = p.n * p.vw / 64u;
    var x: array<f32, 64>;
    if (i < nk) {
        for (var e = 0u; e < 64u; e++) {
            x[e] = k_at(64u * i + e);
        }
        let w = quant_pair(x);
        let t = 64u * i / p.kw;
        let base = store_cell(t) * (p.kw * 17u / 64u) + 17u * (i - t * (p.kw / 64u));
        for (var j = 0u; j < 17u; j++) {
            kc[base + j] = w[j];
        }
    } else if (i < nk + nv) {
        let j0 = i - nk;
        for (var e = 0u; e < 64u; e++) {
            x[e] = v[64u * j0 + e];
        }
        let w = quant_pair(x);
        let t = 64u * j0 / p.vw;
        let base = store_cell(t) * (p.vw * 17u / 64u) + 17u * (j0 - t * (p.vw / 64u));
        for (var j = 0u; j < 17u; j++) {
            vc[base + j] = w[j];
        }
    }
}
