use super::*;

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[cfg(target_arch = "x86_64")]
#[test]
fn expf8_gives_the_bits_of_expf() {
    if !(is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")) {
        return;
    }
    let mut xs: Vec<f32> = (-4000..=2000).map(|i| i as f32 * 0.0437).collect();
    xs.extend([
        f32::NEG_INFINITY,
        f32::INFINITY,
        -200.0,
        -87.5,
        -103.9,
        88.7,
        133.0,
        0.0,
        -0.0,
    ]);
    xs.extend((0..64).map(|i| f32::from_bits(0xc2b0_0000 + i * 0x0004_0000)));
    let mut got = xs.clone();
    // SAFETY: AVX2 and FMA were detected above.
    unsafe { x86::exp_minus(&mut got, 0.0) };
    for (&x, g) in xs.iter().zip(got) {
        let want = expf(x - 0.0);
        assert!(g.to_bits() == want.to_bits(), "x={x}: {g} vs {want}");
    }
}

#[test]
fn expf_is_within_two_ulp_of_exp() {
    for i in -2000..=200 {
        let x = i as f32 * 0.0437;
        let (got, want) = (expf(x), (x as f64).exp() as f32);
        let ulp = (got.to_bits() as i64 - want.to_bits() as i64).abs();
        assert!(ulp <= 2, "x={x}: {got} vs {want}");
    }
    assert_eq!(expf(f32::NEG_INFINITY), 0.0);
    assert_eq!(expf(-200.0), 0.0);
}

/// Every kind and order against attention in f64, with a window (`first` > 0), a head
/// dim that is no multiple of 16 or 64, f16 and f32 values, and a softcap.
/// Queries run together through the tiled kernel each keep the bits of their own run: ends
/// inside a tile, at a tile's edge and in the next tile, starts that differ (a window),
/// sinks, a softcap, value widths the four-query kernel takes (64, 128) and one it leaves
/// to the single one (24), and groups of four with leftovers.
#[test]
fn tiled_queries_together_keep_each_ones_bits() {
    let val = |i: usize, s: usize| ((i * s + 3) % 101) as f32 / 50.0 - 1.0;
    for (hd, hdv, lo, n) in [(64, 64, 0, 200), (64, 128, 5, 150), (40, 24, 0, 90)] {
        let keys: Vec<f32> = (0..n * hd).map(|i| val(i, 13)).collect();
        let vals: Vec<f32> = (0..n * hdv).map(|i| val(i, 29)).collect();
        let mut keys_t = Vec::new();
        pack_keys_t(&keys, hd, lo, &mut keys_t);
        for softcap in [None, Some(3.0)] {
            let cells = TiledCells {
                scale: 0.125,
                softcap,
                lo,
                keys: &keys,
                keys_t: &keys_t,
                vals: &vals,
            };
            // (first, end) per query: consecutive ends, a tile's edge, windows.
            let spans: Vec<(usize, usize)> = [
                (lo, 64),
                (lo, 65),
                (lo, 66),
                (lo, 67),
                (lo, lo + n),
                (lo + 20, lo + n - 1),
                (lo + 3, 128),
                (lo + 70, lo + n - 2),
                (lo, 10),
            ]
            .into_iter()
            .filter(|&(f, e)| f < e && e <= lo + n)
            .collect();
            let rows: Vec<Vec<f32>> = (0..spans.len())
                .map(|j| (0..hd).map(|i| val(i + 97 * j, 7)).collect())
                .collect();
            let sink = |j: usize| (j % 3 == 1).then_some(0.5 * j as f32);
            let mut outs = vec![vec![f32::NAN; hdv]; spans.len()];
            let mut queries: Vec<TiledQuery> = outs
                .iter_mut()
                .enumerate()
                .map(|(j, out)| TiledQuery {
                    q: &rows[j],
                    first: spans[j].0,
                    end: spans[j].1,
                    sink: sink(j),
                    out,
                })
                .collect();
            flash_tiled_many(&cells, &mut queries);
            for (j, &(first, end)) in spans.iter().enumerate() {
                let h = cells.head(&rows[j], (first, end), sink(j), hdv);
                let mut alone = vec![f32::NAN; hdv];
                attend(Kind::FlashTiled, &h, &mut Vec::new(), &mut Vec::new(), &mut alone);
                assert_eq!(
                    bits(&outs[j]),
                    bits(&alone),
                    "hd {hd} hdv {hdv} cap {softcap:?} query {j} cells {first}..{end}"
                );
            }
        }
    }
}

#[test]
fn every_kind_is_attention() {
    let val = |i: usize, s: usize| ((i * s + 3) % 101) as f32 / 50.0 - 1.0;
    for (hd, hdv, n, first) in [(64, 64, 70, 0), (40, 24, 9, 5), (256, 128, 130, 67)] {
        for f16 in [false, true] {
            let round = |x: f32| if f16 { half::f16::from_f32(x).to_f32() } else { x };
            let q: Vec<f32> = (0..hd).map(|i| round(val(i, 7))).collect();
            let keys: Vec<f32> = (0..n * hd).map(|i| round(val(i, 13))).collect();
            let vals: Vec<f32> = (0..n * hdv).map(|i| round(val(i, 29))).collect();
            for softcap in [None, Some(3.0)] {
                // llama.cpp's flash kernels cap after scaling and its plain path before;
                // they agree where softcapping models use them, with Q scaled beforehand.
                let scale = if softcap.is_some() {
                    1.0
                } else {
                    1.0 / (hd as f32).sqrt()
                };
                let s: Vec<f64> = keys
                    .chunks_exact(hd)
                    .map(|k| {
                        let d: f64 = k.iter().zip(&q).map(|(&a, &b)| a as f64 * b as f64).sum();
                        softcap.map_or(d, |c| (d / c as f64).tanh() * c as f64) * scale as f64
                    })
                    .collect();
                let max = s.iter().copied().fold(f64::MIN, f64::max);
                let e: Vec<f64> = s.iter().map(|&x| (x - max).exp()).collect();
                let sum: f64 = e.iter().sum();
                let want: Vec<f64> = (0..hdv)
                    .map(|d| {
                        e.iter()
                            .enumerate()
                            .map(|(j, &p)| p * vals[j * hdv + d] as f64)
                            .sum::<f64>()
                            / sum
                    })
                    .collect();
                for kind in [Kind::Plain, Kind::FlashChunk, Kind::FlashTiled] {
                    for order in [Order::Gemm, Order::Vec] {
                        let mut keys_t = Vec::new();
                        pack_keys_t(&keys, hd, first, &mut keys_t);
                        let h = Head {
                            sink: None,
                            order,
                            f16,
                            scale,
                            softcap,
                            first,
                            q: &q,
                            keys: &keys,
                            vals: &vals,
                            stride: [hd, hdv],
                            keys_t: None,
                        };
                        let mut out = vec![f32::NAN; hdv];
                        attend(
                            kind,
                            &Head {
                                keys_t: Some(&keys_t),
                                ..h
                            },
                            &mut Vec::new(),
                            &mut Vec::new(),
                            &mut out,
                        );
                        // The portable body is the same operations in the same order.
                        let mut portable = vec![f32::NAN; hdv];
                        attend_body::<false, false>(kind, &h, &mut Vec::new(), &mut Vec::new(), &mut portable);
                        assert_eq!(
                            bits(&out),
                            bits(&portable),
                            "hd {hd} n {n} f16 {f16} kind {} order {}",
                            kind as u8,
                            order as u8
                        );
                        // And the 256-bit bodies, where `attend` took the 512-bit ones.
                        #[cfg(target_arch = "x86_64")]
                        if is_x86_feature_detected!("avx2")
                            && is_x86_feature_detected!("fma")
                            && is_x86_feature_detected!("f16c")
                        {
                            let mut narrow = vec![f32::NAN; hdv];
                            let ht = Head {
                                keys_t: Some(&keys_t),
                                ..h
                            };
                            // SAFETY: the features were detected.
                            unsafe { attend_fma(kind, &ht, &mut Vec::new(), &mut Vec::new(), &mut narrow) };
                            assert_eq!(
                                bits(&narrow),
                                bits(&portable),
                                "avx2: hd {hd} n {n} f16 {f16} kind {}",
                                kind as u8
                            );
                        }
                        // f16 probabilities (plain) and accumulators (flash) bound the error.
                        let tol = if f16 { 4e-3 } else { 1e-5 };
                        for (d, (&g, &w)) in out.iter().zip(&want).enumerate() {
                            assert!(
                                (g as f64 - w).abs() <= tol,
                                "hd {hd} n {n} f16 {f16} cap {softcap:?} kind {} order {}: [{d}] {g} vs {w}",
                                kind as u8,
                                order as u8
                            );
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn dots_are_exact_on_small_integers() {
    let x: Vec<f32> = (0..200).map(|i| (i % 7) as f32 - 3.0).collect();
    let y: Vec<f32> = (0..200).map(|i| (i % 5) as f32 - 2.0).collect();
    let want: f32 = x.iter().zip(&y).map(|(a, b)| a * b).sum();
    assert_eq!(dot_vec(&x, &y), want);
    assert_eq!(
        dot_gemm(&x[..192], &y[..192]),
        x[..192].iter().zip(&y).map(|(a, b)| a * b).sum::<f32>()
    );
}

/// The one-chunk flash kernel reading a cache's rows in place (two heads interleaved, rows a
/// cell apart) gives the bits of the same rows packed back to back.
#[test]
fn one_chunk_reads_rows_in_place_as_packed() {
    let val = |i: usize, s: usize| ((i * s + 3) % 101) as f32 / 50.0 - 1.0;
    let (hd, hdv, n, heads) = (64, 64, 37, 2);
    // Cache rows: every head's key (value) of a cell side by side.
    let kc: Vec<f32> = (0..n * heads * hd).map(|i| val(i, 13)).collect();
    let vc: Vec<f32> = (0..n * heads * hdv).map(|i| val(i, 29)).collect();
    let q: Vec<f32> = (0..hd).map(|i| val(i, 7)).collect();
    for g in 0..heads {
        let keys: Vec<f32> = (0..n).flat_map(|c| kc[(c * heads + g) * hd..][..hd].to_vec()).collect();
        let vals: Vec<f32> = (0..n)
            .flat_map(|c| vc[(c * heads + g) * hdv..][..hdv].to_vec())
            .collect();
        let head = |keys, vals, stride| Head {
            order: Order::Vec,
            f16: false,
            scale: 0.125,
            softcap: None,
            sink: Some(0.3),
            first: 0,
            q: &q,
            keys,
            vals,
            stride,
            keys_t: None,
        };
        let mut packed = vec![f32::NAN; hdv];
        let h = head(&keys[..], &vals[..], [hd, hdv]);
        attend(Kind::FlashChunk, &h, &mut Vec::new(), &mut Vec::new(), &mut packed);
        let mut in_place = vec![f32::NAN; hdv];
        let (ks, vs) = (heads * hd, heads * hdv);
        let h = head(
            &kc[g * hd..(n - 1) * ks + (g + 1) * hd],
            &vc[g * hdv..(n - 1) * vs + (g + 1) * hdv],
            [ks, vs],
        );
        attend(Kind::FlashChunk, &h, &mut Vec::new(), &mut Vec::new(), &mut in_place);
        assert_eq!(bits(&in_place), bits(&packed), "head {g}");
    }
}
