#!/usr/bin/env bash
# One call on the GPU machine: correctness first, then timing.
#   1. builds FlashKDA in .anchors/flashkda (in the background, ~2 min),
#   2. the bf16 KDA kernels against the f64 oracle (bench/gpu_kda_check.py),
#      the default model against it (bench/gpu_e2e.py, with out/gpu),
#   3. compute-sanitizer memcheck + racecheck on the tensor-core kernel
#      (bf16 check case K3_SANITIZER_CASE, default 17: varlen),
#   4. bench/kda_forward.py run: ours beside fla and FlashKDA, same inputs.
# Prepare here with bench/prepare_gpu.sh; carry: .anchors out/kda_check
# out/bench out/gpu build/bin/k3-run (see docs/benchmarks.md).
# Results land in $OUT (kda_forward.json, logs).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/k3-gpu-out}
mkdir -p "$OUT"
export K3_BIN_DIR=${K3_BIN_DIR:-$PWD/build/bin}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"

if [ -d .anchors/flashkda ] && [ -z "$(find .anchors/flashkda -maxdepth 2 -name '*.so' | head -1)" ]; then
  (cd .anchors/flashkda && FLASH_KDA_CUDA_ARCHS=90a NVCC_THREADS=4 MAX_JOBS=16 \
     python3 setup.py build_ext --inplace >"$OUT/flashkda-build.log" 2>&1) &
  BUILD=$!
fi

status=0
python3 bench/gpu_kda_check.py check-bf16 2>&1 | tee "$OUT/check.log" || status=1
# The default model (and its tensor-core linear variant) vs the f64 oracle.
if [ -d out/gpu ]; then
  python3 bench/gpu_e2e.py check 2>&1 | tee "$OUT/e2e.log" || status=1
fi
CS=/usr/local/cuda/bin/compute-sanitizer
if [ -x "$CS" ] && [ "${K3_SKIP_SANITIZER:-0}" != 1 ]; then
  for tool in memcheck racecheck; do
    $CS --tool $tool --error-exitcode 9 "$K3_BIN_DIR/k3-run" out/kda_check/bf16_mma.k3bin --device cuda:0 \
      --inputs out/kda_check/in_bf16_${K3_SANITIZER_CASE:-17}.safetensors --quiet >"$OUT/sanitizer-$tool.log" 2>&1
    echo "compute-sanitizer $tool: rc=$? $(tail -1 "$OUT/sanitizer-$tool.log")"
  done
fi
if [ -n "${BUILD:-}" ]; then
  wait "$BUILD" || { echo "FlashKDA build failed:"; tail -20 "$OUT/flashkda-build.log"; }
  find .anchors/flashkda -maxdepth 2 -name '*.so' -exec cp {} "$OUT/" \; -print
fi
K3_BENCH_KEEP_INPUTS=1 python3 bench/kda_forward.py run 2>&1 | tee "$OUT/kda_forward.log" || status=1
cp out/bench/kda_forward.json "$OUT/" 2>/dev/null || true
# 5. Nsight Compute on our main kernels (B1 T8192 H96; K3_NCU_VARIANT picks
#    the bench variant, default the default lowering "mma").
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
if [ -x "$NCU" ] && [ -f out/bench/in_8192_96.safetensors ] && [ "${K3_SKIP_NCU:-0}" != 1 ]; then
  timeout 240 "$NCU" --kernel-name regex:kda --launch-count 3 --section SpeedOfLight --section Occupancy \
    --section LaunchStats --section WarpStateStats "$K3_BIN_DIR/k3-run" out/bench/kda_h96_${K3_NCU_VARIANT:-mma}.k3bin --device cuda:0 \
    --inputs out/bench/in_8192_96.safetensors --quiet >"$OUT/ncu.txt" 2>&1
  echo "ncu: rc=$?"; grep -E "kda_|Duration|Registers Per|Achieved Occupancy|Theoretical Occupancy|Memory Throughput|Compute \(SM\) Throughput|Warp Cycles Per Issued" "$OUT/ncu.txt" | head -40
fi
exit $status
