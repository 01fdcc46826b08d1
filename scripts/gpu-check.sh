#!/usr/bin/env bash
# The GPU checks, on a machine with a GPU: the GPU op and model tests (wgpu on the real
# adapter, CUDA on the device) and `bench` with the CPU, wgpu and CUDA side by side on both
# real models. Writes a summary and the raw outputs under $OUT (default ./gpu-check-out).
#
# The machine needs no Rust toolchain: build here first, then carry target/gpu-check/ (stripped
# binaries and the llama.cpp records of the real prompts, ~40 MB) there and run this script from
# the repository root. The real models (98, 253 and 491 MB) are over one transfer's size: carry
# them in pieces into models/ across calls (`split -b 60M`, then `cat` there), or go without —
# the op tests and the CUDA/wgpu op parity need no model.
#
#   scripts/gpu-check.sh build      # here: release binary + test binary (--features cuda)
#   scripts/gpu-check.sh            # there: run everything, write $OUT
set -uo pipefail
cd "$(dirname "$0")/.."
stage=target/gpu-check

if [ "${1:-}" = build ]; then
    set -e
    # Small enough to carry: no debug info, symbols stripped.
    export CARGO_PROFILE_RELEASE_DEBUG=0 CARGO_PROFILE_RELEASE_STRIP=symbols
    cargo build --release --features cuda
    suite=$(cargo test --release --features cuda --no-run --message-format=json 2>/dev/null \
        | python3 -c 'import json,sys
for l in sys.stdin:
    m=json.loads(l)
    if m.get("reason")=="compiler-artifact" and m["target"]["name"]=="suite" and m.get("executable"):
        print(m["executable"])')
    mkdir -p "$stage/ref"
    cp target/release/minfer-wgpu "$stage/"
    cp "$suite" "$stage/suite"
    ref=${MINFER_REF_DIR:-../shared/ref}
    # The records of the real prompts, and the random models the op-level tests open (the
    # 48-model sweep stays here: it is run with --skip below).
    cp -r "$ref/real" "$ref/random" "$stage/ref/" 2>/dev/null || true
    find "$stage/ref/random/gguf" -name '*.gguf' ! -name 'llama-Q4_0.gguf' ! -name 'llama-Q4_K_M.gguf' \
        ! -name 'gemma3-Q8_0.gguf' ! -name 'qwen2-Q5_0.gguf' -delete 2>/dev/null || true
    du -sh "$stage"/*
    exit 0
fi

out=${OUT:-$PWD/gpu-check-out}
mkdir -p "$out"
bin=$stage/minfer-wgpu
suite=$stage/suite
summary=$out/summary.md
: > "$summary"
say() { echo "$*" | tee -a "$summary"; }

# NVRTC from the CUDA toolkit (12: libnvrtc.so.12; 13: libnvrtc.so.13 plus an unversioned
# libnvrtc.so in its lib folder).
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda-*/lib64; do
    [ -d "$d" ] && export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
done
export MINFER_REF_DIR=${MINFER_REF_DIR:-$PWD/$stage/ref}
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp/xdg-runtime-$(id -u)}
mkdir -p "$XDG_RUNTIME_DIR" && chmod 700 "$XDG_RUNTIME_DIR"

say "# GPU check $(date -u +%FT%TZ)"
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 || true; } | sed 's/^/    /' | tee -a "$summary"
"$bin" info models/SmolLM2-135M-Instruct.Q4_1.gguf > "$out/info.txt" 2>&1
say '```'; grep -A4 -i "backends" "$out/info.txt" | tee -a "$summary"; say '```'

say "## tests"
"$suite" gpu:: --skip random_models --test-threads 1 > "$out/tests.txt" 2>&1
say "gpu tests: exit $? ($(grep -c '\.\.\. ok' "$out/tests.txt") ok, $(grep -c 'FAILED\|panicked' "$out/tests.txt") failed lines)"
grep -E "^test |NMSE|perplexity|top-1|tokens equal|tokens differ|greedy runs|summed" "$out/tests.txt" | tail -n 80 >> "$summary"

say "## bench"
for m in SmolLM2-135M-Instruct.Q4_1.gguf gemma-3-270m-Q4_K_M.gguf qwen2.5-coder-0.5b-instruct.gguf; do
    [ -f "models/$m" ] || { say "$m: not carried"; continue; }
    # --profile: per-op time per decode token, the backends side by side (after the table).
    # Depth 4096 on the GPUs only: the CPU's untimed 4,096-token prefills would take minutes.
    "$bin" bench "models/$m" --backend cpu,wgpu,cuda -p 512 -n 128 -r 3 --profile > "$out/bench-$m.md" 2> "$out/bench-$m.log"
    say "### $m, depth 0 (exit $?)"
    cat "$out/bench-$m.md" >> "$summary"
    "$bin" bench "models/$m" --backend wgpu,cuda -p 512 -n 128 -r 2 -d 4096 --profile > "$out/bench-d4096-$m.md" 2> "$out/bench-d4096-$m.log"
    say "### $m, depth 4096 (exit $?)"
    cat "$out/bench-d4096-$m.md" >> "$summary"
done

# What each switch is worth on this GPU: decode of the default model at depth 0 and 4096 with
# one of them turned off (the split-KV attention, PDL, graphs) or on (checked shaders).
say "## switches (SmolLM2, tg128)"
m=SmolLM2-135M-Instruct.Q4_1.gguf
if [ -f "models/$m" ]; then
    for sw in NONE=1 MINFER_SPLIT_ATTENTION=0 MINFER_CUDA_PDL=0 MINFER_CUDA_GRAPHS=0 MINFER_CHECKED_SHADERS=1 MINFER_INT8_MATMUL=0 MINFER_COOP_MATMUL=0; do
        env "$sw" "$bin" bench "models/$m" --backend wgpu,cuda -p 16 -n 128 -r 2 -d 0,4096 > "$out/switch-$sw.md" 2> "$out/switch-$sw.log"
        say "### $sw (exit $?)"
        grep "tg128" "$out/switch-$sw.md" >> "$summary"
    done
fi
echo "summary: $summary"
