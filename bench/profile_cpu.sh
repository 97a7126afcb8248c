#!/usr/bin/env bash
# Step 4 of the measurement layer (docs/profile.md): per-kernel profiles of a
# scaled-down Kimi-Linear (4 layers: 3 KDA + 1 MLA, hidden 256, 4 x 64 KDA
# heads, 64 or 16 experts top-8 + 1 shared, vocab 4096:
# bench/configs/kl-scaled-e{64,16}.json) on the CPU target,
# prefill at T = 64, 256, 1024 and 4 decode steps, raw outputs under
# bench/results/profile-cpu/. Needs build/bin/{k3-import,k3-opt,k3-run}.
set -euo pipefail
cd "$(dirname "$0")/.."
R=${K3_PROFILE_OUT:-bench/results/profile-cpu}
W=out/profile
mkdir -p "$W" "$R"
[ "${K3_PROFILE_MAIN:-1}" != 0 ] || K3_PROFILE_EXPERTS=" "
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

# Sweeps for things that should not grow (decode steps: a 16-token prompt,
# 8 decode steps): the compiled max-tokens (a kernel looping over it instead
# of num_tokens), the MLA cache's max-context (--max-context), and the number
# of experts at a fixed top-8 (only the router should grow).
if [ "${K3_PROFILE_SWEEPS:-1}" != 0 ]; then
  python3 -c "import random; random.seed(16); print(','.join(str(random.randrange(3, 4096)) for _ in range(16)))" > "$W/prompt-16.txt"
  sweep() { # sweep NAME CONFIG MAX_TOKENS MAX_CONTEXT
    build/bin/k3-import "bench/configs/$2.json" -o "$W/$1.mlir" --max-context "$4"
    build/bin/k3-opt "$W/$1.mlir" --k3-compile="target=cpu output=$W/$1.k3bin max-tokens=$3 max-seqs=1" -o /dev/null
    { echo "# build/bin/k3-run $W/$1.k3bin --random-weights 1 --prompt-file $W/prompt-16.txt --max-new-tokens 9 --profile"
      echo "# bench/configs/$2.json, k3-import --max-context $4, k3-compile max-tokens=$3 max-seqs=1"
      echo "# $(date -u +%FT%TZ), commit ${K3_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}, CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), 1 thread"
      build/bin/k3-run "$W/$1.k3bin" --random-weights 1 --prompt-file "$W/prompt-16.txt" \
        --max-new-tokens 9 --profile; } > "$R/sweep-$1.txt"
    echo "wrote $R/sweep-$1.txt"
  }
  sweep e64-tok256-ctx4096 kl-scaled-e64 256 4096
  sweep e64-tok4096-ctx4096 kl-scaled-e64 4096 4096
  sweep e64-tok256-ctx16384 kl-scaled-e64 256 16384
  sweep e16-tok256-ctx4096 kl-scaled-e16 256 4096
  python3 - "$W" <<'PYEOF'
import json, sys
c = json.load(open("bench/configs/kl-scaled-e64.json"))
c["num_experts"] = 256
json.dump(c, open(sys.argv[1] + "/kl-scaled-e256.json", "w"), indent=1)
PYEOF
  cp "$W/kl-scaled-e256.json" bench/configs/kl-scaled-e256.json
  sweep e256-tok256-ctx4096 kl-scaled-e256 256 4096
fi
