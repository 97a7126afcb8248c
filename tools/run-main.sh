#!/usr/bin/env bash
# The main job: compile the default model (examples/tiny_k3.mlir, a tiny
# Kimi-K3-shaped model) to an artifact and run it with k3-run: prefill a
# prompt, then greedy decoding. On the GPU where there is one, else the CPU.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${K3_BUILD_DIR:-$ROOT/build}"
MODEL="${1:-$ROOT/examples/tiny_k3.mlir}"
bash "$ROOT/tools/build.sh" k3-opt k3-run

DEVICE=cpu
TARGET=cpu
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q GPU; then
  DEVICE=cuda:0
  TARGET=cuda
fi
ART="$BUILD/$(basename "${MODEL%.mlir}")-$TARGET.k3bin"
echo "== compiling $MODEL for $TARGET"
"$BUILD/bin/k3-opt" "$MODEL" \
  --k3-compile="target=$TARGET output=$ART max-tokens=512 max-seqs=4 report=1" -o /dev/null
echo "== running on $DEVICE"
"$BUILD/bin/k3-run" "$ART" --device "$DEVICE" --random-weights 7 \
  --prompt "1,17,42,99,3,250,8,64,128,5" --max-new-tokens 32
