//! `bench --profile`: the profile of each test's timed steps (`Session::decode_profile`, and
//! `Session::batch_profile` for a prompt's) of every backend side by side, one table per test:
//! per op kind, launches (CPU: calls) and µs per token (a decode test) or per step (a prompt's
//! forward of up to 512 tokens), and share of the time, markdown after bench's table, or each
//! record's `profile` field in JSON. Op kinds are each backend's own (a GPU's fused launches
//! are one row).

use std::collections::BTreeMap;
use std::fmt::Write;

use serde_json::{json, Value};

use minfer::backend::OpProfile;

/// (calls, µs, share in %) of each op per step (a decode step: per token).
fn per_step(p: &OpProfile) -> BTreeMap<&str, (f64, f64, f64)> {
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

/// The `profile` field of a record: its steps and tokens, and its ops, busiest first, per token
/// and per step (the same for a decode test).
pub fn json(p: &OpProfile) -> Value {
    let rows = per_step(p);
    let (f, t) = (p.forwards.max(1) as f64, p.tokens.max(1) as f64);
    let ops: Vec<Value> = p
        .ops
        .iter()
        .map(|o| {
            let (calls, us, share) = rows[o.op.as_str()];
            json!({
                "op": o.op,
                "calls_per_token": o.calls as f64 / t,
                "us_per_token": o.ns / 1e3 / t,
                "calls_per_step": calls,
                "us_per_step": us,
                "share": share / 100.0,
            })
        })
        .collect();
    json!({
        "steps": p.forwards,
        "tokens": p.tokens,
        "us_per_token": p.total_ns() / 1e3 / t,
        "us_per_step": p.total_ns() / 1e3 / f,
        "ops": ops,
    })
}

/// One markdown table of `test` (`tg128 @ d1024`) with a column group per backend; rows
/// ordered by the most time any backend spends in them, then a total row.
pub fn markdown(test: &str, cols: &[(&str, &OpProfile)]) -> String {
    let rows: Vec<BTreeMap<&str, (f64, f64, f64)>> = cols.iter().map(|(_, p)| per_step(p)).collect();
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
    // Per token for decode steps; per step for a prompt's (tokens a step, rounded).
    let per = match cols.first().map(|(_, p)| (p.tokens, p.forwards)) {
        Some((t, f)) if t > f => format!("per step of {} tokens", t.div_ceil(f.max(1))),
        _ => "per token".to_string(),
    };
    let what = if per == "per token" { "decode" } else { "prompt" };
    let mut s = format!("\n{what} profile, {test}, {per}:\n\n| op |");
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
        OpProfile::new(forwards, forwards, ops.iter().map(|&(o, c, ns)| (o.to_string(), c, ns)))
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

    /// A prompt's steps: per step of its tokens in the table, per step and per token in JSON.
    #[test]
    fn prompt_steps_per_step_and_per_token() {
        let ops = [("matmul/q4_K", 14, 6e6), ("attention", 4, 2e6)];
        let p = OpProfile::new(2, 1024, ops.iter().map(|&(o, c, ns)| (o.to_string(), c, ns)));
        let t = markdown("pp512", &[("cuda", &p)]);
        assert!(t.contains("prompt profile, pp512, per step of 512 tokens:"), "{t}");
        assert!(t.contains("| matmul/q4_K | 7 | 3000.0 | 75.0 |"), "{t}");
        let j = json(&p);
        assert_eq!((j["steps"].as_u64(), j["tokens"].as_u64()), (Some(2), Some(1024)));
        assert_eq!(j["us_per_step"], 4000.0);
        assert_eq!(j["ops"][0]["us_per_step"], 3000.0);
        assert_eq!(j["ops"][0]["us_per_token"], 6e6 / 1e3 / 1024.0);
        assert_eq!(j["ops"][1]["calls_per_step"], 2.0);
    }

    /// Two runs' profiles merge op by op, steps and tokens added.
    #[test]
    fn profiles_merge_op_by_op() {
        let mut a = OpProfile::new(1, 512, [("attention".to_string(), 2, 1e6)]);
        let b = OpProfile::new(
            1,
            512,
            [("attention".to_string(), 2, 3e6), ("rope".to_string(), 4, 5e6)],
        );
        a.merge(&b);
        assert_eq!((a.forwards, a.tokens), (2, 1024));
        let got: Vec<(&str, u64, f64)> = a.ops.iter().map(|o| (o.op.as_str(), o.calls, o.ns)).collect();
        assert_eq!(got, [("rope", 4, 5e6), ("attention", 4, 4e6)]);
    }
}
