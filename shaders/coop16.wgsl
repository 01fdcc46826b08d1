// matmul_coop16.wgsl's matrix operations on the device's cooperative matrices (16 × 16 f16
// operands, f32 accumulators), run by whole subgroups of 32.

alias CoopA = coop_mat16x16<f16, A>;
alias CoopB = coop_mat16x16<f16, B>;
alias CoopC = coop_mat16x16<f32, C>;

// 16 × 16 zeros: cs[0 .. 256] as the tile wrote them.
fn coop_zero() -> CoopC {
    return coopLoad<CoopC>(&cs[0], 16u);
}

// A: 16 rows of 16 halves from ws[off], row-major with stride S.
fn coop_a(off: u32) -> CoopA {
    return coopLoadT<CoopA>(&ws[off], S);
}

// B: 16 tokens' runs of 16 halves from xs[off], column-major with stride S.
fn coop_b(off: u32) -> CoopB {
    return coopLoad<CoopB>(&xs[off], S);
}

fn coop_mma(a: CoopA, b: CoopB, c: CoopC) -> CoopC {
    return coopMultiplyAdd(a, b, c);
}

// C to cs[off ..], column-major with stride TM.
fn coop_store(c: CoopC, off: u32) {
    coopStore(c, &cs[off], TM);
}

@compute @workgroup_size(128)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
    @builtin(subgroup_id) sg: u32,
) {
    tile(wid, nwg, lid, sg);
}
