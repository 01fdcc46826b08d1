// One block of a matmul's activations rounded to the 8-bit format the CPU backend pairs with the
// weight type (the numerics quantize_act.wgsl describes): the qk elements from x0 of the
// kernel's `act_in`, written as floats d · q through its `act_out`; for q8_1 the block's
// correction goes to element `cor`. act: 0 q8_0, 1 q8_1 (32-element blocks), 2 q8_K (256).
// quantize_act and the fused rms_norm both round through this.

fn quantize_block(act: u32, x0: u32, cor: u32) {
    let qk = select(32u, 256u, act == 2u);
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
        if (amax == 0.0) {
            for (var i = 0u; i < qk; i++) {
                act_out(x0 + i, 0.0);
            }
            return;
        }
        let iscale = -127.0 / mx;
        let d = 1.0 / iscale;
        for (var i = 0u; i < qk; i++) {
            act_out(x0 + i, d * min(round(iscale * act_in(x0 + i)), 127.0));
        }
        return;
    }
    let d = amax / 127.0;
    let id = select(0.0, 127.0 / amax, amax != 0.0);
    let d16 = round_f16(d);
    var sq = 0.0;
    for (var i = 0u; i < qk; i++) {
        let q = round(act_in(x0 + i) * id);
        sq += q;
        act_out(x0 + i, d16 * q);
    }
    if (act == 1u) {
        act_out(cor, round_f16(sq * d) - d16 * sq);
    }
}
