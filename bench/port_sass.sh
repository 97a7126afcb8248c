#!/usr/bin/env bash
# Compiles the dedicated CUDA kernels' reference inputs to PTX and cubins
# (no GPU needed), for comparing machine code before and after a change of
# the emitters with bench/compare_sass.py:
#   bench/port_sass.sh OUTDIR [K3_OPT]
# Inputs: the tensor-core KDA of test/Lowering/cuda-kda-mma.mlir (4 heads,
# mma split and recurrent), the benchmark's 96-head K = V = 128 bf16 KDA
# (bench/kda_forward.py's MODEL), a 32-head decode (its DECODE_MODEL, whose
# forward_decode entry uses the recurrent kernel), K = V = 192, and the
# 3xTF32 linear kernel (test/Lowering/cuda-linear-mma.mlir).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: bench/port_sass.sh OUTDIR [K3_OPT]}
K3OPT=${2:-build/bin/k3-opt}
PY=${PYTHON:-/work/main/.venv/bin/python}
CUDA=${CUDA_HOME:-/usr/local/cuda}
# cuobjdump and nvdisasm: see bench/compare_sass.py.
CUOBJDUMP=$(command -v cuobjdump || echo "$CUDA/bin/cuobjdump")
mkdir -p "$OUT/models"
M="$OUT/models"
"$PY" - "$M" <<'PYEOF'
import sys
sys.path.insert(0, "bench")
import kda_forward as f
out = sys.argv[1]
open(f"{out}/h96.mlir", "w").write(f.MODEL.format(H=96, HD=96 * 128))
open(f"{out}/dec32.mlir", "w").write(f.DECODE_MODEL.format(H=32))
PYEOF
cp test/Lowering/cuda-kda-mma.mlir "$M/tiny4.mlir"
sed -e 's/128/192/g' -e 's/512xf32/768xf32/g' test/Lowering/cuda-kda-mma.mlir \
  > "$M/k192.mlir"
cp test/Lowering/cuda-linear-mma.mlir "$M/linear.mlir"

compile() { # name model options max-tokens max-seqs
  "$K3OPT" "$M/$2" --k3-compile="target=cuda $3 output=$OUT/$1.k3bin \
max-tokens=$4 max-seqs=$5 ptx-output=$OUT/$1.ptx" -o /dev/null
  "$CUDA/bin/ptxas" -v -arch=sm_90a "$OUT/$1.ptx" -o "$OUT/$1.cubin" \
    > "$OUT/$1.ptxas.txt" 2>&1
  "$CUOBJDUMP" -sass "$OUT/$1.cubin" > "$OUT/$1.sass"
}
compile tiny4_mma tiny4.mlir kda=auto 8192 64
compile tiny4_rec tiny4.mlir kda=recurrent 8192 64
compile h96_mma h96.mlir kda=auto 8192 64
compile dec32_rec dec32.mlir kda=recurrent 8192 64
compile k192_mma k192.mlir kda=auto 8192 64
compile k192_rec k192.mlir kda=recurrent 8192 64
compile linear linear.mlir cuda-linear=mma-3xtf32 8192 64
echo "wrote $OUT"
