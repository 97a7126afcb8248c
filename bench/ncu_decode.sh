#!/usr/bin/env bash
# Nsight Compute on the decode step's kernels of a compiled model (GPU
# machine): which kernels of one decode step run below the memory
# bandwidth, with their own durations (no CUDA-event gaps between them, as
# `k3-run --profile` has). Prints one line per kernel launch: name, grid,
# duration (us), DRAM bytes read and the DRAM throughput as a share of peak.
#   bash bench/ncu_decode.sh out/e2e/kl48b-decode.k3bin [profile.txt]
# The decode kernels' names come from a `k3-run --profile` listing (its
# "profile: decode" section); without one, every kernel of the run is
# profiled.
set -euo pipefail
art=$1 listing=${2:-}
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
regex=.
if [ -n "$listing" ]; then
  names=$(sed -n '/^profile: decode/,$p' "$listing" | awk 'NR > 2 && $2 ~ /^[0-9]+$/ {print $1}' | paste -sd'|')
  [ -n "$names" ] && regex="^($names)$"
fi
"$NCU" --kernel-name "regex:$regex" --launch-count "${K3_NCU_LAUNCHES:-60}" --csv --page raw \
  --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size \
  "${K3_BIN_DIR:-build/bin}/k3-run" "$art" --device cuda:0 --random-weights 1 --prompt 1,2 \
  --max-new-tokens "${K3_NCU_STEPS:-3}" --quiet
