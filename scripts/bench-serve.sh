#!/usr/bin/env bash
# Aggregate generation throughput and time to first token of `minfer-wgpu serve` against
# llama-server on the same model, same machine, same threads, one after the other.
#
# usage: scripts/bench-serve.sh MODEL.gguf [LLAMA_BIN_DIR]
#   LLAMA_BIN_DIR: where llama-server is (../shared/tools/build-llama-cpp.sh builds it);
#                  without it only our server is measured.
# env:   THREADS (2), CLIENTS (1,4,8), PARALLEL (8), CTX (4096), REQS (4 per client),
#        MAX_TOKENS (64), MINFER (target/release/minfer-wgpu), BACKEND (cpu)
#
# Both servers get PARALLEL sequences and a CTX-token context; llama-server splits CTX across
# its slots (CTX/PARALLEL each), ours shares it, so CTX is chosen large enough for either.
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:?usage: scripts/bench-serve.sh MODEL.gguf [LLAMA_BIN_DIR]}
LLAMA=${2:-}
THREADS=${THREADS:-2}
CLIENTS=${CLIENTS:-1,4,8}
PARALLEL=${PARALLEL:-8}
CTX=${CTX:-4096}
REQS=${REQS:-4}
MAX_TOKENS=${MAX_TOKENS:-64}
MINFER=${MINFER:-target/release/minfer-wgpu}
BACKEND=${BACKEND:-cpu}
PORT=${PORT:-18431}

pid=""
stop() { if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; pid=""; fi; }
trap stop EXIT

wait_ready() {
    for _ in $(seq 1 600); do
        if curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1; then return 0; fi
        sleep 0.2
    done
    echo "server on $PORT did not become ready" >&2
    return 1
}

measure() {
    python3 scripts/bench_serve.py "http://127.0.0.1:$PORT/v1" --clients "$CLIENTS" \
        --requests-per-client "$REQS" --max-tokens "$MAX_TOKENS" --json
}

out=$(mktemp -d)
echo "== minfer-wgpu serve --parallel $PARALLEL -c $CTX -t $THREADS --backend $BACKEND" >&2
"$MINFER" serve "$MODEL" --port "$PORT" --parallel "$PARALLEL" -c "$CTX" -t "$THREADS" --backend "$BACKEND" \
    2>"$out/minfer.log" &
pid=$!
wait_ready
measure | tee "$out/minfer.jsonl" >&2
stop

if [ -n "$LLAMA" ]; then
    echo "== llama-server -np $PARALLEL -c $CTX -t $THREADS" >&2
    LD_LIBRARY_PATH="$LLAMA${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$LLAMA/llama-server" -m "$MODEL" \
        --port "$PORT" -np "$PARALLEL" -c "$CTX" -t "$THREADS" -tb "$THREADS" --no-webui \
        >"$out/llama.log" 2>&1 &
    pid=$!
    wait_ready
    measure | tee "$out/llama.jsonl" >&2
    stop
fi

python3 - "$out" <<'PY'
import json, os, sys
d = sys.argv[1]
rows = lambda f: [json.loads(l) for l in open(os.path.join(d, f))] if os.path.exists(os.path.join(d, f)) else []
ours, theirs = rows("minfer.jsonl"), rows("llama.jsonl")
print("| clients | minfer tok/s | minfer TTFT median ms | llama-server tok/s | llama-server TTFT median ms | ratio |")
print("|---|---|---|---|---|---|")
for i, o in enumerate(ours):
    t = theirs[i] if i < len(theirs) else None
    tl = f"{t['tok_s']:.2f} | {t['ttft_median_ms']:.0f}" if t else "- | -"
    ratio = f"{o['tok_s'] / t['tok_s']:.2f}x" if t else "-"
    print(f"| {o['clients']} | {o['tok_s']:.2f} | {o['ttft_median_ms']:.0f} | {tl} | {ratio} |")
PY
