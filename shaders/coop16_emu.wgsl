// coop16.wgsl's matrix operations in scalar code, for devices without cooperative matrices:
// the tile's own loads, indexing, conversions and store run as they do on the device's. An
// operand is its offset in workgroup memory, read when multiplied (the tile leaves ws and xs
// alone between its loads and its multiplies); invocation `lane` of a group of 32 holds
// elements lane + 32i (i < 8) of an accumulator, element e being row e % 16 of column e / 16.
// Each output adds its 16 products, exact in f32, in k order.

alias CoopA = u32;
alias CoopB = u32;
alias CoopC = array<f32, 8>;

var<private> lane: u32;

fn coop_zero() -> CoopC {
    return CoopC();
}

fn coop_a(off: u32) -> CoopA {
    return off;
}

fn coop_b(off: u32) -> CoopB {
    return off;
}

fn coop_mma(a: CoopA, b: CoopB, c: CoopC) -> CoopC {
    var d = c;
    for (var i = 0u; i < 8u; i++) {
        let e = lane + 32u * i;
        let r = e % 16u;
        let t = e / 16u;
        var s = 0.0;
        for (var k = 0u; k < 16u; k++) {
            s += f32(ws[a + r * S + k]) * f32(xs[b + t * S + k]);
        }
        d[i] += s;
    }
    return d;
}

fn coop_store(c: CoopC, off: u32) {
    for (var i = 0u; i < 8u; i++) {
        let e = lane + 32u * i;
        cs[off + (e / 16u) * TM + e % 16u] = c[i];
    }
}

@compute @workgroup_size(128)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    lane = lid % 32u;
    tile(wid, nwg, lid, lid / 32u);
}
