//! Per-op time and weight traffic on the CPU (`BackendOptions::profile`): each instruction
//! is timed on the calling thread (its parallel parts included) and charged the bytes of
//! model weights it reads — a matmul its whole matrix, an expert matmul only the experts
//! the step's tokens chose, `get_rows` its rows. Decode steps (one token) and batched steps
//! are kept apart, so the decode rows say what one generated token costs.

use std::collections::BTreeMap;
use std::fmt::Write;

use super::Instr;
use crate::model::Op;

/// Decode: steps of one token; batch: the rest (prefill, several sequences).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Phase {
    Decode,
    Batch,
}

#[derive(Clone, Copy, Debug, Default)]
struct Entry {
    calls: u64,
    ns: u64,
    bytes: u64,
}

#[derive(Debug, Default)]
pub struct Profile {
    ops: BTreeMap<(Phase, String), Entry>,
    /// Per phase: forwards, tokens.
    steps: [(u64, u64); 2],
    /// The same since the last `reset_steps` (`decode`, `batch`).
    recent: BTreeMap<(Phase, String), Entry>,
    recent_steps: [(u64, u64); 2],
}

impl Profile {
    /// One forward of `tokens` tokens begins.
    pub fn forward(&mut self, tokens: usize) {
        for s in [&mut self.steps, &mut self.recent_steps] {
            let s = &mut s[phase(tokens) as usize];
            s.0 += 1;
            s.1 += tokens as u64;
        }
    }

    /// Instruction `s` took `ns` nanoseconds and read `bytes` of weights in a step of
    /// `tokens` tokens.
    pub fn record(&mut self, s: &Instr, tokens: usize, ns: u64, bytes: u64) {
        let kind = match (&s.op, &s.weight) {
            (Op::Matmul { .. } | Op::MatmulId { .. } | Op::GetRows { .. }, Some(w)) => {
                format!("{}/{}", s.op.kind(), w.qtype.name())
            }
            _ => s.op.kind().to_string(),
        };
        for m in [&mut self.ops, &mut self.recent] {
            let e = m.entry((phase(tokens), kind.clone())).or_default();
            e.calls += 1;
            e.ns += ns;
            e.bytes += bytes;
        }
    }

    /// The ops of `phase`'s steps since the last `reset_steps`, as the side-by-side table takes
    /// them.
    fn since(&self, phase: Phase) -> crate::backend::OpProfile {
        let ops = self
            .recent
            .iter()
            .filter(|((p, _), _)| *p == phase)
            .map(|((_, k), e)| (k.clone(), e.calls, e.ns as f64));
        let (forwards, tokens) = self.recent_steps[phase as usize];
        crate::backend::OpProfile::new(forwards, tokens, ops)
    }

    /// The decode steps since the last `reset_steps`.
    pub fn decode(&self) -> crate::backend::OpProfile {
        self.since(Phase::Decode)
    }

    /// The batched steps since the last `reset_steps`.
    pub fn batch(&self) -> crate::backend::OpProfile {
        self.since(Phase::Batch)
    }

    /// The steps so far forgotten by `decode` and `batch` (the report keeps them).
    pub fn reset_steps(&mut self) {
        self.recent.clear();
        self.recent_steps = [(0, 0); 2];
    }

    /// The tables: per phase, op kind, calls per forward, µs per token, share of the time,
    /// KiB of weights read per token; then the phase's totals.
    pub fn report(&self, isa: &str, threads: usize) -> String {
        let mut out = String::new();
        for phase in [Phase::Decode, Phase::Batch] {
            let (forwards, tokens) = self.steps[phase as usize];
            if forwards == 0 {
                continue;
            }
            let mut rows: Vec<(&str, &Entry)> = self
                .ops
                .iter()
                .filter(|((p, _), _)| *p == phase)
                .map(|((_, k), e)| (k.as_str(), e))
                .collect();
            rows.sort_by(|a, b| b.1.ns.cmp(&a.1.ns).then(a.0.cmp(b.0)));
            let total_ns: u64 = rows.iter().map(|r| r.1.ns).sum();
            let total_bytes: u64 = rows.iter().map(|r| r.1.bytes).sum();
            let (f, t) = (forwards as f64, tokens as f64);
            let what = match phase {
                Phase::Decode => "decode steps (1 token)",
                Phase::Batch => "batched steps",
            };
            let _ = writeln!(
                out,
                "cpu profile ({isa}, {threads} threads), {what}: {forwards} forwards, {tokens} tokens"
            );
            let _ = writeln!(
                out,
                "  {:<24} {:>10} {:>12} {:>7} {:>14}",
                "op", "calls/fwd", "µs/token", "%", "weights KiB/tok"
            );
            for (k, e) in rows {
                let _ = writeln!(
                    out,
                    "  {k:<24} {:>10.1} {:>12.3} {:>6.1}% {:>14.1}",
                    e.calls as f64 / f,
                    e.ns as f64 / 1e3 / t,
                    100.0 * e.ns as f64 / total_ns.max(1) as f64,
                    e.bytes as f64 / 1024.0 / t
                );
            }
            let _ = writeln!(
                out,
                "  {:<24} {:>10} {:>12.3} {:>7} {:>14.1}",
                "total",
                "",
                total_ns as f64 / 1e3 / t,
                "",
                total_bytes as f64 / 1024.0 / t
            );
        }
        out
    }
}

fn phase(tokens: usize) -> Phase {
    if tokens == 1 {
        Phase::Decode
    } else {
        Phase::Batch
    }
}

/// Bytes of model weights instruction `s` reads: the experts that `route` (`[rows, 2k]`)
/// names for an expert matmul, the token rows for `get_rows`, the whole tensor otherwise.
pub fn weight_bytes(s: &Instr, route: Option<&[f32]>, tokens: usize) -> u64 {
    let Some(w) = &s.weight else { return 0 };
    match (&s.op, route) {
        (Op::MatmulId { .. }, Some(route)) => {
            let k = s.in_widths.get(1).map_or(0, |w| w / 2);
            let mut chosen = vec![false; s.experts.len()];
            for r in route.chunks_exact(2 * k.max(1)).take(s.rows) {
                for &e in &r[..k] {
                    if let Some(c) = chosen.get_mut(e as usize) {
                        *c = true;
                    }
                }
            }
            s.experts
                .iter()
                .zip(chosen)
                .filter(|(_, c)| *c)
                .map(|(e, _)| e.bytes().len() as u64)
                .sum()
        }
        (Op::GetRows { .. }, _) => (tokens * w.row_bytes()) as u64,
        _ => w.bytes().len() as u64,
    }
}
