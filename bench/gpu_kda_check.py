"""The KDA kernels on the GPU against the float64 recurrence, over the
awkward shapes of the chunkwise issue: T not a multiple of the chunk, T
shorter than a chunk, packed variable-length batches with an empty-free mix
of lengths, non-zero initial state, gates at the -5 bound, the unbounded
softplus gate with large decays, an external log-decay, beta at both ends.
f32 inputs, bound 1e-4 normwise (issue 6).

    .venv/bin/python bench/gpu_kda_check.py prepare   # here: artifacts, inputs, f64 references
    python3 bench/gpu_kda_check.py check              # GPU machine (numpy only)

Kernels: target=cuda with kda=recurrent (the dedicated recurrent kernel)
and kda=chunkwise (the chunk ops on the generic GPU path).
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "out" / "kda_check"
BIN = Path(os.environ.get("K3_BIN_DIR", ROOT / "build" / "bin"))
LENS = {"T1": [1], "T15": [15], "T17": [17], "T65": [65], "T300": [300],
        "varlen": [1, 63, 64, 65, 300]}
CASES = [(gate, regime, lens) for lens in LENS
         for gate, regime in (("lb_gate", "bound"), ("lb_gate", "random"),
                              ("softplus_gate", "large"), ("ext_gate", "random"),
                              ("lb_gate", "beta_extreme"))]
VARIANTS = ("recurrent", "chunkwise")
TOL = 1e-4


def prepare():
    sys.path.insert(0, str(ROOT / "python"))
    sys.path.insert(0, str(ROOT / "test" / "e2e"))
    from k3ref import model
    from test_kda_chunkwise import make_inputs, reference
    OUT.mkdir(parents=True, exist_ok=True)
    for gate in ("lb_gate", "softplus_gate", "ext_gate"):
        for kda in VARIANTS:
            subprocess.run([str(BIN / "k3-opt"), str(ROOT / f"test/e2e/Inputs/kda_{gate}.mlir"),
                            f"--k3-compile=target=cuda kda={kda} output={OUT}/{gate}_{kda}.k3bin "
                            "max-tokens=512 max-seqs=8", "-o", os.devnull], check=True)
    for i, (gate, regime, lens) in enumerate(CASES):
        x = make_inputs(LENS[lens], gate, regime, seed=i)
        o, s = reference(x, gate)
        model.save_safetensors(OUT / f"in_{i}.safetensors", x)
        np.savez(OUT / f"ref_{i}.npz", o=o, s=s)
    (OUT / "cases.json").write_text(json.dumps(CASES))
    print(f"prepared {len(CASES)} cases in {OUT}")


def read(path, name):
    raw = Path(path).read_bytes()
    n = int.from_bytes(raw[:8], "little")
    info = json.loads(raw[8:8 + n])[name]
    a, b = info["data_offsets"]
    return np.frombuffer(raw[8 + n + a:8 + n + b], np.float32).reshape(info["shape"]).astype(np.float64)


def check():
    cases = json.loads((OUT / "cases.json").read_text())
    worst, failures = {}, 0
    for i, (gate, regime, lens) in enumerate(cases):
        ref = np.load(OUT / f"ref_{i}.npz")
        for kda in VARIANTS:
            dump = OUT / f"out_{i}_{kda}.safetensors"
            r = subprocess.run([str(BIN / "k3-run"), str(OUT / f"{gate}_{kda}.k3bin"), "--device", "cuda:0",
                                "--inputs", str(OUT / f"in_{i}.safetensors"), "--dump", str(dump), "--quiet"],
                               capture_output=True, text=True)
            if r.returncode != 0:
                print(f"{kda} {gate} {regime} {lens}: k3-run failed: {r.stderr.strip()}")
                failures += 1
                continue
            for name, key in (("o", "o"), ("final_state", "s")):
                got, want = read(dump, name), ref[key]
                err = float(np.linalg.norm(got - want) / np.linalg.norm(want))
                bad = not np.all(np.isfinite(got)) or err > TOL
                failures += bad
                worst[kda] = max(worst.get(kda, 0.0), err)
                if bad:
                    print(f"FAIL {kda} {gate} {regime} {lens} {name}: {err:.2e}")
            dump.unlink()
    for kda, e in worst.items():
        print(f"{kda}: worst normwise relative error over {len(cases)} cases x (o, state): {e:.2e}")
    print("ALL OK" if failures == 0 else f"{failures} FAILURES")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(prepare() if sys.argv[1:] == ["prepare"] else check())
