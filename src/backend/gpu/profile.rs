//! Per-op totals of a GPU backend's timed forwards (`BackendOptions::profile`): all of them for
//! `Context::profile_report`'s table, and the decode steps (one token) since the last reset for
//! `Context::decode_profile`. wgpu fills it from timestamp queries, CUDA from events.

use std::collections::BTreeMap;

use crate::backend::OpProfile;

#[derive(Debug, Default)]
pub struct OpTotals {
    /// kind → (launches, ns)
    all: BTreeMap<String, (u64, f64)>,
    forwards: u64,
    decode: BTreeMap<String, (u64, f64)>,
    decode_forwards: u64,
}

impl OpTotals {
    /// The launches of one op kind in a forward of `tokens` tokens took `ns`.
    pub fn add(&mut self, kind: &str, launches: u64, ns: f64, tokens: usize) {
        let maps = [Some(&mut self.all), (tokens == 1).then_some(&mut self.decode)];
        for m in maps.into_iter().flatten() {
            let e = m.entry(kind.to_string()).or_default();
            e.0 += launches;
            e.1 += ns;
        }
    }

    /// A forward of `tokens` tokens was timed.
    pub fn forward(&mut self, tokens: usize) {
        self.forwards += 1;
        self.decode_forwards += u64::from(tokens == 1);
    }

    /// The decode steps since the last `reset_decode`.
    pub fn decode(&self) -> OpProfile {
        let ops = self.decode.iter().map(|(k, &(n, ns))| (k.clone(), n, ns));
        OpProfile::new(self.decode_forwards, ops)
    }

    pub fn reset_decode(&mut self) {
        self.decode.clear();
        self.decode_forwards = 0;
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
