#!/usr/bin/env bash
# Nsight Compute on the prefill's GEMMs (GPU machine): our grouped MoE
# GEMMs, the q/k/v projection and the MLA prefill of compiled 4-layer
# Kimi-Linear-48B cuts at T = 8192 (one launch of each kernel per
# artifact), then cuBLAS and torch._grouped_mm at the same shapes
# (bench/ncu_gemms.py): where each is limited (tensor pipes, L2, DRAM,
# stalls). Prints ncu's sections for each launch.
#   bash bench/ncu_gemms.sh out/ncu/cut4.k3bin [more.k3bin ...]
# An artifact: bench/configs/kimi-linear-48b-cut4.json imported with
# --max-context 9216, compiled with target=cuda max-tokens=8192
# max-seqs=1 activation-dtype=bf16 (and any kernel-config).
set -uo pipefail
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
SECTIONS=(--section SpeedOfLight --section MemoryWorkloadAnalysis
  --section ComputeWorkloadAnalysis --section WarpStateStats
  --section Occupancy --section LaunchStats
  --section MemoryWorkloadAnalysis_Tables)
prompt=$(mktemp /tmp/k3-ncu-prompt.XXXXXX)
python3 -c "print(','.join(str(1 + i % 1000) for i in range(8192)))" >"$prompt"
for art in "$@"; do
  for kernel in ${K3_NCU_KERNELS:-moe_grouped_glu moe_grouped_down linear_2\$ mla_prefill_attention}; do
    echo "=== $art $kernel"
    "$NCU" --clock-control none "${SECTIONS[@]}" --kernel-name "regex:^$kernel" \
      --launch-count 1 "${K3_BIN_DIR:-build/bin}/k3-run" "$art" --device cuda:0 \
      --random-weights 1 --prompt-file "$prompt" --max-new-tokens 1 --quiet
  done
done
echo "=== anchors"
"$NCU" --clock-control none "${SECTIONS[@]}" \
  --kernel-name 'regex:nvjet|device_kernel|gemm' --launch-count 3 \
  python3 "$(dirname "$0")/ncu_gemms.py"
