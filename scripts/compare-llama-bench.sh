#!/usr/bin/env bash
# Interleaved speed comparison against llama.cpp's llama-bench on the same machine:
#   scripts/compare-llama-bench.sh LLAMA_BENCH MODEL [ROUNDS] [THREADS]
# Runs pp512 and tg128 alternately with both tools and prints each round's t/s and the
# median ratio (ours / llama.cpp). Both tools report mean t/s over their own repetitions.
set -euo pipefail
lb=$1 model=$2 rounds=${3:-3} t=${4:-2}
root=$(cd "$(dirname "$0")/.." && pwd)
ours=$root/target/release/minfer-wgpu
[ -x "$ours" ] || (cd "$root" && cargo build --release -q)
py=$(command -v python3)
for test in "-p 512 -n 0" "-p 0 -n 128"; do
    r_ours=() r_ref=()
    for i in $(seq "$rounds"); do
        a=$("$ours" bench "$model" $test -r 3 -t "$t" --backend cpu --json 2>/dev/null \
            | "$py" -c 'import json,sys; print(json.load(sys.stdin)[0]["avg_ts"])')
        b=$("$lb" -m "$model" $test -r 3 -t "$t" -o json 2>/dev/null \
            | "$py" -c 'import json,sys; print(json.load(sys.stdin)[0]["avg_ts"])')
        r_ours+=("$a") r_ref+=("$b")
    done
    "$py" - "$test" "${r_ours[*]}" "${r_ref[*]}" <<'PY'
import statistics, sys
test, a, b = sys.argv[1], list(map(float, sys.argv[2].split())), list(map(float, sys.argv[3].split()))
ratios = [x / y for x, y in zip(a, b)]
print(f"{test:>12}: minfer {statistics.median(a):8.1f} t/s  llama.cpp {statistics.median(b):8.1f} t/s  "
      f"ratio median {statistics.median(ratios):.2f} (rounds: {', '.join(f'{r:.2f}' for r in ratios)})")
PY
done
