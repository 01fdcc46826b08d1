#!/usr/bin/env python3
"""The closing tables of scripts/gpu-check.sh, from the raw outputs of its run in OUT_DIR:

1. per model, `plan`'s predicted decode time per op beside each backend's measured profile
   (`bench --profile`, tg at depth 0), µs per token, and likewise a prompt's step (pp at
   depth 0, one forward of its tokens), µs per step;
2. the last table: every test with minfer CUDA, minfer wgpu, llama.cpp CUDA and the ratios,
   plus plan's predicted t/s for the profile the run named.

usage: gpu-check-report.py OUT_DIR
"""
import glob
import json
import os
import re
import sys


def load(path):
    """A JSON document, or JSON lines; None where absent or cut off."""
    try:
        text = open(path).read()
    except OSError:
        return None
    try:
        return json.loads(text)
    except ValueError:
        rows = []
        for line in text.splitlines():
            try:
                rows.append(json.loads(line))
            except ValueError:
                pass
        return rows or None


def test_name(r):
    t = f"pp{r['n_prompt']}" if r["n_gen"] == 0 else f"tg{r['n_gen']}"
    return t + (f" @ d{r['n_depth']}" if r.get("n_depth") else "")


def fmt(v):
    return "—" if v is None else f"{v:,.1f}"


def ratio(a, b):
    return "—" if a is None or not b else f"{a / b:.2f}"


def llama_batched(path):
    """S_PP and S_TG per B from llama-batched-bench's markdown table."""
    out = {}
    try:
        lines = open(path).read().splitlines()
    except OSError:
        return out
    for line in lines:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 8 and all(re.fullmatch(r"[\d.]+", c) for c in cells[:8]):
            out[int(cells[2])] = (float(cells[5]), float(cells[7]))
    return out


def per_op_table(title, plan, measured):
    """`plan`'s predicted time per op beside each backend's `measured` {op: µs}, busiest first."""
    pred = {}
    for l in plan["launches"]:
        pred[l["op"]] = pred.get(l["op"], 0.0) + l["est_us"]
    ops = sorted(set(pred) | {o for p in measured.values() for o in p},
                 key=lambda o: -max([pred.get(o, 0)] + [p.get(o, 0) for p in measured.values()]))
    bs = [b for b in ("cuda", "wgpu") if b in measured]
    print(f"\n### {title} — plan ({plan['device']}) vs measured\n")
    print("| op | plan | " + " | ".join(bs) + " |")
    print("|---|---:|" + "---:|" * len(bs))
    for o in ops:
        print(f"| {o} | {fmt(pred.get(o))} | " + " | ".join(fmt(measured[b].get(o)) for b in bs) + " |")
    tot = [sum(measured[b].values()) for b in bs]
    print(f"| total | {fmt(plan['est_us_total'])} | " + " | ".join(fmt(t) for t in tot) + " |")


def main():
    out = sys.argv[1]
    names = sorted({re.sub(r"^bench-[a-z]+-", "", os.path.basename(p))[:-5]
                    for p in glob.glob(f"{out}/bench-*.json")})
    rows = []  # (test, plan, cuda, wgpu, llama)
    for name in names:
        bench = {b: load(f"{out}/bench-{b}-{name}.json") or [] for b in ("cuda", "wgpu")}
        llama = load(f"{out}/llama-bench-{name}.json") or []
        plan1 = load(f"{out}/plan-{name}-1.json")
        profiles = {}
        # 1. predicted per op beside measured.
        for b, recs in bench.items():
            for r in recs:
                if r["n_gen"] > 0 and not r.get("n_depth") and r.get("profile"):
                    profiles[b] = {o["op"]: o["us_per_token"] for o in r["profile"]["ops"]}
        if plan1 and profiles:
            per_op_table(f"{name}: decode per op, µs per token", plan1, profiles)
        # 1b. a prompt's step per op (pp at depth 0) beside plan's prediction for a step of that
        # many tokens: where the prefill tiles' model (their L1 term) meets the device.
        steps, n_pp = {}, None
        for b, recs in bench.items():
            for r in recs:
                if r["n_prompt"] > 0 and not r.get("n_depth") and (r.get("profile") or {}).get("steps"):
                    steps[b] = {o["op"]: o["us_per_step"] for o in r["profile"]["ops"]}
                    n_pp = r["n_prompt"]
        plan_pp = load(f"{out}/plan-{name}-{n_pp}.json") if n_pp else None
        if plan_pp and steps:
            per_op_table(f"{name}: a {n_pp}-token prompt step per op, µs", plan_pp, steps)
        # 2. rows of the last table.
        tests = []
        for recs in list(bench.values()) + [llama]:
            for r in recs:
                if test_name(r) not in tests:
                    tests.append(test_name(r))
        for t in tests:
            pick = lambda recs: next((r["avg_ts"] for r in recs if test_name(r) == t), None)
            plan = None
            if t.startswith("tg") and "@" not in t and plan1:
                plan = plan1["est_tokens_per_s"]
            planp = load(f"{out}/plan-{name}-{t[2:]}.json") if t.startswith("pp") and "@" not in t else None
            if planp:
                plan = planp["est_tokens_per_s"]
            rows.append((f"{name} {t}", plan, pick(bench["cuda"]), pick(bench["wgpu"]), pick(llama)))
        ours = {b: load(f"{out}/batched-{b}-{name}.json") or [] for b in ("cuda", "wgpu")}
        theirs = llama_batched(f"{out}/llama-batched-{name}.md")
        pls = sorted({r["pl"] for v in ours.values() for r in v} | set(theirs))
        for pl in pls:
            for key, i in (("speed_tg", 1), ("speed_pp", 0)):
                got = {b: next((r[key] for r in v if r["pl"] == pl), None) for b, v in ours.items()}
                label = "S_TG" if key == "speed_tg" else "S_PP"
                rows.append((f"{name} npl {pl} {label}", None, got["cuda"], got["wgpu"],
                             theirs.get(pl, (None, None))[i]))
    # 3. wgpu's prefill with and without cooperative matrices, where the run has both.
    coop = []
    for name in names:
        off = load(f"{out}/nocoop-wgpu-{name}.json") or []
        on = load(f"{out}/bench-wgpu-{name}.json") or []
        for r in off:
            t = test_name(r)
            o = next((x for x in on if test_name(x) == t), None)
            if o:
                coop.append((f"{name} {t}", o["avg_ts"], r["avg_ts"], o.get("backend_desc", "")))
    if coop:
        print("\n## wgpu prefill with and without cooperative matrices (t/s)\n")
        print("| test | default | MINFER_COOP_MATMUL=0 | ratio | device |")
        print("|---|---:|---:|---:|---|")
        for t, a, b, desc in coop:
            print(f"| {t} | {fmt(a)} | {fmt(b)} | {ratio(a, b)} | {desc} |")
    print("\n## minfer-wgpu vs llama.cpp CUDA (t/s; plan: predicted for the profile)\n")
    print("| test | plan | minfer CUDA | minfer wgpu | llama.cpp CUDA | CUDA / llama.cpp | wgpu / llama.cpp |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for t, plan, c, w, l in rows:
        print(f"| {t} | {fmt(plan)} | {fmt(c)} | {fmt(w)} | {fmt(l)} | {ratio(c, l)} | {ratio(w, l)} |")


if __name__ == "__main__":
    main()
