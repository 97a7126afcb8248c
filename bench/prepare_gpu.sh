#!/usr/bin/env bash
# Here (needs the build: k3-opt, k3-run, libk3runtime.so): everything
# bench/gpu_session.sh needs on the GPU machine, under ignored paths that
# the device tool carries (64 MiB in all; the size is printed at the end):
#   out/bench       KDA benchmark artifacts (bench/kda_forward.py prepare)
#   out/kda_check   bf16 KDA cases and f64 references (bench/gpu_kda_check.py)
#   out/gpu         the default model, its inputs and oracle (bench/gpu_e2e.py),
#                   and the runtime's GoogleTest binary (its CUDA test)
#   .anchors        anchors.tgz: fla's package, FlashKDA's sources with the
#                   CUTLASS headers it builds against (from git mirrors:
#                   K3_ANCHOR_MIRROR, default /work/.mirror, as the session's
#                   fetch tool leaves them: fla-org+flash-linear-attention,
#                   MoonshotAI+FlashKDA, NVIDIA+cutlass; assembled once in
#                   out/anchors-src)
#   out/profile-gpu CUDA artifacts and prompts for bench/profile_gpu.sh
#   build/bin/k3-run, build/runtime/libk3runtime.so (the Python bindings)
# and out/bench/COMMIT (carried with out/bench: the working tree reaches the
# GPU machine without .git) for the results' commit field.
# Optional old-vs-new comparison (issue 13): K3_BASELINE_K3OPT=/path/to/the
# baseline commit's k3-opt compiles the same artifacts into out/bench-baseline
# (carry it too; gpu_session.sh then times both on the same tensors).
# Then, with the device tool:
#   carry:   .anchors out/bench out/kda_check out/gpu out/profile-gpu build/bin/k3-run
#            build/runtime/libk3runtime.so [out/bench-baseline]   (8 paths at most)
#   command: bash bench/gpu_session.sh check    (then bench-a, bench-b, bench-c,
#            profile, ncu: one call each, every call under 10 minutes)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=/work/main/.venv/bin/python
for f in build/bin/k3-opt build/bin/k3-run build/runtime/libk3runtime.so build/runtime/tests/k3-runtime-tests; do
  [ -e "$f" ] || { echo "prepare_gpu: $f missing: build first (ninja -C build)" >&2; exit 1; }
done

# Anchors (sources only; FlashKDA is built on the GPU machine by gpu_session.sh),
# assembled in out/anchors-src and carried compressed as .anchors/anchors.tgz
# (about 4 MiB instead of 35); gpu_session.sh unpacks it to $ANCHORS_DIR.
M=${K3_ANCHOR_MIRROR:-/work/.mirror}
A=out/anchors-src
if [ ! -d "$A/fla" ] || [ ! -d "$A/flashkda/csrc" ]; then
  for r in fla-org+flash-linear-attention MoonshotAI+FlashKDA NVIDIA+cutlass; do
    [ -d "$M/$r/repo" ] || { echo "prepare_gpu: no mirror $M/$r/repo (fetch github:${r/+//} first)" >&2; exit 1; }
  done
  rm -rf "$A" && mkdir -p "$A/flashkda/cutlass"
  git -C "$M/fla-org+flash-linear-attention/repo" archive HEAD fla | tar -x -C "$A"
  git -C "$M/MoonshotAI+FlashKDA/repo" archive HEAD | tar -x -C "$A/flashkda"
  rm -rf "$A/flashkda/docs" "$A/flashkda/benchmarks"
  # The CUTLASS commit FlashKDA pins as its submodule; only the headers it uses.
  C=$(git -C "$M/MoonshotAI+FlashKDA/repo" ls-tree HEAD cutlass | awk '{print $3}')
  git -C "$M/NVIDIA+cutlass/repo" archive "$C" include tools/util/include examples/common 2>/dev/null |
    tar -x -C "$A/flashkda/cutlass"
  {
    echo "fla $(git -C "$M/fla-org+flash-linear-attention/repo" rev-parse HEAD)"
    echo "flashkda $(git -C "$M/MoonshotAI+FlashKDA/repo" rev-parse HEAD)"
    echo "cutlass $C"
  } >"$A/VERSIONS"
fi
rm -rf .anchors && mkdir -p .anchors
tar czf .anchors/anchors.tgz -C "$A" fla flashkda VERSIONS

rm -f out/bench/*.k3bin
"$PY" bench/kda_forward.py prepare
git rev-parse HEAD >out/bench/COMMIT
git diff --quiet HEAD -- . || echo "$(cat out/bench/COMMIT)+dirty" >out/bench/COMMIT
if [ -n "${K3_BASELINE_K3OPT:-}" ]; then
  rm -rf out/bench-baseline
  K3_BENCH_BASELINE=out/bench-baseline "$PY" bench/kda_forward.py prepare-baseline
fi
"$PY" - <<'PYEOF'
import sys
sys.path.insert(0, "bench")
sys.path.insert(0, "python")
import gpu_kda_check as c
from k3ref import model
c.OUT.mkdir(parents=True, exist_ok=True)
c.prepare_bf16(model)
PYEOF
"$PY" bench/gpu_e2e.py prepare
# The runtime's CUDA unit test (device PTX, CUDA-event profiling and timing).
cp build/runtime/tests/k3-runtime-tests out/gpu/
# Per-kernel profiles on the GPU (bench/profile_gpu.sh, issue 14): the scaled
# Kimi-Linear of docs/profile.md and the 4-layer cut at real width.
P=out/profile-gpu
rm -rf "$P" && mkdir -p "$P"
# real4-bf16: the same cut under the bf16 precision policy, where the
# tensor-core kernels (wgmma linears, grouped MoE GEMMs) apply, up to
# T = 8192 (issue 17's prefill shape).
for cfg in kl-e64:kl-scaled-e64:1024: kl-e16:kl-scaled-e16:1024: real4:kimi-linear-48b-cut4:2048: \
  real4-bf16:kimi-linear-48b-cut4:8192:activation-dtype=bf16; do
  IFS=: read -r name config tokens extra <<<"$cfg"
  build/bin/k3-import "bench/configs/$config.json" --max-context $((tokens > 2048 ? 2 * tokens : 4096)) -o "$P/$name.mlir"
  build/bin/k3-opt "$P/$name.mlir" \
    --k3-compile="target=cuda output=$P/$name.k3bin max-tokens=$tokens max-seqs=1 $extra" -o /dev/null
  rm "$P/$name.mlir"
done
for T in 64 256 1024 2048 8192; do
  "$PY" -c "import random; random.seed($T); print(','.join(str(random.randrange(3, 4096)) for _ in range($T)))" \
    >"$P/prompt-$T.txt"
done
CARRY=(.anchors out/bench out/kda_check out/gpu out/profile-gpu build/bin/k3-run build/runtime/libk3runtime.so)
[ -d out/bench-baseline ] && CARRY+=(out/bench-baseline)
du -sh "${CARRY[@]}"
# What travels: the carried paths plus the working tree's tracked and
# untracked-not-ignored files.
tree=$(git ls-files -z -co --exclude-standard | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
total=$(( $(du -scb "${CARRY[@]}" | tail -1 | cut -f1) + tree ))
echo "carry: ${CARRY[*]}"
echo "total $((total / 1048576)) MiB with the working tree (limit 64 MiB)"
[ "$total" -le $((64 * 1048576)) ] || { echo "prepare_gpu: over the 64 MiB carry limit" >&2; exit 1; }
