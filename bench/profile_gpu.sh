#!/usr/bin/env bash
# Issue 14's "First, a profile" on the GPU machine: k3-run --profile (CUDA
# events per launch; launch graphs off while profiling) on artifacts that
# bench/prepare_gpu.sh compiled into out/profile-gpu:
#   kl-e64 / kl-e16: the scaled-down Kimi-Linear of docs/profile.md
#     (bench/configs/kl-scaled-e*.json), prefill T = 64, 256, 1024 (e16: 256)
#     and 4 decode steps;
#   real4: the 4-layer cut of the real Kimi-Linear-48B config
#     (bench/configs/kimi-linear-48b-cut4.json: hidden 2304, 32 x 128 heads,
#     256 experts top-8 + 1 shared, vocab 163840), random weights, T = 64
#     and 2048 and 4 decode steps (K3_PROFILE_REAL=0 skips it), with f32
#     activations, and under the bf16 precision policy (real4-bf16) at the
#     T of K3_PROFILE_REAL_T (default 64 2048 8192);
#   K3_PROFILE_SCALED=0 skips the scaled models, K3_PROFILE_F32=0 the f32 cut.
# Raw outputs: bench/results/profile-gpu/<artifact>-T<T>.txt (commit them;
# docs/profile.md reads them). A failing run is recorded in its file and
# makes the exit status 1; the others still run.
set -euo pipefail
cd "$(dirname "$0")/.."
K3_BIN_DIR=${K3_BIN_DIR:-$PWD/build/bin}
W=out/profile-gpu
R=bench/results/profile-gpu
mkdir -p "$R"
[ -d "$W" ] || { echo "profile_gpu: $W missing (bench/prepare_gpu.sh)" >&2; exit 2; }
GPU=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)
COMMIT=${K3_COMMIT:-$(cat out/bench/COMMIT 2>/dev/null || echo unknown)}
status=0
one() { # one ARTIFACT T
  local a=$1 t=$2 f="$R/$1-T$2.txt"
  {
    echo "# $K3_BIN_DIR/k3-run $W/$a.k3bin --device cuda:0 --random-weights 1 --prompt-file $W/prompt-$t.txt --max-new-tokens 5 --profile"
    echo "# $(date -u +%FT%TZ), commit $COMMIT, GPU: $GPU"
  } > "$f"
  if timeout 900 "$K3_BIN_DIR/k3-run" "$W/$a.k3bin" --device cuda:0 --random-weights 1 \
      --prompt-file "$W/prompt-$t.txt" --max-new-tokens 5 --profile >>"$f" 2>&1; then
    echo "profile_gpu: $f"
  else
    echo "FAILED (rc $?)" >>"$f"
    echo "profile_gpu: $f FAILED"
    status=1
  fi
  grep -E "^(prefill|decode|profile):" "$f" || true
}
if [ "${K3_PROFILE_SCALED:-1}" != 0 ]; then
  for t in 64 256 1024; do one kl-e64 "$t"; done
  one kl-e16 256
fi
if [ "${K3_PROFILE_REAL:-1}" != 0 ] && [ -f "$W/real4.k3bin" ]; then
  if [ "${K3_PROFILE_F32:-1}" != 0 ]; then
    for t in 64 2048; do one real4 "$t"; done
  fi
  if [ -f "$W/real4-bf16.k3bin" ]; then
    for t in ${K3_PROFILE_REAL_T:-64 2048 8192}; do one real4-bf16 "$t"; done
  fi
fi
exit $status
