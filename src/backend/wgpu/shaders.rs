//! The WGSL sources (`shaders/`) and how a kernel variant is assembled from them: a reduction
//! prelude (workgroup memory or subgroups), `common.wgsl`, then for weight-reading ops the byte
//! readers and one quant file (plus, for the matmuls, whether the activations carry q8_1
//! corrections), for the attention ops one KV file, and last the op's files as its row of the
//! kernel table (`gpu::table`) names them: declarations it shares (`kv_store_io.wgsl`), the
//! body, and the shared body of the element-wise ops (`binary.wgsl`, `unary.wgsl`), whose files
//! hold only `fn op`. Plain concatenation; workgroup sizes (and
//! `quantize_act`'s format) are WGSL `override`s set at pipeline creation.

use crate::backend::gpu::kernels::Variant;
use crate::backend::gpu::table::Kernel;
use crate::backend::KvType;
use crate::quant::QType;

macro_rules! shader {
    ($path:literal) => {
        include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/shaders/", $path))
    };
}

const REDUCE_SHARED: &str = shader!("reduce_shared.wgsl");
const REDUCE_SUBGROUP: &str = shader!("reduce_subgroup.wgsl");
const COMMON: &str = shader!("common.wgsl");
const BYTES: &str = shader!("bytes.wgsl");
/// `matmul_coop16.wgsl`'s matrix operations and entry point on the device's cooperative
/// matrices.
pub const COOP16_OPS: &str = shader!("coop16.wgsl");
/// The same operations emulated in scalar code (`Coop::F16x16Emulated`).
pub const COOP16_EMULATED: &str = shader!("coop16_emu.wgsl");
/// `attention_tile_coop16.wgsl`'s matrix operations and entry point, on the device's
/// cooperative matrices and emulated.
const ATTN_COOP16_OPS: &str = shader!("attention_coop16.wgsl");
const ATTN_COOP16_EMULATED: &str = shader!("attention_coop16_emu.wgsl");
/// `q_at` alone (`attention_q.wgsl`), the query reader of `attention_tile_coop16.wgsl`, which
/// rounds its queries itself.
const ATTENTION_Q: &str = shader!("attention_q.wgsl");

/// The cooperative-matrix tile a device's prefill matmul takes, where it takes one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Coop {
    /// The f32 or 8-bit integer tiles (`matmul.wgsl`, `matmul_i8.wgsl`).
    #[default]
    Off,
    /// 8 × 8 f32 matrices (`matmul_coop.wgsl`: Metal's simdgroup matrices), any weight type.
    F32x8,
    /// 16 × 16 f16 matrices with f32 accumulators (`matmul_coop16.wgsl` on `coop16.wgsl`: the
    /// tensor cores as Vulkan offers them), for the weights `Variant::takes_coop_f16`.
    F16x16,
    /// `matmul_coop16.wgsl` on `coop16_emu.wgsl`, the same tile with its matrix operations in
    /// scalar code: what the tests run on a device without cooperative matrices.
    F16x16Emulated,
}

impl Coop {
    /// Whether the matrices are the f16 ones (on the device or emulated).
    pub fn is_f16(self) -> bool {
        matches!(self, Coop::F16x16 | Coop::F16x16Emulated)
    }
}

/// Workgroup memory `matmul_coop16.wgsl` declares, bytes: a device with less keeps the other
/// tiles.
pub const COOP16_SHARED_BYTES: u32 = 27_648;

/// The module's f16 decode (`common.wgsl`): `f16_to_f32` (the low half of a word) and `f16x2`
/// (both halves, low first), in integer arithmetic or by the hardware.
const F16_SOFTWARE: &str = "fn f16_to_f32(h: u32) -> f32 {
    return f16_to_f32_sw(h);
}

fn f16x2(u: u32) -> vec2<f32> {
    return vec2<f32>(f16_to_f32_sw(u & 0xffffu), f16_to_f32_sw(u >> 16u));
}
";
const F16_HARDWARE: &str = "fn f16_to_f32(h: u32) -> f32 {
    return unpack2x16float(h).x;
}

fn f16x2(u: u32) -> vec2<f32> {
    return unpack2x16float(u);
}
";

/// `(name, source)` of `shaders/quant/<name>.wgsl` for each listed qtype name (ggml's
/// spelling lower-cased: `q4_k`).
macro_rules! quant_files {
    ($($name:ident),* $(,)?) => {
        &[$((
            stringify!($name),
            include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/shaders/quant/", stringify!($name), ".wgsl")),
        )),*]
    };
}

/// Every quant file, by qtype name. A test checks that each GPU weight type has exactly one,
/// and that every file in `shaders/quant/` is here.
const QUANT_FILES: &[(&str, &str)] =
    quant_files![f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0, q2_k, q3_k, q4_k, q5_k, q6_k, iq4_nl, mxfp4,];

/// The quant file for a weight type, or `None` where the GPU kernels do not read it (the gate
/// refuses it).
pub fn quant_source(q: QType) -> Option<&'static str> {
    if !q.has_gpu_kernel() {
        return None;
    }
    QUANT_FILES
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case(q.name()))
        .map(|(_, src)| *src)
}

/// The KV file for a cache type.
pub fn kv_source(kv: KvType) -> Option<&'static str> {
    Some(match kv {
        KvType::F32 => shader!("kv/f32.wgsl"),
        KvType::F16 => shader!("kv/f16.wgsl"),
        KvType::Q8_0 => shader!("kv/q8_0.wgsl"),
    })
}

/// For the matmuls: whether the weight type's activation partner is q8_1, whose block sums
/// `quantize_act` leaves as corrections (`ACT_S`), and the block offset `qmin` they multiply.
/// Only q4_1 and q5_1 have one; the other types get a stub that is never called.
fn act_s(q: QType) -> &'static str {
    if crate::backend::gpu::kernels::act_qtype(q) == Some(QType::Q8_1) {
        "const ACT_S: bool = true;\n"
    } else {
        "const ACT_S: bool = false;\nfn qmin(b: u32) -> f32 {\n    return 0.0;\n}\n"
    }
}

/// A kernel that counts, into `bad[0]`, the halves (one per invocation, 0..65535) that
/// `unpack2x16float` decodes otherwise than the integer decode does (any NaN matching any NaN).
/// Run once on an adapter that has the builtin, before the kernels are allowed to use it.
/// The cooperative-matrix probe (`device::coop_probe`): each of two subgroups multiplies
/// A (8 × 16, row-major, stride 16) by B (16 × 8, column-major, stride 16) as two 8 × 8 × 8
/// multiply-adds onto a C of zeros (loaded as the kernel loads its), the second from offset
/// pointers, stores D column-major at its own offset, and every mismatch against the scalar sum
/// adds one to `bad`.
pub const COOP_PROBE: &str = "enable wgpu_cooperative_matrix;
@group(0) @binding(0) var<storage, read_write> bad: array<atomic<u32>, 1>;
var<workgroup> a: array<f32, 128>;
var<workgroup> b: array<f32, 128>;
var<workgroup> d: array<f32, 128>;
fn av(e: u32) -> f32 { return f32((e / 16u * 3u + e % 16u * 5u) % 7u) - 3.0; }
fn bv(e: u32) -> f32 { return f32((e / 16u + 2u * (e % 16u)) % 5u) - 2.0; }
@compute @workgroup_size(64)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(subgroup_id) sg: u32) {
    for (var e = lid; e < 128u; e += 64u) {
        a[e] = av(e);
        b[e] = bv(e);
        d[e] = 0.0;
    }
    workgroupBarrier();
    var c = coopLoad<coop_mat8x8<f32, C>>(&d[0], 8u);
    workgroupBarrier();
    for (var k0 = 0u; k0 < 16u; k0 += 8u) {
        let ma = coopLoadT<coop_mat8x8<f32, A>>(&a[k0], 16u);
        let mb = coopLoad<coop_mat8x8<f32, B>>(&b[k0], 16u);
        c = coopMultiplyAdd(ma, mb, c);
    }
    coopStore(c, &d[sg * 64u], 8u);
    workgroupBarrier();
    for (var e = lid; e < 128u; e += 64u) {
        let i = e % 8u;
        let j = (e % 64u) / 8u;
        var s = 0.0;
        for (var k = 0u; k < 16u; k++) {
            s += av(i * 16u + k) * bv(j * 16u + k);
        }
        if (d[e] != s) {
            atomicAdd(&bad[0], 1u);
        }
    }
}
";

/// The f16 cooperative-matrix probe (`device::coop16_probe`): `matmul_coop16.wgsl`'s step on
/// small integers, through the matrix operations it runs on (`COOP16_OPS`, or with `emulated`
/// `COOP16_EMULATED`): four subgroups each multiply 32 rows by 32 tokens over 32 elements of
/// k, from the tile's zeros, loads, offsets and strides, store the tile's way, and every one of
/// the 4,096 outputs that differs from the scalar sum (exact: small integers) adds one to `bad`.
pub fn coop16_probe_source(emulated: bool) -> String {
    const TILE: &str = "const S: u32 = 40u;
const TM: u32 = 64u;
@group(0) @binding(0) var<storage, read_write> bad: array<atomic<u32>, 1>;
var<workgroup> ws: array<f16, 2560>;
var<workgroup> xs: array<f16, 2560>;
var<workgroup> cs: array<f32, 4096>;
fn av(r: u32, k: u32) -> f32 { return f32((r * 3u + k * 5u) % 7u) - 3.0; }
fn bv(t: u32, k: u32) -> f32 { return f32((t + 2u * k) % 5u) - 2.0; }
fn tile(wid: vec3<u32>, nwg: vec3<u32>, lid: u32, sg: u32) {
    for (var e = lid; e < 2560u; e += 128u) {
        ws[e] = f16(av(e / S, e % S));
        xs[e] = f16(bv(e / S, e % S));
    }
    for (var e = lid; e < 4096u; e += 128u) {
        cs[e] = 0.0;
    }
    workgroupBarrier();
    let zero = coop_zero();
    var c00 = zero;
    var c01 = zero;
    var c10 = zero;
    var c11 = zero;
    workgroupBarrier();
    let wr0 = 32u * (sg % 2u);
    let wt0 = 32u * (sg / 2u);
    for (var kk = 0u; kk < 32u; kk += 16u) {
        let a0 = coop_a(wr0 * S + kk);
        let a1 = coop_a((wr0 + 16u) * S + kk);
        let b0 = coop_b(wt0 * S + kk);
        let b1 = coop_b((wt0 + 16u) * S + kk);
        c00 = coop_mma(a0, b0, c00);
        c01 = coop_mma(a0, b1, c01);
        c10 = coop_mma(a1, b0, c10);
        c11 = coop_mma(a1, b1, c11);
    }
    coop_store(c00, wt0 * TM + wr0);
    coop_store(c01, (wt0 + 16u) * TM + wr0);
    coop_store(c10, wt0 * TM + wr0 + 16u);
    coop_store(c11, (wt0 + 16u) * TM + wr0 + 16u);
    workgroupBarrier();
    for (var e = lid; e < 4096u; e += 128u) {
        var s = 0.0;
        for (var k = 0u; k < 32u; k++) {
            s += av(e % TM, k) * bv(e / TM, k);
        }
        if (cs[e] != s) {
            atomicAdd(&bad[0], 1u);
        }
    }
}
";
    with_coop16_ops(TILE, emulated, COOP16_OPS, COOP16_EMULATED)
}

/// The probe of `attention_tile_coop16.wgsl`'s matrix operations (`device::attention16_probe`),
/// on the device's (`ATTN_COOP16_OPS`) or, with `emulated`, their emulation: each of four
/// subgroups multiplies as the tile does on small integers — rows of A row-major by columns of B
/// column-major at a stride read at run time (Q · Kᵀ), then A row-major at the probabilities'
/// stride by B row-major (P · V), each over two steps of 16 from zeros loaded the tile's way —
/// stores the first at its own offset with stride 16 and the second into a 32 × 32 with stride
/// 32, and every one of the 2,048 outputs that differs from the scalar sum (exact) adds one to
/// `bad`.
pub fn attention16_probe_source(emulated: bool) -> String {
    const TILE: &str = "@group(0) @binding(0) var<storage, read_write> bad: array<atomic<u32>, 1>;
var<workgroup> hs: array<f16, 9984>;
var<workgroup> fs: array<f32, 1024>;
fn hv(e: u32) -> f32 { return f32((e * 7u + e / 13u) % 9u) - 4.0; }
fn check(got: f32, want: f32) {
    if (got != want) {
        atomicAdd(&bad[0], 1u);
    }
}
fn tile(wid: vec3<u32>, lid: u32, sg: u32, lane: u32) {
    for (var e = lid; e < 9984u; e += 128u) {
        hs[e] = f16(hv(e));
    }
    for (var e = lid; e < 1024u; e += 128u) {
        fs[e] = 0.0;
    }
    workgroupBarrier();
    let zero = coop_zero();
    workgroupBarrier();
    let st = 72u + 64u * wid.x;
    let a = 16u * st * (sg % 2u);
    let b = 4352u + 16u * st * (sg / 2u);
    var c = zero;
    for (var k = 0u; k < 32u; k += 16u) {
        c = coop_mma(coop_a(a + k, st), coop_b(b + k, st), c);
    }
    let pa = 8704u + 640u * (sg % 2u);
    let vb = 4352u + 16u * (sg / 2u);
    var o = zero;
    for (var k = 0u; k < 32u; k += 16u) {
        o = coop_mma(coop_a(pa + k, 40u), coop_bt(vb + k * st, st), o);
    }
    coop_store(c, 256u * sg, 16u);
    workgroupBarrier();
    for (var i = 0u; i < 8u; i++) {
        let e = lane + 32u * i;
        var s = 0.0;
        for (var k = 0u; k < 32u; k++) {
            s += hv(a + e % 16u * st + k) * hv(b + e / 16u * st + k);
        }
        check(fs[256u * sg + e], s);
    }
    workgroupBarrier();
    let oo = 16u * (sg % 2u) + 512u * (sg / 2u);
    coop_store(o, oo, 32u);
    workgroupBarrier();
    for (var i = 0u; i < 8u; i++) {
        let e = lane + 32u * i;
        var s = 0.0;
        for (var k = 0u; k < 32u; k++) {
            s += hv(pa + e % 16u * 40u + k) * hv(vb + k * st + e / 16u);
        }
        check(fs[oo + e / 16u * 32u + e % 16u], s);
    }
}
";
    with_coop16_ops(TILE, emulated, ATTN_COOP16_OPS, ATTN_COOP16_EMULATED)
}

/// A probe's `tile` with the matrix operations (and entry point) it runs on: `ops` on the
/// device's matrices, or with `emulated` their emulation `emu`.
fn with_coop16_ops(tile: &str, emulated: bool, ops: &str, emu: &str) -> String {
    match emulated {
        true => ["enable f16;", tile, emu].join("\n"),
        false => ["enable f16;", "enable wgpu_cooperative_matrix;", tile, ops].join("\n"),
    }
}

pub fn f16_probe_source() -> String {
    const MAIN: &str = "@group(0) @binding(0) var<storage, read_write> bad: array<atomic<u32>, 1>;

fn is_nan_bits(u: u32) -> bool {
    return (u & 0x7fffffffu) > 0x7f800000u;
}

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    let h = id.x;
    let hw = bitcast<u32>(unpack2x16float(h | (h << 16u)).x);
    let hi = bitcast<u32>(unpack2x16float(h << 16u).y);
    let sw = bitcast<u32>(f16_to_f32_sw(h));
    let same = (hw == sw && hi == sw) || (is_nan_bits(hw) && is_nan_bits(hi) && is_nan_bits(sw));
    if (!same) {
        atomicAdd(&bad[0], 1u);
    }
}
";
    [COMMON, F16_SOFTWARE, MAIN].join("\n")
}

/// WGSL assembly of a variant.
pub trait WgslSource {
    /// The whole module, or `None` where a piece has no source (no kernel for that type).
    fn source(&self) -> Option<String> {
        self.source_with(false, true, Coop::Off)
    }
    /// The module with halves decoded by the hardware (`unpack2x16float`) when `f16_hw`, and
    /// with `int8` the matmuls over quantized weights in 8-bit integers (`Wgsl::body_i8`,
    /// `tail_i8`), else in f32 over the rounded values (the same products, summed in another
    /// order); with `coop` the prefill tiles on cooperative matrices (`Wgsl::body_coop`,
    /// `Wgsl::body_coop16`: `Coop`), ahead of `int8`'s.
    fn source_with(&self, f16_hw: bool, int8: bool, coop: Coop) -> Option<String>;
    /// Pipeline-overridable constants (`WG`).
    fn constants(&self) -> Vec<(&'static str, f64)>;
}

impl WgslSource for Variant {
    fn source_with(&self, f16_hw: bool, int8: bool, coop: Coop) -> Option<String> {
        let k = self.kernel;
        let f16 = if f16_hw { F16_HARDWARE } else { F16_SOFTWARE };
        let mut parts: Vec<&str> = vec![
            if self.subgroups { REDUCE_SUBGROUP } else { REDUCE_SHARED },
            COMMON,
            f16,
        ];
        if !k.reduces() {
            // Keep the module free of the (unused) reduction scratch and Lanes struct.
            parts.remove(0);
        }
        let info = k.info();
        if k.reads_matrix() || k.reads_vector() {
            parts.push(BYTES);
            parts.push(quant_source(self.qtype?)?);
            if info.act_input {
                parts.push(act_s(self.qtype?));
            }
        }
        if k.uses_kv() {
            parts.push(kv_source(self.kv?)?);
        }
        let w = &info.wgsl;
        parts.extend(w.head);
        let i8 = int8 && self.qtype.and_then(crate::backend::gpu::kernels::act_qtype).is_some();
        let coop16 = w.body_coop16.filter(|_| coop.is_f16() && self.takes_coop_f16());
        let coop8 = w.body_coop.filter(|_| coop == Coop::F32x8);
        parts.push(match (w.body_kv_q8_0, coop8.or(coop16), w.body_i8) {
            (Some(b), _, _) if self.kv == Some(KvType::Q8_0) => b,
            (_, Some(b), _) => b,
            (_, _, Some(b)) if i8 => b,
            _ => w.body,
        });
        let emulated = coop == Coop::F16x16Emulated;
        let attention = k == Kernel::AttentionTile;
        if coop16.is_some() {
            parts.push(match (attention, emulated) {
                (false, false) => COOP16_OPS,
                (false, true) => COOP16_EMULATED,
                (true, false) => ATTN_COOP16_OPS,
                (true, true) => ATTN_COOP16_EMULATED,
            });
        }
        // Enable directives come before every declaration.
        if (coop8.is_some() || coop16.is_some()) && !emulated {
            parts.insert(0, "enable wgpu_cooperative_matrix;");
        }
        if coop16.is_some() {
            parts.insert(0, "enable f16;");
        }
        parts.extend(match (coop16.is_some() && attention, i8) {
            (true, _) => Some(ATTENTION_Q),
            (false, true) => w.tail_i8.or(w.tail),
            (false, false) => w.tail,
        });
        Some(parts.join("\n"))
    }

    fn constants(&self) -> Vec<(&'static str, f64)> {
        let mut c: Vec<(&'static str, f64)> = self
            .kernel
            .workgroup_size()
            .map(|wg| vec![("WG", wg as f64)])
            .unwrap_or_default();
        if self.kernel == Kernel::QuantizeAct {
            // quantize_act.wgsl's ACT: 0 q8_0, 1 q8_1, 2 q8_K.
            let act = crate::backend::gpu::kernels::ACT_QTYPES
                .iter()
                .position(|&a| Some(a) == self.qtype);
            c.push(("ACT", act.unwrap_or(0) as f64));
        }
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::gpu::kernels::{ACT_QTYPES, WEIGHT_QTYPES};

    /// The f16 tile's entry points (in its matrix operations' files) launch `COOP_THREADS`,
    /// each file defines the operations the tile calls, and the tile's workgroup arrays add up
    /// to `COOP16_SHARED_BYTES`.
    #[test]
    fn the_f16_tile_entry_points_and_memory_follow_the_constants() {
        let want = format!("@workgroup_size({})", crate::backend::gpu::kernels::COOP_THREADS);
        for ops in [COOP16_OPS, COOP16_EMULATED] {
            assert_eq!(ops.matches("@workgroup_size(").count(), 1);
            assert!(ops.contains(&want), "{want}");
            for f in [
                "fn coop_zero(",
                "fn coop_a(",
                "fn coop_b(",
                "fn coop_mma(",
                "fn coop_store(",
                "tile(wid, nwg, lid, ",
            ] {
                assert!(ops.contains(f), "{f}");
            }
        }
        assert_eq!(workgroup_bytes(Kernel::Matmul), COOP16_SHARED_BYTES);
    }

    /// The f16 attention tile's entry points launch `COOP_THREADS` and call its `tile`, each
    /// file defines the operations it calls, and its workgroup memory is within what
    /// `uses_coop` asks of a device (`COOP16_SHARED_BYTES`).
    #[test]
    fn the_f16_attention_tile_entry_points_and_memory_fit_the_device_check() {
        let want = format!("@workgroup_size({})", crate::backend::gpu::kernels::COOP_THREADS);
        for ops in [ATTN_COOP16_OPS, ATTN_COOP16_EMULATED] {
            assert_eq!(ops.matches("@workgroup_size(").count(), 1);
            assert!(ops.contains(&want), "{want}");
            for f in [
                "fn coop_zero(",
                "fn coop_a(",
                "fn coop_b(",
                "fn coop_bt(",
                "fn coop_mma(",
                "fn coop_store(",
                "tile(wid, lid, ",
            ] {
                assert!(ops.contains(f), "{f}");
            }
        }
        let bytes = workgroup_bytes(Kernel::AttentionTile);
        assert!(bytes <= COOP16_SHARED_BYTES, "{bytes} bytes");
        assert_eq!(bytes, 25_472);
    }

    /// The bytes of the `var<workgroup>` arrays a kernel's f16 cooperative-matrix body declares.
    fn workgroup_bytes(k: Kernel) -> u32 {
        let body = k.info().wgsl.body_coop16.unwrap();
        let mut bytes = 0;
        for line in body.lines().filter(|l| l.starts_with("var<workgroup>")) {
            let decl = line.split_once("array<").unwrap().1.split_once('>').unwrap().0;
            let (ty, n) = decl.split_once(", ").unwrap();
            bytes += n.parse::<u32>().unwrap() * if ty == "f16" { 2 } else { 4 };
        }
        bytes
    }

    #[test]
    fn every_gpu_weight_type_has_one_quant_file_and_every_file_a_type() {
        for q in QType::ALL {
            let n = QUANT_FILES
                .iter()
                .filter(|(name, _)| name.eq_ignore_ascii_case(q.name()))
                .count();
            assert_eq!(n, usize::from(q.has_gpu_kernel()), "{q}: {n} entries in QUANT_FILES");
            assert_eq!(quant_source(q).is_some(), WEIGHT_QTYPES.contains(&q), "{q}");
        }
        for (name, _) in QUANT_FILES {
            let q = QType::from_name(name).unwrap_or_else(|e| panic!("shaders/quant/{name}.wgsl: {e}"));
            assert!(q.has_gpu_kernel(), "shaders/quant/{name}.wgsl: {q} has no GPU kernel");
        }
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("shaders/quant");
        for e in std::fs::read_dir(&dir).unwrap() {
            let file = e.unwrap().file_name().into_string().unwrap();
            let stem = file
                .strip_suffix(".wgsl")
                .unwrap_or_else(|| panic!("{file}: not a .wgsl file"));
            assert!(
                QUANT_FILES.iter().any(|(name, _)| *name == stem),
                "shaders/quant/{file} is not in QUANT_FILES"
            );
        }
    }

    /// `quantize_act.wgsl` picks its format by index: 0 q8_0, 1 q8_1, 2 q8_K.
    #[test]
    fn activation_formats_are_in_the_order_quantize_act_numbers_them() {
        assert_eq!(ACT_QTYPES, [QType::Q8_0, QType::Q8_1, QType::Q8K]);
    }
}
