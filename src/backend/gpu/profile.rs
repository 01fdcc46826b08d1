//! Per-op totals of a GPU backend's timed forwards (`BackendOptions::profile`): all of them for
//! `Context::profile_report`'s table, and the decode steps (one token) and the batched ones
//! since the last reset for `Context::decode_profile` and `Context::batch_profile`. wgpu fills
//! it from timestamp queries, CUDA from events.

use std::collections::BTreeMap;

use crate::backend::OpProfile;

#[derive(Debug, Default)]
pub struct OpTotals {
    /// kind → (launches, ns)
    all: BTreeMap<String, (u64, f64)>,
    forwards: u64,
    /// Since the last reset, decode steps [0] and batched ones [1]: kind → (launches, ns), and
    /// (forwards, tokens).
    steps: [BTreeMap<String, (u64, f64)>; 2],
    step_counts: [(u64, u64); 2],
}

/// The `steps` entry of a forward of `tokens` tokens.
fn phase(tokens: usize) -> usize {
    usize::from(tokens != 1)
}

impl OpTotals {
    /// The launches of one op kind in a forward of `tokens` tokens took `ns`.
    pub fn add(&mut self, kind: &str, launches: u64, ns: f64, tokens: usize) {
        let maps = [&mut self.all, &mut self.steps[phase(tokens)]];
        for m in maps {
            let e = m.entry(kind.to_string()).or_default();
            e.0 += launches;
            e.1 += ns;
        }
    }

    /// A forward of `tokens` tokens was timed.
    pub fn forward(&mut self, tokens: usize) {
        self.forwards += 1;
        let c = &mut self.step_counts[phase(tokens)];
        c.0 += 1;
        c.1 += tokens as u64;
    }

    fn since(&self, phase: usize) -> OpProfile {
        let ops = self.steps[phase].iter().map(|(k, &(n, ns))| (k.clone(), n, ns));
        let (forwards, tokens) = self.step_counts[phase];
        OpProfile::new(forwards, tokens, ops)
    }

    /// The decode steps since the last `reset_steps`.
    pub fn decode(&self) -> OpProfile {
        self.since(0)
    }

    /// The batched steps since the last `reset_steps`.
    pub fn batch(&self) -> OpProfile {
        self.since(1)
    }

    pub fn reset_steps(&mut self) {
        self.steps = Default::default();
        self.step_counts = Default::default();
    }

    /// The table of every forward: op kind, launches, total ms, share.
    pub fn report(&self, backend: &str, device: &str) -> String {
        let total: f64 = self.all.values().map(|v| v.1).sum();
        let mut rows: Vec<_> = self.all.iter().collect();
        rows.sort_by(|a, b| b.1 .1.total_cmp(&a.1 .1));
        let mut s = format!(
            "{backend} profile ({device}), {} forwards, GPU time per op:\n",
            self.forwards
        );
        s += &format!("  {:<40} {:>10} {:>12} {:>7}\n", "op", "dispatches", "ms", "%");
        for (k, (n, ns)) in rows {
            s += &format!(
                "  {k:<40} {n:>10} {:>12.3} {:>6.1}%\n",
                ns / 1e6,
                100.0 * ns / total.max(1.0)
            );
        }
        s
    }
}
