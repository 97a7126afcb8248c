#!/usr/bin/env bash
# Configures and builds the project in build/ (Release), after installing
# what a fresh machine lacks. Usage: tools/build.sh [ninja targets...]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/.ci/install-deps.sh"
BUILD="${K3_BUILD_DIR:-$ROOT/build}"
if [ ! -f "$BUILD/build.ninja" ]; then
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DMLIR_DIR=/usr/lib/llvm-22/lib/cmake/mlir \
    -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-22/bin/lit \
    -DLLVM_PARALLEL_LINK_JOBS=1 \
    -DCMAKE_C_COMPILER=gcc -DCMAKE_CXX_COMPILER=g++ \
    -DK3_PYTHON="$ROOT/.venv/bin/python"
fi
ninja -C "$BUILD" "$@"
