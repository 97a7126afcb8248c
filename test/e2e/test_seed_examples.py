"""The seed's §7.4 worked example through the compiler: C = 2 tokens,
k = 1, v = (5, 7), beta = (0.5, 0.4), no decay, S0 = 0. The recurrence gives
S1 = 2.5, S2 = 0.6 * 2.5 + 0.4 * 7 = 4.3; the triangular solve gives
u = (2.5, 1.8) and the same S2. Checked for the recurrent kernel and for the
chunkwise pipeline with both triangular solvers."""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))
from k3ref import model  # noqa: E402

BIN = os.environ.get("K3_BIN_DIR")
pytestmark = pytest.mark.skipif(not BIN, reason="K3_BIN_DIR (the build's bin/) not set")


@pytest.mark.parametrize("options", [
    "kda=recurrent",
    "kda=chunkwise kda-chunk-size=16 kda-solver=forward",
    "kda=chunkwise kda-chunk-size=16 kda-solver=block-inverse",
])
def test_seed_7_4(tmp_path, options):
    art = tmp_path / "scalar.k3bin"
    subprocess.run([f"{BIN}/k3-opt", str(ROOT / "test/e2e/Inputs/kda_scalar.mlir"),
                    f"--k3-compile=output={art} max-tokens=16 max-seqs=1 {options}",
                    "-o", os.devnull], check=True)
    one = np.ones((1, 2, 1, 1), np.float32)
    inputs = {"q": one, "k": one, "v": np.array([5, 7], np.float32).reshape(1, 2, 1, 1),
              "g": np.zeros((1, 2, 1, 1), np.float32),
              "beta": np.array([0.5, 0.4], np.float32).reshape(1, 2, 1),
              "cu_seqlens": np.array([0, 2], np.int32)}
    model.save_safetensors(tmp_path / "in.safetensors", inputs)
    subprocess.run([f"{BIN}/k3-run", str(art), "--inputs", str(tmp_path / "in.safetensors"),
                    "--dump", str(tmp_path / "out.safetensors"), "--quiet"], check=True)
    out = model.load_safetensors(tmp_path / "out.safetensors")
    assert np.allclose(out["o"].reshape(-1), [2.5, 4.3], atol=1e-6)
    assert abs(float(out["final_state"].reshape(-1)[0]) - 4.3) < 1e-6
