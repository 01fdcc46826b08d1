//! Token samplers: greedy, and llama.cpp's default chain (penalties → top-k → top-p → min-p →
//! temperature → softmax → draw) over one step's logits, with a seeded PRNG of our own.
//!
//! Each stage follows the function of the same name in llama.cpp's `src/llama-sampling.cpp`
//! (`llama_sampler_penalties_apply`, `_top_k_impl`, `_top_p_apply`, `_min_p_apply`,
//! `_temp_impl`, `_dist_apply`). The draws cannot match llama.cpp's (it uses `std::mt19937`), but
//! the candidate set each stage leaves does.

use std::collections::VecDeque;
use std::sync::Arc;

use crate::constrain::{Constrainer, Constraint, ConstraintSpec};
use crate::error::{Error, Result};
use crate::logits::argmax;
use crate::tokenizer::Tokenizer;

mod shape;
pub use shape::{apply_bias, logprobs, validate_bias, ShapeOptions, Shaper, TokenLogprob, BAN};

/// Sampling settings. `Default` is llama.cpp's `common_params_sampling`.
#[derive(Clone, Debug, PartialEq)]
pub struct SamplerConfig {
    /// ≤ 0 means greedy (argmax, lowest id wins ties).
    pub temperature: f32,
    /// Keep the `top_k` most likely tokens; 0 = off.
    pub top_k: usize,
    /// Keep the smallest prefix whose probability mass is ≥ `top_p`; 1 = off.
    pub top_p: f32,
    /// Drop tokens with probability below `min_p` × the largest; 0 = off.
    pub min_p: f32,
    /// Divide a seen token's positive logit by this, multiply a negative one; 1 = off.
    pub repeat_penalty: f32,
    /// Subtracted once from the logit of every token seen in the window; 0 = off.
    pub presence_penalty: f32,
    /// Subtracted from a seen token's logit once per occurrence in the window; 0 = off.
    pub frequency_penalty: f32,
    /// How many of the most recent tokens the penalties look at; 0 = off.
    pub penalty_last_n: usize,
    /// PRNG seed; `None` picks one from the clock at construction (see [`Sampler::seed`]).
    pub seed: Option<u64>,
}

impl Default for SamplerConfig {
    fn default() -> Self {
        SamplerConfig {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            repeat_penalty: 1.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            penalty_last_n: 64,
            seed: None,
        }
    }
}

impl SamplerConfig {
    /// Greedy decoding with no penalties.
    pub fn greedy() -> Self {
        SamplerConfig {
            temperature: 0.0,
            ..Self::default()
        }
    }

    pub fn validate(&self) -> Result<()> {
        let bad = |what: String| Err(Error::InvalidArgument(what));
        if !(self.temperature >= 0.0 && self.temperature.is_finite()) {
            return bad(format!("temperature {} must be a finite number ≥ 0", self.temperature));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return bad(format!("top_p {} must be in (0, 1]", self.top_p));
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return bad(format!("min_p {} must be in [0, 1]", self.min_p));
        }
        if !(self.repeat_penalty > 0.0 && self.repeat_penalty.is_finite()) {
            return bad(format!(
                "repeat_penalty {} must be a finite number > 0",
                self.repeat_penalty
            ));
        }
        if !self.presence_penalty.is_finite() {
            return bad(format!("presence_penalty {} must be finite", self.presence_penalty));
        }
        if !self.frequency_penalty.is_finite() {
            return bad(format!("frequency_penalty {} must be finite", self.frequency_penalty));
        }
        Ok(())
    }

    fn penalties_on(&self) -> bool {
        self.penalty_last_n > 0
            && (self.repeat_penalty != 1.0 || self.presence_penalty != 0.0 || self.frequency_penalty != 0.0)
    }
}

/// One surviving token of a step.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Candidate {
    pub id: u32,
    pub logit: f32,
}

/// Higher logit first, then lower id: a total order, so selection and ties are deterministic.
fn by_logit_desc(a: &Candidate, b: &Candidate) -> std::cmp::Ordering {
    b.logit.total_cmp(&a.logit).then(a.id.cmp(&b.id))
}

/// A sampler for one sequence.
pub struct Sampler {
    cfg: SamplerConfig,
    seed: u64,
    rng: Xoshiro256,
    /// The last `penalty_last_n` tokens given to [`Sampler::accept`], oldest first.
    accepted: VecDeque<u32>,
    /// Reused across steps: (n_vocab) at the start of a step, the survivors at its end.
    cands: Vec<Candidate>,
}

impl Sampler {
    pub fn new(cfg: SamplerConfig) -> Result<Sampler> {
        cfg.validate()?;
        let seed = cfg.seed.unwrap_or_else(clock_seed);
        Ok(Sampler {
            accepted: VecDeque::with_capacity(cfg.penalty_last_n),
            cfg,
            seed,
            rng: Xoshiro256::new(seed),
            cands: Vec::new(),
        })
    }

    pub fn config(&self) -> &SamplerConfig {
        &self.cfg
    }

    /// The seed in use: the configured one, or the one picked at construction.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Records a committed token (a prompt token or a sampled one) for the penalties.
    pub fn accept(&mut self, token: u32) {
        let n = self.cfg.penalty_last_n;
        if n == 0 {
            return;
        }
        if self.accepted.len() == n {
            self.accepted.pop_front();
        }
        self.accepted.push_back(token);
    }

    /// Forgets the accepted tokens and restarts the PRNG from the seed.
    pub fn reset(&mut self) {
        self.accepted.clear();
        self.rng = Xoshiro256::new(self.seed);
    }

    /// Picks the next token from `logits` (n_vocab), which the penalties modify in place.
    ///
    /// The penalty window is the last `penalty_last_n` tokens of `history` followed by the
    /// accepted ones. Pass either the whole context as `history` and never call `accept`, or the
    /// prompt (or nothing) as `history` and `accept` each token — not both for the same tokens.
    pub fn sample(&mut self, logits: &mut [f32], history: &[u32]) -> u32 {
        debug_assert!(!logits.is_empty(), "sample: empty logits");
        self.apply_penalties(logits, history);
        if self.cfg.temperature <= 0.0 {
            // The truncation stages always keep the argmax, so greedy skips them.
            return argmax(logits);
        }
        self.filter(logits);
        let inv_t = 1.0 / self.cfg.temperature;
        let cands = &self.cands;
        let Some(first) = cands.first() else {
            return argmax(logits);
        };
        let max = cands.iter().map(|c| c.logit).fold(f32::NEG_INFINITY, f32::max);
        // Softmax of logit / T in f64, then an inverse-CDF draw (llama_sampler_dist_apply).
        let weights = cands.iter().map(|c| (((c.logit - max) * inv_t) as f64).exp());
        let sum: f64 = weights.clone().sum();
        if !(sum > 0.0 && sum.is_finite()) {
            return first.id;
        }
        let target = self.rng.next_f64() * sum;
        let mut acc = 0.0;
        let mut last = first.id;
        for (c, w) in cands.iter().zip(weights) {
            if w > 0.0 {
                acc += w;
                last = c.id;
                if target < acc {
                    return c.id;
                }
            }
        }
        last
    }

    /// llama_sampler_penalties_apply: over the window, a token seen `count` times gets
    /// `logit > 0 ? logit / repeat : logit * repeat`, then `- count·frequency - presence`.
    fn apply_penalties(&self, logits: &mut [f32], history: &[u32]) {
        if !self.cfg.penalties_on() {
            return;
        }
        let n = self.cfg.penalty_last_n;
        let from_accepted = self.accepted.len().min(n);
        let from_history = (n - from_accepted).min(history.len());
        let mut window: Vec<u32> = history[history.len() - from_history..]
            .iter()
            .chain(self.accepted.iter().skip(self.accepted.len() - from_accepted))
            .copied()
            .collect();
        window.sort_unstable();
        let (rep, freq, pres) = (
            self.cfg.repeat_penalty,
            self.cfg.frequency_penalty,
            self.cfg.presence_penalty,
        );
        for run in window.chunk_by(|a, b| a == b) {
            // Ids outside the vocabulary never match a candidate in llama.cpp either.
            let Some(l) = logits.get_mut(run[0] as usize) else {
                continue;
            };
            *l = if *l <= 0.0 { *l * rep } else { *l / rep };
            *l -= run.len() as f32 * freq + pres;
        }
    }

    /// top-k → top-p → min-p over `logits`; leaves the survivors in `self.cands` and returns
    /// them (sorted by descending logit whenever top-k or top-p ran).
    pub(crate) fn filter(&mut self, logits: &[f32]) -> &[Candidate] {
        let cands = &mut self.cands;
        cands.clear();
        cands.extend(
            logits
                .iter()
                .enumerate()
                .map(|(i, &logit)| Candidate { id: i as u32, logit }),
        );
        let mut sorted = false;

        // llama_sampler_top_k_impl: partial selection, O(n) + O(k log k) instead of a full sort.
        let k = self.cfg.top_k;
        if k > 0 && k < cands.len() {
            cands.select_nth_unstable_by(k - 1, by_logit_desc);
            cands.truncate(k);
        }
        if k > 0 {
            cands.sort_unstable_by(by_logit_desc);
            sorted = true;
        }

        // llama_sampler_top_p_apply: probabilities at temperature 1, smallest prefix with mass ≥ p.
        let p = self.cfg.top_p;
        if p < 1.0 && !cands.is_empty() {
            if !sorted {
                cands.sort_unstable_by(by_logit_desc);
            }
            let max = cands[0].logit;
            let sum: f64 = cands.iter().map(|c| ((c.logit - max) as f64).exp()).sum();
            let mut cum = 0.0;
            let mut keep = cands.len();
            for (i, c) in cands.iter().enumerate() {
                cum += ((c.logit - max) as f64).exp() / sum;
                if cum >= p as f64 {
                    keep = i + 1;
                    break;
                }
            }
            cands.truncate(keep);
        }

        // llama_sampler_min_p_apply: p_i ≥ min_p · p_max  ⇔  logit_i ≥ logit_max + ln(min_p).
        let min_p = self.cfg.min_p;
        if min_p > 0.0 && !cands.is_empty() {
            let max = cands.iter().map(|c| c.logit).fold(f32::NEG_INFINITY, f32::max);
            let min_logit = max + min_p.ln();
            cands.retain(|c| c.logit >= min_logit);
        }
        cands
    }
}

/// A seed from the clock, for runs where the user set none.
fn clock_seed() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let mut s = nanos ^ (std::process::id() as u64).rotate_left(32);
    splitmix64(&mut s)
}

/// SplitMix64 (Steele, Lea & Flood 2014), used to expand a seed into xoshiro's state.
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// xoshiro256** 1.0 (Blackman & Vigna, <https://prng.di.unimi.it/xoshiro256starstar.c>).
#[derive(Clone, Debug)]
struct Xoshiro256 {
    s: [u64; 4],
}

impl Xoshiro256 {
    fn new(seed: u64) -> Self {
        let mut sm = seed;
        Xoshiro256 {
            s: std::array::from_fn(|_| splitmix64(&mut sm)),
        }
    }

    fn next_u64(&mut self) -> u64 {
        let s = &mut self.s;
        let result = s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        result
    }

    /// Uniform in [0, 1) with 53 random bits.
    fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(temperature: f32, top_k: usize, top_p: f32, min_p: f32, seed: u64) -> SamplerConfig {
        SamplerConfig {
            temperature,
            top_k,
            top_p,
            min_p,
            seed: Some(seed),
            ..SamplerConfig::default()
        }
    }

    /// Plain filters-off sampling at temperature 1.
    fn plain(seed: u64) -> SamplerConfig {
        cfg(1.0, 0, 1.0, 0.0, seed)
    }

    /// Deterministic pseudo-random logits in about [-8, 8).
    pub(super) fn logits(n: usize, seed: u64) -> Vec<f32> {
        let mut r = Xoshiro256::new(seed);
        (0..n).map(|_| (r.next_f64() * 16.0 - 8.0) as f32).collect()
    }

    /// The exact softmax, in f64.
    pub(super) fn softmax(l: &[f32]) -> Vec<f64> {
        let max = l.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let e: Vec<f64> = l.iter().map(|&x| ((x - max) as f64).exp()).collect();
        let s: f64 = e.iter().sum();
        e.iter().map(|x| x / s).collect()
    }

    fn run(cfg: SamplerConfig, l: &[f32], steps: usize) -> Vec<u32> {
        let mut s = Sampler::new(cfg).unwrap();
        (0..steps).map(|_| s.sample(&mut l.to_vec(), &[])).collect()
    }

    #[test]
    fn xoshiro_reference_values() {
        // State {1, 2, 3, 4}: first outputs of the reference C implementation.
        let mut r = Xoshiro256 { s: [1, 2, 3, 4] };
        let got: Vec<u64> = (0..3).map(|_| r.next_u64()).collect();
        assert_eq!(got, [11520, 0, 1509978240]);
    }

    #[test]
    fn defaults_match_llama_cpp_and_validate() {
        let d = SamplerConfig::default();
        assert_eq!((d.temperature, d.top_k, d.top_p, d.min_p), (0.8, 40, 0.95, 0.05));
        assert_eq!((d.repeat_penalty, d.penalty_last_n), (1.0, 64));
        d.validate().unwrap();
    }

    #[test]
    fn validate_rejects_bad_values_naming_them() {
        let bad = [
            SamplerConfig {
                temperature: -0.5,
                ..Default::default()
            },
            SamplerConfig {
                temperature: f32::NAN,
                ..Default::default()
            },
            SamplerConfig {
                top_p: 0.0,
                ..Default::default()
            },
            SamplerConfig {
                top_p: 1.5,
                ..Default::default()
            },
            SamplerConfig {
                min_p: -0.1,
                ..Default::default()
            },
            SamplerConfig {
                min_p: 1.25,
                ..Default::default()
            },
            SamplerConfig {
                repeat_penalty: 0.0,
                ..Default::default()
            },
            SamplerConfig {
                presence_penalty: f32::INFINITY,
                ..Default::default()
            },
        ];
        let values = [
            "-0.5",
            "NaN",
            "top_p 0",
            "1.5",
            "-0.1",
            "1.25",
            "repeat_penalty 0",
            "inf",
        ];
        for (c, v) in bad.into_iter().zip(values) {
            match Sampler::new(c) {
                Err(Error::InvalidArgument(m)) => assert!(m.contains(v), "{m:?} lacks {v:?}"),
                other => panic!("expected InvalidArgument for {v}, got {:?}", other.err()),
            }
        }
    }

    #[test]
    fn greedy_is_argmax_with_lowest_id_on_ties() {
        let l = [0.5, 3.0, -1.0, 3.0, 2.9];
        assert_eq!(run(SamplerConfig::greedy(), &l, 3), [1, 1, 1]);
        assert_eq!(argmax(&[f32::NEG_INFINITY, -5.0, -5.0]), 1);
    }

    #[test]
    fn top_k_1_equals_greedy_for_any_seed() {
        for seed in 0..20 {
            let l = logits(5000, seed);
            let mut tied = l.clone();
            tied[17] = 9.0; // two equal maxima: the lower id must win
            tied[4000] = 9.0;
            for v in [l, tied] {
                let want = argmax(&v);
                assert_eq!(run(cfg(1.5, 1, 1.0, 0.0, seed), &v, 5), vec![want; 5]);
                assert_eq!(run(cfg(0.7, 1, 0.9, 0.05, seed ^ 99), &v, 5), vec![want; 5]);
            }
        }
    }

    #[test]
    fn top_k_keeps_the_k_largest_sorted() {
        let l = logits(10_000, 3);
        let mut s = Sampler::new(cfg(1.0, 50, 1.0, 0.0, 0)).unwrap();
        let got: Vec<u32> = s.filter(&l).iter().map(|c| c.id).collect();
        let mut all: Vec<u32> = (0..l.len() as u32).collect();
        all.sort_by(|&a, &b| l[b as usize].total_cmp(&l[a as usize]).then(a.cmp(&b)));
        assert_eq!(got, all[..50]);
    }

    #[test]
    fn same_seed_same_sequence_different_seed_differs() {
        let l = logits(1000, 7);
        let c = |seed| cfg(1.0, 0, 1.0, 0.0, seed);
        let a = run(c(42), &l, 64);
        assert_eq!(a, run(c(42), &l, 64));
        assert_ne!(a, run(c(43), &l, 64));
        let mut s = Sampler::new(c(42)).unwrap();
        assert_eq!(s.seed(), 42);
        s.sample(&mut l.clone(), &[]);
        s.reset();
        assert_eq!(s.sample(&mut l.clone(), &[]), a[0]);
    }

    #[test]
    fn min_p_removes_tokens_below_min_p_times_p_max() {
        let l = logits(2000, 11);
        let p = softmax(&l);
        let p_max = p.iter().copied().fold(0.0, f64::max);
        for min_p in [0.01f32, 0.05, 0.2, 0.9] {
            let mut s = Sampler::new(cfg(1.0, 0, 1.0, min_p, 0)).unwrap();
            let mut kept: Vec<u32> = s.filter(&l).iter().map(|c| c.id).collect();
            kept.sort_unstable();
            let want: Vec<u32> = (0..l.len() as u32)
                .filter(|&i| p[i as usize] >= min_p as f64 * p_max * (1.0 - 1e-5))
                .collect();
            assert_eq!(kept, want, "min_p {min_p}");
            assert!(!kept.is_empty());
        }
    }

    #[test]
    fn top_p_keeps_the_smallest_prefix_with_mass_at_least_p() {
        let l = logits(500, 5);
        let p = softmax(&l);
        for top_p in [0.1f32, 0.5, 0.9, 0.99] {
            let mut s = Sampler::new(cfg(1.0, 0, top_p, 0.0, 0)).unwrap();
            let kept: Vec<u32> = s.filter(&l).iter().map(|c| c.id).collect();
            let mass = |ids: &[u32]| ids.iter().map(|&i| p[i as usize]).sum::<f64>();
            assert!(mass(&kept) >= top_p as f64 - 1e-9, "top_p {top_p}");
            assert!(
                mass(&kept[..kept.len() - 1]) < top_p as f64,
                "top_p {top_p}: not smallest"
            );
            // The prefix is the most likely tokens, in order.
            assert!(kept.windows(2).all(|w| p[w[0] as usize] >= p[w[1] as usize]));
            let least_kept = p[*kept.last().unwrap() as usize];
            let dropped = (0..l.len() as u32).filter(|i| !kept.contains(i));
            assert!(dropped.into_iter().all(|i| p[i as usize] <= least_kept));
        }
    }

    #[test]
    fn repeat_penalty_divides_positive_multiplies_negative() {
        let c = SamplerConfig {
            repeat_penalty: 2.0,
            ..SamplerConfig::greedy()
        };
        let s = Sampler::new(c).unwrap();
        let mut l = vec![4.0, -1.0, 3.0, 0.0, 3.5];
        // Token 0 twice: the repeat penalty applies once, not per occurrence.
        s.apply_penalties(&mut l, &[0, 1, 0, 3, 99]);
        assert_eq!(l, [2.0, -2.0, 3.0, 0.0, 3.5]);
        let mut s = Sampler::new(SamplerConfig {
            repeat_penalty: 2.0,
            ..SamplerConfig::greedy()
        })
        .unwrap();
        assert_eq!(s.sample(&mut [4.0, -1.0, 3.0, 0.0, 3.5], &[0]), 4);
        assert_eq!(s.sample(&mut [4.0, -1.0, 3.0, 0.0, 3.5], &[]), 0);
    }

    #[test]
    fn presence_and_frequency_penalties() {
        let c = SamplerConfig {
            presence_penalty: 0.5,
            frequency_penalty: 0.25,
            ..SamplerConfig::greedy()
        };
        let s = Sampler::new(c).unwrap();
        let mut l = vec![1.0, 1.0, 1.0, 1.0];
        s.apply_penalties(&mut l, &[2, 2, 2, 1]);
        assert_eq!(l, [1.0, 1.0 - 0.25 - 0.5, 1.0 - 0.75 - 0.5, 1.0]);
    }

    #[test]
    fn penalty_window_is_last_n_of_history_then_accepted() {
        let c = SamplerConfig {
            presence_penalty: 1.0,
            penalty_last_n: 3,
            ..SamplerConfig::greedy()
        };
        let mut s = Sampler::new(c).unwrap();
        let mut l = vec![0.0; 6];
        s.apply_penalties(&mut l, &[0, 1, 2, 3]);
        assert_eq!(l, [0.0, -1.0, -1.0, -1.0, 0.0, 0.0]);
        s.accept(5);
        s.accept(4);
        let mut l = vec![0.0; 6];
        s.apply_penalties(&mut l, &[0, 1, 2, 3]);
        assert_eq!(l, [0.0, 0.0, 0.0, -1.0, -1.0, -1.0]);
        for t in [0, 0, 0, 1] {
            s.accept(t);
        }
        let mut l = vec![0.0; 6];
        s.apply_penalties(&mut l, &[3]);
        assert_eq!(l, [-1.0, -1.0, 0.0, 0.0, 0.0, 0.0]);
    }

    #[test]
    fn temperature_to_zero_approaches_greedy() {
        let mut l = logits(3000, 13);
        let want = argmax(&l);
        l[want as usize] += 0.01; // at T = 1e-4 the runner-up gets at most e^-100
        for seed in 0..10 {
            assert_eq!(run(cfg(1e-4, 0, 1.0, 0.0, seed), &l, 20), vec![want; 20]);
            assert_eq!(run(cfg(0.0, 0, 1.0, 0.0, seed), &l, 3), vec![want; 3]);
            assert_eq!(run(cfg(-0.0, 40, 0.95, 0.05, seed), &l, 3), vec![want; 3]);
        }
    }

    #[test]
    fn draws_follow_softmax_at_temperature_1() {
        let l = [1.0, 2.0, 0.5, -1.0, 3.0, 0.0];
        let p = softmax(&l);
        let n = 20_000;
        let mut counts = [0usize; 6];
        for t in run(plain(2024), &l, n) {
            counts[t as usize] += 1;
        }
        for (i, (&c, &pi)) in counts.iter().zip(&p).enumerate() {
            let f = c as f64 / n as f64;
            // 4σ of a binomial proportion, plus a little slack: a few % of each probability.
            let tol = 4.0 * (pi * (1.0 - pi) / n as f64).sqrt() + 1e-3;
            assert!((f - pi).abs() < tol, "token {i}: freq {f:.4} vs p {pi:.4}");
        }
    }

    #[test]
    fn temperature_sharpens_the_distribution() {
        let l = [1.0, 2.0, 0.0];
        let n = 20_000;
        let freq_of_max = |t: f32| {
            let hits = run(cfg(t, 0, 1.0, 0.0, 9), &l, n).iter().filter(|&&x| x == 1).count();
            hits as f64 / n as f64
        };
        let scaled: Vec<f32> = l.iter().map(|x| x / 0.5).collect();
        let want = softmax(&scaled)[1];
        assert!((freq_of_max(0.5) - want).abs() < 0.02, "{} vs {want}", freq_of_max(0.5));
    }
}
