#!/usr/bin/env bash
# Step 4 of the measurement layer (docs/profile.md): per-kernel profiles of a
# scaled-down Kimi-Linear (4 layers: 3 KDA + 1 MLA, hidden 256, 4 x 64 KDA
# heads, 64 or 16 experts top-8 + 1 shared, vocab 4096:
# bench/configs/kl-scaled-e{64,16}.json) on the CPU target,
# prefill at T = 64, 256, 1024 and 4 decode steps, raw outputs under
# bench/results/profile-cpu/. Needs build/bin/{k3-import,k3-opt,k3-run}.
set -euo pipefail
cd "$(dirname "$0")/.."
R=bench/results/profile-cpu
W=out/profile
mkdir -p "$W" "$R"
for E in ${K3_PROFILE_EXPERTS:-64 16}; do
  build/bin/k3-import "bench/configs/kl-scaled-e$E.json" -o "$W/kl-e$E.mlir"
  build/bin/k3-opt "$W/kl-e$E.mlir" \
    --k3-compile="target=cpu output=$W/kl-e$E.k3bin max-tokens=1024 max-seqs=1" -o /dev/null
done
for E in ${K3_PROFILE_EXPERTS:-64 16}; do
  for T in ${K3_PROFILE_T:-64 256 1024}; do
    [ "$E" = 16 ] && [ "$T" != 256 ] && continue
    python3 -c "import random; random.seed($T); print(','.join(str(random.randrange(3, 4096)) for _ in range($T)))" > "$W/prompt-$T.txt"
    { echo "# build/bin/k3-run $W/kl-e$E.k3bin --random-weights 1 --prompt-file $W/prompt-$T.txt --max-new-tokens 5 --profile"
      echo "# $(date -u +%FT%TZ), commit ${K3_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}, CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), 1 thread"
      build/bin/k3-run "$W/kl-e$E.k3bin" --random-weights 1 --prompt-file "$W/prompt-$T.txt" \
        --max-new-tokens 5 --profile; } > "$R/kl-e$E-T$T.txt"
    echo "wrote $R/kl-e$E-T$T.txt"
  done
done
