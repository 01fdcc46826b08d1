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

fn isas() -> Vec<&'static Isa> {
    ["scalar", "avx2", "avx512", "neon"]
        .iter()
        .filter_map(|i| Isa::for_isa(i).ok())
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

/// The x86 dot tables (avx2's, which avx512 instantiates again from the same list) have a
/// kernel of their own for every weight type, so no weight type falls back to the scalar
/// dot on x86; the per-type override tables name each type at most once (a second entry
/// would silently replace the first). neon's tables are partial by design: its missing
/// types (q5_0, q5_1, q2_K, q3_K, mxfp4) take the scalar dot.
#[cfg(target_arch = "x86_64")]
#[test]
fn x86_dot_tables_cover_every_weight_type_once() {
    let dot: Vec<QType> = avx2::DOT.iter().map(|e| e.0).collect();
    for w in QType::weights() {
        assert!(dot.contains(&w), "{w}: no avx2/avx512 dot kernel");
    }
    let tables: [(&str, Vec<QType>); 4] = [
        ("DOT", dot),
        ("DOT_X4", avx2::DOT_X4.iter().map(|e| e.0).collect()),
        ("GEMM", avx2::GEMM.iter().map(|e| e.0).collect()),
        ("TILED", avx2::TILED.iter().map(|e| e.0).collect()),
    ];
    for (name, t) in tables {
        for (i, q) in t.iter().enumerate() {
            assert!(!t[..i].contains(q), "{name}: {q} listed twice");
        }
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
                // Two weight rows at once: each row the bits of its own dot (and of the
                // Gemm's row kernel, which the matmul pairs it with).
                let wb2 = w.quantize_to_vec(&rng.row(n, 0.05)).unwrap();
                let pairs = [
                    (k.dot_r2(w), k.dot(w)),
                    (k.gemm(w).and_then(|g| g.row2), k.gemm(w).map_or(k.dot(w), |g| g.row)),
                ];
                for (r2, one) in pairs {
                    let Some(r2) = r2 else { continue };
                    let got2 = r2(n, [&wb, &wb2], &abs[1]);
                    assert_eq!(got2[0].to_bits(), one(n, &wb, &abs[1]).to_bits(), "{what} r2 [0]");
                    assert_eq!(got2[1].to_bits(), one(n, &wb2, &abs[1]).to_bits(), "{what} r2 [1]");
                }
                // The 4-token kernel in the single dot's order: each token its dot's bits.
                if let Some(x4) = k.dot_x4_exact(w).filter(|_| k.gemm(w).is_none()) {
                    let got4 = x4(n, &wb, [&abs[0], &abs[1], &abs[2], &abs[3]]);
                    for (r, ab) in abs.iter().enumerate() {
                        let one = k.dot(w)(n, &wb, ab);
                        assert_eq!(one.to_bits(), got4[r].to_bits(), "{what} exact x4 [{r}] vs its dot");
                    }
                }
                let tiled = k.tiled(w);
                let x4s = [k.dot_x4(w), tiled.map(|t| t.1)];
                for (which, x4) in x4s.into_iter().enumerate() {
                    let Some(x4) = x4 else { continue };
                    let got4 = x4(n, &wb, [&abs[0], &abs[1], &abs[2], &abs[3]]);
                    for (r, ab) in abs.iter().enumerate() {
                        let one = SCALAR.dot(w)(n, &wb, ab);
                        let tol = 1e-5 * dequant_dot(w, &wb, aq, ab).0 + 1e-30;
                        assert!(
                            (got4[r] as f64 - one as f64).abs() <= tol,
                            "{what} x4 (tiled: {}) [{r}]: {} vs {one}",
                            which == 1,
                            got4[r]
                        );
                        if which == 0 && k.gemm(w).is_none() {
                            // Four tokens at a time give each token the bits of its own
                            // dot where `x4_is_exact` says so (matmul then shares it between
                            // sequences; the others' rows are grouped by sequence).
                            let row = k.dot(w)(n, &wb, ab);
                            if k.x4_is_exact(w) {
                                assert_eq!(row.to_bits(), got4[r].to_bits(), "{what} x4 [{r}] vs its dot");
                            }
                        }
                        if which == 1 {
                            // The tiled row kernel is bit-identical to its 4-token one.
                            let row = tiled.map(|t| t.0(n, &wb, ab)).unwrap_or(f32::NAN);
                            assert_eq!(row.to_bits(), got4[r].to_bits(), "{what} tiled row vs x4");
                        }
                    }
                }
            }
        }
    }
}

/// Every `Gemm` (pack, then tiles of 1..=13 tokens) against the scalar dot, with rows and
/// activation rows placed further apart than their length; `row` bit-identical to `tile`.
#[test]
fn every_gemm_matches_the_scalar_dot() {
    let mut rng = Rng(9);
    for k in isas() {
        for w in QType::ALL {
            let Some(g) = k.gemm(w) else { continue };
            assert_eq!(act_type(w), QType::Q8_0, "{w}");
            for n in sizes(w) {
                let (rb, ab, nb) = (row_bytes(w, n), row_bytes(QType::Q8_0, n), n / 32);
                let (stride, arb) = (rb + 3, ab + 5);
                let mut wb = vec![0u8; PANEL_ROWS * stride];
                for r in 0..PANEL_ROWS {
                    // Row 3 all zero, row 5 with one big outlier: edge scales.
                    let mut x = rng.row(n, 0.05);
                    match r {
                        3 => x.fill(0.0),
                        5 => x[n / 2] = 40.0,
                        _ => {}
                    }
                    wb[r * stride..r * stride + rb].copy_from_slice(&w.quantize_to_vec(&x).unwrap());
                }
                let nt = 13;
                let mut act = vec![0u8; nt * arb];
                let mut sums = vec![0u8; nt * nb * BLOCK_SUM_BYTES];
                for t in 0..nt {
                    let a = &mut act[t * arb..t * arb + ab];
                    quantize_act(QType::Q8_0, &rng.row(n, 1.0), a);
                    block_sums(a, g.off, &mut sums[t * nb * BLOCK_SUM_BYTES..]);
                }
                let mut panel = vec![0u8; nb * PANEL_BLOCK_BYTES];
                (g.pack)(n, &wb, stride, &mut panel);
                for nt in 1..=nt {
                    let mut out = vec![[f32::NAN; PANEL_ROWS]; nt];
                    (g.tile)(n, &panel, &act, arb, &sums, &mut out);
                    for (t, o) in out.iter().enumerate() {
                        let a = &act[t * arb..t * arb + ab];
                        let one: Vec<f32> = (0..PANEL_ROWS).map(|r| (g.row)(n, &wb[r * stride..], a)).collect();
                        assert!(
                            one.iter().zip(o).all(|(x, y)| x.to_bits() == y.to_bits()),
                            "{} {w} n={n} tile of {nt}, token {t}: row {one:?} vs tile {o:?}",
                            k.isa()
                        );
                        for (r, &got) in o.iter().enumerate() {
                            let wr = &wb[r * stride..r * stride + rb];
                            let want = SCALAR.dot(w)(n, wr, a);
                            let tol = 1e-5 * dequant_dot(w, wr, QType::Q8_0, a).0 + 1e-30;
                            assert!(
                                (got as f64 - want as f64).abs() <= tol,
                                "{} {w} n={n} tile of {nt}: [{t}][{r}] = {got}, scalar {want}",
                                k.isa()
                            );
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn isa_names_are_parsed_strictly() {
    assert_eq!(Isa::for_isa("scalar").unwrap().isa(), "scalar");
    assert_eq!(Isa::for_isa("Scalar").unwrap().isa(), "scalar");
    let e = Isa::for_isa("sse9").unwrap_err().to_string();
    assert!(e.contains("sse9") && e.contains("unknown"), "{e}");
    #[cfg(not(target_arch = "aarch64"))]
    assert!(Isa::for_isa("neon").unwrap_err().to_string().contains("not supported"));
    let best = Isa::best();
    assert_eq!(Isa::for_isa(best.isa()).unwrap().isa(), best.isa());
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c") {
        assert_ne!(best.isa(), "scalar");
    }
}

#[test]
#[should_panic(expected = "weight row has")]
fn a_short_row_panics_instead_of_reading_past_it() {
    let k = Isa::best();
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
            if let Some(r2) = k.dot_r2(w).or(k.gemm(w).and_then(|g| g.row2)) {
                let r = gbs(15, bytes, || {
                    (0..iters / 2)
                        .map(|i| r2(n, [&rows[(2 * i) % 16], &rows[(2 * i + 1) % 16]], &acts[i % 4])[i % 2])
                        .sum()
                });
                line += &format!(" (r2 {r:6.2})");
            }
            if let Some(x4) = k.dot_x4(w) {
                let a4 = [&acts[0][..], &acts[1], &acts[2], &acts[3]];
                let r = gbs(15, bytes, || {
                    (0..iters / 4).map(|i| x4(n, &rows[i % 16], a4)[i % 4]).sum()
                });
                line += &format!(" (x4 {r:6.2})");
            }
            if let Some(g) = k.gemm(w) {
                let r = gbs(15, bytes, || {
                    (0..iters).map(|i| (g.row)(n, &rows[i % 16], &acts[i % 4])).sum()
                });
                line += &format!(" (row {r:6.2})");
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
