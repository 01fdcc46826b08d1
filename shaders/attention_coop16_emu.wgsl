// attention_coop16.wgsl's matrix operations in scalar code, for devices without cooperative
// matrices: the tile's own loads, indexing, conversions and stores run as they do on the
// device's. An operand is where it lies in hs, read when multiplied (the tile leaves hs alone
// between its loads and its multiplies): its offset, then the strides between its rows (A) or
// columns (B) and between its elements along k. Invocation `lane` of a group of 32 holds
// elements lane + 32i (i < 8) of an accumulator, element e being row e % 16 of column e / 16.
// Each output adds its 16 products, exact in f32, in k order.

alias CoopA = vec3<u32>;
alias CoopB = vec3<u32>;
alias CoopC = array<f32, 8>;

var<private> lane_emu: u32;

fn coop_zero() -> CoopC {
    return CoopC();
}

fn coop_a(off: u32, stride: u32) -> CoopA {
    return vec3<u32>(off, stride, 1u);
}

fn coop_b(off: u32, stride: u32) -> CoopB {
    return vec3<u32>(off, stride, 1u);
}

fn coop_bt(off: u32, stride: u32) -> CoopB {
    return vec3<u32>(off, 1u, stride);
}

fn coop_mma(a: CoopA, b: CoopB, c: CoopC) -> CoopC {
    var d = c;
    for (var i = 0u; i < 8u; i++) {
        let e = lane_emu + 32u * i;
        let r = e % 16u;
        let n = e / 16u;
        var s = 0.0;
        for (var k = 0u; k < 16u; k++) {
            s += f32(hs[a.x + r * a.y + k * a.z]) * f32(hs[b.x + n * b.y + k * b.z]);
        }
        d[i] += s;
    }
    return d;
}

fn coop_store(c: CoopC, off: u32, stride: u32) {
    for (var i = 0u; i < 8u; i++) {
        let e = lane_emu + 32u * i;
        fs[off + (e / 16u) * stride + e % 16u] = c[i];
    }
}

@compute @workgroup_size(128)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    lane_emu = lid % 32u;
    tile(wid, lid, lid / 32u, lid % 32u);
}
