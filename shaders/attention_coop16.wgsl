// attention_tile_coop16.wgsl's matrix operations on the device's cooperative matrices (16 × 16
// f16 operands, f32 accumulators), run by whole subgroups of 32. Operands come from hs, results
// go to fs; an offset and a stride in elements place each.

alias CoopA = coop_mat16x16<f16, A>;
alias CoopB = coop_mat16x16<f16, B>;
alias CoopC = coop_mat16x16<f32, C>;

// 16 × 16 zeros: fs[0 .. 256] as the tile wrote them.
fn coop_zero() -> CoopC {
    return coopLoad<CoopC>(&fs[0], 16u);
}

// A: 16 rows of 16 halves, row-major (row i at off + i · stride).
fn coop_a(off: u32, stride: u32) -> CoopA {
    return coopLoadT<CoopA>(&hs[off], stride);
}

// B column-major: column n's 16 halves at off + n · stride.
fn coop_b(off: u32, stride: u32) -> CoopB {
    return coopLoad<CoopB>(&hs[off], stride);
}

// B row-major: row k's 16 halves at off + k · stride.
fn coop_bt(off: u32, stride: u32) -> CoopB {
    return coopLoadT<CoopB>(&hs[off], stride);
}

fn coop_mma(a: CoopA, b: CoopB, c: CoopC) -> CoopC {
    return coopMultiplyAdd(a, b, c);
}

// C column-major: column n at off + n · stride.
fn coop_store(c: CoopC, off: u32, stride: u32) {
    coopStore(c, &fs[off], stride);
}

@compute @workgroup_size(128)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
    @builtin(subgroup_id) sg: u32,
    @builtin(subgroup_invocation_id) lane: u32,
) {
    tile(wid, lid, sg, lane);
}
