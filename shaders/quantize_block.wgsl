// One block of a matmul's activations rounded to the 8-bit format the CPU backend pairs with the
// weight type (the numerics quantize_act.wgsl describes): the qk elements from x0 of the
// kernel's `act_in`, of nk in all (n rows of k), written through its `act_out` as floats d · q,
// for q8_1 with the block's correction at nk + x0 / 32, and through its `act_word` in the packed
// form the int8 matvec reads (`act_q_base`): the q as bytes, 4 a word, and d once per 32
// elements. act: 0 q8_0, 1 q8_1 (32-element blocks), 2 q8_K (256). quantize_act and the fused
// writers (rms_norm, the GLUs, attention) all round through this.

fn quantize_block(act: u32, x0: u32, nk: u32) {
    let qk = select(32u, 256u, act == 2u);
    let qw = act_q_base(nk) + x0 / 4u;
    let dw = act_q_base(nk) + nk / 4u + x0 / 32u;
    var amax = 0.0;
    var mx = 0.0;
    for (var i = 0u; i < qk; i++) {
        let v = act_in(x0 + i);
        if (abs(v) > amax) {
            amax = abs(v);
            mx = v;
        }
    }
    if (act == 2u) {
        var d = 0.0;
        var iscale = 0.0;
        if (amax != 0.0) {
            iscale = -127.0 / mx;
            d = 1.0 / iscale;
        }
        for (var j = 0u; j < qk / 4u; j++) {
            var q = vec4<f32>();
            for (var i = 0u; i < 4u; i++) {
                q[i] = min(round(iscale * act_in(x0 + 4u * j + i)), 127.0);
                act_out(x0 + 4u * j + i, d * q[i]);
            }
            act_word(qw + j, pack4xI8(vec4<i32>(q)));
        }
        for (var j = 0u; j < qk / 32u; j++) {
            act_word(dw + j, bitcast<u32>(d));
        }
        return;
    }
    let d = amax / 127.0;
    let id = select(0.0, 127.0 / amax, amax != 0.0);
    let d16 = round_f16(d);
    var sq = 0.0;
    for (var j = 0u; j < qk / 4u; j++) {
        var q = vec4<f32>();
        for (var i = 0u; i < 4u; i++) {
            q[i] = round(act_in(x0 + 4u * j + i) * id);
            sq += q[i];
            act_out(x0 + 4u * j + i, d16 * q[i]);
        }
        act_word(qw + j, pack4xI8(vec4<i32>(q)));
    }
    act_word(dw, bitcast<u32>(d16));
    if (act == 1u) {
        act_out(nk + x0 / 32u, round_f16(sq * d) - d16 * sq);
    }
}
