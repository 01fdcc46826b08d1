use super::*;

/// Deterministic values in [-amp, amp).
fn fill(seed: u64, n: usize, amp: f32) -> Vec<f32> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ((x >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * amp
        })
        .collect()
}

/// Softmax attention of one query in f64: scale, cap, sink, then the weighted values.
fn reference(q: &[f32], keys: &[f32], vals: &[f32], vstride: usize, c: &Cells) -> Vec<f64> {
    let (n, hd, hdv) = (c.n, c.hd, c.hdv);
    let logits: Vec<f64> = (0..n)
        .map(|j| {
            let dot: f64 = (0..hd).map(|d| q[d] as f64 * keys[j * hd + d] as f64).sum();
            let s = dot * c.scale as f64;
            c.softcap.map_or(s, |cap| cap as f64 * (s / cap as f64).tanh())
        })
        .collect();
    let max = logits
        .iter()
        .copied()
        .chain(c.sink.map(f64::from))
        .fold(f64::NEG_INFINITY, f64::max);
    let w: Vec<f64> = logits.iter().map(|&s| (s - max).exp()).collect();
    let sum: f64 = w.iter().sum::<f64>() + c.sink.map_or(0.0, |sk| (sk as f64 - max).exp());
    (0..hdv)
        .map(|d| (0..n).map(|j| w[j] * vals[j * vstride + d] as f64).sum::<f64>() / sum)
        .collect()
}

fn simds() -> Vec<Simd> {
    let mut v = vec![Simd::Portable];
    for isa in ["avx2", "avx512"] {
        let s = Simd::for_isa(isa, 64);
        if !v.contains(&s) {
            v.push(s);
        }
    }
    v
}

/// Every body against the f64 reference: sequence lengths around the key blocks and vector
/// widths, head dims 32 and 64 (and 48: a single-vector tail of P·V), value rows wider apart
/// than the head dim, blocks of 1 to 8 queries, logits wide enough that the max matters, a
/// softcap and a sink.
#[test]
fn matches_f64_softmax_attention() {
    for simd in simds() {
        for (hd, amp) in [(32, 1.0), (64, 0.6), (48, 0.8)] {
            for n in [1usize, 7, 33, 64, 65, 512] {
                for (softcap, sink) in [(None, None), (Some(5.0), Some(0.5))] {
                    let vstride = hd + 16;
                    let keys = fill(n as u64 * 31 + hd as u64, n * hd, amp);
                    let vals = fill(n as u64 * 17 + 3, n * vstride, 1.0);
                    let mut kt = Vec::new();
                    pack_keys(&keys, hd, hd, n, &mut kt);
                    let c = Cells {
                        n,
                        hd,
                        hdv: hd,
                        keys_t: &kt,
                        vals: &vals,
                        vstride,
                        scale: 1.0 / (hd as f32).sqrt() * 4.0,
                        softcap,
                        sink,
                    };
                    let qs = fill(n as u64 + 5, QB * hd, 2.0);
                    let mut s = Scratch::default();
                    for rows in [1, 3, QB] {
                        s.start(&c);
                        s.q[..rows * hd].copy_from_slice(&qs[..rows * hd]);
                        attend(simd, &c, rows, &mut s);
                        for r in 0..rows {
                            let want = reference(&qs[r * hd..(r + 1) * hd], &keys, &vals, vstride, &c);
                            let got = &s.out[r * hd..(r + 1) * hd];
                            let err = want
                                .iter()
                                .zip(got)
                                .map(|(&w, &g)| (w - g as f64).abs())
                                .fold(0.0, f64::max);
                            assert!(
                                err < 2e-6,
                                "{simd:?} hd {hd} n {n} softcap {softcap:?} row {r} of {rows}: error {err:e}"
                            );
                        }
                    }
                }
            }
        }
    }
}

/// A query's bits do not depend on its place in the block or on the other rows.
#[test]
fn a_query_gives_the_same_bits_in_any_row() {
    let (hd, n) = (32, 100);
    let keys = fill(1, n * hd, 1.0);
    let vals = fill(2, n * hd, 1.0);
    let mut kt = Vec::new();
    pack_keys(&keys, hd, hd, n, &mut kt);
    let c = Cells {
        n,
        hd,
        hdv: hd,
        keys_t: &kt,
        vals: &vals,
        vstride: hd,
        scale: 0.2,
        softcap: None,
        sink: None,
    };
    let qs = fill(3, QB * hd, 2.0);
    for simd in simds() {
        let mut s = Scratch::default();
        s.start(&c);
        s.q.copy_from_slice(&qs);
        attend(simd, &c, QB, &mut s);
        let all = s.out.clone();
        for r in 0..QB {
            s.start(&c);
            s.q[..hd].copy_from_slice(&qs[r * hd..(r + 1) * hd]);
            attend(simd, &c, 1, &mut s);
            assert_eq!(&s.out[..hd], &all[r * hd..(r + 1) * hd], "{simd:?}: row {r}");
        }
    }
}
