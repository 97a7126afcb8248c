#!/usr/bin/env bash
# Every test: lit/FileCheck, GoogleTest, the float64 oracle, end-to-end
# numerics of compiled models against it; then the runtime's parsers under
# libFuzzer (bounded) and the runtime's tests under ASan+UBSan.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${K3_BUILD_DIR:-$ROOT/build}"
start=$(date +%s)
bash "$ROOT/tools/build.sh"
echo "== main build: ctest"
ctest --test-dir "$BUILD" --output-on-failure -j2

echo "== runtime under AddressSanitizer + UndefinedBehaviorSanitizer"
if [ ! -f "$ROOT/build-san/build.ninja" ]; then
  cmake -S "$ROOT" -B "$ROOT/build-san" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DK3_BUILD_COMPILER=OFF -DK3_ENABLE_SANITIZERS=ON
fi
ninja -C "$ROOT/build-san"
ctest --test-dir "$ROOT/build-san" --output-on-failure -j2

echo "== parsers under libFuzzer (bounded runs)"
if [ ! -f "$ROOT/build-fuzz/build.ninja" ]; then
  CC=/usr/lib/llvm-22/bin/clang CXX=/usr/lib/llvm-22/bin/clang++ \
  cmake -S "$ROOT" -B "$ROOT/build-fuzz" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DK3_BUILD_COMPILER=OFF -DK3_ENABLE_FUZZERS=ON
fi
ninja -C "$ROOT/build-fuzz"
ctest --test-dir "$ROOT/build-fuzz" --output-on-failure -R fuzz

echo "== model configs mutated through k3-import and k3-opt (docs/import.md)"
"$ROOT/.venv/bin/python" "$ROOT/tools/k3-import/fuzz_configs.py" --k3-bin "$BUILD/bin" \
  --iterations 2000 --seed 1 --compile --keep "$BUILD/fuzz-configs-failures"

echo "== artifacts mutated, re-sealed and run (docs/runtime.md)"
"$ROOT/.venv/bin/python" "$ROOT/runtime/fuzz/run_mutated_artifacts.py" --k3-bin "$BUILD/bin" \
  --iterations 300 --seed 1 --skip-sections BLOB
"$ROOT/.venv/bin/python" "$ROOT/runtime/fuzz/run_mutated_artifacts.py" --k3-bin "$BUILD/bin" \
  --iterations 300 --seed 1 --skip-sections BLOB --seed-model mxfp4-tp2

echo "== all tests passed in $(( $(date +%s) - start )) s"
