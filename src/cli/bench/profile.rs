//! `bench --profile`: the decode profile (`Session::decode_profile`) of every backend side by
//! side, one table per decode test: per op kind, launches (CPU: calls) per token, µs per token
//! and share of the step, markdown after bench's table, or each decode record's `profile`
//! field in JSON. Op kinds are each backend's own (a GPU's fused launches are one row).

use std::collections::BTreeMap;
use std::fmt::Write;

use serde_json::{json, Value};

use minfer::backend::OpProfile;

/// (calls per token, µs per token, share in %) of each op.
fn per_token(p: &OpProfile) -> BTreeMap<&str, (f64, f64, f64)> {
    let (f, total) = (p.forwards.max(1) as f64, p.total_ns().max(1.0));
    p.ops
        .iter()
        .map(|o| {
            (
                o.op.as_str(),
                (o.calls as f64 / f, o.ns / 1e3 / f, 100.0 * o.ns / total),
            )
        })
        .collect()
}

/// The `profile` field of a decode record: its ops, busiest first.
pub fn json(p: &OpProfile) -> Value {
    let rows = per_token(p);
    let ops: Vec<Value> = p
        .ops
        .iter()
        .map(|o| {
            let (calls, us, share) = rows[o.op.as_str()];
            json!({"op": o.op, "calls_per_token": calls, "us_per_token": us, "share": share / 100.0})
        })
        .collect();
    json!({"tokens": p.forwards, "us_per_token": p.total_ns() / 1e3 / p.forwards.max(1) as f64, "ops": ops})
}

/// One markdown table of `test` (`tg128 @ d1024`) with a column group per backend; rows
/// ordered by the most time any backend spends in them, then a total row.
pub fn markdown(test: &str, cols: &[(&str, &OpProfile)]) -> String {
    let rows: Vec<BTreeMap<&str, (f64, f64, f64)>> = cols.iter().map(|(_, p)| per_token(p)).collect();
    let mut ops: Vec<(&str, f64)> = Vec::new();
    for r in &rows {
        for (&op, &(_, us, _)) in r {
            match ops.iter_mut().find(|(o, _)| *o == op) {
                Some(e) => e.1 = e.1.max(us),
                None => ops.push((op, us)),
            }
        }
    }
    ops.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(b.0)));
    let mut s = format!("\ndecode profile, {test}, per token:\n\n| op |");
    for (b, _) in cols {
        let _ = write!(s, " {b} calls | {b} µs | {b} % |");
    }
    s += "\n| --- |";
    s += &" ---: | ---: | ---: |".repeat(cols.len());
    s += "\n";
    for (op, _) in &ops {
        let _ = write!(s, "| {op} |");
        for r in &rows {
            match r.get(op) {
                Some((calls, us, share)) => {
                    let _ = write!(s, " {calls:.0} | {us:.1} | {share:.1} |");
                }
                None => s += " — | — | — |",
            }
        }
        s += "\n";
    }
    s += "| total |";
    for (r, (_, p)) in rows.iter().zip(cols) {
        let calls: f64 = r.values().map(|v| v.0).sum();
        let _ = write!(
            s,
            " {calls:.0} | {:.1} | 100.0 |",
            p.total_ns() / 1e3 / p.forwards.max(1) as f64
        );
    }
    s + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prof(forwards: u64, ops: &[(&str, u64, f64)]) -> OpProfile {
        OpProfile::new(forwards, ops.iter().map(|&(o, c, ns)| (o.to_string(), c, ns)))
    }

    /// Per token over the steps, the union of both backends' ops, "—" where one has none.
    #[test]
    fn backends_side_by_side_per_token() {
        let cpu = prof(2, &[("matmul/q4_1", 60, 8e6), ("attention", 4, 2e6)]);
        let gpu = prof(2, &[("matmul_vec/q4_1", 20, 1e6), ("attention", 2, 1e6)]);
        let t = markdown("tg2", &[("cpu", &cpu), ("wgpu", &gpu)]);
        let lines: Vec<&str> = t.lines().skip(3).collect();
        assert_eq!(
            lines[0],
            "| op | cpu calls | cpu µs | cpu % | wgpu calls | wgpu µs | wgpu % |"
        );
        assert_eq!(lines[2], "| matmul/q4_1 | 30 | 4000.0 | 80.0 | — | — | — |");
        assert_eq!(lines[3], "| attention | 2 | 1000.0 | 20.0 | 1 | 500.0 | 50.0 |");
        assert_eq!(lines[4], "| matmul_vec/q4_1 | — | — | — | 10 | 500.0 | 50.0 |");
        assert_eq!(lines[5], "| total | 32 | 5000.0 | 100.0 | 11 | 1000.0 | 100.0 |");
        let j = json(&gpu);
        assert_eq!(j["tokens"], 2);
        assert_eq!(j["ops"][0]["op"], "attention");
        assert_eq!(j["ops"][0]["us_per_token"], 500.0);
        assert_eq!(j["ops"][0]["share"], 0.5);
    }
}
