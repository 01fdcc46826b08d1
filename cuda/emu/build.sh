#!/usr/bin/env bash
# Builds and runs the CUDA emulation's self-tests (test_emu.cpp), the way the engine's tests
# build the real kernels: the kernel half of test_emu.cpp, force-including emu.h, linked with
# emu.cpp into a shared library, which the host half loads with dlopen.
#
# Usage: cuda/emu/build.sh [build dir]      (default: target/cuda-emu; CXX overrides g++)
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-$root/target/cuda-emu}
cxx=${CXX:-g++}
mkdir -p "$out"
cd "$root"

warn=(-Wall -Wextra -Wno-unused-parameter)

# The library: one translation unit per kernel file, as for cuda/<op>.cu.
"$cxx" -std=c++17 -O2 -fPIC -shared -pthread "${warn[@]}" -include cuda/emu/emu.h \
    -x c++ cuda/emu/test_emu.cpp -x none cuda/emu/emu.cpp -o "$out/libminfer_emu_test.so"

# The host program.
"$cxx" -std=c++17 -O2 -pthread "${warn[@]}" -DMINFER_EMU_TEST_HOST cuda/emu/test_emu.cpp \
    -ldl -o "$out/test_emu"

"$out/test_emu" "$out/libminfer_emu_test.so"
