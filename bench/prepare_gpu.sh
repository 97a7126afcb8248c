#!/usr/bin/env bash
# Here (needs k3-opt): everything bench/gpu_session.sh runs on the GPU
# machine, compiled and written under out/ (ignored, carried by the run):
#   out/bench (KDA benchmark artifacts), out/kda_check (bf16 KDA cases and
#   f64 references), out/gpu (the default model, its inputs and oracle).
# Then, e.g. with the device tool:
#   carry: .anchors out/bench out/kda_check out/gpu build/bin/k3-run
#   run:   bash bench/gpu_session.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
rm -f out/bench/*.k3bin
"$PY" bench/kda_forward.py prepare
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
du -sh out/bench out/kda_check out/gpu build/bin/k3-run
