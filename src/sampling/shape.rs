//! What shapes one request's logits around the sampler chain: banned ids and `logit_bias`, a
//! grammar or JSON-schema constraint, and the log-probabilities of the pick.

use super::*;

/// A bias at or below this bans the token (OpenAI's `logit_bias` convention: -100 bans).
pub const BAN: f32 = -100.0;

/// Checks `logit_bias` entries: ids inside the vocabulary, biases in [-100, 100].
pub fn validate_bias(bias: &[(u32, f32)], n_vocab: usize) -> Result<()> {
    for &(id, b) in bias {
        if id as usize >= n_vocab {
            return Err(Error::InvalidArgument(format!(
                "logit_bias token id {id} is outside the vocabulary of {n_vocab}"
            )));
        }
        if !(-100.0..=100.0).contains(&b) {
            return Err(Error::InvalidArgument(format!(
                "logit_bias {b} for token {id} must be in [-100, 100]"
            )));
        }
    }
    Ok(())
}

/// Adds each bias to its token's logit; a bias of [`BAN`] or less sets it to -inf.
pub fn apply_bias(logits: &mut [f32], bias: &[(u32, f32)]) {
    for &(id, b) in bias {
        if let Some(l) = logits.get_mut(id as usize) {
            *l = if b <= BAN { f32::NEG_INFINITY } else { *l + b };
        }
    }
}

/// A sampled token's log-probability and the most likely alternatives at that step.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct TokenLogprob {
    pub id: u32,
    /// ln p(id), ≤ 0.
    pub logprob: f32,
    /// The `n` most likely tokens, most likely first (lower id first among equals); fewer
    /// where fewer than `n` tokens were possible (banned or masked ones are never listed).
    pub top: Vec<(u32, f32)>,
}

/// The log-softmax of `logits` (n_vocab) at `chosen` and its `n` most likely tokens.
pub fn logprobs(logits: &[f32], chosen: u32, n: usize) -> TokenLogprob {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    // ln Σ exp(l - max) in f64, so that a 150k vocabulary sums without loss.
    let sum: f64 = logits.iter().map(|&l| ((l - max) as f64).exp()).sum();
    let lse = max as f64 + sum.ln();
    let lp = |l: f32| (l as f64 - lse) as f32;
    let mut top: Vec<Candidate> = logits
        .iter()
        .enumerate()
        .map(|(i, &logit)| Candidate { id: i as u32, logit })
        .collect();
    let n = n.min(top.len());
    if n > 0 && n < top.len() {
        top.select_nth_unstable_by(n - 1, by_logit_desc);
    }
    top.truncate(n);
    top.retain(|c| c.logit > f32::NEG_INFINITY);
    top.sort_unstable_by(by_logit_desc);
    TokenLogprob {
        id: chosen,
        logprob: logits.get(chosen as usize).map_or(f32::NEG_INFINITY, |&l| lp(l)),
        top: top.iter().map(|c| (c.id, lp(c.logit))).collect(),
    }
}

/// What a step's logits go through around the sampler, in order: end-of-generation tokens
/// banned (`ignore_eos`), `logit_bias`, the constraint's mask; then the log-probabilities are
/// read (so they describe the distribution the sampler draws from at temperature 1, before
/// penalties, temperature and truncation); then the sampler picks, and the constraint
/// advances by the pick.
#[derive(Debug, Default)]
pub struct Shaper {
    pub banned: Vec<u32>,
    pub bias: Vec<(u32, f32)>,
    pub constraint: Option<Constraint>,
    /// Alternatives to report with each token's log-probability; `None`: no log-probabilities.
    pub logprobs: Option<usize>,
}

/// What a request asks of the [`Shaper`]: the fields of the same names in the engine's
/// `GenerateOptions`, which builds it.
#[derive(Clone, Copy, Debug, Default)]
pub struct ShapeOptions<'a> {
    /// End-of-generation tokens get no probability.
    pub ignore_eos: bool,
    pub logit_bias: &'a [(u32, f32)],
    pub constraint: Option<&'a ConstraintSpec>,
    pub logprobs: Option<usize>,
}

impl Shaper {
    /// The shaping `opts` asks for, over a vocabulary of `n_vocab` logits: a bad bias or
    /// constraint is an error. `constrainer` is the tokenizer's, built here on first use.
    pub fn new(
        opts: ShapeOptions,
        tok: &Tokenizer,
        n_vocab: usize,
        constrainer: &mut Option<Arc<Constrainer>>,
    ) -> Result<Shaper> {
        validate_bias(opts.logit_bias, n_vocab)?;
        let constraint = match opts.constraint {
            None => None,
            Some(spec) => {
                let c = match constrainer {
                    Some(c) => c.clone(),
                    None => constrainer.insert(Constrainer::new(tok)?).clone(),
                };
                Some(c.constraint(spec)?)
            }
        };
        Ok(Shaper {
            banned: if opts.ignore_eos { tok.eog_ids() } else { Vec::new() },
            bias: opts.logit_bias.to_vec(),
            constraint,
            logprobs: opts.logprobs,
        })
    }

    /// Whether a step needs the logits at all (plain greedy may read back the argmax only).
    pub fn is_plain(&self) -> bool {
        self.banned.is_empty() && self.bias.is_empty() && self.constraint.is_none() && self.logprobs.is_none()
    }

    /// Picks the next token from `logits` (n_vocab, modified in place); see [`Sampler::sample`]
    /// for `history`.
    pub fn pick(
        &mut self,
        sampler: &mut Sampler,
        logits: &mut [f32],
        history: &[u32],
    ) -> Result<(u32, Option<TokenLogprob>)> {
        for &id in &self.banned {
            if let Some(l) = logits.get_mut(id as usize) {
                *l = f32::NEG_INFINITY;
            }
        }
        apply_bias(logits, &self.bias);
        if let Some(c) = &mut self.constraint {
            c.mask(logits)?;
        }
        let before = self.logprobs.map(|n| (n, logits.to_vec()));
        let t = sampler.sample(logits, history);
        if let Some(c) = &mut self.constraint {
            c.accept(t)?;
        }
        Ok((t, before.map(|(n, l)| logprobs(&l, t, n))))
    }

    /// The constraint is complete: generation ends.
    pub fn is_complete(&self) -> bool {
        self.constraint.as_ref().is_some_and(Constraint::is_complete)
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{logits, softmax};
    use super::*;

    #[test]
    fn logprobs_are_the_log_softmax_with_sorted_alternatives() {
        let l = logits(3000, 21);
        let p = softmax(&l);
        let lp = logprobs(&l, 17, 5);
        assert!(
            (lp.logprob as f64 - p[17].ln()).abs() < 1e-4,
            "{} vs {}",
            lp.logprob,
            p[17].ln()
        );
        assert_eq!(lp.top.len(), 5);
        let mut all: Vec<u32> = (0..l.len() as u32).collect();
        all.sort_by(|&a, &b| l[b as usize].total_cmp(&l[a as usize]).then(a.cmp(&b)));
        for (&(id, v), &want) in lp.top.iter().zip(&all) {
            assert_eq!(id, want);
            assert!((v as f64 - p[id as usize].ln()).abs() < 1e-4);
        }
        assert!(lp.top.windows(2).all(|w| w[0].1 >= w[1].1));
        // Banned (-inf) tokens are never alternatives.
        let mut l = vec![1.0, 2.0, 3.0];
        apply_bias(&mut l, &[(2, BAN), (0, 1.5)]);
        assert_eq!(l, [2.5, 2.0, f32::NEG_INFINITY]);
        let lp = logprobs(&l, 0, 3);
        assert_eq!(lp.top.iter().map(|t| t.0).collect::<Vec<_>>(), [0, 1]);
        assert!((lp.logprob.exp() + lp.top[1].1.exp() - 1.0).abs() < 1e-6);
    }

    #[test]
    fn bias_validation_names_the_id_and_value() {
        validate_bias(&[(0, -100.0), (9, 100.0)], 10).unwrap();
        let e = validate_bias(&[(10, 1.0)], 10).unwrap_err().to_string();
        assert!(e.contains("10") && e.contains("vocabulary"), "{e}");
        let e = validate_bias(&[(3, f32::NAN)], 10).unwrap_err().to_string();
        assert!(e.contains("NaN") && e.contains('3'), "{e}");
        assert!(validate_bias(&[(3, -100.5)], 10).is_err());
    }

    #[test]
    fn shaper_picks_under_bias_and_reports_the_pick() {
        let mut s = Sampler::new(SamplerConfig::greedy()).unwrap();
        let mut sh = Shaper {
            banned: vec![1],
            bias: vec![(2, BAN)],
            logprobs: Some(2),
            ..Shaper::default()
        };
        assert!(!sh.is_plain());
        // 1 is banned, 2 biased away: 3 is the greedy pick and the top alternative.
        let (t, lp) = sh.pick(&mut s, &mut [0.0, 5.0, 4.0, 3.0], &[]).unwrap();
        let lp = lp.unwrap();
        assert_eq!((t, lp.id, lp.top[0].0, lp.top[1].0), (3, 3, 3, 0));
        assert_eq!(lp.logprob, lp.top[0].1);
        assert!(Shaper::default().is_plain() && !Shaper::default().is_complete());
    }
}
