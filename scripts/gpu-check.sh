#!/usr/bin/env bash
# The GPU measuring kit: one run on a machine with a GPU (no Rust toolchain, no network needed
# there) that checks and times everything, and puts llama.cpp CUDA beside it where the CUDA
# toolkit is present.
#
#   scripts/gpu-check.sh build      # here: the kit in target/gpu-check/kit (≤ 60 MiB), and the
#                                   # default model in parts (target/gpu-check/model-1, -2)
#   scripts/gpu-check.sh run        # there, from the repository root: everything below, ~7 min
#   scripts/gpu-check.sh rehearse   # here: build, then run on llvmpipe with small models
#
# Carry target/gpu-check/kit (and, for the real-model tests, each target/gpu-check/model-N:
# the default model, compressed and split to fit a transfer) to the GPU machine beside this
# checkout. `run` then:
#   1. starts llama.cpp's CUDA build in the background (where nvcc is; from the source archive
#      the kit holds, see ../shared/tools/gpu/pack-llama-src.sh);
#   2. makes the 7B-shaped random models (scripts/make-random-gguf.py, fixed seed: Llama-2-7B
#      q4_0 and q4_k_m, Llama-3-8B q4_k_m);
#   3. runs the whole `gpu::` test suite on the device, the tests ignored on software adapters
#      included (the 48-model CPU sweep excepted);
#   4. benches CUDA and wgpu: pp512/tg128 at depth 0 and 4096 with the per-op decode profile,
#      and batched decode at 1, 8, 16, 32 and 64 sequences (the matvec, then the tensor-core
#      tiles narrow and split along k);
#   5. prints `plan`'s predicted time per op beside the profile's measured one, and wgpu's
#      prefill with and without cooperative matrices;
#   6. runs llama-bench and llama-batched-bench on the same files once their build is done.
# The last lines printed are one table (test, minfer CUDA, minfer wgpu, llama.cpp, ratios);
# every step is timed in the summary, and $OUT (default ./gpu-check-out) is packed into
# gpu-check-out.tar.gz beside it.
#
# Knobs (the rehearsal sets them): KIT_LAYERS (model layers, default the full 32), KIT_PP,
# KIT_TG, KIT_DEPTH (512, 128, 4096), KIT_NPL (1,8,16,32,64), KIT_REPS (3), KIT_BACKENDS (cuda,wgpu),
# KIT_LLAMA_WAIT (seconds to wait for llama.cpp's build after ours, 150), KIT_STEP_LIMIT
# (seconds any one step may take, 240), MODELS7B (where the random models go, /tmp/minfer-7b),
# KIT_DEVICE (plan's profile; default the one nvidia-smi's name matches, else h200), KIT_CUDA_ARCH (llama.cpp's CUDA architectures, 90),
# KIT_IGNORED (1: the tests ignored on software adapters run too; the rehearsal's 0).
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
top=target/gpu-check
kit=$top/kit
# One transfer's worth, with room for the checkout that travels beside it.
KIT_MAX=$((60 << 20))
default_model=SmolLM2-135M-Instruct.Q4_1.gguf

die() { echo "gpu-check: $*" >&2; exit 1; }

# The random reference models and records the `gpu::` tests open (the 48-model sweep,
# `random_models_match_cpu`, is skipped on the GPU machine: it checks the CPU's dequantization
# against transformers and runs in CI).
REF_FILES=(
    random/gguf/llama-f32.gguf random/gguf/qwen2-f32.gguf random/gguf/qwen3-f32.gguf
    random/gguf/gemma3-f32.gguf random/gguf/ministral3-f32.gguf
    random/gguf/llama-Q4_0.gguf random/gguf/llama-Q4_1.gguf random/gguf/llama-Q4_K_M.gguf
    random/gguf/gemma3-Q8_0.gguf random/gguf/gemma3-Q4_K_M.gguf random/gguf/qwen2-Q5_0.gguf
    random/gguf/gpt-oss-MXFP4_MOE.gguf
    random/refs random/MANIFEST.json real
)

build() {
    set -e
    local ref=${MINFER_REF_DIR:-$root/../shared/ref}
    [ -d "$ref" ] || die "no reference tree at $ref (set MINFER_REF_DIR)"
    echo "== building the release binary and the test suite (--features cuda)"
    # One build: the suite's build makes the binary too (and `cargo build` alone would resolve
    # the dependencies' features apart from the tests' and compile them twice).
    local suite
    suite=$(cargo test --release --features cuda --no-run --message-format=json 2>/dev/null |
        python3 -c 'import json,sys
for l in sys.stdin:
    m=json.loads(l)
    if m.get("reason")=="compiler-artifact" and m["target"]["name"]=="suite" and m.get("executable"):
        print(m["executable"])')
    [ -x "$suite" ] || die "no suite binary"
    rm -rf "$top" && mkdir -p "$kit"
    # Symbols and debug info stripped: a fifth of the size.
    strip -o "$top/minfer-wgpu" target/release/minfer-wgpu
    strip -o "$top/suite" "$suite"
    xz -T0 -6 -c "$top/minfer-wgpu" > "$kit/minfer-wgpu.xz"
    xz -T0 -6 -c "$top/suite" > "$kit/suite.xz"
    rm "$top/minfer-wgpu" "$top/suite"
    local missing=()
    for f in "${REF_FILES[@]}"; do [ -e "$ref/$f" ] || missing+=("$f"); done
    [ ${#missing[@]} -eq 0 ] || die "missing from $ref: ${missing[*]}"
    tar cf - -C "$ref" "${REF_FILES[@]}" | xz -T0 -6 > "$kit/ref.tar.xz"
    # llama.cpp at the references' commit (vendored in llama-cpp-python 0.3.36's sdist on PyPI),
    # the source a CUDA build needs (~4 MB).
    local sdist=${LLAMA_SDIST_DIR:-$root/target/llama-sdist} pack=../shared/tools/gpu/pack-llama-src.sh
    mkdir -p "$sdist"
    [ -f "$sdist/llama_cpp_python-0.3.36.tar.gz" ] || python3 - "$sdist" <<'PY' || true
import re, sys, urllib.request
index = "https://pypi.org/simple/llama-cpp-python/"
links = re.findall(r'href="([^"]+)"', urllib.request.urlopen(index).read().decode())
url = next(l for l in links if "llama_cpp_python-0.3.36.tar.gz" in l).replace("&amp;", "&")
urllib.request.urlretrieve(url, sys.argv[1] + "/llama_cpp_python-0.3.36.tar.gz")
PY
    if [ -f "$pack" ] && bash "$pack" "$kit/llama-src.tar.xz" "$sdist" > "$top/pack-llama.log" 2>&1 &&
        grep -q "(expected $(grep -o 'sha256 [0-9a-f]*' "$top/pack-llama.log" | cut -d' ' -f2))" "$top/pack-llama.log"; then
        echo "llama.cpp source: $(du -h "$kit/llama-src.tar.xz" | cut -f1)"
    else
        rm -f "$kit/llama-src.tar.xz"
        echo "gpu-check: no llama.cpp source archive ($pack failed, $top/pack-llama.log): the run goes without llama.cpp"
    fi
    # The default model for the real-model tests, compressed and cut to fit transfers: from
    # where scripts/fetch-models puts it (else this checkout's models/).
    local mdir=${MINFER_MODELS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/minfer/models}
    [ -f "$mdir/$default_model" ] || mdir=models
    if [ -f "$mdir/$default_model" ]; then
        xz -T0 -6 -c "$mdir/$default_model" | split -b 50M -d -a 1 - "$top/$default_model.xz.part"
        local i=1
        for p in "$top/$default_model".xz.part*; do
            mkdir -p "$top/model-$i" && mv "$p" "$top/model-$i/"
            i=$((i + 1))
        done
        (cd "$mdir" && sha256sum "$default_model") > "$kit/models.sha256"
    else
        echo "gpu-check: $mdir/$default_model absent (scripts/fetch-models): the real-model tests will be ignored there"
    fi
    (cd "$kit" && sha256sum -- * > SHA256SUMS)
    local size
    size=$(du -cb "$kit" | tail -1 | cut -f1)
    du -h "$kit"/* "$top"/model-*/* 2>/dev/null
    echo "kit: $((size >> 20)) MiB of at most $((KIT_MAX >> 20)) MiB"
    [ "$size" -le "$KIT_MAX" ] || die "the kit is over $((KIT_MAX >> 20)) MiB"
}

run() {
    # A failing step is reported and the run goes on (build's `set -e` ends with it).
    set +e
    local out=${OUT:-$root/gpu-check-out}
    rm -rf "$out" && mkdir -p "$out"
    local summary=$out/summary.md
    : > "$summary"
    say() { echo "$*" | tee -a "$summary"; }
    local t_start=$SECONDS
    local steps=()
    # step NAME CMD...: runs CMD with the step limit, logs its time and exit status.
    step() {
        local name=$1 t0=$SECONDS rc
        shift
        timeout "${KIT_STEP_LIMIT:-240}" "$@"
        rc=$?
        steps+=("| $name | $((SECONDS - t0)) s | $rc |")
        return $rc
    }
    local layers=${KIT_LAYERS:-32} pp=${KIT_PP:-512} tg=${KIT_TG:-128} depth=${KIT_DEPTH:-4096}
    local npl=${KIT_NPL:-1,8,16,32,64} reps=${KIT_REPS:-3} backends=${KIT_BACKENDS:-cuda,wgpu}
    local m7=${MODELS7B:-/tmp/minfer-7b}
    local bin=$top/run/minfer-wgpu suite=$top/run/suite

    [ -d "$kit" ] || die "no kit at $kit (scripts/gpu-check.sh build, then carry it here)"
    (cd "$kit" && sha256sum -c --quiet SHA256SUMS) || die "the kit is damaged (sha256)"
    mkdir -p "$top/run/ref" models "$m7"
    xz -dc "$kit/minfer-wgpu.xz" > "$bin" && xz -dc "$kit/suite.xz" > "$suite" && chmod +x "$bin" "$suite"
    xz -dc "$kit/ref.tar.xz" | tar xf - -C "$top/run/ref"
    # The suite's tests that start the binary run this one, and find the models here.
    export MINFER_BIN=$root/$bin MINFER_MODELS_DIR=$root/models

    # NVRTC from the CUDA toolkit (12: libnvrtc.so.12; 13: libnvrtc.so.13 and libnvrtc.so).
    for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda-*/lib64; do
        [ -d "$d" ] && export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    done
    export MINFER_REF_DIR=$root/$top/run/ref
    export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp/xdg-runtime-$(id -u)}
    mkdir -p "$XDG_RUNTIME_DIR" && chmod 700 "$XDG_RUNTIME_DIR"

    say "# GPU check $(date -u +%FT%TZ)"
    if command -v nvidia-smi >/dev/null; then
        nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1
    else
        echo "no nvidia-smi"
    fi | sed 's/^/    /' | tee -a "$summary"
    # plan's profile: the one the card's name matches (an H100 PCIe or NVL has none of its own).
    local device=${KIT_DEVICE:-}
    if [ -z "$device" ]; then
        local gpu
        gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | tr 'A-Z' 'a-z' | tr -d ' ')
        case "$gpu" in
            *h200*) device=h200 ;;
            *h100*pcie* | *h100*nvl*) device=h200 ;;
            *h100*) device=h100 ;;
            *a100*) device=a100 ;;
            *rtx4090*) device=rtx4090 ;;
            *) device=h200 ;;
        esac
        say "plan's device profile: $device (for ${gpu:-no NVIDIA GPU}; KIT_DEVICE sets another)"
    fi

    # 1. llama.cpp's build, in the background, first: it takes longest (~6.5 min on 16 cores).
    local llama_pid=""
    export PATH=/usr/local/cuda/bin:$PATH
    if command -v nvcc >/dev/null && [ -f "$kit/llama-src.tar.xz" ]; then
        (
            w=$root/target/llama-cuda
            mkdir -p "$w"
            if [ ! -x "$w/llama.cpp/build/bin/llama-bench" ]; then
                rm -rf "$w/llama.cpp" && tar xJf "$kit/llama-src.tar.xz" -C "$w" && cd "$w/llama.cpp" &&
                    cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
                        -DCMAKE_CUDA_COMPILER="$(command -v nvcc)" -DCMAKE_CUDA_ARCHITECTURES="${KIT_CUDA_ARCH:-90}" \
                        -DGGML_NATIVE=ON -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
                        -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
                        -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_NUMBER=0 -DLLAMA_BUILD_COMMIT=0c1e57098 &&
                    nice cmake --build build -j "$(nproc)" --target llama-bench llama-batched-bench
            fi
        ) > "$out/llama-build.log" 2>&1 &
        llama_pid=$!
        say "llama.cpp CUDA: building in the background (log llama-build.log)"
    else
        say "llama.cpp CUDA: not built here ($(command -v nvcc >/dev/null && echo "no source archive in the kit" || echo "no nvcc"))"
    fi

    # The default model from its parts, where they were carried.
    if [ -f "$kit/models.sha256" ] && [ ! -f "models/$default_model" ] && ls "$top"/model-*/"$default_model".xz.part* >/dev/null 2>&1; then
        cat "$top"/model-*/"$default_model".xz.part* | xz -dc > "models/$default_model.tmp" && mv "models/$default_model.tmp" "models/$default_model"
    fi
    if [ -f "$kit/models.sha256" ] && [ -f "models/$default_model" ]; then
        (cd models && sha256sum -c --quiet "$root/$kit/models.sha256") && say "$default_model: joined, sha256 ok" ||
            { say "$default_model: sha256 mismatch, removed"; rm -f "models/$default_model"; }
    else
        say "$default_model: not carried (the real-model tests will be ignored)"
    fi

    # 2. The 7B-shaped models, in the background while the tests run.
    local shapes=("llama2-7b q4_0" "llama2-7b q4_k_m" "llama3-8b q4_k_m")
    local makers=()
    for s in "${shapes[@]}"; do
        set -- $s
        local f=$m7/$1-$2-${layers}l.gguf
        [ -f "$f" ] && continue
        python3 scripts/make-random-gguf.py "$f.tmp" "$2" --shape "$1" --layers "$layers" > "$out/make-$1-$2.log" 2>&1 &&
            mv "$f.tmp" "$f" &
        makers+=($!)
    done

    # 3. The GPU tests, on the device.
    say "## tests"
    # With the tests ignored for their minutes on a software adapter (KIT_IGNORED=0: without,
    # as the rehearsal on one runs): a real one runs them.
    local ignored=--include-ignored
    [ "${KIT_IGNORED:-1}" = 1 ] || ignored=
    step "gpu:: tests" "$suite" gpu:: $ignored --skip random_models --test-threads 1 > "$out/tests.txt" 2>&1
    local rc=$?
    say "gpu:: tests: exit $rc; $(grep '^test result' "$out/tests.txt" | tail -1)"
    # Every test not passed, with its reason (a skip says why on its line).
    grep -E '^test .*\.\.\. (FAILED|ignored|skipped)' "$out/tests.txt" | cut -c1-200 | sed 's/^/    /' | tee -a "$summary"

    local t0=$SECONDS
    for p in "${makers[@]}"; do wait "$p"; done
    steps+=("| 7B models (after the tests) | $((SECONDS - t0)) s | 0 |")
    ls -la "$m7" >> "$out/models.txt"

    # 4. bench, each backend on its own (one failing takes nothing else with it).
    say "## bench"
    local b m name
    for m in "$m7"/*.gguf; do
        name=$(basename "$m" .gguf)
        for b in ${backends//,/ }; do
            step "bench $b $name" "$bin" bench "$m" --backend "$b" -p "$pp" -n "$tg" -r "$reps" -d "0,$depth" \
                --profile --json > "$out/bench-$b-$name.json" 2> "$out/bench-$b-$name.log"
            say "bench $b $name: exit $?"
        done
        for n in 1 "$pp"; do
            "$bin" plan "$m" --tokens "$n" --device "$device" --backend "${backends%%,*}" --json \
                > "$out/plan-$name-$n.json" 2> "$out/plan-$name-$n.log"
        done
    done
    # Batched decode (llama-batched-bench's S_TG) on the Llama-2-7B q4_k_m shape.
    for m in "$m7"/llama2-7b-q4_k_m*.gguf; do
        name=$(basename "$m" .gguf)
        for b in ${backends//,/ }; do
            step "batched $b $name" "$bin" bench "$m" --backend "$b" --npp "$pp" --ntg "$tg" --npl "$npl" --json \
                > "$out/batched-$b-$name.json" 2> "$out/batched-$b-$name.log"
            say "batched $b $name: exit $?"
        done
    done

    # wgpu's prefill without cooperative matrices (MINFER_COOP_MATMUL=0 keeps the int8 matmul
    # tiles and the f32 attention tiles), beside the default run's, at depth 0 and the kit's
    # depth: what the f16 tiles bring, on the Llama-2-7B q4_k_m shape.
    if [[ ",$backends," == *",wgpu,"* ]]; then
        for m in "$m7"/llama2-7b-q4_k_m*.gguf; do
            name=$(basename "$m" .gguf)
            step "wgpu without cooperative matrices $name" env MINFER_COOP_MATMUL=0 "$bin" bench "$m" --backend wgpu \
                -p "$pp" -n 0 -r "$reps" -d "0,$depth" --json > "$out/nocoop-wgpu-$name.json" 2> "$out/nocoop-wgpu-$name.log"
            say "wgpu without cooperative matrices $name: exit $?"
        done
    fi

    # 6. llama.cpp on the same files.
    if [ -n "$llama_pid" ]; then
        t0=$SECONDS
        local waited=0
        while kill -0 "$llama_pid" 2>/dev/null && [ $waited -lt "${KIT_LLAMA_WAIT:-150}" ]; do
            sleep 5
            waited=$((waited + 5))
        done
        steps+=("| waiting for llama.cpp's build | $((SECONDS - t0)) s | - |")
        local lb=$root/target/llama-cuda/llama.cpp/build/bin
        if [ -x "$lb/llama-bench" ]; then
            for m in "$m7"/*.gguf; do
                name=$(basename "$m" .gguf)
                step "llama-bench $name" "$lb/llama-bench" -m "$m" -ngl 99 -fa 1 -p "$pp" -n "$tg" -r "$reps" -d "0,$depth" -o json \
                    > "$out/llama-bench-$name.json" 2> "$out/llama-bench-$name.log"
            done
            for m in "$m7"/llama2-7b-q4_k_m*.gguf; do
                name=$(basename "$m" .gguf)
                step "llama-batched-bench $name" "$lb/llama-batched-bench" -m "$m" -ngl 99 -fa on -c $(((pp + tg) * 65)) \
                    -npp "$pp" -ntg "$tg" -npl "$npl" > "$out/llama-batched-$name.md" 2> "$out/llama-batched-$name.log"
            done
        else
            say "llama.cpp: not built within the wait (tail of its log below); rerun to add its rows"
            tail -5 "$out/llama-build.log" | sed 's/^/    /' | tee -a "$summary"
        fi
    fi

    # 5 and the table.
    say "## steps"
    say "| step | time | exit |"
    say "|---|---:|---:|"
    for s in "${steps[@]}"; do say "$s"; done
    say "| whole run | $((SECONDS - t_start)) s | |"
    python3 scripts/gpu-check-report.py "$out" | tee -a "$summary"
    tar czf "$root/gpu-check-out.tar.gz" -C "$(dirname "$out")" "$(basename "$out")"
    echo "raw outputs: $root/gpu-check-out.tar.gz; summary: $summary"
}

rehearse() {
    # The whole kit on this machine: wgpu on llvmpipe, no CUDA device, no llama.cpp, 2-layer
    # models and short tests.
    build
    local d
    d=$(mktemp -d)
    KIT_LAYERS=${KIT_LAYERS:-2} KIT_PP=${KIT_PP:-32} KIT_TG=${KIT_TG:-8} KIT_DEPTH=${KIT_DEPTH:-64} \
        KIT_NPL=${KIT_NPL:-1,4} KIT_REPS=${KIT_REPS:-1} KIT_BACKENDS=${KIT_BACKENDS:-wgpu} KIT_STEP_LIMIT=${KIT_STEP_LIMIT:-2400} \
        KIT_IGNORED=${KIT_IGNORED:-0} MINFER_WGPU_ALLOW_CPU=1 MODELS7B=$d OUT=${OUT:-$root/gpu-check-out} run
    rm -rf "$d"
}

case "${1:-run}" in
    build) build ;;
    run) run ;;
    rehearse) rehearse ;;
    *) die "$1: build, run or rehearse" ;;
esac
