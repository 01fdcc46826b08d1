//! Quantized dot products: one weight row (raw GGUF blocks) against one activation row
//! quantized to the weight type's ggml `vec_dot_type`, for every qtype, on every ISA.
//!
//! `scalar.rs` is the oracle and the fallback; `avx2.rs`, `avx512.rs` and `neon.rs` hold the
//! SIMD kernels. [`Kernels`] is a table of function pointers per ISA, chosen once at startup.
//! Every kernel is tested against the scalar one (tests at the bottom of this file).
//!
//! Adding a qtype: its scalar kernel here, one row in [`act_type`] and in the tables below;
//! SIMD kernels override the scalar entry where they exist.

mod scalar;

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
// Also built for tests elsewhere, against a scalar model of the intrinsics.
#[cfg(any(target_arch = "aarch64", test))]
mod neon;

use std::sync::OnceLock;

use crate::error::{Error, Result};
use crate::quant::QType;

/// Dot product of one weight row of `n` elements (raw GGUF bytes, any alignment) with one
/// activation row of `n` elements in `act_type(w)` format. Panics if either slice is shorter
/// than `n` elements need or `n` is not a whole number of blocks of either type.
pub type DotFn = fn(n: usize, w: &[u8], a: &[u8]) -> f32;

/// One weight row against four activation rows (the weight is decoded once): the prefill
/// micro-kernel. Same contract as [`DotFn`] for each of the four rows.
pub type DotX4Fn = fn(n: usize, w: &[u8], a: [&[u8]; 4]) -> [f32; 4];

/// Quantizes one f32 row into an activation format (`x.len()` a multiple of its block).
type QuantActFn = fn(x: &[f32], out: &mut [u8]);

const N_TYPES: usize = QType::ALL.len();

/// The activation format llama.cpp pairs with each weight type (ggml `vec_dot_type`).
///
/// f16 and bf16 weights take f32 activations (ggml rounds them to f16/bf16): the weight row
/// is the memory traffic either way, and f32 keeps the product exact. q8_1 and q8_K, which
/// ggml only uses as activations, get q8_0 and q8_K partners so that every type has a kernel.
pub fn act_type(w: QType) -> QType {
    use QType::*;
    match w {
        F32 | F16 | BF16 => F32,
        Q4_0 | Q5_0 | Q8_0 | Q8_1 | IQ4NL | MXFP4 => Q8_0,
        Q4_1 | Q5_1 => Q8_1,
        Q2K | Q3K | Q4K | Q5K | Q6K | Q8K => Q8K,
    }
}

/// Quantizes one activation row into `out` (`act`'s bytes for `x.len()` elements) with the
/// fastest quantizer this CPU has. Every ISA produces the same bytes: ggml-cpu's x86 encoding
/// (q8_0/q8_1: scale 127/amax, ties to even; q8_K: the reference codec), which is what the
/// llama.cpp outputs we compare against were computed with.
pub fn quantize_act(act: QType, x: &[f32], out: &mut [u8]) {
    Kernels::best().quantize_act(act, x, out)
}

/// Bytes of a row of `n` elements of `q`, checking that `n` is a whole number of blocks.
#[inline(always)]
fn row_bytes(q: QType, n: usize) -> usize {
    let info = q.info();
    assert!(
        n.is_multiple_of(info.block_elems),
        "{n} elements are not whole {} blocks",
        info.name
    );
    n / info.block_elems * info.block_bytes
}

/// The bounds check every kernel runs before touching memory: the SIMD kernels read through
/// raw pointers and rely on it.
#[inline(always)]
fn check(n: usize, w: &[u8], a: &[u8], wq: QType, aq: QType) {
    let (wb, ab) = (row_bytes(wq, n), row_bytes(aq, n));
    assert!(
        w.len() >= wb && a.len() >= ab,
        "{} dot of {n}: weight row has {} of {wb} bytes, activation row {} of {ab}",
        wq.name(),
        w.len(),
        a.len()
    );
}

#[inline(always)]
fn check4(n: usize, w: &[u8], a: &[&[u8]; 4], wq: QType, aq: QType) {
    for ai in a {
        check(n, w, ai, wq, aq);
    }
}

/// Wraps a kernel `k(n, w, a)` (safe or `unsafe` with a CPU-feature precondition) into a
/// bounds-checked [`DotFn`]. Only used in the ISA tables, which are handed out after feature
/// detection; that is the `unsafe` precondition.
macro_rules! dot_fn {
    ($wq:ident, $k:path) => {{
        fn f(n: usize, w: &[u8], a: &[u8]) -> f32 {
            use $crate::backend::cpu::dot::{act_type, check};
            use $crate::quant::QType;
            check(n, w, a, QType::$wq, act_type(QType::$wq));
            #[allow(unused_unsafe)]
            // SAFETY: `check` bounds the reads; the table holding `f` is only handed out
            // on a CPU with the kernel's features.
            unsafe {
                $k(n, w, a)
            }
        }
        ($crate::quant::QType::$wq, f as $crate::backend::cpu::dot::DotFn)
    }};
}

/// Same as [`dot_fn!`] for four activation rows.
macro_rules! dot_x4_fn {
    ($wq:ident, $k:path) => {{
        fn f(n: usize, w: &[u8], a: [&[u8]; 4]) -> [f32; 4] {
            use $crate::backend::cpu::dot::{act_type, check4};
            use $crate::quant::QType;
            check4(n, w, &a, QType::$wq, act_type(QType::$wq));
            #[allow(unused_unsafe)]
            // SAFETY: as in `dot_fn!`.
            unsafe {
                $k(n, w, a)
            }
        }
        ($crate::quant::QType::$wq, f as $crate::backend::cpu::dot::DotX4Fn)
    }};
}
pub(crate) use {dot_fn, dot_x4_fn};

/// Builds a per-qtype table from `base` with `over` entries replacing theirs.
const fn dot_table(base: [Option<DotFn>; N_TYPES], over: &[(QType, DotFn)]) -> [Option<DotFn>; N_TYPES] {
    let mut t = base;
    let mut i = 0;
    while i < over.len() {
        t[over[i].0 as usize] = Some(over[i].1);
        i += 1;
    }
    t
}

const fn x4_table(base: [Option<DotX4Fn>; N_TYPES], over: &[(QType, DotX4Fn)]) -> [Option<DotX4Fn>; N_TYPES] {
    let mut t = base;
    let mut i = 0;
    while i < over.len() {
        t[over[i].0 as usize] = Some(over[i].1);
        i += 1;
    }
    t
}

/// The kernels of one instruction set, resolved once; the matmul calls through these pointers.
pub struct Kernels {
    isa: &'static str,
    dot: [Option<DotFn>; N_TYPES],
    dot_x4: [Option<DotX4Fn>; N_TYPES],
    q8_0: QuantActFn,
    q8_1: QuantActFn,
    q8_k: QuantActFn,
}

static SCALAR: Kernels = Kernels {
    isa: "scalar",
    dot: dot_table([None; N_TYPES], &scalar::DOT),
    dot_x4: [None; N_TYPES],
    q8_0: scalar::quantize_q8_0,
    q8_1: scalar::quantize_q8_1,
    q8_k: scalar::quantize_q8_k,
};

impl Kernels {
    /// The kernels `MINFER_CPU_ISA` asks for, or the best this CPU runs when it is unset. An
    /// unknown or unsupported value is an error naming it; the backend calls this at startup.
    pub fn from_env() -> Result<&'static Kernels> {
        match std::env::var("MINFER_CPU_ISA") {
            Ok(s) => Kernels::for_isa(&s).map_err(|e| Error::InvalidArgument(format!("MINFER_CPU_ISA: {e}"))),
            Err(_) => Ok(Kernels::best()),
        }
    }

    /// [`Kernels::from_env`], resolved once. A bad `MINFER_CPU_ISA` is reported on stderr and
    /// the best ISA used; call `from_env` to get it as an error instead.
    pub fn detect() -> &'static Kernels {
        static K: OnceLock<&'static Kernels> = OnceLock::new();
        K.get_or_init(|| {
            Kernels::from_env().unwrap_or_else(|e| {
                let best = Kernels::best();
                eprintln!("warning: {e}; using {}", best.isa);
                best
            })
        })
    }

    /// The best kernels this CPU runs: avx512 (F, BW, VL, VNNI) > avx2 (+FMA, F16C) > scalar
    /// on x86-64; neon (+dotprod) > scalar on aarch64.
    pub fn best() -> &'static Kernels {
        static K: OnceLock<&'static Kernels> = OnceLock::new();
        K.get_or_init(|| {
            for isa in ["avx512", "avx2", "neon"] {
                if let Ok(k) = Kernels::for_isa(isa) {
                    return k;
                }
            }
            &SCALAR
        })
    }

    /// The kernels of one ISA by name (`scalar`, `avx2`, `avx512`, `neon`); an error if the
    /// name is unknown or this CPU lacks the instructions.
    pub fn for_isa(name: &str) -> Result<&'static Kernels> {
        let unsupported = |what: &str| Error::Backend {
            backend: "cpu",
            what: format!("ISA '{name}': {what}"),
        };
        match name.to_ascii_lowercase().as_str() {
            "scalar" => Ok(&SCALAR),
            #[cfg(target_arch = "x86_64")]
            "avx2" if avx2::supported() => Ok(&avx2::KERNELS),
            #[cfg(target_arch = "x86_64")]
            "avx512" if avx512::supported() => Ok(&avx512::KERNELS),
            #[cfg(target_arch = "aarch64")]
            "neon" if neon::supported() => Ok(neon::kernels()),
            "avx2" | "avx512" | "neon" => Err(unsupported("not supported by this CPU")),
            _ => Err(unsupported("unknown (expected scalar, avx2, avx512 or neon)")),
        }
    }

    pub fn isa(&self) -> &'static str {
        self.isa
    }

    /// The dot kernel for weights of type `w` (activations in `act_type(w)`).
    pub fn dot(&self, w: QType) -> DotFn {
        match self.dot[w as usize] {
            Some(f) => f,
            None => SCALAR.dot[w as usize].expect("every qtype has a scalar kernel"),
        }
    }

    /// The 1-weight-row × 4-activation-row kernel for `w`, where this ISA has one.
    pub fn dot_x4(&self, w: QType) -> Option<DotX4Fn> {
        self.dot_x4[w as usize]
    }

    /// Quantizes one activation row; `act` is F32 (a byte copy), Q8_0, Q8_1 or Q8K.
    pub fn quantize_act(&self, act: QType, x: &[f32], out: &mut [u8]) {
        let nb = row_bytes(act, x.len());
        assert_eq!(out.len(), nb, "{act} row of {} elements is {nb} bytes", x.len());
        match act {
            QType::F32 => out.copy_from_slice(bytemuck::cast_slice(x)),
            QType::Q8_0 => (self.q8_0)(x, out),
            QType::Q8_1 => (self.q8_1)(x, out),
            QType::Q8K => (self.q8_k)(x, out),
            _ => panic!("{act} is not an activation type"),
        }
    }
}

impl std::fmt::Debug for Kernels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Kernels({})", self.isa)
    }
}

// --- little-endian field readers shared by the kernels ---------------------------------------

#[inline(always)]
pub(crate) fn f16_at(b: &[u8], off: usize) -> f32 {
    half::f16::from_bits(u16::from_le_bytes([b[off], b[off + 1]])).to_f32()
}

#[inline(always)]
pub(crate) fn f32_at(b: &[u8], off: usize) -> f32 {
    f32::from_le_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// splitmix64: reproducible rows without a dependency.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9e3779b97f4a7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58476d1ce4e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d049bb133111eb);
            z ^ (z >> 31)
        }
        fn uniform(&mut self) -> f32 {
            (self.next() >> 40) as f32 / (1u64 << 24) as f32
        }
        /// Roughly normal (Irwin–Hall), with an occasional outlier as real activations have.
        fn row(&mut self, n: usize, scale: f32) -> Vec<f32> {
            (0..n)
                .map(|_| {
                    let g = (0..4).map(|_| self.uniform()).sum::<f32>() - 2.0;
                    if self.next().is_multiple_of(97) {
                        g * scale * 8.0
                    } else {
                        g * scale
                    }
                })
                .collect()
        }
    }

    fn isas() -> Vec<&'static Kernels> {
        ["scalar", "avx2", "avx512", "neon"]
            .iter()
            .filter_map(|i| Kernels::for_isa(i).ok())
            .collect()
    }

    fn sizes(w: QType) -> Vec<usize> {
        let be = w.block_elems().max(act_type(w).block_elems());
        let mut v: Vec<usize> = [32, 224, 256, 512, 1536, 2048]
            .into_iter()
            .filter(|n| n % be == 0)
            .collect();
        if be == 1 {
            v.extend([1, 7, 45, 100]);
        }
        v
    }

    /// Σ|wᵢ·aᵢ| and Σ wᵢ·aᵢ in f64 over the dequantized rows.
    fn dequant_dot(w: QType, wb: &[u8], aq: QType, ab: &[u8]) -> (f64, f64) {
        let (wf, af) = (w.dequantize_to_vec(wb).unwrap(), aq.dequantize_to_vec(ab).unwrap());
        assert_eq!(wf.len(), af.len());
        let abs = wf.iter().zip(&af).map(|(&x, &y)| (x as f64 * y as f64).abs()).sum();
        let dot = wf.iter().zip(&af).map(|(&x, &y)| x as f64 * y as f64).sum();
        (abs, dot)
    }

    /// Σ|m·s| over the blocks of a q4_1/q5_1 · q8_1 dot: `s` is stored in f16, so the scalar
    /// dot differs from the dequantized one by up to 2⁻¹¹ of this.
    fn q8_1_slack(w: QType, wb: &[u8], ab: &[u8]) -> f64 {
        if act_type(w) != QType::Q8_1 {
            return 0.0;
        }
        let bb = w.block_bytes();
        wb.chunks_exact(bb)
            .zip(ab.chunks_exact(36))
            .map(|(x, y)| (f16_at(x, 2) as f64 * f16_at(y, 2) as f64).abs())
            .sum()
    }

    #[test]
    fn every_qtype_has_a_scalar_kernel_and_an_activation_type() {
        for q in QType::ALL {
            assert!(SCALAR.dot[q as usize].is_some(), "{q}");
            let a = act_type(q);
            assert!(
                matches!(a, QType::F32 | QType::Q8_0 | QType::Q8_1 | QType::Q8K),
                "{q} → {a}"
            );
            assert_eq!(
                q.block_elems().max(a.block_elems()) % q.block_elems().min(a.block_elems()),
                0
            );
        }
    }

    #[test]
    fn activation_quantizers_agree_across_isas() {
        let mut rng = Rng(7);
        let mut rows = vec![rng.row(2048, 1.0), vec![0.0; 512], rng.row(512, 1e-30)];
        // ±amax ties (q8_K keeps the first one's sign) and exact .5 products (roundf vs rint):
        // with amax = 127 the q8_0 scale is exactly 1.
        let mut r = vec![0.25f32; 512];
        r[3] = -127.0;
        r[7] = 127.0;
        r[300] = 127.0;
        r[301] = -127.0;
        for (i, v) in r.iter_mut().enumerate().skip(8).take(24) {
            *v = (i as f32 - 20.0) + 0.5;
        }
        rows.push(r);
        for k in isas() {
            for x in &rows {
                for act in [QType::Q8_0, QType::Q8_1, QType::Q8K] {
                    let mut want = vec![0u8; row_bytes(act, x.len())];
                    SCALAR.quantize_act(act, x, &mut want);
                    if act == QType::Q8K {
                        assert!(
                            want == act.quantize_to_vec(x).unwrap(),
                            "q8_K: scalar differs from the codec"
                        );
                    }
                    let mut got = vec![0u8; want.len()];
                    k.quantize_act(act, x, &mut got);
                    assert!(got == want, "{} {act}: bytes differ from the scalar encoder", k.isa());
                }
                let mut f = vec![0u8; 4 * x.len()];
                k.quantize_act(QType::F32, x, &mut f);
                assert_eq!(QType::F32.dequantize_to_vec(&f).unwrap(), *x);
            }
        }
    }

    #[test]
    fn every_kernel_matches_the_scalar_oracle() {
        let mut rng = Rng(42);
        let kernels = isas();
        for w in QType::ALL {
            let aq = act_type(w);
            for n in sizes(w) {
                let wrow = rng.row(n, 0.05);
                let wb = w.quantize_to_vec(&wrow).unwrap();
                let abs: Vec<Vec<u8>> = (0..4)
                    .map(|_| {
                        let mut ab = vec![0u8; row_bytes(aq, n)];
                        quantize_act(aq, &rng.row(n, 1.0), &mut ab);
                        ab
                    })
                    .collect();
                let (sabs, exact) = dequant_dot(w, &wb, aq, &abs[0]);
                let oracle = SCALAR.dot(w)(n, &wb, &abs[0]);
                let tol = 1e-5 * sabs + 1e-3 * q8_1_slack(w, &wb, &abs[0]) + 1e-30;
                assert!(
                    (oracle as f64 - exact).abs() <= tol,
                    "{w} n={n}: scalar {oracle} vs dequantized {exact}"
                );
                for k in &kernels {
                    let got = k.dot(w)(n, &wb, &abs[0]);
                    let tol = 1e-5 * sabs + 1e-30;
                    let what = format!("{} {w} n={n}", k.isa());
                    assert!(
                        (got as f64 - oracle as f64).abs() <= tol,
                        "{what}: {got} vs scalar {oracle}"
                    );
                    if let Some(x4) = k.dot_x4(w) {
                        let got4 = x4(n, &wb, [&abs[0], &abs[1], &abs[2], &abs[3]]);
                        for (r, ab) in abs.iter().enumerate() {
                            let one = SCALAR.dot(w)(n, &wb, ab);
                            let tol = 1e-5 * dequant_dot(w, &wb, aq, ab).0 + 1e-30;
                            assert!(
                                (got4[r] as f64 - one as f64).abs() <= tol,
                                "{what} x4[{r}]: {} vs {one}",
                                got4[r]
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn isa_names_are_parsed_strictly() {
        assert_eq!(Kernels::for_isa("scalar").unwrap().isa(), "scalar");
        assert_eq!(Kernels::for_isa("Scalar").unwrap().isa(), "scalar");
        let e = Kernels::for_isa("sse9").unwrap_err().to_string();
        assert!(e.contains("sse9") && e.contains("unknown"), "{e}");
        #[cfg(not(target_arch = "aarch64"))]
        assert!(Kernels::for_isa("neon")
            .unwrap_err()
            .to_string()
            .contains("not supported"));
        let best = Kernels::best();
        assert_eq!(Kernels::for_isa(best.isa()).unwrap().isa(), best.isa());
        #[cfg(target_arch = "x86_64")]
        if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c") {
            assert_ne!(best.isa(), "scalar");
        }
    }

    #[test]
    #[should_panic(expected = "weight row has")]
    fn a_short_row_panics_instead_of_reading_past_it() {
        let k = Kernels::best();
        k.dot(QType::Q4_0)(64, &[0u8; 18], &[0u8; 68]);
    }

    /// Best of `reps` timings of `f` doing `bytes` of work, in GB/s (the machine is shared:
    /// the best run is the one nothing preempted).
    fn gbs(reps: usize, bytes: usize, mut f: impl FnMut() -> f32) -> f64 {
        let mut best = f64::MAX;
        for _ in 0..reps {
            let t = std::time::Instant::now();
            std::hint::black_box(f());
            best = best.min(t.elapsed().as_secs_f64());
        }
        bytes as f64 / best / 1e9
    }

    /// `cargo test --release --lib backend::cpu::dot -- --ignored --nocapture`: GB/s of weight
    /// bytes per qtype × ISA over 1536-wide rows (16 rows, cache-resident: kernel throughput),
    /// best of 15 runs of 10k row dots; `x4` counts each weight byte once per activation row.
    #[test]
    #[ignore]
    fn throughput() {
        let (n, iters) = (1536, 10_000);
        let mut rng = Rng(1);
        for w in QType::ALL {
            if n % w.block_elems() != 0 || matches!(w, QType::Q8_1) {
                continue;
            }
            let aq = act_type(w);
            let rows: Vec<Vec<u8>> = (0..16).map(|_| w.quantize_to_vec(&rng.row(n, 0.05)).unwrap()).collect();
            let acts: Vec<Vec<u8>> = (0..4)
                .map(|_| {
                    let mut ab = vec![0u8; row_bytes(aq, n)];
                    quantize_act(aq, &rng.row(n, 1.0), &mut ab);
                    ab
                })
                .collect();
            let bytes = iters * rows[0].len();
            let mut line = format!("{:>7}", w.name());
            for k in isas() {
                let f = k.dot(w);
                let r = gbs(15, bytes, || {
                    (0..iters).map(|i| f(n, &rows[i % 16], &acts[i % 4])).sum()
                });
                line += &format!("  {}: {r:6.2}", k.isa());
                if let Some(x4) = k.dot_x4(w) {
                    let a4 = [&acts[0][..], &acts[1], &acts[2], &acts[3]];
                    let r = gbs(15, bytes, || {
                        (0..iters / 4).map(|i| x4(n, &rows[i % 16], a4)[i % 4]).sum()
                    });
                    line += &format!(" (x4 {r:6.2})");
                }
            }
            println!("{line}");
        }
        for act in [QType::Q8_0, QType::Q8_1, QType::Q8K] {
            let x = rng.row(4096, 1.0);
            let mut out = vec![0u8; row_bytes(act, 4096)];
            let mut line = format!("quantize {:>5} (GB/s of f32 in)", act.name());
            for k in isas() {
                let r = gbs(15, 500 * 4096 * 4, || {
                    (0..500).for_each(|_| k.quantize_act(act, &x, &mut out));
                    out[0] as f32
                });
                line += &format!("  {}: {r:6.2}", k.isa());
            }
            println!("{line}");
        }
    }
}
