// rms_norm: y = x / sqrt(mean(x²) + eps) · w over each row. One workgroup per row. Also the
// head norm (Qwen3 / Gemma 3 Q and K norms): rows one head wide, w [head_dim].
// ggml: ggml_compute_forward_rms_norm_f32 followed by ggml_mul. With p.plain = 1 no weight (Gemma
// 4's V norm, a bare ggml_rms_norm; cpu::ops::head_norm_plain): w is bound but never read.
// With p.act = 1 + quantize_act's ACT (the norm feeding quantized matmuls), the workgroup then
// rounds its row as quantize_act would into binding 4 (quantize_word.wgsl, a word per
// invocation): the same values, one dispatch fewer. Binding 4 is never written with p.act = 0.
// With p.slice > 0 a row is ceil(width / slice) workgroups, a row's consecutive: each sums the
// whole row's squares (the same sums in the same order in each: the one-workgroup scale), then
// writes and rounds its slice of whole activation blocks (or half a q8_K block), so a step of one
// row is not one workgroup (rms_norm.cu's header). 256 invocations: a row of 4,096 is 16 elements each to sum.

override WG: u32 = 256u;

struct Params {
    width: u32,
    eps: f32,
    rows: u32,
    plain: u32,
    act: u32,   // 0, or 1 + quantize_act's ACT
    slice: u32, // elements of a row per workgroup (whole activation blocks, or 128: half a q8_K block); 0: the whole row
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> w: array<u32>;
@group(0) @binding(2) var<storage, read> x: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
@group(0) @binding(4) var<storage, read_write> qy: array<u32>;

fn act_in(i: u32) -> f32 {
    return y[i];
}

fn act_out(i: u32, v: f32) {
    qy[i] = bitcast<u32>(v);
}

fn act_word(i: u32, v: u32) {
    qy[i] = v;
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, ln: Lanes) {
    let slice = select(p.slice, p.width, p.slice == 0u);
    let slices = (p.width + slice - 1u) / slice;
    let g = wid.x + wid.y * nwg.x;
    let row = g / slices;
    if (row >= p.rows) {
        return; // a spare workgroup of the folded grid (uniform: the whole workgroup leaves)
    }
    let base = row * p.width;
    let s0 = (g % slices) * slice;
    let s1 = min(p.width, s0 + slice);
    var s = 0.0;
    for (var i = ln.lid; i < p.width; i += WG) {
        let v = x[base + i];
        s += v * v;
    }
    let scale = 1.0 / sqrt(wg_sum(s, ln) / f32(p.width) + p.eps);
    if (p.plain == 1u) {
        for (var i = s0 + ln.lid; i < s1; i += WG) {
            y[base + i] = x[base + i] * scale;
        }
    } else {
        for (var i = s0 + ln.lid; i < s1; i += WG) {
            y[base + i] = (x[base + i] * scale) * dq1(i);
        }
    }
    if (p.act == 3u && slice < 256u) {
        // Half a q8_K block (slice 128): the block's scale needs all of it, so the first 64
        // invocations normalize the whole block again, as written above, value for value (its
        // other half is another workgroup's to write), and the words of this slice are written.
        let b0 = s0 / 256u * 256u;
        let e = b0 + 4u * ln.lid;
        let valid = ln.lid < 64u;
        var v = vec4<f32>();
        if (valid) {
            for (var j = 0u; j < 4u; j++) {
                if (p.plain == 1u) {
                    v[j] = x[base + e + j] * scale;
                } else {
                    v[j] = (x[base + e + j] * scale) * dq1(e + j);
                }
            }
        }
        quantize_word_part(2u, v, valid, valid && e >= s0 && e < s1, base + e, p.rows * p.width, ln.lid);
    } else if (p.act != 0u) {
        // The slice as written above, visible to the whole workgroup; then rounded a word per
        // invocation, WG words at a time (whole blocks: the slice is whole blocks).
        storageBarrier();
        quantize_row(p.act - 1u, base + s0, s1 - s0, p.rows * p.width, ln.lid);
    }
}
